"""Workload: model spec x grid -> ops per GPU per layer, for prefill and decode (written once)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from moesim.enums import CommMode, Dtype, Phase
from moesim.grid.core import Grid
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.attention import attention_ops
from moesim.workload.ffn import MoeParallel, dense_ffn_ops, moe_ops
from moesim.workload.ops import Operands, OpWork, elementwise, gemm


@dataclass
class Workload:
    """Ops of one micro-batch. Layer lists are per layer; `step` ops run once per step;
    `mtp` ops once per draft token (DeepSeek-V3 MTP module: eh_proj + one block + shared head)."""

    moe_layer: list[OpWork]
    dense_layer: list[OpWork]
    step: list[OpWork]
    mtp: list[OpWork]
    n_moe_layers: int
    n_dense_layers: int
    mtp_count: np.ndarray = field(default=0.0)
    micro_batches: int = 1
    mtp_extra: list = field(default_factory=list)  # MTP ops outside its transformer block


def tokens(grid: Grid, phase: Phase, micro_batches: int = 1):
    """(t tokens per DP group, b_req requests/sequences) per micro-batch."""
    if Phase(phase) == Phase.PREFILL:
        t = grid.batch / micro_batches
        return t, np.maximum(t / grid.context, 1.0 / micro_batches)
    b = grid.batch / micro_batches
    return b * grid.q_len, b


def build(
    model: ModelSpec,
    hw: HardwareSpec,
    grid: Grid,
    phase: Phase,
    comm: CommMode,
    micro_batches: int = 1,
    comm_sms=None,
    chunk=None,
    path=None,
    load=None,
) -> Workload:
    """`comm_sms`: SMs given to DeepEP's normal kernels (None: DeepEP's default, 20). `chunk`:
    (prefill tokens per DP group, prompt length[, prefill tokens per DP group through the experts])
    arrays like the grid, fused into each decode pass (vLLM V1 / TRT-LLM chunked prefill): one
    forward pass over decode + prefill tokens, whose GEMMs, experts and all-to-all carry all tokens
    (weights read once) and whose attention is per request (`attention_ops`). The third item, when
    the DP ranks carry unequal chunks (only some prefill in a lock-step pass), is the mean over
    the ranks: the experts see the mean, the slowest rank's attention the first item. `path`: the MoE
    communication path per configuration the engine runs (moesim.specs.engine; None: all-to-all). `load`:
    the slowest EP rank's routed load factor (its routed experts are built on that rank's work)."""
    phase = Phase(phase)
    comm = CommMode(comm)
    prefill = phase == Phase.PREFILL
    t, b_req = tokens(grid, phase, micro_batches)
    ch, t_all, t_lm, t_moe = None, t, (b_req if prefill else t), t
    if chunk is not None and not prefill:
        ch, t_all, t_lm, t_moe = _fused_chunk(chunk, t, micro_batches)
    kw = dict(
        t=t, b_req=b_req, q_len=np.where(prefill, 1.0, grid.q_len), context=grid.context, tp=grid.tp, prefill=prefill
    )
    attn = attention_ops(model, **kw, chunk=ch)
    dense = attn + dense_ffn_ops(model, t=t_all, tp=grid.tp) if model.dense_ffn else []
    moe = []
    if model.is_moe:
        par = MoeParallel.of(grid)
        moe = attention_ops(model, **kw, chunk=ch) + moe_ops(
            model, hw, par, t=t_moe, comm=comm, prefill=prefill, comm_sms=comm_sms, path=path, load=load
        )
    step = _step_ops(model, t_all, t_lm, grid.tp)
    mtp: list[OpWork] = []
    mtp_count = np.zeros(grid.size)
    if model.mtp_layers and not prefill:
        mtp = _mtp_ops(model, t, grid.tp, moe if model.is_moe else dense)
        mtp_count = grid.mtp.astype(float)
    return Workload(
        moe_layer=moe,
        dense_layer=dense,
        step=step,
        mtp=mtp,
        n_moe_layers=model.n_moe_layers,
        n_dense_layers=model.n_dense_layers,
        mtp_count=mtp_count,
        micro_batches=micro_batches,
        mtp_extra=[mtp[0], mtp[-1]] if mtp else [],
    )


def _fused_chunk(chunk, t, micro_batches: int):
    """(attention chunk, tokens through the shared projections, LM-head rows, tokens through the
    experts) of a decode pass with `chunk` (build's) prefill tokens fused in, per micro-batch."""
    ct = np.asarray(chunk[0], float) / micro_batches
    seqs = ct / np.asarray(chunk[1], float)  # prompts (or parts of one) in the chunk
    ch = (ct, np.maximum(seqs, np.where(ct > 0, 1.0 / micro_batches, 0.0)), chunk[1])
    t_moe = t + (np.asarray(chunk[2], float) / micro_batches if len(chunk) > 2 else ct)
    return ch, t + ct, t + seqs, t_moe  # a prompt's last token needs its logits


def _lm_head(name, m, model: ModelSpec, tp, stage=5) -> OpWork:
    """Vocab-parallel LM head: BF16 GEMM in the embedding dtype, FP32 logits."""
    emb_b = model.precision.embedding_dtype.bytes
    v, d = model.vocab_size / tp, model.hidden_size
    return gemm(
        name, m, v, d, Operands(w_bytes=emb_b, a_bytes=2.0, dtype=Dtype.BF16, out_bytes=4.0, block=0), stage=stage
    )


def _step_ops(model: ModelSpec, t, t_lm, tp) -> list[OpWork]:
    """Ops run once per step: embedding, final norm, LM head over `t_lm` rows (decode: logits for
    every query position; prefill: only each prompt's last token)."""
    d, emb_b = model.hidden_size, model.precision.embedding_dtype.bytes
    return [
        elementwise("embedding", t * d * emb_b * 2.0, stage=1),
        elementwise("final_norm", t_lm * d * 2.0 * 2.0, stage=5),
        _lm_head("lm_head", t_lm, model, tp),
    ]


def _mtp_ops(model: ModelSpec, t, tp, block: list[OpWork]) -> list[OpWork]:
    """MTP module per draft (V3 report sec. 2.2): concat(norm(h), norm(emb)) -> eh_proj -> block -> head."""
    d, p = model.hidden_size, model.precision
    wb = p.weight_dtype.bytes
    eh = gemm("mtp_eh_proj", t, d, 2 * d, Operands(w_bytes=wb, a_bytes=2.0, dtype=p.weight_dtype, block=p.weight_block))
    return [eh] + [_renamed(o, "mtp_") for o in block] + [_lm_head("mtp_lm_head", t, model, tp)]


def _renamed(op: OpWork, prefix: str) -> OpWork:
    return dataclasses.replace(op, name=prefix + op.name)  # tags stay: an MTP copy is the same op
