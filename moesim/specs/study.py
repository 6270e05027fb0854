"""The study / axis grammar of a sweep (a spec-layer grammar: no engine imports).

A study YAML (`load_study`) or keyword arguments name numeric axes (tp, dp, ep, moe_tp, batch,
context, mtp, acceptance, redundant), categorical axes (hardware, phase, overlap, comm) and metric
filters. Axis values are a list, a scalar or a string: "1,2,4", "1:256" (doubling from a up to b),
"0:1:0.25" (linear a..b step s), or a mix "1,3,8:64" (`parse_values`). Units: SI (tokens, seconds).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

from moesim import units as U
from moesim.errors import ConfigError
from moesim.specs.yamlio import load_yaml

# The numeric axes, in the order of moesim.grid.core.AXES (a test keeps them equal; specs sit
# below grid, so the tuple is spelled out here).
NUMERIC_AXES = ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "acceptance", "redundant")
CATEGORICAL_AXES = ("hardware", "phase", "overlap", "comm")
AXIS_ALIASES = {"redundant_experts": "redundant", "moe-tp": "moe_tp"}
FILTER_KEYS = ("min_tokens_per_s_per_user", "max_tpot_s", "max_ttft_s", "only_fits")
STUDY_KEYS = (
    "name",
    "description",
    "model",
    "hardware",
    "phase",
    "axes",
    "filters",
    "cost_mode",
    "engine",
    "expert_skew",
    "context_dist",
    "set",
    "isl",
    "osl",
)
# The deployment axes a sweep searches when not given: the DeepSeek-V3 decode space of seeds 002-004.
# The workload axes (context, acceptance) are not searched unless given: they take the phase's one
# value (context 4096 tokens, or isl + osl/2 in mixed; acceptance 0.8), since a ranking or frontier
# across contexts would compare different workloads, not deployments.
DEFAULT_AXES = {
    "tp": [1, 2, 4, 8],
    "ep": [8, 16, 32, 64, 128, 144, 256],
    "batch": [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256],
    "mtp": [0, 1],
    "redundant": [0, 32],
}
DEFAULT_PREFILL_BATCH = [1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0]  # tokens per DP group


# ---------------------------------------------------------------------------------------- parsing
def parse_values(name: str, value) -> list:
    """Axis values from a list, a scalar or a string: "1,2,4", "1:256" (doubling from a up to b),
    "0:1:0.25" (linear a..b step s), or a mix "1,3,8:64". Numeric axes -> floats. A value given
    twice is kept once (first-seen order): a sweep never evaluates one configuration twice."""
    name = AXIS_ALIASES.get(name, name)
    if name not in NUMERIC_AXES and name not in CATEGORICAL_AXES:
        raise ConfigError(f"axes: unknown axis {name!r}; allowed: {', '.join(NUMERIC_AXES + CATEGORICAL_AXES)}")
    items = value if isinstance(value, (list, tuple, np.ndarray)) else [value]
    out = []
    for it in items:
        if isinstance(it, str):  # "1,2,4"; ';' separates too (spreadsheet locales); a BOM is not a value
            parts = [p.strip() for p in re.split(r"[,;]", it.replace("\ufeff", "")) if p.strip()]
        else:
            parts = [it]
        for p in parts:
            if name in CATEGORICAL_AXES:
                out.append(None if p is None else str(p))
            elif isinstance(p, str) and ":" in p:
                out.extend(_parse_range(name, p))
            else:
                out.append(_num(name, p))
    if not out:
        raise ConfigError(f"{name}: give at least one value")
    if name in AXIS_RANGES:
        for x in out:
            _check_value(name, x)
    return list(dict.fromkeys(out))  # duplicates (YAML aliases, "8,8,8") once, first-seen order


# Absolute range of each numeric axis value (model-independent); combinations (divisibility,
# the model's max_context, MTP support) are checked per row by `check_grid`.
AXIS_RANGES = {
    "tp": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "dp": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "ep": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "moe_tp": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "batch": (0, 1e9, False, "a number in (0, 1e9]"),
    "context": (0, 1e8, False, "tokens in (0, 1e8] (and at most the model's max_context)"),
    "mtp": (0, 16, True, "an integer in [0, 16]"),
    "acceptance": (0, 1, False, "a number in [0, 1]"),
    "redundant": (0, 1e6, True, "an integer in [0, 1,000,000]"),
}


def _check_value(name, x: float) -> float:
    lo, hi, integer, allowed = AXIS_RANGES[name]
    bad = not np.isfinite(x) or x > hi or (x <= lo if name in ("batch", "context") else x < lo)
    if bad or (integer and x != np.round(x)):
        shown = f"{x:g}" if np.isfinite(x) else "a non-finite value (NaN, or beyond the float range)"
        raise ConfigError(f"{name}: {shown} is out of range; allowed {allowed}")
    return x


def _num(name, p) -> float:
    if isinstance(p, bool):
        raise ConfigError(f"{name}: {p!r} is not a number")
    try:
        return float(p)  # also YAML's "31.0e9" strings
    except (TypeError, ValueError, OverflowError):
        pass
    shown = repr(p) if len(repr(p)) <= 40 else repr(p)[:37] + "..."
    if isinstance(p, str) and re.fullmatch(r"[+-]?0[xX][0-9a-fA-F]+", p):  # YAML reads a bare 0x10; a text one is not
        raise ConfigError(f"{name}: {shown} is hexadecimal in a text value; write {int(p, 16)}") from None
    raise ConfigError(f"{name}: {shown} is not a number; use a list, a:b (powers of two) or a:b:step") from None


def _parse_range(name, text) -> list:
    bits = text.split(":")
    if len(bits) not in (2, 3):
        raise ConfigError(f"{name}: range {text!r} must be a:b (doubling) or a:b:step")
    a, b = _num(name, bits[0]), _num(name, bits[1])
    if not (np.isfinite(a) and np.isfinite(b)) or b < a:
        raise ConfigError(f"{name}: range {text!r} needs finite a <= b")
    if len(bits) == 2:
        if a <= 0:
            raise ConfigError(f"{name}: doubling range {text!r} needs a > 0")
        n = int(np.floor(np.log2(b / a) + 1e-9))
        return [a * 2.0**i for i in range(n + 1)]
    s = _num(name, bits[2])
    if not s > 0:
        raise ConfigError(f"{name}: range step in {text!r} must be > 0")
    n = int(np.floor((b - a) / s + 1e-9))
    if n > 1_000_000:
        raise ConfigError(f"{name}: range {text!r} has more than 1,000,000 values")
    return list(a + s * np.arange(n + 1))


def normalize_axes(axes) -> dict:
    """{axis: list of values}, aliases resolved, unknown axes rejected."""
    out = {}
    for k, v in (axes or {}).items():
        key = AXIS_ALIASES.get(str(k), str(k))
        if key in out:
            raise ConfigError(f"axes: {k!r} given twice")
        out[key] = parse_values(key, v)
    return out


def load_study(path) -> dict:
    """A study YAML -> keyword arguments of `sweep`. Strict: unknown keys are an error."""
    p = Path(path)
    try:
        data = load_yaml(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"study: cannot read {str(path)!r} ({e.__class__.__name__})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"study: cannot read {str(path)!r} (not UTF-8 text); allowed: a YAML mapping") from None
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise ConfigError(
            f"study: {p.name} is not valid YAML" + (f" (line {line + 1})" if line is not None else "")
        ) from None
    except RecursionError:
        raise ConfigError(
            f"study: {p.name} is nested too deeply to read; allowed: a YAML mapping of study keys"
        ) from None
    except ValueError as e:  # an integer literal beyond Python's 4300-digit limit
        raise ConfigError(
            f"study: {p.name}: unreadable value ({str(e).split(';')[0]}); allowed: numbers of normal size"
        ) from None
    if data is None:
        raise ConfigError(f"study: {p.name} is empty (no YAML mapping); allowed keys: {', '.join(STUDY_KEYS)}")
    if not isinstance(data, dict):
        raise ConfigError(f"study: {p.name} must be a mapping with keys {', '.join(STUDY_KEYS)}")
    for k in data:
        if k not in STUDY_KEYS:
            raise ConfigError(f"study: unknown key {k!r} in {p.name}; allowed: {', '.join(STUDY_KEYS)}")
    axes = data.get("axes") or {}
    if not isinstance(axes, dict):
        raise ConfigError(f"study: axes in {p.name} must be a mapping of axis -> list of values")
    filters = data.get("filters") or {}
    if not isinstance(filters, dict):
        raise ConfigError(f"study: filters in {p.name} must be a mapping; allowed keys: {', '.join(FILTER_KEYS)}")
    for k in filters:
        if k not in FILTER_KEYS:
            raise ConfigError(f"study: unknown filter {k!r} in {p.name}; allowed: {', '.join(FILTER_KEYS)}")
    kw = {
        k: data[k]
        for k in ("model", "hardware", "phase", "cost_mode", "engine", "expert_skew", "context_dist", "isl", "osl")
        if data.get(k) is not None
    }
    if data.get("set") is not None:
        s = data["set"]
        if isinstance(s, dict):
            kw["set"] = [f"{k}={v}" for k, v in s.items()]
        elif isinstance(s, list) and all(isinstance(x, str) for x in s):
            kw["set"] = list(s)
        else:
            raise ConfigError(
                f"study: set in {p.name} must be a mapping (hardware.rdma_bw_GBps: 100) or a list of "
                f"'key=value' strings; got {s!r}"
            )
    kw["axes"] = normalize_axes(axes)
    kw["filters"] = dict(filters)
    return kw


def filter_value(name, v) -> float:
    """A metric filter: a finite number > 0 (tokens/s or seconds)."""
    try:
        x = float(v) if not isinstance(v, bool) else float("nan")
    except (TypeError, ValueError, OverflowError):
        x = float("nan")
    if not (np.isfinite(x) and x > 0):
        unit = "tokens/s" if name.startswith("min_tokens") else "seconds"
        raise ConfigError(f"{name}: {v!r}; allowed a finite number > 0 ({unit})")
    return x


def check_isl_osl(isl, osl):
    for name, v in (("isl", isl), ("osl", osl)):
        try:
            ok = v is not None and not isinstance(v, bool) and np.isfinite(float(v)) and float(v) > 0
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise ConfigError(f"{name}: phase mixed needs a positive {name} (tokens); got {v!r}")


def resolve_filters(base: dict, filters: dict | None, explicit: dict) -> dict:
    """Metric filters: the study's, then `filters`, then explicit keyword values (not None) win;
    unknown keys rejected, the metric thresholds read as finite numbers > 0."""
    flt = dict(base)
    for k, v in (filters or {}).items():
        if k not in FILTER_KEYS:
            raise ConfigError(f"filters: unknown filter {k!r}; allowed: {', '.join(FILTER_KEYS)}")
        flt[k] = v
    for k, v in explicit.items():
        if v is not None:
            flt[k] = v
    for k, what, bare in (("max_tpot_s", "TPOT", U.TPOT_MAX_BARE_S), ("max_ttft_s", "TTFT", U.TTFT_MAX_BARE_S)):
        if isinstance(flt.get(k), str):  # a study YAML may write the unit: max_tpot_s: 50ms
            flt[k] = U.parse_time_s(flt[k], flag=f"filters.{k}", what=what, max_bare_s=bare)
    for k in ("min_tokens_per_s_per_user", "max_tpot_s", "max_ttft_s"):
        if flt.get(k) is not None:
            flt[k] = filter_value(k, flt[k])
    return flt
