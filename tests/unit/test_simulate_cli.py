"""`moesim simulate` as a user runs it, the serving validation cases, and the verification that
disagg / recommend / plan run with the simulator."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from moesim.analyses import verify as V
from moesim.engine.settings import Pricing
from moesim.errors import MoesimError
from moesim.simulate.clients import closed_loop
from moesim.simulate.core import simulate
from moesim.simulate.options import options
from tests.conftest import run_cli

ROOF = ["--model", "deepseek-v3", "--hardware", "h200", "--tp", "8", "--ep", "8", "--cost-mode", "roofline"]


def test_simulate_json_and_per_request_rows(tmp_path):
    out = tmp_path / "r.csv"
    p = run_cli("simulate", *ROOF, "--concurrency", "8", "--num-prompts", "40", "--isl", "600", "--osl", "40",
                "--max-ttft", "2s", "--max-tpot", "50ms", "--json", "--out", out)  # fmt: skip
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for k in ("ttft_mean_s", "ttft_p90_s", "tpot_p99_s", "itl_p50_s", "e2e_mean_s", "goodput_requests_per_s"):
        assert np.isfinite(d[k]) and d[k] >= 0, k
    assert d["completed"] == 40 and d["pools"][0]["gpus_per_instance"] == 8
    assert d["rules"]["engine"] == "sglang" and d["rules"]["sources"]["profile"].startswith("sglang.yaml")
    rows = pd.read_csv(out)
    assert len(rows) == 40 and (rows["ttft_s"] > 0).all() and (rows["output_tokens"] == 40).all()


def test_simulate_table_and_plot(tmp_path):
    png = tmp_path / "t.png"
    p = run_cli("simulate", *ROOF, "--request-rate", "3", "--num-prompts", "30", "--isl", "500", "--osl", "20",
                "--plot", png)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "TTFT" in p.stdout and "throughput" in p.stdout and png.stat().st_size > 1000


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--isl", "100", "--osl", "10"], "exactly one of --concurrency"),
        (["--concurrency", "4", "--isl", "100"], "--isl and --osl"),
        (["--concurrency", "4", "--request-rate", "2", "--isl", "100", "--osl", "5"], "exactly one of"),
        (["--concurrency", "4", "--isl", "100", "--osl", "5", "--prefill-tp", "8"], "--prefill-instances"),
        (["--concurrency", "4", "--isl", "100", "--osl", "5", "--router", "fastest"], "router"),
        (["--concurrency", "0", "--isl", "100", "--osl", "5"], "--concurrency"),
        (["--concurrency", "4", "--isl", "100", "--osl", "5", "--out", "x.txt"], "--out"),
    ],
)
def test_simulate_bad_flags_are_one_line(args, needle):
    p = run_cli("simulate", *ROOF, *args)
    assert p.returncode == 2, p.stdout
    assert needle in p.stderr and "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_prompt_longer_than_the_kv_pool_is_refused():
    w = closed_loop(1, 2, 100_000, 4)
    with pytest.raises(MoesimError, match="serving instance .* KV pool holds 0 tokens per rank"):
        grouped = options(tp=8, ep=8, cost_mode="roofline")
        simulate("deepseek-v3", "h200", workload=w, set=["hardware.memory_GB=95"], **grouped)


def test_verify_flags_a_closed_form_that_hides_the_queue():
    """An aggregated candidate at 64 clients: the simulation sees the start-up burst and chunked
    prefill interrupting decode; its figures are finite and a disagreement over 10 % is said."""
    mix = {"tp": 8, "dp": 1, "ep": 8, "moe_tp": 1, "batch": 64, "mtp": 0, "acceptance": 0.8, "redundant": 0}
    c = V.Candidate("agg", mix, 1, closed={"ttft_s": 1e-3, "tpot_s": 1e-3})
    (row,) = V.verify("deepseek-v3", "h200", [c], isl=1000, osl=50, pricing=Pricing.of(cost_mode="roofline"))
    assert np.isfinite(row["sim_ttft_p90_s"]) and row["sim_ttft_p90_s"] >= row["sim_ttft_mean_s"] * 0.5
    assert any("TTFT" in t for t in row["disagrees"]) and row["ttft_gap"] > V.DISAGREE
    big = V.Candidate("huge", dict(mix, batch=4096), 1, closed={})
    (skip,) = V.verify("deepseek-v3", "h200", [big], isl=1000, osl=50, pricing=Pricing.of(cost_mode="roofline"))
    assert "not simulated" in skip["skipped"] and np.isnan(skip["sim_ttft_p90_s"])


def test_recommend_reports_simulated_p90():
    p = run_cli("recommend", "--hardware", "h200", "--isl", "1000", "--osl", "200", "--max-ttft", "3s",
                "--max-tpot", "80ms", "--request-rate", "2", "--max-gpus", "8", "--no-disagg", "--cost-mode",
                "roofline", "--top", "2", "--verify", "1", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert np.isfinite(rows[0]["sim_ttft_p90_s"]) and rows[0]["sim_ttft_p90_s"] > 0
    assert rows[1]["sim_ttft_p90_s"] is None or not np.isfinite(rows[1]["sim_ttft_p90_s"])  # only the first


def test_serving_validation_case_runs():
    from moesim.analyses.validate.cases import validate

    checks = validate(ids={"inferencex870-h200-sglang-tp8-r1-1k1k-c8"}, serving=True)
    by = {c.metric: c for c in checks}
    assert {"ttft_mean_s", "tpot_mean_s", "itl_p99_s"} <= set(by)
    assert by["tpot_mean_s"].passed  # the decode step is calibrated: TPOT within the tolerance
    assert np.isfinite(by["ttft_mean_s"].predicted)
