"""DeepGEMM's SM90 layout choice (moesim.perf.deepgemm_layout) as the GEMM fit and reader use it
(tiling "deepgemm_sm90"), and the input quant pass of FP8 GEMM rows timed as an engine linear op."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from moesim.calibration.fit import gemm as G
from moesim.calibration.fit.peaks import Peaks
from moesim.perf import deepgemm_layout as L
from moesim.perf.models import waves_v1
from moesim.perf.profile import schema as S
from moesim.perf.profile.work import DEEPGEMM_SM90, DEEPGEMM_SM100, entry_keys, waves_parts

SMS, PEAK, BW = 132, 1979e12, 4.8e12
P = {"eta_c": 0.7, "eta_m": 0.75, "alpha_us": 5.0, "kb_ns": 120.0, "sm_GBps": 60.0}
KS = np.array([128, 256, 2048, 4096, 5120, 6144, 7168, 8192, 10240, 16384.0])


def test_pipeline_stages_from_shared_memory():
    # 227 KiB: BF16 C/D tile + per stage (BM + BN) x 128 FP8 bytes and BM fp32 A scales
    st = L.pipeline_stages(np.array([128.0, 256.0, 128.0, 64.0]), np.array([128.0, 128.0, 192.0, 128.0]), 7168.0)
    assert list(st) == [5.0, 3.0, 4.0, 8.0]


def test_one_wave_big_tile_and_multicast_pairs_on_more_waves():
    ctas, bm, bn, rows = L.sm90_fp8_layout(np.array([2048.0, 4096.0, 1537.0]), 2048.0, 7168.0, SMS)
    assert (bm[0], bn[0], ctas[0], rows[0]) == (256.0, 128.0, 128.0, 384.0)  # one wave: no cluster
    assert ctas[1] > SMS and rows[1] < bm[1] + bn[1]  # two waves: one operand multicast to 2 SMs
    assert (bm[2], bn[2], ctas[2]) == (128.0, 112.0, 247.0)  # not the one-wave 256 x 128 the wave rule picks


def test_layout_alternates_with_k_as_the_measured_sglang_times_do():
    # aiconfigurator h200_sxm sglang 0.5.14, m 2561, n 1536: ~36-130 us at k 4096 / 7168 / 8192 / 16384
    # (two multicast waves of 128 x 128) and 2x slower per FLOP at k 5120 / 6144 / 10240 (one wave of
    # 256 x 128): DeepGEMM's integer-rounded cycle estimate flips between the two with k
    ctas, bm, _, _ = L.sm90_fp8_layout(2561.0, 1536.0, KS, SMS)
    one_wave = ctas <= SMS
    assert list(one_wave) == [False, True, False, False, True, True, False, False, True, False]
    assert np.all(bm[one_wave] == 256.0) and np.all(bm[~one_wave] == 128.0)


def test_layout_rules_hold_over_a_grid():
    m, n, k = (a.ravel() for a in np.meshgrid([1, 16, 33, 129, 1024, 4097, 32768.0], [128, 2112, 7168.0], KS))
    ctas, bm, bn, rows = L.sm90_fp8_layout(m, n, k, SMS)
    assert np.all(~((bm > 128) & (bn > 128))) and np.all(np.isin(bn, L.BLOCK_N))
    assert np.all(ctas == np.ceil(m / bm) * np.ceil(n / bn))
    assert np.all(rows[ctas <= SMS] == (bm + bn)[ctas <= SMS])  # multicast only past one wave
    assert np.all((bm >= 64) | (m <= bm))  # 16- / 32-row blocks only for m <= 16 / 32
    assert np.all(L.pipeline_stages(bm, bn, k) >= 3)


def _t(shape):
    return waves_v1.model_time("gemm", "fp8_block", SMS, PEAK, BW, P, shape)


def test_tiling_key_moves_the_modelled_time():
    base = {"m": np.array([2048.0, 2561.0]), "n": np.array([2048.0, 1536.0]), "k": 7168.0}
    plain, tiled = _t(base), _t({**base, "tiling": DEEPGEMM_SM90})
    assert not np.allclose(plain, tiled)
    parts, extra = waves_parts("gemm", "fp8_block", SMS, {**base, "tiling": DEEPGEMM_SM90})
    assert len(parts[0]) == 8 and np.all(extra == 0.0)
    grouped, _ = waves_parts("gemm", "fp8_block", SMS, {**base, "groups": 4.0, "tiling": DEEPGEMM_SM90})
    assert len(grouped[0]) == 7  # the layout rule is the normal GEMM's: grouped shapes keep gemm_tiling


def test_entry_keys_only_for_gemm_and_moe():
    v = {"model_keys": {"tiling": DEEPGEMM_SM90}, "act_quant_in_rows": True}
    assert entry_keys("gemm", v) == {"tiling": DEEPGEMM_SM90}
    assert entry_keys("gemm", {"act_quant_in_rows": True}) == {}  # a profile fitted without the keys
    assert entry_keys("moe", v) == {"tiling": DEEPGEMM_SM90}  # a Triton moe fit's tiling (perf.triton_moe)
    assert entry_keys("quant", v) == {}


def _rows(backend, source="aiconfigurator-core 0.12.0 h200_sxm sglang gemm_perf"):
    return pd.DataFrame({"backend": [backend] * 2, "source": [source] * 2, "m": [1.0, 2.0]})


def test_gemm_keys_by_backend_generation_and_source():
    hopper = Peaks(name="h", flops={"fp8": PEAK}, hbm_Bps=BW, sms=SMS, sm_generation=9)
    blackwell = dataclasses.replace(hopper, sm_generation=10)
    dg = _rows("sglang_deepgemm_gemm_nt_f8f8bf16")
    assert G.gemm_keys("gemm", dg, "fp8_block", hopper) == {"tiling": DEEPGEMM_SM90}
    assert G.gemm_keys("gemm", dg, "fp8_block", blackwell) == {"tiling": DEEPGEMM_SM100}  # SM100's own heuristic
    assert G.gemm_keys("gemm", dg, "fp8_block", dataclasses.replace(hopper, sm_generation=8)) == {}
    assert G.gemm_keys("gemm", _rows("torch_flow"), "fp8_block", hopper) == {}
    assert G.gemm_keys("gemm", _rows("torch_flow"), "bf16", hopper) == {}
    assert G.gemm_keys("gemm", _rows("deepgemm", source="device_run"), "fp8_block", hopper) == {"tiling": DEEPGEMM_SM90}
    assert G.gemm_keys("moe", dg, "fp8_block", hopper) == {}


def test_fit_writes_model_keys_and_the_reader_prices_with_them():
    from moesim.calibration.records import COLUMNS
    from moesim.perf.profile.reader import Profile

    g = np.array(np.meshgrid([1.0, 64.0, 129.0, 1024.0, 2561.0], [1536.0, 7168.0], KS[::3])).reshape(3, -1)
    shape = {"m": g[0], "n": g[1], "k": g[2], "tiling": DEEPGEMM_SM90}
    d = pd.DataFrame({c: [""] * g.shape[1] for c in COLUMNS})
    for c in ("groups", "tokens", "hidden", "experts", "topk", "ep", "tp"):
        d[c] = np.nan
    d["kernel"], d["dtype"], d["backend"] = "gemm", "fp8_block", "sglang_deepgemm_gemm_nt_f8f8bf16"
    d["source"] = "aiconfigurator-core 0.12.0 h200_sxm sglang 0.5.14 gemm_perf"
    d["m"], d["n"], d["k"], d["time_s"] = g[0], g[1], g[2], _t(shape)
    hopper = Peaks(name="h", flops={"fp8": PEAK}, hbm_Bps=BW, sms=SMS, sm_generation=9)
    e = G.fit_waves("gemm", d, "fp8_block", "sglang_deepgemm_gemm_nt_f8f8bf16", hopper, "h200")
    assert e["model_keys"] == {"tiling": DEEPGEMM_SM90}
    assert e["cv"]["physics"]["p90_abs_pct"] < 1.0  # the generating physics is recovered
    e.pop("residual")
    e["variants"] = [G._variant(e)]
    data = {
        "schema_version": S.SCHEMA_VERSION,
        "gpu": "h200",
        "roofline": {"sms": SMS, "hbm_bw_GBps": BW / 1e9, "tflops": {"fp8": PEAK / 1e12}},
        "kernels": {"gemm": e},
    }
    prof = Profile(S.fill_sections(data))
    t = prof.kernel_time("gemm", m=g[0], n=g[1], k=g[2], dtype="fp8_block")
    assert np.allclose(t, d.time_s.values, rtol=0.01)


def test_remembered_layouts_equal_fresh_ones():
    from moesim.perf import deepgemm_layout as D

    m = np.array([1.0, 17.0, 129.0, 1537.0, 2561.0, 4097.0])
    n, k = np.full_like(m, 1536.0), np.array([7168.0, 512.0, 5120.0, 2048.0, 6144.0, 16384.0])
    D._MEMO.clear()
    fresh = D.sm90_fp8_layout(m, n, k, 132)
    again = D.sm90_fp8_layout(m[::-1], n, k[::-1], 132)  # every shape remembered, other order
    other_gpu = D.sm90_fp8_layout(m, n, k, 114)  # the SM count is part of the key
    assert all(np.array_equal(a[::-1], b) for a, b in zip(fresh, again))
    assert not np.array_equal(fresh[0], other_gpu[0]) or not np.array_equal(fresh[2], other_gpu[2])
