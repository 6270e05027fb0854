"""Schedule invariants on random op costs (issue 4)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.api import estimate
from moesim.enums import OpKind, Stream, Tag
from moesim.perf.cost import OpCost
from moesim.schedule.schemes import SCHEMES, layer_period

COMPUTE_OPS = [
    ("attn_norm", 1),
    ("qkv_a_proj", 1),
    ("attn_core", 2),
    ("o_proj", 2),
    ("router", 2),
    ("shared_gate_up", 3),
    ("shared_down", 3),
    ("experts_gate_up", 4),
    ("experts_down", 4),
]


def _costs(times, disp, comb, sm_share=0.0):
    out = []
    for (name, stage), t in zip(COMPUTE_OPS, times):
        t = np.asarray(t, float)
        z = np.zeros_like(t)
        tags = frozenset({Tag.ROUTED, Tag.EXPERTS_DOWN}) if name == "experts_down" else frozenset()
        out.append(OpCost(name, Stream.COMPUTE, stage, t, t, z, z, z.astype(int), "roofline", z, z, tags=tags))
    for name, stage, t in (("dispatch", 3, disp), ("combine", 4, comb)):
        t = np.asarray(t, float)
        z = np.zeros_like(t)
        out.append(
            OpCost(
                name,
                Stream.COMM,
                stage,
                t,
                z,
                z,
                t,
                z.astype(int) + 2,
                "roofline",
                z,
                z,
                sm_share=sm_share,
                kind=OpKind.ALL_TO_ALL,
                tags=frozenset({Tag.A2A, Tag.DISPATCH if name == "dispatch" else Tag.COMBINE}),
            )
        )
    return out


def _gemm_cap(scheme, share):
    """Slowdown of a GEMM the scheme runs on (1 - share) of the SMs for the whole forward."""
    return 1.0 / (1.0 - share) if scheme.caps_gemm_sms and share else 1.0


times_st = st.lists(st.floats(0.0, 500e-6, allow_nan=False), min_size=len(COMPUTE_OPS), max_size=len(COMPUTE_OPS))
comm_st = st.floats(0.0, 2e-3, allow_nan=False)


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=200, deadline=None)
@given(times_st, comm_st, comm_st, st.sampled_from([0.0, 24 / 132]), st.sampled_from(sorted(SCHEMES)))
def test_overlap_never_worse_than_serial_execution(times, disp, comb, share, name):
    scheme = SCHEMES[name]
    costs = _costs(times, disp, comb, share)
    # the same kernels one after another, GEMMs (every compute op here) on the SMs the engine
    # gives them (a TBO forward caps DeepGEMM at SMs - comm SMs throughout)
    serial_same_costs = scheme.micro_batches * (sum(times) * _gemm_cap(scheme, share) + disp + comb)
    assert float(layer_period(costs, scheme)) <= serial_same_costs * (1 + 1e-9) + 1e-15


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=200, deadline=None)
@given(times_st, st.sampled_from(sorted(SCHEMES)))
def test_zero_comm_equals_serial_compute(times, name):
    scheme = SCHEMES[name]
    costs = _costs(times, 0.0, 0.0, 24 / 132)
    # with micro-batches, the penalty is in the op costs (built at m/2): the period is ub x compute
    want = scheme.micro_batches * sum(times) * _gemm_cap(scheme, 24 / 132)
    assert float(layer_period(costs, scheme)) == pytest.approx(want, rel=1e-9, abs=1e-15)


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=100, deadline=None)
@given(times_st, comm_st, comm_st, st.floats(1.0, 4.0), st.sampled_from(sorted(SCHEMES)))
def test_longer_comm_never_speeds_up(times, disp, comb, f, name):
    a = float(layer_period(_costs(times, disp, comb, 24 / 132), SCHEMES[name]))
    b = float(layer_period(_costs(times, disp * f, comb * f, 24 / 132), SCHEMES[name]))
    assert b >= a * (1 - 1e-12)


def test_vectorized_equals_scalar():
    rng = np.random.default_rng(0)
    times = [rng.uniform(0, 3e-4, 50) for _ in COMPUTE_OPS]
    disp, comb = rng.uniform(0, 1e-3, 50), rng.uniform(0, 1e-3, 50)
    for scheme in SCHEMES.values():
        vec = layer_period(_costs(times, disp, comb, 0.1), scheme)
        for i in range(0, 50, 7):
            one = layer_period(_costs([t[i] for t in times], disp[i], comb[i], 0.1), scheme)
            assert float(vec[i]) == pytest.approx(float(one), rel=1e-12)


CASE = dict(phase="decode", ep=144, dp=144, tp=1, redundant_experts=32, batch=88, context=4989, mtp=1)


@pytest.mark.parametrize(
    "field",
    [
        "hardware.rdma_bw_GBps",
        "hardware.hbm_bw_GBps",
        "hardware.nvlink_bw_GBps",
        "hardware.fp8_tflops",
        "hardware.bf16_tflops",
    ],
)
@pytest.mark.parametrize("overlap", ["serial", "shared", "five-stage", "ideal"])
def test_halving_a_rate_never_speeds_a_step(field, overlap):
    from moesim import load_hardware

    h = load_hardware("h800")
    key = field.split(".")[1]
    half = [f"{field}={getattr(h, key) / 2}"]
    if key.startswith(("rdma", "nvlink")):
        eff = key.replace("_bw_", "_eff_bw_")
        half.append(f"hardware.{eff}={min(getattr(h, eff), getattr(h, key) / 2)}")
    base = estimate("deepseek-v3", "h800", overlap=overlap, cost_mode="roofline", **CASE)["step_time_s"]
    slow = estimate("deepseek-v3", "h800", overlap=overlap, cost_mode="roofline", set=half, **CASE)["step_time_s"]
    assert slow >= base * (1 - 1e-12)


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=200, deadline=None)
@given(times_st, comm_st, comm_st, st.sampled_from([0.0, 24 / 132]), st.sampled_from(sorted(SCHEMES)))
def test_two_layers_reach_steady_state(times, disp, comb, share, name):
    costs = _costs(times, disp, comb, share)
    assert float(layer_period(costs, SCHEMES[name])) == pytest.approx(
        float(layer_period(costs, SCHEMES[name], periods=10)), rel=1e-9, abs=1e-15
    )
