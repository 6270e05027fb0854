"""The GPU path without a GPU: library API resolution against fake DeepGEMM / DeepEP modules, --strict
and the torch fallback, the engine shape presets, and device_run.sh's dry run."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import types

import pytest

from moesim.calibration.runners import apis, gemm, grouped_gemm, memcpy, mla
from moesim.calibration.runners import backends as B
from moesim.calibration.runners.harness import preset_shapes
from moesim.errors import CalibrationError
from tests.conftest import ROOT, run_cli

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _mod(name, version, **attrs):
    m = types.ModuleType(name)
    m.__version__ = version
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


V2_NAMES = ("fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked")
V1_NAMES = (
    "gemm_fp8_fp8_bf16_nt",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
)


def test_deep_gemm_v2_and_v1_names_resolve():
    v2 = _mod("deep_gemm", "2.8.0", **{n: n for n in V2_NAMES}, get_mk_alignment_for_contiguous_layout=lambda: 128)
    v2.utils = types.SimpleNamespace(per_token_cast_to_fp8=lambda x, use_ue8m0: ("tok", x, use_ue8m0),
                                     per_block_cast_to_fp8=lambda x, use_ue8m0: ("blk", x, use_ue8m0))  # fmt: skip
    assert apis.deep_gemm_dense(v2) == "fp8_gemm_nt"
    assert apis.deep_gemm_grouped(v2, "masked") == "m_grouped_fp8_gemm_nt_masked"
    assert apis.deep_gemm_m_alignment(v2) == 128
    assert apis.deep_gemm_lhs_scales(v2, "sf") == "sf"  # v2 lays the scales out itself
    tok, blk = apis.deep_gemm_casts(v2)
    assert tok(1) == ("tok", 1, False) and blk(2) == ("blk", 2, False)

    v1 = _mod("deep_gemm", "1.1.0", **{n: n for n in V1_NAMES}, get_m_alignment_for_contiguous_layout=lambda: 64)
    v1.get_col_major_tma_aligned_tensor = lambda t: ("tma", t)
    assert apis.deep_gemm_dense(v1) == "gemm_fp8_fp8_bf16_nt"
    assert apis.deep_gemm_grouped(v1, "contiguous") == "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"
    assert apis.deep_gemm_m_alignment(v1) == 64 and apis.deep_gemm_lhs_scales(v1, "sf") == ("tma", "sf")
    assert apis.deep_gemm_casts(v1) is None
    with pytest.raises(CalibrationError, match="no FP8 dense GEMM"):
        apis.deep_gemm_dense(_mod("deep_gemm", "9.9"))


def test_deep_ep_without_legacy_buffer_says_so():
    with pytest.raises(CalibrationError, match="no legacy Buffer"):
        apis.deep_ep_buffer(_mod("deep_ep", "2.1.0", Buffer=None))
    assert apis.deep_ep_buffer(_mod("deep_ep", "1.2.1", Buffer=int)) is int


def _libs(monkeypatch, available: set[str], cuda=True):
    monkeypatch.setattr(B, "library", lambda n: B.Library(n, n in available, "1", "" if n in available else "nope"))
    monkeypatch.setattr(B, "cuda_available", lambda: cuda)


def test_strict_refuses_a_missing_library_and_the_default_falls_back(monkeypatch):
    _libs(monkeypatch, {"torch"})
    with pytest.raises(CalibrationError, match="--strict: gemm backend deep_gemm: deep_gemm not importable"):
        B.choose_backend("gemm", "deep_gemm", "cuda", strict=True)
    with pytest.raises(CalibrationError, match="--strict"):
        B.choose_backend("mla", None, "cuda", strict=True)  # auto wants the best: flash_mla
    said = []
    assert B.choose_backend("gemm", "deep_gemm", "cuda", echo=said.append) == "torch"
    assert "running the torch fallback" in said[0]
    with pytest.raises(CalibrationError, match="needs a CUDA device"):
        B.choose_backend("gemm", "deep_gemm", "cpu", strict=True)
    with pytest.raises(B.Skipped):
        B.choose_backend("gemm", "deep_gemm", "cpu")
    _libs(monkeypatch, {"torch", "deep_gemm"})
    assert B.choose_backend("gemm", None, "cuda", strict=True) == "deep_gemm"
    assert B.choose_backend("gemm", None, "cpu", strict=True) == "torch"  # on the CPU the best is torch
    _libs(monkeypatch, set(), cuda=False)
    with pytest.raises(B.Skipped, match="torch not importable"):
        B.choose_backend("memcpy", None, "cuda")


def test_cli_strict_exits_non_zero():
    p = run_cli("calibrate", "run", "gemm", "--backend", "deep_gemm", "--device", "cpu", "--strict")
    assert p.returncode != 0 and "--strict" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = run_cli("calibrate", "run", "gemm", "--shapes", "nope", "--device", "cpu", "--backend", "torch")
    assert p.returncode == 2 and "--shapes: 'nope'; allowed: default, quick, engine" in p.stderr


def test_engine_shapes_are_what_sglang_runs():
    g = gemm.engine_shapes("cuda")
    ms = {s["m"] for s in g}
    assert {1, 128, 129, 256, 257, 16384} <= ms and max(ms) == 16384  # decode 1..256 + tile edges, prefill
    assert {(s["n"], s["k"]) for s in g} >= {(2112, 7168), (7168, 16384), (3072, 1536), (7168, 2304)}
    gg = grouped_gemm.engine_shapes("cuda")
    assert {s["groups"] for s in gg} == {32, 16, 8, 4, 2, 1}  # local experts at EP 8..256
    assert {s["layout"] for s in gg} == {"masked", "contiguous"}
    assert all(s["groups"] * s["m"] <= grouped_gemm.MAX_TOKEN_PAIRS for s in gg)
    masked = [s for s in gg if s["layout"] == "masked"]
    assert min(s["m"] for s in masked) == 1 and max(s["m"] for s in masked) == 256 * 256 * 8 // 256
    m = mla.engine_shapes("cuda")
    assert {s["heads"] for s in m} == {128, 16} and max(s["batch"] for s in m) == 256
    assert all(s["batch"] * s["context"] <= mla.MAX_KV_TOKENS for s in m)
    assert preset_shapes(gemm.SPEC, "engine", "cuda", "deep_gemm") == g
    assert preset_shapes(memcpy.SPEC, "engine", "cuda", "torch") == memcpy.shapes(False, "cuda")  # no preset: full
    with pytest.raises(CalibrationError, match="--shapes"):
        preset_shapes(gemm.SPEC, "huge", "cuda", "torch")


def _fake_deep_gemm(calls):
    def rec(name):
        return lambda *args: calls.append((name, args))

    dg = _mod("deep_gemm", "2.8.0", **{n: rec(n) for n in V2_NAMES}, get_mk_alignment_for_contiguous_layout=lambda: 128)
    return dg


@pytest.mark.slow  # imports torch (seconds)
@pytest.mark.skipif(not HAS_TORCH, reason="needs torch (pip install torch) to build the runner's tensors")
def test_deep_gemm_calls_carry_the_documented_shapes(monkeypatch):
    import torch

    calls = []
    monkeypatch.setitem(sys.modules, "deep_gemm", _fake_deep_gemm(calls))
    gemm.build({"m": 3, "n": 256, "k": 384}, "deep_gemm", "cpu")()
    (name, ((a, sa), (b, sb), out)) = calls[-1]
    assert name == "fp8_gemm_nt" and a.dtype == torch.float8_e4m3fn
    assert (a.shape, sa.shape, b.shape, sb.shape, out.shape) == ((3, 384), (3, 3), (256, 384), (2, 3), (3, 256))
    grouped_gemm.build({"layout": "masked", "groups": 2, "m": 5, "n": 256, "k": 384}, "deep_gemm", "cpu")()
    (name, ((a, sa), (b, sb), out, masked_m, expected)) = calls[-1]
    assert name == "m_grouped_fp8_gemm_nt_masked" and expected == 5 and masked_m.tolist() == [5, 5]
    assert (a.shape, sa.shape, b.shape, sb.shape, out.shape) == (
        (2, 64, 384),
        (2, 64, 3),
        (2, 256, 384),
        (2, 2, 3),
        (2, 64, 256),
    )
    grouped_gemm.build({"layout": "contiguous", "groups": 2, "m": 5, "n": 256, "k": 384}, "deep_gemm", "cpu")()
    (name, ((a, sa), (b, sb), out, idx)) = calls[-1]
    assert name == "m_grouped_fp8_gemm_nt_contiguous" and a.shape == (256, 384) and out.shape == (256, 256)
    assert idx.dtype == torch.int32 and idx.tolist() == [0] * 128 + [1] * 128  # rows padded to the alignment


@pytest.mark.slow  # runs the moesim CLI once per planned command
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash + timeout")
def test_device_run_dry_run_checks_every_command(tmp_path):
    p = subprocess.run(
        ["bash", str(ROOT / "calibration" / "device_run.sh"), "--dry-run", str(tmp_path / "rows")],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    for k in ("gemm --backend deep_gemm", "grouped_gemm --backend deep_gemm", "mla --backend flash_mla",
              "memcpy --backend torch", "mla --backend torch", "--shapes engine", "--strict", "calibrate compare"):  # fmt: skip
        assert k in p.stdout
    assert "every command exists" in p.stdout and not (tmp_path / "rows").exists()
