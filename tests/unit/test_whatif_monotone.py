"""Every what-if on a bandwidth or a FLOP/s moves the answer (issue 14 bug: `--comm pplx` / `nccl`
at EP128 gave the same step for rdma_bw_GBps = 50 / 100 / 400, the pplx per-EP knots being
absolute GB/s and an override of a nominal link leaving its achievable twin behind)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.engine.phases import estimate
from moesim.enums import CommMode, CostMode

BASE = dict(model="deepseek-v3", hardware="h100_sxm", ep=128, dp=128, batch=64, context=4000, overlap="serial")
FAST = {("pplx", "calibrated"), ("nccl", "calibrated")}  # the two the issue names; the rest are slow
# resource -> (field, the ops whose time uses it)
RESOURCES = {
    "rdma": ("rdma_bw_GBps", {"dispatch", "combine"}),
    "nvlink": ("nvlink_bw_GBps", set()),
    "hbm": ("hbm_bw_GBps", set()),
    "flops": ("fp8_tflops", set()),
}


def _ops(comm, cost, field=None, value=None):
    sets = [f"hardware.{field}={value}"] if field else []
    r = estimate(**BASE, comm=comm, cost_mode=cost, set=sets)
    return float(np.ravel(r["step_time_s"])[0]), {o["name"]: o["time_s"] for o in r.ops}


@pytest.mark.parametrize(
    "comm,cost",
    [
        pytest.param(c.value, k.value, marks=() if (c.value, k.value) in FAST else pytest.mark.slow)
        for c in CommMode
        for k in CostMode
    ],
)
def test_ep128_step_moves_with_rdma_bw(comm, cost):
    steps = [_ops(comm, cost, "rdma_bw_GBps", bw)[0] for bw in (25, 50, 100, 400)]
    assert all(a > b for a, b in zip(steps, steps[1:])), (comm, cost, steps)


@pytest.mark.slow  # ~12 estimates per example
@settings(max_examples=12, deadline=None)
@given(
    comm=st.sampled_from([c.value for c in CommMode]),
    cost=st.sampled_from([c.value for c in CostMode]),
    resource=st.sampled_from(sorted(RESOURCES)),
    factor=st.floats(1.25, 4.0),
)
def test_raising_a_resource_never_slows_an_op(comm, cost, resource, factor):
    from moesim.specs.loader import load_hardware

    field, must_move = RESOURCES[resource]
    base_value = getattr(load_hardware("h100_sxm"), field)
    step0, ops0 = _ops(comm, cost)
    step1, ops1 = _ops(comm, cost, field, base_value * factor)
    for name, t in ops0.items():
        assert ops1[name] <= t * (1 + 1e-9), (name, resource, factor)
        if name in must_move:
            assert ops1[name] < t, (name, resource, factor)
    assert step1 <= step0 * (1 + 1e-9)
    if resource == "rdma":
        assert step1 < step0
