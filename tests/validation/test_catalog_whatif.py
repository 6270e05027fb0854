"""Issue 7 acceptance: the catalog answers deployment questions without code changes."""

import numpy as np
import pytest

from moesim.api import estimate

pytestmark = pytest.mark.validation


def test_seed002_exercise1_gqa_needs_attention_tp():
    # Qwen3-235B-A22B: 94 layers x 2 x 4 KV heads x 128 x 2 B = 188 KB/token (seed 002 exercise 1);
    # its FP8 release so the weights themselves fit 8 x 80 GB
    fp8 = ["model.precision.weight_dtype=fp8"]
    dp = estimate("qwen3-235b-a22b", "h100_sxm", ep=8, dp=8, tp=1, batch=88, context=5000, set=fp8)
    tp4 = estimate("qwen3-235b-a22b", "h100_sxm", ep=8, dp=2, tp=4, batch=88, context=5000, set=fp8)
    assert dp.model.kv_bytes_per_token == pytest.approx(188e3, rel=0.03)
    assert dp.memory["kv_cache_bytes"] == pytest.approx(83e9, rel=0.05)  # the seed's 83 GB
    assert dp.memory["fits"] is False
    assert tp4.memory["kv_cache_bytes"] == pytest.approx(dp.memory["kv_cache_bytes"] / 4, rel=1e-6)
    assert tp4.memory["fits"] is True
    # MLA at the same load fits with DP attention (seed 002: 31 GB of KV at 88 x 4989)
    mla = estimate("deepseek-v3", "h800", ep=144, dp=144, batch=88, context=5000, redundant_experts=32)
    assert mla.memory["fits"] is True


def test_kimi_k2_on_128_h200():
    r = estimate("kimi-k2", "h200", ep=128, dp=128, batch=64, context=4096, mtp=0)
    assert r.model.moe.num_experts == 384
    assert np.isfinite(r["step_time_s"]) and r["step_time_s"] > 0
    assert r.memory["fits"] is True


def test_deepseek_v3_on_gb200_nvl72_uses_one_nvlink_domain():
    r = estimate("deepseek-v3", "gb200-nvl72", ep=72, dp=72, batch=64, context=4096, redundant_experts=32, mtp=1)
    dispatch = next(o for o in r.ops if o["name"] == "dispatch")
    assert np.isfinite(r["step_time_s"])
    # all 72 GPUs share the NVLink domain: no byte of the all-to-all crosses the NIC
    from moesim.workload.comm import routed_copies

    rdma, nvl = routed_copies("deepep-ll", 72, r.hardware.domain_gpus, 256 + 32, 8, 8, 4)
    assert float(np.ravel(rdma)[0]) == 0.0 and float(np.ravel(nvl)[0]) > 0
    assert dispatch["time_s"] > 0


def test_800g_nic_changes_a_wide_ep_answer():
    kw = dict(ep=144, dp=144, batch=88, context=4989, mtp=1, redundant_experts=32)
    base = estimate("deepseek-v3", "h800", **kw)
    nic = estimate("deepseek-v3", "h800", set=["hardware.rdma_bw_GBps=100", "hardware.rdma_eff_bw_GBps=80"], **kw)
    assert nic["step_time_s"] < base["step_time_s"] * 0.95
