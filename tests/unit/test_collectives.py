"""The one alpha-beta time of a collective (moesim.perf.collectives): closed-form limits, and the
cost model and the calibration fit both pricing with it."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.perf import collectives as C

ALPHA = 12e-6
RDMA_BPS, NVL_BPS = 40e9, 150e9


def test_a2a_is_alpha_alone_at_zero_bytes():
    t = C.alpha_beta_a2a(ALPHA, np.zeros(3), np.zeros(3), RDMA_BPS, NVL_BPS)
    np.testing.assert_array_equal(t, ALPHA)


def test_a2a_tends_to_bytes_over_bandwidth_at_large_sizes():
    nbytes = np.array([1e6, 1e9, 1e12])
    rdma_only = C.alpha_beta_a2a(ALPHA, nbytes, 0.0, RDMA_BPS, NVL_BPS)
    np.testing.assert_allclose(rdma_only - ALPHA, nbytes / RDMA_BPS, rtol=1e-12)
    assert rdma_only[-1] / (nbytes[-1] / RDMA_BPS) == pytest.approx(1.0, rel=1e-5)
    nvl_only = C.alpha_beta_a2a(ALPHA, 0.0, nbytes, RDMA_BPS, NVL_BPS)
    assert nvl_only[-1] / (nbytes[-1] / NVL_BPS) == pytest.approx(1.0, rel=1e-5)


def test_a2a_runs_nvlink_and_rdma_concurrently():
    rdma, nvl = np.array([1e8, 1e7]), np.array([1e8, 1e9])
    t = C.alpha_beta_a2a(ALPHA, rdma, nvl, RDMA_BPS, NVL_BPS)
    np.testing.assert_allclose(t, ALPHA + np.maximum(rdma / RDMA_BPS, nvl / NVL_BPS), rtol=1e-15)
    assert t[0] == pytest.approx(ALPHA + 1e8 / RDMA_BPS)  # the NIC is the bottleneck
    assert t[1] == pytest.approx(ALPHA + 1e9 / NVL_BPS)  # NVLink is
    assert np.all(t < ALPHA + rdma / RDMA_BPS + nvl / NVL_BPS)  # overlapped, not summed


def test_a2a_without_nvlink_sends_everything_over_the_nic():
    t = C.alpha_beta_a2a(ALPHA, 1e8, 3e8, RDMA_BPS, 0.0)
    assert float(t) == pytest.approx(ALPHA + 3e8 / RDMA_BPS)


def test_hockney_and_ring_steps():
    assert C.hockney(ALPHA, 0.0, 1e9) == ALPHA
    assert float(C.hockney(0.0, 5e9, 1e9)) == pytest.approx(5.0)
    np.testing.assert_array_equal(C.ring_steps("all_reduce", np.array([2, 8])), [2.0, 14.0])
    np.testing.assert_array_equal(C.ring_steps("all_gather", np.array([2, 8])), [1.0, 7.0])


def test_collective_terms_pick_one_shot_for_small_and_ring_for_large_messages():
    n, lat, bw = 8.0, 2e-6, 100e9
    msg = np.array([1e3, 1e9])
    ring_bytes = 2.0 * (n - 1.0) / n * msg
    alpha, wire = C.collective_terms("all_reduce", n, msg, ring_bytes, lat, bw)
    assert alpha[0] == pytest.approx(2 * lat) and wire[0] == pytest.approx((n - 1) * msg[0])  # one-shot
    assert alpha[1] == pytest.approx(2 * (n - 1) * lat) and wire[1] == pytest.approx(ring_bytes[1])  # ring
    # all-gather: one-shot puts the ring's bytes on the wire in one latency step, so it always wins
    alpha, wire = C.collective_terms("all_gather", n, msg, msg * (n - 1) / n, lat, bw)
    np.testing.assert_allclose(alpha, lat)
    np.testing.assert_allclose(wire, msg * (n - 1) / n)


def test_by_ep_knots_are_reproduced_at_the_measured_eps():
    knots = {"ep": [8, 64], "alpha_us": [10.0, 30.0], "rdma_GBps": [None, 40.0], "nvlink_GBps": [150.0, None]}
    a, r, v = C.by_ep_params(knots, np.array([8.0, 64.0]))
    np.testing.assert_allclose(a, [10e-6, 30e-6])
    np.testing.assert_allclose(r, [40e9, 40e9])  # clamped outside the knots with a value
    np.testing.assert_allclose(v, [150e9, 150e9])
    assert float(C.by_ep_params(knots, 8 * 2**1.5)[0]) == pytest.approx(20e-6)  # linear in log2(EP)


def test_the_cost_model_and_the_fit_price_with_the_same_function():
    from moesim.calibration.fit import comm as fit_comm
    from moesim.perf import cost
    from moesim.perf.profile import reader

    assert fit_comm.alpha_beta_a2a is C.alpha_beta_a2a and fit_comm.by_ep_params is C.by_ep_params
    assert fit_comm.hockney is C.hockney and fit_comm.ring_steps is C.ring_steps
    assert cost.a2a_wire_s is C.a2a_wire_s and cost.collective_terms is C.collective_terms
    assert reader.by_ep_params is C.by_ep_params
