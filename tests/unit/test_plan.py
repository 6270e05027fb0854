"""Traffic spec strictness and the capacity planner's invariants (fast: a handful of plan() calls)."""

import dataclasses
import json
import math

import numpy as np
import pytest

from moesim.analyses.capacity import decode_capacity, prefill_capacity
from moesim.analyses.plan import plan, units_for
from moesim.errors import MoesimError
from moesim.metrics.economics import day_economics
from moesim.specs.distributions import LengthDist
from moesim.specs.pools import PrefillPool
from moesim.specs.traffic import Traffic, load_traffic, traffic_from_dict
from tests.conftest import ROOT, run_cli

DAY = {
    "input_tokens": 608e9,
    "cache_hit_tokens": 342e9,
    "output_tokens": 168e9,
    "prices": {"usd_per_gpu_hour": 2.0, "usd_per_million": {"input_hit": 0.14, "input_miss": 0.55, "output": 2.19}},
}
DIURNAL = [3, 2, 2, 2, 2, 3, 5, 7, 9, 10, 10, 10, 10, 10, 10, 10, 10, 9, 9, 9, 8, 7, 5, 4]


@pytest.fixture(scope="module")
def day_plan():
    return plan(traffic_from_dict(DAY))


def _yaml(tmp_path, text, name="t.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _one_line_error(fn, *words):
    with pytest.raises(MoesimError) as ei:
        fn()
    msg = str(ei.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


# --------------------------------------------------------------------------- traffic spec
def test_yaml_loads_numbers_written_as_strings(tmp_path):
    # PyYAML reads 608.0e9 as the string '608.0e9'
    t = load_traffic(_yaml(tmp_path, "input_tokens: 608.0e9\ncache_hit_tokens: 342.0e9\noutput_tokens: 168e9\n"))
    assert t.input_tokens == 608e9 and t.cache_hit_tokens == 342e9 and t.output_tokens == 168e9
    assert t.hours == 24 and len(t.diurnal) == 24 and math.isclose(sum(t.diurnal), 1.0)
    assert t.prompt_length == t.context  # default: prompt length = context
    assert (t.prefill.ep, t.prefill.dp, t.decode.ep, t.decode.dp) == (32, 32, 144, 144)


@pytest.mark.parametrize(
    "text,words",
    [
        ("input_tokens: 1e9\noutput_tokens: 1e9\nbogus: 1\n", ["t.yaml", "bogus", "unknown key"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\ndecode: {ep: 144, batch: 3}\n", ["t.yaml", "decode.batch", "allowed"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\nslo: {min_tps: 3}\n", ["t.yaml", "slo.min_tps"]),
        (
            "input_tokens: 1e9\noutput_tokens: 1e9\nprices: {usd_per_million: {input: 1}}\n",
            ["t.yaml", "prices.usd_per_million.input"],
        ),
        ("input_tokens: 1e9\ncache_hit_tokens: 2e9\noutput_tokens: 1e9\n", ["t.yaml", "cache_hit_tokens", "input"]),
        ("input_tokens: 1e9\noutput_tokens: -5\n", ["t.yaml", "output_tokens", ">= 0"]),
        ("input_tokens: 1e9\noutput_tokens: lots\n", ["t.yaml", "output_tokens", "not a number"]),
        ("input_tokens: .nan\noutput_tokens: 1\n", ["input_tokens", "finite"]),
        ("output_tokens: 1e9\n", ["input_tokens", "required"]),
        ("input_tokens: 0\noutput_tokens: 0\n", ["output_tokens", "> 0"]),
        (
            "input_tokens: 1e9\noutput_tokens: 1e9\ndiurnal: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,"
            " 0, 0, 0]\n",
            ["diurnal", "not all 0"],
        ),
        ("input_tokens: 1e9\noutput_tokens: 1e9\ndiurnal: [1, 2, 3]\n", ["diurnal", "24"]),
        (
            "input_tokens: 1e9\noutput_tokens: 1e9\ndiurnal: [1, .inf, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,"
            " 1, 1, 1, 1]\n",
            ["diurnal[1]", "finite"],
        ),
        (
            "input_tokens: 1e9\noutput_tokens: 1e9\ndiurnal: [1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,"
            " 1, 1, 1, 1]\n",
            ["diurnal[1]", ">= 0"],
        ),
        ("input_tokens: 1e9\noutput_tokens: 1e9\nhours: 1.5\n", ["hours", "integer"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\nhours: 0\n", ["hours", ">= 1"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\ninput_tokens_per_s: 5\n", ["input_tokens_per_s", "not both"]),
        (
            "input_tokens: 1e9\noutput_tokens: 1e9\nprices: {usd_per_million: {input_hit: 1}}\n",
            ["prices.usd_per_million.input_miss", "required"],
        ),
        ("input_tokens: 1e9\noutput_tokens: 1e9\ndecode: {ep: 144, dp: 100}\n", ["decode.ep", "tp x dp"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\ndecode: {overlap: fast}\n", ["decode.overlap", "five-stage"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\ndecode: {acceptance: 1.5}\n", ["decode.acceptance", "<= 1"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\ncontext: 0\n", ["context", ">= 1"]),
        ("input_tokens: 1e9\noutput_tokens: 1e9\nslo: {max_ttft_s: 0}\n", ["slo.max_ttft_s", "> 0"]),
        ("- 1\n- 2\n", ["t.yaml", "mapping"]),
        ("input_tokens: [1\n", ["t.yaml", "not valid YAML"]),
    ],
)
def test_bad_traffic_yaml_is_one_line_naming_file_and_field(tmp_path, text, words):
    p = _yaml(tmp_path, text)
    _one_line_error(lambda: load_traffic(p), *words)


def test_missing_traffic_file(tmp_path):
    _one_line_error(lambda: load_traffic(tmp_path / "nope.yaml"), "nope.yaml", "cannot read")


def test_rates_equal_totals_and_diurnal_is_normalised():
    a = traffic_from_dict({"input_tokens_per_s": 1e6, "cache_hit_tokens_per_s": 4e5, "output_tokens_per_s": 2e5})
    b = traffic_from_dict({"input_tokens": 1e6 * 86400, "cache_hit_tokens": 4e5 * 86400, "output_tokens": 2e5 * 86400})
    assert a.input_tokens == pytest.approx(b.input_tokens) and a.output_tokens == pytest.approx(b.output_tokens)
    assert np.allclose(a.hourly_rate(a.output_tokens), 2e5)
    c = traffic_from_dict({**DAY, "diurnal": [10 * w for w in DIURNAL]})
    d = traffic_from_dict({**DAY, "diurnal": DIURNAL})
    assert np.allclose(c.weights, d.weights) and math.isclose(c.weights.sum(), 1.0)
    assert c.hourly_rate(c.output_tokens).sum() * 3600 == pytest.approx(168e9)
    # a 24-weight daily profile over a 48 h window repeats
    e = traffic_from_dict({**DAY, "hours": 48, "diurnal": DIURNAL})
    assert len(e.diurnal) == 48 and np.allclose(e.weights[:24], e.weights[24:])


def test_traffic_is_frozen_and_direct_construction_is_checked():
    t = Traffic(1e9, 0.0, 1e9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.input_tokens = 5  # frozen
    assert len(t.diurnal) == 24
    _one_line_error(lambda: Traffic(1e9, 2e9, 1e9), "cache_hit_tokens")


def test_example_file_is_the_published_day():
    t = load_traffic(ROOT / "examples" / "traffic_deepseek_day.yaml")
    assert (t.input_tokens, t.cache_hit_tokens, t.output_tokens) == (608e9, 342e9, 168e9)
    assert t.usd_per_million is not None and t.usd_per_gpu_hour == 2.0
    assert (t.prefill.ep, t.decode.ep, t.decode.redundant_experts) == (32, 144, 32)


# --------------------------------------------------------------------------- planner
def test_plan_units_and_report_keys(day_plan):
    r = day_plan
    h = r.hourly
    assert np.all(np.asarray(h["prefill_nodes"]) % 4 == 0) and np.all(np.asarray(h["decode_nodes"]) % 18 == 0)
    assert r.totals["average_nodes"] >= r.totals["average_nodes_fractional"] - 1e-9
    assert r.totals["peak_nodes"] >= r.totals["average_nodes"]
    d = r.to_dict()
    for k in (
        "average_nodes",
        "peak_nodes",
        "cost_usd_per_day",
        "usd_per_million_output_tokens",
        "revenue_usd_per_day",
        "margin",
        "decode_tokens_per_s_per_node",
        "prefill_tokens_per_s_per_node",
        "decode_batch",
        "hourly",
    ):
        assert k in d
    assert len(d["hourly"]) == 24
    json.dumps(d, allow_nan=False)


def test_decode_batch_is_the_largest_meeting_slo_and_memory(day_plan):
    dc = day_plan.decode
    s = dc.sweep
    ok = np.asarray(s["fits"]) & (np.asarray(s["tokens_per_s_per_user"]) >= 20.0)
    assert dc.batch == int(s["batch"][np.nonzero(ok)[0].max()])
    assert dc.tokens_per_s_per_user >= 20.0
    assert dc.limited_by in ("slo", "memory", "sweep")
    assert dc.max_batch_memory >= dc.batch
    assert dc.tokens_per_s_per_node == pytest.approx(dc.tokens_per_s_per_gpu * 8)


def test_economics_consistency(day_plan):
    r = day_plan
    e = r.economics
    assert e["cost_usd_per_day"] == pytest.approx(r.average_nodes * 8 * 24 * 2.0)
    assert r.totals["gpu_hours"] == pytest.approx(r.average_nodes * 8 * 24)
    assert sum(np.asarray(r.hourly["cost_usd"])) == pytest.approx(e["cost_usd_per_day"])
    assert e["revenue_usd_per_day"] == pytest.approx((342e9 * 0.14 + 266e9 * 0.55 + 168e9 * 2.19) / 1e6)
    assert e["margin"] == pytest.approx(e["revenue_usd_per_day"] / e["cost_usd_per_day"] - 1)
    assert e["usd_per_million_output_tokens"] == pytest.approx(e["cost_usd_per_day"] / 168e3)
    pools = e["cost_usd_per_day_by_pool"]
    assert pools["prefill"] + pools["decode"] == pytest.approx(e["cost_usd_per_day"])


def test_more_traffic_never_needs_fewer_nodes():
    prev = None
    for k in (0.05, 0.3, 1.0, 1.7, 4.0):
        t = traffic_from_dict(
            {
                **DAY,
                "input_tokens": 608e9 * k,
                "cache_hit_tokens": 342e9 * k,
                "output_tokens": 168e9 * k,
                "diurnal": DIURNAL,
            }
        )
        r = plan(t)
        cur = np.asarray(r.hourly["nodes"])
        if prev is not None:
            assert np.all(cur >= prev[0]) and r.average_nodes >= prev[1] and r.peak_nodes >= prev[2]
        prev = (cur, r.average_nodes, r.peak_nodes)
    assert prev[1] > 0


def test_cache_hits_reduce_prefill_nodes(day_plan):
    no_hits = plan(traffic_from_dict({**DAY, "cache_hit_tokens": 0.0}))
    assert no_hits.totals["average_prefill_nodes"] > day_plan.totals["average_prefill_nodes"]
    assert no_hits.totals["average_decode_nodes"] == day_plan.totals["average_decode_nodes"]
    assert no_hits.average_nodes > day_plan.average_nodes


def test_diurnal_frees_offpeak_hours(day_plan):
    assert day_plan.totals["offpeak_gpu_hours_freed"] == 0  # flat day: always at peak
    r = plan(traffic_from_dict({**DAY, "diurnal": DIURNAL}))
    tot = r.totals
    assert tot["peak_nodes"] > day_plan.totals["peak_nodes"]
    assert tot["offpeak_gpu_hours_freed"] == pytest.approx((tot["peak_nodes"] * 24 - tot["node_hours"]) * 8)
    assert tot["offpeak_gpu_hours_freed"] > 0


def test_units_for_rounds_up():
    assert units_for([0.0, 0.1, 4.0, 4.0000001, 35.9], 4.0).tolist() == [0, 1, 1, 2, 9]


def test_unreachable_slo_is_one_line():
    t = traffic_from_dict({**DAY, "slo": {"min_tokens_per_s_per_user": 5000}})
    _one_line_error(lambda: plan(t), "slo.min_tokens_per_s_per_user", "allowed <=")


def test_bad_deployment_is_one_line():
    t = traffic_from_dict({**DAY, "decode": {"ep": 100}})  # 256 + 32 slots not divisible by 100
    _one_line_error(lambda: plan(t), "decode", "ep")


def test_kv_transfer_over_nic_capacity_warns():
    # nearly all input hits the cache: little prefill compute, but every prompt's KV still moves
    t = traffic_from_dict({"input_tokens": 3e15, "cache_hit_tokens": 3e15 - 1e9, "output_tokens": 1e9})
    r = plan(t)
    assert r.totals["peak_nic_utilisation"] > 1
    assert any("NIC" in w for w in r.warnings)


def test_decode_capacity_direct_api():
    dc = decode_capacity("deepseek-v3", "h800", context=4989, min_tokens_per_s_per_user=20)
    lax = decode_capacity("deepseek-v3", "h800", context=4989, min_tokens_per_s_per_user=10)
    assert lax.batch >= dc.batch  # a looser SLO never forces a smaller batch


def test_day_economics_without_prices_has_no_revenue():
    t = traffic_from_dict({k: v for k, v in DAY.items() if k != "prices"})
    e = day_economics(t, 100.0, gpus_per_node=8, usd_per_gpu_hour=2.0)
    assert e["revenue_usd_per_day"] is None and e["margin"] is None
    assert e["cost_usd_per_day"] == pytest.approx(100 * 8 * 24 * 2.0)


# --------------------------------------------------------------------------- CLI
def test_cli_plan_json_and_flag_overrides(tmp_path):
    out = tmp_path / "plan.csv"
    p = run_cli(
        "plan",
        "--traffic",
        ROOT / "examples" / "traffic_deepseek_day.yaml",
        "--output-tokens",
        "84e9",
        "--json",
        "--out",
        out,
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["traffic"]["output_tokens"] == 84e9
    for k in (
        "average_nodes",
        "peak_nodes",
        "cost_usd_per_day",
        "usd_per_million_output_tokens",
        "revenue_usd_per_day",
        "margin",
        "decode_tokens_per_s_per_node",
        "prefill_tokens_per_s_per_node",
        "decode_batch",
        "hourly",
    ):
        assert k in d
    assert out.read_text().splitlines()[0].startswith("hour,")


def test_cli_plan_errors_are_one_line(tmp_path):
    bad = _yaml(tmp_path, "input_tokens: 1e9\noutput_tokens: 1e9\nfoo: 2\n", "bad.yaml")
    p = run_cli("plan", "--traffic", bad)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "bad.yaml" in p.stderr and "foo" in p.stderr


def test_cli_plan_flags_only_and_plot(tmp_path):
    png = tmp_path / "plan.png"
    p = run_cli(
        "plan",
        "--input-tokens",
        "608e9",
        "--cache-hit-tokens",
        "342e9",
        "--output-tokens",
        "168e9",
        "--prefill-ep",
        "32",
        "--decode-ep",
        "144",
        "--usd-per-gpu-hour",
        "2",
        "--price-input-hit",
        "0.14",
        "--price-input-miss",
        "0.55",
        "--price-output",
        "2.19",
        "--plot",
        png,
    )
    assert p.returncode == 0, p.stderr
    assert "requests per DP group" in p.stdout and "margin" in p.stdout
    assert png.exists() and png.stat().st_size > 1000


# ---- prefill: cached heads of prompts and TTFT queueing
def test_cached_share_costs_attention_not_compute_of_hits():

    rates = [
        prefill_capacity(
            "deepseek-v3", "h800", PrefillPool(), prompt_length=4989, cached_share=c
        ).full_load_tokens_per_s_per_node
        for c in (0.0, 0.3, 0.6, 0.9)
    ]
    assert all(a > b for a, b in zip(rates, rates[1:]))  # the computed tail attends to a longer head
    # derivation: average keys per computed token = P (1 + c) / 2, the causal prefill of P (1 + c)
    a = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt_length=4000, cached_share=0.5)
    b = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt_length=6000, cached_share=0.0)
    assert a.full_load_tokens_per_s_per_node == pytest.approx(b.full_load_tokens_per_s_per_node, rel=1e-12)
    _one_line_error(
        lambda: prefill_capacity("deepseek-v3", "h800", PrefillPool(), cached_share=1.0), "cached_share", "< 1"
    )


def test_ttft_target_plans_queueing_headroom():

    free = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt_length=4989)
    assert free.utilisation == 1.0 and free.limited_by == "batch_tokens"
    prev = free.tokens_per_s_per_node
    for ttft in (20.0, 5.0, 2.0, 1.5):  # the H200-derived h800 profile needs >= 1.04 s of prefill per prompt
        p = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt_length=4989, max_ttft_s=ttft)
        assert 0 < p.utilisation < 1 and p.limited_by == "ttft"
        assert p.ttft_s == pytest.approx(ttft, rel=1e-9)  # M/G/1 (here M/D/1) mean TTFT sits on the target
        assert p.tokens_per_s_per_node == pytest.approx(p.utilisation * p.full_load_tokens_per_s_per_node)
        assert p.tokens_per_s_per_node <= prev * (1 + 1e-12)  # a tighter target never plans more per node
        prev = p.tokens_per_s_per_node
        # Pollaczek-Khinchine by hand at the chosen batch: W = rho D / (2 (1 - rho)), D = k S
        d = p.step_time_s * math.ceil(4989 / p.batch_tokens)
        assert d + p.utilisation * d / (2 * (1 - p.utilisation)) == pytest.approx(ttft, rel=1e-9)


def test_plan_with_ttft_needs_more_prefill_nodes(day_plan):
    r = plan(traffic_from_dict({**DAY, "slo": {"min_tokens_per_s_per_user": 20, "max_ttft_s": 1.0}}))
    assert r.totals["average_prefill_nodes"] >= day_plan.totals["average_prefill_nodes"]
    assert r.totals["average_decode_nodes"] == day_plan.totals["average_decode_nodes"]
    j = r.to_dict()["prefill"]
    assert 0 < j["utilisation"] < 1 and j["ttft_kind"].startswith("mean")
    assert day_plan.to_dict()["prefill"]["utilisation"] == 1.0


# ---- prompt / output length distributions
def test_length_forms_parse_and_round_trip():
    t = traffic_from_dict(
        {
            **DAY,
            "prompt_length": {"mean": 3000, "dist": "lognormal:1.5"},
            "output_length": {"mean": 1000, "dist": "exp"},
        }
    )
    assert t.prompt.cv == pytest.approx(1.5) and t.prompt.moment_ratio() == pytest.approx(3000 * (1 + 1.5**2))
    lengths, w = t.prompt.discrete()
    assert (w * lengths).sum() == pytest.approx(3000) and w.sum() == pytest.approx(1)
    # context derived: E[P] + (E[O^2]/E[O] - 1) / 2 = 3000 + (2000 - 1) / 2
    assert t.context == pytest.approx(3000 + 1999 / 2)
    assert t.with_(hours=24).prompt == t.prompt  # to_dict -> traffic_from_dict keeps the shape
    b = traffic_from_dict({**DAY, "prompt_length": {"bins": [[1000, 3], [20000, 1]]}})
    assert b.prompt_length == pytest.approx(5750) and b.prompt.moment_ratio() == pytest.approx(
        (0.75 * 1000**2 + 0.25 * 20000**2) / 5750
    )
    assert b.with_(hours=24).prompt_bins == b.prompt_bins
    assert traffic_from_dict({**DAY, "context": 4000}).prompt_length == 4000  # default prompt = context


@pytest.mark.parametrize(
    "value,words",
    [
        ({"mean": 3000, "dist": "gamma"}, ("prompt_length.dist", "lognormal")),
        ({"bins": []}, ("prompt_length.bins", "non-empty")),
        ({"bins": [[1000]]}, ("prompt_length.bins[0]", "pair")),
        ({"bins": [[1000, 0]]}, ("prompt_length.bins", "not all 0")),
        ({"bins": [[0, 1]]}, ("prompt_length.bins[0][0]", ">= 1")),
        ({"bins": [[100, 1]], "mean": 5}, ("prompt_length", "not both")),
        ({"mean": -3}, ("prompt_length.mean", ">= 1")),
        ({"median": 3}, ("prompt_length.median", "unknown key")),
    ],
)
def test_bad_length_specs_are_one_line(value, words):
    _one_line_error(lambda: traffic_from_dict({**DAY, "prompt_length": value}), *words)


def test_prompt_mix_costs_attention_by_its_token_weighted_length():

    mix = LengthDist(5750.0, "bins", ((1000.0, 0.75), (20000.0, 0.25)))
    a = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt=mix, cached_share=0.3)
    b = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt_length=mix.moment_ratio(), cached_share=0.3)
    assert a.full_load_tokens_per_s_per_node == pytest.approx(b.full_load_tokens_per_s_per_node, rel=1e-12)
    fixed = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt_length=5750.0, cached_share=0.3)
    assert a.full_load_tokens_per_s_per_node < fixed.full_load_tokens_per_s_per_node


def test_spread_prompts_need_more_ttft_headroom():

    kw = dict(prompt_length=4989.0, max_ttft_s=3.0)
    fixed = prefill_capacity("deepseek-v3", "h800", PrefillPool(), **kw)
    spread = prefill_capacity("deepseek-v3", "h800", PrefillPool(), prompt=LengthDist(4989.0, "exp"), **kw)
    assert spread.ttft_s == pytest.approx(3.0, rel=1e-9)
    assert spread.tokens_per_s_per_node < fixed.tokens_per_s_per_node


def test_cli_length_flags(tmp_path):
    r = run_cli(
        "plan",
        "--input-tokens",
        "608e9",
        "--cache-hit-tokens",
        "342e9",
        "--output-tokens",
        "168e9",
        "--prompt-length",
        "3000",
        "--prompt-dist",
        "exp",
        "--output-length",
        "1000",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["traffic"]["prompt_length"] == {"mean": 3000.0, "dist": "exp"}
    assert d["traffic"]["context"] == pytest.approx(3000 + 999 / 2)
    assert d["prefill"]["attention_context"] == pytest.approx(2 * 3000 * (1 + 342 / 608))
    r = run_cli("plan", "--input-tokens", "1e9", "--output-tokens", "1e8", "--output-dist", "exp")
    assert r.returncode == 2 and "--output-length" in r.stderr and "\n" not in r.stderr.strip()


def test_prompt_mix_beyond_max_context_is_one_line():
    t = traffic_from_dict({**DAY, "prompt_length": {"mean": 5000, "dist": "lognormal:100"}})
    _one_line_error(lambda: plan(t), "prompt_length", "max_context", "narrower")
    r = run_cli("plan", "--input-tokens", "1e9", "--output-tokens", "1e8", "--prompt-dist", "exp", "--json")
    assert r.returncode == 0, r.stderr  # the shape goes on the default mean (= context)
    assert json.loads(r.stdout)["traffic"]["prompt_length"] == {"mean": 4989.0, "dist": "exp"}
