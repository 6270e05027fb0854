"""`moesim validate` kernel_rows cases: published rows of a measurement CSV priced by `moesim kernel`."""

from __future__ import annotations

import math

import pytest
import yaml

from moesim.analyses.validate.cases import summary, validate
from moesim.analyses.validate.kernel_rows import kernel_shape, row_ids
from moesim.calibration.records import write_rows
from moesim.engine.pricing import load_profile_for, resolve_specs
from moesim.engine.settings import Pricing
from moesim.enums import CostMode
from moesim.errors import SpecError
from moesim.perf.kernel import price_kernel
from moesim.specs.loader import data_root
from moesim.workload.kernels import kernel_op
from tests.conftest import ROOT, run_cli

CASES = ROOT / "validation" / "h800_kernel_cases.yaml"


def test_row_ids_are_read_before_the_url():
    src = "DG-001 (206 TFLOPS), DG-002 (1688 GB/s): github.com/deepseek-ai/DeepGEMM README.md@327ec92 (DG-999)"
    assert row_ids({"source": src}) == ["DG-001", "DG-002"]
    assert row_ids({"source": "local run: moesim calibrate run gemm"}) == []


def test_rows_map_to_kernel_ops():
    assert kernel_shape({"kernel": "gemm", "m": "64", "n": "2112", "k": "7168"}) == (
        "gemm",
        {"m": 64.0, "n": 2112.0, "k": 7168.0},
    )
    op, shape = kernel_shape(
        {"kernel": "grouped_gemm", "layout": "contiguous", "m": "8", "n": "4", "k": "2", "groups": "4"}
    )
    assert op == "grouped_gemm" and shape["layout"] == "contiguous" and shape["groups"] == 4.0
    assert kernel_shape({"kernel": "deepep", "mode": "ll", "op": "combine", "ep": "8", "tokens": "128"}) == (
        "combine",
        {"ep": 8.0, "tokens": 128.0, "mode": "deepep-ll"},
    )
    assert kernel_shape({"kernel": "nccl_all_reduce", "ep": "8", "bytes": "1024"})[0] == "all_reduce"
    with pytest.raises(SpecError, match="allowed"):
        kernel_shape({"kernel": "mla_sparse_decode"})


def _write_case(tmp_path, rows, kernel_rows, tol=0.2):
    csv = tmp_path / "h800" / "gemm.csv"
    write_rows(csv, rows)
    case = {"id": "t", "class": "kernel", "kernel_rows": {"file": str(csv), **kernel_rows}, "tolerance": tol}
    p = tmp_path / "t_cases.yaml"
    p.write_text(yaml.safe_dump({"cases": [case]}))
    return p


def _predicted_gemm_s(m, n, k):
    model, hw = resolve_specs("deepseek-v3", "h800", None)
    prof, _ = load_profile_for(hw, Pricing.of(cost_mode=CostMode.CALIBRATED))
    return price_kernel(kernel_op(model, hw, "gemm", m=m, n=n, k=k), model, hw, CostMode.CALIBRATED, prof)["time_s"]


def test_a_row_is_priced_and_a_miss_stays_visible(tmp_path):
    t = _predicted_gemm_s(64, 2112, 7168)
    rows = [
        {"kernel": "gemm", "m": 64, "n": 2112, "k": 7168, "time_s": t, "source": "XX-001 (a): url"},
        {"kernel": "gemm", "m": 64, "n": 2112, "k": 7168, "time_s": t / 1.5, "source": "XX-002 (b): url"},
        {"kernel": "gemm", "m": 64, "n": 2112, "k": 7168, "time_s": t, "source": "XX-003: url", "exclude": "old"},
    ]
    checks = validate([_write_case(tmp_path, rows, {"ids": "all", "hardware": "h800"})])
    assert [c.metric for c in checks] == ["XX-001 time_us", "XX-002 time_us"]  # `all`: the excluded row is out
    assert checks[0].passed and abs(checks[0].rel_error) < 1e-9
    assert not checks[1].passed and checks[1].rel_error == pytest.approx(0.5)  # predicted 1.5x: a visible FAIL
    s = summary(checks)["kernel"]
    assert (s["checks"], s["passed"]) == (2, 1)


def test_bad_ids_and_excluded_ids_are_errors_not_silence(tmp_path):
    rows = [{"kernel": "gemm", "m": 64, "n": 2112, "k": 7168, "time_s": 1e-5, "source": "XX-003: u", "exclude": "o"}]
    (c,) = validate([_write_case(tmp_path, rows, {"ids": ["XX-404"]})])
    assert c.metric == "error" and not c.passed and "XX-404" in c.note
    (c,) = validate([_write_case(tmp_path, rows, {"ids": ["XX-003"]})])
    assert c.metric == "error" and "excluded" in c.note


def test_peak_rows_need_a_grid(tmp_path):
    rows = [{"kernel": "mla_decode", "GBps": 3000, "time_s": "", "source": "FMLA-001 (3000 GB/s): u"}]
    (c,) = validate([_write_case(tmp_path, rows, {"ids": ["FMLA-001"]})])
    assert c.metric == "error" and "peak_grid" in c.note
    grid = {"batch": [128], "q_len": [1], "heads": [16, 128], "context": [4096]}
    (c,) = validate([_write_case(tmp_path, rows, {"ids": ["FMLA-001"], "peak_grid": grid})])
    assert c.metric == "FMLA-001 GBps (best case)" and c.predicted > 0 and "best over peak_grid" in c.note


def test_shipped_h800_cases_price_every_row():
    checks = validate([CASES])
    assert len(checks) >= 40 and not [c for c in checks if c.metric == "error"]
    assert all(math.isfinite(c.predicted) and c.predicted > 0 for c in checks)
    ids = {c.case for c in checks}
    assert {"h800-deepgemm-dense", "h800-flashmla-best-case", "h800-deepep-low-latency"} <= ids
    assert (data_root() / "calibration/measurements/h800/gemm.csv").exists()


def test_validate_cli_counts_kernel_row_failures():
    p = run_cli("validate", CASES)
    assert "checks within tolerance" in p.stdout
    failed = sum(not c.passed for c in validate([CASES]))
    assert p.returncode == (1 if failed else 0)


def test_validate_engine_reaches_kernel_rows():
    from moesim.analyses.validate.runners import with_engine

    case = {"id": "x", "kernel_rows": {"file": "f.csv"}}
    assert with_engine(case, "trtllm")["kernel_rows"]["engine"] == "trtllm"
    pinned = {"id": "x", "kernel_rows": {"file": "f.csv", "engine": "vllm"}}
    assert with_engine(pinned, "trtllm")["kernel_rows"]["engine"] == "vllm"  # the case's own key wins
    checks = validate([CASES], ids={"h800-deepep-low-latency"}, engine="trtllm")
    assert len(checks) == 12 and all(c.metric != "error" for c in checks)
