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

from pathlib import Path

from moesim.analyses import budget as B
from moesim.analyses.sweep_block import SweepOptions, evaluate_block
from moesim.analyses.sweep_digest import DigestOptions, SweepDigest, digest_frame, stream_plan
from moesim.analyses.sweep_grid import (  # noqa: F401  (re-exported: the sweep's grid helpers)
    PHASE_DEFAULTS,
    SCALAR_DEFAULTS,
    build_grid,
    derived_grid,
    grid_axes,
    grid_piece,
    grid_size,
)
from moesim.analyses.sweep_plan import (  # noqa: F401  (re-exported: the sweep's plan, limits and units)
    BASE_BYTES,
    FRAME_BYTES_PER_ROW,
    MAX_CONFIGS,
    MAX_FRAME_CONFIGS,
    RATE_PER_S,
    STREAM_PIECE_ROWS,
    UNITS,
    SweepPlan,
    apply_filters,
    default_axes_for,
    defaults_not_given,
    none_valid,
    plan_sweep,
    sweep_options,
)
from moesim.engine.settings import Pricing
from moesim.errors import ConfigError
from moesim.fsio.frames import FRAME_SUFFIXES, checked_suffix
from moesim.grid.core import Grid
from moesim.specs.study import DEFAULT_AXES, load_study, normalize_axes, parse_values  # noqa: F401  (re-exported)

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
          out=None, **options):  # fmt: skip
    """Evaluate every configuration of the axes' cartesian product -> pandas.DataFrame (one row each),
    or, with `out`, the rows written to a file and a `SweepDigest` returned.

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
    total_gpus / gpus_per_node (`DigestOptions`): a GPU budget — axis values that alone exceed it
    are pruned, and the rows are those whose whole instances fit, with replicas and
    total_tokens_per_s (`moesim.analyses.budget.apply_budget`; node: the hardware's NVLink domain).
    Notes (e.g. calibration fallbacks) are in ``df.attrs["notes"]``. The frame holds at most
    `MAX_FRAME_CONFIGS` rows.

    out: a .csv / .parquet / .json path; the file holds what ``moesim sweep --out PATH`` writes for
    the same arguments (byte for byte): .csv / .parquet streamed a piece at a time in grid order
    (memory: one piece, up to `MAX_CONFIGS` rows; an error leaves the old file), .json in memory,
    ranked. Returns a `SweepDigest` (the `top` best rows, counts, notes, the budget, the Pareto
    `frontier` when asked: `DigestOptions`' top and frontier, which need `out`).
    """
    summary = [k for k in ("top", "frontier") if k in options]
    opts = DigestOptions.pop(options)
    plan = plan_budgeted(opts, model=model, hardware=hardware, phase=phase, axes=axes, set=set, study=study,
                         pricing=pricing, **options)  # fmt: skip
    if out is not None:
        return digest_plan(plan, opts, out)
    if summary:
        raise ConfigError(f"sweep: {', '.join(summary)} needs out= (a .csv / .parquet / .json path): the digest "
                          "summarises a sweep written to a file; without out the whole frame is returned")  # fmt: skip
    check_frame_size(plan)
    return budget_frame(evaluate_plan(plan), plan, opts)


def plan_budgeted(opts: DigestOptions, **keywords) -> SweepPlan:
    """`plan_sweep(**keywords)` under `opts`' GPU budget: the axis values that alone exceed it (tp,
    ep, dp > total_gpus) pruned from the given axes first (`moesim.analyses.budget.prune_axes`)."""
    if opts.total_gpus is not None:
        total, _ = B.check_budget(opts.total_gpus, opts.gpus_per_node)
        keywords["axes"] = B.prune_axes(normalize_axes(keywords.get("axes")), total)
    return plan_sweep(**keywords)


def budget_frame(df, plan: SweepPlan, opts: DigestOptions):
    """An evaluated frame within `opts`' GPU budget (`moesim.analyses.budget.apply_budget`), or as is."""
    budget = opts.budget(plan)
    return B.apply_budget(df, *budget) if budget else df


def digest_plan(plan: SweepPlan, opts: DigestOptions, out=None) -> SweepDigest:
    """`plan` digested (`SweepDigest`), its rows written to `out` when given: .csv / .parquet (or no
    file) streamed a piece at a time (`stream_plan`), .json evaluated in memory (`digest_frame`)."""
    if out is not None and checked_suffix(Path(out), FRAME_SUFFIXES) == ".json":
        check_frame_size(plan)
        return digest_frame(evaluate_plan(plan), plan, opts, out)
    return stream_plan(plan, opts, out)


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


def _finish(df, flt, keep_invalid, require_valid, notes, model):
    """Counts before filtering, the filters, and the frame's attrs (evaluated, notes, units)."""
    if require_valid and len(df) and not df["valid"].any():
        raise none_valid(model, len(df), df.iloc[0])
    evaluated = {
        "configurations": int(len(df)),
        "valid": int(df["valid"].sum()) if len(df) else 0,
        "fit": int((df["valid"] & df["fits"]).sum()) if len(df) else 0,
    }
    df = apply_filters(df, flt, keep_invalid)
    df.attrs["evaluated"] = evaluated
    df.attrs["notes"] = notes
    df.attrs["filters"] = {k: v for k, v in flt.items() if v is not None and v is not False}
    df.attrs["units"] = dict(UNITS)
    return df


__all__ = [
    "sweep",
    "DigestOptions",
    "SweepDigest",
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
