"""One efficiency per bound (issue 17): a fitted kernel's time is the max of a compute side and a memory
side, both holding its fixed cost alpha; eta_c = (F / P) / (compute side - alpha) and eta_m = (B / W) /
(memory side - alpha), so an op whose work differs from its kernel's (F_op, B_op) is priced alpha +
max(F_op / F * (compute side - alpha), B_op / B * (memory side - alpha)): never slower with more FLOP/s
or HBM bandwidth, its bound the model's, its fixed cost not scaled by its work."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.perf import efficiency as E
from moesim.perf.models import waves_v1

RNG = np.random.default_rng(14)
WAVES_P = {"eta_c": 0.73, "eta_m": 0.79, "alpha_us": 9.9, "kb_ns": 50.0, "sm_GBps": 96.5}
SMS, PEAK, BW = 132, 1979e12, 4.8e12


@pytest.mark.parametrize("q", [np.inf, 2.0, 1.0])
def test_smax_sides_max_is_smax_bound_is_the_larger_term_and_monotone(q):
    a, b = RNG.exponential(1.0, 5000), RNG.exponential(1.0, 5000)
    c, m = E.smax_sides(a, b, q)
    np.testing.assert_allclose(np.maximum(c, m), E.smax(a, b, q), rtol=1e-12)
    assert np.array_equal(c >= m, a >= b)  # the bound is the larger term's side
    for f in (0.5, 0.9):  # a smaller term (more P or W) never raises either side
        c2, m2 = E.smax_sides(a * f, b, q)
        assert np.all(c2 <= c * (1 + 1e-12)) and np.all(m2 <= m * (1 + 1e-12))
        c3, m3 = E.smax_sides(a, b * f, q)
        assert np.all(c3 <= c * (1 + 1e-12)) and np.all(m3 <= m * (1 + 1e-12))


def _waves(peak, bw, m):
    n, k = 7168.0, 2048.0
    _, b_in, b_out = E.gemm_work(m, n, k, 1.0, 1.0, 2.0)
    ctas, bm, bn = E.gemm_tiling(m, n, 1.0, SMS)
    part = waves_v1.Part(b_in, b_out, ctas, bm, bn, k, 1.0)
    return waves_v1.waves_sides(part, SMS, peak, bw, WAVES_P), waves_v1.waves_time(part, SMS, peak, bw, WAVES_P)


def test_waves_sides_are_the_model_and_decode_is_memory_bound():
    m = np.array([1.0, 16.0, 64.0, 512.0, 4096.0, 16384.0])
    (c, mem, alpha), t = _waves(PEAK, BW, m)
    np.testing.assert_array_equal(np.maximum(c, mem), t)
    assert alpha == WAVES_P["alpha_us"] * 1e-6 and np.all(np.minimum(c, mem) > alpha)
    assert mem[0] > c[0] and c[-1] > mem[-1]  # m = 1 streams the weights; m = 16384 runs the math


def test_an_op_with_other_work_never_slows_with_more_flops_or_hbm():
    """The cost model's pricing of an op whose bytes are 0.1x / 2x its kernel's (touched experts only;
    BF16 activation reads): with one eta from the total time, a flip of the op's roofline bound applied
    the other bound's efficiency (+25 % on an H200 qkv_proj at 2x FLOP/s)."""
    m = np.exp(RNG.uniform(0.0, 9.7, 2000))
    r_f, r_b = 1.0, RNG.choice([0.1, 0.5, 1.0, 1.3, 2.0], m.size)

    def op_time(peak, bw):
        (c, mem, alpha), t = _waves(peak, bw, m)
        n, k = 7168.0, 2048.0
        F, b_in, b_out = E.gemm_work(m, n, k, 1.0, 1.0, 2.0)
        ec, em = E.side_efficiencies(F, b_in + b_out, c, mem, peak, bw, alpha)
        np.testing.assert_allclose(alpha + np.maximum(F / (peak * ec), (b_in + b_out) / (bw * em)), t, rtol=1e-12)
        return alpha + np.maximum(r_f * F / (peak * ec), r_b * (b_in + b_out) / (bw * em))

    base = op_time(PEAK, BW)
    for k in (1.01, 1.25, 2.0, 8.0):
        assert np.all(op_time(PEAK * k, BW) <= base * (1 + 1e-12)), k
        assert np.all(op_time(PEAK, BW * k) <= base * (1 + 1e-12)), k


def test_routed_groups_below_one_row_keep_their_expected_tiles():
    """A routed group of mean m < 1 rows computes E[ceil(X / 64)] M tiles (X ~ Poisson(m)), not a
    whole tile (m was clamped to 1 before the padding: 8x the CTAs at m = 0.125)."""
    m = np.array([0.125, 0.5])
    ctas, bm, bn = E.gemm_tiling(m, 4096.0, 32.0, SMS, E.routed_tile_padding(m))
    expected = 32.0 * E.expected_tiles(m, 64.0) * np.ceil(4096.0 / bn)
    np.testing.assert_allclose(ctas, expected, rtol=1e-9)
    assert np.all(ctas < 32.0 * np.ceil(4096.0 / bn) * 0.5)
