"""Which kernel libraries are importable, and what machine we are on.

Backends per kernel family (best first):
  gemm          deep_gemm (gemm_fp8_fp8_bf16_nt / fp8_gemm_nt) | torch (_scaled_mm FP8 or matmul)
  grouped_gemm  deep_gemm (m_grouped_..._contiguous / _masked)  | torch (bmm / loop of matmuls)
  mla           flash_mla (flash_mla_with_kvcache)              | torch (absorbed MLA decode)
  deepep        deep_ep (Buffer normal / low-latency)           | nccl (torch.distributed)
  memcpy        torch
A backend whose library does not import is reported as "skipped: <lib> not importable".
"""

from __future__ import annotations

import datetime as _dt
import importlib
import os
import platform
import subprocess
from dataclasses import dataclass

from moesim.errors import CalibrationError

KERNELS = ("gemm", "grouped_gemm", "mla", "deepep", "memcpy")
BACKENDS = {
    "gemm": ("deep_gemm", "torch"),
    "grouped_gemm": ("deep_gemm", "torch"),
    "mla": ("flash_mla", "torch"),
    "deepep": ("deep_ep", "nccl"),
    "memcpy": ("torch",),
}
# the Python module each backend needs (besides torch)
LIBRARY = {
    "deep_gemm": "deep_gemm",
    "flash_mla": "flash_mla",
    "deep_ep": "deep_ep",
    "torch": "torch",
    "nccl": "torch",
    "triton": "triton",
}
GPU_ONLY = {"deep_gemm", "flash_mla", "deep_ep"}


class Skipped(Exception):
    """The requested backend cannot run here; the message is what the CLI prints."""


@dataclass
class Library:
    name: str
    available: bool
    version: str = ""
    reason: str = ""


def library(name: str) -> Library:
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # ImportError, or a broken CUDA extension raising at import
        return Library(name, False, "", f"{e.__class__.__name__}: {e}")
    version = str(getattr(mod, "__version__", "") or "")
    return Library(name, True, version)


def detect() -> dict[str, Library]:
    return {n: library(n) for n in ("torch", "triton", "deep_gemm", "flash_mla", "deep_ep")}


def cuda_available() -> bool:
    lib = library("torch")
    if not lib.available:
        return False
    import torch  # lazy: torch is optional; only a run on this backend needs it

    return bool(torch.cuda.is_available())


def resolve_device(device: str | None) -> str:
    if device in (None, "", "auto"):
        return "cuda" if cuda_available() else "cpu"
    d = str(device).lower()
    if d not in ("cpu", "cuda"):
        raise CalibrationError(f"--device: {device!r} is not one of {{auto, cpu, cuda}}")
    return d


def unavailable(b: str, device: str) -> str:
    """Why backend `b` cannot run on `device` here ('' when it can)."""
    if not library("torch").available:
        return f"torch not importable ({library('torch').reason})"
    lib = LIBRARY[b]
    if lib != "torch" and not library(lib).available:
        return f"{lib} not importable ({library(lib).reason})"
    if device == "cuda" and not cuda_available():
        return "no CUDA device visible to torch"
    return ""


def choose_backend(kernel: str, backend: str | None, device: str, strict: bool = False, echo=None) -> str:
    """The backend to run, or raise Skipped with the one-line reason.

    The wanted backend is --backend, or the kernel's best one (first of BACKENDS that runs on the
    device: the vendor library on CUDA). When its library does not import: strict -> raise
    CalibrationError (the CLI exits non-zero); otherwise say so through `echo` and run the torch
    fallback, whose rows carry backend torch. A GPU-only backend asked for on the CPU is skipped."""
    if kernel not in BACKENDS:
        raise CalibrationError(f"kernel {kernel!r} is not one of {{{', '.join(KERNELS)}}}")
    allowed = BACKENDS[kernel]
    auto = backend in (None, "", "auto")
    if not auto and backend not in allowed:
        raise CalibrationError(f"--backend {backend!r} is not available for {kernel}; allowed: {', '.join(allowed)}")
    if not auto and backend in GPU_ONLY and device != "cuda":
        why = f"{backend} needs a CUDA device (got --device {device})"
        if strict:
            raise CalibrationError(f"--strict: {kernel} backend {why}")
        raise Skipped(f"skipped: {why}")
    wanted = backend if not auto else next(b for b in allowed if device == "cuda" or b not in GPU_ONLY)
    why = unavailable(wanted, device)
    if not why:
        return wanted
    if strict:
        raise CalibrationError(f"--strict: {kernel} backend {wanted}: {why}")
    fallback = "torch" if "torch" in allowed else None
    if fallback is None or fallback == wanted or unavailable(fallback, device):
        raise Skipped(f"skipped: {why}")
    if echo is not None:
        echo(f"{kernel}: {wanted} unavailable ({why}); running the torch fallback (rows carry backend torch)")
    return fallback


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return ""


def gpu_slug(name: str) -> str:
    """'NVIDIA H800' -> 'h800', 'NVIDIA H100 80GB HBM3' -> 'h100_sxm', 'NVIDIA H200' -> 'h200'; cpu -> 'cpu'."""
    n = name.lower()
    if n.startswith("cpu"):
        return "cpu"
    for key, slug in (
        ("h800", "h800"),
        ("h200", "h200"),
        ("h20", "h20"),
        ("gb200", "gb200"),
        ("b200", "b200"),
        ("a100", "a100"),
    ):
        if key in n:
            return slug
    if "h100" in n:
        return "h100_pcie" if "pcie" in n else "h100_sxm"
    return "".join(c if c.isalnum() else "_" for c in n).strip("_") or "gpu"


def machine_info(device: str, backend: str) -> dict:
    """gpu / sms / driver / lib_versions / date columns of every row written by this run."""
    libs = detect()
    versions = [
        f"{n}={libs[n].version or 'yes'}"
        for n in ("torch", "triton", "deep_gemm", "flash_mla", "deep_ep")
        if libs[n].available
    ]
    info = {
        "device": device,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lib_versions": "; ".join(versions),
    }
    if device == "cuda":
        import torch  # lazy: torch is optional; only a run on this backend needs it

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(gpu=props.name, sms=int(props.multi_processor_count), driver=_driver_version())
        if torch.version.cuda:
            info["lib_versions"] += f"; cuda={torch.version.cuda}"
    else:
        threads = os.cpu_count() or 1
        if libs["torch"].available:
            import torch  # lazy: torch is optional; only a run on this backend needs it

            threads = torch.get_num_threads()
        info.update(gpu=f"cpu:{platform.machine()}", sms=threads, driver="")
    return info
