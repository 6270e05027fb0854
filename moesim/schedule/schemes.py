"""Overlap schemes as data, evaluated exactly (critical path of a compute and a comm stream).

A scheme is a list of compute *slots* in stream order; each slot runs some stages of one
micro-batch. All-to-all ops (dispatch, combine) run on the comm stream: issued when the slot
holding their sender ends, consumed before the slot holding their receiver starts (possibly in
the next layer). Blocking collectives (TP all-reduce) stay on the compute stream. The period
(time per layer) is the steady-state difference of a few simulated layers, computed with
seq/par on arrays (no loop over configurations).

Sources: DeepSeek inference-system overview (prefill two micro-batches; decode five stages with
attention split in two), Perplexity seed 004 (stages 1-5, offset by 3; "DispatchOverlap").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.enums import OpKind, Overlap, Phase, Tag
from moesim.schedule.primitives import par, seq

# stages: 1 attention part 1 (norm, qkv_a, q_b, BMM), 2 attention part 2 (core, BMM, o_proj,
# norm, router), 3 dispatch send + shared expert, 4 dispatch recv + routed experts + combine send,
# 5 combine recv (+ LM head once per step)


@dataclass(frozen=True)
class Slot:
    mb: int  # micro-batch index
    stages: tuple  # stage numbers on the compute stream
    only: tuple = ()  # restrict to ops carrying one of these tags (moesim.enums.Tag; empty = all)
    skip: tuple = ()  # exclude ops carrying one of these tags
    next_layer: bool = False  # belongs to the next layer (pipelined schemes)

    def holds(self, cost) -> bool:
        """Whether this slot runs the compute op `cost` (an OpCost)."""
        tags = cost.tags
        return (
            cost.stage in self.stages
            and (not self.only or any(t in tags for t in self.only))
            and not any(t in tags for t in self.skip)
        )


@dataclass(frozen=True)
class CommEdge:
    op: str  # dispatch | combine
    mb: int
    after: int  # issued when slot `after` ends
    before: int  # must finish before slot `before` starts (in the next period if wrap)
    wrap: bool = False


@dataclass(frozen=True)
class Scheme:
    name: str
    micro_batches: int
    slots: tuple
    edges: tuple
    holds_sms: bool = True  # compute overlapping SM-holding comm kernels loses their SM share
    # GEMMs run on (SMs - comm SMs) for the whole forward, comm in flight or not: SGLang wraps its
    # TBO forward in deep_gemm_wrapper.configure_deep_gemm_num_sms(total SMs - DeepEPConfig.num_sms)
    # (two_batch_overlap._model_forward_tbo, operations_strategy._compute_moe_deepseek_blog_prefill);
    # DeepSeek's prefill overlap figure: 108 compute / 24 comm SMs throughout (OII-016)
    caps_gemm_sms: bool = False
    phases: frozenset = frozenset(Phase)  # the phases the scheme applies to


SERIAL = Scheme(
    "serial",
    1,
    (Slot(0, (1, 2)), Slot(0, (3, 4, 5))),
    (CommEdge("dispatch", 0, 0, 1), CommEdge("combine", 0, 1, 0, wrap=True)),
    holds_sms=False,
)
# Perplexity "DispatchOverlap": shared expert runs while dispatch is in flight
SHARED = Scheme(
    "shared",
    1,
    (Slot(0, (1, 2)), Slot(0, (3,)), Slot(0, (4, 5))),
    (CommEdge("dispatch", 0, 0, 2), CommEdge("combine", 0, 2, 0, wrap=True)),
)
# single-batch overlap: shared expert under dispatch, and combine streamed behind the down GEMM
SBO = Scheme(
    "sbo",
    1,
    (
        Slot(0, (1, 2)),
        Slot(0, (3,)),
        Slot(0, (4, 5), skip=(Tag.EXPERTS_DOWN,)),
        Slot(0, (4,), only=(Tag.EXPERTS_DOWN,)),
    ),
    (CommEdge("dispatch", 0, 0, 2), CommEdge("combine", 0, 2, 0, wrap=True)),
)
# DeepSeek prefill: A attn, B attn, A moe, B moe; each comm hides under the other's compute
TWO_BATCH = Scheme(
    "two-batch",
    2,
    (Slot(0, (1, 2, 3)), Slot(1, (1, 2, 3)), Slot(0, (4, 5)), Slot(1, (4, 5))),
    (
        CommEdge("dispatch", 0, 0, 2),
        CommEdge("dispatch", 1, 1, 3),
        CommEdge("combine", 0, 2, 0, wrap=True),
        CommEdge("combine", 1, 3, 1, wrap=True),
    ),
    caps_gemm_sms=True,
)
# DeepSeek/Perplexity decode five stages, micro-batches offset by 3 stages:
# A1 B4 A2 B5 A3 B1 A4 B2 A5 B3 — stage 3 is "Dispatch Send, Shared Expert" (seed 004): the send is
# issued as the stage starts, so a dispatch hides under its own shared expert and the other's
# stage 1; a combine (sent at the end of stage 4) under the other's stage 2
FIVE_STAGE = Scheme(
    "five-stage",
    2,
    (
        Slot(0, (1,)),
        Slot(1, (4,)),
        Slot(0, (2,)),
        Slot(1, (5,)),
        Slot(0, (3,)),
        Slot(1, (1,), next_layer=True),
        Slot(0, (4,)),
        Slot(1, (2,), next_layer=True),
        Slot(0, (5,)),
        Slot(1, (3,), next_layer=True),
    ),
    (
        CommEdge("dispatch", 0, 3, 6),
        CommEdge("combine", 0, 6, 8),
        CommEdge("dispatch", 1, 8, 1, wrap=True),
        CommEdge("combine", 1, 1, 3),
    ),
    phases=frozenset({Phase.DECODE, Phase.MIXED}),  # a pipeline over decode stages (prefill: two-batch)
)

SCHEMES = {s.name: s for s in (SERIAL, SHARED, SBO, TWO_BATCH, FIVE_STAGE)}
# not schedules of their own: `ideal` is the step's resource roofline, `auto` the fastest scheme
PSEUDO = (Overlap.IDEAL.value, Overlap.AUTO.value)


def schemes_for(phase) -> list[str]:
    """The schedules that apply to a phase, in table order."""
    phase = Phase(phase)
    return [s.name for s in SCHEMES.values() if phase in s.phases]


def overlap_choices(phase) -> list[str]:
    """Every --overlap value a phase accepts: its schedules plus ideal and auto."""
    return schemes_for(phase) + list(PSEUDO)


def micro_batches(name: str) -> int:
    """Micro-batches a schedule splits the batch into (ideal/auto: 1)."""
    return SCHEMES[name].micro_batches if name in SCHEMES else 1


GEMM_KINDS = (OpKind.GEMM, OpKind.GROUPED_GEMM)


class StageSums:
    """Per-stage compute-stream time of one micro-batch (blocking collectives included; the
    all-to-alls separate), computed in one pass over the op costs so that every scheme reuses it."""

    def __init__(self, costs):
        self.stage = {}
        self.gemm = {}  # per stage: the part of `stage` in (grouped) GEMMs (DeepGEMM, SM-capped in TBO)
        self.named = {}
        self.comm = {"dispatch": 0.0, "combine": 0.0}
        self.sm_share = 0.0
        for c in costs:
            if c.kind == OpKind.ALL_TO_ALL:
                op = "dispatch" if Tag.DISPATCH in c.tags else "combine"
                self.comm[op] = seq(self.comm[op], c.time_s)
                # SMs held only where the all-to-all runs (its cost carries sm_share x present: none on an
                # engine's allgather / allreduce path)
                self.sm_share = np.maximum(self.sm_share, c.sm_share)
                continue
            self.stage[c.stage] = seq(self.stage.get(c.stage, 0.0), c.time_s)
            if c.kind in GEMM_KINDS:
                self.gemm[c.stage] = seq(self.gemm.get(c.stage, 0.0), c.time_s)
            for tag in NAMED_TAGS:
                if tag in c.tags:
                    self.named[tag] = seq(self.named.get(tag, 0.0), c.time_s)

    def slot_gemm(self, slot: Slot):
        """The (grouped) GEMM part of a slot's compute time (a tag-addressed slot: all of it)."""
        if slot.only:
            return self.slot(slot)
        t = seq(*[self.gemm.get(st, 0.0) for st in slot.stages])
        for n in slot.skip:  # a skipped tag names GEMM ops (experts_down)
            t = t - self.named.get(n, 0.0)
        return t

    def slot(self, slot: Slot):
        if slot.only:
            return seq(*[self.named.get(n, 0.0) for n in slot.only])
        t = seq(*[self.stage.get(st, 0.0) for st in slot.stages])
        for n in slot.skip:
            t = t - self.named.get(n, 0.0)
        return t


NAMED_TAGS = (Tag.EXPERTS_DOWN,)  # ops that slots address by tag (SBO streams combine behind the down GEMM)


def slot_time(costs, slot: Slot):
    """Compute-stream time of one slot: its compute ops plus blocking collectives (TP all-reduce)."""
    return StageSums(costs).slot(slot)


def slot_label(slot: Slot) -> str:
    if slot.only:
        return "+".join(t.value for t in slot.only)
    return "S" + "".join(str(x) for x in slot.stages)


def layer_period(costs, scheme: Scheme, periods: int = 2, trace: list | None = None):
    """Steady-state time per layer of `scheme` given the per-micro-batch op costs (a list of
    OpCost or a StageSums).

    SM partition: a comm kernel holding a share `s` of the SMs slows the compute it overlaps.
    A slot with compute work W that starts while x seconds of comm are still in flight takes
    min(W / (1 - s), W + x * s) — the compute runs on (1 - s) of the SMs while the comm lasts
    (DeepSeek prefill: 108 of 132 SMs compute beside DeepEP normal). So overlap is never worse
    than exposing the comm serially. A scheme that caps GEMMs (`caps_gemm_sms`, SGLang TBO) runs
    a slot's GEMM part G on (1 - s) of the SMs throughout: min(W / (1 - s), W + G * s / (1 - s)
    + x * s).
    The schedule is a max-plus linear system whose comm edges reach at most one layer ahead; its
    period settles after the first layer (tests check 2 simulated layers against 10 on random
    costs), so the second layer's length is the steady state. Without all-to-all traffic the
    period is simply the micro-batches' compute, one after another.
    If `trace` is a list, (stream, micro_batch, label, start_s, end_s) tuples of the last two
    periods are appended (arrays, shaped like the grid).
    """
    ends, _drain = _simulate(costs, scheme, periods, trace)
    return ends[-1] - ends[-2]


def layer_chain(costs, scheme: Scheme):
    """(first, period, drain) of a chain of layers: the first layer from a cold start (no combine
    of a previous layer to wait for: pipeline fill), the steady-state period, and the drain — the
    last layer's combines still in flight when its compute ends, which nothing can hide (DeepSeek
    prefill overlap figure: the last micro-batch's combine closes the step). n layers take
    first + (n - 1) * period + drain (exact for schemes without next-layer slots)."""
    ends, drain = _simulate(costs, scheme, 2, None)
    return ends[0], ends[1] - ends[0], drain


def _capped(ss, scheme, s_share):
    """Per slot: (compute time, the same with the GEMM part on (1 - s) of the SMs if the scheme caps
    GEMMs for the whole forward)."""
    dur = [ss.slot(s) for s in scheme.slots]
    if not (np.any(s_share) and scheme.caps_gemm_sms):
        return dur, dur
    return dur, [d + ss.slot_gemm(s) * (s_share / (1.0 - s_share)) for d, s in zip(dur, scheme.slots)]


def _simulate(costs, scheme: Scheme, periods: int, trace):
    """Critical path of `periods` layers -> (compute end of each period, drain after the last)."""
    ss = costs if isinstance(costs, StageSums) else StageSums(costs)
    s_share = ss.sm_share if scheme.holds_sms else 0.0
    dur, dur_c = _capped(ss, scheme, s_share)
    comm = ss.comm
    if trace is None and all(np.ndim(v) == 0 and v == 0 for v in comm.values()):
        return [seq(*dur_c) * (p + 1) for p in range(periods)], 0.0
    after = {}
    for e in scheme.edges:
        after.setdefault(e.after, []).append(e)
    ready = {}  # (slot index, period) -> earliest start imposed by comm edges
    compute_free, comm_free, ends = 0.0, 0.0, []
    for p in range(periods):
        for i, s in enumerate(scheme.slots):
            r = ready.get((i, p))
            start = compute_free if r is None else par(compute_free, r)
            work = dur_c[i]
            if np.any(s_share):  # never slower than the whole slot on (1 - s) of the SMs
                work = np.minimum(dur[i] / (1.0 - s_share), work + np.maximum(comm_free - start, 0.0) * s_share)
            end = seq(start, work)
            compute_free = end
            if trace is not None and p >= periods - 2:
                trace.append(("compute", s.mb, slot_label(s), start, end))
            for e in after.get(i, ()):
                c_start = par(end, comm_free)
                c_end = seq(c_start, comm[e.op])
                comm_free = c_end
                key = (e.before, p + 1 if e.wrap else p)
                ready[key] = c_end if key not in ready else par(ready[key], c_end)
                if trace is not None and p >= periods - 2:
                    trace.append(("comm", e.mb, e.op, c_start, c_end))
        ends.append(compute_free)
    # the comm stream is in order: its last transfer is the last one the next layer would wait for
    return ends, np.maximum(comm_free - compute_free, 0.0)


def ideal_period(costs, counts=None):
    """Every resource busy all the time: max of summed compute, memory and network time
    (the seed-002 estimate: per-layer max of compute and communication). `counts` weights ops."""
    counts = counts if counts is not None else [1.0] * len(costs)
    comp = seq(*[c.compute_s * n for c, n in zip(costs, counts)]) if costs else 0.0
    mem = seq(*[c.memory_s * n for c, n in zip(costs, counts)]) if costs else 0.0
    net = seq(*[c.network_s * n for c, n in zip(costs, counts)]) if costs else 0.0
    return par(comp, mem, net), (comp, mem, net)
