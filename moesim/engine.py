"""Evaluate configurations: workload -> op costs -> schedule -> metrics -> memory.

`evaluate` is the vectorized core shared by `estimate` (one config, per-op detail) and `sweep`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moesim import workload as W
from moesim.errors import ConfigError
from moesim.grid import Grid
from moesim.memory import max_batch, memory
from moesim.metrics import metrics
from moesim.perf.cost import BOUND_CODES, CostModel
from moesim.schedule.primitives import seq
from moesim.schedule.schemes import SCHEMES, StageSums, ideal_period, layer_period
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.types import CommMode, CostMode, Overlap, Phase, Stream

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


def _bottleneck(costs_with_counts):
    """Time-weighted dominant bound over all ops (serial view): compute/memory/network/latency."""
    n_cfg = max(np.size(c.time_s) for c, _ in costs_with_counts)
    acc = np.zeros(4 * n_cfg)
    col = np.arange(n_cfg)
    for c, n in costs_with_counts:  # loop over ops (~100), each a vector over all configurations
        t = np.broadcast_to(np.asarray(c.time_s * n, float), (n_cfg,))
        b = np.broadcast_to(c.bound, (n_cfg,))
        acc += np.bincount(b * n_cfg + col, weights=t, minlength=4 * n_cfg)
    return np.argmax(acc.reshape(4, n_cfg), axis=0)


def evaluate(model: ModelSpec, hw: HardwareSpec, grid: Grid, *, phase=Phase.DECODE, overlap=None,
             cost_mode=CostMode.ROOFLINE, comm=None, profile=None, imbalance=None) -> Evaluation:
    """Vectorized evaluation of every configuration in `grid` (no loop over configurations).

    imbalance: optional dict of arrays {"experts": max/mean routed load, "attention": max/mean
    KV work} applied to the slowest rank's expert, all-to-all and attention-core times.
    """
    phase = Phase(phase)
    comm = CommMode(comm) if comm else default_comm(phase)
    overlap = Overlap(overlap).value if overlap else Overlap.AUTO.value
    cm = CostModel(hw, model, cost_mode, profile)
    wanted = schemes_for(phase) if overlap == Overlap.AUTO.value else [overlap]
    if overlap != Overlap.AUTO.value and overlap not in (Overlap.IDEAL.value,) and overlap not in schemes_for(phase):
        raise ConfigError(f"overlap: {overlap!r} does not apply to {phase.value}; allowed: "
                          f"{', '.join(schemes_for(phase) + ['ideal', 'auto'])}")
    cache = {}

    def priced(ub):
        if ub not in cache:
            wl = W.build(model, hw, grid, phase, comm, micro_batches=ub)
            groups = {}
            for name in ("moe_layer", "dense_layer", "step", "mtp"):
                costs = cm.costs(getattr(wl, name))
                if imbalance:
                    costs = _apply_imbalance(costs, imbalance)
                groups[name] = costs
            n_block = len(groups["mtp"]) - 2
            sums = {name: StageSums(groups[name]) for name in ("moe_layer", "dense_layer")}
            extra = {"step": seq(*[c.time_s for c in groups["step"]]),
                     "mtp": seq(groups["mtp"][0].time_s, groups["mtp"][-1].time_s) if n_block >= 0 else 0.0}
            counted = [(c, wl.n_moe_layers * ub) for c in groups["moe_layer"]] + \
                      [(c, wl.n_dense_layers * ub) for c in groups["dense_layer"]] + \
                      [(c, ub) for c in groups["step"]] + [(c, wl.mtp_count * ub) for c in groups["mtp"]]
            cache[ub] = (wl, groups, sums, extra, counted)
        return cache[ub]

    results = {}
    for scheme in wanted:
        ub = 1 if scheme in ("serial", "shared", "sbo", "ideal") else SCHEMES[scheme].micro_batches
        wl, g, sums, extra, counted = priced(ub)
        if scheme == Overlap.IDEAL.value:
            # the step's roofline: compute, HBM and network each busy all the time; a lower bound
            # of every schedule (seed 002 takes the same max per layer; step-level ops such as the
            # LM head join the sums instead of adding serially)
            step, _ = ideal_period([c for c, _n in counted], counts=[n for _c, n in counted])
            moe_t = ideal_period(g["moe_layer"])[0] if g["moe_layer"] else 0.0
            dense_t = ideal_period(g["dense_layer"])[0] if g["dense_layer"] else 0.0
        else:
            sch = SCHEMES[scheme]
            moe_t = layer_period(sums["moe_layer"], sch) if g["moe_layer"] else 0.0
            dense_t = layer_period(sums["dense_layer"], sch) if g["dense_layer"] else 0.0
            # the MTP module is one more transformer block (same schedule) plus eh_proj and its
            # LM head, which run serially; step-level ops (embedding, LM head) once per micro-batch
            mtp_t = 0.0
            if g["mtp"]:
                block = moe_t if model.is_moe else dense_t
                mtp_t = (block + extra["mtp"] * ub) * wl.mtp_count
            step = seq(wl.n_moe_layers * moe_t, wl.n_dense_layers * dense_t, extra["step"] * ub, mtp_t)
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
    chosen_ub = np.array([1 if s in ("serial", "shared", "sbo", "ideal") else SCHEMES[s].micro_batches
                          for s in names])[best]
    is_ideal = np.array([s == "ideal" for s in names])[best]
    bott = np.zeros(grid.size, dtype=int)
    for ub in np.unique(chosen_ub):
        counted = priced(int(ub))[4]
        sel = (chosen_ub == ub) & ~is_ideal
        if sel.any():
            bott = np.where(sel, _bottleneck(counted), bott)
        if (is_ideal & (chosen_ub == ub)).any():
            _, (comp, mem_t, net) = ideal_period([c for c, _n in counted], counts=[n for _c, n in counted])
            ib = np.argmax(np.stack(np.broadcast_arrays(comp, mem_t, net)), axis=0)
            bott = np.where(is_ideal, ib, bott)
    chosen = names[int(best[0])]
    counted = priced(int(chosen_ub[0]))[4]
    flops = seq(*[c.flops * n for c, n in counted])
    peak = hw.peak_flops(model.precision.weight_dtype)
    vals = metrics(grid, phase, step, flops, peak, hw.gpus_per_node)
    mem = memory(model, hw, grid, phase, comm)
    vals.update({
        "moe_layer_time_s": moe_t, "dense_layer_time_s": dense_t,
        "overlap": np.array(names, dtype=object)[best], "bottleneck": np.array(BOTTLENECKS, dtype=object)[bott],
        "weights_bytes": mem.weights_bytes, "kv_cache_bytes": mem.kv_cache_bytes,
        "activation_bytes": mem.activation_bytes, "comm_buffer_bytes": mem.comm_buffer_bytes,
        "total_bytes": mem.total_bytes, "capacity_bytes": np.full(grid.size, mem.capacity_bytes),
        "fits": mem.fits, "max_batch": max_batch(mem),
    })
    for s in names:
        vals[f"step_time_s[{s}]"] = np.broadcast_to(results[s][0], (grid.size,))
    ev = Evaluation(grid, vals, counted, cm.notes)
    ev.memory = mem
    ev.comm = comm
    ev.chosen = chosen
    return ev


def _apply_imbalance(costs, imb):
    import dataclasses
    out = []
    for c in costs:
        f = 1.0
        if c.name.endswith(("experts_gate_up", "experts_down", "experts_act", "dispatch", "combine")):
            f = imb.get("experts", 1.0)
        elif c.name.endswith("attn_core"):
            f = imb.get("attention", 1.0)
        if np.any(np.asarray(f) != 1.0):
            c = dataclasses.replace(c, time_s=c.time_s * f, compute_s=c.compute_s * f, memory_s=c.memory_s * f,
                                    network_s=c.network_s * f)
        out.append(c)
    return out


__all__ = ["evaluate", "Evaluation"]
