"""seed003 acceptance cases through the planner (predictions, never fitted).

Only traffic, prices and deployment come from the seed; throughputs are the model's own. A case
the model misses honestly is marked xfail with the number it predicted when the case was added.
"""

import pytest

from moesim.analyses.capacity import decode_capacity, prefill_capacity
from moesim.analyses.plan import plan
from moesim.metrics.economics import day_economics
from moesim.specs.pools import DecodePool, PrefillPool
from moesim.specs.traffic import traffic_from_dict

pytestmark = pytest.mark.validation


def _f(x):
    return float(x)  # PyYAML reads 608.0e9 as a string


def test_economics(seed_cases):
    c = seed_cases["seed003-economics"]
    i, tol = c["inputs"], c["tolerance"]
    t = traffic_from_dict(
        {
            "input_tokens": _f(i["input_tokens"]),
            "cache_hit_tokens": _f(i["cache_hit_tokens"]),
            "output_tokens": _f(i["output_tokens"]),
            "prices": {"usd_per_gpu_hour": i["usd_per_gpu_hour"], "usd_per_million": i["usd_per_million"]},
        }
    )
    e = day_economics(
        t, _f(i["average_nodes"]), gpus_per_node=i["gpus_per_node"], usd_per_gpu_hour=_f(i["usd_per_gpu_hour"])
    )
    for k, v in c["expect"].items():
        assert e[k] == pytest.approx(_f(v), rel=tol), k


# passes since the shipped profiles are derived from H200's measured kernel tables (issue 14): 192 average
# nodes vs 226.75 (-15.3%; whole 18-node decode instances, so it moves in steps); with the README-fitted
# H800 profile it was 148 (-34.7%)
def test_capacity(seed_cases):
    c = seed_cases["seed003-capacity"]
    i = c["inputs"]
    t = traffic_from_dict(
        {
            "input_tokens": _f(i["input_tokens"]),
            "cache_hit_tokens": _f(i["cache_hit_tokens"]),
            "output_tokens": _f(i["output_tokens"]),
            "hours": i["hours"],
            "context": i["context"],
            "prefill": i["prefill"],
            "decode": i["decode"],
            "slo": {"min_tokens_per_s_per_user": 20},
        }
    )
    r = plan(t, "deepseek-v3", "h800", "calibrated")
    assert r.average_nodes == pytest.approx(_f(c["expect"]["average_nodes"]), rel=c["tolerance"])


@pytest.mark.xfail(
    strict=True,
    reason="predicted 18410 output tokens/s per node vs 14800 (+24.4%, tolerance 20%): the H200-derived "
    "kernels priced without a second launch gap per kernel (their fitted alpha holds it) and the input "
    "quant inside the FP8 GEMMs (the engine tables time the linear op); "
    "seed003's figure is a day average of a production cluster (5-stage pipeline, EPLB, real routing)",
)
def test_decode_node_throughput(seed_cases):
    c = seed_cases["seed003-decode-node-throughput"]
    k = c["config"]
    pool = DecodePool(
        ep=k["ep"],
        dp=k["dp"],
        tp=k["tp"],
        mtp=k["mtp"],
        acceptance=k["acceptance"],
        redundant_experts=k["redundant_experts"],
        overlap=k["overlap"],
    )
    dc = decode_capacity(
        k["model"],
        k["hardware"],
        pool,
        context=k["context"],
        min_tokens_per_s_per_user=k["min_tokens_per_s_per_user"],
        cost_mode=k["cost_mode"],
    )
    assert dc.tokens_per_s_per_user >= k["min_tokens_per_s_per_user"]
    assert dc.tokens_per_s_per_node == pytest.approx(_f(c["expect"]["tokens_per_s_per_node"]), rel=c["tolerance"])


@pytest.mark.xfail(
    strict=True,
    reason="predicted 86330 computed tokens/s per node (16384 tokens/DP group, "
    "prompt 4989, no cache hits in this case) vs 32200 (a day average over an "
    "unpublished prompt-length mix)",
)
def test_prefill_node_throughput(seed_cases):
    c = seed_cases["seed003-prefill-node-throughput"]
    k = c["config"]
    pool = PrefillPool(
        ep=k["ep"],
        dp=k["dp"],
        tp=k["tp"],
        batch_tokens=k["batch"],
        redundant_experts=k["redundant_experts"],
        overlap=k["overlap"],
        comm=k["comm"],
    )
    pc = prefill_capacity(k["model"], k["hardware"], pool, prompt_length=k["context"], cost_mode=k["cost_mode"])
    assert pc.batch_tokens == k["batch"]  # no TTFT limit: the given batch
    assert pc.tokens_per_s_per_node == pytest.approx(_f(c["expect"]["tokens_per_s_per_node"]), rel=c["tolerance"])
