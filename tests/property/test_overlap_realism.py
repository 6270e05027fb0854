"""Two-batch prefill overlap that is not too perfect (issue 15 section 2, "Overlap realism"):
what the schedule exposes (fill/drain, unequal comm and compute, DeepEP normal's SMs) and what
moves it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.engine.estimate import estimate
from moesim.schedule.schemes import SCHEMES, TWO_BATCH, _simulate, layer_chain, layer_period
from tests.property.test_schedules import _costs, comm_st, times_st

# seed003's prefill (validation/seed_cases.yaml seed003-prefill-node-throughput) and an H200 EP16 prefill
SEED003 = dict(hardware="h800", ep=32, dp=32, tp=1, redundant_experts=32, batch=16384, context=4989)
H200_EP16 = dict(hardware="h200", ep=16, dp=16, tp=1, batch=16384, context=4096)
CASES = {"seed003": SEED003, "h200_ep16": H200_EP16}


def _run(case, overlap, **kw):
    c = dict(case)
    return estimate("deepseek-v3", c.pop("hardware"), phase="prefill", comm="deepep-normal", overlap=overlap, **c, **kw)


def _step(r):
    return float(np.ravel(r["step_time_s"])[0])


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_batch_between_its_resources_and_serial(case):
    """max(summed compute, summed comm) <= two-batch step <= serial step."""
    tb = _run(CASES[case], "two-batch")
    compute = sum(o["time_s"] for o in tb.ops if o["stream"] == "compute")
    comm = sum(o["time_s"] for o in tb.ops if o["stream"] != "compute")
    step = _step(tb)
    assert step >= max(compute, comm) * (1 - 1e-9)
    assert step <= _step(_run(CASES[case], "serial")) * (1 + 1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_batch_is_not_perfect(case):
    """The overlap leaves something exposed: the step is above its compute alone, and above the
    step's resource roofline (`ideal`)."""
    tb = _run(CASES[case], "two-batch")
    compute = sum(o["time_s"] for o in tb.ops if o["stream"] == "compute")
    assert _step(tb) > compute * 1.01
    assert _step(tb) > _step(_run(CASES[case], "ideal")) * 1.01


def test_nic_bandwidth_moves_the_overlapped_step():
    """A what-if on the NIC: half the RDMA bandwidth makes dispatch/combine longer than the
    compute they hide behind, so the two-batch step grows; a faster NIC never slows it."""
    from moesim import load_hardware

    h = load_hardware("h800")

    def sets(f):
        return [f"hardware.rdma_bw_GBps={h.rdma_bw_GBps * f}", f"hardware.rdma_eff_bw_GBps={h.rdma_eff_bw_GBps * f}"]

    base = _step(_run(SEED003, "two-batch"))
    slow = _step(_run(SEED003, "two-batch", set=sets(0.5)))
    fast = _step(_run(SEED003, "two-batch", set=sets(2.0)))
    assert slow > base * 1.01
    assert fast <= base * (1 + 1e-9)


def test_more_comm_sms_never_speed_the_compute():
    """DeepEP normal holds its SMs for the whole kernel: with the comm times held fixed, more comm
    SMs never shorten a layer; and in the estimate, the compute-stream share of a two-batch step
    (step minus what the comm alone would take) never shrinks."""
    costs = lambda share: _costs([2e-4] * 9, 6e-4, 9e-4, share)  # noqa: E731
    periods = [float(layer_period(costs(n / 132), TWO_BATCH)) for n in (0, 8, 20, 24, 32, 48)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(periods, periods[1:]))
    assert periods[-1] > periods[0]


def test_two_batch_gemms_run_on_the_compute_sms_throughout():
    """SGLang's TBO forward caps DeepGEMM at SMs - DeepEP SMs (DeepSeek: 108 of 132) even where no
    comm is in flight: with comm that takes no time, a two-batch layer's GEMMs take SMs/(SMs - comm
    SMs) of their time; the serial schedule (no TBO) runs them on every SM."""
    share = 24 / 132
    c = _costs([1e-4] * 9, 0.0, 0.0, share)
    assert float(layer_period(c, TWO_BATCH)) == pytest.approx(2 * 9e-4 / (1 - share), rel=1e-12)
    assert float(layer_period(c, SCHEMES["serial"])) == pytest.approx(9e-4, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(times_st, comm_st, comm_st, st.sampled_from([0.0, 24 / 132]))
def test_fill_and_drain_equal_the_simulated_chain(times, disp, comb, share):
    """first + (n - 1) x period + drain is the critical path of n layers simulated one by one."""
    costs = _costs(times, disp, comb, share)
    first, period, drain = layer_chain(costs, TWO_BATCH)
    ends, last_drain = _simulate(costs, TWO_BATCH, 6, None)
    assert float(first + 5 * period + drain) == pytest.approx(float(ends[-1] + last_drain), rel=1e-9, abs=1e-15)
    assert float(drain) >= 0.0


def test_last_combine_is_exposed():
    """The last layer's combines have no next layer to hide behind: the drain is what is still in
    flight after the last compute. Here A's combine (5e-4) starts as A's experts (2e-4) end, so
    3e-4 of it outlasts B's experts, and B's combine (5e-4) queues behind it: 8e-4 exposed."""
    _first, _period, drain = layer_chain(_costs([1e-4] * 9, 1e-4, 5e-4, 0.0), TWO_BATCH)
    assert float(drain) == pytest.approx(8e-4, rel=1e-9)


def test_attention_balanced_across_micro_batches():
    """Each of the two micro-batches carries half the tokens and half the attention work
    (DeepSeek profile-data README: attention load balanced, a prompt may be split)."""
    one = {o["name"]: o for o in _run(SEED003, "serial").ops}
    two = {o["name"]: o for o in _run(SEED003, "two-batch").ops}
    for name in ("attn_core", "qkv_a_proj"):
        assert two[name]["count"] == 2 * one[name]["count"]
        assert two[name]["flops"] / two[name]["count"] == pytest.approx(one[name]["flops"] / one[name]["count"] / 2)
