"""Grouped (MoE expert) GEMM runner: DeepGEMM m_grouped_fp8_gemm_nt_contiguous / _masked (v1 names
m_grouped_gemm_fp8_fp8_bf16_nt_*: see apis),
or torch (masked = bmm over padded groups; contiguous = a loop of matmuls over the groups).

DeepSeek-V3 expert shapes (moe_intermediate 2048, hidden 7168, no TP): gate+up (n=4096, k=7168) and
down (n=7168, k=2048); groups = experts per rank 1..32; m = tokens per expert. Decode uses the
masked layout (small m, many groups), prefill the contiguous layout (large m).
"""

from __future__ import annotations

from moesim.calibration.runners import apis
from moesim.calibration.runners.gemm import fp8_block_inputs
from moesim.calibration.runners.harness import KernelSpec
from moesim.perf.efficiency import dtype_bytes, gemm_work, out_bytes_for

NK = [(4096, 7168), (7168, 2048)]
MASKED_GROUPS = [1, 2, 4, 8, 16, 32]
MASKED_M = [1, 8, 32, 64, 128, 256, 512]
CONTIG_GROUPS = [4, 8, 16, 32]
CONTIG_M = [128, 512, 1024, 2048, 4096, 8192]
MAX_TOKEN_PAIRS = 131072  # tokens x top-8 landing on one rank in a 16K-token prefill batch


# --shapes engine: SGLang's DeepSeek-V3 MoE under DeepEP at EP 8..256 (256 routed experts, top-8, no
# MoE TP): local experts g = 256 / EP; a rank holding T tokens sends T x 8 copies, so an expert gets
# m = T x EP x 8 / 256 tokens on average. Decode (masked layout, DeepEP low-latency): T = 1..256 per
# rank; prefill (contiguous layout, DeepEP normal): 1K..16K-token chunks per rank.
ENGINE_EP = [8, 16, 32, 64, 128, 256]
ENGINE_DECODE_T = [1, 4, 16, 32, 64, 128, 256]
ENGINE_PREFILL_T = [1024, 4096, 16384]
EXPERTS, TOPK = 256, 8


def engine_shapes(device: str, backend: str = "") -> list[dict]:
    out = []
    for n, k in NK:
        masked = {(EXPERTS // ep, max(-(-t * ep * TOPK // EXPERTS), 1)) for ep in ENGINE_EP for t in ENGINE_DECODE_T}
        contig = {(EXPERTS // ep, t * ep * TOPK // EXPERTS) for ep in ENGINE_EP for t in ENGINE_PREFILL_T}
        out += [{"layout": "masked", "groups": g, "m": m, "n": n, "k": k} for g, m in sorted(masked)]
        out += [
            {"layout": "contiguous", "groups": g, "m": m, "n": n, "k": k}
            for g, m in sorted(contig)
            if g * m <= MAX_TOKEN_PAIRS
        ]
    return out


def shapes(quick: bool, device: str, backend: str = "") -> list[dict]:
    out = []
    if device == "cpu":
        nk = [(7168, 2048)]
        masked = (
            [(g, m) for g in (1, 2) for m in (8, 64)]
            if quick
            else [(g, m) for g in (1, 2, 4) for m in (1, 8, 32, 64, 128)]
        )
        contig = [(2, 128), (2, 256)] if quick else [(2, 256), (4, 256), (2, 512)]
    elif quick:
        nk = NK
        masked = [(g, m) for g in (4, 32) for m in (16, 128)]
        contig = [(8, 1024), (8, 4096)]
    else:
        nk = NK
        masked = [(g, m) for g in MASKED_GROUPS for m in MASKED_M]
        contig = [(g, m) for g in CONTIG_GROUPS for m in CONTIG_M if g * m <= MAX_TOKEN_PAIRS]
    for n, k in nk:
        out += [{"layout": "masked", "groups": g, "m": m, "n": n, "k": k} for g, m in masked]
        out += [{"layout": "contiguous", "groups": g, "m": m, "n": n, "k": k} for g, m in contig]
    return out


def dtype_for(backend: str, device: str) -> str:
    if backend == "deep_gemm":
        return "fp8"
    return "fp32" if device == "cpu" else "bf16"


def work(shape: dict, dtype: str):
    F, b_in, b_out = gemm_work(
        shape["m"], shape["n"], shape["k"], shape["groups"], dtype_bytes(dtype), out_bytes_for(dtype)
    )
    return float(F), float(b_in + b_out)


def note(shape: dict, backend: str, device: str) -> str:
    if backend == "deep_gemm" and shape["layout"] == "contiguous":
        return "m per group padded to DeepGEMM's contiguous-layout alignment when not a multiple of it"
    if backend == "deep_gemm":
        return "masked layout: every group holds m tokens (masked_m = expected_m = m)"
    return "torch: masked = bmm over [groups, m, k]; contiguous = loop of matmuls"


def build(shape: dict, backend: str, device: str):
    import torch  # lazy: torch is optional; only a run on this backend needs it

    g, m, n, k = int(shape["groups"]), int(shape["m"]), int(shape["n"]), int(shape["k"])
    layout = shape["layout"]
    if backend == "deep_gemm":  # pragma: no cover - needs DeepGEMM on a Hopper GPU
        import deep_gemm  # lazy: optional GPU library, probed by backends.choose_backend

        if layout == "contiguous":
            mp = -(-m // apis.deep_gemm_m_alignment(deep_gemm)) * apis.deep_gemm_m_alignment(deep_gemm)
            (a, sa), rhs = fp8_block_inputs(deep_gemm, g * mp, n, k, device, groups=g)
            lhs = (a, apis.deep_gemm_lhs_scales(deep_gemm, sa))
            out = torch.empty(g * mp, n, device=device, dtype=torch.bfloat16)
            idx = torch.arange(g, device=device, dtype=torch.int32).repeat_interleave(mp)
            fn = apis.deep_gemm_grouped(deep_gemm, "contiguous")
            return lambda: fn(lhs, rhs, out, idx)
        m_max = max(-(-m // 64) * 64, 64)
        (a, sa), rhs = fp8_block_inputs(deep_gemm, g * m_max, n, k, device, groups=g)
        lhs = (a.view(g, m_max, k), apis.deep_gemm_lhs_scales(deep_gemm, sa.view(g, m_max, -1)))
        out = torch.empty(g, m_max, n, device=device, dtype=torch.bfloat16)
        masked_m = torch.full((g,), m, device=device, dtype=torch.int32)
        fn = apis.deep_gemm_grouped(deep_gemm, "masked")
        return lambda: fn(lhs, rhs, out, masked_m, m)
    tdt = torch.float32 if device == "cpu" else torch.bfloat16
    b = torch.randn(g, n, k, device=device, dtype=tdt)
    bt = b.transpose(1, 2)
    if layout == "masked":
        a = torch.randn(g, m, k, device=device, dtype=tdt)
        out = torch.empty(g, m, n, device=device, dtype=tdt)
        return lambda: torch.bmm(a, bt, out=out)
    a = torch.randn(g * m, k, device=device, dtype=tdt)
    out = torch.empty(g * m, n, device=device, dtype=tdt)
    parts = [(a[i * m : (i + 1) * m], bt[i], out[i * m : (i + 1) * m]) for i in range(g)]

    def run():
        for x, w, o in parts:
            torch.matmul(x, w, out=o)

    return run


SPEC = KernelSpec(
    kernel="grouped_gemm",
    shapes=shapes,
    build=build,
    work=work,
    dtype=dtype_for,
    note=note,
    engine_shapes=engine_shapes,
)
