"""HBM copy bandwidth and kernel launch overhead.

memcpy: dst.copy_(src) of `bytes` bytes (reads and writes it: 2 x bytes moved). The fit turns the
rows into the elementwise memory efficiency (norms, activations are streaming kernels).
launch:  the per-kernel cost of a back-to-back stream of tiny kernels (1-element add), averaged
over 200 launches per timed call (CUDA), or one tiny op (CPU). The fit uses the median as
Profile.launch_s.
"""

from __future__ import annotations

from moesim.calibration.runners.harness import KernelSpec

MiB = 1024 * 1024
SIZES_GPU = [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB]
SIZES_CPU = [1 * MiB, 8 * MiB, 64 * MiB]
LAUNCHES = 200


def shapes(quick: bool, device: str, backend: str = "") -> list[dict]:
    if device == "cpu":
        sizes = [4 * MiB, 16 * MiB, 64 * MiB] if quick else SIZES_CPU
    else:
        sizes = [16 * MiB, 256 * MiB] if quick else SIZES_GPU
    return [{"op": "copy", "bytes": s} for s in sizes] + [{"op": "launch", "bytes": 4}]


def build(shape: dict, backend: str, device: str):
    import torch  # lazy: torch is optional; only a run on this backend needs it

    if shape["op"] == "launch":
        x = torch.ones(1, device=device, dtype=torch.float32)
        if device == "cuda":  # pragma: no cover - GPU

            def run():
                for _ in range(LAUNCHES):
                    x.add_(1.0)

            run.calls = LAUNCHES  # the harness divides the timed call by this
            return run
        return lambda: x.add_(1.0)
    n = int(shape["bytes"]) // 2
    src = torch.randn(n, device=device, dtype=torch.float32).to(torch.bfloat16)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


SPEC = KernelSpec(
    kernel="memcpy",
    shapes=shapes,
    build=build,
    work=lambda shape, dtype: (0.0, 2.0 * shape["bytes"] if shape["op"] == "copy" else 0.0),
    dtype=lambda backend, device: "bf16",
    note=lambda shape, backend, device: (
        f"per-launch time = timed call / {LAUNCHES} launches" if shape["op"] == "launch" and device == "cuda" else ""
    ),
)
