"""mla_v2: attention kernels (FlashMLA / FlashInfer / XQA / MMHA decode and prefill, per phase and
dtype variant): a fixed cost, per-CTA and per-request terms, the compute and load sides of the
kernel's own work with a load-saturation term, and the unfused up-cast / query-quant passes. The
formula and the attention work live in moesim.perf.attention_eff (attn_sides, entry_sides), which the
fit (moesim.calibration.fit.attention) shares; this module is the model's entry in the registry.
"""

from __future__ import annotations

import numpy as np

from moesim.perf import attention_eff as A
from moesim.perf.models import _kernel as K
from moesim.perf.models.params import ETA, US, Num

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


def sides(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    """(compute side, memory side, fixed, F, B, peak) of an entry at a shape (each variant's measured
    residual on both sides); peak: the BF16 dense peak."""
    if any(shape.get(c) is None for c in SHAPE_NEEDS):
        raise TypeError(f"kernel_efficiency({family!r}) needs shape {', '.join(SHAPE_NEEDS)}")
    peak = ctx.peak("bf16")

    def factor(v: dict, sh: dict):
        return K.block_factor(ctx, v.get("residual"), sh)

    return (*A.entry_sides(family, e, shape, peak, ctx.hbm_Bps, ctx.sms, factor, fit_sms=ctx.fit_sms), peak)


def efficiency(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    return K.efficiency_of(ctx, sides(ctx, family, e, shape))


def time(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    return np.maximum(*sides(ctx, family, e, shape)[:2])
