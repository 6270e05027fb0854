"""Serving economics against DeepSeek's published day (reference case seed003-economics)."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from moesim.errors import ConfigError
from moesim.metrics.economics import (
    daily_cost_usd,
    economics_report,
    margin,
    revenue_usd,
    usd_per_million_output_tokens,
    usd_per_million_tokens,
)

PRICES = {"input_hit": 0.14, "input_miss": 0.55, "output": 2.19}
CASES = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "seed_cases.yaml"


def _seed003():
    """The seed003-economics case, read from ../shared/reference (only its own block is
    parsed, so an unrelated YAML problem elsewhere in the file does not hide it)."""
    if CASES.is_file():
        text = CASES.read_text()
        start = text.find("- id: seed003-economics")
        if start >= 0:
            start = text.rfind("\n", 0, start) + 1  # keep the item's indentation
            end = text.find("\n  - id:", start + 1)
            block = text[start : end if end > 0 else len(text)]
            return yaml.safe_load(block)[0]
    return {  # the case as published in seed 003 (fallback when ../shared is absent)
        "inputs": {
            "average_nodes": 226.75,
            "gpus_per_node": 8,
            "usd_per_gpu_hour": 2.0,
            "input_tokens": 608.0e9,
            "cache_hit_tokens": 342.0e9,
            "output_tokens": 168.0e9,
            "usd_per_million": PRICES,
        },
        "expect": {
            "cost_usd_per_day": 87072,
            "revenue_usd_per_day": 562027,
            "margin": 5.45,
            "usd_per_million_output_tokens": 0.52,
        },
        "tolerance": 0.01,
    }


def test_seed003_economics():
    case = _seed003()
    # PyYAML (YAML 1.1) reads "608.0e9" as a string: cast every scalar input to float
    i = {
        k: ({kk: float(vv) for kk, vv in v.items()} if isinstance(v, dict) else float(v))
        for k, v in case["inputs"].items()
    }
    rep = economics_report(
        i["average_nodes"],
        i["gpus_per_node"],
        i["usd_per_gpu_hour"],
        i["input_tokens"],
        i["cache_hit_tokens"],
        i["output_tokens"],
        i["usd_per_million"],
    )
    for key, want in case["expect"].items():
        assert rep[key] == pytest.approx(want, rel=case["tolerance"]), key


def test_by_hand():
    assert daily_cost_usd(226.75, 8, 2.0) == pytest.approx(87072.0)
    assert daily_cost_usd(1, 8, 2.0, hours=1) == 16.0
    rev = revenue_usd(608e9, 342e9, 168e9, PRICES)
    assert rev == pytest.approx(342e3 * 0.14 + 266e3 * 0.55 + 168e3 * 2.19)
    assert margin(200.0, 100.0) == pytest.approx(1.0)
    assert usd_per_million_output_tokens(87072.0, 168e9) == pytest.approx(0.5183, abs=1e-4)
    assert usd_per_million_tokens(1.0, 1e6) == 1.0


def test_report_rule_and_keys():
    rep = economics_report(10, 8, 2.0, 2e9, 1e9, 1e9, PRICES)
    cost = 10 * 8 * 2.0 * 24
    assert rep["usd_per_million_input_tokens"] == pytest.approx(cost / 2e3)  # whole cost / input
    assert rep["usd_per_million_output_tokens"] == pytest.approx(cost / 1e3)
    assert rep["usd_per_million_tokens"] == pytest.approx(cost / 3e3)
    assert sum(rep["revenue_usd_by_class"].values()) == pytest.approx(rep["revenue_usd_per_day"])
    assert rep["gpu_hours"] == pytest.approx(10 * 8 * 24)


def test_vectorised():
    nodes = np.array([100.0, 200.0, 400.0])
    c = daily_cost_usd(nodes, 8, 2.0)
    np.testing.assert_allclose(c, nodes * 384.0)
    np.testing.assert_allclose(margin(1000.0, c), 1000.0 / c - 1)


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: daily_cost_usd(-1, 8, 2.0), "nodes"),
        (lambda: daily_cost_usd(1, 0, 2.0), "gpus_per_node"),
        (lambda: revenue_usd(1e9, 2e9, 1e9, PRICES), "cache_hit_tokens"),
        (lambda: revenue_usd(1e9, 0, 1e9, {"input": 1.0}), "usd_per_million"),
        (lambda: margin(1.0, 0.0), "cost"),
        (lambda: usd_per_million_output_tokens(1.0, 0.0), "tokens"),
    ],
)
def test_errors(call, field):
    with pytest.raises(ConfigError, match=field) as ei:
        call()
    assert "\n" not in str(ei.value)
