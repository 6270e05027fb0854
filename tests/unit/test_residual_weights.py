"""Neighbour-search weights of the measured residual (moesim.perf.profile.residual.search_weights,
moesim.calibration.fit.residual.AXIS_WEIGHTS): a GEMM's tile/wave configuration is chosen from m and
n alone, so a slow band of one (m, n) is shared by its k's; the weighted search takes a held-out k's
residual from the same (m, n), the unweighted one dilutes it with other m's. The hull fade is not
weighted, and the weights travel in the profile's residual block to the reader."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import gemm as G
from moesim.calibration.fit import residual as R
from moesim.calibration.fit.peaks import Peaks
from moesim.errors import CalibrationError
from moesim.perf.profile import residual as RS
from moesim.perf.profile import schema as S
from moesim.perf.profile.reader import Profile, read_profile_file
from tests.unit.test_residual import BW, MS, NS, PEAK, SMS, _grid, _phys, _profile, _rows

# the k's of aiconfigurator's GEMM tables (a held-out k has several measured k's of its (m, n) near it)
KS = np.array(
    [128, 256, 512, 768, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384.0]
)
W = R.AXIS_WEIGHTS[("gemm", "fp8_block")]
BAND = (256.0, 1024.0)  # (m, n) measured x2 at every k: a configuration the physics does not know


def _band_table():
    g = np.array(np.meshgrid(MS, NS, KS, indexing="ij")).reshape(3, -1)
    m, n, k = g
    logr = np.where((m == BAND[0]) & (n == BAND[1]), np.log(2.0), 0.0)
    return np.log(np.stack([m, n, k], 1)), logr


def test_weighted_search_takes_a_held_out_k_from_its_own_m_n():
    pts, logr = _band_table()
    held = np.isclose(pts, np.log([BAND[0], BAND[1], 4096.0])).all(1)
    plain = RS.Residual(("m", "n", "k"), pts[~held], logr[~held])
    weighted = RS.Residual(("m", "n", "k"), pts[~held], logr[~held], weights=W)
    zq = pts[held] / plain.steps
    assert float(np.exp(weighted.log_factor(zq))[0]) == pytest.approx(2.0)
    assert float(np.exp(plain.log_factor(zq))[0]) < 1.5  # diluted by the neighbouring m's


def test_weights_do_not_change_the_hull_fade_or_exact_hits():
    pts, logr = _band_table()
    weighted = RS.Residual(("m", "n", "k"), pts, logr, weights=W)
    far = np.log([[1e7, 1024.0, 4096.0]]) / weighted.steps  # far beyond the measured m
    assert float(weighted.log_factor(far)[0]) == 0.0
    hit = np.log([[BAND[0], BAND[1], 4096.0]]) / weighted.steps
    assert float(np.exp(weighted.log_factor(hit))[0]) == pytest.approx(2.0)
    with pytest.raises(CalibrationError):
        RS.Residual(("m", "n", "k"), pts, logr, weights=(1.0, 0.0, 1.0))


def test_a_measured_shape_is_an_exact_hit_at_any_weight():
    # the stored log shapes are rounded to 1e-9 (dedup); with aiconfigurator's dense m axis (mean log
    # step ~0.14) and a weight of 3000 that rounding exceeds EXACT in the weighted space: the hit is
    # tested unweighted, so every measured shape reproduces its own residual
    ms = np.unique(np.r_[np.arange(1.0, 18.0), 2.0 ** np.arange(5, 16), 2.0 ** np.arange(5, 16) + 1])
    g = np.array(np.meshgrid(ms, NS, KS, indexing="ij")).reshape(3, -1)
    logr = np.random.default_rng(0).normal(0.0, 0.3, g.shape[1])
    model = RS.Residual(("m", "n", "k"), np.log(g.T), logr, weights=(3000.0, 5.0, 1.0))
    got = model.factor({"m": g[0], "n": g[1], "k": g[2]})
    np.testing.assert_allclose(np.log(got), logr, atol=1e-6)


def test_fp8_block_gemm_fit_writes_its_weights_and_the_reader_uses_them(tmp_path):
    m, n, k = _grid()
    bump = np.where((m == 256) & (n == 1024), 2.0, 1.0)
    rows = _rows(m, n, k, _phys(m, n, k) * bump)
    rows["dtype"] = "fp8_block"
    bf16 = rows.assign(dtype="bf16", time_s=rows.time_s * 2.0)
    peaks = Peaks(name="t", hbm_Bps=BW, sms=SMS, flops={"fp8": PEAK, "bf16": PEAK / 2})
    out = G.fit_table_families(pd.concat([rows, bf16], ignore_index=True), peaks, "t", None, [])
    entry = out["gemm"]
    assert entry["dtype"] == "fp8_block" and "axis_weights" not in entry["variants"][1]["residual"]
    assert entry["residual"]["axis_weights"] == list(W)
    path = _profile(tmp_path, entry)
    prof = Profile(read_profile_file(path), path=path)
    model = RS.load_residual(prof.kernels["gemm"]["residual"], path.parent)
    np.testing.assert_allclose(model.w, W)
    bad = dict(entry["residual"], axis_weights=[1.0, 2.0])
    with pytest.raises(CalibrationError):
        S.validate({"gpu": "t", "kernels": {"gemm": dict(entry, residual=bad)}}, "t")


def test_weights_by_sm_generation():
    from types import SimpleNamespace as NS_

    def w(gen, dtype="fp8_block"):
        return R.weights_for(NS_(family="gemm", dtype=dtype, sm_generation=gen))

    assert w(9) == (3000.0, 5.0, 1.0)  # Hopper: one row of m can change the layout
    assert w(10) == w(0) == W  # Blackwell / unknown: the family's weights
    assert w(9, "bf16") is None
