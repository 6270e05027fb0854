"""Attention ops per GPU per layer: MLA (absorbed for decode, MHA form for prefill) and GQA/MHA.

Sharding (Perplexity seed 004, "Tensor parallelism"): attention TP splits heads; MLA's down
projections (q_a, kv_a) and the latent KV are replicated on every TP rank; GQA shards KV heads
(replicated when kv_heads < tp). DP attention replicates all attention weights per DP group.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from moesim.enums import OpKind, Tag
from moesim.specs.model import AttentionKind, ModelSpec
from moesim.workload.ops import (
    Operands,
    OpWork,
    act_elem_bytes,
    allreduce,
    bmm,
    elementwise,
    gemm,
    linear_kw,
    quant_pass,
)
from moesim.workload.shapes import AttentionShape

CORE_TAGS = frozenset({Tag.CORE})


def mla_decode_work(batch, q_len, heads, context, *, latent, rope, kv_bytes, q_bytes=2.0):
    """(flops, kv_read, q_read, out_written) of absorbed MLA decode attention over the latent KV
    cache (FlashMLA; DeepSeek-V2 paper app. C): QK over latent + rope dims, PV over the latent
    (V3: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 and 512; seed 002: 278,528 FLOP per token
    per key at 128 heads). Reads the cache b * ctx * (latent + rope) and the queries; writes
    b * s_q * h * latent outputs."""
    b = np.asarray(batch, float)
    s = np.asarray(q_len, float)
    h = np.asarray(heads, float)
    c = np.asarray(context, float)
    qk, v = latent + rope, latent
    flops = 2.0 * b * s * h * c * (qk + v)
    return flops, b * c * qk * kv_bytes, b * s * h * qk * q_bytes, b * s * h * v * q_bytes


def mla_prefill_work(tokens, heads, context, *, qk_head_dim, v_head_dim, latent, rope, kv_bytes):
    """(flops, act_bytes) of MLA prefill attention in MHA form, causal: each token attends to
    context/2 keys on average (seed 002: 81,920 FLOP per token per key per layer = 2 * 128 heads
    * (192 + 128)); reads Q, K, V and writes O in BF16, and reads the latent cache it expands."""
    t = np.asarray(tokens, float)
    flops = 2.0 * heads * t * (context / 2.0) * (qk_head_dim + v_head_dim)
    act = t * heads * (qk_head_dim + qk_head_dim + v_head_dim + v_head_dim) * 2.0 + t * (latent + rope) * kv_bytes
    return flops, act


def gqa_prefill_work(tokens, heads, kv_heads, head_dim, context, *, kv_bytes):
    """(flops, act_bytes) of causal MHA/GQA prefill attention: each token attends to context/2 keys
    on average, QK and PV over head_dim; reads Q, K, V and writes O in BF16, writes the KV cache."""
    t = np.asarray(tokens, float)
    flops = 2.0 * heads * t * (context / 2.0) * head_dim * 2.0
    act = t * (heads * head_dim * 2 + 2 * kv_heads * head_dim) * 2.0 + t * 2 * kv_heads * head_dim * kv_bytes
    return flops, act


def gqa_decode_work(batch, q_len, heads, kv_heads, head_dim, context, *, kv_bytes, tokens=None):
    """(flops, kv_read, act_bytes) of MHA/GQA decode attention: QK and PV over head_dim for every
    query row and key; reads the K and V cache of the kv_heads; reads Q and writes O in BF16."""
    b, s = np.asarray(batch, float), np.asarray(q_len, float)
    t = b * s if tokens is None else tokens
    flops = 2.0 * b * s * heads * context * head_dim * 2.0
    kv = b * context * 2.0 * kv_heads * head_dim * kv_bytes
    return flops, kv, t * heads * head_dim * 2.0 * 2.0


def _core(model: ModelSpec, name, flops, *, act, kv=0.0, **geometry) -> OpWork:
    """The attention core op; its shape (AttentionShape of `geometry`: batch, q_len, context, heads,
    prefill, and for MHA/GQA the KV heads `groups` and head dim `k`) names the kernel's geometry for
    the calibrated kernel models (moesim.perf.attention_eff), with the model's KV cache dtype."""
    return OpWork(
        name,
        OpKind.ATTENTION,
        model.precision.attention_dtype,
        2,
        flops=flops,
        bytes_kv=kv,
        bytes_act=act,
        shape=AttentionShape(kv_dtype=model.precision.kv_dtype.value, **geometry),
        tags=CORE_TAGS,
    )


def mla_core_op(model: ModelSpec, *, t, b_req, q_len, context, heads, prefill: bool, name="attn_core") -> OpWork:
    """The MLA attention core: MHA form for prefill, absorbed form over the latent for decode."""
    a, kvb = model.attention, model.precision.kv_dtype.bytes
    lat, rope = a.kv_lora_rank, a.qk_rope_head_dim
    if prefill:
        flops, act = mla_prefill_work(
            t,
            heads,
            context,
            qk_head_dim=a.qk_nope_head_dim + rope,
            v_head_dim=a.v_head_dim,
            latent=lat,
            rope=rope,
            kv_bytes=kvb,
        )
        q = t / np.maximum(b_req, 1e-9)
        return _core(model, name, flops, act=act, batch=b_req, q_len=q, context=context, heads=heads, prefill=True)
    flops, kv, q_in, out = mla_decode_work(b_req, q_len, heads, context, latent=lat, rope=rope, kv_bytes=kvb)
    return _core(
        model, name, flops, act=q_in + out, kv=kv, batch=b_req, q_len=q_len, context=context, heads=heads, prefill=False
    )


def core_op(model: ModelSpec, *, t, b_req, q_len, context, tp, prefill: bool) -> OpWork:
    """The attention core (the only op whose cost depends on the context length)."""
    a, p = model.attention, model.precision
    h = a.num_heads / tp
    if a.kind == AttentionKind.MLA:
        return mla_core_op(model, t=t, b_req=b_req, q_len=q_len, context=context, heads=h, prefill=prefill)
    kvb = p.kv_dtype.bytes
    hd = model.head_dim
    kvh = np.maximum(a.kv_heads / tp, 1.0)
    if prefill:
        flops, act = gqa_prefill_work(t, h, kvh, hd, context, kv_bytes=kvb)
        q = t / np.maximum(b_req, 1e-9)
        return _core(
            model,
            "attn_core",
            flops,
            act=act,
            batch=b_req,
            q_len=q,
            context=context,
            heads=h,
            prefill=True,
            groups=kvh,
            k=hd,
        )
    flops, kv, act = gqa_decode_work(b_req, q_len, h, kvh, hd, context, kv_bytes=kvb, tokens=t)
    return _core(
        model, "attn_core", flops, act=act, kv=kv, batch=b_req, q_len=q_len, context=context, heads=h, prefill=False,
        groups=kvh, k=hd,
    )  # fmt: skip


def _bmm(name, t, h, n, k, *, w_bytes, a_bytes, dtype, stage) -> OpWork:
    """Per-head batched matmul of the absorbed MLA form (h heads, [t, k] x [k, n] each); BF16
    output, no block scales counted (work: matmul_work)."""
    return bmm(name, t, h, n, k, Operands(w_bytes=w_bytes, a_bytes=a_bytes, dtype=dtype, block=0), stage=stage)


def _o_proj_quant(t, width, a_bytes, block):
    """The attention output leaves its kernel in BF16; an FP8 o_proj needs a per-token-group
    quantisation pass first (DeepSeek's decode profile shows it as its own kernel): read BF16,
    write FP8 plus one FP32 scale per `block` elements. None when activations stay 16-bit; block-scaled:
    a `quant` kernel like the other input quants (_in_quant)."""
    if a_bytes >= 2:
        return []
    if block:
        return _in_quant("o_proj_quant", t, width, a_bytes, block, stage=2)
    nbytes = t * width * (2.0 + act_elem_bytes(a_bytes, block))
    return [elementwise("o_proj_quant", nbytes, stage=2, tags=frozenset({Tag.ACT_QUANT}))]


def _in_quant(name, t, k, a_bytes, block, stage=1):
    """The input quant of a block-FP8 projection fed by a BF16 norm output: the engine's FP8 linear op
    runs per_token_group_quant_fp8 before the GEMM (SGLang Fp8LinearMethod; aiconfigurator's GEMM rows
    time both, moesim.calibration.fit.act_quant): its own kernel, priced by the `quant` family. None
    when activations stay 16-bit or are not block-scaled."""
    if a_bytes >= 2 or not block:
        return []
    return [quant_pass(name, t, k, a_bytes=a_bytes, block=block, stage=stage, tags=frozenset({Tag.ACT_QUANT}))]


def _mla_form_ops(model: ModelSpec, *, t, b_req, q_len, context, tp, prefill: bool, prefix="", present=1.0):
    """The MLA ops of one attention form after the shared projections: MHA form for prefill
    (kv_b_proj expands the latent into per-head K_nope and V, then causal attention), absorbed form
    for decode (DeepSeek-V2 paper app. C: q_nope . W_UK, attention over the latent, . W_UV)."""
    a, p = model.attention, model.precision
    wb, ab, kvb, blk = p.weight_dtype.bytes, p.activation_dtype.bytes, p.kv_dtype.bytes, p.weight_block
    h = a.num_heads / tp
    lat, rope, nope, vd = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
    core = core_op(model, t=t, b_req=b_req, q_len=q_len, context=context, tp=tp, prefill=prefill)
    if prefill:
        kv_b = gemm("kv_b_proj", t, h * (nope + vd), lat, linear_kw(p), stage=1)
        ops = [*_in_quant("kv_b_quant", t, lat, ab, blk), kv_b, core]
    else:
        # FP8 absorb BMMs quantise their BF16 inputs (q_nope, the attention output) in their own pass
        # (SGLang forward_absorb: per_tensor_quant_mla_fp8, then bmm_fp8), priced as the quant pass
        ops = [
            *_in_quant("w_uk_quant", t, h * nope, ab, blk),
            _bmm("w_uk_bmm", t, h, lat, nope, w_bytes=wb, a_bytes=ab, dtype=p.weight_dtype, stage=1),
            elementwise("rope_kv_append", t * (lat + rope) * kvb * 2.0, stage=1),
            core,
            *_in_quant("w_uv_quant", t, h * lat, ab, blk, stage=2),
            _bmm("w_uv_bmm", t, h, vd, lat, w_bytes=wb, a_bytes=ab, dtype=p.weight_dtype, stage=2),
        ]
    return [dataclasses.replace(o, name=prefix + o.name, present=present) for o in ops]


def _form_ops(model: ModelSpec, *, t, b_req, q_len, context, tp, prefill: bool, chunk=None) -> list[OpWork]:
    """The per-request part of attention (the core; for MLA its form-specific projections). `chunk`
    (tokens, b_req, context): prefill tokens fused into a decode pass (vLLM V1 / TRT-LLM chunked
    prefill): their own MHA-form ops next to the decode's, named prefill_<op>; the weights of the
    shared projections are read once for all tokens (`attention_ops`)."""
    kw = dict(q_len=q_len, tp=tp)
    if model.attention.kind == AttentionKind.MLA:
        ops = _mla_form_ops(model, t=t, b_req=b_req, context=context, prefill=prefill, **kw)
    else:
        ops = [core_op(model, t=t, b_req=b_req, context=context, prefill=prefill, **kw)]
    if chunk is None:
        return ops
    ct, cb, cc = chunk
    present = (np.asarray(ct, float) > 0).astype(float)
    if model.attention.kind == AttentionKind.MLA:
        return ops + _mla_form_ops(model, t=ct, b_req=cb, context=cc, tp=tp, q_len=1.0, prefill=True,
                                   prefix="prefill_", present=present)  # fmt: skip
    core = core_op(model, t=ct, b_req=cb, q_len=1.0, context=cc, tp=tp, prefill=True)
    return ops + [dataclasses.replace(core, name="prefill_" + core.name, present=present)]


def attention_ops(model: ModelSpec, *, t, b_req, q_len, context, tp, prefill: bool, chunk=None) -> list[OpWork]:
    """t: tokens per GPU's DP group per micro-batch; b_req: requests (decode) or sequences (prefill).
    chunk: (tokens, sequences, prompt length) of prefill fused into a decode pass, or None."""
    a, d, p = model.attention, model.hidden_size, model.precision
    ab, blk = p.activation_dtype.bytes, p.weight_block
    h = a.num_heads / tp
    t_all = t if chunk is None else t + chunk[0]  # tokens through the shared projections
    form = _form_ops(model, t=t, b_req=b_req, q_len=q_len, context=context, tp=tp, prefill=prefill, chunk=chunk)
    ops = [elementwise("attn_norm", t_all * d * 2.0 * 2.0, stage=1)]
    if a.kind == AttentionKind.MLA:
        lat, rope, vd = a.kv_lora_rank, a.qk_rope_head_dim, a.v_head_dim
        qd = a.qk_nope_head_dim + rope
        if a.q_lora_rank:
            # fused q_a + kv_a down projection (Perplexity: qkv_a_proj), replicated across TP
            ops += _in_quant("qkv_a_quant", t_all, d, ab, blk)
            ops.append(gemm("qkv_a_proj", t_all, a.q_lora_rank + lat + rope, d, linear_kw(p), stage=1))
            ops.append(elementwise("qkv_a_norm", t_all * (a.q_lora_rank + lat) * 2.0 * 2.0, stage=1))
            ops += _in_quant("q_b_quant", t_all, a.q_lora_rank, ab, blk)
            ops.append(gemm("q_b_proj", t_all, h * qd, a.q_lora_rank, linear_kw(p), stage=1))
        else:
            ops += _in_quant("qkv_a_quant", t_all, d, ab, blk)  # one pass: kv_a_proj and q_proj share the input
            ops.append(gemm("kv_a_proj", t_all, lat + rope, d, linear_kw(p), stage=1))
            ops.append(elementwise("kv_a_norm", t_all * lat * 2.0 * 2.0, stage=1))
            ops.append(gemm("q_proj", t_all, h * qd, d, linear_kw(p), stage=1))
        ops += form
        width = h * vd
    else:
        hd = model.head_dim
        kvh = np.maximum(a.kv_heads / tp, 1.0)  # KV heads replicate when fewer than TP ranks
        ops += _in_quant("qkv_quant", t_all, d, ab, blk)
        ops.append(gemm("qkv_proj", t_all, (h + 2 * kvh) * hd, d, linear_kw(p), stage=1))
        ops += form
        width = h * hd
    ops += _o_proj_quant(t_all, width, ab, blk)
    ops.append(gemm("o_proj", t_all, d, width, linear_kw(p), stage=2))
    ops.append(allreduce("attn_tp_allreduce", t_all, d, tp, 2))
    ops.append(elementwise("ffn_norm", t_all * d * 2.0 * 2.0, stage=2))
    return ops
