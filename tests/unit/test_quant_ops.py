"""The quant family's tables hold different kernels (aiconfigurator scale_matrix_perf: the static
quant pass; computescale_perf: a dynamic quant's time minus the static one's: TRT-LLM's amax
kernel, or for vLLM a fused dynamic per-token kernel, undifferenced at import). They are fitted as
separate variants keyed by op, the quant pass first (the one the reader prices), and the cv blocks
report the decode-sized subset."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import gemm as G
from moesim.perf.profile import schema as S
from moesim.perf.profile.reader import Profile
from moesim.perf.profile.work import QUANT_BYTES_PER_ELEM, QUANT_OP_BYTES_PER_ELEM, family_work
from tests.unit.test_waves import BW, SMS, _peaks, _rows


def _two_op_rows() -> pd.DataFrame:
    m = np.repeat([1.0, 8.0, 64.0, 512.0, 4096.0, 16384.0], 6)
    k = np.tile([1024.0, 2048.0, 4096.0, 7168.0, 12288.0, 16384.0], 6)
    quant = 1.3e-6 + m * k * QUANT_BYTES_PER_ELEM / (BW * 0.9)  # the quant pass
    scale = 7.0e-6 + m * k * 2.0 / (BW * 0.35)  # the amax pass of a dynamic quant
    a = _rows("quant", len(m), m=m, k=k, time_s=quant, dtype="fp8", op="scale_matrix", backend="torch_ops")
    b = _rows("quant", len(m), m=m, k=k, time_s=scale, dtype="fp8", op="compute_scale", backend="torch_ops")
    return pd.concat([b, a], ignore_index=True)  # the scale rows first: the order must not matter


def test_compute_scale_bytes_are_one_bf16_read():
    shape = {"m": np.array([4.0]), "k": np.array([1024.0])}
    quant = family_work("quant", "fp8", SMS, shape)[1]
    scale = family_work("quant", "fp8", SMS, {**shape, "op": "compute_scale"})[1]
    assert float(quant[0]) == pytest.approx(4 * 1024 * QUANT_BYTES_PER_ELEM)
    assert float(scale[0]) == pytest.approx(4 * 1024 * QUANT_OP_BYTES_PER_ELEM["compute_scale"])


def test_quant_ops_fit_as_separate_variants_quant_pass_first():
    notes: list = []
    e = G.fit_variants("quant", _two_op_rows(), _peaks(), "test", None, notes)
    ops = [v["op"] for v in e["variants"]]
    assert ops == ["scale_matrix", "compute_scale"] and e["op"] == "scale_matrix"
    main, scale = e["variants"]
    assert main["params"]["alpha_us"] == pytest.approx(1.3, rel=1e-3)
    assert main["params"]["eta_m"] == pytest.approx(0.9, rel=1e-3)
    assert scale["params"]["alpha_us"] == pytest.approx(7.0, rel=1e-3)
    assert scale["params"]["eta_m"] == pytest.approx(0.35, rel=1e-3)
    assert main["cv"]["median_abs_pct"] < 1.0  # mixed into one fit they would be off by ~x3
    keys = {v["residual"]["key"] for v in e["variants"]}
    assert len(keys) == 2  # one residual table per op
    small = main["cv"]["small"]
    assert small["rows"] == 18 and small["median_abs_pct"] < 1.0
    assert main["cv"]["physics"]["small"]["rows"] == 18
    S.validate({"gpu": "test", "kernels": {"quant": e}}, "test")


def test_reader_prices_the_quant_pass_variant():
    e = G.fit_variants("quant", _two_op_rows(), _peaks(), "test", None, [])
    for v in e["variants"]:
        v.pop("residual", None)
    e.pop("residual", None)
    data = {
        "schema_version": S.SCHEMA_VERSION,
        "gpu": "h200",
        "roofline": {"sms": SMS, "hbm_bw_GBps": BW / 1e9, "tflops": {"fp8": 1979, "bf16": 989.5}},
        "kernels": {"quant": e},
    }
    prof = Profile(S.fill_sections(data))
    t = float(prof.kernel_time("quant", m=4096.0, k=7168.0, dtype="fp8"))
    assert t == pytest.approx(1.3e-6 + 4096 * 7168 * QUANT_BYTES_PER_ELEM / (BW * 0.9), rel=1e-3)


def test_importer_keeps_sglang_eager_reference_quant_unfitted():
    from moesim.calibration.importers import aiconfigurator_tables as T

    table = pd.DataFrame(
        {"op_name": ["scale_matrix"] * 2, "m": [1, 4096], "k": [7168, 7168], "quant_dtype": ["fp8"] * 2}
    )
    table["latency"] = [0.007, 0.2]

    def imported(engine):
        ctx = T.Ctx("h200_sxm", "h200", engine, "1", "scale_matrix_perf", "0.12.0", 8)
        return T.quant(table, ctx)[0]

    sg, trt = imported("sglang"), imported("trtllm")
    assert (sg["exclude"] == T.SGLANG_EAGER_QUANT).all() and sg["time_s"].notna().all()  # kept for the record
    assert (trt["exclude"].fillna("") == "").all()


def test_dynamic_per_token_bytes_are_one_pass_plus_a_scale_per_row():
    shape = {"m": np.array([4.0]), "k": np.array([1024.0]), "op": "dynamic_per_token"}
    assert float(family_work("quant", "fp8", SMS, shape)[1][0]) == pytest.approx(4 * (1024 * 3.0 + 4.0))


def _computescale_tables(tmp_path, source):
    """A vLLM-style computescale table (dynamic minus static, named `<a>_minus_<b>`) and its static
    scale_matrix table beside it (latencies in ms, as aiconfigurator writes them)."""
    m, k = [1, 64, 4096, 8192], [7168, 7168, 7168, 7168]
    static = pd.DataFrame(
        {"op_name": "scale_matrix", "kernel_source": "static_scaled_fp8_quant", "m": m[:3], "k": k[:3]}
    )
    static["quant_dtype"], static["latency"] = "fp8", [0.002, 0.003, 0.02]
    static.to_parquet(tmp_path / "scale_matrix_perf.parquet")
    diff = pd.DataFrame({"op_name": "compute_scale", "kernel_source": source, "m": m, "k": k, "quant_dtype": "fp8"})
    diff["latency"] = [0.001, 0.0, 0.01, 0.05]  # the 0: clamped by the collector; m 8192: no static partner
    return diff


def test_importer_undifferences_the_dynamic_per_token_quant(tmp_path):
    from moesim.calibration.importers import aiconfigurator_tables as T

    source = "dynamic_per_token_scaled_fp8_quant" + T.MINUS + "static_scaled_fp8_quant"
    diff = _computescale_tables(tmp_path, source)
    ctx = T.Ctx("h200_sxm", "h200", "vllm", "0.24.0", "computescale_perf", "0.12.0", 8, folder=str(tmp_path))
    out = T.quant(diff, ctx)[0]
    assert (out["op"] == "dynamic_per_token").all() and (out["backend"] == "dynamic_per_token_scaled_fp8_quant").all()
    assert out["time_s"].iloc[0] == pytest.approx(3e-6) and out["time_s"].iloc[2] == pytest.approx(
        30e-6
    )  # diff + static
    assert list(out["exclude"] == T.NOT_RECOVERABLE) == [False, True, False, True]
    assert out["time_s"].iloc[[1, 3]].isna().all()
    # a difference that is its own kernel (TRT-LLM's amax reduction, no `_minus_` name) is kept as it is
    trt = T.quant(diff.assign(kernel_source="torch_ops"), ctx)[0]
    assert (trt["op"] == "compute_scale").all() and trt["time_s"].iloc[0] == pytest.approx(1e-6)


def test_dynamic_per_token_is_a_variant_never_the_priced_quant_pass():
    m = np.repeat([1.0, 8.0, 64.0, 512.0, 4096.0, 16384.0], 6)
    k = np.tile([1024.0, 2048.0, 4096.0, 7168.0, 12288.0, 16384.0], 6)
    dyn = 3.2e-6 + m * (3.0 * k + 4.0) / (BW * 0.57)
    quant = 1.3e-6 + m * k * QUANT_BYTES_PER_ELEM / (BW * 0.9)
    a = _rows("quant", len(m), m=m, k=k, time_s=dyn, dtype="fp8", op="dynamic_per_token", backend="dynamic")
    b = _rows("quant", len(m), m=m, k=k, time_s=quant, dtype="fp8", op="scale_matrix", backend="static")
    e = G.fit_variants("quant", pd.concat([a, b], ignore_index=True), _peaks(), "test", None, [])
    assert e["op"] == "scale_matrix" and [v["op"] for v in e["variants"]] == ["scale_matrix", "dynamic_per_token"]
    dv = e["variants"][1]
    assert dv["params"]["alpha_us"] == pytest.approx(3.2, rel=1e-3) and dv["params"]["eta_m"] == pytest.approx(
        0.57, rel=1e-3
    )
