"""Evaluate configurations: workload -> op costs -> schedule -> metrics -> memory.

`evaluate` is the vectorized core shared by `estimate` (one config, per-op detail) and `sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moesim import workload as W
from moesim.enums import CommMode, CostMode, Overlap, Phase
from moesim.errors import ConfigError
from moesim.grid.core import Grid, distinct_rows
from moesim.metrics.memory import max_batch, memory
from moesim.metrics.step import metrics
from moesim.perf.cost import CostModel
from moesim.schedule.primitives import par, seq
from moesim.schedule.schemes import SCHEMES, StageSums, ideal_period, layer_period
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.attention import core_op

BOTTLENECKS = ("compute", "memory", "network", "latency")


def default_comm(phase: Phase) -> CommMode:
    """DeepSeek: prefill uses DeepEP normal (high throughput), decode low-latency kernels."""
    return CommMode.DEEPEP_NORMAL if Phase(phase) == Phase.PREFILL else CommMode.DEEPEP_LL


def default_overlap(phase: Phase) -> Overlap:
    """The schedule a deployment would run (DeepSeek: two-batch prefill, five-stage decode)."""
    return Overlap.TWO_BATCH if Phase(phase) == Phase.PREFILL else Overlap.FIVE_STAGE


def schemes_for(phase: Phase) -> list[str]:
    if Phase(phase) == Phase.PREFILL:
        return ["serial", "shared", "sbo", "two-batch"]
    return ["serial", "shared", "sbo", "two-batch", "five-stage"]


@dataclass
class Evaluation:
    """Arrays over the grid, plus per-op costs of the chosen scheme's workload."""

    grid: Grid
    values: dict
    op_costs: list = field(default_factory=list)  # (layer kind, OpCost, count per step)
    notes: list = field(default_factory=list)


CORE = ("attn_core", "mtp_attn_core")  # the only ops whose cost depends on the context length


class Summary:
    """A priced workload (one micro-batch count) reduced to what schedules and metrics need:
    stage sums per layer group, step extras, time by bound, FLOPs and resource totals per step."""

    def __init__(self, wl, groups, ub, skip=()):
        self.ub = ub
        self.n_moe, self.n_dense, self.mtp_count = wl.n_moe_layers, wl.n_dense_layers, wl.mtp_count
        self.has = {name: bool(groups[name]) for name in groups}
        keep = {name: [c for c in groups[name] if c.name not in skip] for name in groups}
        self.sums = {name: StageSums(keep[name]) for name in ("moe_layer", "dense_layer")}
        mtp = groups["mtp"]
        self.extra = {
            "step": seq(*[c.time_s for c in keep["step"]]),
            "mtp": seq(mtp[0].time_s, mtp[-1].time_s) if mtp else 0.0,
        }
        counted = (
            [(c, self.n_moe * ub) for c in keep["moe_layer"]]
            + [(c, self.n_dense * ub) for c in keep["dense_layer"]]
            + [(c, ub) for c in keep["step"]]
            + [(c, self.mtp_count * ub) for c in keep["mtp"]]
        )
        self.counted = counted
        self.acc = _bound_times(counted)
        self.flops = seq(*[c.flops * n for c, n in counted])
        self.ideal = ideal_period([c for c, _n in counted], counts=[n for _c, n in counted])[1]
        self.layer_ideal = {name: ideal_period(keep[name])[1] for name in ("moe_layer", "dense_layer")}

    def core_count(self):
        """How many times per step the attention core runs (per micro-batch count)."""
        n = (self.n_moe if self.has["moe_layer"] else 0) + (self.n_dense if self.has["dense_layer"] else 0)
        return (n + (self.mtp_count if self.has["mtp"] else 0.0)) * self.ub

    def expand(self, inv, core):
        """Rows `inv` of this (deduplicated) summary plus the attention core priced on every row."""
        take = lambda x: np.asarray(x)[..., inv] if np.ndim(x) else x  # noqa: E731
        out = object.__new__(Summary)
        out.ub, out.n_moe, out.n_dense, out.has = self.ub, self.n_moe, self.n_dense, self.has
        out.mtp_count = take(self.mtp_count)
        out.sums = {}
        for name, ss in self.sums.items():
            e = object.__new__(StageSums)
            e.stage = {k: take(v) for k, v in ss.stage.items()}
            e.named = {k: take(v) for k, v in ss.named.items()}
            e.comm = {k: take(v) for k, v in ss.comm.items()}
            e.sm_share = ss.sm_share
            if self.has[name]:
                e.stage[core.stage] = seq(e.stage.get(core.stage, 0.0), core.time_s)
            out.sums[name] = e
        out.extra = {k: take(v) for k, v in self.extra.items()}
        n = out.core_count()
        out.counted = None
        out.acc = take(self.acc) + np.stack([np.where(core.bound == j, core.time_s * n, 0.0) for j in range(4)])
        out.flops = take(self.flops) + core.flops * n
        comp, mem, net = (take(x) for x in self.ideal)
        out.ideal = (comp + core.compute_s * n, mem + core.memory_s * n, net)
        out.layer_ideal = {}
        for name, (c, m, k) in self.layer_ideal.items():
            add = 1.0 if self.has[name] else 0.0
            out.layer_ideal[name] = (take(c) + core.compute_s * add, take(m) + core.memory_s * add, take(k))
        return out


def _bound_times(counted):
    """(4, N) time per step spent in ops bound by compute / memory / network / latency."""
    n_cfg = max([np.size(c.time_s) for c, _ in counted] + [1])
    acc = np.zeros(4 * n_cfg)
    col = np.arange(n_cfg)
    for c, n in counted:  # loop over ops (~100), each a vector over all configurations
        t = np.broadcast_to(np.asarray(c.time_s * n, float), (n_cfg,))
        b = np.broadcast_to(c.bound, (n_cfg,))
        acc += np.bincount(b * n_cfg + col, weights=t, minlength=4 * n_cfg)
    return acc.reshape(4, n_cfg)


def _context_free_rows(grid: Grid):
    """(first, inverse) over every axis but context and acceptance, or None when not worth it."""
    return distinct_rows(grid, ("tp", "dp", "ep", "moe_tp", "batch", "mtp", "redundant"), max_share=0.5, min_size=512)


def evaluate(
    model: ModelSpec,
    hw: HardwareSpec,
    grid: Grid,
    *,
    phase=Phase.DECODE,
    overlap=None,
    cost_mode=CostMode.ROOFLINE,
    comm=None,
    profile=None,
    imbalance=None,
    cuda_graphs=True,
) -> Evaluation:
    """Vectorized evaluation of every configuration in `grid` (no loop over configurations).

    imbalance: optional dict of arrays {"experts": max/mean routed load, "attention": max/mean
    KV work} applied to the slowest rank's expert, all-to-all and attention-core times;
    "experts@2" (if given) is the routed-load factor of one of two micro-batches.
    Ops other than the attention core do not depend on the context length: on large grids they
    are priced once per distinct context-free row and expanded (exact), the core on every row.
    """
    phase = Phase(phase)
    comm = CommMode(comm) if comm else default_comm(phase)
    overlap = Overlap(overlap).value if overlap else Overlap.AUTO.value
    cm = CostModel(hw, model, cost_mode, profile, cuda_graphs=cuda_graphs)
    sync = hw.layer_sync_s if CostMode(cost_mode) != CostMode.ROOFLINE else 0.0
    wanted = schemes_for(phase) if overlap == Overlap.AUTO.value else [overlap]
    if overlap != Overlap.AUTO.value and overlap not in (Overlap.IDEAL.value,) and overlap not in schemes_for(phase):
        raise ConfigError(
            f"overlap: {overlap!r} does not apply to {phase.value}; allowed: "
            f"{', '.join(schemes_for(phase) + ['ideal', 'auto'])}"
        )
    imb_all = imbalance or {}
    rows = _context_free_rows(grid)
    cache = {}

    def priced(ub):
        if ub in cache:
            return cache[ub]
        imbalance = _imbalance_for(imb_all, ub)
        if rows is None:
            wl = W.build(model, hw, grid, phase, comm, micro_batches=ub)
            groups = {
                name: _apply_imbalance(cm.costs(getattr(wl, name)), imbalance)
                for name in ("moe_layer", "dense_layer", "step", "mtp")
            }
            summ = Summary(wl, groups, ub)
        else:
            first, inv = rows
            sub = grid.take(first)
            sub_imb = {k: np.broadcast_to(v, (grid.size,))[first] for k, v in imbalance.items() if k != "attention"}
            wl = W.build(model, hw, sub, phase, comm, micro_batches=ub)
            groups = {
                name: _apply_imbalance(cm.costs(getattr(wl, name)), sub_imb)
                for name in ("moe_layer", "dense_layer", "step", "mtp")
            }
            t, b_req = W.tokens(grid, phase, ub)
            core = cm.cost(
                core_op(
                    model,
                    t=t,
                    b_req=b_req,
                    q_len=np.where(phase == Phase.PREFILL, 1.0, grid.q_len),
                    context=grid.context,
                    tp=grid.tp,
                    prefill=phase == Phase.PREFILL,
                )
            )
            core = _apply_imbalance([core], {k: v for k, v in imbalance.items() if k == "attention"})[0]
            summ = Summary(wl, groups, ub, skip=CORE).expand(inv, core)
        cache[ub] = summ
        return summ

    results = {}
    for scheme in wanted:
        ub = 1 if scheme in ("serial", "shared", "sbo", "ideal") else SCHEMES[scheme].micro_batches
        sm = priced(ub)
        if scheme == Overlap.IDEAL.value:
            # the step's roofline: compute, HBM and network each busy all the time; a lower bound
            # of every schedule (seed 002 takes the same max per layer; step-level ops such as the
            # LM head join the sums instead of adding serially)
            step = par(*sm.ideal)
            moe_t = par(*sm.layer_ideal["moe_layer"]) if sm.has["moe_layer"] else 0.0
            dense_t = par(*sm.layer_ideal["dense_layer"]) if sm.has["dense_layer"] else 0.0
        else:
            sch = SCHEMES[scheme]
            # + per-layer synchronisation outside the kernels (hardware spec, 0 unless measured)
            moe_t = layer_period(sm.sums["moe_layer"], sch) + sync if sm.has["moe_layer"] else 0.0
            dense_t = layer_period(sm.sums["dense_layer"], sch) + sync if sm.has["dense_layer"] else 0.0
            # the MTP module is one more transformer block (same schedule) plus eh_proj and its
            # LM head, which run serially; step-level ops (embedding, LM head) once per micro-batch
            mtp_t = 0.0
            if sm.has["mtp"]:
                block = moe_t if model.is_moe else dense_t
                mtp_t = (block + sm.extra["mtp"] * ub) * sm.mtp_count
            step = seq(sm.n_moe * moe_t, sm.n_dense * dense_t, sm.extra["step"] * ub, mtp_t)
        if ub > 1:  # a micro-batch needs at least one request (decode) or token (prefill)
            step = np.where(grid.batch >= ub, step, np.inf)
        results[scheme] = (step, moe_t, dense_t)
    names = list(results)
    idx = np.arange(grid.size)
    stack = np.stack([np.broadcast_to(results[s][0], (grid.size,)) for s in names])
    best = np.argmin(stack, axis=0) if len(names) > 1 else np.zeros(grid.size, dtype=int)
    step = stack[best, idx]
    moe_t = np.stack([np.broadcast_to(results[s][1], (grid.size,)) for s in names])[best, idx]
    dense_t = np.stack([np.broadcast_to(results[s][2], (grid.size,)) for s in names])[best, idx]

    # bottleneck per configuration, from the op costs of the scheme it runs
    chosen_ub = np.array([1 if s in ("serial", "shared", "sbo", "ideal") else SCHEMES[s].micro_batches for s in names])[
        best
    ]
    is_ideal = np.array([s == "ideal" for s in names])[best]
    bott = np.zeros(grid.size, dtype=int)
    for ub in np.unique(chosen_ub):
        sm = priced(int(ub))
        here = chosen_ub == ub
        bott = np.where(here & ~is_ideal, np.argmax(np.broadcast_to(sm.acc, (4, grid.size)), axis=0), bott)
        if (is_ideal & here).any():
            ib = np.argmax(np.stack(np.broadcast_arrays(*sm.ideal)), axis=0)
            bott = np.where(is_ideal & here, ib, bott)
    chosen = names[int(best[0])]
    sm = priced(int(chosen_ub[0]))
    flops = sm.flops
    peak = hw.peak_flops(model.precision.weight_dtype)
    vals = metrics(grid, phase, step, flops, peak, hw.gpus_per_node)
    mem = memory(model, hw, grid, phase, comm)
    vals.update(
        {
            "flops_per_step": np.broadcast_to(flops, (grid.size,)),
            "moe_layer_time_s": moe_t,
            "dense_layer_time_s": dense_t,
            "overlap": np.array(names, dtype=object)[best],
            "bottleneck": np.array(BOTTLENECKS, dtype=object)[bott],
            "weights_bytes": mem.weights_bytes,
            "kv_cache_bytes": mem.kv_cache_bytes,
            "activation_bytes": mem.activation_bytes,
            "comm_buffer_bytes": mem.comm_buffer_bytes,
            "total_bytes": mem.total_bytes,
            "capacity_bytes": np.full(grid.size, mem.capacity_bytes),
            "fits": mem.fits,
            "max_batch": max_batch(mem),
        }
    )
    for s in names:
        vals[f"step_time_s[{s}]"] = np.broadcast_to(results[s][0], (grid.size,))
    ev = Evaluation(grid, vals, sm.counted or [], cm.notes)
    ev.memory = mem
    ev.comm = comm
    ev.chosen = chosen
    return ev


def _imbalance_for(imb, ub):
    """The factors for a micro-batch count: "experts@<ub>" (the slowest rank of one micro-batch)
    replaces "experts" when given."""
    out = {k: v for k, v in imb.items() if "@" not in k}
    if f"experts@{ub}" in imb:
        out["experts"] = imb[f"experts@{ub}"]
    return out


def _apply_imbalance(costs, imb):
    import dataclasses

    if not imb:
        return costs
    out = []
    for c in costs:
        f = 1.0
        if c.name.endswith(("experts_gate_up", "experts_down", "experts_act", "dispatch", "combine")):
            f = imb.get("experts", 1.0)
        elif c.name.endswith("attn_core"):
            f = imb.get("attention", 1.0)
        if np.any(np.asarray(f) != 1.0):
            c = dataclasses.replace(
                c, time_s=c.time_s * f, compute_s=c.compute_s * f, memory_s=c.memory_s * f, network_s=c.network_s * f
            )
        out.append(c)
    return out


__all__ = ["evaluate", "Evaluation"]
