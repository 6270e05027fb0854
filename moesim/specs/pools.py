"""The planner's deployment pools (prefill and decode units) and list prices: parts of the
traffic spec (`moesim.specs.traffic`). Units: GPUs, tokens, US dollars per million tokens."""

from __future__ import annotations

from dataclasses import dataclass, fields

from moesim.errors import ConfigError, check_number, key_text, unknown_keys

__all__ = ["Prices", "PrefillPool", "DecodePool", "pool_from_dict", "PRICE_KEYS", "COMMS"]

PRICE_KEYS = ("input_hit", "input_miss", "output")


def _choice(where, name, v, allowed, allow_none=True):
    if v is None and allow_none:
        return None
    if not isinstance(v, str) or v not in allowed:
        raise ConfigError(f"{where}{name}: {v!r}; allowed {', '.join(allowed)}")
    return v


OVERLAPS_DECODE = ("serial", "shared", "sbo", "two-batch", "five-stage", "ideal", "auto")
OVERLAPS_PREFILL = ("serial", "shared", "sbo", "two-batch", "ideal", "auto")
COMMS = ("deepep-ll", "deepep-normal", "nccl", "pplx")


@dataclass(frozen=True)
class Prices:
    """List prices in $ per million tokens."""

    input_hit: float
    input_miss: float
    output: float

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in PRICE_KEYS}


class _Pool:
    """What the two pools share beyond their fields (attention DP x TP GPUs = EP ranks)."""

    @property
    def gpus(self) -> int:
        return self.tp * self.dp


@dataclass(frozen=True)
class PrefillPool(_Pool):
    """Prefill deployment unit: attention DP x TP GPUs = EP ranks (moe_tp 1).
    batch_tokens: prompt tokens per DP group per step (the largest the planner may use)."""

    ep: int = 32
    dp: int = 32
    tp: int = 1
    batch_tokens: float = 16384.0
    redundant_experts: int = 32
    overlap: str = "two-batch"
    comm: str | None = None  # engine default for prefill: deepep-normal


@dataclass(frozen=True)
class DecodePool(_Pool):
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


def pool_from_dict(cls, where: str, section: str, d, overlaps) -> object:
    """A pool section of the traffic YAML -> PrefillPool / DecodePool (ep, dp or both; tp x dp = ep)."""
    if d is None:
        return cls()
    if not isinstance(d, dict):
        raise ConfigError(f"{where}{section}: must be a mapping with keys {', '.join(f.name for f in fields(cls))}")
    known = [f.name for f in fields(cls)]
    unknown = unknown_keys(d, known)
    if unknown:
        raise ConfigError(f"{where}{section}.{key_text(unknown[0])}: unknown key; allowed {', '.join(known)}")
    p = f"{section}."
    tp = check_number(p + "tp", d.get("tp", 1), lo=1, hi=1024, integer=True, where=where)
    ep = d.get("ep")
    dp = d.get("dp")
    if ep is None and dp is None:
        ep = cls().ep
    if ep is not None:
        ep = check_number(p + "ep", ep, lo=1, hi=1_000_000, integer=True, where=where)
    if dp is not None:
        dp = check_number(p + "dp", dp, lo=1, hi=1_000_000, integer=True, where=where)
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
        "redundant_experts": check_number(
            p + "redundant_experts", d.get("redundant_experts", 32), lo=0, hi=100_000, integer=True, where=where
        ),
        "overlap": _choice(where, p + "overlap", d.get("overlap", cls().overlap), overlaps, False),
        "comm": _choice(where, p + "comm", d.get("comm"), COMMS),
    }
    if cls is PrefillPool:
        kw["batch_tokens"] = check_number(p + "batch_tokens", d.get("batch_tokens", 16384), lo=1, hi=1e9, where=where)
    else:
        kw["mtp"] = check_number(p + "mtp", d.get("mtp", 1), lo=0, hi=16, integer=True, where=where)
        kw["acceptance"] = check_number(p + "acceptance", d.get("acceptance", 0.8), lo=0, hi=1, where=where)
        kw["max_batch"] = check_number(
            p + "max_batch", d.get("max_batch", 512), lo=1, hi=100_000, integer=True, where=where
        )
    return cls(**kw)
