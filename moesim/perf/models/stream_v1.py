"""stream_v1: a streaming kernel (FP8 activation quant, permute): a fixed cost plus its bytes at a
fraction of HBM bandwidth,

    T = alpha + B / (W eta_m)

fitted per (dtype, backend, op) variant on measured quant rows (moesim.calibration.fit.gemm.fit_stream;
fit below: its least-squares core). Its compute side is its alpha (no math worth pricing).
"""

from __future__ import annotations

import numpy as np

from moesim.perf.models import _kernel as K
from moesim.perf.models.params import ETA, US
from moesim.perf.models.sibling import as_is
from moesim.perf.profile.variants import pick_variant
from moesim.perf.profile.work import entry_keys, family_work

NAME = "stream_v1"
# source: the fit (moesim.calibration.fit.gemm.fit_stream) on measured quant rows
PARAMS = {
    "alpha_us": US,  # fixed per-call latency, us (holds the launch gap on call-time fits)
    "eta_m": ETA,  # bytes streamed at this fraction of HBM bandwidth
}
# fit: (alpha_us, eta_m) bounds and starts
FIT_LO, FIT_HI, FIT_STARTS = [0.0, 0.005], [1e4, 1.0], [[2.0, 0.7], [10.0, 0.3]]


def stream_time(nbytes, bw, p: dict):
    """alpha + bytes / (W eta_m), seconds (nbytes in B, bw in B/s)."""
    return float(p["alpha_us"]) * 1e-6 + np.asarray(nbytes, float) / (bw * float(p["eta_m"]))


def model_sides(family: str, dtype: str, sms, bw, p: dict, shape: dict):
    """(compute side, memory side, alpha): the compute side is the alpha, the memory side the time."""
    t = stream_time(family_work(family, dtype, sms, shape)[1], bw, p)
    alpha = np.minimum(t, float(p["alpha_us"]) * 1e-6)
    return alpha, t, alpha


def sides(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    """(compute side, memory side, fixed, F, B, peak) of an entry at a shape (residual included)."""
    F, b_in, b_out, _, peak = K.work_of(ctx, family, e, shape)
    v = pick_variant(e, dtype := K.dtype_of(family, e, shape), shape.get("layout"))
    keyed = {**shape, **entry_keys(family, v)}
    c, m, fixed = model_sides(family, v.get("dtype", dtype), ctx.sms, ctx.hbm_Bps, v["params"], keyed)
    r = K.residual_factor(ctx, family, e, shape)
    return c * r, m * r, fixed * r, F, b_in + b_out, peak


efficiency, time = K.from_sides(sides)  # the efficiencies of the sides, and their max (s)


def fit(nbytes, bw, t, solve):
    """(alpha_us, eta_m) minimizing the log error of stream_time against measured times t (s);
    solve(residuals, starts, lo, hi): the caller's bounded least squares."""
    return solve(lambda x: np.log(stream_time(nbytes, bw, as_params(x)) / t), FIT_STARTS, FIT_LO, FIT_HI)


def as_params(x) -> dict:
    return {"alpha_us": x[0], "eta_m": x[1]}


# sibling GPU (moesim.perf.models.sibling): alpha and the fraction of the live HBM bandwidth carry over
transfer = as_is
