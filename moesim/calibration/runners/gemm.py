"""Dense GEMM runner: DeepGEMM FP8 block-scaled (fp8_gemm_nt; v1 gemm_fp8_fp8_bf16_nt: see apis),
torch._scaled_mm FP8 (per-tensor), torch.matmul.

Shapes are DeepSeek-V3's own linear layers without tensor parallelism, [m, k] x [n, k]^T:
the DeepGEMM README's six (n, k) pairs (MLA down/up projections, o_proj, MoE gate+up / down as
used by the shared expert) plus the dense FFN of layers 0-2, for m = tokens 1 .. 16K.
"""

from __future__ import annotations

from moesim.calibration.runners import apis
from moesim.calibration.runners.harness import KernelSpec
from moesim.perf.efficiency import dtype_bytes, gemm_work, out_bytes_for

NK = [
    (2112, 7168),  # MLA q_a + kv_a fused down-projection (1536 + 576)
    (24576, 1536),  # MLA q_b up-projection (128 heads x 192)
    (32768, 512),  # MLA kv_b up-projection (128 x (128 + 128))
    (7168, 16384),  # attention o_proj (128 x 128 -> 7168)
    (4096, 7168),  # MoE / shared expert gate+up (2 x 2048)
    (7168, 2048),  # MoE / shared expert down
    (36864, 7168),  # dense FFN gate+up, layers 0-2 (2 x 18432)
    (7168, 18432),  # dense FFN down, layers 0-2
]
M_FULL = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
QUICK_GPU = ([(2112, 7168), (4096, 7168), (7168, 2048)], [1, 64, 128, 1024, 4096])
# CPU: V3 pairs whose FP32 weights stay under ~70 MB; m >= 4 (m = 1..3 take BLAS GEMV paths that a
# GPU-shaped model does not describe); a 2-core box does ~50-200 GFLOP/s
QUICK_CPU = ([(2112, 7168), (7168, 2048), (32768, 512)], [4, 16, 64, 256])
FULL_CPU = (
    [(2112, 7168), (7168, 2048), (32768, 512), (4096, 7168), (24576, 1536)],
    [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
)


# --shapes engine: the linear layers SGLang runs for DeepSeek-V3 (python/sglang/srt/models/deepseek_v2.py)
# at attention TP 1 (DP attention, the large-EP deployments) and TP 8 (one node): per-rank (n, k)
ENGINE_NK = NK + [
    (3072, 1536),  # TP8 q_b (16 heads x 192)
    (4096, 512),  # TP8 kv_b (16 x 256), prefill MHA form
    (7168, 2048),  # TP8 o_proj (16 x 128 -> 7168); also the shared expert's down
    (4608, 7168),  # TP8 dense FFN gate+up (36864 / 8)
    (7168, 2304),  # TP8 dense FFN down (18432 / 8)
]
# decode: 1..256 tokens per rank, with the M-tile edges (64, 128, 256 and one past them);
# prefill: 1K..16K-token chunks
ENGINE_M = [1, 4, 8, 16, 32, 64, 128, 129, 256, 257, 1024, 4096, 16384]


def engine_shapes(device: str, backend: str = "") -> list[dict]:
    nk = list(dict.fromkeys(ENGINE_NK))
    return [{"m": m, "n": n, "k": k} for (n, k) in nk for m in ENGINE_M]


def shapes(quick: bool, device: str, backend: str = "") -> list[dict]:
    if device == "cpu":
        nk, ms = QUICK_CPU if quick else FULL_CPU
    else:
        nk, ms = QUICK_GPU if quick else (NK, M_FULL)
    return [{"m": m, "n": n, "k": k} for (n, k) in nk for m in ms]


def dtype_for(backend: str, device: str) -> str:
    if backend == "deep_gemm":
        return "fp8"
    if device == "cpu":
        return "fp32"  # BF16 matmul is emulated on most CPUs; FP32 gives the cleaner curve
    import torch  # lazy: torch is optional; only a run on this backend needs it

    if hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability() >= (8, 9):
        return "fp8"
    return "bf16"


def work(shape: dict, dtype: str):
    F, b_in, b_out = gemm_work(shape["m"], shape["n"], shape["k"], 1.0, dtype_bytes(dtype), out_bytes_for(dtype))
    return float(F), float(b_in + b_out)


def note(shape: dict, backend: str, device: str) -> str:
    if backend == "torch" and device == "cuda" and dtype_for(backend, device) == "fp8" and shape["m"] % 16:
        return "torch._scaled_mm needs m % 16 == 0: timed with m padded to the next multiple of 16"
    return ""


def fp8_block_inputs(dg, m, n, k, device, groups=None):  # pragma: no cover - GPU
    """((a, sfa), (b, sfb)) for DeepGEMM: FP8 with 1x128 activation / 128x128 weight FP32 scales,
    cast by deep_gemm.utils where the library ships the casts (v2), else random FP8 and scales > 0.
    groups: a [groups, n, k] weight (grouped GEMMs); `a` is [m, k] either way."""
    import torch  # lazy: torch is optional; only a run on this backend needs it

    g = groups or 1
    casts = apis.deep_gemm_casts(dg)
    if casts is not None:
        a, sa = casts[0](torch.randn(m, k, device=device, dtype=torch.bfloat16))
        ws = [casts[1](torch.randn(n, k, device=device, dtype=torch.bfloat16)) for _ in range(g)]
        b, sb = torch.stack([w for w, _ in ws]), torch.stack([s for _, s in ws])
    else:
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16).to(f8)
        sa = torch.rand(m, (k + 127) // 128, device=device, dtype=torch.float32) + 0.5
        b = torch.randn(g, n, k, device=device, dtype=torch.bfloat16).to(f8)
        sb = torch.rand(g, (n + 127) // 128, (k + 127) // 128, device=device, dtype=torch.float32) + 0.5
    if groups is None:
        b, sb = b[0], sb[0]
    return (a, sa), (b, sb)


def build(shape: dict, backend: str, device: str):
    import torch  # lazy: torch is optional; only a run on this backend needs it

    m, n, k = int(shape["m"]), int(shape["n"]), int(shape["k"])
    if backend == "deep_gemm":  # pragma: no cover - needs DeepGEMM on a Hopper GPU
        import deep_gemm  # lazy: optional GPU library, probed by backends.choose_backend

        (a, sa), rhs = fp8_block_inputs(deep_gemm, m, n, k, device)
        lhs = (a, apis.deep_gemm_lhs_scales(deep_gemm, sa))
        out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
        fn = apis.deep_gemm_dense(deep_gemm)
        return lambda: fn(lhs, rhs, out)
    dtype = dtype_for(backend, device)
    if dtype == "fp8":  # pragma: no cover - GPU with FP8 tensor cores
        mp = -(-m // 16) * 16
        a = torch.randn(mp, k, device=device, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    a = torch.randn(m, k, device=device, dtype=tdt)
    b = torch.randn(n, k, device=device, dtype=tdt)
    out = torch.empty(m, n, device=device, dtype=tdt)
    bt = b.t()
    return lambda: torch.matmul(a, bt, out=out)


SPEC = KernelSpec(
    kernel="gemm", shapes=shapes, build=build, work=work, dtype=dtype_for, note=note, engine_shapes=engine_shapes
)
