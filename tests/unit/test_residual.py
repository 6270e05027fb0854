"""Measured residual correction (moesim.perf.profile.residual, moesim.calibration.fit.residual):
exact measured shapes reproduce their measurement, far shapes price the physics, held-out CV does
not leak, the side-car file is checked, and what-ifs on peaks still move the time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import gemm as G
from moesim.calibration.fit import residual as R
from moesim.calibration.fit.derive import derive_profile
from moesim.calibration.fit.peaks import Peaks
from moesim.calibration.fit.profile import residual_file, write_profile, write_residuals
from moesim.calibration.records import COLUMNS
from moesim.errors import CalibrationError
from moesim.perf.models import waves_v1
from moesim.perf.profile import residual as RS
from moesim.perf.profile import schema as S
from moesim.perf.profile.provenance import entry_provenance
from moesim.perf.profile.reader import Profile, read_profile_file
from moesim.specs.loader import load_hardware

SMS, PEAK, BW = 132, 1979e12, 4.8e12
P = {"eta_c": 0.7, "eta_m": 0.75, "alpha_us": 5.0, "kb_ns": 120.0, "sm_GBps": 60.0}
MS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096], float)
NS = np.array([512, 1024, 2048, 4096, 7168], float)
KS = np.array([512, 2048, 7168, 16384], float)


def _phys(m, n, k, bw=BW):
    return waves_v1.model_time("gemm", "fp8", SMS, PEAK, bw, P, {"m": m, "n": n, "k": k})


def _grid():
    g = np.array(np.meshgrid(MS, NS, KS, indexing="ij")).reshape(3, -1)
    return g[0], g[1], g[2]


def _rows(m, n, k, t) -> pd.DataFrame:
    d = pd.DataFrame({c: [""] * len(m) for c in COLUMNS})
    for c in ("groups", "tokens", "hidden", "experts", "topk", "ep", "tp"):
        d[c] = np.nan
    d["kernel"], d["backend"], d["source"], d["dtype"] = "gemm", "synthetic", "synthetic rows", "fp8"
    d["m"], d["n"], d["k"], d["time_s"] = m, n, k, t
    return d


def _profile(tmp_path, entry, hbm_GBps=4800.0):
    data = {
        "schema_version": S.SCHEMA_VERSION,
        "gpu": "h200",
        "roofline": {"sms": SMS, "hbm_bw_GBps": hbm_GBps, "tflops": {"fp8": 1979, "bf16": 989.5}},
        "kernels": {"gemm": entry},
    }
    out = tmp_path / "h200.sglang.yaml"
    write_residuals(data, out)
    S.validate(data, out)
    write_profile(data, out)
    return out


def _entry(points, logr):
    e = {"status": "fitted", "gpu": "h200", "model": S.WAVES, "dtype": "fp8", "backend": "x", "params": dict(P)}
    R.attach(e, "gemm|-|fp8|x", ("m", "n", "k"), points, logr)
    return e


@pytest.fixture()
def measured(tmp_path):
    """A profile whose measurements are the physics times a smooth shape bump (+-20 %)."""
    m, n, k = _grid()
    t = _phys(m, n, k) * np.exp(0.2 * np.sin(np.log(m + 1.0)) * np.cos(np.log(n)))
    pts = np.log(np.stack([m, n, k], 1))
    out = _profile(tmp_path, _entry(pts, np.log(t / _phys(m, n, k))))
    return out, (m, n, k, t)


def test_exact_measured_shape_reproduces_the_measurement(measured):
    out, (m, n, k, t) = measured
    prof = Profile(read_profile_file(out), path=out)
    got = prof.kernel_time("gemm", m=m, n=n, k=k)
    np.testing.assert_allclose(got, t, rtol=1e-9)
    assert residual_file(out).exists() and prof.kernels["gemm"]["residual"]["file"] == "h200.sglang.residuals.npz"
    assert entry_provenance(prof.kernels["gemm"]).startswith("fitted+measured-residual:h200")


def test_far_outside_the_measured_shapes_prices_the_physics(measured):
    out, _ = measured
    prof = Profile(read_profile_file(out), path=out)
    m, n, k = np.array([1e6, 64.0]), np.array([4e6, 2e6]), np.array([7168.0, 3e6])
    np.testing.assert_allclose(prof.kernel_time("gemm", m=m, n=n, k=k), _phys(m, n, k), rtol=1e-12)
    # inside the box between measured shapes: a correction, bounded by the measured residuals
    r = prof.residual_factor("gemm", prof.kernels["gemm"], {"m": 24.0, "n": 3000.0, "k": 4000.0})
    assert 0.8 < float(r) < 1.25


def test_hbm_what_if_still_moves_a_memory_bound_gemm(tmp_path, measured):
    out, _ = measured
    (tmp_path / "slow").mkdir()
    slow = _profile(tmp_path / "slow", dict(read_profile_file(out)["kernels"]["gemm"]), hbm_GBps=2400.0)
    slow.with_name(residual_file(out).name).write_bytes(residual_file(out).read_bytes())
    shape = {"m": 1.0, "n": 7168.0, "k": 7168.0}  # a measured, memory-bound shape
    t_fast = float(Profile(read_profile_file(out), path=out).kernel_time("gemm", **shape))
    t_slow = float(Profile(read_profile_file(slow), path=slow).kernel_time("gemm", **shape))
    want = float(_phys(1.0, 7168.0, 7168.0, BW / 2) / _phys(1.0, 7168.0, 7168.0))
    assert t_slow / t_fast == pytest.approx(want, rel=1e-9) and want > 1.5


def test_missing_or_mismatched_side_car_is_one_line_error(tmp_path):
    m, n, k = _grid()
    pts = np.log(np.stack([m, n, k], 1))
    out = _profile(tmp_path, _entry(pts, np.zeros(len(m))))
    RS._FILES.clear()
    RS._MODELS.clear()
    side = residual_file(out)
    side.write_bytes(side.read_bytes() + b"x")
    prof = Profile(read_profile_file(out), path=out)
    with pytest.raises(CalibrationError) as e:
        prof.kernel_time("gemm", m=1.0, n=512.0, k=512.0)
    msg = str(e.value)
    assert "\n" not in msg and "sha256" in msg and str(side.name) in msg and RS.FIX in msg
    side.unlink()
    with pytest.raises(CalibrationError, match="does not exist.*importers.shipped"):
        prof.kernel_time("gemm", m=1.0, n=512.0, k=512.0)


def test_schema_wants_file_and_sha_once_written():
    e = {"status": "fitted", "gpu": "h200", "model": S.WAVES, "params": dict(P)}
    e["residual"] = {"key": "gemm|-|fp8|x", "axes": ["m", "n", "k"], "points": 3}
    with pytest.raises(CalibrationError, match="residual: needs `file`"):
        S.validate({"gpu": "h200", "kernels": {"gemm": e}}, "p")
    e["residual"].update(file="a.npz", sha256="0123", axes=[])
    with pytest.raises(CalibrationError, match="axes"):
        S.validate({"gpu": "h200", "kernels": {"gemm": e}}, "p")


def test_held_out_cv_does_not_leak_a_planted_outlier():
    m, n, k = _grid()
    t = _phys(m, n, k).copy()
    spot = int(np.flatnonzero((m == 64) & (n == 2048) & (k == 2048))[0])
    t[spot] *= 3.0  # a planted outlier: no neighbour shares it
    data = G.WavesData("gemm", _rows(m, n, k, t), "fp8", Peaks(name="t", hbm_Bps=BW, sms=SMS, flops={"fp8": PEAK}))
    parts = G.shape_folds(G.shape_ids(data.d, "gemm"))
    pts = R.log_points(data.d, R.AXES["gemm"])
    p = np.array([P[n_] for n_ in G.WAVES_NAMES])
    errs = R.residual_cv(data, pts, parts, [p] * len(parts))
    for scheme in ("grouped", "loso", "physics"):  # held out: predicted at the physics, 1/3 of it
        assert errs[scheme][spot] == pytest.approx(1 / 3 - 1, abs=1e-6)
    others = np.delete(np.arange(len(t)), spot)
    assert np.nanmax(np.abs(errs["loso"][others])) < 1e-6  # the median ignores one outlier neighbour
    u, logr = R.residual_arrays(data, pts, p)  # stored (all rows): the measurement is reproduced
    model = RS.Residual(("m", "n", "k"), u, logr)
    assert float(model.factor({"m": 64.0, "n": 2048.0, "k": 2048.0})) == pytest.approx(3.0, rel=1e-9)


def test_fit_writes_physics_and_corrected_cv_and_a_residual_block(tmp_path):
    m, n, k = _grid()
    rng = np.random.default_rng(0)
    bump = np.where((m == 4096) & (n <= 1024), 2.5, 1.0)  # a real feature the physics cannot express
    t = _phys(m, n, k) * bump * np.exp(rng.normal(0, 0.01, len(m)))
    out = G.fit_table_families(
        _rows(m, n, k, t), Peaks(name="t", hbm_Bps=BW, sms=SMS, flops={"fp8": PEAK}), "t", None, []
    )
    cv = out["gemm"]["cv"]
    assert {"physics", "leave_one_shape_out"} <= set(cv)
    assert cv["leave_one_shape_out"]["median_abs_pct"] <= cv["physics"]["median_abs_pct"]
    assert out["gemm"]["variants"][0]["residual"]["key"] == out["gemm"]["residual"]["key"]
    prof = {"schema_version": S.SCHEMA_VERSION, "gpu": "t", "kernels": out}
    S.validate(prof, "t")
    path = tmp_path / "t.yaml"
    write_residuals(prof, path)
    S.validate(prof, path)
    assert "_data" not in out["gemm"]["residual"] and residual_file(path).exists()


def test_query_shapes_are_deduplicated_and_broadcast():
    pts = np.log(np.array([[1.0, 512.0], [2.0, 512.0], [1.0, 1024.0], [2.0, 1024.0]]))
    model = RS.Residual(("m", "k"), pts, np.log([1.1, 1.2, 1.3, 1.4]))
    r = model.factor({"m": np.array([[1.0], [2.0]]), "k": np.array([512.0, 1024.0, 512.0])})
    assert r.shape == (2, 3)
    np.testing.assert_allclose(r, [[1.1, 1.3, 1.1], [1.2, 1.4, 1.2]], rtol=1e-12)
    assert float(model.factor({"m": 1.0})) == 1.0  # an axis the priced shape lacks: no correction


def test_inherited_entry_references_the_same_side_car(measured):
    from moesim.calibration.fit.profile import _parent_entry

    out, (m, n, k, t) = measured
    parent = read_profile_file(out)
    child = _parent_entry([parent], "kernels", "gemm")
    assert child["status"] == "inherited" and child["residual"] == parent["kernels"]["gemm"]["residual"]
    data = {"schema_version": S.SCHEMA_VERSION, "gpu": "h100_sxm", "kernels": {"gemm": child}}
    data["roofline"] = {"sms": SMS, "hbm_bw_GBps": 4800, "tflops": {"fp8": 1979}}
    prof = Profile(S.fill_sections(data), path=out.with_name("h100_sxm.sglang.yaml"))
    np.testing.assert_allclose(prof.kernel_time("gemm", m=m, n=n, k=k), t, rtol=1e-9)


def test_calibrated_cost_mode_applies_r_to_the_quant_pass(tmp_path):
    from moesim.perf.cost import CostModel
    from moesim.specs.loader import load_hardware, load_model
    from moesim.workload.ops import QUANT_BYTES_PER_ELEM, quant_pass

    hw, model = load_hardware("h200"), load_model("deepseek-v3")
    p = {"alpha_us": 3.0, "eta_m": 0.5}
    entry = {"status": "fitted", "gpu": "h200", "model": S.STREAM, "dtype": "fp8", "backend": "x", "params": p}
    ms, ks = np.array([1.0, 64.0, 4096.0]), np.array([2048.0, 7168.0])
    pts = np.log(np.array(np.meshgrid(ms, ks, indexing="ij")).reshape(2, -1).T)
    R.attach(entry, "quant|-|fp8|x", ("m", "k"), pts, np.full(len(pts), np.log(1.25)))
    data = {"schema_version": S.SCHEMA_VERSION, "gpu": "h200", "kernels": {"quant": entry}}
    out = tmp_path / "h200.sglang.yaml"
    write_residuals(data, out)
    write_profile(data, out)
    prof = Profile(read_profile_file(out), hardware=hw, path=out)
    op = quant_pass("q", np.array([64.0]), 7168.0, a_bytes=1.0, block=128, stage=3)
    c = CostModel(hw, model, "calibrated", prof).cost(op)
    phys = 3e-6 + 64 * 7168 * QUANT_BYTES_PER_ELEM / (hw.hbm_bw_Bps * 0.5)
    assert float(c.time_s[0]) == pytest.approx(1.25 * phys + prof.launch_s, rel=1e-6)


def test_derived_family_does_not_take_its_source_residual(measured):
    out, (m, n, k, t) = measured
    data = read_profile_file(out)
    data["kernels"]["bmm"] = {**data["kernels"]["gemm"], "status": "derived", "derived_from": "gemm"}
    prof = Profile(data, path=out)
    np.testing.assert_allclose(prof.kernel_time("bmm", m=m, n=n, k=k, groups=1.0), _phys(m, n, k), rtol=1e-9)


def test_sibling_derived_profile_applies_the_source_residual(measured):
    """A profile derived from a sibling GPU (calibration.fit.derive) prices the source's measured
    residual on the target's physics; a family priced with another family's fit (bmm from gemm)
    still goes without it, in the derived profile as in the source."""
    out, (m, n, k, t) = measured
    data = read_profile_file(out)
    data["kernels"]["bmm"] = {**data["kernels"]["gemm"], "status": "derived", "derived_from": "gemm"}
    h200, h100 = load_hardware("h200"), load_hardware("h100_sxm")
    sib = Profile(derive_profile(data, h200, h100), hardware=h100, path=out)
    e = sib.kernels["gemm"]
    assert e["status"] == "derived" and e["derived_status"] == "fitted"
    r = sib.residual_factor("gemm", e, {"m": m, "n": n, "k": k})
    np.testing.assert_allclose(r, t / _phys(m, n, k), rtol=1e-9)  # the measured shapes' ratios
    np.testing.assert_allclose(
        sib.kernel_time("gemm", m=m, n=n, k=k), _phys(m, n, k, bw=h100.hbm_bw_Bps) * r, rtol=1e-9
    )
    np.testing.assert_allclose(
        sib.kernel_time("bmm", m=m, n=n, k=k, groups=1.0), _phys(m, n, k, bw=h100.hbm_bw_Bps), rtol=1e-9
    )
