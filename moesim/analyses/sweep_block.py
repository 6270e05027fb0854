"""One block of a sweep: one categorical combination (model, hardware, phase, overlap, comm)
over the whole numeric grid, valid rows only, evaluated in memory-bounding chunks by the engine
(`evaluate_grid`, or `evaluate_mixed` for the mixed phase) -> the block's columns."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from moesim.engine.evaluate import default_comm
from moesim.engine.pricing import evaluate_grid
from moesim.engine.serving import evaluate_mixed
from moesim.enums import Phase
from moesim.errors import MoesimError
from moesim.grid.validity import check_grid
from moesim.schedule.schemes import SCHEMES, micro_batches
from moesim.specs.study import NUMERIC_AXES

INT_COLUMNS = ("tp", "dp", "ep", "moe_tp", "gpus", "mtp", "redundant")


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs besides its axes and pricing: the mixed phase's workload, the row filters
    (metric thresholds in SI units; None: not applied) and the run's controls."""

    isl: object = None  # mixed: prompt tokens per request
    osl: object = None  # mixed: output tokens per request
    chunk_tokens: object = None  # mixed: prefill tokens per pass (None: the engine's default)
    request_rate: object = None  # mixed: requests/s per deployment (None: closed loop at batch)
    filters: dict | None = None
    min_tokens_per_s_per_user: object = None
    max_tpot_s: object = None
    max_ttft_s: object = None
    only_fits: object = None
    keep_invalid: bool = True
    require_valid: bool = False  # no valid configuration -> ConfigError (the CLI's choice)
    fill_defaults: bool = True  # axes not given take the default space (`default_axes_for`)
    chunk_size: int = 32768  # rows per engine call (memory bound)
    progress: object = None  # callable(done_rows, total_rows) or None


OPTION_FIELDS = tuple(f.name for f in fields(SweepOptions))


def evaluate_block(block, g, derived_reason, plan):
    """One categorical combination `block` = (model, hardware, phase, overlap, comm) over the whole
    numeric grid, valid rows only, in chunks. plan: the sweep's plan (`SweepPlan`: its pricing,
    options and progress state); the block's comm (if not None) replaces the pricing's."""
    m, h, phase, overlap, comm = block
    n = g.size
    check_phase = Phase.DECODE if phase == Phase.MIXED else phase
    ok, reason = check_grid(m, h, g, check_phase)
    if derived_reason is not None:
        bad = derived_reason != ""
        reason = np.where(bad, derived_reason, reason).astype(object)
        ok = ok & ~bad
    pricing = plan.pricing if comm is None else plan.pricing.replace(comm=comm)
    cols = _label_columns(m, h, g, (phase, overlap, pricing.comm), pricing, plan.options)
    idx = np.flatnonzero(ok)
    try:
        out, notes = _evaluate_rows(m, h, g, idx, (phase, overlap, pricing), plan)
    except MoesimError as e:  # a combination the engine rejects as a whole (e.g. overlap vs phase)
        ok = np.zeros(n, bool)
        reason = np.full(n, str(e), dtype=object)
        out, notes = {}, []
    ok, reason = _unrunnable(g, out, ok, reason, "token" if phase == Phase.PREFILL else "request")
    _tick(plan.state, n - idx.size)
    return _assemble(cols, out, n, ok, reason), notes


def _unrunnable(g, out, ok, reason, unit: str):
    """A micro-batched scheme (two-batch, five-stage) at a batch below its micro-batch count cannot run;
    the engine prices it as inf (moesim.engine.evaluate). Such rows are invalid with the reason, not
    rows of `inf`/null times."""
    step, chosen = out.get("step_time_s"), out.get("overlap")
    if step is None or chosen is None:
        return ok, reason
    for name in SCHEMES:
        ub = micro_batches(name)
        if ub < 2:
            continue
        bad = ok & (chosen == name) & ~np.isfinite(step) & (g.batch < ub)
        if bad.any():
            why = f"overlap {name}: needs batch >= {ub} (one {unit} per micro-batch)"
            reason = np.where(bad, why, reason).astype(object)
            ok = ok & ~bad
            for v in out.values():  # its inf times are "not applicable": missing (NaN) as in other invalid rows
                if v.dtype.kind == "f":
                    v[bad & ~np.isfinite(v)] = np.nan
    return ok, reason


def _label_columns(m, h, g, labels, pricing, opts: SweepOptions) -> dict:
    """The label columns of a block: names, requested and default settings, the numeric axes."""
    (phase, overlap, comm), n = labels, g.size
    comm = comm.value if comm is not None else None
    check_phase = Phase.DECODE if phase == Phase.MIXED else phase
    cols = {
        "model": text_column(m.name, n),
        "hardware": text_column(h.name, n),
        "phase": text_column(phase.value, n),
        "comm": text_column(comm or default_comm(check_phase).value, n),
        "cost_mode": text_column(pricing.cost_mode.value, n),
        "engine": text_column(pricing.engine.value, n),
        "comm_requested": text_column(comm or "default", n),
        "overlap_requested": text_column(overlap or "default", n),
    }
    for a in NUMERIC_AXES:
        cols[a] = getattr(g, a)
    cols["gpus"] = g.tp * g.dp
    if phase == Phase.MIXED:
        cols["isl"], cols["osl"] = np.full(n, float(opts.isl)), np.full(n, float(opts.osl))
    return cols


def text_column(value: str, n: int):
    """`n` copies of a text value as the column pandas would make of ``np.full(n, value, object)``
    (its text dtype), built in C: pandas infers an object array's type cell by cell (~0.4 us each,
    ~10% of a large sweep). Without pyarrow-backed text in pandas: the object array itself."""
    import pandas as pd  # lazy: start-up time

    dtype = pd.Series([value]).dtype
    if isinstance(dtype, np.dtype):  # object
        return np.full(n, value, dtype=object)
    import pyarrow as pa  # lazy: pandas' text dtype is stored in pyarrow

    return pd.array(pa.array([value], pa.large_string()).take(np.zeros(n, np.int32)), dtype=dtype)


def _evaluate_rows(m, h, g, idx, how, plan):
    """Evaluate rows `idx` of the grid in chunks -> ({metric: full-length array}, notes);
    how: (phase, overlap, the block's Pricing)."""
    (phase, overlap, pricing), opts, n = how, plan.options, g.size
    out, notes = {}, []
    for s in range(0, idx.size, opts.chunk_size):
        sel = idx[s : s + opts.chunk_size]
        if phase == Phase.MIXED:
            vals, nts = evaluate_mixed(m, h, g.take(sel), isl=opts.isl, osl=opts.osl, overlap=overlap,
                                       chunk_tokens=opts.chunk_tokens, request_rate=opts.request_rate,
                                       pricing=pricing)  # fmt: skip
        else:
            ev, nts = evaluate_grid(m, h, g.take(sel), phase=phase, overlap=overlap, pricing=pricing)
            vals = ev.values
        notes += [x for x in nts if x not in notes]
        for k, v in vals.items():
            v = np.asarray(v)
            if k not in out:
                out[k] = _empty_column(v.dtype, n)
            out[k][sel] = v
        _tick(plan.state, sel.size)
    return out, notes


def _empty_column(dtype, n):
    """A column for rows not evaluated: False, None or NaN by the dtype of the evaluated values."""
    if dtype.kind == "b":
        return np.zeros(n, bool)
    if dtype.kind in "OUS":
        return np.full(n, None, dtype=object)
    return np.full(n, np.nan)


HEADLINE = (  # the sweep's first metric columns; NaN where a row is not evaluated
    "step_time_s",
    "tpot_s",
    "ttft_s",
    "tokens_per_s_per_user",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_node",
    "mfu",
)
NAN_METRICS = HEADLINE + ("accepted_tokens_per_step", "moe_layer_time_s", "dense_layer_time_s")
NAN_MEMORY = (
    "max_batch",
    "total_bytes",
    "weights_bytes",
    "kv_cache_bytes",
    "activation_bytes",
    "comm_buffer_bytes",
    "capacity_bytes",
)
FIRST_COLUMNS = HEADLINE + ("bottleneck", "overlap", "fits", "max_batch")


def _assemble(cols, out, n, ok, reason) -> dict:
    """Labels, then the headline metrics, then the rest, valid / reason; integer axes as int64."""
    for k in NAN_METRICS:
        out.setdefault(k, np.full(n, np.nan))
    out.setdefault("bottleneck", np.full(n, None, dtype=object))
    out.setdefault("overlap", np.full(n, None, dtype=object))
    out.setdefault("fits", np.zeros(n, bool))
    for k in NAN_MEMORY:
        out.setdefault(k, np.full(n, np.nan))
    for k in FIRST_COLUMNS:
        cols[k] = out.pop(k)
    cols.update(out)
    cols["valid"] = ok
    cols["reason"] = reason
    for a in INT_COLUMNS:
        v = cols[a]
        if np.all(np.isfinite(v)) and np.all(v == np.round(v)):
            cols[a] = v.astype(np.int64)
    return cols


def _tick(state, k):
    state["done"] += int(k)
    if state["cb"] is not None and k:
        state["cb"](state["done"], state["total"])
