"""What the measured fused-MoE tables ran beyond the expert GEMMs (moesim.calibration.fit.moe_tables):
the group-limited router on the collector's balanced logits (moesim.calibration.grouped_router), the
per-token finalize / copy passes, and the dominated rows the fit drops."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import gemm as G
from moesim.calibration.fit import moe_tables as MT
from moesim.calibration.fit.moe_work import work_columns
from moesim.calibration.grouped_router import grouped_loads, grouped_rows, grouped_tile_padding
from moesim.perf.profile.work import moe_parts, moe_rows

DSV3 = dict(hidden=7168.0, n=2048.0, experts=256.0, topk=8.0)
EPS = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0])


def _router_brute(t: int, e: int, k: int, ep: int, ng: int, tg: int) -> np.ndarray:
    """Rank-0 loads by brute force: balanced_logits, group score = top-2 sum, top tg groups, top k
    experts in them; ties to the lower index (stable sort)."""
    s = int(np.ceil(e / k))
    i, j = np.arange(t)[:, None], np.arange(k)[None, :]
    picks = (i + j * s) % e if t >= s else np.floor((i * s / t + j * s) % e).astype(int)
    loads = np.zeros(e)
    for row in picks:
        score = np.zeros(e)
        score[row] = 1.0
        grp = score.reshape(ng, -1)
        gscore = np.sort(grp, axis=1)[:, -2:].sum(axis=1)
        keep = np.argsort(-gscore, kind="stable")[:tg]
        masked = np.where(np.isin(np.arange(e) // (e // ng), keep), score, -1.0)
        loads[np.argsort(-masked, kind="stable")[:k]] += 1
    return loads[: e // ep]


@pytest.mark.parametrize("t", [1, 5, 40, 300])
@pytest.mark.parametrize("ep", [2, 8, 64, 256])
def test_grouped_loads_match_the_router_brute_force(t, ep):
    got = grouped_loads(t, 256.0, 8.0, float(ep), 8.0, 4.0)[0]
    want = _router_brute(t, 256, 8, ep, 8, 4)
    np.testing.assert_allclose(got[: len(want)], want)
    assert not got[len(want) :].any()


def test_deepseek_router_keeps_rank0_hot_at_every_ep():
    """The H200 FlashInfer rows' EP scaling: 8 : 6 : 5 : 4.5 : 4.25 : 4 : 2 : 1 rows per token;
    one token reads 8, 6, 5, 5, 5, 4, 2, 1 local experts' weights."""
    pairs, _ = grouped_rows(grouped_loads(16384.0, 256.0, 8.0, EPS, 8.0, 4.0))
    np.testing.assert_allclose(pairs / 16384.0, [8, 6, 5, 4.5, 4.25, 4, 2, 1])
    _, touched = grouped_rows(grouped_loads(1.0, 256.0, 8.0, EPS, 8.0, 4.0))
    np.testing.assert_allclose(touched, [8, 6, 5, 5, 5, 4, 2, 1])
    plain, _ = grouped_rows(grouped_loads(16384.0, 256.0, 8.0, EPS, 1.0, 1.0))  # no groups: balanced
    np.testing.assert_allclose(plain, 16384.0 * 8.0 / EPS)


def test_grouped_tile_padding_counts_each_expert_tiles():
    loads = np.array([[130.0, 2.0, 0.0]])
    assert float(grouped_tile_padding(loads, 128.0)[0]) == pytest.approx(3 * 128.0 / 132.0)


def test_moe_rows_replace_only_the_grouped_rows():
    shape = {k: np.full(2, v) for k, v in DSV3.items()}
    shape.update(tokens=np.full(2, 4096.0), ep=np.full(2, 64.0))
    shape.update(n_group=np.array([8.0, 1.0]), topk_group=np.array([4.0, 1.0]))
    pairs, touched, _ = moe_rows(work_columns(shape, "balanced", "fp8_block"))
    np.testing.assert_allclose(pairs, [4.0 * 4096.0, 4096.0 * 8.0 / 64.0])
    np.testing.assert_allclose(touched, [4.0, 4.0])


def test_token_bytes_add_every_token_row():
    shape = work_columns(dict(DSV3, tokens=1024.0, ep=32.0), "balanced", "fp8_block")
    _, base = moe_parts("fp8_block", shape)
    _, more = moe_parts("fp8_block", {**shape, "token_bytes": 6.0})
    assert float(more - base) == pytest.approx(1024.0 * 7168.0 * 6.0)


def _rows(backend: str, times: dict) -> pd.DataFrame:
    rows = [
        dict(DSV3, tokens=64.0, ep=ep, tp=tp, time_s=t, backend=backend, layout="fused")
        for (ep, tp), t in times.items()
    ]
    return pd.DataFrame(rows)


def test_dominated_rows_are_slower_with_less_work():
    d = _rows("moe_torch_flow_cutlass", {(1, 1): 1e-3, (2, 1): 3e-3, (1, 2): 1.2e-3, (4, 2): 0.4e-3})
    np.testing.assert_array_equal(MT.dominated(d), [False, True, False, False])
    notes: list = []
    assert len(MT.fit_rows(d, "x", G.EXPERT_MAP, notes)) == 3 and notes
    masked = d.assign(layout="masked")  # DeepEP layouts: a rank's own tokens, kept
    assert len(MT.fit_rows(masked, "x", G.EXPERT_MAP, [])) == 4
    routed = _rows("sglang_fused_moe_triton", {(1, 1): 1e-3, (2, 1): 3e-3})
    assert len(MT.fit_rows(routed, "x", G.EXPERT_MAP, [])) == 2  # expert-map workloads kept


def test_routing_keys_by_backend_and_model():
    d = pd.concat([_rows("vllm_fp8moe_flashinfer_cutlass_flashinferexperts", {(8, 1): 1e-3})] * 2, ignore_index=True)
    d.loc[1, "experts"] = 384.0
    keys = G._shape_of(d.assign(layout="fused"), "moe")
    np.testing.assert_array_equal(MT.routing_keys(d, keys)["n_group"], [8.0, 1.0])
    # the work columns: the grouped row computes its rank-0 load (5 rows per token at EP 8), the other 64 x 8 / 8
    assert "n_group" not in keys and list(keys["pairs"]) == [5.0 * 64.0, 64.0]
    assert keys["token_bytes"] == MT.FINALIZE_BYTES + MT.NOOP_COPY_BYTES
    plain_rows = _rows("moe_torch_flow_cutlass", {(8, 1): 1e-3}).assign(layout="fused")
    plain = G._shape_of(plain_rows, "moe")
    assert "n_group" not in MT.routing_keys(plain_rows, plain) and plain["token_bytes"] == MT.FINALIZE_BYTES


def test_token_bytes_param_prices_the_reader_like_the_fit():
    """A fitted moe entry carries its backend's token_bytes; model_time adds those bytes at eta_m."""
    from moesim.perf.models import waves_v1
    from moesim.perf.profile import schema as S

    p = {"eta_c": 0.3, "eta_m": 0.7, "alpha_us": 30.0, "kb_ns": 20.0, "sm_GBps": 300.0}
    shape = work_columns(dict(DSV3, tokens=4096.0, ep=64.0), "balanced", "fp8_block")
    base = waves_v1.model_time("moe", "fp8_block", 132, 1979e12, 4.8e12, p, shape)
    more = waves_v1.model_time("moe", "fp8_block", 132, 1979e12, 4.8e12, {**p, "token_bytes": 6.0}, shape)
    assert float(more - base) == pytest.approx(4096.0 * 7168.0 * 6.0 / (4.8e12 * 0.7))
    checker = S._Checker("x")
    checker.fields("params", {**p, "token_bytes": 6.0}, S.PARAMS[S.WAVES])  # an allowed waves_v1 param


def test_fit_records_token_bytes_of_the_backend():
    rng = np.random.default_rng(0)
    rows = []
    for n, tok, ep in [(n, t, e) for n in (1024.0, 2048.0, 4096.0) for t in (16.0, 256.0, 4096.0) for e in (8.0, 32.0)]:
        rows.append(dict(hidden=4096.0, n=n, experts=256.0, topk=8.0, tokens=tok, ep=ep, tp=1.0, layout="fused"))
    d = pd.DataFrame(rows).assign(
        backend="moe_torch_flow_cutlass", kernel="moe", dtype="fp8_block", exclude="", source="x"
    )
    d["time_s"] = 3e-5 + d.tokens * d.n * 1e-12 * rng.uniform(0.9, 1.1, len(d))
    from moesim.calibration.fit.peaks import Peaks
    from moesim.specs.loader import load_hardware

    e = G.fit_waves("moe", d, "fp8_block", "moe_torch_flow_cutlass", Peaks.from_hardware(load_hardware("h200")), "h200")
    assert e["params"]["token_bytes"] == MT.FINALIZE_BYTES
