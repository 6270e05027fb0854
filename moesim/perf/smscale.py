"""Kernel costs on a GPU whose SM count differs from the one its calibration profile was fitted on
(`--set hardware.sms=N`; issue 17: more SMs never predict a slower kernel).

The fitted kernel models take the SM count as an input (waves_v1 GEMM tiling, overlap_v1 CTAs per
SM, mla_v2 attention grids) with the per-SM rates fixed: the loader scales the peaks with the SMs
(moesim.specs.loader), so a GPU of u SMs has peak x u / sms. Wave quantization and the engines'
launch heuristics (DeepGEMM's tile choice, split-KV counts) make a model's time alone not monotone
in the SM count. A GPU can run a smaller GPU's launch (the same grid on u of its SMs, the rest
idle: kernels size their grids from the SM count they are given, DeepGEMM num_sms, FlashMLA
get_mla_metadata num_sm_parts), so with `fit` the fitted GPU's SMs and `sms` the live ones:

    sms > fit:  T(sms) = min(T(sms), T(fit))   (never slower than the fitted GPU)
    sms < fit:  T(sms) = max(T(sms), T(fit))   (never faster than it)

each T the whole op cost (the model's compute and memory sides scaled by the op's own work), exactly the fitted
model at `fit`, one extra pricing in a what-if. Between two counts on the same side of `fit` the
model alone decides (the least over every count in between: one pricing per SM count).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

# the peaks that scale with the SM count (moesim.specs.loader._SM_PEAKS)
_PEAKS = ("fp8_tflops", "bf16_tflops", "fp4_tflops", "fp32_tflops")


def fitted_sms(profile) -> int | None:
    """The SM count `profile` was fitted at, or None (no profile)."""
    return None if profile is None else int(getattr(profile, "_fit_sms", 0) or 0) or None


def at_fitted_sms(hw, profile):
    """(hardware, profile) as the live GPU would be with the fitted SM count: same per-SM rates."""
    fit = fitted_sms(profile)
    r = fit / hw.sms
    hw_fit = dataclasses.replace(hw, sms=fit, **{k: getattr(hw, k) * r for k in _PEAKS})
    view = copy.copy(profile)
    view.hardware, view._sms = hw_fit, fit
    view._flops = {d: f * r for d, f in profile._flops.items()}
    return hw_fit, view


def bounded(live, fit, more: bool):
    """The OpCost `live` with, per element, `fit`'s numbers where fit is faster (more SMs than the
    fit's) or slower (fewer)."""
    use = (fit.time_s < live.time_s) if more else (fit.time_s > live.time_s)
    if not np.any(use):
        return live
    for name in ("time_s", "compute_s", "memory_s", "bound"):
        setattr(live, name, np.where(use, getattr(fit, name), getattr(live, name)))
    if live.provenance != fit.provenance:
        live.provenance = f"{live.provenance}+{fit.provenance}"
    return live
