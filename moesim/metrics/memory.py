"""Memory per GPU: weights by part, KV cache, activations, communication buffers, reserve."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.enums import CommMode, Phase
from moesim.grid.core import Grid
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import AttentionKind, ModelSpec
from moesim.workload.comm import combine_bytes_per_token, dispatch_bytes_per_token
from moesim.workload.ops import weight_elem_bytes


@dataclass
class Memory:
    weights_attention_bytes: np.ndarray
    weights_experts_bytes: np.ndarray
    weights_shared_bytes: np.ndarray
    weights_dense_bytes: np.ndarray
    weights_embedding_bytes: np.ndarray
    weights_mtp_bytes: np.ndarray
    kv_cache_bytes: np.ndarray
    activation_bytes: np.ndarray
    comm_buffer_bytes: np.ndarray
    reserve_bytes: float
    capacity_bytes: float
    kv_bytes_per_request: np.ndarray  # marginal bytes per extra request (decode) / token (prefill)
    fixed_bytes: np.ndarray
    # exact total(b) = base_bytes + b * per_unit_bytes + block_bytes * max(ceil(b * block_tokens_per_unit / 128), 1)
    # (the DeepEP low-latency buffers grow in 128-token blocks); None: affine in batch (fixed + b * per request)
    base_bytes: np.ndarray = None
    per_unit_bytes: np.ndarray = None
    block_bytes: np.ndarray = None
    block_tokens_per_unit: np.ndarray = None

    @property
    def weights_bytes(self):
        return (
            self.weights_attention_bytes
            + self.weights_experts_bytes
            + self.weights_shared_bytes
            + self.weights_dense_bytes
            + self.weights_embedding_bytes
            + self.weights_mtp_bytes
        )

    @property
    def total_bytes(self):
        return (
            self.weights_bytes
            + self.kv_cache_bytes
            + self.activation_bytes
            + self.comm_buffer_bytes
            + self.reserve_bytes
        )

    @property
    def fits(self):
        return self.total_bytes <= self.capacity_bytes


def _wfactor(model: ModelSpec) -> float:
    """Bytes per weight incl. FP8 block scales (one fp32 per 128x128 block)."""
    p = model.precision
    return weight_elem_bytes(p.weight_dtype.bytes, p.weight_block)


def attention_weight_params_per_gpu(model: ModelSpec, tp):
    """Attention params on one GPU: heads sharded by TP; MLA down-projections replicated."""
    a, d = model.attention, model.hidden_size
    tp = np.asarray(tp, float)
    if a.kind == AttentionKind.MLA:
        replicated = (
            d * (a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim)
            if a.q_lora_rank
            else d * (a.kv_lora_rank + a.qk_rope_head_dim)
        )
        return replicated + (model.attention_params() - replicated) / tp
    hd, kvh = model.head_dim, model.kv_heads
    kv_per_gpu = np.maximum(kvh / tp, 1.0)  # KV heads replicate once TP exceeds them
    q_o = 2.0 * d * a.num_heads * hd / tp
    kv = 2.0 * d * hd * kv_per_gpu
    bias = (a.num_heads / tp + 2.0 * kv_per_gpu) * hd if a.qkv_bias else 0.0  # as ModelSpec.attention_params
    return q_o + kv + bias


def _weights(model: ModelSpec, grid: Grid):
    """Weight bytes per GPU: (attention, routed experts, shared expert + router, dense FFN,
    embedding + LM head, MTP modules)."""
    wf = _wfactor(model)
    L = model.num_layers
    tp, ep, moe_tp = grid.tp, grid.ep, grid.moe_tp
    d = model.hidden_size
    attn = (attention_weight_params_per_gpu(model, tp) * wf + model.layer_norm_params() * 2.0) * L
    n_moe, n_dense = model.n_moe_layers, model.n_dense_layers
    z = np.zeros(grid.size)
    experts = shared = z
    if model.is_moe:
        slots_per_rank = (model.moe.num_experts + grid.redundant) / ep
        experts = slots_per_rank * model.expert_params() / moe_tp * wf * n_moe
        shared = (model.shared_expert_params() / moe_tp * wf + model.router_params() * 2.0) * n_moe
    dense = model.dense_ffn_params() / tp * wf * n_dense + z
    emb_b = model.precision.embedding_dtype.bytes
    embedding = model.embedding_params() / tp * emb_b + z  # vocab-parallel embedding and LM head
    mtp = z
    if model.mtp_layers:
        per_layer = attention_weight_params_per_gpu(model, tp) * wf + 2.0 * d * d * wf
        if model.is_moe:
            per_layer = (
                per_layer
                + (model.moe.num_experts + grid.redundant) / ep * model.expert_params() / moe_tp * wf
                + model.shared_expert_params() / moe_tp * wf
            )
        mtp = model.mtp_layers * per_layer
    return attn, experts, shared, dense, embedding, mtp


def _kv_per_unit(model: ModelSpec, grid: Grid, phase: Phase):
    """KV bytes per request (decode: context + q_len tokens) or per prompt token (prefill). MLA
    latent replicated on every attention-TP rank; GQA KV heads sharded."""
    kv_per_token_layer = model.kv_latent_dim * model.precision.kv_dtype.bytes
    if model.attention.kind != AttentionKind.MLA:
        kv_per_token_layer = kv_per_token_layer * np.maximum(model.kv_heads / grid.tp, 1.0) / model.kv_heads
    kv_layers = model.num_layers + model.mtp_layers
    if phase == Phase.PREFILL:
        return kv_per_token_layer * kv_layers + np.zeros(grid.size)  # per prompt token held during prefill
    return (grid.context + grid.q_len) * kv_per_token_layer * kv_layers


def _act_per_token(model: ModelSpec, grid: Grid, phase: Phase):
    """Peak live activation bytes per token of one layer (residual + norm out + q/kv + attention
    out + MoE gate/up) in BF16, plus FP32 logits in decode — from the op shapes, an upper-bound
    style estimate."""
    tp, moe_tp, d = grid.tp, grid.moe_tp, model.hidden_size
    width = d * 4.0 + model.attention.num_heads / tp * (model.q_head_dim + model.head_dim) * 2.0
    if model.is_moe:
        width = width + model.moe.top_k * (moe_tp / tp) * model.moe.expert_intermediate_size / moe_tp * 3.0
    elif model.dense_ffn:
        width = width + 3.0 * model.dense_ffn.intermediate_size / tp
    return width * 2.0 + model.vocab_size / tp * 4.0 * (0.0 if phase == Phase.PREFILL else 1.0)


def _comm_buffers(model: ModelSpec, grid: Grid, phase: Phase, comm: CommMode, tokens):
    """(bytes at this batch, bytes per extra batch unit) of the EP communication buffers.

    DeepEP LL buffers hold num_max_dispatch_tokens_per_rank (>= 128) tokens per expert for
    dispatch (FP8 + scales) and combine (BF16), double-buffered (DeepEP README /
    Buffer.get_low_latency_rdma_size_hint); normal mode: DeepEP defaults 1 GB NVL + 1 GB RDMA."""
    z = np.zeros(grid.size)
    if not model.is_moe:
        return z, z
    if CommMode(comm) == CommMode.DEEPEP_NORMAL:
        return z + 2.0e9, z
    d, ep, tp = model.hidden_size, grid.ep, grid.tp
    max_tok = np.maximum(np.ceil(tokens / tp / 128.0) * 128.0, 128.0)
    # the LL buffers are sized for FP8 dispatch and BF16 combine whatever the model sends
    per_tok = dispatch_bytes_per_token(d) + combine_bytes_per_token(d)
    per_slot = 2.0 * model.moe.num_experts * per_tok
    buf = np.where(ep > 1, per_slot * max_tok, 0.0)
    # affine upper bound for max_batch: buffers grow by < 1 slot per token plus one 128 block
    per_unit = np.where(ep > 1, per_slot * (grid.q_len if phase != Phase.PREFILL else 1.0) / tp, 0.0)
    return buf, per_unit


def memory(model: ModelSpec, hw: HardwareSpec, grid: Grid, phase: Phase, comm: CommMode) -> Memory:
    phase = Phase(phase)
    tp = grid.tp
    z = np.zeros(grid.size)
    weights = _weights(model, grid)
    per_unit = _kv_per_unit(model, grid, phase)
    kv = grid.batch * per_unit
    unit_tokens = grid.q_len if phase != Phase.PREFILL else 1.0  # tokens per request (decode) / token
    t = grid.batch * unit_tokens if phase != Phase.PREFILL else grid.batch
    act_per_token = _act_per_token(model, grid, phase)
    act = t * act_per_token
    buf, buf_per_unit = _comm_buffers(model, grid, phase, comm, t)
    attn, experts, shared, dense, embedding, mtp = weights
    weights_fixed = attn + experts + shared + dense + embedding + mtp + hw.memory_reserve_bytes
    block = np.where(buf_per_unit > 0, buf_per_unit / np.maximum(unit_tokens / tp, 1e-30) * 128.0, 0.0)
    fixed = weights_fixed + np.where(buf_per_unit > 0, block, buf)
    per_req = per_unit + (act_per_token * unit_tokens) + buf_per_unit
    return Memory(
        *weights,
        kv,
        act,
        buf,
        hw.memory_reserve_bytes,
        hw.memory_bytes,
        per_req,
        fixed,
        base_bytes=weights_fixed + np.where(buf_per_unit > 0, 0.0, buf),
        per_unit_bytes=per_unit + act_per_token * unit_tokens,
        block_bytes=block + z,
        block_tokens_per_unit=unit_tokens / tp + z,
    )


def max_batch(mem: Memory):
    """Largest batch (requests per DP group, or prefill tokens) that fits; 0 if none, so that
    batch <= max_batch <=> fits. The affine bound (comm buffers charged as if they grew smoothly
    plus one spare 128-token block) fits; the exact answer lies within one buffer block above it
    and is found by bisection on the exact step-function total."""
    room = mem.capacity_bytes - mem.fixed_bytes
    lo = np.maximum(np.floor(room / mem.kv_bytes_per_request), 0.0)
    if mem.base_bytes is None:
        return lo

    def total(b):
        blocks = np.maximum(np.ceil(b * mem.block_tokens_per_unit / 128.0), 1.0)
        return mem.base_bytes + b * mem.per_unit_bytes + mem.block_bytes * blocks

    # smallest batch that cannot fit even if the buffers grew smoothly (no spare block)
    smooth = mem.per_unit_bytes + mem.block_bytes * mem.block_tokens_per_unit / 128.0
    hi = np.maximum(np.floor((mem.capacity_bytes - mem.base_bytes) / smooth) + 1.0, lo + 1.0)
    lo = np.where(total(lo) <= mem.capacity_bytes, lo, 0.0)  # lo = 0: "nothing fits yet"
    for _ in range(64):
        todo = hi - lo > 1
        if not todo.any():
            break
        mid = np.floor((lo + hi) / 2.0)
        ok = total(mid) <= mem.capacity_bytes
        lo = np.where(todo & ok, mid, lo)
        hi = np.where(todo & ~ok, mid, hi)
    return lo


def kv_bytes_per_token_per_gpu(model, tp):
    """KV bytes per token one attention-TP rank holds (MLA latent replicated; GQA heads sharded)."""
    tp = np.asarray(tp, float)
    kvb = float(model.kv_bytes_per_token)
    if model.attention.kind == AttentionKind.MLA:
        return kvb + 0.0 * tp
    return kvb / np.minimum(tp, model.kv_heads)
