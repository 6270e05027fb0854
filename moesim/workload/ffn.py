"""FFN ops per GPU per layer: dense MLP, and MoE (router, shared expert, routed grouped GEMM,
EP dispatch/combine). Seeds 002/004: EP = DP x TP; each GPU holds (experts + redundant)/EP slots
and a shared-expert copy; tokens reach their top-k experts through all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.enums import CommMode, Dtype, OpKind, Stream, Tag
from moesim.errors import ConfigError
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.comm import DEEPEP_NORMAL_SMS, a2a_message_bytes, a2a_network_bytes
from moesim.workload.ops import (
    Operands,
    OpWork,
    act_elem_bytes,
    allgather,
    allreduce,
    elementwise,
    gemm,
    grouped_gemm,
    linear_kw,
    permute_bytes,
    quant_pass,
)
from moesim.workload.shapes import AllToAllShape


# SMs held by comm kernels while in flight: DeepEP normal holds its num_sms (--comm-sms; default
# DeepEP's Buffer.num_sms = 20, what SGLang runs; DeepSeek's own prefill figure used 24, OII-016);
# decode figure 132 / 0 for the low-latency kernels with the receive hook (OII-017). Others: not
# published -> 0 (optimistic, stated).
def comm_sms_held(comm: CommMode, comm_sms=None) -> float:
    """SMs a comm kernel of mode `comm` holds while in flight."""
    if CommMode(comm) != CommMode.DEEPEP_NORMAL:
        return 0.0
    return float(DEEPEP_NORMAL_SMS if comm_sms is None else comm_sms)


def _act(name, m, width, stage, tags=frozenset(), out_bytes=1.0):
    # SiLU(gate) * up: read 2 x width BF16, write width; the routed experts' kernel re-quantises to FP8
    # in the same pass (out_bytes 1); the dense / shared MLP's SiluAndMul writes BF16 (out_bytes 2) and
    # the FP8 down projection quantises its input in its own pass (SGLang DeepseekV2MLP: act_fn, then
    # down_proj's Fp8LinearMethod runs per_token_group_quant_fp8)
    return elementwise(name, m * width * (2.0 * 2.0 + out_bytes), stage=stage, tags=tags)


def dense_ffn_ops(model: ModelSpec, *, t, tp) -> list[OpWork]:
    f, d, p = model.dense_ffn, model.hidden_size, model.precision
    ab, blk = p.activation_dtype.bytes, p.weight_block
    width = f.intermediate_size / tp
    ops = [
        quant_pass("mlp_quant", t, d, a_bytes=ab, block=blk, stage=3, tags={Tag.ACT_QUANT}),  # normed BF16 -> FP8
        gemm("mlp_gate_up", t, (2 if f.gated else 1) * width, d, linear_kw(p), stage=3),
        _act("mlp_act", t, width, 3, out_bytes=2.0),
        quant_pass("mlp_down_quant", t, width, a_bytes=ab, block=blk, stage=4, tags={Tag.ACT_QUANT}),
        gemm("mlp_down", t, d, width, linear_kw(p), stage=4),
        allreduce("mlp_tp_allreduce", t, d, tp, 4),
    ]
    return ops


def expected_active_slots(slots_per_rank, slots, top_k, tokens_in_group):
    """E[# local expert slots receiving >= 1 token]: each token hits a given slot w.p. k/S
    (uniform routing); P(idle) = (1 - k/S)^tokens (Perplexity seed 004: batch 1 on EP8 activates
    2*8/8 = 2 experts per GPU)."""
    p_idle = np.power(np.clip(1.0 - top_k / slots, 0.0, 1.0), tokens_in_group)
    return slots_per_rank * (1.0 - p_idle)


ROUTED_TAGS = frozenset({Tag.ROUTED})
A2A_TAGS = {"dispatch": frozenset({Tag.A2A, Tag.DISPATCH}), "combine": frozenset({Tag.A2A, Tag.COMBINE})}


A2A_STAGES = {"dispatch": 3, "combine": 4}  # five-stage positions: dispatch before, combine after the experts


def all_to_all(model: ModelSpec, hw: HardwareSpec, op: str, comm: CommMode, *, tokens, ep, slots, present=1.0,
               moe_tp=1.0, comm_sms=None) -> OpWork:  # fmt: skip
    """EP dispatch or combine of `tokens` tokens sent by one rank, each once per expert-TP shard
    (bytes: comm.a2a_network_bytes), at its stage (A2A_STAGES). `comm_sms`: SMs given to DeepEP's
    normal kernels."""
    comm = CommMode(comm)
    rdma, nvl = a2a_network_bytes(comm, op, model, tokens=tokens, ep=ep, gpus_per_domain=hw.domain_gpus, slots=slots)
    p = model.precision
    sms = comm_sms_held(comm, comm_sms)
    if sms >= hw.sms:  # the normal kernels hold their SMs for the whole transfer: none left to compute
        raise ConfigError(
            f"hardware.sms: {hw.sms} SMs on {hw.name} leave none for compute beside the {sms:.0f} SMs of "
            f"DeepEP's normal kernels; allowed: sms > {sms:.0f}, or fewer --comm-sms, or another --comm"
        )
    msg = a2a_message_bytes(op, model.hidden_size, p)
    shape = AllToAllShape(ep=ep, tokens=tokens, mode=comm.value, experts=slots, moe_tp=moe_tp, msg_bytes=msg,
                          sms=sms or None)  # fmt: skip
    return OpWork(
        name=op,
        kind=OpKind.ALL_TO_ALL,
        dtype=p.dispatch_dtype if op == "dispatch" else p.combine_dtype,
        stage=A2A_STAGES[op],
        stream=Stream.COMM,
        net_bytes_rdma=rdma * moe_tp,
        net_bytes_nvlink=nvl * moe_tp,
        group=ep,
        comm_op=op,
        shape=shape,
        present=present,
        sm_share=sms / hw.sms,
        tags=A2A_TAGS[op],
    )


def routed_experts(model: ModelSpec, *, pairs, slots_per_rank, active, moe_tp, layout: str) -> list[OpWork]:
    """Routed experts on one EP rank: grouped gate/up GEMM, activation, grouped down GEMM over
    `pairs` token-expert pairs spread over `slots_per_rank` groups, `active` of them non-empty."""
    m, d, p = model.moe, model.hidden_size, model.precision
    wi = m.expert_intermediate_size / moe_tp
    kw = dict(groups=slots_per_rank, active=active, layout=layout)
    up = grouped_gemm("experts_gate_up", pairs, 2 * wi, d, linear_kw(p), tags=ROUTED_TAGS, **kw)
    act = _act("experts_act", pairs, wi, 4, tags=ROUTED_TAGS)
    down = grouped_gemm("experts_down", pairs, d, wi, linear_kw(p), tags=ROUTED_TAGS | {Tag.EXPERTS_DOWN}, **kw)
    if layout != "contiguous":
        return [up, act, down]
    a_elem = act_elem_bytes(p.activation_dtype.bytes, p.weight_block)
    perm = elementwise("experts_permute", permute_bytes(pairs, d, a_elem), stage=4, tags=ROUTED_TAGS)
    return [perm, up, act, down]


@dataclass(frozen=True)
class MoeParallel:
    """How one MoE layer is spread over the GPUs (ranks; arrays shaped like the Grid)."""

    tp: np.ndarray  # attention tensor-parallel ranks
    dp: np.ndarray  # attention data-parallel groups
    ep: np.ndarray  # expert-parallel ranks
    moe_tp: np.ndarray  # tensor-parallel ranks inside each expert
    redundant: np.ndarray  # redundant expert slots (EPLB replicas) over the EP group

    @classmethod
    def of(cls, grid) -> MoeParallel:
        """The grid's parallelism (moesim.grid.core.Grid axes)."""
        return cls(tp=grid.tp, dp=grid.dp, ep=grid.ep, moe_tp=grid.moe_tp, redundant=grid.redundant)


def moe_ops(model: ModelSpec, hw: HardwareSpec, par: MoeParallel, *, t, comm: CommMode, prefill: bool, comm_sms=None,
            path=None, load=None) -> list[OpWork]:  # fmt: skip
    """One MoE layer's ops on one rank, spread as `par` says. `path`: the MoE communication path per
    configuration (moesim.specs.engine.PATHS index: 0 tp, 1 a2a, 2 allgather, 3 allreduce; what the
    engine runs, `EngineModel.moe_paths`); None: the all-to-all wherever ep > 1. `load`: the slowest
    EP rank's routed load over the mean (moesim.balance.factors; None: 1): its routed experts run on
    load x the mean token-expert pairs and the experts those touch (the rank is priced on its own
    work, so a fixed cost of the kernels does not scale with the imbalance)."""
    m, d = model.moe, model.hidden_size
    path = np.where(np.asarray(par.ep) > 1, 1, 0) if path is None else np.asarray(path)
    a2a, gather, reduce = ((path == i).astype(float) for i in (1, 2, 3))
    router = Operands(w_bytes=2.0, a_bytes=2.0, dtype=Dtype.BF16, out_bytes=4.0, block=0)
    ops = [gemm("router", t, m.num_experts, d, router, stage=2)]
    # --- dispatch (stage 3) / combine (stage 4): tokens per GPU = t / tp (DP attention +
    # sequence-parallel scatter)
    slots = m.num_experts + par.redundant
    kw = dict(tokens=t / par.tp, ep=par.ep, slots=slots, present=(par.ep > 1).astype(float) * a2a, moe_tp=par.moe_tp)
    ops += [all_to_all(model, hw, name, comm, comm_sms=comm_sms, **kw) for name in ("dispatch", "combine")]
    ops += _moe_collectives(model, par, t, gather, reduce)
    if m.shared_width:
        ops += _shared_expert(model, par, t, own=(path <= 1).astype(float))
    # --- routed experts (stage 4): grouped GEMM over the slots on this rank
    spr = slots / par.ep
    lf = 1.0 if load is None else np.asarray(load, float)
    pairs = (
        t * par.dp * m.top_k / par.ep * lf
    )  # token-expert pairs landing on the slowest EP rank (uniform routing x load)
    # the experts it touches: a mean rank's under load x the tokens (the same draw, scaled)
    active = expected_active_slots(spr, slots, m.top_k, t * par.dp * lf)
    layout = "contiguous" if prefill else "masked"
    ops += routed_experts(model, pairs=pairs, slots_per_rank=spr, active=active, moe_tp=par.moe_tp, layout=layout)
    ops.append(allreduce("moe_tp_allreduce", np.where(par.ep > 1, pairs, t * par.moe_tp / par.tp), d, par.moe_tp, 4))
    return ops


def _moe_collectives(model: ModelSpec, par: MoeParallel, t, gather, reduce) -> list[OpWork]:
    """Without an all-to-all (issue 27): the DP ranks' tokens all-gathered to every rank of the MoE
    group before the experts (FP8 + scales, the dispatch message) and the expert outputs
    reduce-scattered back (BF16); with attention TP only, every rank already holds the batch and the
    output is all-reduced (vLLM allgather_reducescatter / FusedMoE all-reduce; TRT-LLM CUTLASS MoE;
    SGLang dp_gather / FusedMoE: moesim/specs/engines/*.yaml execution.without_a2a_*). `gather`,
    `reduce`: 1 where the configuration takes that path."""
    d, p = model.hidden_size, model.precision
    gpus, rows = par.tp * par.dp, t * par.dp
    return [
        allgather("moe_all_gather", rows * a2a_message_bytes("dispatch", d, p), gpus, 3, present=gather),
        allgather("moe_reduce_scatter", rows * a2a_message_bytes("combine", d, p), gpus, 4, present=gather),
        allreduce("moe_ep_allreduce", t, d, gpus, 4, present=reduce),
    ]


def _shared_expert(model: ModelSpec, par: MoeParallel, t, own) -> list[OpWork]:
    """The shared expert (stage 3): where `own` (the all-to-all, or no EP) one copy per EP rank on its
    tokens t*moe_tp/tp, sharded by moe_tp; elsewhere sharded like attention (TP) over the DP group's
    tokens (TRT-LLM modeling_deepseekv3.py: shared_tp_size = 1 with attention DP, else tp_size)."""
    m, d, p = model.moe, model.hidden_size, model.precision
    ab, blk = p.activation_dtype.bytes, p.weight_block
    ms = own * t * par.moe_tp / par.tp + (1.0 - own) * t
    ws = own * m.shared_width / par.moe_tp + (1.0 - own) * m.shared_width / par.tp
    return [
        quant_pass("shared_quant", ms, d, a_bytes=ab, block=blk, stage=3, tags={Tag.ACT_QUANT}),
        gemm("shared_gate_up", ms, 2 * ws, d, linear_kw(p), stage=3),
        _act("shared_act", ms, ws, 3, out_bytes=2.0),
        quant_pass("shared_down_quant", ms, ws, a_bytes=ab, block=blk, stage=3, tags={Tag.ACT_QUANT}),
        gemm("shared_down", ms, d, ws, linear_kw(p), stage=3),
    ]
