"""`--set hardware.sms=N` (issue 17): compute scales with the SM count (the peaks keep their per-SM
rate) and more SMs never predict a slower step. Roofline: monotone between any two counts.
Calibrated: the profiles were fitted at the GPU's own count, so a count above it is never slower
than the GPU itself and one below never faster (moesim.perf.smscale); the comm kernels' SM share
(DeepEP normal's 20 SMs) is a share of the live count."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.api import estimate
from moesim.errors import ConfigError
from moesim.specs import load_hardware

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPUS = {"h800": 132, "h200": 132, "b200": 148}
CONFIGS = [
    dict(ep=16, dp=16, batch=64, context=4096),
    dict(ep=8, dp=8, batch=256, context=4096, comm="deepep-ll", overlap="two-batch"),
    dict(ep=32, dp=32, batch=256, context=512, comm="deepep-normal", overlap="two-batch"),
    dict(ep=16, dp=16, batch=8192, context=4096, phase="prefill"),
    dict(ep=8, dp=8, batch=2048, context=2048, phase="prefill", comm="deepep-normal", overlap="two-batch"),
]


def _step(gpu, sms, mode, cfg):
    s = [] if sms is None else [f"hardware.sms={sms}"]
    r = estimate("deepseek-v3", gpu, set=s, cost_mode=mode, **cfg)
    return float(np.ravel(r["step_time_s"])[0])


def test_sms_alone_scales_every_peak():
    base, half = load_hardware("h800"), load_hardware("h800", {"sms": 66})
    assert half.fp8_tflops == base.fp8_tflops / 2 and half.bf16_tflops == base.bf16_tflops / 2
    assert half.fp32_tflops == base.fp32_tflops / 2 and half.hbm_bw_GBps == base.hbm_bw_GBps
    both = load_hardware("h800", {"sms": 66, "fp8_tflops": 1000})  # a peak given with it is kept
    assert both.fp8_tflops == 1000 and both.bf16_tflops == base.bf16_tflops


@settings(max_examples=12, **SETTINGS)
@given(gpu=st.sampled_from(sorted(GPUS)), cfg=st.sampled_from(CONFIGS), a=st.integers(21, 600), b=st.integers(21, 600))
def test_more_sms_never_slower_roofline(gpu, cfg, a, b):
    lo, hi = sorted((a, b))
    assert _step(gpu, hi, "roofline", cfg) <= _step(gpu, lo, "roofline", cfg) * (1 + 1e-12)


def _against_own(gpu, cfg, sms):
    own, t = _step(gpu, None, "calibrated", cfg), _step(gpu, sms, "calibrated", cfg)
    assert np.isfinite(t)
    if sms > GPUS[gpu]:
        assert t <= own * (1 + 1e-12)
    elif sms < GPUS[gpu]:
        assert t >= own * (1 - 1e-12)


@pytest.mark.parametrize(
    "gpu, cfg, sms", [("h800", CONFIGS[0], 264), ("h800", CONFIGS[1], 215), ("h200", CONFIGS[0], 79)]
)
def test_more_sms_than_the_gpu_never_slower_calibrated(gpu, cfg, sms):
    _against_own(gpu, cfg, sms)  # cases that were slower with more SMs before (issue 17)


@pytest.mark.slow
@settings(max_examples=25, **SETTINGS)
@given(gpu=st.sampled_from(sorted(GPUS)), cfg=st.sampled_from(CONFIGS), sms=st.integers(24, 600))
def test_more_sms_than_the_gpu_never_slower_calibrated_property(gpu, cfg, sms):
    _against_own(gpu, cfg, sms)


def test_the_fitted_count_prices_exactly_as_before():
    cfg = CONFIGS[0]
    assert _step("h800", 132, "calibrated", cfg) == _step("h800", None, "calibrated", cfg)


def test_comm_sm_share_is_of_the_live_count():
    """DeepEP normal holds 20 SMs: on a GPU with twice the SMs the overlapped compute loses half the
    share, so a two-batch prefill step gets no slower and its comm kernels keep their 20 SMs."""
    cfg = CONFIGS[4]
    r1 = estimate("deepseek-v3", "h800", cost_mode="roofline", **cfg)
    r2 = estimate("deepseek-v3", "h800", set=["hardware.sms=264"], cost_mode="roofline", **cfg)
    assert float(np.ravel(r2["step_time_s"])[0]) < float(np.ravel(r1["step_time_s"])[0])


def test_too_few_sms_for_deepep_normal_is_an_error():
    with pytest.raises(ConfigError, match="hardware.sms: 20 SMs"):
        _step("h800", 20, "roofline", CONFIGS[4])
    assert np.isfinite(_step("h800", 8, "roofline", CONFIGS[0]))  # LL decode holds none


def test_comm_kernels_sms_calibrated():
    """DeepEP normal runs on its own 20 SMs whatever the GPU has; the LL kernels launch one block per
    expert up to the GPU's SMs (256 experts > 132 SMs), so more SMs speed them up."""

    def comm(sets, cfg):
        r = estimate("deepseek-v3", "h800", set=sets, **cfg)
        return [o["time_s"] for o in r.ops if o["stream"] == "comm"]

    normal, ll = CONFIGS[4], dict(ep=8, dp=8, batch=64, context=2048, comm="deepep-ll")
    assert comm(["hardware.sms=264"], normal) == comm([], normal)
    assert all(a < b for a, b in zip(comm(["hardware.sms=264"], ll), comm([], ll)))
