"""GPU budgets (`--total-gpus`), `recommend` and the searched-space report (issue 16 parts 1-2)."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.analyses import budget as B
from moesim.analyses.disagg import disagg
from moesim.analyses.recommend import aggregated_candidates, disagg_candidates
from tests.conftest import run_cli

SIZES = [1, 2, 4, 8, 16, 24, 32, 64]


def _pool(gpus, tps, batch=None, dp=None, ttft=None, tpot=None):
    n = len(gpus)
    return pd.DataFrame(
        {
            "gpus": np.asarray(gpus, int),
            "tokens_per_s_per_gpu": np.asarray(tps, float),
            "slo_ok": np.ones(n, bool),
            "tp": np.ones(n, int),
            "dp": np.asarray(dp if dp is not None else gpus, int),
            "ep": np.asarray(gpus, int),
            "batch": np.asarray(batch if batch is not None else [64] * n, float),
            "mtp": np.zeros(n, int),
            "redundant": np.zeros(n, int),
            "ttft_total_s": np.asarray(ttft if ttft is not None else [0.5] * n, float),
            "ttft_s": np.asarray(ttft if ttft is not None else [0.5] * n, float),
            "tpot_s": np.asarray(tpot if tpot is not None else [0.03] * n, float),
        }
    )


pools = st.lists(st.tuples(st.sampled_from(SIZES), st.floats(10.0, 1e4)), min_size=1, max_size=6)


@pytest.mark.slow  # ~5 s: 60 hypothesis examples (the fast suite stays under 60 s)
@settings(max_examples=60, deadline=None)
@given(pre=pools, dec=pools, n=st.integers(1, 80), gpn=st.sampled_from([4, 8]))
def test_disagg_budget_never_exceeds_and_is_the_best_pair(pre, dec, n, gpn):
    p, d = _pool(*zip(*pre)), _pool(*zip(*dec))
    isl, osl = 4000.0, 1000.0
    dep = B.disagg_budget(p, d, isl, osl, n, gpn)
    alloc = lambda g: float(B.allocated_gpus(g, gpn))  # noqa: E731
    best = 0.0  # brute force over every pair of rows and instance counts
    for (pg, pt), (dg, dt) in itertools.product(pre, dec):
        for x in range(1, n + 1):
            for y in range(1, n + 1):
                if x * alloc(pg) + y * alloc(dg) <= n:
                    best = max(best, min(x * pg * pt / isl, y * dg * dt / osl))
    if not dep:
        assert best == 0.0
        return
    assert dep["gpus"] <= n
    assert dep["prefill_gpus"] + dep["decode_gpus"] == dep["gpus"]
    assert dep["prefill_instances"] >= 1 and dep["decode_instances"] >= 1
    assert dep["requests_per_s"] == pytest.approx(best, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(rows=pools, n=st.integers(1, 100), gpn=st.sampled_from([4, 8]))
def test_aggregated_budget_never_exceeds(rows, n, gpn):
    df = _pool(*zip(*rows))
    b = B.apply_budget(df, n, gpn)
    assert (b["deployment_gpus"] <= n).all()
    assert (b["replicas"] >= 1).all()
    # an instance spanning nodes takes whole nodes
    spans = b["gpus"] > gpn
    assert (b.loc[spans, "instance_gpus_allocated"] % gpn == 0).all()
    # every dropped row needs more than the budget
    dropped = df.loc[~df.index.isin(b.index)]
    assert (B.allocated_gpus(dropped["gpus"], gpn) > n).all()


def test_edge_flag_on_the_largest_batch_only():
    df = _pool([8, 8, 8], [1.0, 2.0, 3.0], batch=[16, 64, 256])
    assert B.edge_flags(df, df.iloc[2].to_dict()) == ["best batch is the largest tried (256): widen --batch"]
    assert B.edge_flags(df, df.iloc[1].to_dict()) == []
    one = _pool([8], [1.0], batch=[256])  # one value: not a swept axis, no flag
    assert B.edge_flags(one, one.iloc[0].to_dict()) == []


@settings(max_examples=40, deadline=None)
@given(
    pre=pools,
    dec=pools,
    rates=st.lists(st.floats(0.01, 500.0), min_size=2, max_size=6),
    kind=st.sampled_from(["request_rate", "concurrency"]),
)
def test_recommend_monotone_in_the_load(pre, dec, rates, kind):
    p, d = _pool(*zip(*pre)), _pool(*zip(*dec), batch=[32] * len(dec))
    fewest = []
    for v in sorted(rates):
        a = aggregated_candidates(d, 1000.0, (kind, v), 8)
        g = disagg_candidates(p, d, 4000.0, 1000.0, (kind, v), 8)
        both = pd.concat([a, g])
        if kind == "request_rate":
            assert (both["capacity_requests_per_s"] >= v * (1 - 1e-9)).all()
        else:
            assert (both["capacity_users"] >= v * (1 - 1e-9)).all()
        fewest.append(int(both["gpus"].min()))
    assert fewest == sorted(fewest)


@pytest.fixture(scope="module")
def small_disagg():
    return disagg(
        "deepseek-v3",
        "h200",
        isl=2000,
        osl=500,
        max_ttft_s=2.0,
        max_tpot_s=0.05,
        prefill_axes={"tp": [1], "ep": [8, 16], "batch": [4096, 8192]},
        decode_axes={"tp": [1], "ep": [8, 16], "batch": [16, 64], "mtp": [1], "acceptance": [0.8]},
        total_gpus=24,
    )


def test_disagg_within_budget_agg_and_disagg(small_disagg):
    r = small_disagg
    b = r.budget
    assert b["total_gpus"] == 24 and b["gpus_per_node"] == 8
    assert 0 < b["disagg_gpus"] <= 24 and 0 < b["aggregated_gpus"] <= 24
    assert r.deployment["prefill_gpus"] + r.deployment["decode_gpus"] <= 24
    assert b["disagg_over_aggregated_total"] == pytest.approx(
        b["disagg_output_tokens_per_s"] / b["aggregated_output_tokens_per_s"]
    )
    assert r.searched["decode"]["batch"] == [16.0, 64.0]


def test_recommend_on_real_frames_is_monotone(small_disagg):
    f = small_disagg.frames
    fewest = []
    for rate in (1.0, 5.0, 20.0, 80.0):
        a = aggregated_candidates(f["mixed"], 500.0, ("request_rate", rate), 8)
        g = disagg_candidates(f["prefill"], f["decode"], 2000.0, 500.0, ("request_rate", rate), 8)
        fewest.append(int(pd.concat([a, g])["gpus"].min()))
    assert fewest == sorted(fewest) and fewest[-1] > fewest[0]


def test_sweep_json_honours_top_and_budget():
    r = run_cli("sweep", "--hardware", "h200", "--tp", "1", "--ep", "8,16,64", "--batch", "16,64",
                "--context", "4096", "--total-gpus", "16", "--top", "3", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 3
    assert all(x["deployment_gpus"] <= 16 and x["ep"] <= 16 for x in rows)


def test_sweep_prints_searched_and_edge_flag():
    r = run_cli("sweep", "--hardware", "h200", "--tp", "1", "--ep", "8", "--batch", "1,2", "--context", "4096")
    assert r.returncode == 0, r.stderr
    assert "searched: tp 1; dp 8; ep 8; moe_tp 1; batch 1,2" in r.stdout
    assert "best batch is the largest tried (2): widen --batch" in r.stdout


def test_budget_flags_reject_nonsense():
    r = run_cli("sweep", "--total-gpus", "0")
    assert r.returncode == 2 and "total_gpus" in r.stderr


def test_recommend_cli_json_top_and_one_load():
    base = ["recommend", "--hardware", "h200", "--isl", "2000", "--osl", "500", "--max-ttft", "2", "--max-tpot", "0.05"]
    r = run_cli(*base, "--request-rate", "10", "--max-gpus", "16", "--top", "2", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 2 and rows[0]["gpus"] <= rows[1]["gpus"]
    assert all(x["capacity_requests_per_s"] >= 10 for x in rows)
    both = run_cli(*base, "--request-rate", "10", "--concurrency", "5")
    assert both.returncode == 2 and "exactly one" in both.stderr


def test_edge_flag_not_raised_at_a_physical_limit():
    df = _pool([8, 8], [1.0, 2.0], batch=[16, 64])
    df["tp"] = [4, 8]
    assert B.edge_flags(df, df.iloc[1].to_dict(), limits={"tp": 8}) == [
        "best batch is the largest tried (64): widen --batch"
    ]
