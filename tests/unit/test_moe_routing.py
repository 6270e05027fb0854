"""The workloads behind the measured fused-MoE tables, as work columns (moesim.calibration.fit.moe_work)
priced by moesim.perf.profile.work: the aiconfigurator collector's rank-0 workload with remote picks
clamped to expert 0 (sglang Triton) and vLLM's expert_map rows that write zeros; the fit picks them by
backend (moesim.calibration.fit.moe_tables.routing)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import gemm as G
from moesim.calibration.fit import moe_tables as MT
from moesim.calibration.fit.moe_work import work_columns
from moesim.calibration.rank0 import rank0_clamped_rows, rank0_tile_padding
from moesim.calibration.records import COLUMNS
from moesim.perf.models import waves_v1
from moesim.perf.profile.work import moe_parts

SMS, PEAK, BW = 132, 1979e12, 4.8e12
P = {"eta_c": 0.7, "eta_m": 0.75, "alpha_us": 5.0, "kb_ns": 120.0, "sm_GBps": 60.0}
LAYER = dict(hidden=7168.0, n=2048.0, experts=256.0, topk=8.0)


def _measured(shape: dict, routing: str, dtype: str = "fp8") -> dict:
    """`shape` with the work columns of a measured row of `routing` (rank0_clamped: a rank-0 segment row)."""
    if routing == "rank0_clamped":
        return work_columns({**shape, "rank0": 1.0}, "balanced", dtype)
    return work_columns(shape, routing, dtype)


def _collector(t: int, e: int, k: int, ep: int):
    """Brute force of the collector: balanced_logits picks, rank-0 tokens, remote picks on expert 0."""
    s, local = int(np.ceil(e / k)), e // ep
    i, j = np.arange(t)[:, None], np.arange(k)[None, :]
    picks = (i + j * s) % e if t >= s else np.floor((i * s / t + j * s) % e).astype(int)
    rows = picks[(picks < local).any(axis=1)]
    expert = np.where(rows < local, rows, 0).ravel()
    return rows.size, np.bincount(expert, minlength=local).max()


@pytest.mark.parametrize("e,k", [(256, 8), (128, 6), (512, 10), (16, 2)])
@pytest.mark.parametrize("ep", [1, 2, 8, 16])
@pytest.mark.parametrize("t", [1, 5, 48, 1000])
def test_rank0_rows_match_the_collector_brute_force(e, k, ep, t):
    computed, hot, _ = rank0_clamped_rows(t, e, k, ep)
    want_rows, want_hot = _collector(t, e, k, ep)
    assert float(computed) == pytest.approx(want_rows)
    assert float(hot) == pytest.approx(want_hot, rel=0.05, abs=2.0)


def test_rank0_clamped_is_balanced_at_ep1_and_does_not_halve_at_ep2():
    tok = np.array([64.0, 4096.0])
    for ep in (1.0, 2.0):
        computed, hot, touched = rank0_clamped_rows(tok, 256.0, 8.0, ep)
        assert np.allclose(computed, tok * 8.0)  # every token has a pick on rank 0 (stride 32)
    _, hot1, touched1 = rank0_clamped_rows(tok, 256.0, 8.0, 1.0)
    assert np.allclose(touched1, 256.0) and np.allclose(hot1, tok * 8.0 / 256.0)
    computed, hot, touched = rank0_clamped_rows(4096.0, 256.0, 8.0, 256.0)
    assert float(touched) == 1.0 and float(computed) == float(hot) == 4096.0 / 32.0 * 8.0


def test_rank0_clamped_time_vs_balanced():
    shape = dict(LAYER, tokens=np.array([4096.0]))
    t = {
        (r, ep): float(waves_v1.model_time("moe", "fp8", SMS, PEAK, BW, P, _measured({**shape, "ep": ep}, r))[0])
        for r in ("balanced", "rank0_clamped")
        for ep in (1.0, 2.0)
    }
    assert t[("rank0_clamped", 1.0)] == pytest.approx(t[("balanced", 1.0)], rel=1e-9)
    assert t[("balanced", 2.0)] < 0.7 * t[("balanced", 1.0)]  # half the rows and weights
    assert t[("rank0_clamped", 2.0)] > 0.8 * t[("rank0_clamped", 1.0)]  # every row still computed


def test_rank0_tile_padding_counts_the_hot_expert_tiles():
    # ep = 256: one local expert with all 1024 computed rows: 8 tiles of 128, no padding
    assert float(rank0_tile_padding(4096.0, 256.0, 8.0, 256.0, 128.0)) == pytest.approx(1.0)
    # ep = 8, T = 32: 32 rows on rank 0's 32 experts... one real row each plus 7 x 32 on expert 0
    pad = float(rank0_tile_padding(32.0, 256.0, 8.0, 8.0, 64.0))
    assert pad == pytest.approx((31 * 1 + 4) * 64.0 / 256.0)


def test_expert_map_remote_rows_cost_bytes_only_with_ep():
    shape = dict(LAYER, tokens=np.array([1024.0]))
    _, act1 = moe_parts("bf16", _measured({**shape, "ep": 1.0}, "expert_map", "bf16"))
    _, act1b = moe_parts("bf16", _measured({**shape, "ep": 1.0}, "balanced", "bf16"))
    assert np.allclose(act1, act1b)  # no remote rows at ep 1
    _, act8 = moe_parts("bf16", _measured({**shape, "ep": 8.0}, "expert_map", "bf16"))
    _, act8b = moe_parts("bf16", _measured({**shape, "ep": 8.0}, "balanced", "bf16"))
    remote = 1024.0 * 8.0 * 7.0 / 8.0
    per_row = 2.0 * (2.0 * 2048.0 + 2.0 * 7168.0) + 2048.0 * (4.0 + 2.0)
    assert float(act8[0] - act8b[0]) == pytest.approx(remote * per_row)
    t = [
        float(waves_v1.model_time("moe", "bf16", SMS, PEAK, BW, P, _measured({**shape, "ep": 8.0}, r, "bf16"))[0])
        for r in ("balanced", "expert_map")
    ]
    assert t[1] > t[0]


def _rows(backend: str, ep: float) -> pd.DataFrame:
    tok = np.array([1.0, 16.0, 256.0, 4096.0])
    d = pd.DataFrame({c: [""] * len(tok) for c in COLUMNS})
    for c in ("m", "n", "k", "groups", "time_s"):
        d[c] = np.nan
    d = d.assign(kernel="moe", backend=backend, layout="fused", tokens=tok, ep=ep, tp=1.0, **LAYER)
    d["time_s"] = 1e-4
    return d


@pytest.mark.parametrize(
    "backend,routing",
    [
        ("sglang_fused_moe_triton", "expert_map"),
        ("vllm_unquantizedfusedmoe_triton_tritonexperts", "expert_map"),
        ("moe_torch_flow_cutlass", "balanced"),
    ],
)
def test_fit_prices_each_backend_with_its_collector_workload(backend, routing):
    assert MT.routing(_rows(backend, 8.0)) == routing
    shape = G._shape_of(_rows(backend, 8.0), "moe", "bf16")
    assert ("zero_rows" in shape) == (routing == "expert_map") and "routing" not in shape


def test_cv_block_reports_the_decode_sized_subset():
    errs = np.array([0.01, -0.02, 0.5, 0.1])
    cv = G.cv_block(errs, 2, np.array([1.0, 64.0, 65.0, 4096.0]))
    assert cv["small"]["rows"] == 2
    assert cv["small"]["median_abs_pct"] == pytest.approx(1.5)
    assert cv["small"]["p90_abs_pct"] <= 2.0


def test_expert_map_local_experts_are_balanced():
    shape = dict(LAYER, tokens=np.array([1.0, 64.0]), ep=8.0)
    gb, _ = moe_parts("bf16", _measured(shape, "balanced", "bf16"))
    ge, _ = moe_parts("bf16", _measured(shape, "expert_map", "bf16"))
    assert np.allclose(gb[0][6], ge[0][6])  # touched experts: min(local, pairs), not the random expectation
    tb = waves_v1.model_time("moe", "bf16", SMS, PEAK, BW, P, _measured({**shape, "ep": 1.0}, "balanced", "bf16"))
    te = waves_v1.model_time("moe", "bf16", SMS, PEAK, BW, P, _measured({**shape, "ep": 1.0}, "expert_map", "bf16"))
    assert np.allclose(tb, te)
