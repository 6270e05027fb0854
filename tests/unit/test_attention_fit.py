"""The mla_v2 attention kernel model (moesim.perf.attention_eff) and its fit
(moesim.calibration.fit.attention): floors, KV bytes, wave steps, recovery of synthetic parameters,
the profile schema and the reader."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import attention as FA
from moesim.errors import CalibrationError
from moesim.perf import attention_eff as A
from moesim.perf.models import mla_v2
from moesim.perf.profile import schema as S
from moesim.perf.profile.reader import Profile

SMS, PEAK, BW = 132, 989e12, 4.8e12
P = {"alpha_us": 6.0, "eta_c": 0.6, "eta_m": 0.85, "cta_us": 5.0, "sat": 0.3, "combine_us": 4.0, "q": np.inf}


class _Peaks:
    sms, hbm_Bps = SMS, BW

    def peak(self, dtype):
        return {"bf16": PEAK, "fp8": 2 * PEAK}[dtype]


def _decode(batch, context, heads=128.0, kvb=2.0):
    shape = {"batch": batch, "q_len": 1.0, "heads": heads, "context": context}
    return A.attn_work("mla_decode", shape, kvb, SMS)


def _t(work, p=P):
    F, B, ctas, _, split = work
    return A.attn_time(F, B, ctas, split, PEAK, BW, SMS, p)


def test_alpha_floor_at_tiny_shapes():
    t = _t(_decode(1.0, 1.0, heads=16.0))
    # one CTA, no split: the per-call floor plus one wave's fixed cost; the work itself is small
    assert t == pytest.approx((P["alpha_us"] + P["cta_us"]) * 1e-6, rel=0.05)
    floor = {**P, "floor_us": 30.0}
    assert _t(_decode(1.0, 1.0), floor) == pytest.approx(30e-6)


def test_kv_bytes_linear_in_context_and_dtype():
    c = np.array([1024.0, 2048.0, 4096.0])
    _, B, ctas, kv_elems, split = _decode(256.0, c)  # 512 query tiles >= SMs: no split-KV
    assert np.all(split == 0)
    assert np.allclose(np.diff(B), np.diff(B)[0] * np.array([1.0, 2.0]))
    assert np.allclose(kv_elems, 256 * c * 576)
    _, B8, *_ = _decode(256.0, c, kvb=1.0)
    assert np.allclose(B - B8, 256 * c * 576)  # FP8 KV halves the cache bytes, queries stay BF16


def test_split_kv_fills_the_sms_and_adds_the_combine():
    ctas, tiles, splits = A.decode_grid(1.0, 1.0, 128.0, 1.0, np.array([64.0, 65536.0]), SMS)
    assert list(splits) == [1.0, 66.0] and list(ctas) == [2.0, 132.0]
    t_short, t_long = _t(_decode(1.0, np.array([64.0, 65536.0])))
    assert t_long > t_short + P["combine_us"] * 1e-6


def test_wave_step_and_linear_speed_below_one_wave():
    p = {**P, "alpha_us": 0.0, "cta_us": 0.0}
    F = np.array([1e9, 2e9, 132e9, 133e9])
    ctas = np.array([1.0, 2.0, 132.0, 133.0])
    t = A.attn_time(F, np.zeros(4), ctas, np.zeros(4), PEAK, BW, SMS, p)
    assert t[0] == pytest.approx(t[1])  # below one wave: twice the CTAs, twice the work, same time
    assert t[3] / t[2] == pytest.approx(2.0)  # one CTA past a wave (same work per CTA): a whole wave more


def _synthetic_rows(p, kvb=2.0, dtype="bf16"):
    b, c, h = np.meshgrid([1.0, 4.0, 16.0, 64.0, 256.0], 2.0 ** np.arange(1, 17), [16.0, 64.0, 128.0])
    b, c, h = b.ravel(), c.ravel(), h.ravel()
    t = _t(A.attn_work("mla_decode", {"batch": b, "q_len": 1.0, "heads": h, "context": c}, kvb, SMS), p)
    n = len(t)
    return pd.DataFrame(
        {
            "kernel": "mla_decode",
            "backend": "synthetic",
            "mode": "generation",
            "dtype": dtype,
            "batch": b,
            "q_len": np.ones(n),
            "heads": h,
            "context": c,
            "groups": np.nan,
            "k": np.nan,
            "time_s": t,
            "exclude": "",
            "source": "synthetic",
        }
    )


def test_fit_recovers_synthetic_parameters():
    df = _synthetic_rows(P)
    notes: list = []
    e = FA.fit_attention_family(df, "mla_decode", _Peaks(), "h200", notes)
    got = e["params"]
    for name in ("alpha_us", "eta_c", "eta_m", "cta_us", "combine_us"):
        assert got[name] == pytest.approx(P[name], rel=0.03), name
    assert e["model"] == S.MLA_V2 and e["cv"]["median_abs_pct"] < 1.0 and e["cv"]["p90_abs_pct"] < 2.0
    assert e["cv"]["small"]["rows"] > 0 and e["variant"] == "bf16"
    loso = e["cv"]["leave_one_shape_out"]  # beside the 10 grouped folds, as the GEMM / MoE entries
    assert loso["median_abs_pct"] < 1.0 and loso["small"]["rows"] == e["cv"]["small"]["rows"]


def _profile(entry):
    data = {"schema_version": 2, "gpu": "h200", "roofline": {"sms": SMS, "hbm_bw_GBps": 4800, "tflops": {"bf16": 989}}}
    data["kernels"] = {"mla_decode": entry}
    S.validate(data, "test")
    return Profile(S.fill_sections(data))


def _entry(**variants):
    params = {k: v for k, v in P.items() if k != "q"}
    return {
        "status": "fitted",
        "gpu": "h200",
        "model": S.MLA_V2,
        "dtype": "bf16",
        "params": params,
        "variants": {k: {"params": {**params, **v}} for k, v in variants.items()},
    }


def test_reader_prices_the_fitted_time_and_picks_the_kv_dtype_variant():
    prof = _profile(_entry(bf16={}, fp8={"eta_m": 0.2}))
    shape = dict(batch=np.array([1.0, 64.0]), q_len=1.0, heads=16.0, context=8192.0)
    t = prof.kernel_time("mla_decode", **shape)
    assert np.allclose(t, _t(_decode(shape["batch"], 8192.0, heads=16.0)))
    eta_c, eta_m, alpha = prof.kernel_efficiency("mla_decode", **shape)
    assert np.all((eta_c > 0) & (eta_c <= 1) & (eta_m > 0) & (eta_m <= 1))
    *_, F, B, peak = prof.kernel_sides("mla_decode", **shape)  # one efficiency per bound, the fitted time
    np.testing.assert_allclose(alpha + np.maximum(F / (peak * eta_c), B / (prof._hbm * eta_m)), t, rtol=1e-12)
    assert np.all(alpha > 0)  # the call's fixed costs, outside the work the efficiencies scale
    t8 = prof.kernel_time("mla_decode", **shape, kv_dtype="fp8")
    assert t8[1] > t[1]  # the fp8 variant's measured HBM ceiling is lower than bf16's here


def test_schema_checks_variant_params():
    bad = _entry(fp8={"eta_m": 1.5})
    with pytest.raises(CalibrationError, match=r"variants\.fp8\.params\.eta_m"):
        _profile(bad)


def test_build_profile_writes_an_mla_v2_entry_the_reader_prices(tmp_path):
    from moesim.calibration.fit.peaks import Peaks
    from moesim.calibration.fit.profile import build_profile, write_profile, write_residuals
    from moesim.calibration.records import COLUMNS
    from moesim.perf.profile.reader import load_profile
    from moesim.specs.loader import load_hardware

    hw = load_hardware("h200")
    rows = _synthetic_rows(P)
    df = pd.DataFrame({c: rows[c] if c in rows else "" for c in COLUMNS})
    for c in ("m", "n", "tokens", "tflops", "GBps", "bytes", "ep", "sms"):
        df[c] = np.nan
    prof = build_profile(df, "h200", Peaks.from_hardware(hw))
    e = prof["kernels"]["mla_decode"]
    assert e["model"] == S.MLA_V2 and e["cv"]["p90_abs_pct"] < 2.0
    write_residuals(prof, tmp_path / "h200.yaml")  # the measured residual's side-car (fit.profile.fit does both)
    write_profile(prof, tmp_path / "h200.yaml")
    assert (tmp_path / "h200.residuals.npz").exists() and e["variants"]["bf16"]["residual"]["file"]
    p = load_profile(hw, tmp_path / "h200.yaml")
    shape = dict(batch=np.array([1.0, 64.0]), q_len=1.0, heads=128.0, context=4096.0)
    assert np.allclose(p.kernel_time("mla_decode", **shape), _t(_decode(shape["batch"], 4096.0)), rtol=0.02)


def test_mha_variant_is_picked_by_phase_dtype_and_nearest_head_dim():
    e = {"params": {"tag": 0}, "variants": {k: {"params": {"tag": i}} for i, k in enumerate(
        ["generation.bf16.d64", "generation.bf16.d128", "context.bf16.d128", "generation.fp8.d256"])}}  # fmt: skip
    pick = A.variant_params
    assert pick("attention", e, {"k": 120.0, "kv_dtype": "bf16"})["tag"] == 1
    assert pick("attention", e, {"k": 64.0, "kv_dtype": "bf16"})["tag"] == 0
    assert pick("attention", e, {"k": 128.0, "kv_dtype": "bf16", "prefill": True})["tag"] == 2
    assert pick("attention", e, {"k": 128.0, "kv_dtype": "fp8"})["tag"] == 3  # the only fp8 head dim
    assert pick("attention", e, {"k": 128.0, "kv_dtype": "fp4", "prefill": True})["tag"] == 2  # same phase


def test_unfused_passes_add_their_bytes_at_their_ceiling():
    shape = {"batch": 64.0, "q_len": 1.0, "heads": 128.0, "context": 2.0, "kv_dtype": "fp8"}
    base = {k: v for k, v in P.items()}
    t0, _ = A.entry_time("mla_decode", {"params": base}, shape, PEAK, BW, SMS)
    tq, _ = A.entry_time("mla_decode", {"params": {**base, "qpass_eta": 0.5}}, shape, PEAK, BW, SMS)
    assert tq - t0 == pytest.approx(64 * 128 * 576 * 3.0 / (BW * 0.5))  # read BF16 queries, write FP8
    shape.update(context=65536.0, heads=16.0)  # memory-bound
    t0, _ = A.entry_time("mla_decode", {"params": base}, shape, PEAK, BW, SMS)
    tk, _ = A.entry_time("mla_decode", {"params": {**base, "pass_eta": 0.25}}, shape, PEAK, BW, SMS)
    cast = 64 * 65536 * 576 * 3.0 / (BW * 0.25)  # read the FP8 cache, write a BF16 copy
    assert tk > t0 + cast  # ... and the kernel then reads the BF16 copy (twice the FP8 bytes)


def test_trtllm_generation_kernel_choice_xqa_vs_mmha():
    # XQA only for 1 < q heads per KV head <= 32 (XQA JIT supportConfig) ...
    sel = A.mmha_rows(np.array([32.0, 32.0, 128.0, 64.0]), np.array([32.0, 8.0, 1.0, 2.0]), 64.0, 4096.0, SMS)
    assert list(sel) == [True, False, True, False]
    # ... and with enough (request, KV head, 128-key block) CTAs (mayHavePerfGain: x 4 >= SMs), BF16 KV
    b = np.array([4.0, 4.0, 1.0, 1.0])
    c = np.array([128.0, 256.0, 2048.0, 4096.0])
    assert list(A.mmha_rows(128.0, 8.0, b[:2], c[:2], SMS)) == [True, False]  # 32 vs 64 blocks
    assert list(A.mmha_rows(8.0, 2.0, b[2:], c[2:], SMS)) == [True, False]
    assert not np.any(A.mmha_rows(128.0, 8.0, b, c, SMS, kv_bytes=1.0))  # FP8 KV: XQA at every size


def test_xqa_and_mmha_multi_block_grids():
    # XQA: history / 128 blocks, capped at round(sqrt(8 n)), then to ~8 waves
    assert list(A.xqa_splits(64.0, 2.0, np.array([128.0, 256.0, 512.0, 1024.0, 2048.0]), SMS)) == [1, 2, 4, 8, 8]
    assert A.xqa_splits(2048.0, 8.0, 65536.0, SMS) == 1.0  # many CTAs: no split
    # MMHA: 1024-thread blocks below 4 CTAs per SM, one split per 512 keys up to ceil(SMs / CTAs)
    assert list(A.mmha_splits(1.0, 128.0, np.array([256.0, 512.0, 16384.0]), SMS)) == [1.0, 2.0, 2.0]
    assert list(A.mmha_splits(1.0, 16.0, np.array([1024.0, 8192.0]), SMS)) == [3.0, 9.0]
    assert A.mmha_splits(64.0, 32.0, 4096.0, SMS) == 1.0  # >= 4 CTAs per SM: no multi-block
    shape = {"batch": 1.0, "q_len": 1.0, "heads": 128.0, "groups": 1.0, "k": 128.0, "context": 512.0}
    _, _, ctas, _, split = A.attn_work("attention", {**shape, "kernel": A.MMHA}, 2.0, SMS)
    assert ctas == 256.0 and split > 0  # one CTA per query head and KV block, one 1024-thread CTA per SM


def test_mmha_grid_follows_trtllm_launch():
    c = np.array([128.0, 256.0, 512.0, 8192.0])
    # batch x heads above the SMs: the workspace holds one split (max_seq_len_tile = ceil(SMs / CTAs)),
    # so no multi-block however long the context (was: 2 splits from 256 keys on, 4 x 64 = 256 CTAs)
    splits, block, per_sm = A.mmha_grid(4.0, 64.0, c, SMS)
    assert list(splits) == [1.0] * 4
    assert list(block) == [512.0] * 4 and list(per_sm) == [2.0] * 4  # 3 x 256 threads -> 512, 2 per SM
    # ... one wave: 256 CTAs in 132 x 2 slots, counted as 128 SM-fulls
    _, _, ctas, _, split = A.attn_work("attention", _mha(4.0, 64.0, 512.0), 2.0, SMS)
    assert ctas == 128.0 and split == 0.0
    # 160 CTAs: 4 x 256 threads -> 1024, one per SM: two waves
    _, block, per_sm = A.mmha_grid(32.0, 5.0, 2.0, SMS)
    assert (block, per_sm) == (1024.0, 1.0)
    assert A.waves_of(A.attn_work("attention", _mha(32.0, 5.0, 2.0), 2.0, SMS)[2], SMS) == 2.0
    # >= 4 CTAs per SM: 256 threads, 4 per SM
    assert A.mmha_grid(64.0, 32.0, 2.0, SMS)[1:] == (256.0, 4.0)


def test_mmha_long_contexts_split_for_shared_memory_and_lose_occupancy():
    # the QK logits take 6 B per key in shared memory, at most 227 KiB - 2 KiB per block: 38,400 keys
    assert A.mmha_grid(64.0, 32.0, 38398.0, SMS)[0] == 1.0
    assert A.mmha_grid(64.0, 32.0, 38400.0, SMS)[0] == 2.0  # forced multi-block though 2048 CTAs
    assert A.mmha_grid(64.0, 32.0, 131072.0, SMS)[0] == 4.0
    # a block holding 32k keys' logits (~197 KiB) is alone on its SM; 8k keys: 4 per SM (register-bound)
    assert A.mmha_grid(64.0, 32.0, 32768.0, SMS)[2] == 1.0
    assert A.mmha_grid(64.0, 32.0, 8192.0, SMS)[2] == 4.0
    t = [A.attn_work("attention", _mha(64.0, 32.0, c), 2.0, SMS)[2] for c in (8192.0, 32768.0)]
    assert t[1] == 4.0 * t[0]  # four times the waves of CTAs at 32k keys


def test_sm100_rows_of_the_mmha_split_run_trtllm_gen_with_the_split_grid():
    d = pd.DataFrame({"mode": "generation", "backend": "torch_flow", "dtype": "bf16", "heads": [32.0, 32.0],
                      "groups": [8.0, 32.0], "batch": 64.0, "q_len": 1.0, "context": 4096.0, "k": 128.0})  # fmt: skip
    assert list(FA.kernel_of(d, "attention", 148, 10)) == [A.XQA, A.TLLM_GEN]  # AttentionOp mUseTllmGen
    # 4 x 64 = 256 CTAs at 512 keys: MMHA's workspace allows no split, the split grid splits in 2
    shape = {**_mha(4.0, 64.0, 512.0), "kernel": A.TLLM_GEN}
    assert A.attn_work("attention", shape, 2.0, SMS)[2] == 512.0
    mmha = {**P, "alpha_us": 50.0}
    e = {"params": P, "dtype": "bf16", "variants": {
        "generation.bf16.d128": {"params": P, "kernel": A.XQA},
        "generation.bf16.d128.mmha": {"params": mmha, "kernel": A.TLLM_GEN}}}  # fmt: skip
    c, m, *_ = A.entry_sides("attention", e, {**shape, "kv_dtype": "bf16", "kernel": None}, PEAK, BW, SMS)
    one = {**e, "variants": {**e["variants"], "generation.bf16.d128.mmha": {"params": mmha, "kernel": A.MMHA}}}
    c1, m1, *_ = A.entry_sides("attention", one, {**shape, "kv_dtype": "bf16", "kernel": None}, PEAK, BW, SMS)
    assert max(c, m) > max(c1, m1)  # the variant's own kernel prices its rows (4 waves vs 1)


def _mha(batch, heads, context):
    return {"batch": batch, "q_len": 1.0, "heads": heads, "groups": heads, "k": 128.0, "context": context,
            "kernel": A.MMHA}  # fmt: skip


def test_entry_time_uses_the_mmha_variant_for_the_rows_that_run_it():
    xqa = {**P, "alpha_us": 5.0}
    mmha = {**P, "alpha_us": 50.0}
    e = {"params": xqa, "dtype": "bf16", "variants": {
        "generation.bf16.d128": {"params": xqa, "kernel": A.XQA},
        "generation.bf16.d128.mmha": {"params": mmha, "kernel": A.MMHA}}}  # fmt: skip
    shape = {"batch": 64.0, "q_len": 1.0, "heads": 32.0, "k": 128.0, "context": 2.0, "kv_dtype": "bf16"}
    t, _ = A.entry_time("attention", e, {**shape, "groups": np.array([8.0, 32.0])}, PEAK, BW, SMS)
    assert t[1] > t[0] + 40e-6  # MHA (groups = heads) runs MMHA, GQA 4 runs XQA
    assert A.pick_key("attention", e, shape) == "generation.bf16.d128"


def test_fit_splits_trtllm_generation_rows_by_kernel_and_bounds_them():
    d = pd.DataFrame({"mode": "generation", "backend": ["torch_flow"] * 3 + ["fa3"], "dtype": "bf16",
                      "heads": [32.0, 32.0, 128.0, 32.0], "groups": [8.0, 32.0, 1.0, 32.0],
                      "batch": 64.0, "q_len": 1.0, "context": 4096.0, "k": 128.0})  # fmt: skip
    assert list(FA.kernel_of(d, "attention", SMS)) == [A.XQA, A.MMHA, A.MMHA, ""]  # FA3: one kernel
    w = FA.work_arrays(d.iloc[:1], "attention", "bf16", SMS, kernel=A.XQA)
    assert w[7] == (mla_v2.FIT_LO[1], FA.XQA_SAT_HI)
    w = FA.work_arrays(d.iloc[1:2], "attention", "bf16", SMS, kernel=A.MMHA)
    assert w[7] == (FA.MMHA_ETA_C_LO, mla_v2.FIT_HI[4])


def test_attention_residual_is_fitted_held_out_and_read_back():
    """mla_v2 variants carry a measured residual (fit.residual over batch, q_len, heads, context):
    the cv block is physics x R held out by whole shapes (never better than in-sample by
    construction: the physics-only figures sit beside it), and the shipped profile's reader applies
    R, so a measured H200 shape is reproduced closely."""
    import pandas as pd

    from moesim.perf.profile import load_profile
    from moesim.specs.loader import data_root, load_hardware

    prof = load_profile(load_hardware("h200"), engine="sglang")
    v = prof.kernels["mla_decode"]["variants"]["bf16"]
    assert v["residual"]["axes"] == ["batch", "q_len", "heads", "context"]
    assert v["cv"]["corrected_by"].startswith("measured residual") and v["cv"]["physics"]["p90_abs_pct"] > 0
    rows = pd.read_csv(data_root() / "calibration/measurements/h200/sglang/generation_mla_perf.csv.gz")
    r = rows[(rows.dtype == "bf16") & (rows.batch == 64) & (rows.heads == 128) & (rows.context == 4096)].iloc[0]
    t = float(np.ravel(prof.kernel_time("mla_decode", batch=64.0, q_len=1.0, heads=128.0, context=4096.0))[0])
    assert t == pytest.approx(float(r.time_s), rel=0.05)
