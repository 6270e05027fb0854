"""`moesim calibrate compare`: two row sets of one GPU, per family, on synthetic rows."""

from __future__ import annotations

import json

import pytest

from moesim.calibration.compare import compare, family_of
from moesim.calibration.records import write_rows
from moesim.errors import CalibrationError
from tests.conftest import run_cli


def _gemm(m, t, backend="deep_gemm", dtype="fp8", **kw):
    return {"kernel": "gemm", "backend": backend, "dtype": dtype, "m": m, "n": 4096, "k": 7168, "time_s": t} | kw


@pytest.fixture
def two_sources(tmp_path):
    a = [_gemm(64, 1.2e-5), _gemm(129, 2.2e-5), _gemm(1000, 1.1e-4), _gemm(200, 3e-5)]
    a.append({"kernel": "mla_decode", "backend": "flash_mla", "dtype": "bf16", "batch": 4, "q_len": 1, "heads": 128,
              "context": 1024, "time_s": 3e-5})  # fmt: skip
    b = [_gemm(64, 1.0e-5, "DeepGEMM", "fp8_block"), _gemm(128, 2.0e-5, "DeepGEMM", "fp8_block")]
    b += [_gemm(1024, 0.9e-4, "x", "fp8_block"), _gemm(1024, 1.1e-4, "y", "fp8_block")]  # two rows, one shape
    b.append(_gemm(64, 1.0, "DeepGEMM", "fp8_block", exclude="skewed routing"))  # kept for the record only
    b.append({"kernel": "mla_decode", "backend": "FlashMLA", "dtype": "bf16", "batch": 4, "q_len": 1, "heads": 128,
              "context": 1024, "tp": 1, "time_s": 2e-5})  # fmt: skip
    (tmp_path / "b").mkdir()
    write_rows(tmp_path / "a.csv", a)
    write_rows(tmp_path / "b" / "gemm.csv", b[:5])
    write_rows(tmp_path / "b" / "mla.csv", b[5:])
    return tmp_path / "a.csv", tmp_path / "b"


def test_deepgemm_fp8_is_the_fp8_block_family():
    assert family_of({"kernel": "gemm", "backend": "deep_gemm", "dtype": "fp8"})[-1] == "fp8_block"
    assert family_of({"kernel": "gemm", "backend": "torch", "dtype": "fp8"})[-1] == "fp8"  # per-tensor stays fp8


def test_matching_exact_near_and_unmatched(two_sources):
    a, b = two_sources
    res = compare([a], [b])
    fam = {f["family"]: f for f in res["families"]}
    g = fam["gemm/fp8_block"]
    # 64 exact (1.2), 129 ~ 128 (1.1), 1000 ~ 1024 (median of 0.9 and 1.1 = 1.0e-4 -> 1.1); 200: no B shape
    assert (g["count"], g["exact"], g["unmatched"]) == (3, 1, 1)
    assert g["median"] == pytest.approx(0.1) and g["p90_abs"] == pytest.approx(0.18, abs=0.01)
    assert g["p10"] <= g["median"] <= g["p90"]
    m = fam["mla_decode/bf16"]  # B's extra tp column does not stop the match
    assert (m["count"], m["exact"]) == (1, 1) and m["median"] == pytest.approx(0.5)
    assert res["b_left_out"] == 1 and res["b_rows"] == 5 and res["a_rows"] == 5


def test_tolerance_narrows_the_match(two_sources):
    a, b = two_sources
    g = {f["family"]: f for f in compare([a], [b], tolerance=0.005)["families"]}["gemm/fp8_block"]
    assert (g["count"], g["unmatched"]) == (1, 3)
    with pytest.raises(CalibrationError, match="--tolerance"):
        compare([a], [b], tolerance=-1)


def test_missing_path_is_one_line_error(tmp_path):
    with pytest.raises(CalibrationError, match="does not exist"):
        compare([tmp_path / "nope.csv"], [tmp_path])


def test_cli_compare_json_and_table(two_sources):
    a, b = two_sources
    p = run_cli("calibrate", "compare", a, "--against", b, "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert {f["family"] for f in res["families"]} == {"gemm/fp8_block", "mla_decode/bf16"}
    p = run_cli("calibrate", "compare", a, "--against", b)
    assert p.returncode == 0 and "gemm" in p.stdout and "matched" in p.stdout
