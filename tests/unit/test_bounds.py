"""Every count-like flag has a documented upper bound, checked before any work (issue 17 part 2):
one line on stderr naming the flag, the value and the allowed range, exit code 2."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from moesim.analyses.budget import MAX_BUDGET_GPUS, disagg_budget
from moesim.analyses.disagg import MAX_INSTANCES
from moesim.analyses.sweep import MAX_CONFIGS, MAX_FRAME_CONFIGS, check_frame_size, plan_sweep
from moesim.cli.sweep import MAX_TOP
from moesim.errors import ConfigError
from moesim.grid.validity import MAX_REDUNDANT_PER_EXPERT
from tests.conftest import run_cli

ONE = ["--tp", "1", "--ep", "8", "--mtp", "0", "--redundant", "0"]  # one value of each default axis
SLO = ["--isl", "1000", "--osl", "100", "--max-ttft", "2s", "--max-tpot", "50ms"]
CASES = [
    (["estimate", "--ep", "8", "--redundant-experts", "1000000"], "--redundant-experts: 1,000,000", "[0, 768]"),
    (["timeline", "--ep", "8", "--redundant-experts", "769"], "--redundant-experts: 769", "[0, 768]"),
    (["sweep", "--ep", "8", "--redundant", "0,32,5000"], "--redundant-experts: 5,000", "[0, 768]"),
    (["plan", "--traffic", "examples/traffic_deepseek_day.yaml", "--redundant-experts", "99968"], "99,968", "[0, 768]"),
    (
        ["disagg", *SLO, "--max-instances", "1000000000"],
        "--max-instances (max_instances): 1000000000",
        f"<= {MAX_INSTANCES:,}",
    ),
    (["recommend", "--request-rate", "10", *SLO, "--max-gpus", "100000000"], "total_gpus: 100000000", "100,000]"),
    (["sweep", "--ep", "8", "--total-gpus", "1000000000"], "total_gpus: 1000000000", f"[1, {MAX_BUDGET_GPUS:,}]"),
    (["sweep", "--ep", "8", "--top", "1000000000"], "--top: 1,000,000,000", f"[0, {MAX_TOP:,}]"),
    (["sweep", "--batch", "1:100000:1", "--context", "1:4096:1"], "configurations; at most 200,000,000", "split"),
    (
        ["pareto", *ONE, "--batch", "1:100000:1", "--context", "1:64:1", "--plot", "f.png"],
        "at most 5,000,000 in one",
        ".parquet",
    ),
]


@pytest.mark.parametrize("argv, names, allowed", CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_count_flag_out_of_range_is_one_clean_line_before_work(argv, names, allowed):
    t0 = time.perf_counter()
    p = run_cli(*argv)
    assert p.returncode == 2, p.stderr[-500:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and allowed in lines[0], p.stderr
    assert time.perf_counter() - t0 < 30  # refused before the work (the unbounded runs took minutes)


def test_the_bounds_themselves_are_accepted():
    hi = MAX_REDUNDANT_PER_EXPERT * 256
    plan_sweep(hardware="h200", axes={"ep": [8], "redundant": [0, hi]}, fill_defaults=False)
    with pytest.raises(ConfigError, match=r"\[0, 768\]"):
        plan_sweep(hardware="h200", axes={"ep": [8], "redundant": [hi + 1]}, fill_defaults=False)
    check_frame_size(SimpleNamespace(total=MAX_FRAME_CONFIGS))
    with pytest.raises(ConfigError, match=f"at most {MAX_FRAME_CONFIGS:,} in one in-memory sweep"):
        check_frame_size(SimpleNamespace(total=MAX_FRAME_CONFIGS + 1))
    assert MAX_CONFIGS == 200_000_000


def test_disagg_budget_same_best_with_fewer_cells():
    """The instance range stops at N / the smallest instance: the same best as every x up to N."""
    import numpy as np
    import pandas as pd

    pre = pd.DataFrame({"gpus": [8.0, 16.0], "tokens_per_s_per_gpu": [9000.0, 8000.0], "slo_ok": True})
    dec = pd.DataFrame({"gpus": [8.0, 32.0], "tokens_per_s_per_gpu": [2000.0, 2600.0], "slo_ok": True})
    got = disagg_budget(pre, dec, 1000.0, 100.0, 96, 8)
    assert got["gpus"] <= 96 and got["prefill_instances"] >= 1 and got["decode_instances"] >= 1
    # brute force over every (prefill row, decode row, x, y) in the budget
    best = None
    for _, p in pre.iterrows():
        for _, d in dec.iterrows():
            for x in range(1, 97):
                for y in range(1, 97):
                    g = x * p.gpus + y * d.gpus
                    if g > 96:
                        continue
                    r = min(x * p.gpus * p.tokens_per_s_per_gpu / 1000.0, y * d.gpus * d.tokens_per_s_per_gpu / 100.0)
                    if best is None or r > best[0] + 1e-12 or (abs(r - best[0]) <= 1e-12 and g < best[1]):
                        best = (r, g)
    assert np.isclose(got["requests_per_s"], best[0]) and got["gpus"] == best[1]
