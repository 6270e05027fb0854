"""Pieces shared by the case runners of `moesim validate`: the case record (`Check`), YAML
number reading, `same_as` config derivation, the estimate call and the comparison of a prediction
with a published figure (relative tolerance, a condition, a range or equality)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from moesim.engine.estimate import estimate
from moesim.engine.pricing import evaluate_grid, resolve_specs
from moesim.engine.settings import Pricing
from moesim.errors import SpecError
from moesim.grid.core import Grid
from moesim.grid.layout import resolve_parallel

ESTIMATE_KEYS = {
    "model",
    "hardware",
    "phase",
    "tp",
    "dp",
    "ep",
    "moe_tp",
    "batch",
    "context",
    "mtp",
    "acceptance",
    "redundant_experts",
    "overlap",
    "cost_mode",
    "engine",
    "comm",
    "set",
    "expert_skew",
    "context_dist",
    "isl",  # phase mixed (aggregated serving): prompt and output tokens per request
    "osl",
    "chunk_tokens",
    "request_rate",
}


@dataclass
class Check:
    case: str
    cls: str
    metric: str
    predicted: object
    expected: object
    rel_error: float  # NaN for non-numeric checks
    tolerance: str
    passed: bool
    note: str = ""


def num(x):
    """PyYAML reads 31.0e9 as a string (YAML 1.1); accept it as a number."""
    if isinstance(x, bool):
        return x
    if isinstance(x, (int, float)):
        try:
            return float(x)
        except OverflowError:  # an integer past float64 (1e309 written out): not a number we can check
            return str(x)
    if isinstance(x, str):
        try:
            return float(x.replace("_", ""))
        except ValueError:
            return x
    return x


def case_config(case, by_id):
    cfg = dict(case.get("config") or {})
    if "same_as" in cfg:
        base = case_config(by_id[cfg.pop("same_as")], by_id)
        extra = cfg.pop("set", {}) or {}
        base_set = list(base.pop("set", []) or [])
        base.update(cfg)
        base["set"] = base_set + [f"{k}={v}" for k, v in extra.items()]
        return base
    if isinstance(cfg.get("set"), dict):
        cfg["set"] = [f"{k}={v}" for k, v in cfg["set"].items()]
    return cfg


def run_estimate(cfg, **over):
    kw = {
        k: num(v)
        if k
        not in (
            "model",
            "hardware",
            "phase",
            "overlap",
            "cost_mode",
            "engine",
            "comm",
            "expert_skew",
            "context_dist",
            "set",
        )
        else v
        for k, v in cfg.items()
        if k in ESTIMATE_KEYS
    }
    kw.update(over)
    for k in ("tp", "dp", "ep", "moe_tp", "mtp", "redundant_experts"):
        if k in kw and kw[k] is not None:
            kw[k] = int(kw[k])
    model = kw.pop("model", "deepseek-v3")
    hardware = kw.pop("hardware", "h800")
    return estimate(model, hardware, **kw)


def condition(pred, spec):
    """'> 100', '< 1.0', 'between 3 and 8' -> bool."""
    s = str(spec).strip()
    m = re.fullmatch(r"between\s+([-\d.e+]+)\s+and\s+([-\d.e+]+)", s)
    if m:
        return float(m.group(1)) <= pred <= float(m.group(2))
    m = re.fullmatch(r"([<>]=?)\s*([-\d.e+]+)", s)
    if m:
        v = float(m.group(2))
        return {"<": pred < v, "<=": pred <= v, ">": pred > v, ">=": pred >= v}[m.group(1)]
    raise SpecError(f"validate: cannot read condition {spec!r}; allowed: '> x', '< x', 'between a and b'")


def compare(case_id, cls, metric, pred, expected, tol, note=""):
    expected = num(expected)
    if isinstance(expected, str) and not isinstance(pred, str):
        ok = condition(float(pred), expected)
        return Check(case_id, cls, metric, float(pred), expected, math.nan, expected, ok, note)
    if isinstance(expected, (list, tuple)) and len(expected) == 2:
        lo, hi = map(float, expected)
        return Check(
            case_id, cls, metric, float(pred), f"[{lo:g}, {hi:g}]", math.nan, "range", lo <= float(pred) <= hi, note
        )
    if isinstance(expected, (bool, str)):
        return Check(case_id, cls, metric, pred, expected, math.nan, "equal", pred == expected, note)
    err = float(pred) / float(expected) - 1.0
    return Check(case_id, cls, metric, float(pred), float(expected), err, f"±{tol:.0%}", abs(err) <= tol, note)


def result_value(r, key):
    if key in r.memory:
        return r.memory[key]
    if key in ("kv_bytes_per_token",):
        return r.model.kv_bytes_per_token
    v = r.values[key]
    v = np.asarray(v).reshape(-1)[0]
    return v.item() if isinstance(v, np.generic) else v


def largest_batch_at_slo(cfg, min_tps):
    """Largest decode batch (requests per DP group) that fits and keeps >= min tokens/s per user."""
    m, h = resolve_specs(cfg.get("model", "deepseek-v3"), cfg.get("hardware", "h800"), cfg.get("set"))
    tp, dp, ep, moe_tp = resolve_parallel(m, cfg.get("tp"), cfg.get("dp"), cfg.get("ep"), cfg.get("moe_tp"))
    batches = np.arange(1, 1025, dtype=float)
    g = Grid.product(
        tp=tp,
        dp=dp,
        ep=ep,
        moe_tp=moe_tp,
        batch=batches,
        context=num(cfg["context"]),
        mtp=cfg.get("mtp", 0),
        acceptance=cfg.get("acceptance", 0.8),
        redundant=cfg.get("redundant_experts", 0),
    )
    ev, _ = evaluate_grid(
        m,
        h,
        g,
        phase=cfg.get("phase", "decode"),
        overlap=cfg.get("overlap"),
        pricing=Pricing.of(cost_mode=cfg.get("cost_mode", "calibrated"), comm=cfg.get("comm")),
    )
    ok = ev.values["fits"] & (ev.values["tokens_per_s_per_user"] >= min_tps)
    if not ok.any():
        return None, None
    i = int(np.flatnonzero(ok)[-1])
    return batches[i], {k: np.asarray(v)[i] for k, v in ev.values.items()}
