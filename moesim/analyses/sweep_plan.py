"""A sweep's plan: its arguments checked and resolved before any evaluation (`plan_sweep` ->
`SweepPlan`: the categorical blocks, the numeric grid of each phase, the one `Pricing`, the options
and the row filters), the tool's limits on one sweep, the row filters (`apply_filters`), the units
of the frame and the error when no configuration is valid. Shared by the in-memory sweep
(`moesim.analyses.sweep`) and the streamed one (`moesim.analyses.sweep_stream`,
`moesim.analyses.sweep_digest`)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from moesim.analyses.sweep_block import OPTION_FIELDS, SweepOptions
from moesim.analyses.sweep_grid import grid_axes, grid_size
from moesim.balance.factors import check_imbalance_flags
from moesim.engine.pricing import resolve_specs
from moesim.engine.serving import check_inputs
from moesim.engine.settings import FIELDS, Pricing, split_pricing
from moesim.enums import CommMode, Overlap, Phase
from moesim.errors import ConfigError
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


def apply_filters(df, flt, keep_invalid=True):
    """The rows that pass the metric filters `flt` (a NaN metric never violates one), only_fits and
    keep_invalid -> the frame (itself when every row passes, else a re-indexed copy)."""
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
