"""The Triton fused-MoE tile model (moesim.perf.triton_moe): the engine's config choice and the
programs it launches, and how the fit / reader use it (tiling key triton_fused_moe)."""

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import moe_tables as MT
from moesim.calibration.fit.moe_work import work_columns
from moesim.perf import triton_moe as T
from moesim.perf.profile.work import waves_parts

SMS = 132.0
MIXTRAL = {"hidden": 4096.0, "n": 14336.0, "experts": 8.0, "topk": 2.0, "ep": 1.0, "tp": 1.0}


def test_default_config_switches_at_m_equal_local_experts():
    bm, bn = T.default_tiles(np.array([1.0, 128.0, 129.0, 4096.0]), 128.0, "bf16")
    assert list(bm) == [16.0, 16.0, 64.0, 64.0] and list(bn) == [32.0, 32.0, 64.0, 64.0]
    bm8, bn8 = T.default_tiles(np.array([1.0, 4096.0]), 128.0, "fp8_block")
    assert list(bm8) == [64.0, 64.0] and list(bn8) == [128.0, 128.0]  # BLOCK_N = the [128, 128] block


def test_tuned_table_entries_are_whole():
    import yaml

    keys, table = T.tuned()
    assert len(table) == 12 and all(len(bm) == len(bn) == len(keys) for bm, bn in table.values())
    for c in yaml.safe_load(T.CONFIGS.read_text())["configs"]:  # each entry names its engine file
        assert f"E={c['experts']},N={c['n']},device_name=NVIDIA_H200" in c["source"]


def test_a_malformed_tuned_table_names_the_file_and_entry(tmp_path, monkeypatch):
    from moesim.errors import ConfigError

    bad = tmp_path / "triton_moe_configs.yaml"
    bad.write_text("keys: [1, 2]\nconfigs:\n  - {experts: 8, n: 64, dtype: bf16, block_m: [16], block_n: [32, 32]}\n")
    monkeypatch.setattr(T, "CONFIGS", bad)
    T.tuned.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"triton_moe_configs.yaml: configs\[0\]"):
            T.tuned()
    finally:
        T.tuned.cache_clear()


def test_tuned_config_by_local_experts_shard_width_and_nearest_m():
    t = np.array([1.0, 2.0, 300.0, 16384.0])
    bm, bn = T.fused_moe_tiles(t, 8.0, 1.0, 14336.0, 1.0, "bf16")  # E=8,N=14336: keys 1, 2, 256, 4096
    assert list(bm) == [16.0, 32.0, 128.0, 128.0] and list(bn) == [128.0, 64.0, 256.0, 256.0]
    tp2 = T.fused_moe_tiles(1.0, 8.0, 1.0, 14336.0, 2.0, "bf16")  # N per shard 7168: its own file
    assert (float(tp2[0]), float(tp2[1])) == (16.0, 64.0)
    ep2 = T.fused_moe_tiles(np.array([2.0, 16384.0]), 8.0, 2.0, 14336.0, 1.0, "bf16")  # E local 4: no file
    assert list(ep2[0]) == [16.0, 64.0] and list(ep2[1]) == [32.0, 64.0]
    fp8 = T.fused_moe_tiles(16384.0, 8.0, 1.0, 14336.0, 1.0, "fp8_block")  # tuned BF16 file, not FP8's
    assert (float(fp8[0]), float(fp8[1])) == T.DEFAULT_FP8_BLOCK


def test_programs_pad_each_expert_to_block_m():
    # 8 experts with 20 rows each, BLOCK_M 16: 2 tiles each; N 100 / BLOCK_N 32: 4 column tiles
    assert float(T.fused_moe_ctas(20.0, 100.0, 8.0, 16.0, 32.0)) == 8 * 2 * 4
    # random counts: the expected tiles per group given by the caller
    assert float(T.fused_moe_ctas(20.0, 100.0, 8.0, 16.0, 32.0, expected_tiles=2.5)) == 8 * 2.5 * 4


def test_moe_waves_parts_use_the_engine_tiles():
    shape = work_columns({**MIXTRAL, "tokens": np.array([4.0, 4096.0])}, "balanced", "bf16")
    plain, _ = waves_parts("moe", "bf16", SMS, shape)
    tiled, _ = waves_parts("moe", "bf16", SMS, {**shape, "tiling": T.TRITON_FUSED_MOE})
    up = tiled[0]
    assert list(up[3]) == [16.0, 128.0] and list(up[4]) == [64.0, 256.0]  # BLOCK_M, BLOCK_N at M 4 / 4096
    # M 4: 8 experts with one row each, one M tile; up N = 2 x 14336 in BLOCK_N 64 columns
    assert up[2][0] == 8 * 1 * 448
    assert not np.allclose(plain[0][2], up[2])
    # random routing (the step's pricing) gets the expected tiles at the Triton BLOCK_M
    rnd, _ = waves_parts("moe", "bf16", SMS, {**MIXTRAL, "tokens": 4.0, "tiling": T.TRITON_FUSED_MOE})
    assert 0 < rnd[0][2] <= 8 * 448


def test_tiling_key_only_for_the_transcribed_engine_and_dtype():
    rows = pd.DataFrame({"backend": ["sglang_fused_moe_triton"] * 2})
    assert MT.tiling_keys(rows, "bf16") == {"tiling": T.TRITON_FUSED_MOE}
    assert MT.tiling_keys(rows, "fp8_block") == {}
    vllm = pd.DataFrame({"backend": ["vllm_unquantizedfusedmoe_triton_tritonexperts"]})
    assert MT.tiling_keys(vllm, "bf16") == {}
    assert MT.tiling_keys(rows.iloc[:0], "bf16") == {}
    assert MT.tiling_keys(rows, "bf16", sm_generation=10) == {}  # the tuned table holds H200 files: Hopper only


def test_fit_records_the_tiling_and_the_reader_prices_with_it():
    """A fitted SGLang BF16 Triton entry carries model_keys tiling; the reader's entry_keys hand it to
    model_time, which then reproduces the fit's own prediction (one model for both sides)."""
    from moesim.calibration.fit import gemm as G
    from moesim.calibration.fit.peaks import Peaks
    from moesim.perf.models import waves_v1
    from moesim.perf.profile.work import entry_keys
    from moesim.specs.loader import load_hardware

    rows = [
        dict(hidden=4096.0, n=n, experts=e, topk=2.0, tokens=t, ep=1.0, tp=1.0, layout="fused")
        for n in (14336.0, 7168.0, 3584.0)
        for e in (8.0, 16.0)
        for t in (1.0, 16.0, 256.0, 4096.0)
    ]
    d = pd.DataFrame(rows).assign(backend="sglang_fused_moe_triton", kernel="moe", dtype="bf16", exclude="", source="x")
    d["time_s"] = 2e-5 + d.tokens * d.n * 2e-13 + d.experts * d.n * 1e-10
    peaks = Peaks.from_hardware(load_hardware("h200"))
    e = G.fit_waves("moe", d, "bf16", "sglang_fused_moe_triton", peaks, "h200")
    assert e["model_keys"] == {"tiling": T.TRITON_FUSED_MOE}
    shape = {c: d[c].values for c in ("tokens", "hidden", "n", "experts", "topk", "ep", "tp")}
    shape = {**work_columns(shape, "expert_map", "bf16", T.TRITON_FUSED_MOE), **entry_keys("moe", e)}
    priced = waves_v1.model_time("moe", "bf16", peaks.sms, peaks.peak("bf16"), peaks.hbm_Bps, e["params"], shape)
    data = G.WavesData("moe", d, "bf16", peaks)
    fitted = data.predict([e["params"][k] for k in data.names], np.arange(len(d)))
    np.testing.assert_allclose(priced, fitted, rtol=1e-4)  # params are rounded to 5 significant digits


def test_rank0_segment_rows_price_the_clamped_workload():
    """The documented rank-0 collector segment (fit.moe_tables.RANK0_SEGMENTS) inside an expert_map
    table: its EP > 1 rows compute every rank-0 token with all its picks (no zero-written remote rows),
    its EP 1 rows and other layers keep expert_map."""
    from moesim.calibration.rank0 import rank0_clamped_rows
    from moesim.perf.profile.work import moe_rows

    nem = {"hidden": 1024.0, "n": 2688.0, "experts": 512.0, "topk": 22.0}
    shape = {
        **{k: np.full(3, v) for k, v in nem.items()},
        "tokens": np.full(3, 16384.0),
        "ep": np.array([1.0, 2.0, 32.0]),
        "tp": np.ones(3),
    }
    shape["hidden"] = np.array([1024.0, 1024.0, 2048.0])  # the third row: another layer
    mask = MT.rank0_rows(shape, MT.RANK0_SEGMENTS[("sglang_fused_moe_triton", "h200")])
    assert list(mask) == [0.0, 1.0, 0.0]
    rows = pd.DataFrame({"backend": ["sglang_fused_moe_triton"] * 3, "gpu": ["h200"] * 3})
    assert list(MT.routing_keys(rows, shape)["rank0"]) == [0.0, 1.0, 0.0]
    assert "rank0" not in MT.routing_keys(rows.assign(gpu="b200"), shape)  # one system's collection
    table = rows.assign(**{k: shape[k] for k in ("tokens", "hidden", "n", "experts", "topk", "ep")})
    notes = []
    MT.fit_rows(table, "fused bf16 x", frozenset({"sglang_fused_moe_triton"}), notes)
    assert list(MT.rank0_segment(table)) == [False, True, False] and "1 EP > 1 rows" in notes[0]
    even = moe_rows(work_columns(shape, "expert_map", "bf16"))[0]
    clamped = moe_rows(work_columns({**shape, "rank0": mask}, "expert_map", "bf16"))[0]
    assert clamped[0] == even[0] and clamped[2] == even[2]
    assert clamped[1] == rank0_clamped_rows(16384.0, 512.0, 22.0, 2.0)[0] == 16384.0 * 22.0  # every token
    assert clamped[1] > even[1]  # expert_map's rank holds half the picks
    tiled = work_columns({**shape, "rank0": mask}, "expert_map", "bf16", T.TRITON_FUSED_MOE)
    assert list(tiled["zero_rows"] > 0) == [False, False, True]  # ep 1: none remote; the rank-0 row: none
    parts, extra = waves_parts("moe", "bf16", SMS, {**tiled, "tiling": T.TRITON_FUSED_MOE})
    assert np.all(np.isfinite(extra)) and np.all(parts[0][2] >= 1.0)
