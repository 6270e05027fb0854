"""overlap_v1: a GEMM-like kernel whose loads overlap its math (moesim.perf.efficiency module docstring):

    T = t0 + smax_q(F / (P eta_c u), B_in / (W eta_m u)) + B_out / W,    u = 1 - exp(-x / c)

x = CTAs per SM (too few CTAs leave SMs idle), q = load/compute combination exponent (inf: max).
Fitted by moesim.calibration.fit.kernels on measured kernel rows (fit below: its least-squares core).
"""

from __future__ import annotations

import numpy as np

from moesim.perf.efficiency import smax_sides
from moesim.perf.models import _kernel as K
from moesim.perf.models.params import ETA, Num
from moesim.perf.models.sibling import as_is

NAME = "overlap_v1"
# source: the fit (moesim.calibration.fit.kernels); eta_* fractions of the live peaks, t0 in us
PARAMS = {
    "eta_c": ETA,  # main-loop math at this fraction of the dense peak
    "eta_m": ETA,  # main-loop loads at this fraction of HBM bandwidth
    "t0_us": Num(0.0),  # fixed per-kernel overhead (pipeline fill, scheduling), us
    "c": Num(0.0, lo_open=True),  # CTAs per SM at which the SM fill is 1 - 1/e
    "q": Num(1.0, optional=True, inf_ok=True),  # combination exponent: absent / .inf = max
}
# fit: (eta_c, eta_m, t0_us, c) bounds
FIT_LO = np.array([0.005, 0.005, 0.0, 0.005])
FIT_HI = np.array([1.0, 1.0, 1e5, 50.0])


def overlap_sides(work, peak, bw, p: dict):
    """(compute side, memory side, t0_s) of the overlap_v1 time (smax_sides), whose max is the time.
    work: (F, B_in, B_out, CTAs per SM); peak FLOP/s; bw HBM B/s; p: eta_c, eta_m, t0_us, c, q."""
    flops, b_in, b_out, x = work
    q = p.get("q")
    q = np.inf if q is None else float(q)
    e_c, e_m, t0_s, c = float(p["eta_c"]), float(p["eta_m"]), float(p["t0_us"]) * 1e-6, float(p["c"])
    u = -np.expm1(-np.maximum(np.asarray(x, float), 1e-12) / max(c, 1e-12))
    u = np.maximum(u, 1e-12)
    main_c, main_m = smax_sides(
        np.asarray(flops, float) / (peak * e_c * u), np.asarray(b_in, float) / (bw * e_m * u), q
    )
    t_out = np.asarray(b_out, float) / bw
    return t0_s + main_c + t_out, t0_s + main_m + t_out, t0_s


def overlap_time(work, peak, bw, p: dict):
    """T_model of the overlap_v1 form (seconds)."""
    return np.maximum(*overlap_sides(work, peak, bw, p)[:2])


def sides(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    """(compute side, memory side, fixed, F, B, peak) of an entry at a shape (residual included): the
    padded tiles (tile_pad) lengthen the main loop's math; the roofline keeps the useful FLOPs."""
    F, b_in, b_out, x, peak = K.work_of(ctx, family, e, shape)
    c, m, fixed = overlap_sides((F * K.tile_pad(shape), b_in, b_out, x), peak, ctx.hbm_Bps, e["params"])
    r = K.residual_factor(ctx, family, e, shape)
    return c * r, m * r, fixed * r, F, b_in + b_out, peak


efficiency, time = K.from_sides(sides)  # the efficiencies of the sides, and their max (s)


def fit(work, peak, bw, t, solve, q=np.inf):
    """(eta_c, eta_m, t0_us, c) minimizing the log error of overlap_time against measured times t (s):
    solve(residuals, starts, lo, hi) is the caller's bounded least squares (moesim.calibration.fit.cv.lsq)."""

    def res(x):
        return np.log(overlap_time(work, peak, bw, as_params(x, q)) / t)

    t0_guess = float(np.min(t)) * 1e6 * 0.3
    starts = [[0.7, 0.8, t0_guess, c] for c in (0.05, 0.3, 2.0)] + [[0.3, 0.3, 0.0, 0.5]]
    return solve(res, starts, FIT_LO, FIT_HI)


def as_params(x, q=np.inf) -> dict:
    """The params mapping of a fitted vector (eta_c, eta_m, t0_us, c) and exponent q."""
    return {"eta_c": x[0], "eta_m": x[1], "t0_us": x[2], "c": x[3], "q": q}


# sibling GPU (moesim.perf.models.sibling): efficiencies (fractions of the live peaks), t0 and the CTA fill
# constant carry over
transfer = as_is
