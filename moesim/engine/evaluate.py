"""Evaluate configurations: workload -> op costs -> schedule -> metrics -> memory.

`evaluate` is the vectorized core shared by `estimate` (one config, per-op detail) and `sweep`:
price the workload once per micro-batch count (`_Pricer`), run every wanted schedule on the
priced stage sums (`_scheme_times`), pick the fastest per configuration (`_choose`) and name the
bottleneck of the schedule each configuration runs (`_bottleneck`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from moesim import workload as W
from moesim.balance.factors import apply_factors, factors_for
from moesim.engine.settings import Pricing
from moesim.engine.summary import Summary
from moesim.enums import BoundCode, CommMode, CostMode, Overlap, Phase, Tag
from moesim.errors import ConfigError
from moesim.grid.core import Grid, distinct_rows
from moesim.metrics.memory import max_batch, memory
from moesim.metrics.step import metrics
from moesim.perf.cost import CostModel
from moesim.schedule.primitives import par, seq
from moesim.schedule.schemes import SCHEMES, layer_chain, layer_period, micro_batches, overlap_choices, schemes_for
from moesim.specs.engine import load_engine_model, moe_comm_labels, path_notes, scheme_notes
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.attention import core_op

GROUPS = ("moe_layer", "dense_layer", "step", "mtp")


def default_comm(phase: Phase) -> CommMode:
    """DeepSeek: prefill uses DeepEP normal (high throughput), decode low-latency kernels."""
    return CommMode.DEEPEP_NORMAL if Phase(phase) == Phase.PREFILL else CommMode.DEEPEP_LL


def default_overlap(phase: Phase) -> Overlap:
    """The schedule a deployment would run (DeepSeek: two-batch prefill, five-stage decode)."""
    return Overlap.TWO_BATCH if Phase(phase) == Phase.PREFILL else Overlap.FIVE_STAGE


@dataclass
class Evaluation:
    """Arrays over the grid, plus per-op costs of the chosen scheme's workload."""

    grid: Grid
    values: dict
    op_costs: list = field(default_factory=list)  # (OpCost, count per step)
    notes: list = field(default_factory=list)
    pricing: dict = field(default_factory=dict)  # engine and profile file used (engine.pricing.profile_info)


def _context_free_rows(grid: Grid):
    """(first, inverse) over every axis but context and acceptance, or None when not worth it."""
    return distinct_rows(grid, ("tp", "dp", "ep", "moe_tp", "batch", "mtp", "redundant"), max_share=0.5, min_size=512)


class _Pricer:
    """Prices the workload once per micro-batch count. Ops other than the attention core do not
    depend on the context length: on large grids they are priced once per distinct context-free
    row and expanded (exact), the core on every row."""

    def __init__(self, model, hw, grid, phase, comm, cm: CostModel, imbalance, comm_sms=None, chunk=None, path=None):
        self.model, self.hw, self.grid, self.phase, self.comm, self.cm = model, hw, grid, phase, comm, cm
        self.comm_sms, self.chunk, self.path = comm_sms, chunk, path
        self.imbalance = imbalance or {}
        # a fused prefill chunk brings a second attention core (over the prompt): no context dedup
        self.rows = _context_free_rows(grid) if chunk is None else None
        self.cache = {}

    def __call__(self, ub: int) -> Summary:
        if ub not in self.cache:
            self.cache[ub] = self._price(ub) if self.rows is None else self._price_dedup(ub)
        return self.cache[ub]

    def _groups(self, grid, ub, factors):
        path = None if self.path is None else self.path[self._rows_of(grid)]
        load = factors.get("experts") if factors else None  # the slowest EP rank's routed work
        load = None if load is None else np.broadcast_to(load, (grid.size,))
        wl = W.build(self.model, self.hw, grid, self.phase, self.comm, micro_batches=ub, comm_sms=self.comm_sms,
                     chunk=self.chunk, path=path, load=load)  # fmt: skip
        return wl, {name: apply_factors(self.cm.costs(getattr(wl, name)), factors, True) for name in GROUPS}

    def _rows_of(self, grid):
        """Indices of `grid`'s rows in the full grid (all of them, or the context-free representatives)."""
        return slice(None) if grid is self.grid else self.rows[0]

    def _price(self, ub):
        wl, groups = self._groups(self.grid, ub, factors_for(self.imbalance, ub))
        return Summary(wl, groups, ub)

    def _price_dedup(self, ub):
        grid, phase, (first, inv) = self.grid, self.phase, self.rows
        factors = factors_for(self.imbalance, ub)
        sub_f = {k: np.broadcast_to(v, (grid.size,))[first] for k, v in factors.items() if k != "attention"}
        wl, groups = self._groups(grid.take(first), ub, sub_f)
        t, b_req = W.tokens(grid, phase, ub)
        q_len = np.where(phase == Phase.PREFILL, 1.0, grid.q_len)
        op = core_op(self.model, t=t, b_req=b_req, q_len=q_len, context=grid.context, tp=grid.tp,
                     prefill=phase == Phase.PREFILL)  # fmt: skip
        core = apply_factors([self.cm.cost(op)], {k: v for k, v in factors.items() if k == "attention"})[0]
        # the attention core (Tag.CORE) is the only op whose cost depends on the context length
        return Summary(wl, groups, ub, skip=(Tag.CORE,)).expand(inv, core)


def _ideal_times(sm: Summary):
    """The step's roofline: compute, HBM and network each busy all the time; a lower bound of every
    schedule (seed 002 takes the same max per layer; step-level ops such as the LM head join the
    sums instead of adding serially)."""
    moe_t = par(*sm.layer_ideal["moe_layer"]) if sm.has["moe_layer"] else 0.0
    dense_t = par(*sm.layer_ideal["dense_layer"]) if sm.has["dense_layer"] else 0.0
    return par(*sm.ideal), moe_t, dense_t


def _chain(sm: Summary, name: str, sch, n, sync):
    """(period, time of the group's n layers in a row): the first layer from a cold start, the
    rest at the steady-state period, plus the drain of the last layer's comm (`layer_chain`);
    pipelined schemes (next-layer slots: five-stage) take n periods."""
    if not sm.has[name]:
        return 0.0, 0.0
    if any(s.next_layer for s in sch.slots):
        period = layer_period(sm.sums[name], sch) + sync
        return period, n * period
    first, period, drain = layer_chain(sm.sums[name], sch)
    # n periods plus what the chain's ends add (0 for a single micro-batch's chain): fill, drain
    total = np.where(np.asarray(n) > 0, n * (period + sync) + ((first - period) + drain), 0.0)
    return period + sync, total


def _scheme_times(sm: Summary, scheme: str, model: ModelSpec, sync, phase=Phase.PREFILL):
    """(step, MoE layer, dense layer) time of one schedule on a priced summary."""
    if scheme == Overlap.IDEAL.value:
        return _ideal_times(sm)
    sch, ub = SCHEMES[scheme], sm.ub
    if phase != Phase.PREFILL:  # SGLang caps DeepGEMM's SMs in its prefill TBO only (decode: None)
        sch = replace(sch, caps_gemm_sms=False)
    # + per-layer synchronisation outside the kernels (hardware spec, 0 unless measured)
    moe_t, moe_all = _chain(sm, "moe_layer", sch, sm.n_moe, sync)
    dense_t, dense_all = _chain(sm, "dense_layer", sch, sm.n_dense, sync)
    # the MTP module is one more transformer block (same schedule) plus eh_proj and its LM head,
    # which run serially; step-level ops (embedding, LM head) once per micro-batch
    mtp_t = 0.0
    if sm.has["mtp"]:
        block = moe_t if model.is_moe else dense_t
        mtp_t = (block + sm.extra["mtp"] * ub) * sm.mtp_count
    return seq(moe_all, dense_all, sm.extra["step"] * ub, mtp_t), moe_t, dense_t


def _wanted(overlap, phase: Phase) -> list[str]:
    if overlap == Overlap.AUTO.value:
        return schemes_for(phase)
    if overlap not in overlap_choices(phase):
        raise ConfigError(
            f"overlap: {overlap!r} does not apply to {phase.value}; allowed: {', '.join(overlap_choices(phase))}"
        )
    return [overlap]


def _choose(results: dict, size: int):
    """Fastest schedule per configuration -> (index into names, step, MoE layer, dense layer)."""
    names = list(results)
    idx = np.arange(size)
    stacks = [np.stack([np.broadcast_to(results[s][i], (size,)) for s in names]) for i in range(3)]
    best = np.argmin(stacks[0], axis=0) if len(names) > 1 else np.zeros(size, dtype=int)
    return best, *(st[best, idx] for st in stacks)


def _bottleneck(names, best, price, size: int):
    """Per configuration: the bound with the most time per step in the schedule it runs (for
    `ideal`: the busiest resource) -> array of Bound names."""
    chosen_ub = np.array([micro_batches(s) for s in names])[best]
    is_ideal = np.array([s == Overlap.IDEAL.value for s in names])[best]
    code = np.zeros(size, dtype=int)
    for ub in np.unique(chosen_ub):
        sm = price(int(ub))
        here = chosen_ub == ub
        by_bound = np.argmax(np.broadcast_to(sm.acc, (len(BoundCode), size)), axis=0)
        code = np.where(here & ~is_ideal, by_bound, code)
        if (is_ideal & here).any():  # ideal_period's (compute, memory, network) follow BoundCode's order
            code = np.where(is_ideal & here, np.argmax(np.stack(np.broadcast_arrays(*sm.ideal)), axis=0), code)
    return np.array([b.bound.value for b in BoundCode], dtype=object)[code]


def _memory_values(model, hw, grid, phase, comm):
    mem = memory(model, hw, grid, phase, comm)
    vals = {
        "weights_bytes": mem.weights_bytes,
        "kv_cache_bytes": mem.kv_cache_bytes,
        "activation_bytes": mem.activation_bytes,
        "comm_buffer_bytes": mem.comm_buffer_bytes,
        "total_bytes": mem.total_bytes,
        "capacity_bytes": np.full(grid.size, mem.capacity_bytes),
        "fits": mem.fits,
        "max_batch": max_batch(mem),
    }
    return mem, vals


def evaluate(model: ModelSpec, hw: HardwareSpec, grid: Grid, *, phase=Phase.DECODE, overlap=None,
             pricing: Pricing | None = None, profile=None, imbalance=None, chunk=None) -> Evaluation:  # fmt: skip
    """Vectorized evaluation of every configuration in `grid` (no loop over configurations).

    pricing: the settings (`moesim.engine.settings.Pricing`; default: roofline) — cost mode, CUDA
    graphs, comm (None: the phase's default), comm_sms (SMs given to DeepEP's normal kernels; None:
    DeepEP's default 20: their copy rate, profile deepep_v2, and the SMs taken from the compute they
    overlap), engine (whose execution the workload follows, moesim.specs.engine: the MoE communication
    path each configuration runs, the all-to-all mode of a pass carrying prefill tokens).
    profile: the calibration profile read for `pricing` (`load_profile_for`; None: roofline efficiencies).
    imbalance: optional dict of arrays {"experts": max/mean routed load, "attention": max/mean
    KV work} applied to the slowest rank's expert, all-to-all and attention-core times;
    "experts@2" (if given) is the routed-load factor of one of two micro-batches.
    chunk: (prefill tokens per DP group, prompt length) fused into each decode pass (`W.build`).
    """
    pricing = pricing if pricing is not None else Pricing(cost_mode=CostMode.ROOFLINE)
    cost_mode, comm = pricing.cost_mode, pricing.comm
    phase = Phase(phase)
    em = load_engine_model(pricing.engine)
    comm = CommMode(comm) if comm else default_comm(phase)
    # a decode pass carrying a prefill chunk exists only in aggregated serving (SGLang: --deepep-mode auto)
    comm = em.requested(comm, Phase.PREFILL if chunk is not None else phase, aggregated=chunk is not None)
    path = em.moe_paths(comm, dp=grid.dp, ep=grid.ep, mnnvl=hw.domain_gpus > hw.gpus_per_node)
    overlap = Overlap(overlap).value if overlap else Overlap.AUTO.value
    cm = CostModel(hw, model, cost_mode, profile, cuda_graphs=pricing.cuda_graphs)
    sync = hw.layer_sync_s if CostMode(cost_mode) != CostMode.ROOFLINE else 0.0
    price = _Pricer(model, hw, grid, phase, comm, cm, imbalance, pricing.comm_sms, chunk, path)
    results, runnable = {}, {}
    auto = overlap == Overlap.AUTO.value
    t_rank = W.tokens(grid, phase)[0]  # tokens of a DP rank's pass (vLLM's DBO thresholds count these)
    for scheme in _wanted(overlap, phase):
        ub = micro_batches(scheme)
        step, moe_t, dense_t = _scheme_times(price(ub), scheme, model, sync, phase)
        if ub > 1:  # a micro-batch needs at least one request (decode) or token (prefill)
            step = np.where(grid.batch >= ub, step, np.inf)
        results[scheme] = (step, moe_t, dense_t)
        # auto picks among the schedules the engine runs there (moesim/specs/engines/*.yaml
        # execution.overlap); every schedule's own time stays in step_time_s[<scheme>]
        ok = scheme == Overlap.SERIAL.value or em.scheme_ok(scheme, path, t_rank, phase)
        runnable[scheme] = (np.where(ok, step, np.inf), moe_t, dense_t) if auto else results[scheme]
    names = list(results)
    best, step, moe_t, dense_t = _choose(runnable, grid.size)
    chosen = names[int(best[0])]
    sm = price(micro_batches(chosen))
    vals = metrics(grid, phase, step, sm.flops, hw.peak_flops(model.precision.weight_dtype), hw.gpus_per_node)
    mem, mem_vals = _memory_values(model, hw, grid, phase, comm)
    vals.update(
        {
            "flops_per_step": np.broadcast_to(sm.flops, (grid.size,)),
            "moe_layer_time_s": moe_t,
            "dense_layer_time_s": dense_t,
            "overlap": np.array(names, dtype=object)[best],
            "moe_comm": moe_comm_labels(path, comm),
            "bottleneck": _bottleneck(names, best, price, grid.size),
            **mem_vals,
        }
    )
    for s in names:
        vals[f"step_time_s[{s}]"] = np.broadcast_to(results[s][0], (grid.size,))
    notes = cm.notes + path_notes(em, comm, path)
    if not auto and scheme_notes(em, overlap):
        notes += scheme_notes(em, overlap)
    ev = Evaluation(grid, vals, sm.counted or [], notes)
    ev.memory, ev.comm, ev.chosen, ev.engine_model = mem, comm, chosen, em
    return ev


__all__ = ["evaluate", "Evaluation", "default_comm", "default_overlap"]
