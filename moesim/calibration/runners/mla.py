"""MLA decode attention runner: FlashMLA (get_mla_metadata + flash_mla_with_kvcache, old and new
scheduler-metadata interfaces: see apis) or a torch
implementation of absorbed MLA decode over a latent KV cache.

DeepSeek-V3 geometry: K = 576 (512 latent + 64 RoPE), V = 512; heads 128 (DP attention, no TP) or
16 (attention TP 8); q_len 1 or 2 (one MTP draft token); batch = requests per GPU; context
512 .. 32K tokens. FlashMLA: paged BF16 cache, block size 64, one KV head.
"""

from __future__ import annotations

import math

from moesim.calibration.runners.harness import KernelSpec
from moesim.perf.efficiency import MLA_QK_DIM, MLA_V_DIM, dtype_bytes, mla_decode_work

HEADS = [128, 16]
Q_LEN = [1, 2]
BATCH = [1, 4, 16, 32, 64, 128]
CONTEXT = [512, 1024, 2048, 4096, 8192, 16384, 32768]
MAX_KV_TOKENS = 2 * 1024 * 1024  # batch x context: 2M tokens = 2.4 GB of BF16 latent cache
BLOCK = 64


# --shapes engine: SGLang decode of DeepSeek-V3 with FlashMLA: 128 heads (DP attention) or 16 (TP 8),
# q_len 1 or 2 (one MTP draft), 1..256 requests per rank, KV 512..32K tokens
ENGINE_BATCH = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def engine_shapes(device: str, backend: str = "") -> list[dict]:
    return [
        {"heads": h, "q_len": s, "batch": b, "context": c}
        for h in HEADS
        for s in Q_LEN
        for b in ENGINE_BATCH
        for c in CONTEXT
        if b * c <= MAX_KV_TOKENS
    ]


def shapes(quick: bool, device: str, backend: str = "") -> list[dict]:
    if device == "cpu":
        grid = (
            ([16], [1], [1, 4], [512, 1024, 2048]) if quick else ([16, 128], [1, 2], [1, 4, 8], [512, 1024, 2048, 4096])
        )
    elif quick:
        grid = ([128], [1, 2], [1, 32, 128], [1024, 8192])
    else:
        grid = (HEADS, Q_LEN, BATCH, CONTEXT)
    heads, qlens, batches, contexts = grid
    return [
        {"heads": h, "q_len": s, "batch": b, "context": c}
        for h in heads
        for s in qlens
        for b in batches
        for c in contexts
        if b * c <= MAX_KV_TOKENS
    ]


def dtype_for(backend: str, device: str) -> str:
    return "fp32" if device == "cpu" else "bf16"


def work(shape: dict, dtype: str):
    kvb = dtype_bytes(dtype, 2.0)
    F, b_in, b_out = mla_decode_work(shape["batch"], shape["q_len"], shape["heads"], shape["context"], kvb, kvb)
    return float(F), float(b_in + b_out)


def build(shape: dict, backend: str, device: str):
    import torch  # lazy: torch is optional; only a run on this backend needs it

    b, s, h, ctx = int(shape["batch"]), int(shape["q_len"]), int(shape["heads"]), int(shape["context"])
    scale = 1.0 / math.sqrt(MLA_QK_DIM)
    if backend == "flash_mla":  # pragma: no cover - needs FlashMLA on a Hopper GPU
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata  # lazy: optional GPU library

        nblk = -(-ctx // BLOCK)
        q = torch.randn(b, s, h, MLA_QK_DIM, device=device, dtype=torch.bfloat16)
        cache = torch.randn(b * nblk, BLOCK, 1, MLA_QK_DIM, device=device, dtype=torch.bfloat16)
        table = torch.arange(b * nblk, device=device, dtype=torch.int32).view(b, nblk)
        seqlens = torch.full((b,), ctx, device=device, dtype=torch.int32)
        meta, splits = get_mla_metadata(seqlens, s * h // 1, 1)
        return lambda: flash_mla_with_kvcache(
            q,
            cache,
            table,
            seqlens,
            MLA_V_DIM,
            tile_scheduler_metadata=meta,
            num_splits=splits,
            softmax_scale=scale,
            causal=True,
        )
    tdt = torch.float32 if device == "cpu" else torch.bfloat16
    q = torch.randn(b, s * h, MLA_QK_DIM, device=device, dtype=tdt)
    kv = torch.randn(b, ctx, MLA_QK_DIM, device=device, dtype=tdt)
    kt = kv.transpose(1, 2)
    v = kv[..., :MLA_V_DIM]

    def run():
        # absorbed MLA decode: scores over the 576-dim latent+rope key, values = the 512-dim latent
        p = torch.softmax(torch.matmul(q, kt).float() * scale, dim=-1).to(tdt)
        return torch.matmul(p, v)

    return run


SPEC = KernelSpec(
    kernel="mla_decode",
    shapes=shapes,
    build=build,
    work=work,
    dtype=dtype_for,
    engine_shapes=engine_shapes,
    note=lambda shape, backend, device: (
        "FlashMLA paged BF16 cache, block 64, causal"
        if backend == "flash_mla"
        else "torch absorbed MLA decode (QK over 576, softmax, PV over 512)"
    ),
)
