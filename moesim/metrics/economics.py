"""Serving economics: GPU rental cost, list-price revenue, margin, $ per million tokens.

Units: US dollars, tokens, hours for rental time. All functions broadcast over numpy arrays
and return floats for scalar inputs.

Source of the method: DeepSeek "V3/R1 inference system overview" (seed 003 / 002 section 4):
cost = average nodes x 8 H800 x $2/GPU-hour x 24 h; revenue = every token priced at R1's list
price (input cache hit / cache miss / output per million); "cost profit margin" =
revenue / cost - 1.
"""

from __future__ import annotations

import numpy as np

from moesim.errors import ConfigError
from moesim.specs.traffic import Traffic

__all__ = [
    "daily_cost_usd",
    "revenue_usd",
    "margin",
    "usd_per_million_output_tokens",
    "usd_per_million_tokens",
    "economics_report",
    "day_economics",
]

_PRICE_KEYS = ("input_hit", "input_miss", "output")


def _out(x):
    x = np.asarray(x, dtype=np.float64)
    return x if x.ndim else float(x)


def _nonneg(name: str, v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ConfigError(f"{name}: must be finite and >= 0 (got {v!r})")
    return a


def _positive(name: str, v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ConfigError(f"{name}: must be finite and > 0 (got {v!r})")
    return a


def daily_cost_usd(nodes, gpus_per_node, usd_per_gpu_hour, hours=24.0):
    """Rental cost in $ = nodes x GPUs/node x $/GPU-hour x hours (seed 003: 226.75 nodes x
    8 x $2 x 24 h = $87,072). ``nodes`` may be a time average (fractional)."""
    n = _nonneg("nodes", nodes)
    g = _positive("gpus_per_node", gpus_per_node)
    p = _nonneg("usd_per_gpu_hour", usd_per_gpu_hour)
    h = _nonneg("hours", hours)
    return _out(n * g * p * h)


def _prices(usd_per_million: dict):
    if not isinstance(usd_per_million, dict):
        raise ConfigError("usd_per_million: must be a mapping with keys input_hit, input_miss, output")
    unknown = set(usd_per_million) - set(_PRICE_KEYS)
    missing = [k for k in _PRICE_KEYS if k not in usd_per_million]
    if unknown or missing:
        raise ConfigError(
            f"usd_per_million: keys must be exactly {', '.join(_PRICE_KEYS)} "
            f"(missing {missing or 'none'}, unknown {sorted(unknown) or 'none'})"
        )
    return tuple(_nonneg(f"usd_per_million.{k}", usd_per_million[k]) for k in _PRICE_KEYS)


def revenue_usd(input_tokens, cache_hit_tokens, output_tokens, usd_per_million: dict):
    """List-price revenue in $: hit tokens x input_hit + (input - hit) x input_miss + output x
    output, prices in $ per million tokens (seed 003 priced everything at R1's list price:
    $0.14 / $0.55 / $2.19). ``input_tokens`` includes the cache hits."""
    tin = _nonneg("input_tokens", input_tokens)
    hit = _nonneg("cache_hit_tokens", cache_hit_tokens)
    tout = _nonneg("output_tokens", output_tokens)
    if np.any(hit > tin):
        raise ConfigError("cache_hit_tokens: must be <= input_tokens (hits are part of the input)")
    p_hit, p_miss, p_out = _prices(usd_per_million)
    return _out((hit * p_hit + (tin - hit) * p_miss + tout * p_out) / 1e6)


def margin(revenue, cost):
    """Cost profit margin = revenue / cost - 1 (seed 003: 545%)."""
    r = _nonneg("revenue", revenue)
    c = _positive("cost", cost)
    return _out(r / c - 1.0)


def usd_per_million_tokens(cost, tokens):
    """$ per million tokens when ``tokens`` carry the whole ``cost``: cost / tokens x 1e6."""
    c = _nonneg("cost", cost)
    t = _positive("tokens", tokens)
    return _out(c / t * 1e6)


def usd_per_million_output_tokens(cost, output_tokens):
    """$ per million output tokens, whole cost charged to output (seed 003: $0.52/M)."""
    return usd_per_million_tokens(cost, output_tokens)


def economics_report(
    nodes,
    gpus_per_node,
    usd_per_gpu_hour,
    input_tokens,
    cache_hit_tokens,
    output_tokens,
    usd_per_million: dict,
    hours=24.0,
) -> dict:
    """One day's serving economics. Token counts are per day; the cluster runs ``hours``.

    Allocation rule for $ per million tokens: *whole-cost per class* — each token class is
    charged the full day's cost (cost / tokens of that class), as in DeepSeek's $0.52 per
    million output tokens. The per-class figures therefore do not add up; they answer
    "what would one million tokens of this class cost if they carried the whole bill".
    ``usd_per_million_tokens`` charges the cost to all tokens (input + output) together.

    Keys: cost_usd_per_day, revenue_usd_per_day, margin, usd_per_million_output_tokens,
    usd_per_million_input_tokens, usd_per_million_tokens, revenue_usd_by_class
    ({input_hit, input_miss, output}), gpu_hours.
    """
    cost = daily_cost_usd(nodes, gpus_per_node, usd_per_gpu_hour, hours)
    rev = revenue_usd(input_tokens, cache_hit_tokens, output_tokens, usd_per_million)
    tin = np.asarray(input_tokens, dtype=np.float64)
    hit = np.asarray(cache_hit_tokens, dtype=np.float64)
    p_hit, p_miss, p_out = _prices(usd_per_million)
    return {
        "cost_usd_per_day": cost,
        "revenue_usd_per_day": rev,
        "margin": margin(rev, cost),
        "usd_per_million_output_tokens": usd_per_million_output_tokens(cost, output_tokens),
        "usd_per_million_input_tokens": usd_per_million_tokens(cost, input_tokens),
        "usd_per_million_tokens": usd_per_million_tokens(cost, tin + np.asarray(output_tokens, float)),
        "revenue_usd_by_class": {
            "input_hit": _out(hit * p_hit / 1e6),
            "input_miss": _out((tin - hit) * p_miss / 1e6),
            "output": _out(np.asarray(output_tokens, float) * p_out / 1e6),
        },
        "gpu_hours": _out(_nonneg("nodes", nodes) * np.asarray(gpus_per_node, float) * np.asarray(hours, float)),
    }


def day_economics(
    traffic: Traffic,
    average_nodes: float,
    *,
    gpus_per_node: int,
    usd_per_gpu_hour: float,
    prefill_nodes: float | None = None,
    decode_nodes: float | None = None,
) -> dict:
    """Per-day economics of a traffic window at ``average_nodes`` (time-average over the window;
    the capacity planner's). Token volumes are scaled to a day when the window is not 24 h.

    Keys: cost_usd_per_day, revenue_usd_per_day / margin (None without list prices),
    usd_per_million_output_tokens (whole cost on output, DeepSeek's method),
    usd_per_million_input_tokens, usd_per_million_tokens, revenue_usd_by_class, gpu_hours_per_day,
    and, when the pool split is given, usd_per_million_by_pool {input_hit (0: no compute),
    input_miss (prefill pool), output (decode pool)}."""
    tin, hit, tout = (
        traffic.per_day(x) for x in (traffic.input_tokens, traffic.cache_hit_tokens, traffic.output_tokens)
    )
    cost = daily_cost_usd(average_nodes, gpus_per_node, usd_per_gpu_hour, 24.0)
    out = {
        "cost_usd_per_day": cost,
        "revenue_usd_per_day": None,
        "margin": None,
        "usd_per_million_output_tokens": usd_per_million_output_tokens(cost, tout) if tout > 0 else None,
        "usd_per_million_input_tokens": usd_per_million_tokens(cost, tin) if tin > 0 else None,
        "usd_per_million_tokens": usd_per_million_tokens(cost, tin + tout),
        "revenue_usd_by_class": None,
        "gpu_hours_per_day": float(average_nodes) * gpus_per_node * 24.0,
        "usd_per_gpu_hour": float(usd_per_gpu_hour),
    }
    if traffic.usd_per_million is not None:
        prices = traffic.usd_per_million.as_dict()
        if cost > 0:
            rep = economics_report(average_nodes, gpus_per_node, usd_per_gpu_hour, tin, hit, tout, prices, hours=24.0)
            out["margin"] = rep["margin"]
            out["revenue_usd_by_class"] = rep["revenue_usd_by_class"]
        out["revenue_usd_per_day"] = revenue_usd(tin, hit, tout, prices)
    if prefill_nodes is not None and decode_nodes is not None:
        pc = daily_cost_usd(prefill_nodes, gpus_per_node, usd_per_gpu_hour, 24.0)
        dc = daily_cost_usd(decode_nodes, gpus_per_node, usd_per_gpu_hour, 24.0)
        out["cost_usd_per_day_by_pool"] = {"prefill": pc, "decode": dc}
        out["usd_per_million_by_pool"] = {
            "input_hit": 0.0,
            "input_miss": usd_per_million_tokens(pc, tin - hit) if tin - hit > 0 else None,
            "output": usd_per_million_tokens(dc, tout) if tout > 0 else None,
        }
    return out
