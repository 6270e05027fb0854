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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from moesim.errors import ConfigError

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
PRICE_KEYS = ("input_hit", "input_miss", "output")


# --------------------------------------------------------------------------- value checks
def _num(where: str, name: str, v, *, lo=None, hi=None, lo_open=False, integer=False, allow_none=False):
    """-> float (or int). One-line ConfigError naming the field and the allowed range."""
    if v is None:
        if allow_none:
            return None
        raise ConfigError(f"{where}{name}: required (a number)")
    if isinstance(v, bool):
        raise ConfigError(f"{where}{name}: {v!r} is not a number")
    if isinstance(v, str):  # PyYAML reads 608.0e9 as a string
        try:
            v = float(v.replace("_", ""))
        except ValueError:
            raise ConfigError(f"{where}{name}: {v!r} is not a number") from None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}{name}: {v!r} is not a number") from None
    rng = _range_text(lo, hi, lo_open, integer)
    if not math.isfinite(x):
        raise ConfigError(f"{where}{name}: must be finite; allowed {rng}")
    if integer and x != round(x):
        raise ConfigError(f"{where}{name}: {x:g} is not an integer; allowed {rng}")
    if lo is not None and (x < lo or (lo_open and x == lo)):
        raise ConfigError(f"{where}{name}: {x:g} is out of range; allowed {rng}")
    if hi is not None and x > hi:
        raise ConfigError(f"{where}{name}: {x:g} is out of range; allowed {rng}")
    return int(round(x)) if integer else x


def _range_text(lo, hi, lo_open, integer):
    kind = "an integer" if integer else "a number"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        parts.append(f"<= {hi:g}")
    return f"{kind} {' and '.join(parts)}".strip()


def _choice(where, name, v, allowed, allow_none=True):
    if v is None and allow_none:
        return None
    if not isinstance(v, str) or v not in allowed:
        raise ConfigError(f"{where}{name}: {v!r}; allowed {', '.join(allowed)}")
    return v


OVERLAPS_DECODE = ("serial", "shared", "sbo", "two-batch", "five-stage", "ideal", "auto")
OVERLAPS_PREFILL = ("serial", "shared", "sbo", "two-batch", "ideal", "auto")
COMMS = ("deepep-ll", "deepep-normal", "nccl", "pplx")


# --------------------------------------------------------------------------- parts
@dataclass(frozen=True)
class Prices:
    """List prices in $ per million tokens."""

    input_hit: float
    input_miss: float
    output: float

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in PRICE_KEYS}


@dataclass(frozen=True)
class PrefillPool:
    """Prefill deployment unit: attention DP x TP GPUs = EP ranks (moe_tp 1).
    batch_tokens: prompt tokens per DP group per step (the largest the planner may use)."""

    ep: int = 32
    dp: int = 32
    tp: int = 1
    batch_tokens: float = 16384.0
    redundant_experts: int = 32
    overlap: str = "two-batch"
    comm: str | None = None  # engine default for prefill: deepep-normal

    @property
    def gpus(self) -> int:
        return self.tp * self.dp


@dataclass(frozen=True)
class DecodePool:
    """Decode deployment unit: attention DP x TP GPUs = EP ranks (moe_tp 1).
    max_batch: largest requests per DP group the planner sweeps (1..max_batch)."""

    ep: int = 144
    dp: int = 144
    tp: int = 1
    mtp: int = 1
    acceptance: float = 0.8
    max_batch: int = 512
    redundant_experts: int = 32
    overlap: str = "five-stage"
    comm: str | None = None  # engine default for decode: deepep-ll

    @property
    def gpus(self) -> int:
        return self.tp * self.dp


def _pool(cls, where: str, section: str, d, overlaps) -> object:
    if d is None:
        return cls()
    if not isinstance(d, dict):
        raise ConfigError(f"{where}{section}: must be a mapping with keys {', '.join(f.name for f in fields(cls))}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ConfigError(f"{where}{section}.{unknown[0]}: unknown key; allowed {', '.join(known)}")
    p = f"{section}."
    tp = _num(where, p + "tp", d.get("tp", 1), lo=1, hi=1024, integer=True)
    ep = d.get("ep")
    dp = d.get("dp")
    if ep is None and dp is None:
        ep = cls().ep
    if ep is not None:
        ep = _num(where, p + "ep", ep, lo=1, hi=1_000_000, integer=True)
    if dp is not None:
        dp = _num(where, p + "dp", dp, lo=1, hi=1_000_000, integer=True)
    if dp is None:  # every GPU holds attention and experts: tp x dp = ep (moe_tp 1)
        if ep % tp:
            raise ConfigError(f"{where}{p}dp: ep = {ep} is not divisible by tp = {tp}; give dp explicitly")
        dp = ep // tp
    if ep is None:
        ep = tp * dp
    if ep != tp * dp:
        raise ConfigError(f"{where}{p}ep: {ep} must equal tp x dp = {tp * dp} (every GPU holds attention and experts)")
    kw = {
        "ep": ep,
        "dp": dp,
        "tp": tp,
        "redundant_experts": _num(
            where, p + "redundant_experts", d.get("redundant_experts", 32), lo=0, hi=100_000, integer=True
        ),
        "overlap": _choice(where, p + "overlap", d.get("overlap", cls().overlap), overlaps, False),
        "comm": _choice(where, p + "comm", d.get("comm"), COMMS),
    }
    if cls is PrefillPool:
        kw["batch_tokens"] = _num(where, p + "batch_tokens", d.get("batch_tokens", 16384), lo=1, hi=1e9)
    else:
        kw["mtp"] = _num(where, p + "mtp", d.get("mtp", 1), lo=0, hi=16, integer=True)
        kw["acceptance"] = _num(where, p + "acceptance", d.get("acceptance", 0.8), lo=0, hi=1)
        kw["max_batch"] = _num(where, p + "max_batch", d.get("max_batch", 512), lo=1, hi=100_000, integer=True)
    return cls(**kw)


# --------------------------------------------------------------------------- length distributions
LENGTH_BINS_DISCRETE = 64  # equiprobable bins for exp / lognormal (TTFT moments)


@dataclass(frozen=True)
class LengthDist:
    """Tokens per request (prompt or output): ``mean`` and a shape, ``dist`` = fixed | exp |
    lognormal:<cv> (the ``--context-dist`` grammar), or ``bins`` = ((tokens, share of requests), ...)."""

    mean: float
    dist: str = "fixed"
    bins: tuple[tuple[float, float], ...] = ()

    @property
    def cv(self) -> float:
        if self.bins:
            lengths, w = self.discrete()
            return float(np.sqrt(max((w * lengths**2).sum() / self.mean**2 - 1.0, 0.0)))
        from moesim.balance.imbalance import context_dist

        return context_dist(self.dist)

    def moment_ratio(self) -> float:
        """E[L^2] / E[L] = mean (1 + cv^2): the token-weighted mean length (exact for any shape)."""
        return self.mean * (1.0 + self.cv**2)

    def discrete(self, k: int = LENGTH_BINS_DISCRETE):
        """(lengths, request weights): the bins, one point (fixed), or k equiprobable quantile bins
        (exp: -mean ln(1 - u); lognormal: exp(mu + sigma z_u), sigma^2 = ln(1 + cv^2)), rescaled so
        the mean is exact."""
        if self.bins:
            a = np.asarray(self.bins, float)
            return a[:, 0], a[:, 1] / a[:, 1].sum()
        cv = self.cv
        if cv == 0:
            return np.array([self.mean]), np.array([1.0])
        u = (np.arange(k) + 0.5) / k
        if str(self.dist).strip().lower() in ("exp", "exponential"):
            x = -np.log1p(-u)
        else:
            from scipy.special import ndtri  # lazy: only plans with a lognormal length pay the import

            sig = np.sqrt(np.log1p(cv * cv))
            x = np.exp(sig * ndtri(u) - 0.5 * sig * sig)
        x = x / x.mean()
        return np.maximum(self.mean * x, 1.0), np.full(k, 1.0 / k)

    def describe(self) -> str:
        if self.bins:
            return f"{len(self.bins)} bins, mean {self.mean:,.0f}, cv {self.cv:.2f}"
        return f"mean {self.mean:,.0f}" + ("" if self.dist == "fixed" else f", {self.dist}")

    def as_yaml(self):
        if self.bins:
            return {"bins": [list(b) for b in self.bins]}
        return self.mean if self.dist == "fixed" else {"mean": self.mean, "dist": self.dist}


def _length(where, name, v, default_mean=None) -> LengthDist | None:
    """YAML value -> LengthDist: a number (mean, fixed), {mean, dist} or {bins: [[tokens, share], ...]}."""
    if v is None:
        return None if default_mean is None else LengthDist(float(default_mean))
    if isinstance(v, LengthDist):
        return v
    if not isinstance(v, dict):
        return LengthDist(_num(where, name, v, lo=1, hi=1e8))
    d = _section(where, name, v, ("mean", "dist", "bins"))
    if d.get("bins") is not None:
        if d.get("mean") is not None or d.get("dist") is not None:
            raise ConfigError(f"{where}{name}: give either bins or mean (+ dist), not both")
        b = d["bins"]
        if isinstance(b, (str, bytes, dict)) or not hasattr(b, "__len__") or not len(b):
            raise ConfigError(f"{where}{name}.bins: must be a non-empty list of [tokens, share of requests] pairs")
        rows = []
        for i, row in enumerate(b):
            if isinstance(row, (str, bytes, dict)) or not hasattr(row, "__len__") or len(row) != 2:
                raise ConfigError(f"{where}{name}.bins[{i}]: must be a [tokens, share of requests] pair")
            rows.append(
                (
                    _num(where, f"{name}.bins[{i}][0]", row[0], lo=1, hi=1e8),
                    _num(where, f"{name}.bins[{i}][1]", row[1], lo=0, hi=1e18),
                )
            )
        tot = sum(w for _, w in rows)
        if not tot > 0:
            raise ConfigError(f"{where}{name}.bins: all shares are 0; allowed non-negative shares, not all 0")
        rows = tuple((x, w / tot) for x, w in rows)
        return LengthDist(sum(x * w for x, w in rows), "bins", rows)
    mean = _num(where, f"{name}.mean", d.get("mean", default_mean), lo=1, hi=1e8)
    dist = str(d.get("dist") or "fixed").strip().lower()
    from moesim.balance.imbalance import context_dist

    try:
        context_dist(dist)
    except ConfigError:
        raise ConfigError(f"{where}{name}.dist: {dist!r}; allowed fixed, exp, lognormal:<cv>") from None
    return LengthDist(mean, dist)


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
    name: str = ""
    source: str = ""

    def __post_init__(self):
        # direct construction (not through traffic_from_dict): the invariants the planner relies on
        for k in TOKEN_KEYS:
            _num("", k, getattr(self, k), lo=0, hi=1e18)
        if self.cache_hit_tokens > self.input_tokens:
            raise ConfigError("cache_hit_tokens: exceeds input_tokens; allowed 0 <= cache hits <= input")
        hours = _num("", "hours", self.hours, lo=1, hi=MAX_HOURS, integer=True)
        object.__setattr__(self, "hours", hours)
        object.__setattr__(self, "diurnal", _diurnal("", list(self.diurnal) or None, hours))
        for k in ("context", "prompt_length"):
            _num("", k, getattr(self, k), lo=1, hi=1e8)
        _length(
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
        "name",
        "source",
        "description",
    )
)
SLO_KEYS = ("min_tokens_per_s_per_user", "max_ttft_s")
PRICES_KEYS = ("usd_per_gpu_hour", "usd_per_million")


def _section(where, name, d, allowed):
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ConfigError(f"{where}{name}: must be a mapping with keys {', '.join(allowed)}")
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}{name}.{unknown[0]}: unknown key; allowed {', '.join(allowed)}")
    return d


def traffic_from_dict(d: dict, *, file: str | None = None) -> Traffic:
    """Validate a mapping (YAML layout, see the module doc) -> Traffic. Unknown keys are rejected."""
    where = f"{file}: " if file else ""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}traffic: must be a mapping of keys ({', '.join(TOP_KEYS[:3])}, ...)")
    unknown = sorted(set(d) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}: unknown key; allowed {', '.join(TOP_KEYS)}")
    hours = _num(where, "hours", d.get("hours", 24), lo=1, hi=MAX_HOURS, integer=True)

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
            r = _num(where, kr, d.get(kr, 0.0 if k == "cache_hit_tokens" else None), lo=0, hi=1e15)
            vol[k] = r * hours * 3600.0
    else:
        for k in TOKEN_KEYS:
            vol[k] = _num(where, k, d.get(k, 0.0 if k == "cache_hit_tokens" else None), lo=0, hi=1e18)
    if vol["cache_hit_tokens"] > vol["input_tokens"]:
        key = "cache_hit_tokens" + ("_per_s" if rates_given else "")
        raise ConfigError(
            f"{where}{key}: {vol['cache_hit_tokens']:g} exceeds input_tokens {vol['input_tokens']:g}; "
            f"allowed 0 <= cache hits <= input (hits are part of the input)"
        )
    if vol["input_tokens"] + vol["output_tokens"] <= 0:
        raise ConfigError(f"{where}output_tokens: input and output are both 0; allowed: some traffic (> 0)")

    diurnal = _diurnal(where, d.get("diurnal"), hours)
    output = _length(where, "output_length", d.get("output_length"))
    prompt_in = d.get("prompt_length")
    if d.get("context") is None and output is not None and prompt_in is not None:
        # mean KV per output token, prompt and output independent: the i-th output token sees
        # P + i - 1 keys, averaged over the output tokens: E[P] + (E[O^2] / E[O] - 1) / 2
        pm = _length(where, "prompt_length", prompt_in).mean
        context = pm + max(output.moment_ratio() - 1.0, 0.0) / 2.0
    else:
        context = _num(where, "context", d.get("context", 4989), lo=1, hi=1e8)
    prompt = _length(where, "prompt_length", prompt_in, default_mean=context)

    slo = _section(where, "slo", d.get("slo"), SLO_KEYS)
    min_tps = _num(where, "slo.min_tokens_per_s_per_user", slo.get("min_tokens_per_s_per_user", 20.0), lo=0, hi=1e6)
    ttft = _num(where, "slo.max_ttft_s", slo.get("max_ttft_s"), lo=0, hi=1e6, lo_open=True, allow_none=True)

    pr = _section(where, "prices", d.get("prices"), PRICES_KEYS)
    gpu_price = _num(where, "prices.usd_per_gpu_hour", pr.get("usd_per_gpu_hour"), lo=0, hi=1e4, allow_none=True)
    upm = pr.get("usd_per_million")
    prices = None
    if upm is not None:
        upm = _section(where, "prices.usd_per_million", upm, PRICE_KEYS)
        missing = [k for k in PRICE_KEYS if upm.get(k) is None]
        if missing:
            raise ConfigError(
                f"{where}prices.usd_per_million.{missing[0]}: required; give all of "
                f"{', '.join(PRICE_KEYS)} ($ per million tokens)"
            )
        prices = Prices(*(_num(where, f"prices.usd_per_million.{k}", upm[k], lo=0, hi=1e6) for k in PRICE_KEYS))

    prefill = _pool(PrefillPool, where, "prefill", d.get("prefill"), OVERLAPS_PREFILL)
    decode = _pool(DecodePool, where, "decode", d.get("decode"), OVERLAPS_DECODE)
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
        name=d.get("name") or "",
        source=d.get("source") or "",
    )


def _diurnal(where, w, hours: int) -> tuple[float, ...]:
    """Hourly weights -> tuple of length ``hours`` summing to 1. Accepts one weight per hour of the
    window, or 24 (a daily profile, repeated over the window)."""
    if w is None:
        return tuple(np.full(hours, 1.0 / hours))
    if isinstance(w, (str, bytes, dict)) or not hasattr(w, "__len__"):
        raise ConfigError(f"{where}diurnal: must be a list of 24 (or hours = {hours}) non-negative weights")
    vals = [_num(where, f"diurnal[{i}]", x, lo=0, hi=1e18) for i, x in enumerate(w)]
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
    import yaml

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
