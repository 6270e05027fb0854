"""seed004 (Perplexity multi-node DeepSeek) cases read off sweeps — predictions, never fitted.

Numbers measured when these were written (engine at 16b90d4, cost_mode calibrated, overlap auto,
expert_skew auto):
  single-node-memory: H200 EP8 DP8 TP1, context 5000 -> max_batch 92 (128 does not fit)
  latency-corner:     H200 EP8 DP1 TP8 batch 1 -> 123.7 tok/s/user (seed: > 100)
  pareto-multinode:   at 50 tok/s/user EP128 (H100) / EP8 (H200) = 7.38x per machine (seed: 3-8x;
                      2.5x at 40, 8.7x at 60 tok/s/user — the ratio is steep in this range)
(An earlier engine, five-stage default and no calibration profile, gave 60.5 tok/s/user and an
EP128 frontier that stopped at 48 tok/s/user: these cases are sensitive to the overlap choice.)
"""

import numpy as np
import pytest

from moesim.analyses.pareto import frontier_at
from moesim.analyses.sweep import sweep

pytestmark = pytest.mark.validation

BATCH = [1, 2, 4, 8, 16, 32, 64, 128]  # Perplexity: batch 1..128, TP 1, 2, 4, 8, KV 5000, MTP 1 @ 0.6


def _cfg(case):
    c = dict(case["config"])
    return c


def test_seed004_single_node_memory(seed_cases):
    case = seed_cases["seed004-single-node-memory"]
    c = _cfg(case)
    lo, hi = case["expect"]["max_batch_range"]
    df = sweep(
        c["model"],
        c["hardware"],
        c["phase"],
        {"ep": [c["ep"]], "dp": [c["dp"]], "tp": [c["tp"]], "batch": BATCH, "context": [c["context"]]},
        cost_mode="calibrated",
        fill_defaults=False,  # the case's grid, whole
    )
    assert df["valid"].all()
    row128 = df[df["batch"] == 128].iloc[0]
    assert not row128["fits"]  # 128 requests/GPU of 5,000 tokens do not fit on one H200 node at EP8
    assert df[df["batch"] <= 64]["fits"].all()
    mb = float(df["max_batch"].iloc[0])
    assert lo <= mb <= hi, f"max_batch {mb}"
    from moesim.specs import load_model

    assert load_model(c["model"]).kv_bytes_per_token == case["expect"]["kv_bytes_per_token"]


def test_seed004_latency_corner(seed_cases):
    c = _cfg(seed_cases["seed004-latency-corner"])
    df = sweep(
        c["model"],
        c["hardware"],
        c["phase"],
        {
            "ep": [c["ep"]],
            "tp": [1, 2, 4, 8],
            "batch": BATCH,
            "context": [c["context"]],
            "mtp": [c["mtp"]],
            "acceptance": [c["acceptance"]],
        },
        cost_mode=c["cost_mode"],
        fill_defaults=False,  # the case's grid, whole
    )
    row = df[(df["tp"] == c["tp"]) & (df["dp"] == c["dp"]) & (df["batch"] == c["batch"])]
    assert len(row) == 1 and row["valid"].iloc[0] and row["fits"].iloc[0]
    v = float(row["tokens_per_s_per_user"].iloc[0])
    assert v > 100, f"{v:.1f} tok/s/user"


def _frontier(hardware, ep, c):
    from moesim.analyses.validate.pareto_case import deployment_frontier  # the same frontier `moesim validate` reads

    return deployment_frontier(c["model"], hardware, ep, c)


def test_seed004_pareto_multinode(seed_cases):
    c = _cfg(seed_cases["seed004-pareto-multinode"])
    single = _frontier(c["hardware_single"], 8, c)
    multi = _frontier(c["hardware_multi"], 128, c)
    assert len(single) and len(multi)
    y8 = frontier_at(single, 50.0, y="tokens_per_s_per_node")
    y128 = frontier_at(multi, 50.0, y="tokens_per_s_per_node")
    assert np.isfinite(y8) and np.isfinite(y128), (
        f"frontier x ranges: EP8 {single['tokens_per_s_per_user'].min():.1f}-"
        f"{single['tokens_per_s_per_user'].max():.1f}, EP128 {multi['tokens_per_s_per_user'].min():.1f}-"
        f"{multi['tokens_per_s_per_user'].max():.1f} tok/s/user"
    )
    ratio = y128 / y8
    assert 3.0 <= ratio <= 8.0, f"ratio {ratio:.2f}"
