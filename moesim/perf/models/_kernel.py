"""What every kernel model module (moesim.perf.models.<model>) prices with: the live hardware
(KernelContext), the entry's dtype and work for a shape, the measured residual R(shape) of the
priced variant, and the efficiencies / time of a model's compute and memory sides."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.perf import efficiency as E
from moesim.perf.profile import residual as RS
from moesim.perf.profile.provenance import fit_status
from moesim.perf.profile.variants import pick_variant
from moesim.perf.profile.work import family_work, peak_flops

# a family's dtype when neither the shape nor the entry names one
DEFAULT_DTYPE = {
    "gemm": "fp8",
    "grouped_gemm": "fp8",
    "bmm": "fp8",
    "mla_decode": "bf16",
    "mla_prefill": "bf16",
    "attention": "bf16",
    "elementwise": "bf16",
    "moe": "fp8",
    "quant": "fp8",
}


@dataclass(frozen=True)
class KernelContext:
    """The hardware a profile entry is priced on: dense peaks per dtype (FLOP/s), HBM bandwidth (B/s),
    SMs, the SM count the entries were fitted at, and the folder of the profile (residual side-cars)."""

    flops: dict
    hbm_Bps: float
    sms: int
    fit_sms: int
    root: Path | None = None

    def peak(self, dtype) -> float:
        return peak_flops(self.flops, dtype)


def dtype_of(family: str, e: dict, shape: dict) -> str:
    """The priced dtype: the shape's, else the entry's, else the family's default (lower case)."""
    dtype = shape.get("dtype") or e.get("dtype") or DEFAULT_DTYPE[family]
    return str(getattr(dtype, "value", dtype)).lower()


def work_of(ctx: KernelContext, family: str, e: dict, shape: dict):
    """(F, B_in, B_out, CTAs per SM, peak FLOP/s) of the entry's kernel at a shape (perf.profile.work)."""
    dtype = dtype_of(family, e, shape)
    return (*family_work(family, dtype, ctx.sms, shape), ctx.peak(dtype))


def tile_pad(shape: dict):
    """MMA work over useful work (routed groups' partial tiles), 1 by default."""
    pad = shape.get("tile_pad")
    return 1.0 if pad is None else np.asarray(pad, float)


def block_factor(ctx: KernelContext, block: dict | None, shape: dict):
    """R(shape) of a measured residual block (moesim.perf.profile.residual); 1 where there is none."""
    if not block:
        return 1.0
    return RS.load_residual(block, ctx.root).factor(shape)


def residual_factor(ctx: KernelContext, family: str, e: dict, shape: dict):
    """R(shape) of the priced variant's measured residual: the measurement / physics ratio interpolated
    at the measured shapes, 1 far outside them; 1 where the variant has none or the entry is derived
    from another family's fit (bmm from gemm: not its measurements)."""
    if fit_status(e) == "derived":
        return 1.0
    v = pick_variant(e, dtype_of(family, e, shape), shape.get("layout"))
    return block_factor(ctx, v.get("residual"), shape)


def efficiency_of(ctx: KernelContext, sides):
    """(eta_c, eta_m, fixed_s) of a fitted model's sides (c, m, fixed, F, B, peak): eta_c on the FLOP
    time and eta_m on the byte time (moesim.perf.efficiency.side_efficiencies)."""
    c, m, fixed, F, B, peak = sides
    return (*E.side_efficiencies(F, B, c, m, peak, ctx.hbm_Bps, fixed), fixed)


def from_sides(sides):
    """(efficiency, time) of a fitted model whose `sides(ctx, family, entry, shape)` gives (compute
    side, memory side, fixed, F, B, peak): the efficiencies of those sides (`efficiency_of`) and their
    max, the modelled time in seconds. Every fitted kernel model but `peak` is defined this way."""

    def efficiency(ctx: KernelContext, family: str, e: dict, shape: dict):
        return efficiency_of(ctx, sides(ctx, family, e, shape))

    def time(ctx: KernelContext, family: str, e: dict, shape: dict):
        return np.maximum(*sides(ctx, family, e, shape)[:2])

    return efficiency, time
