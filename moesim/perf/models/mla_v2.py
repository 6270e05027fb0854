"""mla_v2: attention kernels (FlashMLA / FlashInfer / XQA / MMHA decode and prefill, per phase and
dtype variant): a fixed cost, per-CTA and per-request terms, the compute and load sides of the
kernel's own work with a load-saturation term, and the unfused up-cast / query-quant passes. The
formula and the attention work live in moesim.perf.attention_eff (attn_sides, entry_sides), which the
fit (moesim.calibration.fit.attention: rows, structure, CV, writing) shares; this module is the
model's entry in the registry and holds the fit's least-squares core (fit below).
"""

from __future__ import annotations

import numpy as np

from moesim.perf import attention_eff as A
from moesim.perf.models import _kernel as K
from moesim.perf.models.params import ETA, US, Num
from moesim.perf.models.sibling import as_is

NAME = "mla_v2"
# source: the fit (moesim.calibration.fit.attention) on measured attention rows
PARAMS = {
    "alpha_us": US,  # fixed per-call latency, us
    "eta_c": ETA,  # math at this fraction of the BF16 dense peak
    "eta_m": ETA,  # loads at this fraction of HBM bandwidth
    "cta_us": US,  # per CTA wave, us
    "sat": Num(0.0, 4.0, lo_open=True),  # CTAs per SM that saturate the loads (XQA: up to 4)
    "req_us": US._replace(optional=True),  # per request of the batch, us
    "pass_eta": ETA._replace(optional=True),  # unfused KV up-cast pass
    "qpass_eta": ETA._replace(optional=True),  # unfused query FP8-quantization pass
    "q": Num(1.0, optional=True, inf_ok=True),  # load/compute combination exponent
}
SHAPE_NEEDS = ("batch", "q_len", "heads", "context")
# fit: the fitted vector (combine_us / floor_us: attention_eff.attn_time's split-KV combine and floor;
# pass_eta: the unfused pass's, written under its kind's name) and its bounds
FIT_NAMES = ("alpha_us", "eta_c", "eta_m", "cta_us", "sat", "combine_us", "floor_us", "req_us", "pass_eta")
FIT_LO = np.array([0.0, 0.01, 0.01, 0.0, 0.01, 0.0, 0.0, 0.0, 0.005])
FIT_HI = np.array([1e4, 1.0, 1.0, 1e3, 1.0, 1e3, 1e4, 1e3, 1.0])
NP = len(FIT_NAMES)


def sides(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    """(compute side, memory side, fixed, F, B, peak) of an entry at a shape (each variant's measured
    residual on both sides); peak: the BF16 dense peak."""
    if any(shape.get(c) is None for c in SHAPE_NEEDS):
        raise TypeError(f"kernel_efficiency({family!r}) needs shape {', '.join(SHAPE_NEEDS)}")
    peak = ctx.peak("bf16")

    def factor(v: dict, sh: dict):
        return K.block_factor(ctx, v.get("residual"), sh)

    return (*A.entry_sides(family, e, shape, peak, ctx.hbm_Bps, ctx.sms, factor, fit_sms=ctx.fit_sms), peak)


efficiency, time = K.from_sides(sides)  # the efficiencies of the sides, and their max (s)


def fit_time(p, work, hw, q=np.inf):
    """Modelled seconds of a fitted vector p (FIT_NAMES order) on work (F, B, CTAs, split-KV, pass
    elements, pass bytes per element, batch: moesim.calibration.fit.attention.work_arrays) and hw
    (peak FLOP/s, HBM B/s, SMs): the kernel (attention_eff.attn_time) plus its unfused pass."""
    F, B, ctas, split, pass_elems, pass_bytes, batch = work[:7]
    peak, bw, sms = hw
    t = A.attn_time(F, B, ctas, split, peak, bw, sms, dict(zip(FIT_NAMES, p), q=q), batch)
    return t + (A.pass_time(pass_elems, pass_bytes, bw, p[NP - 1]) if pass_bytes else 0.0)


def fit(work, hw, t, solve, q=np.inf, bounds=None):
    """The vector (FIT_NAMES order) minimizing the log error of fit_time against measured times t (s);
    pass_eta 0 where no unfused pass is modelled, combine_us pinned to 0 where no row splits the KV (not
    identifiable); bounds: the kernel's (eta_c lower, sat upper) (XQA's sat may exceed 1, MMHA's eta_c
    is on CUDA cores). solve(residuals, starts, lo, hi): the caller's (robust) bounded least squares."""
    n = NP if work[5] else NP - 1
    lo, hi = FIT_LO.copy(), FIT_HI.copy()
    if bounds is not None:
        lo[1], hi[4] = bounds
    if not np.any(work[3]):
        hi[FIT_NAMES.index("combine_us")] = 1e-9

    def res(p):
        return np.log(fit_time(np.concatenate([p, [0.0] * (NP - n)]), work, hw, q) / t)

    t_min = float(np.min(t)) * 1e6
    starts = (
        [0.8 * t_min, 0.5, 0.7, 1.0, 0.3, 2.0, 0.0, 0.0, 0.2][:n],
        [0.3 * t_min, 0.3, 0.3, 5.0, 1.0, 0.0, t_min, 0.1, 0.05][:n],
    )
    return np.concatenate([solve(res, starts, lo[:n], hi[:n]), [0.0] * (NP - n)])


# sibling GPU (moesim.perf.models.sibling): efficiencies, per-call / CTA / request latencies and the
# saturation carry over
transfer = as_is
