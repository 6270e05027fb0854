"""`plan` with one aggregated pool (issue 15): the aggregated-serving model prices the pool."""

import numpy as np
import pytest

from moesim.analyses.plan import plan
from moesim.engine.estimate import estimate
from moesim.errors import ConfigError
from moesim.specs.traffic import traffic_from_dict

BASE = dict(input_tokens_per_s=100_000, output_tokens_per_s=25_000, prompt_length=2000, output_length=500,
            slo={"min_tokens_per_s_per_user": 20}, aggregated={"tp": 8, "ep": 8, "dp": 1, "mtp": 0, "max_batch": 40})  # fmt: skip


def _plan(**over):
    return plan(traffic_from_dict({**BASE, **over}), "deepseek-v3", "h200")


def test_aggregated_pool_is_priced_by_the_serving_model():
    """The planned operating point is `estimate --phase mixed` at the chosen concurrency, and the
    nodes cover the output rate at its output tokens/s per node (whole 1-node units)."""
    r = _plan()
    a = r.aggregated
    e = estimate("deepseek-v3", "h200", phase="mixed", tp=8, ep=8, batch=a.batch, isl=2000, osl=500,
                 context=r.traffic.context, overlap="auto", redundant_experts=32)  # fmt: skip
    for k in ("tokens_per_s_per_node", "ttft_s", "ttft_p90_s", "tpot_s"):
        assert getattr(a, k) == pytest.approx(e[k], rel=1e-9), k
    need = 25_000 / a.tokens_per_s_per_node
    assert r.totals["average_nodes"] == np.ceil(need - 1e-9) and r.totals["average_nodes_fractional"] == pytest.approx(
        need
    )
    assert a.tokens_per_s_per_user >= 20 and a.scheduler == "prefill-priority-chunked"
    # Little's law at the planned point: requests/s x (TTFT + OSL x TPOT) = concurrency (DP 1)
    assert a.requests_per_s_per_unit * (a.ttft_s + a.osl * a.tpot_s) == pytest.approx(a.batch, rel=1e-6)
    d = r.to_dict()
    assert (
        d["aggregated"]["batch"] == a.batch and "prefill" not in d and d["hourly"][0]["nodes"] == r.totals["peak_nodes"]
    )


@pytest.mark.slow  # four plans (~4 s on a loaded 2-core machine)
def test_slos_bind_and_never_lower_the_nodes():
    """A stricter tokens/s-per-user or TTFT target never needs fewer nodes; the binding SLO is named."""
    loose, strict = _plan(), _plan(slo={"min_tokens_per_s_per_user": 40})
    assert strict.aggregated.batch < loose.aggregated.batch and strict.aggregated.limited_by == "slo"
    assert strict.totals["average_nodes"] >= loose.totals["average_nodes"]
    t = loose.aggregated.ttft_s * 0.999
    tight = _plan(slo={"min_tokens_per_s_per_user": 20, "max_ttft_s": t})
    assert tight.aggregated.ttft_s <= t and tight.aggregated.batch < loose.aggregated.batch
    assert tight.totals["average_nodes"] >= loose.totals["average_nodes"]
    with pytest.raises(ConfigError, match="aggregated"):
        _plan(slo={"min_tokens_per_s_per_user": 5000})


def test_cache_hits_shorten_the_computed_prompt_and_yaml_checks():
    r = _plan(cache_hit_tokens_per_s=50_000)
    assert r.aggregated.isl == pytest.approx(1000.0)
    assert traffic_from_dict(BASE).aggregated.overlap == "auto"  # five-stage is decode-only
    with pytest.raises(ConfigError, match="aggregated.bogus"):
        traffic_from_dict({**BASE, "aggregated": {"tp": 8, "ep": 8, "bogus": 1}})


def test_cli_plan_with_an_aggregated_pool(tmp_path):
    """`moesim plan --traffic` with an aggregated: section prints the one pool and its JSON."""
    import json

    import yaml

    from tests.conftest import run_cli

    f = tmp_path / "agg.yaml"
    f.write_text(yaml.safe_dump({**BASE, "aggregated": {**BASE["aggregated"], "max_batch": 16}}))
    text = run_cli("plan", "--traffic", f, "--hardware", "h200")
    assert text.returncode == 0, text.stderr
    assert "aggregated" in text.stdout and "p90" in text.stdout and "decode  " not in text.stdout
    js = run_cli("plan", "--traffic", f, "--hardware", "h200", "--json")
    d = json.loads(js.stdout)
    assert d["aggregated"]["batch"] <= 16 and d["peak_nodes"] >= 1
    bad = run_cli("plan", "--traffic", f, "--hardware", "h200", "--plot", tmp_path / "p.png")
    assert bad.returncode != 0 and "--plot" in bad.stdout + bad.stderr
