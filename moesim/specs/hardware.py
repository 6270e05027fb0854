"""GPU + node + network + price spec (frozen). YAML keys carry human units; properties give SI."""

from __future__ import annotations

import re
from dataclasses import dataclass

from moesim import units as U
from moesim.enums import Dtype
from moesim.errors import SpecError
from moesim.specs.schema import field

# The smallest non-zero rate a spec may give (TFLOP/s or GB/s: 1 FLOP/s, 1 mB/s): any smaller keeps
# every time finite only by luck (1e-300 GB/s overflows to inf and NaN downstream); a rate that
# must exist (a peak, HBM, the NIC) is at least this, an optional one (NVLink, FP4, FP32) 0 or this.
MIN_RATE = 1e-12
_OPTIONAL_RATES = ("nvlink_bw_GBps", "nvlink_eff_bw_GBps", "fp4_tflops", "fp32_tflops")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def _si(key: str, unit: float) -> property:
    """A read-only SI view of a YAML key given in a human unit: the key's value x `unit` (moesim.units)."""
    return property(lambda self: getattr(self, key) * unit, doc=f"{key} in SI units (x {unit:g})")


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    source: str
    sms: int = field(lo=1, hi=100_000, doc="streaming multiprocessors; a --set of sms alone scales the tensor peaks")
    fp8_tflops: float = field(lo=MIN_RATE, hi=1e6, doc="dense FP8 tensor peak")
    bf16_tflops: float = field(lo=MIN_RATE, hi=1e6, doc="dense BF16 tensor peak")
    memory_GB: float = field(lo=0.0, hi=1e5, lo_open=True, doc="HBM capacity, 1e9 B")
    hbm_bw_GBps: float = field(lo=MIN_RATE, hi=1e6)
    gpus_per_node: int = field(lo=1, hi=100_000)
    nvlink_bw_GBps: float = field(
        lo=0.0, hi=1e6, doc="NVLink per direction, nominal; 0 = none (all traffic over the NIC)"
    )
    nvlink_eff_bw_GBps: float = field(lo=0.0, hi=1e6, doc="NVLink per direction, achievable; 0 only without NVLink")
    nvlink_latency_us: float = field(lo=0.0, hi=1e4)
    rdma_bw_GBps: float = field(lo=MIN_RATE, hi=1e5, doc="scale-out bandwidth per GPU (all its NICs), nominal")
    rdma_eff_bw_GBps: float = field(lo=MIN_RATE, hi=1e5, doc="scale-out per GPU, achievable")
    rdma_latency_us: float = field(lo=0.0, hi=1e4)
    usd_per_gpu_hour: float = field(lo=0.0, hi=1e4)
    fp4_tflops: float = field(0.0, lo=0.0, hi=1e7, doc="dense FP4 peak; 0 = unsupported (FP4 weights rejected)")
    fp32_tflops: float = field(0.0, lo=0.0, hi=1e6, doc="FP32 peak; 0 = half the BF16 peak")
    nvlink_domain_gpus: int = field(0, lo=0, hi=1_000_000, doc="GPUs sharing one NVLink domain; 0 = gpus_per_node")
    kernel_launch_us: float = field(2.0, lo=0.0, hi=1e4, doc="per-kernel launch/tail overhead under CUDA graphs")
    kernel_launch_eager_us: float = field(
        5.0, lo=0.0, hi=1e4, doc="per-kernel overhead without CUDA graphs (host launch latency)"
    )
    layer_sync_us: float = field(0.0, lo=0.0, hi=1e5, doc="per-layer synchronisation outside the kernels")
    memory_reserve_GB: float = field(4.0, lo=0.0, hi=1e5, doc="CUDA context, allocator slack, CUDA graphs")
    sm_version: int = field(
        0, lo=0, hi=1000, doc="CUDA compute capability x 10 (80 Ampere, 90 Hopper, 100 Blackwell); 0 = unknown"
    )
    host_kv_GB: float = field(0.0, lo=0.0, hi=1e7, doc="host memory per GPU for a KV-cache tier (0 = none)")
    host_bw_GBps: float = field(0.0, lo=0.0, hi=1e5, doc="host -> GPU bandwidth per GPU, achievable (PCIe / C2C)")
    disk_kv_GB: float = field(0.0, lo=0.0, hi=1e9, doc="disk (local or distributed) per GPU for a KV-cache tier")
    disk_bw_GBps: float = field(0.0, lo=0.0, hi=1e5, doc="disk -> GPU read bandwidth per GPU, achievable")
    description: str = ""
    sources: dict[str, str] = None
    # keys older hardware files carry that no prediction ever read (issue 17: honoured or removed)
    REMOVED_KEYS = {
        "l2_MB": "no kernel model reads the L2 size",
        "nics_per_gpu": "rdma_bw_GBps is already the scale-out bandwidth per GPU, all its NICs together",
    }

    def _validate(self, file=None, path=""):
        where = f"{file}: " if file else ""
        if not _NAME.fullmatch(self.name):  # the name picks calibration/profiles/<name>.yaml
            raise SpecError(
                f"{where}name: {self.name[:40]!r}; allowed 1-64 letters, digits, '.', '_', '+', '-' "
                f"(starting with a letter or digit)"
            )
        for key in _OPTIONAL_RATES:
            if 0.0 < getattr(self, key) < MIN_RATE:
                raise SpecError(
                    f"{where}{key}: {getattr(self, key)!r} out of range, allowed 0 (none) or [{MIN_RATE}, ...]"
                )
        if (self.nvlink_bw_GBps > 0) != (self.nvlink_eff_bw_GBps > 0):
            raise SpecError(
                f"{where}nvlink_eff_bw_GBps: {self.nvlink_eff_bw_GBps} with nvlink_bw_GBps={self.nvlink_bw_GBps}; "
                "allowed: both 0 (no NVLink) or both > 0"
            )
        if self.nvlink_eff_bw_GBps > self.nvlink_bw_GBps:
            raise SpecError(
                f"{where}nvlink_eff_bw_GBps: {self.nvlink_eff_bw_GBps} exceeds nominal nvlink_bw_GBps={self.nvlink_bw_GBps}"
            )
        if self.rdma_eff_bw_GBps > self.rdma_bw_GBps:
            raise SpecError(
                f"{where}rdma_eff_bw_GBps: {self.rdma_eff_bw_GBps} exceeds nominal rdma_bw_GBps={self.rdma_bw_GBps}"
            )
        if self.memory_reserve_GB >= self.memory_GB:
            raise SpecError(
                f"{where}memory_reserve_GB: {self.memory_reserve_GB} must be below memory_GB={self.memory_GB}"
            )
        if (
            self.nvlink_domain_gpus
            and self.nvlink_domain_gpus % self.gpus_per_node
            and self.gpus_per_node % self.nvlink_domain_gpus
        ):
            raise SpecError(
                f"{where}nvlink_domain_gpus: {self.nvlink_domain_gpus} must be a multiple or divisor of gpus_per_node={self.gpus_per_node}"
            )

    # ------------------------------------------------------------------ SI views
    def peak_flops(self, dtype: Dtype) -> float:
        d = Dtype(dtype)
        if d == Dtype.FP8:
            return self.fp8_tflops * U.TFLOPS
        if d == Dtype.FP4:
            return (self.fp4_tflops or self.fp8_tflops) * U.TFLOPS
        if d == Dtype.FP32:
            return (self.fp32_tflops or self.bf16_tflops / 2) * U.TFLOPS
        return self.bf16_tflops * U.TFLOPS

    memory_bytes = _si("memory_GB", U.GB)
    memory_reserve_bytes = _si("memory_reserve_GB", U.GB)
    hbm_bw_Bps = _si("hbm_bw_GBps", U.GBPS)
    nvlink_latency_s = _si("nvlink_latency_us", U.US)
    rdma_latency_s = _si("rdma_latency_us", U.US)
    kernel_launch_s = _si("kernel_launch_us", U.US)
    kernel_launch_eager_s = _si("kernel_launch_eager_us", U.US)
    layer_sync_s = _si("layer_sync_us", U.US)
    host_kv_bytes = _si("host_kv_GB", U.GB)
    host_Bps = _si("host_bw_GBps", U.GBPS)
    disk_kv_bytes = _si("disk_kv_GB", U.GB)
    disk_Bps = _si("disk_bw_GBps", U.GBPS)

    @property
    def sm_generation(self) -> int:
        """The SM architecture generation (compute capability major: 8 Ampere, 9 Hopper, 10 Blackwell;
        0 = unknown). Calibrated efficiencies transfer between GPUs of one generation only
        (moesim.calibration.fit.derive)."""
        return int(self.sm_version) // 10

    @property
    def has_fp8(self) -> bool:
        """FP8 tensor cores: compute capability 8.9 and up (Ada, Hopper, Blackwell; CUDA programming
        guide, FP8 in the compute-capability feature table). Ampere (8.0) runs FP8 GEMMs at its BF16
        rate (the spec's fp8_tflops = bf16_tflops), so it has no FP8 peak to show. Unknown version:
        a spec whose FP8 peak exceeds its BF16 peak."""
        if self.sm_version:
            return self.sm_version >= 89
        return self.fp8_tflops > self.bf16_tflops

    @property
    def domain_gpus(self) -> int:
        """GPUs reachable over NVLink (the 'node' for EP traffic splitting); without NVLink
        (nvlink_bw_GBps 0) every GPU is its own domain: all its traffic goes over the NIC."""
        if self.nvlink_bw_GBps <= 0:
            return 1
        return self.nvlink_domain_gpus or self.gpus_per_node

    def nvlink_Bps(self, achievable: bool) -> float:
        return (self.nvlink_eff_bw_GBps if achievable else self.nvlink_bw_GBps) * U.GBPS

    def rdma_Bps(self, achievable: bool) -> float:
        return (self.rdma_eff_bw_GBps if achievable else self.rdma_bw_GBps) * U.GBPS
