"""FFN ops per GPU per layer: dense MLP, and MoE (router, shared expert, routed grouped GEMM,
EP dispatch/combine). Seeds 002/004: EP = DP x TP; each GPU holds (experts + redundant)/EP slots
and a shared-expert copy; tokens reach their top-k experts through all-to-all.
"""

from __future__ import annotations

import numpy as np

from moesim.enums import CommMode, Dtype, OpKind, Stream
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.comm import combine_bytes_per_token, dispatch_bytes_per_token, ring_allreduce_bytes, routed_copies
from moesim.workload.ops import OpWork, elementwise, gemm

# SMs held by comm kernels while in flight. DeepSeek's prefill overlap figure: 108 compute / 24
# communication SMs for DeepEP normal kernels (OII-016); decode figure 132 / 0 for the low-latency
# kernels with the receive hook (OII-017). Others: not published -> 0 (optimistic, stated).
COMM_SMS = {CommMode.DEEPEP_NORMAL: 24.0}


def _act(name, m, width, stage):
    # SiLU(gate) * up, then FP8 re-quantisation of the result: read 2 x width BF16, write width FP8
    return elementwise(name, m * width * (2.0 * 2.0 + 1.0), stage=stage)


def _allreduce(name, m, d, n, stage):
    msg = m * d * 2.0
    return OpWork(
        name=name,
        kind=OpKind.COLLECTIVE,
        dtype=Dtype.BF16,
        stage=stage,
        stream=Stream.COMM,
        net_bytes_nvlink=ring_allreduce_bytes(n, msg),
        group=n,
        comm_op="all_reduce",
        shape={"bytes": msg, "gpus": n},
        present=(np.asarray(n) > 1).astype(float),
    )


def dense_ffn_ops(model: ModelSpec, *, t, tp) -> list[OpWork]:
    f, d, p = model.dense_ffn, model.hidden_size, model.precision
    wb, ab, blk = p.weight_dtype.bytes, p.activation_dtype.bytes, p.weight_block
    width = f.intermediate_size / tp
    ops = [
        gemm("mlp_gate_up", t, (2 if f.gated else 1) * width, d, w_bytes=wb, a_bytes=ab, block=blk, stage=3),
        _act("mlp_act", t, width, 3),
        gemm("mlp_down", t, d, width, w_bytes=wb, a_bytes=ab, block=blk, stage=4),
        _allreduce("mlp_tp_allreduce", t, d, tp, 4),
    ]
    return ops


def expected_active_slots(slots_per_rank, slots, top_k, tokens_in_group):
    """E[# local expert slots receiving >= 1 token]: each token hits a given slot w.p. k/S
    (uniform routing); P(idle) = (1 - k/S)^tokens (Perplexity seed 004: batch 1 on EP8 activates
    2*8/8 = 2 experts per GPU)."""
    p_idle = np.power(np.clip(1.0 - top_k / slots, 0.0, 1.0), tokens_in_group)
    return slots_per_rank * (1.0 - p_idle)


def moe_ops(
    model: ModelSpec, hw: HardwareSpec, *, t, tp, dp, ep, moe_tp, redundant, comm: CommMode, prefill: bool
) -> list[OpWork]:
    m, d, p = model.moe, model.hidden_size, model.precision
    wb, ab, blk = p.weight_dtype.bytes, p.activation_dtype.bytes, p.weight_block
    k = m.top_k
    ops = [
        gemm("router", t, m.num_experts, d, w_bytes=2.0, a_bytes=2.0, out_bytes=4.0, dtype=Dtype.BF16, block=0, stage=2)
    ]
    has_ep = (ep > 1).astype(float)
    # --- dispatch (stage 3): tokens per GPU = t / tp (DP attention + sequence-parallel scatter)
    src_tokens = t / tp
    slots = m.num_experts + redundant
    # group-limited routing (V3: top-4 of 8 expert groups) confines a token to fewer nodes
    rdma_c, nvl_c = routed_copies(comm, ep, hw.domain_gpus, slots, k, m.n_group, m.topk_group)
    disp_msg = dispatch_bytes_per_token(d, p.dispatch_dtype.bytes, 128)
    comb_msg = combine_bytes_per_token(d, p.combine_dtype.bytes)
    sm_share = COMM_SMS.get(comm, 0.0) / hw.sms
    for name, msg, stage in (("dispatch", disp_msg, 3), ("combine", comb_msg, 4)):
        ops.append(
            OpWork(
                name=name,
                kind=OpKind.ALL_TO_ALL,
                dtype=p.dispatch_dtype if name == "dispatch" else p.combine_dtype,
                stage=stage,
                stream=Stream.COMM,
                net_bytes_rdma=src_tokens * rdma_c * msg * moe_tp,
                net_bytes_nvlink=src_tokens * nvl_c * msg * moe_tp,
                group=ep,
                comm_op=name,
                shape={"ep": ep, "tokens": src_tokens, "mode": comm.value},
                present=has_ep,
                sm_share=sm_share,
            )
        )
    # --- shared expert (stage 3): one copy per EP rank, tokens t*moe_tp/tp, sharded by moe_tp
    if m.shared_width:
        ms = t * moe_tp / tp
        ws = m.shared_width / moe_tp
        ops += [
            gemm("shared_gate_up", ms, 2 * ws, d, w_bytes=wb, a_bytes=ab, block=blk, stage=3),
            _act("shared_act", ms, ws, 3),
            gemm("shared_down", ms, d, ws, w_bytes=wb, a_bytes=ab, block=blk, stage=3),
        ]
    # --- routed experts (stage 4): grouped GEMM over the slots on this rank
    spr = slots / ep
    pairs = t * dp * k / ep  # token-expert pairs landing on one EP rank (uniform routing)
    active = expected_active_slots(spr, slots, k, t * dp)
    wi = m.expert_intermediate_size / moe_tp
    layout = "contiguous" if prefill else "masked"
    wscale = 4.0 / (blk * blk) if (wb < 2 and blk) else 0.0
    ascale = 4.0 / blk if (ab < 2 and blk) else 0.0
    for name, n_, k_ in (("experts_gate_up", 2 * wi, d), ("experts_down", d, wi)):
        ops.append(
            OpWork(
                name=name,
                kind=OpKind.GROUPED_GEMM,
                dtype=p.weight_dtype,
                stage=4,
                flops=2.0 * pairs * n_ * k_,
                bytes_weight=active * n_ * k_ * (wb + wscale),
                bytes_act=pairs * (k_ * (ab + ascale) + n_ * 2.0),
                shape={
                    "m": pairs / np.maximum(spr, 1e-9),
                    "n": n_ * np.ones_like(pairs),
                    "k": k_ * np.ones_like(pairs),
                    "groups": spr * np.ones_like(pairs),
                    "layout": layout,
                    "routed": True,
                },
            )
        )
        if name == "experts_gate_up":
            ops.append(_act("experts_act", pairs, wi, 4))
    ops.append(_allreduce("moe_tp_allreduce", np.where(ep > 1, pairs, t * moe_tp / tp), d, moe_tp, 4))
    return ops
