"""peak: a kernel at constant fractions of the live peaks, from best-case published figures
(moesim.calibration.fit.kernels.fit_peak_family: achieved TFLOPS / dense peak, GB/s / HBM peak):

    T = max(F pad / (P eta_c), B / (W eta_m))        (pad: MMA work over useful work, >= 1)

No fixed cost; no sibling transfer needed (fractions of the live spec's peaks scale by themselves).
"""

from __future__ import annotations

import numpy as np

from moesim.perf.models import _kernel as K
from moesim.perf.models.params import ETA
from moesim.perf.models.sibling import as_is
from moesim.perf.profile.measured import numeric_shape

NAME = "peak"
# source: published "up to" figures (the fit's rows without time_s); fractions of the live peaks
PARAMS = {"eta_c": ETA, "eta_m": ETA}


def efficiency(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    """(eta_c / pad, eta_m, 0.0) broadcast to the shape: the constants, the compute one divided by the
    routed groups' tile padding."""
    p, pad = e["params"], K.tile_pad(shape)
    out = np.broadcast(np.empty(numeric_shape(shape)), pad).shape
    return (np.broadcast_to(float(p["eta_c"]) / pad, out).copy(), np.full(out, float(p["eta_m"])), 0.0)


def time(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    """max(F pad / (P eta_c), B / (W eta_m)) in seconds."""
    F, b_in, b_out, _, peak = K.work_of(ctx, family, e, shape)
    p = e["params"]
    F = F if shape.get("tile_pad") is None else F * K.tile_pad(shape)  # MMA work incl. partial tiles
    return np.maximum(F / (peak * float(p["eta_c"])), (b_in + b_out) / (ctx.hbm_Bps * float(p["eta_m"])))


def sides(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    raise TypeError(
        f"kernel_sides({family!r}): a `peak` entry has no fitted sides (kernel_efficiency gives its constants)"
    )


# sibling GPU (moesim.perf.models.sibling): fractions of the live spec's peaks carry over
transfer = as_is
