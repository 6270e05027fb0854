"""`moesim roofline`: the figure is written, ops sit under their roofs, calibration rows convert."""

import json
import math

import pytest

from tests.conftest import ROOT, run_cli

pytest.importorskip("matplotlib")

ARGS = ["--ep", "144", "--dp", "144", "--redundant-experts", "32", "--batch", "88", "--context", "4989", "--mtp", "1"]


def _png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert len(data) > 20_000, "suspiciously small figure"


def test_cli_writes_png(tmp_path):
    out = tmp_path / "roofline.png"
    p = run_cli("roofline", *ARGS, "--out", out)
    assert p.returncode == 0, p.stderr
    _png(out)
    assert "wrote" in p.stdout and "attn_core" in p.stdout
    assert "calibration:" in p.stdout  # the H800 profile has measurements


def test_cli_json_points_under_the_roof(tmp_path):
    out = tmp_path / "r.svg"
    p = run_cli("roofline", *ARGS, "--out", out, "--json")
    assert p.returncode == 0, p.stderr
    assert out.exists() and out.stat().st_size > 0
    d = json.loads(p.stdout)
    top = max(d["peaks"].values())
    assert d["ops"], "no op placed"
    for op in d["ops"]:
        # achieved FLOP/s never exceeds the highest roof at the op's intensity
        assert op["flops_per_s"] <= min(top, d["hbm_Bps"] * op["intensity"]) * (1 + 1e-9), op
        assert not op["name"].startswith("mtp_") or op["name"][4:] not in {o["name"] for o in d["ops"]}
    names = {o["name"] for o in d["ops"]}
    assert {"attn_core", "experts_gate_up"} <= names
    assert "dispatch" in d["left_out"] and "attn_norm" in d["left_out"]
    # gemm rows: FLOP/s / (B/s) from the CSV's tflops and GBps columns
    gemm = [c for c in d["calibration"] if c["kernel"] == "gemm"]
    assert gemm and all(math.isclose(c["intensity"], c["flops_per_s"] / c["bytes_per_s"]) for c in gemm)
    assert any(c["flops_per_s"] for c in d["ceilings"])  # FlashMLA's shape-less peak


def test_measurement_conversion(tmp_path):
    from moesim.analyses.roofline import measurement_points

    csv = tmp_path / "gemm.csv"
    csv.write_text(
        "kernel,backend,m,n,k,groups,time_s,tflops,GBps,bytes,exclude,source\n"
        "gemm,torch,64,128,256,,1e-3,,,1e6,,A-1 local\n"  # FLOPs from the shape, B/s from bytes
        "gemm,torch,64,128,256,,1e-3,,,1e6,old,A-2\n"  # excluded
        "deepep,deep_ep,,,,,1e-4,,40,,,DEP-1\n"  # communication
        "mla_decode,flash_mla,,,,,,,3000,,,FMLA-1\n"
    )  # a bandwidth ceiling
    pts, ceil, notes = measurement_points([tmp_path])
    assert len(pts) == 1
    assert pts[0]["flops_per_s"] == pytest.approx(2 * 64 * 128 * 256 / 1e-3)
    assert pts[0]["intensity"] == pytest.approx(2 * 64 * 128 * 256 / 1e6)
    assert len(ceil) == 1 and ceil[0]["bytes_per_s"] == pytest.approx(3e12)
    assert any("exclude" in n for n in notes) and any("communication" in n for n in notes)


def test_gpu_without_measurements_still_draws(tmp_path):
    from moesim.analyses.roofline import roofline
    from moesim.report.roofline import draw_roofline

    out = tmp_path / "h20.png"
    # h20: a GPU with no calibration/measurements/ folder (h200 has the imported aiconfigurator tables)
    res = roofline("deepseek-v3", "h20", ep=8, batch=32, context=4096)
    draw_roofline(res, out)
    _png(out)
    assert res["calibration"] == []
    assert any("no calibration measurements" in n for n in res["notes"])


def test_bad_out_extension(tmp_path):
    p = run_cli("roofline", "--out", tmp_path / "x.txt")
    assert p.returncode != 0
    assert ".png" in p.stderr and "Traceback" not in p.stderr
    assert ROOT.exists()
