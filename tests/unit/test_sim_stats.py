"""moesim.simulate.stats: summary statistics and goodput; moesim.report.sim_outputs: the per-request frame and the figure."""

import numpy as np
import pandas as pd
import pytest

from moesim.errors import ConfigError
from moesim.report.sim_outputs import per_request_frame, plot_timeseries
from moesim.report.writer import write_frame
from moesim.simulate.requests import RequestLog, TimeSeries
from moesim.simulate.stats import summarize, weighted_percentile


def _log(**over):
    # request 0 is warm-up; 1..5 measured (5 has a one-token output)
    d = dict(
        sent_s=np.array([0.0, 1.0, 1.0, 2.0, 3.0, 4.0]),
        first_token_s=np.array([0.5, 1.2, 1.5, 2.1, 3.9, 4.3]),
        finish_s=np.array([1.0, 2.2, 3.5, 3.1, 5.9, 4.3]),
        input_tokens=np.array([100, 100, 200, 300, 400, 500]),
        output_tokens=np.array([11, 11, 21, 11, 5, 1]),
        cached_tokens=np.array([0, 50, 0, 100, 0, 0]),
        replica=np.zeros(6, np.int64),
        preemptions=np.array([3, 0, 1, 0, 2, 0]),
        warmup=np.array([True, False, False, False, False, False]),
        itl_s=np.array([0.1, 0.2, 0.3]),
        itl_weight=np.array([10, 5, 1]),
    )
    d.update(over)
    return RequestLog(**d)


def test_weighted_percentile_matches_numpy_repeat():
    rng = np.random.default_rng(0)
    q = np.array([0, 10, 50, 90, 99, 100])
    for _ in range(50):
        x = rng.normal(size=int(rng.integers(1, 40)))
        w = rng.integers(1, 6, size=x.size)
        assert np.allclose(weighted_percentile(x, q, w), np.percentile(np.repeat(x, w), q))
    assert np.allclose(weighted_percentile([3.0, 1.0, 2.0], q), np.percentile([3.0, 1.0, 2.0], q))
    assert np.isnan(weighted_percentile([], 50))


def test_summary_against_hand_values():
    s = summarize(_log())
    ttft = np.array([0.2, 0.5, 0.1, 0.9, 0.3])
    e2e = np.array([1.2, 2.5, 1.1, 2.9, 0.3])
    tpot = np.array([1.0 / 10, 2.0 / 20, 1.0 / 10, 2.0 / 4])  # the one-token output is left out
    assert s["requests"] == 6 and s["warmup"] == 1 and s["completed"] == 5 and s["unfinished"] == 0
    assert s["duration_s"] == pytest.approx(5.9 - 1.0)
    for name, x in (("ttft", ttft), ("e2e", e2e), ("tpot", tpot)):
        assert s[f"{name}_mean_s"] == pytest.approx(x.mean())
        for p in (50, 90, 99):
            assert s[f"{name}_p{p}_s"] == pytest.approx(np.percentile(x, p))
    itl = np.repeat([0.1, 0.2, 0.3], [10, 5, 1])
    assert s["itl_mean_s"] == pytest.approx(itl.mean()) and s["itl_p90_s"] == pytest.approx(np.percentile(itl, 90))
    assert s["requests_per_s"] == pytest.approx(5 / 4.9)
    assert s["input_tokens_per_s"] == pytest.approx(1500 / 4.9)
    assert s["output_tokens_per_s"] == pytest.approx(49 / 4.9)
    assert s["total_tokens_per_s"] == pytest.approx(1549 / 4.9)
    assert s["concurrency_mean"] == pytest.approx(e2e.sum() / 4.9)
    assert s["cached_tokens_total"] == 150 and s["prefix_hit_frac"] == pytest.approx(150 / 1500)
    assert s["preemptions_total"] == 3 and s["requests_preempted"] == 2  # the warm-up's 3 left out
    assert s["good_completed"] == 5 and s["goodput_requests_per_s"] == s["requests_per_s"]  # no SLO: all good


def test_goodput_every_slo_and_one_token_tpot():
    # TTFT <= 0.5: requests 1, 2, 3, 5 (0.2, 0.5, 0.1, 0.3); TPOT <= 0.11 (one-token -> 0): 1, 2, 3, 5
    s = summarize(_log(), slo_ttft_s=0.5, slo_tpot_s=0.11)
    assert s["good_completed"] == 4 and s["goodput_requests_per_s"] == pytest.approx(4 / 4.9)
    s = summarize(_log(), slo_ttft_s=0.5, slo_tpot_s=0.11, slo_e2e_s=1.25)  # E2E <= 1.25: 1, 3, 5
    assert s["good_completed"] == 3 and s["slo_e2e_s"] == 1.25
    assert summarize(_log(), slo_ttft_s=0.05)["good_completed"] == 0


def test_unfinished_duration_override_and_empty():
    s = summarize(_log(finish_s=np.array([1.0, 2.2, 3.5, 3.1, np.nan, 4.3])), duration_s=10.0)
    assert s["completed"] == 4 and s["unfinished"] == 1 and s["requests_per_s"] == pytest.approx(0.4)
    e = summarize(_log(warmup=np.ones(6, bool)))
    assert e["completed"] == 0 and e["requests_per_s"] == 0.0 and np.isnan(e["ttft_p99_s"])
    for kw in ({"slo_ttft_s": 0}, {"slo_tpot_s": -1}, {"duration_s": float("nan")}):
        with pytest.raises(ConfigError):
            summarize(_log(), **kw)


def test_per_request_frame_writes_csv(tmp_path):
    df = per_request_frame(_log())
    assert list(df.columns[:6]) == ["request", "warmup", "sent_s", "first_token_s", "finish_s", "ttft_s"]
    assert np.isnan(df["tpot_s"].iloc[5]) and df["e2e_s"].iloc[2] == pytest.approx(2.5)
    out = write_frame(df, tmp_path / "requests.csv")
    back = pd.read_csv(out)
    assert len(back) == 6 and back["input_tokens"].tolist() == [100, 100, 200, 300, 400, 500]


def test_plot_timeseries_writes_a_figure(tmp_path):
    ts = TimeSeries(
        t_s=np.array([0.0, 1.0, 2.0, 3.0]),
        running=np.array([1, 3, 2, 0]),
        queued=np.array([2, 0, 1, 0]),
        kv_used_frac=np.array([0.1, 0.6, 0.4, 0.0]),
    )
    for ext in ("png", "svg"):
        p = tmp_path / f"run.{ext}"
        plot_timeseries(ts, _log(), p, "test run")
        assert p.stat().st_size > 1000
    with pytest.raises(ConfigError, match="must end in .png, .svg or .pdf"):
        plot_timeseries(ts, _log(), tmp_path / "run.txt", "x")
