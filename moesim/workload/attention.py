"""Attention ops per GPU per layer: MLA (absorbed for decode, MHA form for prefill) and GQA/MHA.

Sharding (Perplexity seed 004, "Tensor parallelism"): attention TP splits heads; MLA's down
projections (q_a, kv_a) and the latent KV are replicated on every TP rank; GQA shards KV heads
(replicated when kv_heads < tp). DP attention replicates all attention weights per DP group.
"""

from __future__ import annotations

import numpy as np

from moesim.enums import Dtype, OpKind, Stream
from moesim.specs.model import AttentionKind, ModelSpec
from moesim.workload.comm import ring_allreduce_bytes
from moesim.workload.ops import OpWork, elementwise, gemm


def _tp_allreduce(name, t, d, tp, stage) -> OpWork:
    msg = t * d * 2.0  # BF16 hidden states
    return OpWork(
        name=name,
        kind=OpKind.COLLECTIVE,
        dtype=Dtype.BF16,
        stage=stage,
        stream=Stream.COMM,
        net_bytes_nvlink=ring_allreduce_bytes(tp, msg),
        group=tp,
        comm_op="all_reduce",
        shape={"bytes": msg, "gpus": tp},
        present=(tp > 1).astype(float),
    )


def core_op(model: ModelSpec, *, t, b_req, q_len, context, tp, prefill: bool) -> OpWork:
    """The attention core (the only op whose cost depends on the context length)."""
    a, p = model.attention, model.precision
    kvb = p.kv_dtype.bytes
    h = a.num_heads / tp
    if a.kind == AttentionKind.MLA:
        lat, rope, nope, vd = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        qd = nope + rope
        if prefill:
            # MHA form, causal: each token attends to context/2 keys on average (seed 002: 81,920
            # FLOP per token per key per layer = 2 * 128 heads * (192 + 128))
            flops = 2.0 * h * t * (context / 2.0) * (qd + vd)
            act = t * h * (qd + qd + vd + vd) * 2.0 + t * (lat + rope) * kvb
            return OpWork(
                "attn_core",
                OpKind.ATTENTION,
                p.attention_dtype,
                2,
                flops=flops,
                bytes_act=act,
                shape={
                    "batch": b_req,
                    "q_len": t / np.maximum(b_req, 1e-9),
                    "context": context,
                    "heads": h,
                    "prefill": True,
                },
            )
        # FlashMLA decode: QK over 576 dims, PV over 512 (seed 002: 278,528 FLOP per token per key)
        flops = 2.0 * b_req * q_len * h * context * ((lat + rope) + lat)
        kv = b_req * context * (lat + rope) * kvb
        act = b_req * q_len * h * ((lat + rope) + lat) * 2.0
        return OpWork(
            "attn_core",
            OpKind.ATTENTION,
            p.attention_dtype,
            2,
            flops=flops,
            bytes_kv=kv,
            bytes_act=act,
            shape={"batch": b_req, "q_len": q_len, "context": context, "heads": h, "prefill": False},
        )
    hd = model.head_dim
    kvh = np.maximum(a.kv_heads / tp, 1.0)
    if prefill:
        flops = 2.0 * h * t * (context / 2.0) * hd * 2.0
        act = t * (h * hd * 2 + 2 * kvh * hd) * 2.0 + t * 2 * kvh * hd * kvb
        return OpWork(
            "attn_core",
            OpKind.ATTENTION,
            p.attention_dtype,
            2,
            flops=flops,
            bytes_act=act,
            shape={
                "batch": b_req,
                "q_len": t / np.maximum(b_req, 1e-9),
                "context": context,
                "heads": h,
                "prefill": True,
            },
        )
    flops = 2.0 * b_req * q_len * h * context * hd * 2.0
    kv = b_req * context * 2.0 * kvh * hd * kvb
    return OpWork(
        "attn_core",
        OpKind.ATTENTION,
        p.attention_dtype,
        2,
        flops=flops,
        bytes_kv=kv,
        bytes_act=t * h * hd * 2.0 * 2.0,
        shape={"batch": b_req, "q_len": q_len, "context": context, "heads": h, "prefill": False},
    )


def _o_proj_quant(t, width, a_bytes, block):
    """The attention output leaves its kernel in BF16; an FP8 o_proj needs a per-token-group
    quantisation pass first (DeepSeek's decode profile shows it as its own kernel): read BF16,
    write FP8 plus one FP32 scale per `block` elements. None when activations stay 16-bit."""
    if a_bytes >= 2:
        return []
    return [elementwise("o_proj_quant", t * width * (2.0 + a_bytes + (4.0 / block if block else 0.0)), stage=2)]


def attention_ops(model: ModelSpec, *, t, b_req, q_len, context, tp, prefill: bool) -> list[OpWork]:
    """t: tokens per GPU's DP group per micro-batch; b_req: requests (decode) or sequences (prefill)."""
    a, d, p = model.attention, model.hidden_size, model.precision
    wb, ab = p.weight_dtype.bytes, p.activation_dtype.bytes
    kvb = p.kv_dtype.bytes
    blk = p.weight_block
    h = a.num_heads / tp
    ops = [elementwise("attn_norm", t * d * 2.0 * 2.0, stage=1)]
    if a.kind == AttentionKind.MLA:
        lat, rope, nope, vd = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        qd = nope + rope
        if a.q_lora_rank:
            # fused q_a + kv_a down projection (Perplexity: qkv_a_proj), replicated across TP
            ops.append(gemm("qkv_a_proj", t, a.q_lora_rank + lat + rope, d, w_bytes=wb, a_bytes=ab, block=blk, stage=1))
            ops.append(elementwise("qkv_a_norm", t * (a.q_lora_rank + lat) * 2.0 * 2.0, stage=1))
            ops.append(gemm("q_b_proj", t, h * qd, a.q_lora_rank, w_bytes=wb, a_bytes=ab, block=blk, stage=1))
        else:
            ops.append(gemm("kv_a_proj", t, lat + rope, d, w_bytes=wb, a_bytes=ab, block=blk, stage=1))
            ops.append(elementwise("kv_a_norm", t * lat * 2.0 * 2.0, stage=1))
            ops.append(gemm("q_proj", t, h * qd, d, w_bytes=wb, a_bytes=ab, block=blk, stage=1))
        if prefill:
            # MHA form: expand the latent into per-head K_nope and V (kv_b_proj), then causal attention
            ops.append(gemm("kv_b_proj", t, h * (nope + vd), lat, w_bytes=wb, a_bytes=ab, block=blk, stage=1))
            ops.append(core_op(model, t=t, b_req=b_req, q_len=q_len, context=context, tp=tp, prefill=True))
        else:
            # absorbed form (DeepSeek-V2 paper app. C): q_nope . W_UK, attention over the latent, . W_UV
            ops.append(
                OpWork(
                    "w_uk_bmm",
                    OpKind.BMM,
                    p.weight_dtype,
                    1,
                    flops=2.0 * t * h * nope * lat,
                    bytes_weight=h * nope * lat * wb * np.ones_like(t),
                    bytes_act=t * h * (nope * ab + lat * 2.0),
                    shape={"m": t, "n": lat * np.ones_like(t), "k": nope * np.ones_like(t), "groups": h},
                )
            )
            ops.append(elementwise("rope_kv_append", t * (lat + rope) * kvb * 2.0, stage=1))
            ops.append(core_op(model, t=t, b_req=b_req, q_len=q_len, context=context, tp=tp, prefill=False))
            ops.append(
                OpWork(
                    "w_uv_bmm",
                    OpKind.BMM,
                    p.weight_dtype,
                    2,
                    flops=2.0 * t * h * lat * vd,
                    bytes_weight=h * lat * vd * wb * np.ones_like(t),
                    bytes_act=t * h * (lat * 2.0 + vd * 2.0),
                    shape={"m": t, "n": vd * np.ones_like(t), "k": lat * np.ones_like(t), "groups": h},
                )
            )
        ops += _o_proj_quant(t, h * vd, ab, blk)
        ops.append(gemm("o_proj", t, d, h * vd, w_bytes=wb, a_bytes=ab, block=blk, stage=2))
    else:
        hd = model.head_dim
        kvh = np.maximum(a.kv_heads / tp, 1.0)  # KV heads replicate when fewer than TP ranks
        ops.append(gemm("qkv_proj", t, (h + 2 * kvh) * hd, d, w_bytes=wb, a_bytes=ab, block=blk, stage=1))
        ops.append(core_op(model, t=t, b_req=b_req, q_len=q_len, context=context, tp=tp, prefill=prefill))
        ops += _o_proj_quant(t, h * hd, ab, blk)
        ops.append(gemm("o_proj", t, d, h * hd, w_bytes=wb, a_bytes=ab, block=blk, stage=2))
    ops.append(_tp_allreduce("attn_tp_allreduce", t, d, tp, stage=2))
    ops.append(elementwise("ffn_norm", t * d * 2.0 * 2.0, stage=2))
    return ops
