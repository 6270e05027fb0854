"""One block of a sweep: one categorical combination (model, hardware, phase, overlap, comm)
over the whole numeric grid, valid rows only, evaluated in memory-bounding chunks by the engine
(`evaluate_grid`, or `evaluate_mixed` for the mixed phase) -> the block's columns."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class Run:
    """What every block of one sweep shares."""

    cost_mode: str
    engine: str
    expert_skew: object
    context_dist: object
    isl: object
    osl: object
    chunk_size: int
    profile: object
    state: dict  # progress: done, total, cb
    chunk_tokens: object = None  # mixed: prefill tokens per pass (None: the engine's default)
    request_rate: object = None  # mixed: requests/s per deployment (None: closed loop at batch)


def evaluate_block(m, h, g, derived_reason, phase, overlap, comm, run: Run):
    """One categorical combination over the whole numeric grid, valid rows only, in chunks."""
    n = g.size
    check_phase = Phase.DECODE if phase == Phase.MIXED else phase
    ok, reason = check_grid(m, h, g, check_phase)
    if derived_reason is not None:
        bad = derived_reason != ""
        reason = np.where(bad, derived_reason, reason).astype(object)
        ok = ok & ~bad
    cols = _label_columns(m, h, g, phase, overlap, comm, run)
    idx = np.flatnonzero(ok)
    try:
        out, notes = _evaluate_rows(m, h, g, idx, phase, overlap, comm, run)
    except MoesimError as e:  # a combination the engine rejects as a whole (e.g. overlap vs phase)
        ok = np.zeros(n, bool)
        reason = np.full(n, str(e), dtype=object)
        out, notes = {}, []
    ok, reason = _unrunnable(g, out, ok, reason, "token" if phase == Phase.PREFILL else "request")
    _tick(run.state, n - idx.size)
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


def _label_columns(m, h, g, phase, overlap, comm, run: Run) -> dict:
    """The label columns of a block: names, requested and default settings, the numeric axes."""
    n = g.size
    check_phase = Phase.DECODE if phase == Phase.MIXED else phase
    cols = {
        "model": text_column(m.name, n),
        "hardware": text_column(h.name, n),
        "phase": text_column(phase.value, n),
        "comm": text_column(comm or default_comm(check_phase).value, n),
        "cost_mode": text_column(run.cost_mode, n),
        "engine": text_column(run.engine, n),
        "comm_requested": text_column(comm or "default", n),
        "overlap_requested": text_column(overlap or "default", n),
    }
    for a in NUMERIC_AXES:
        cols[a] = getattr(g, a)
    cols["gpus"] = g.tp * g.dp
    if phase == Phase.MIXED:
        cols["isl"], cols["osl"] = np.full(n, float(run.isl)), np.full(n, float(run.osl))
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


def _evaluate_rows(m, h, g, idx, phase, overlap, comm, run: Run):
    """Evaluate rows `idx` of the grid in chunks -> ({metric: full-length array}, notes)."""
    n = g.size
    out, notes = {}, []
    for s in range(0, idx.size, run.chunk_size):
        sel = idx[s : s + run.chunk_size]
        kw = dict(
            overlap=overlap,
            cost_mode=run.cost_mode,
            comm=comm,
            expert_skew=run.expert_skew,
            context_dist=run.context_dist,
            profile_path=run.profile,
            engine=run.engine,
        )
        if phase == Phase.MIXED:
            vals, nts = evaluate_mixed(m, h, g.take(sel), isl=run.isl, osl=run.osl, chunk_tokens=run.chunk_tokens,
                                       request_rate=run.request_rate, **kw)  # fmt: skip
        else:
            ev, nts = evaluate_grid(m, h, g.take(sel), phase=phase, **kw)
            vals = ev.values
        notes += [x for x in nts if x not in notes]
        for k, v in vals.items():
            v = np.asarray(v)
            if k not in out:
                out[k] = _empty_column(v.dtype, n)
            out[k][sel] = v
        _tick(run.state, sel.size)
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
