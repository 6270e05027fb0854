"""Peak numbers the fitted efficiencies are relative to: the hardware spec's, or, for a device
without one (the CPU backend), the best throughput observed in the rows."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from moesim.calibration.fit.data import work_of_row
from moesim.perf.profile.schema import roofline_to_yaml
from moesim.perf.profile.work import peak_flops


@dataclass
class Peaks:
    """Peak numbers the efficiencies are relative to (hardware spec, or derived from the data)."""

    name: str
    flops: dict  # dtype -> FLOP/s
    hbm_Bps: float
    sms: int
    nvlink_Bps: float = 0.0  # nominal, per direction
    rdma_Bps: float = 0.0
    nvlink_eff_Bps: float = 0.0
    rdma_eff_Bps: float = 0.0
    nvlink_latency_s: float = 0.0
    rdma_latency_s: float = 0.0
    domain_gpus: int = 8
    launch_s: float = 0.0
    source: str = ""
    sm_generation: int = 0  # compute capability major (9 Hopper); 0 unknown

    @classmethod
    def from_hardware(cls, hw) -> Peaks:
        flops = {d: hw.peak_flops(d) for d in ("fp8", "bf16", "fp16", "fp32")}
        return cls(
            name=hw.name,
            flops=flops,
            hbm_Bps=hw.hbm_bw_Bps,
            sms=int(hw.sms),
            nvlink_Bps=hw.nvlink_Bps(False),
            rdma_Bps=hw.rdma_Bps(False),
            nvlink_eff_Bps=hw.nvlink_Bps(True),
            rdma_eff_Bps=hw.rdma_Bps(True),
            nvlink_latency_s=hw.nvlink_latency_s,
            rdma_latency_s=hw.rdma_latency_s,
            domain_gpus=int(hw.domain_gpus),
            launch_s=hw.kernel_launch_s,
            source=f"hardware/{hw.name}.yaml ({hw.source})",
            sm_generation=hw.sm_generation,
        )

    def peak(self, dtype) -> float:
        return peak_flops(self.flops, dtype)

    def as_yaml(self) -> dict:
        """The profile's `roofline` block."""
        return roofline_to_yaml(
            self.source, self.sms, self.hbm_Bps, self.flops, self.nvlink_Bps, self.rdma_Bps, self.domain_gpus
        )


def derive_peaks(name: str, df: pd.DataFrame) -> Peaks:
    """For a device without a hardware spec (e.g. the CPU backend): peaks = best observed.

    Efficiencies are relative, so any consistent peak works; using the best observed throughput
    keeps every eta <= 1. The SM count becomes the thread count recorded with the rows.
    """
    flops, best_bw = {}, 0.0
    timed = df[np.isfinite(df.time_s) & (df.time_s > 0)]
    for r in timed.itertuples():
        F, b_in, b_out = work_of_row(r)
        if F is None:
            continue
        dt = (r.dtype or "fp32").lower()
        flops[dt] = max(flops.get(dt, 0.0), F / r.time_s)
        best_bw = max(best_bw, (b_in + b_out) / r.time_s)
    mem = timed[(timed.kernel == "memcpy") & (timed.op != "launch") & np.isfinite(timed.bytes)]
    if len(mem):
        best_bw = max(best_bw, float((mem.bytes * 2.0 / mem.time_s).max()))
    if not flops:
        flops = {"fp32": 1e12}
    sms = int(np.nanmax(df.sms)) if np.isfinite(df.sms).any() else (os.cpu_count() or 1)
    return Peaks(
        name=name,
        flops=flops,
        hbm_Bps=best_bw or 1e11,
        sms=max(sms, 1),
        source="derived: best throughput observed in the measurement rows (no hardware spec for "
        f"{name!r}); efficiencies are relative to it",
    )
