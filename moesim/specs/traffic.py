"""Traffic spec for the capacity planner: a day (or any whole number of hours) of token volumes,
its hourly shape, the request shape, the SLOs, prices and the two deployment pools.

Loaded strictly from YAML (``load_traffic``: unknown keys are rejected with file and field in the
message) or built from keyword arguments / CLI flags (``traffic_from_dict``, ``Traffic.build``).
Everything is validated on construction; bad input raises ``ConfigError`` with one line naming
the field and what is allowed.

Units: tokens, seconds, hours (the window and the diurnal bins), US dollars. Token volumes are
totals over the window of ``hours``; the ``*_per_s`` form gives average rates instead.

YAML layout (every key optional except the token volumes)::

    input_tokens: 608.0e9          # over the window, cache hits included
    cache_hit_tokens: 342.0e9      # part of input_tokens; skip prefill compute
    output_tokens: 168.0e9
    hours: 24
    diurnal: [w0, ..., w23]        # hourly weights (24, or one per hour of the window); normalised
    context: 4989                  # mean KV length per output token (decode); default: derived from
                                   # prompt_length and output_length when both are given, else 4989
    prompt_length: 4989            # prompt tokens per request (prefill); default = context; or
                                   # {mean: 4989, dist: fixed | exp | lognormal:<cv>}, or
                                   # {bins: [[tokens, share of requests], ...]}
    output_length: {mean: 1200, dist: exp}   # optional, same forms
    slo: {min_tokens_per_s_per_user: 20, max_ttft_s: null}
    prices: {usd_per_gpu_hour: 2.0, usd_per_million: {input_hit: 0.14, input_miss: 0.55, output: 2.19}}
    prefill: {ep: 32, dp: 32, tp: 1, batch_tokens: 16384, redundant_experts: 32, overlap: two-batch}
    decode: {ep: 144, dp: 144, tp: 1, mtp: 1, acceptance: 0.8, max_batch: 512, redundant_experts: 32,
             overlap: five-stage}
    aggregated: {tp: 8, ep: 8, dp: 1, mtp: 0, max_batch: 256}   # optional: ONE aggregated pool
                                   # (prefill and decode on the same GPUs, the engine's scheduler;
                                   # max_batch = most concurrent requests per DP group swept)
                                   # instead of the prefill and decode pools
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import yaml

from moesim.errors import ConfigError, check_number
from moesim.specs.distributions import LengthDist, length_dist, section
from moesim.specs.pools import (
    OVERLAPS_DECODE,
    OVERLAPS_PREFILL,
    PRICE_KEYS,
    DecodePool,
    PrefillPool,
    Prices,
    pool_from_dict,
)

__all__ = [
    "Traffic",
    "LengthDist",
    "PrefillPool",
    "DecodePool",
    "Prices",
    "load_traffic",
    "read_traffic_yaml",
    "traffic_from_dict",
    "merge",
    "TOKEN_KEYS",
]

TOKEN_KEYS = ("input_tokens", "cache_hit_tokens", "output_tokens")
RATE_KEYS = tuple(k + "_per_s" for k in TOKEN_KEYS)
MAX_HOURS = 24 * 366


# --------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class Traffic:
    """One window of traffic (validated; build with ``traffic_from_dict`` or ``load_traffic``).

    input_tokens / cache_hit_tokens / output_tokens: totals over ``hours`` (hits are part of the
    input). diurnal: one normalised weight per hour of the window (sums to 1). context: mean KV
    length per output token (decode); prompt_length: mean prompt tokens per request (prefill), of
    the distribution ``prompt`` (LengthDist); output: output tokens per request, if given."""

    input_tokens: float
    cache_hit_tokens: float
    output_tokens: float
    hours: int = 24
    diurnal: tuple[float, ...] = ()
    context: float = 4989.0
    prompt_length: float = 4989.0
    prompt_dist: str = "fixed"
    prompt_bins: tuple[tuple[float, float], ...] = ()
    output: LengthDist | None = None
    min_tokens_per_s_per_user: float = 20.0
    max_ttft_s: float | None = None
    usd_per_gpu_hour: float | None = None  # None: the hardware spec's price
    usd_per_million: Prices | None = None  # None: no revenue / margin
    prefill: PrefillPool = field(default_factory=PrefillPool)
    decode: DecodePool = field(default_factory=DecodePool)
    aggregated: DecodePool | None = None  # one aggregated pool (prefill + decode) instead of the two
    name: str = ""
    source: str = ""

    def __post_init__(self):
        # direct construction (not through traffic_from_dict): the invariants the planner relies on
        for k in TOKEN_KEYS:
            check_number(k, getattr(self, k), lo=0, hi=1e18)
        if self.cache_hit_tokens > self.input_tokens:
            raise ConfigError("cache_hit_tokens: exceeds input_tokens; allowed 0 <= cache hits <= input")
        hours = check_number("hours", self.hours, lo=1, hi=MAX_HOURS, integer=True)
        object.__setattr__(self, "hours", hours)
        object.__setattr__(self, "diurnal", _diurnal("", list(self.diurnal) or None, hours))
        for k in ("context", "prompt_length"):
            check_number(k, getattr(self, k), lo=1, hi=1e8)
        length_dist(
            "",
            "prompt_length",
            {"bins": [list(b) for b in self.prompt_bins]}
            if self.prompt_bins
            else {"mean": self.prompt_length, "dist": self.prompt_dist},
        )

    @property
    def prompt(self) -> LengthDist:
        """The prompt-length distribution (mean prompt_length)."""
        return LengthDist(self.prompt_length, self.prompt_dist, tuple(self.prompt_bins))

    # ---- derived views
    @property
    def miss_tokens(self) -> float:
        """Input tokens that need prefill compute (cache misses)."""
        return self.input_tokens - self.cache_hit_tokens

    @property
    def weights(self) -> np.ndarray:
        """Share of the window's tokens in each hour (sums to 1)."""
        return np.asarray(self.diurnal, float)

    def hourly_rate(self, total: float) -> np.ndarray:
        """Tokens/s in each hour for a window total."""
        return total * self.weights / 3600.0

    def per_day(self, total: float) -> float:
        return total * 24.0 / self.hours

    def with_(self, **kw) -> Traffic:
        """A modified copy, validated again."""
        return traffic_from_dict({**self.to_dict(), **kw})

    def to_dict(self) -> dict:
        d = {
            k: getattr(self, k)
            for k in ("input_tokens", "cache_hit_tokens", "output_tokens", "hours", "context", "name", "source")
        }
        d["prompt_length"] = self.prompt.as_yaml()
        if self.output is not None:
            d["output_length"] = self.output.as_yaml()
        d["diurnal"] = list(self.diurnal)
        d["slo"] = {"min_tokens_per_s_per_user": self.min_tokens_per_s_per_user, "max_ttft_s": self.max_ttft_s}
        d["prices"] = {
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "usd_per_million": self.usd_per_million.as_dict() if self.usd_per_million else None,
        }
        d["prefill"] = {f.name: getattr(self.prefill, f.name) for f in fields(PrefillPool)}
        d["decode"] = {f.name: getattr(self.decode, f.name) for f in fields(DecodePool)}
        if self.aggregated is not None:
            d["aggregated"] = {f.name: getattr(self.aggregated, f.name) for f in fields(DecodePool)}
        return d

    @classmethod
    def build(cls, **kw) -> Traffic:
        """Keyword form of ``traffic_from_dict`` (same keys as the YAML)."""
        return traffic_from_dict(kw)


TOP_KEYS = (
    TOKEN_KEYS
    + RATE_KEYS
    + (
        "hours",
        "diurnal",
        "context",
        "prompt_length",
        "output_length",
        "slo",
        "prices",
        "prefill",
        "decode",
        "aggregated",
        "name",
        "source",
        "description",
    )
)
SLO_KEYS = ("min_tokens_per_s_per_user", "max_ttft_s")
PRICES_KEYS = ("usd_per_gpu_hour", "usd_per_million")


def traffic_from_dict(d: dict, *, file: str | None = None) -> Traffic:
    """Validate a mapping (YAML layout, see the module doc) -> Traffic. Unknown keys are rejected."""
    where = f"{file}: " if file else ""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}traffic: must be a mapping of keys ({', '.join(TOP_KEYS[:3])}, ...)")
    unknown = sorted(set(d) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}: unknown key; allowed {', '.join(TOP_KEYS)}")
    hours = check_number("hours", d.get("hours", 24), lo=1, hi=MAX_HOURS, integer=True, where=where)
    vol = _volumes(where, d, hours)
    diurnal = _diurnal(where, d.get("diurnal"), hours)
    context, prompt, output = _lengths(where, d)
    min_tps, ttft = _slo(where, d.get("slo"))
    gpu_price, prices = _prices(where, d.get("prices"))
    prefill = pool_from_dict(PrefillPool, where, "prefill", d.get("prefill"), OVERLAPS_PREFILL)
    decode = pool_from_dict(DecodePool, where, "decode", d.get("decode"), OVERLAPS_DECODE)
    agg = d.get("aggregated")
    if isinstance(agg, dict):  # the decode default (five-stage) is decode-only: the engine's choice here
        agg = {"overlap": "auto", **agg}
    agg = None if agg is None else pool_from_dict(DecodePool, where, "aggregated", agg, OVERLAPS_DECODE)
    for k in ("name", "source", "description"):
        if d.get(k) is not None and not isinstance(d.get(k), str):
            raise ConfigError(f"{where}{k}: must be a string")
    return Traffic(
        input_tokens=vol["input_tokens"],
        cache_hit_tokens=vol["cache_hit_tokens"],
        output_tokens=vol["output_tokens"],
        hours=hours,
        diurnal=diurnal,
        context=context,
        prompt_length=prompt.mean,
        prompt_dist=prompt.dist,
        prompt_bins=prompt.bins,
        output=output,
        min_tokens_per_s_per_user=min_tps,
        max_ttft_s=ttft,
        usd_per_gpu_hour=gpu_price,
        usd_per_million=prices,
        prefill=prefill,
        decode=decode,
        aggregated=agg,
        name=d.get("name") or "",
        source=d.get("source") or "",
    )


def _volumes(where, d, hours) -> dict:
    """Token totals over the window, from totals or from rates (tokens/s x hours x 3600)."""
    totals_given = [k for k in TOKEN_KEYS if d.get(k) is not None]
    rates_given = [k for k in RATE_KEYS if d.get(k) is not None]
    if totals_given and rates_given:
        raise ConfigError(
            f"{where}{rates_given[0]}: give token volumes either as totals ({', '.join(TOKEN_KEYS)}) "
            f"or as rates ({', '.join(RATE_KEYS)}), not both"
        )
    vol = {}
    if rates_given:
        for k, kr in zip(TOKEN_KEYS, RATE_KEYS):
            r = check_number(kr, d.get(kr, 0.0 if k == "cache_hit_tokens" else None), lo=0, hi=1e15, where=where)
            vol[k] = r * hours * 3600.0
    else:
        for k in TOKEN_KEYS:
            vol[k] = check_number(k, d.get(k, 0.0 if k == "cache_hit_tokens" else None), lo=0, hi=1e18, where=where)
    if vol["cache_hit_tokens"] > vol["input_tokens"]:
        key = "cache_hit_tokens" + ("_per_s" if rates_given else "")
        raise ConfigError(
            f"{where}{key}: {vol['cache_hit_tokens']:g} exceeds input_tokens {vol['input_tokens']:g}; "
            f"allowed 0 <= cache hits <= input (hits are part of the input)"
        )
    if vol["input_tokens"] + vol["output_tokens"] <= 0:
        raise ConfigError(f"{where}output_tokens: input and output are both 0; allowed: some traffic (> 0)")
    return vol


def _lengths(where, d):
    """-> (context, prompt LengthDist, output LengthDist or None)."""
    output = length_dist(where, "output_length", d.get("output_length"))
    prompt_in = d.get("prompt_length")
    if d.get("context") is None and output is not None and prompt_in is not None:
        # mean KV per output token, prompt and output independent: the i-th output token sees
        # P + i - 1 keys, averaged over the output tokens: E[P] + (E[O^2] / E[O] - 1) / 2
        pm = length_dist(where, "prompt_length", prompt_in).mean
        context = pm + max(output.moment_ratio() - 1.0, 0.0) / 2.0
    else:
        context = check_number("context", d.get("context", 4989), lo=1, hi=1e8, where=where)
    prompt = length_dist(where, "prompt_length", prompt_in, default_mean=context)
    return context, prompt, output


def _slo(where, d):
    """-> (min tokens/s per user, max mean TTFT in s or None)."""
    slo = section(where, "slo", d, SLO_KEYS)
    min_tps = check_number(
        "slo.min_tokens_per_s_per_user", slo.get("min_tokens_per_s_per_user", 20.0), lo=0, hi=1e6, where=where
    )
    ttft = check_number(
        "slo.max_ttft_s", slo.get("max_ttft_s"), lo=0, hi=1e6, lo_open=True, allow_none=True, where=where
    )
    return min_tps, ttft


def _prices(where, d):
    """-> ($ per GPU-hour or None, Prices or None)."""
    pr = section(where, "prices", d, PRICES_KEYS)
    gpu_price = check_number(
        "prices.usd_per_gpu_hour", pr.get("usd_per_gpu_hour"), lo=0, hi=1e4, allow_none=True, where=where
    )
    upm = pr.get("usd_per_million")
    if upm is None:
        return gpu_price, None
    upm = section(where, "prices.usd_per_million", upm, PRICE_KEYS)
    missing = [k for k in PRICE_KEYS if upm.get(k) is None]
    if missing:
        raise ConfigError(
            f"{where}prices.usd_per_million.{missing[0]}: required; give all of "
            f"{', '.join(PRICE_KEYS)} ($ per million tokens)"
        )
    prices = Prices(
        *(check_number(f"prices.usd_per_million.{k}", upm[k], lo=0, hi=1e6, where=where) for k in PRICE_KEYS)
    )
    return gpu_price, prices


def _diurnal(where, w, hours: int) -> tuple[float, ...]:
    """Hourly weights -> tuple of length ``hours`` summing to 1. Accepts one weight per hour of the
    window, or 24 (a daily profile, repeated over the window)."""
    if w is None:
        return tuple(np.full(hours, 1.0 / hours))
    if isinstance(w, (str, bytes, dict)) or not hasattr(w, "__len__"):
        raise ConfigError(f"{where}diurnal: must be a list of 24 (or hours = {hours}) non-negative weights")
    vals = [check_number(f"diurnal[{i}]", x, lo=0, hi=1e18, where=where) for i, x in enumerate(w)]
    if len(vals) not in (24, hours):
        raise ConfigError(f"{where}diurnal: {len(vals)} weights; allowed 24 (daily profile) or hours = {hours}")
    a = np.asarray(vals, float)
    if len(vals) != hours:
        a = np.resize(a, hours)  # repeat the daily profile over the window
    s = a.sum()
    if not s > 0:
        raise ConfigError(f"{where}diurnal: all weights are 0 over the window; allowed non-negative weights, not all 0")
    return tuple(float(x) for x in a / s)


def read_traffic_yaml(path) -> dict:
    """The raw mapping of a traffic YAML file (yaml.safe_load), not yet validated."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read traffic file ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: cannot read traffic file (not UTF-8 text); allowed: a YAML mapping") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise ConfigError(f"{p.name}: not valid YAML" + (f" (line {line + 1})" if line is not None else "")) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p.name}: must be a mapping of traffic keys (input_tokens, output_tokens, ...)")
    return data


def load_traffic(path, overrides: dict | None = None) -> Traffic:
    """Read a traffic YAML file strictly (yaml.safe_load; unknown keys rejected with file and field).
    ``overrides`` (same layout; nested sections merge key by key) win over the file."""
    data = read_traffic_yaml(path)
    if overrides:
        data = merge(data, overrides)
    return traffic_from_dict(data, file=Path(path).name)


def merge(base: dict, over: dict) -> dict:
    """Overlay ``over`` on ``base``; nested mappings merge, None values in ``over`` are ignored."""
    out = dict(base)
    for k, v in over.items():
        if v is None:
            continue
        if isinstance(v, dict):
            sub = merge(out[k] if isinstance(out.get(k), dict) else {}, v)
            if sub or isinstance(out.get(k), dict):
                out[k] = sub
        else:
            out[k] = v
    return out
