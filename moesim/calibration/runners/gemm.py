"""Dense GEMM runner: DeepGEMM FP8 (gemm_fp8_fp8_bf16_nt), torch._scaled_mm FP8, torch.matmul.

Shapes are DeepSeek-V3's own linear layers without tensor parallelism, [m, k] x [n, k]^T:
the DeepGEMM README's six (n, k) pairs (MLA down/up projections, o_proj, MoE gate+up / down as
used by the shared expert) plus the dense FFN of layers 0-2, for m = tokens 1 .. 16K.
"""

from __future__ import annotations

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


def _fp8_block_inputs(m, n, k, device):  # pragma: no cover - GPU
    import torch  # lazy: torch is optional; only a run on this backend needs it

    a = torch.randn(m, k, device=device, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    sa = torch.rand(m, (k + 127) // 128, device=device, dtype=torch.float32) + 0.5  # 1x128 activation tiles
    sb = torch.rand((n + 127) // 128, (k + 127) // 128, device=device, dtype=torch.float32) + 0.5  # 128x128 blocks
    return a, sa, b, sb


def build(shape: dict, backend: str, device: str):
    import torch  # lazy: torch is optional; only a run on this backend needs it

    m, n, k = int(shape["m"]), int(shape["n"]), int(shape["k"])
    if backend == "deep_gemm":  # pragma: no cover - needs DeepGEMM on a Hopper GPU
        import deep_gemm  # lazy: optional GPU library, probed by backends.choose_backend

        a, sa, b, sb = _fp8_block_inputs(m, n, k, device)
        out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
        if hasattr(deep_gemm, "get_col_major_tma_aligned_tensor"):
            sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
        fn = getattr(deep_gemm, "gemm_fp8_fp8_bf16_nt", None) or deep_gemm.fp8_gemm_nt
        return lambda: fn((a, sa), (b, sb), out)
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


SPEC = KernelSpec(kernel="gemm", shapes=shapes, build=build, work=work, dtype=dtype_for, note=note)
