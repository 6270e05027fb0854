"""Sweep: the cartesian product of deployment axes -> one tidy DataFrame row per configuration.

Numeric axes (tp, dp, ep, moe_tp, batch, context, mtp, acceptance, redundant) become one
`Grid.product`; the only Python loops are over the categorical axes (hardware, phase, overlap,
comm: a handful of values) and over memory-bounding chunks, each evaluated in array passes by
`moesim.engine.pricing.evaluate_grid` (the same path as `estimate`, so a sweep row equals an estimate).
The study / axis grammar (axis values, study YAML, filters) is `moesim.specs.study`.

Invalid combinations are kept with ``valid=False`` and the reason from `check_grid`; only valid
rows are evaluated. Units: SI (seconds, bytes, tokens/s); ``batch`` is requests per DP group for
decode/mixed and tokens per DP group for prefill.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from moesim.analyses.sweep_block import OPTION_FIELDS, SweepOptions, evaluate_block
from moesim.analyses.sweep_grid import (  # noqa: F401  (re-exported: the sweep's grid helpers)
    PHASE_DEFAULTS,
    SCALAR_DEFAULTS,
    build_grid,
    derived_grid,
    grid_axes,
    grid_piece,
    grid_size,
)
from moesim.balance.factors import check_imbalance_flags
from moesim.engine.pricing import resolve_specs
from moesim.engine.serving import check_inputs
from moesim.engine.settings import FIELDS, Pricing, split_pricing
from moesim.enums import CommMode, Overlap, Phase
from moesim.errors import ConfigError
from moesim.grid.core import Grid
from moesim.grid.validity import check_redundant, default_redundant, fix_hint
from moesim.specs.study import (
    DEFAULT_AXES,
    DEFAULT_PREFILL_BATCH,
    check_isl_osl,
    load_study,
    normalize_axes,
    parse_values,
    resolve_filters,
)

# The tool's own limits on one sweep's configurations (checked before any work). Streamed sweeps
# (`moesim sweep` / `pareto` printing or writing .csv / .parquet) hold one piece at a time, so
# only time bounds them: 200 M decode configurations is ~35 min at >= 100k/s on one core. An
# in-memory frame (`sweep()`, --json, .json, pareto --plot) holds ~FRAME_BYTES_PER_ROW per row
# (measured: 1.36 KB at 344k decode rows, the frame plus the ranking copy; the writer adds its
# table), so 5 M rows is ~7.5 GB.
MAX_CONFIGS = 200_000_000
FRAME_BYTES_PER_ROW = 1500
MAX_FRAME_CONFIGS = 5_000_000
STREAM_PIECE_ROWS = 65536  # grid rows per streamed piece (moesim.analyses.sweep_stream)
# The projection printed before a long run (`projection`), measured on one core: configurations/s
# per phase (decode: bench/csv_speed.py whole process, 344k in ~3 s; prefill ~200k/s and mixed
# ~5k/s warm, in process) and the fixed memory (interpreter, numpy / pandas / scipy / pyarrow,
# profiles: ~150 MB; a streamed 10 M sweep peaked at 365 MB).
RATE_PER_S = {"decode": 100_000, "prefill": 100_000, "mixed": 5_000}
BASE_BYTES = 250e6

_MALLOC_TUNED = False


def tune_malloc() -> bool:
    """Keep freed heap memory in the process (glibc mallopt: mmap threshold 32 MiB, trim
    threshold 1 GiB, top pad 256 MiB). A sweep allocates thousands of chunk-sized temporaries;
    with glibc defaults each one is mmap'd / trimmed and page-faulted afresh, which doubles or
    triples the wall time (measured: ~half of it in the kernel). Process-wide, so the CLI calls
    it and library users opt in. Returns True when applied (glibc only)."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return True
    try:
        # lazy: glibc's malloc tuning, only on Linux and only when a sweep runs
        import ctypes

        # lazy: glibc's malloc tuning, only on Linux and only when a sweep runs
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(-3, 32 << 20) and libc.mallopt(-1, 1 << 30) and libc.mallopt(-2, 256 << 20)
    except (OSError, AttributeError):
        return False
    _MALLOC_TUNED = bool(ok)
    return _MALLOC_TUNED


# ---------------------------------------------------------------------------------------- sweep
def sweep(model=None, hardware=None, phase=None, axes=None, *, set=None, study=None, pricing: Pricing | None = None,
          **options):  # fmt: skip
    """Evaluate every configuration of the axes' cartesian product -> pandas.DataFrame (one row each).

    model: catalog name / path / ModelSpec (default "deepseek-v3"); hardware: name, path, spec or a
    list of them (default "h800"); phase: "decode" | "prefill" | "mixed" or a list (default decode);
    axes: {axis: list | scalar | "a:b" | "a:b:s"} over tp, dp, ep, moe_tp, batch, context, mtp,
    acceptance, redundant (numeric) and hardware, phase, overlap, comm (categorical); no numeric
    axis -> the DeepSeek-V3 space `DEFAULT_AXES` (prefill-only: batch `DEFAULT_PREFILL_BATCH`). ep (or dp) missing is derived: ep = tp x dp / moe_tp.
    pricing: a `Pricing` (cost_mode "calibrated" (default) | "roofline" | "measured"; engine "sglang"
    (default) | "trtllm" | "vllm", whose calibration profile prices the kernels (the `engine` column)
    and, for mixed, the scheduler; ...); its fields may also be given as keywords, which win.
    options: `SweepOptions`' fields as keywords — mixed needs isl and osl (tokens); chunk_tokens:
    prefill tokens per forward pass (default: the engine's); request_rate: requests/s per deployment
    (open loop; default: closed loop, batch = concurrent requests per DP group). filters / keywords:
    min_tokens_per_s_per_user, max_tpot_s, max_ttft_s (seconds), only_fits — a metric filter drops
    rows where the metric is defined and violates it; only_fits keeps valid rows that fit; otherwise
    invalid rows stay (valid=False, with the reason) unless keep_invalid=False. progress:
    callable(done_rows, total_rows) or None. require_valid: raise ConfigError (with the first reason)
    when no configuration is valid (the CLI's choice). An unknown keyword is a ConfigError.
    study: a YAML path (see `load_study`); explicit arguments override it.
    Notes (e.g. calibration fallbacks) are in ``df.attrs["notes"]``. The frame holds at most
    `MAX_FRAME_CONFIGS` rows; larger grids (up to `MAX_CONFIGS`) go piece by piece: `plan_sweep`
    (same arguments) + `moesim.analyses.sweep_stream.iter_pieces`.
    """
    plan = plan_sweep(model, hardware, phase, axes, set=set, study=study, pricing=pricing, **options)
    check_frame_size(plan)
    return evaluate_plan(plan)


def check_frame_size(plan) -> None:
    """An in-memory frame holds at most `MAX_FRAME_CONFIGS` rows (checked before any work)."""
    if plan.total > MAX_FRAME_CONFIGS:
        raise ConfigError(
            f"axes: {plan.total:,} configurations; at most {MAX_FRAME_CONFIGS:,} in one in-memory sweep "
            f"(~{FRAME_BYTES_PER_ROW:,} bytes each: --json, .json, pareto); write them to .csv / .parquet "
            f"(streamed, up to {MAX_CONFIGS:,}) or split the study"
        )


def projection(plan, streamed: bool) -> tuple[float, float]:
    """(seconds, peak bytes) a plan is projected to take on one core: `RATE_PER_S` per phase, and
    `BASE_BYTES` plus one piece (streamed) or the whole frame (in memory)."""
    n = {}
    for _, _, ph, _, _ in plan.blocks:
        n[ph.value] = n.get(ph.value, 0) + grid_size(plan.grids[ph][0])
    seconds = sum(k / RATE_PER_S[ph] for ph, k in n.items())
    rows = min(plan.total, STREAM_PIECE_ROWS) if streamed else plan.total
    return seconds, BASE_BYTES + rows * FRAME_BYTES_PER_ROW


@dataclass
class SweepPlan:
    """A checked sweep, nothing evaluated: the categorical blocks in evaluation order, the numeric
    grid of each phase (`grid_axes` form, built lazily), the one `Pricing`, the options (mixed
    workload, run controls), the resolved row filters and the progress state."""

    blocks: list  # [(model spec, hardware spec, phase, overlap, comm)]
    grids: dict  # phase -> (axis values, derived axis)
    pricing: Pricing
    options: SweepOptions
    flt: dict
    total: int
    state: dict  # progress: done, total, cb
    defaulted: list = dataclasses.field(default_factory=list)  # axes not given (the default space)

    @property
    def keep_invalid(self) -> bool:
        return self.options.keep_invalid

    @property
    def require_valid(self) -> bool:
        return bool(self.options.require_valid)


def sweep_options(where: str, pricing, keywords: dict) -> tuple[Pricing | None, dict, SweepOptions]:
    """A front door's keywords -> (`pricing` with the pricing keywords given (not None) applied, or
    None when neither is given; those keywords; `SweepOptions`); an unknown keyword names `where`."""
    given, rest = split_pricing(keywords)
    unknown = sorted(set(rest) - set(OPTION_FIELDS))
    if unknown:
        names = ", ".join(sorted(OPTION_FIELDS + FIELDS))
        raise ConfigError(f"{where}: unknown keyword(s) {', '.join(unknown)}; allowed {names}")
    given = {k: v for k, v in given.items() if v is not None}
    return pricing, given, SweepOptions(**rest)


def plan_sweep(model=None, hardware=None, phase=None, axes=None, *, set=None, study=None, pricing=None, **options):
    """`sweep`'s arguments -> a `SweepPlan`: every user error (names, ranges, the configuration
    count against `MAX_CONFIGS`) is raised here, before any evaluation. The pricing: the study's
    settings, replaced by `pricing` (if given), replaced by the pricing keywords given."""
    pricing, explicit, opts = sweep_options("sweep", pricing, options)
    base = load_study(study) if study is not None else {}
    given = dict(model=model, hardware=hardware, phase=phase, isl=opts.isl, osl=opts.osl, set=set, axes=axes)
    st = _merge_study(base, given, opts.fill_defaults)
    pricing = Pricing.of(pricing if pricing is not None else Pricing.of(**split_pricing(base)[0]), **explicit)
    names = ("min_tokens_per_s_per_user", "max_tpot_s", "max_ttft_s", "only_fits")
    flt = resolve_filters(base.get("filters", {}), opts.filters, {k: getattr(opts, k) for k in names})
    if int(opts.chunk_size) < 1:
        raise ConfigError("chunk_size: must be >= 1")
    opts = dataclasses.replace(opts, chunk_size=int(opts.chunk_size), isl=st["isl"], osl=st["osl"])
    ax = st["axes"]
    hw_list, phases, overlaps, comms = _categoricals(ax, st["hardware"], st["phase"])
    if Phase.MIXED in phases:
        check_isl_osl(st["isl"], st["osl"])
        check_inputs(st["isl"], st["osl"], opts.chunk_tokens, opts.request_rate)
    specs = [resolve_specs(st["model"], h, st["set"]) for h in hw_list]  # user errors (unknown names) raise here
    if "redundant" in st["defaulted"]:  # the default space's redundant slots, within this model's bound
        ax["redundant"] = default_redundant(specs[0][0], ax["redundant"])
    grids = {ph: grid_axes(ax, ph, st["isl"], st["osl"]) for ph in dict.fromkeys(phases)}
    total = sum(grid_size(grids[ph][0]) for ph in phases) * len(hw_list) * len(overlaps) * len(comms)
    if total > MAX_CONFIGS:
        raise ConfigError(f"axes: {total:,} configurations; at most {MAX_CONFIGS:,} per sweep (split the study)")
    for m_, _ in specs[:1]:
        check_imbalance_flags(m_, pricing.expert_skew, pricing.context_dist)
        check_redundant(m_, [v for ph in grids for v in grids[ph][0]["redundant"]])
    blocks = [(m, h, ph, ov, cm) for (m, h), ph, ov, cm in itertools.product(specs, phases, overlaps, comms)]
    state = {"done": 0, "total": total, "cb": opts.progress}
    return SweepPlan(blocks, grids, pricing, opts, flt, total, state, list(st["defaulted"]))


def evaluate_plan(plan: SweepPlan):
    """Every block of the plan, each over its whole grid -> the filtered frame (see `sweep`)."""
    import pandas as pd  # lazy: start-up time (the CLI imports this module for --help)

    frames, notes, built = [], [], {}
    for m, h, ph, ov, cm in plan.blocks:
        if ph not in built:
            built[ph] = derived_grid(Grid.product(**plan.grids[ph][0]), plan.grids[ph][1])
        g, derived_reason = built[ph]
        cols, nts = evaluate_block((m, h, ph, ov, cm), g, derived_reason, plan)
        notes += [n for n in nts if n not in notes]
        frames.append(pd.DataFrame(cols))
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    df = _finish(df, plan.flt, plan.keep_invalid, plan.require_valid, notes, plan.blocks[0][0])
    df.attrs["defaulted_axes"] = list(plan.defaulted)  # axes not given, taken from the default space
    return df


def _merge_study(base: dict, given: dict, fill: bool) -> dict:
    """The study's settings, the `given` arguments (not None) winning; the numeric axes default to
    `DEFAULT_AXES` when none is given (``defaulted``)."""

    def pick(key, default=None):
        return given[key] if given.get(key) is not None else base.get(key, default)

    st = {"model": pick("model", "deepseek-v3"), "hardware": pick("hardware", "h800"), "phase": pick("phase", "decode"),
          "isl": pick("isl"), "osl": pick("osl"), "set": pick("set")}  # fmt: skip
    ax = dict(base.get("axes", {}))
    ax.update(normalize_axes(given.get("axes")))
    st["defaulted"] = default_axes_for(ax, st["phase"]) if fill else {}
    st["axes"] = {**st["defaulted"], **ax}
    return st


def defaults_not_given(defaults: dict, given: dict, model=None) -> dict:
    """The default axes the user did not give (ep left out when dp is given: it is derived); with
    `model`, the default redundant slots are kept within its bound (`default_redundant`)."""
    given = normalize_axes(given or {})
    out = {k: v for k, v in normalize_axes(defaults).items() if k not in given}
    if "dp" in given:
        out.pop("ep", None)
    if model is not None and "redundant" in out:
        out["redundant"] = default_redundant(model, out["redundant"])
    return out


def default_axes_for(given: dict, phase) -> dict:
    """The rule for axes not given: each numeric axis you give replaces its default; every other one
    keeps the default DeepSeek-V3 deployment space (`DEFAULT_AXES`), so passing one axis never
    collapses the rest; the workload axes (context, acceptance) take one value unless given
    (`PHASE_DEFAULTS`, `SCALAR_DEFAULTS`). Exceptions: ep when dp is given (derived: tp x dp = ep x
    moe_tp), batch in a prefill-only sweep (`DEFAULT_PREFILL_BATCH`, tokens per DP group), mtp in
    prefill (no drafts)."""
    phases = [Phase.parse(p, "phase") for p in (given.get("phase") or parse_values("phase", phase))]
    out = defaults_not_given(DEFAULT_AXES, given)
    if all(p == Phase.PREFILL for p in phases):
        out.pop("mtp", None)
        if "batch" in out:
            out["batch"] = list(DEFAULT_PREFILL_BATCH)
    return out


def _categoricals(ax: dict, hardware, phase):
    """Pop the categorical axes -> (hardware list, phases, overlaps, comms); None = the default."""
    hw_list = ax.pop("hardware", None) or (
        list(hardware)
        if isinstance(hardware, (list, tuple))
        else parse_values("hardware", hardware)
        if isinstance(hardware, str)
        else [hardware]
    )
    phases = [Phase.parse(p, "phase") for p in (ax.pop("phase", None) or parse_values("phase", phase))]
    overlaps = [
        None if o in (None, "default") else Overlap.parse(o, "overlap").value
        for o in (ax.pop("overlap", None) or [None])
    ]
    comms = [
        None if c in (None, "default") else CommMode.parse(c, "comm").value for c in (ax.pop("comm", None) or [None])
    ]
    return hw_list, phases, overlaps, comms


def none_valid(model, n: int, first) -> ConfigError:
    """require_valid's error: no configuration is valid; the first row's reason and a fix hint."""
    reason = str(first["reason"])
    hint = fix_hint(model, reason, float(first["ep"]), float(first["redundant"]))
    return ConfigError(f"sweep: none of the {n:,} configurations is valid; the first: {reason}{hint}")


UNITS = {
    "batch": "requests per DP group (decode, mixed) / tokens per DP group (prefill)",
    "context": "tokens",
    "time": "s",
    "memory": "bytes",
    "throughput": "tokens/s",
}


def _finish(df, flt, keep_invalid, require_valid, notes, model):
    """Counts before filtering, the filters, and the frame's attrs (evaluated, notes, units)."""
    if require_valid and len(df) and not df["valid"].any():
        raise none_valid(model, len(df), df.iloc[0])
    evaluated = {
        "configurations": int(len(df)),
        "valid": int(df["valid"].sum()) if len(df) else 0,
        "fit": int((df["valid"] & df["fits"]).sum()) if len(df) else 0,
    }
    df = _apply_filters(df, flt, keep_invalid)
    df.attrs["evaluated"] = evaluated
    df.attrs["notes"] = notes
    df.attrs["filters"] = {k: v for k, v in flt.items() if v is not None and v is not False}
    df.attrs["units"] = dict(UNITS)
    return df


def _apply_filters(df, flt, keep_invalid=True):
    keep = np.ones(len(df), bool)
    v = df["tokens_per_s_per_user"].to_numpy(float)
    if flt.get("min_tokens_per_s_per_user") is not None:
        keep &= ~(v < float(flt["min_tokens_per_s_per_user"]))  # NaN (undefined) never violates
    if flt.get("max_tpot_s") is not None:
        keep &= ~(df["tpot_s"].to_numpy(float) > float(flt["max_tpot_s"]))
    if flt.get("max_ttft_s") is not None:
        keep &= ~(df["ttft_s"].to_numpy(float) > float(flt["max_ttft_s"]))
    valid = df["valid"].to_numpy(bool)
    if flt.get("only_fits"):
        keep &= valid & df["fits"].to_numpy(bool)
    if not keep_invalid:
        keep &= valid
    if keep.all():
        return df
    return df.loc[keep].reset_index(drop=True)


__all__ = [
    "sweep",
    "plan_sweep",
    "SweepOptions",
    "SweepPlan",
    "defaults_not_given",
    "default_axes_for",
    "load_study",
    "parse_values",
    "normalize_axes",
    "build_grid",
    "tune_malloc",
    "DEFAULT_AXES",
]
