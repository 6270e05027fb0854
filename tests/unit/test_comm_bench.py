"""What the vLLM DeepEP collector adds around the kernels (moesim.calibration.fit.comm_bench): BF16
dispatch, and the clone it queues ahead of the combine timer hiding host time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit.comm import a2a_data
from moesim.calibration.fit.comm_bench import bf16_dispatch, combine_queued_s, token_glitches
from moesim.calibration.fit.comm_deepep import DeepEPRows
from moesim.calibration.fit.peaks import Peaks
from moesim.perf.collectives import deepep_v2_terms
from moesim.specs.loader import load_hardware
from moesim.workload.comm import dispatch_bytes_per_token

PEAKS = Peaks.from_hardware(load_hardware("h200"))
VLLM = ("aiconfigurator-core 0.12.0 h200_sxm vllm 0.24.0 moe_a2a_perf deepep", "vLLM 0.24.0")
SGLANG = ("aiconfigurator-core 0.12.0 h200_sxm sglang 0.5.12 wideep_deepep_ll_perf deepep", "sglang 0.5.12")
P = dict(alpha_us=20.0, alpha_node_us=0.0, alpha_expert_us=0.0, alpha_kB_us=0.0, rdma_frac_nominal=0.8)
P |= dict(nvlink_GBps=200.0, sm_GBps=50.0, sm_token_us=0.0, q=4.0, rdma_node_decay=0.0, host_us=70.0)


def _rows(op: str, mode: str = "ll", tokens=(1.0, 16.0, 256.0)) -> pd.DataFrame:
    rows = []
    for source, lib in (VLLM, SGLANG):
        for t in tokens:
            rows.append(dict(kernel="deepep", backend="deepep", mode=mode, op=op, tokens=t, hidden=7168.0, topk=8.0))
            rows[-1] |= dict(experts=256.0, ep=8.0, gpus_per_node=8.0, topk_groups=np.nan, sms=np.nan)
            rows[-1] |= dict(time_s=1e-4, exclude="", source=source, lib_versions=lib)
    return pd.DataFrame(rows)


def test_vllm_collector_rows_dispatch_bf16_and_sglang_rows_fp8():
    d = _rows("dispatch")
    assert list(bf16_dispatch(d)) == [True] * 3 + [False] * 3
    ad = a2a_data(d, "deepep-ll", "dispatch")
    per_token = (ad.rdma_bytes + ad.nvl_bytes) / d.tokens.to_numpy()
    assert per_token[0] == pytest.approx(8 * 7168 * 2)  # every top-k copy (own rank included), BF16
    assert per_token[3] == pytest.approx(8 * dispatch_bytes_per_token(7168))  # FP8 + scales
    rows = DeepEPRows(ad, "deepep-ll", "dispatch", PEAKS)
    assert rows.msg[0] == 7168 * 2 and rows.msg[3] == dispatch_bytes_per_token(7168)
    assert np.all(rows.queued == 0.0)  # nothing cloned ahead of a dispatch


def test_combine_clone_of_the_padded_ll_layout_is_queued_for_vllm_rows_only():
    d = _rows("combine")
    q = combine_queued_s(d, "deepep-ll", "combine", np.zeros(len(d)), PEAKS.hbm_Bps)
    # [experts / ranks, ranks x tokens, hidden] BF16, read and written once, at the nominal HBM rate
    expect = 2.0 * 256 * d.tokens.to_numpy()[:3] * 7168 * 2 / PEAKS.hbm_Bps
    np.testing.assert_allclose(q[:3], expect)
    assert np.all(q[3:] == 0.0)
    assert np.all(combine_queued_s(d, "deepep-ll", "dispatch", np.zeros(len(d)), PEAKS.hbm_Bps) == 0.0)
    sent = np.full(len(d), 1e6)  # normal (HT) kernels: the received tokens only (= the bytes sent)
    np.testing.assert_allclose(
        combine_queued_s(d, "deepep-normal", "combine", sent, PEAKS.hbm_Bps)[:3], 2e6 / PEAKS.hbm_Bps
    )


def test_queued_gpu_work_shortens_the_host_floor_but_never_the_gpu_time():
    kw = dict(rdma_bytes=0.0, nodes=1.0, experts=256.0, ep=8.0, msg_bytes=14336.0, sms=128.0, rdma_Bps=4e10)
    tokens = np.array([1.0, 1.0, 4096.0])
    nvl = tokens * 7.0 * 14336.0
    gpu = sum(deepep_v2_terms(P, tokens=tokens, nvl_bytes=nvl, nvl_Bps=2e11, host_floor=False, **kw))
    queued = np.array([0.0, 30e-6, 30e-6])
    t = sum(deepep_v2_terms(P, tokens=tokens, nvl_bytes=nvl, nvl_Bps=2e11, queued_s=queued, **kw))
    assert t[0] == pytest.approx(70e-6) and t[1] == pytest.approx(40e-6)  # host 70 us, 30 us of it hidden
    assert gpu[1] < 40e-6 and t[2] == pytest.approx(gpu[2])  # a GPU-bound call keeps its GPU time
    assert np.all(t >= gpu - 1e-15)


def test_fit_reads_the_clone_into_vllm_combine_rows():
    d = _rows("combine", tokens=(1.0, 8.0, 24.0, 64.0, 128.0, 256.0))
    d = d[d.lib_versions.str.startswith("vLLM")].reset_index(drop=True)
    ad = a2a_data(d, "deepep-ll", "combine")
    rows = DeepEPRows(ad, "deepep-ll", "combine", PEAKS, host=True)
    assert np.all(np.diff(rows.queued) > 0)  # grows with tokens (the padded layout holds ranks x tokens)
    with_clone = rows.predict(np.array(list(P.values())), np.arange(len(d)))
    rows.queued[:] = 0.0
    without = rows.predict(np.array(list(P.values())), np.arange(len(d)))
    assert np.all(with_clone <= without) and with_clone[2] < without[2]


def _normal_case_rows(times_us: dict, shapes=((7168.0, 8.0, 256.0),)) -> pd.DataFrame:
    """vLLM normal-mode rows, both ops, every token count of `times_us` ({tokens: us}) per shape."""
    rows = []
    for hidden, topk, experts in shapes:
        for op in ("dispatch", "combine"):
            for t, us in times_us.items():
                rows.append(dict(kernel="deepep", backend="deepep", mode="normal", op=op, tokens=float(t)))
                rows[-1] |= dict(hidden=hidden, topk=topk, experts=experts, ep=8.0, gpus_per_node=8.0, sms=20.0)
                rows[-1] |= dict(topk_groups=np.nan, time_s=us * 1e-6, exclude="", source=VLLM[0], lib_versions=VLLM[1])
    return pd.DataFrame(rows)


def test_a_case_slower_than_more_tokens_of_its_setting_leaves_with_both_ops():
    flat = {16: 250.0, 32: 255.0, 64: 245.0, 128: 260.0, 256: 250.0, 512: 300.0}
    d = _normal_case_rows(flat, shapes=((7168.0, 8.0, 256.0), (4096.0, 6.0, 256.0)))
    assert not token_glitches(d).any()  # flat host floor (+-7 %) and growth with tokens: kept
    slow = (d.op == "dispatch") & (d.tokens == 32.0) & (d.hidden == 7168.0)
    d.loc[slow, "time_s"] *= 1.24 * 245.0 / 255.0  # 1.24x the 64-token row: inside the factor
    assert not token_glitches(d).any()
    d.loc[slow, "time_s"] *= 2.0
    bad = token_glitches(d)
    case = (d.tokens == 32.0) & (d.hidden == 7168.0)
    assert list(np.flatnonzero(bad)) == list(np.flatnonzero(case))  # dispatch and combine of that case only
    d.loc[(d.tokens == 512.0) & (d.hidden == 4096.0), "time_s"] *= 5.0  # the largest token count: no row above it
    assert token_glitches(d).sum() == 2
    ad = a2a_data(d, "deepep-normal", "combine")
    assert ad.glitches == 1 and len(ad.t) == 11  # the combine row of the glitched case left, counted


def test_glitch_rule_is_deepep_only():
    d = _normal_case_rows({16: 900.0, 32: 100.0, 64: 110.0})
    d["kernel"], d["mode"] = "pplx", "pplx"
    ad = a2a_data(d, "pplx", "dispatch")
    assert ad.glitches == 0 and len(ad.t) == 3
