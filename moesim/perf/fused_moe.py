"""A layer's routed experts priced as ONE fused MoE call, for engines that run one (the profile's
`moe` entry says so: moesim.perf.profile.reader.Profile.fused_moe).

TRT-LLM's MoE (tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py CutlassFusedMoE, v1.x;
DeepGemmFusedMoE on Blackwell) runs the routed experts as one op, torch.ops.trtllm.fused_moe:
expandInputRowsKernel (permute + FP8 quant of the token rows), grouped GEMM 1 (gate/up), the SwiGLU
+ FP8 requant, grouped GEMM 2 (down) and finalizeMoeRouting (un-permute, top-k weighted sum). The
engine's measured table (aiconfigurator's TRT-LLM MoE collector; moe_perf, backend
moe_torch_flow_cutlass) times that op, so its fitted entry (physics x measured residual) prices the
whole call. The workload (moesim.workload.ffn.routed_experts) emits the parts as separate ops
([experts_permute,] experts_gate_up, experts_act, experts_down): pricing them one by one from the
`grouped_gemm` entry derived from that table (its physics params, alpha halved, no residual) plus
the activation and permute as passes of their own prices the call twice over what it measured
(h200 trtllm, DeepSeek-V3 dims, EP 8: x1.08-1.33 from 1 to 512 tokens).

Here the run of routed ops is priced as one `moe` call and its time is split over the parts in the
proportion of their own (unfused) prices, so the layer's routed time is the measured call's and the
schedule still finds the down GEMM (Tag.EXPERTS_DOWN, SBO) and the routed load factor (Tag.ROUTED)
where it did. The call's shape in the table's terms (aiconfigurator's moe rows: `tokens` entering
the layer on the rank, every rank seeing them all; its local experts compute tokens x topk / ep pairs)
comes from the ops' shape keys tokens / ep / experts / topk when the workload sets them, else from
the work: local slots = groups, pairs = m x groups, ep = experts / groups and tokens = pairs x ep /
topk (exact without redundant experts; with them, the table point of the same local slots and pairs).
A workload may instead emit the call as one op: a grouped GEMM whose shape has kernel_family "moe"
and the keys of `fused_shape` (the cost model prices it like any kernel: moesim.perf.cost).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from moesim.enums import BoundCode, CostMode, OpKind, Stream, Tag
from moesim.perf.profile.work import family_work
from moesim.workload.ops import OpWork
from moesim.workload.shapes import FusedMoeShape

FUSED = "fused"
MOE_FAMILY = "moe"
PROVENANCE_SUFFIX = "+fused-moe"  # a part's provenance: its share of one fused MoE call
TABLE_KEYS = ("tokens", "ep", "experts", "topk")  # the call's table-convention keys a workload may set


def _is_routed(op: OpWork) -> bool:
    return op.stream == Stream.COMPUTE and Tag.ROUTED in op.tags


def _is_up(op: OpWork) -> bool:
    return op.kind == OpKind.GROUPED_GEMM and Tag.EXPERTS_DOWN not in op.tags


def _is_down(op: OpWork) -> bool:
    return op.kind == OpKind.GROUPED_GEMM and Tag.EXPERTS_DOWN in op.tags


def routed_runs(ops: list[OpWork]) -> list[list[int]]:
    """Index lists of the contiguous runs of routed compute ops (Tag.ROUTED) holding exactly one
    gate/up and one down grouped GEMM (moesim.workload.ffn.routed_experts' [permute,] up, act, down),
    none of them already one fused call."""
    runs, cur = [], []
    for i, op in enumerate([*ops, None]):
        if op is not None and _is_routed(op) and op.shape.kernel_family != MOE_FAMILY:
            cur.append(i)
            continue
        if sum(_is_up(ops[j]) for j in cur) == 1 and sum(_is_down(ops[j]) for j in cur) == 1:
            runs.append(cur)
        cur = []
    return runs


def fused_shape(model, up: OpWork, down: OpWork) -> FusedMoeShape:
    """The `moe` shape (moesim.perf.profile.work.family_work) of the call whose gate/up and down
    grouped GEMMs are `up` and `down`: tokens, hidden, n (the expert width), experts, topk, ep, tp
    (expert TP), active (the workload's touched local slots), layout fused."""
    s = up.shape
    groups = np.asarray(s.groups, float)
    pairs = np.asarray(s.m, float) * groups
    width = float(model.moe.expert_intermediate_size)
    experts = np.asarray(float(model.moe.num_experts) if s.experts is None else s.experts, float)
    topk = np.asarray(float(model.moe.top_k) if s.topk is None else s.topk, float)
    ep = np.asarray(s.ep, float) if s.ep is not None else experts / np.maximum(groups, 1e-9)
    tokens = np.asarray(s.tokens, float) if s.tokens is not None else pairs * ep / topk
    return FusedMoeShape(
        tokens=tokens,
        hidden=np.asarray(s.k, float),
        n=width * np.ones_like(pairs),
        experts=experts * np.ones_like(pairs),
        topk=topk * np.ones_like(pairs),
        ep=ep * np.ones_like(pairs),
        tp=width / np.asarray(down.shape.k, float),
        active=np.asarray(groups if s.active is None else s.active, float),
        layout=FUSED,
    )


def fused_op(model, parts: list[OpWork]) -> OpWork:
    """One fused MoE call doing the work of `parts` (a routed run): its FLOPs and bytes are theirs."""
    up = next(p for p in parts if _is_up(p))
    down = next(p for p in parts if _is_down(p))
    return OpWork(
        name="experts",
        kind=OpKind.GROUPED_GEMM,
        dtype=up.dtype,
        stage=up.stage,
        flops=sum(np.asarray(p.flops, float) for p in parts),
        bytes_act=sum(np.asarray(p.bytes_total, float) for p in parts),
        shape=fused_shape(model, up, down),
        present=up.present,
        tags=frozenset({Tag.ROUTED}),
    )


def fuses(cm, dtype) -> bool:
    """True when cm prices `dtype` routed experts as one fused call (its profile's Profile.fused_moe)."""
    prof = cm.profile
    return (
        prof is not None
        and cm.mode != CostMode.ROOFLINE
        and hasattr(prof, "fused_moe")
        and (prof.fused_moe(dtype) is not None)
    )


def fused_call(cm, op: OpWork) -> bool:
    """True for an op that is one fused MoE call (shape kernel_family "moe") cm prices fused."""
    return op.stream == Stream.COMPUTE and op.shape.kernel_family == MOE_FAMILY and fuses(cm, op.dtype)


def price_call(cm, op: OpWork):
    """cm's cost of one fused MoE call `op` (shape: kernel_family "moe" and fused_shape's keys),
    priced on the kernel's own work (moesim.perf.profile.work.family_work of its shape): the
    entry's efficiencies are relative to that work, so the call's time is the fitted call's (x its
    measured residual) and never moves with the workload's byte conventions (FP8 scales, the permute
    pass a fused call does not run separately); the reported FLOPs and bytes stay the op's."""
    dtype = str(getattr(op.dtype, "value", op.dtype)).lower()
    F, b_in, b_out, _ = family_work(MOE_FAMILY, dtype, cm.hw.sms, {**op.shape.as_kwargs(), "dtype": dtype})
    shape = np.broadcast(np.asarray(op.flops, float), np.asarray(op.bytes_total, float), F, b_in).shape
    work = dataclasses.replace(
        op,
        flops=np.broadcast_to(F, shape),
        bytes_weight=0.0,
        bytes_act=np.broadcast_to(b_in + b_out, shape),
        bytes_kv=0.0,
    )
    c = cm.kernel(work)
    present = np.asarray(op.present, float)
    ones = np.ones(np.shape(c.time_s))
    # the fit's sides of a two-GEMM call are both its whole time (work.parts_sides): its bound is its work's
    roof_c, roof_m = F / cm.hw.peak_flops(op.dtype), (b_in + b_out) / cm.hw.hbm_bw_Bps
    work_bound = np.where(roof_c >= roof_m, BoundCode.COMPUTE, BoundCode.MEMORY)
    bound = np.where(c.bound == BoundCode.LATENCY, BoundCode.LATENCY, work_bound)
    bound = np.broadcast_to(bound, np.shape(c.time_s)).astype(np.asarray(c.bound).dtype)
    return dataclasses.replace(
        c,
        flops=np.asarray(op.flops, float) * present * ones,
        bytes=np.asarray(op.bytes_total, float) * present * ones,
        bound=bound,
    )


def split(fused, costs: list) -> list:
    """The fused call's cost split over its parts' costs in proportion to their own times (a part
    of no time gets none); FLOPs, bytes, names, stages and tags stay the parts'."""
    total = sum(np.asarray(c.time_s, float) for c in costs)
    out = []
    for c in costs:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(total > 0, np.asarray(c.time_s, float) / total, 0.0)
        out.append(
            dataclasses.replace(
                c,
                time_s=fused.time_s * share,
                compute_s=fused.compute_s * share,
                memory_s=fused.memory_s * share,
                bound=fused.bound,
                provenance=fused.provenance + PROVENANCE_SUFFIX,
            )
        )
    return out


def fuse_routed(cm, ops: list[OpWork], costs: list) -> list:
    """`costs` (cm.cost of each of `ops`) with every routed run priced as one fused MoE call where
    cm's profile prices the run's dtype fused (Profile.fused_moe); unchanged otherwise."""
    if cm.profile is None or cm.mode == CostMode.ROOFLINE:
        return costs
    out = list(costs)
    for run in routed_runs(ops):
        parts = [ops[i] for i in run]
        if not fuses(cm, next(p for p in parts if _is_up(p)).dtype):
            continue
        fused = price_call(cm, fused_op(cm.model, parts))
        for i, c in zip(run, split(fused, [costs[i] for i in run])):
            out[i] = c
    return out
