"""What a simulated run is asked to do, in small frozen groups (issue 28): the instance's `Layout`,
the `Serving` setup (replicas, PD prefill pool, the engine's scheduler overrides, the prefix cache)
and the `Slo` targets; how passes are priced is the engine's `Pricing`. `options(**keywords)` turns
the flat keywords of the CLI and the front door into these groups.

    simulate("deepseek-v3", "h200", workload=w, **options(tp=8, ep=8, replicas=2, cost_mode="roofline"))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from moesim.engine.settings import FIELDS as PRICING_FIELDS
from moesim.engine.settings import Pricing
from moesim.errors import ConfigError, check_number


@dataclass(frozen=True)
class Layout:
    """One instance's parallel layout (None: the layout rules' default, `moesim.grid.layout`) and
    speculative decoding: mtp draft tokens per step, each accepted with probability `acceptance`."""

    tp: int | None = None  # attention TP per DP group
    dp: int | None = None  # DP groups (DP attention)
    ep: int | None = None  # expert-parallel ranks
    moe_tp: int | None = None  # TP inside each expert
    mtp: int = 0
    acceptance: float = 0.8
    redundant_experts: int = 0
    overlap: str | None = None  # the overlap scheme (None: the engine's per pass)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Serving:
    """How the instances serve: `replicas` instances of the layout behind the router (PD: decode
    instances); `prefill` = {"instances", "tp", "dp", "ep", "moe_tp", ..., "rules"}: a PD prefill
    pool (None: aggregated); `prefill_only`: the replicas are PD prefill instances alone (a request
    is served when its KV has left); `engine_profile`: a serving profile YAML (None: the engine's
    shipped one); `rules`: overrides of its scheduler settings (`moesim.simulate.rules.Rules`
    fields); `prefix_cache`: reuse cached prompt prefixes; `hit_ratio`: the share of every prompt
    served from cache instead (0..1)."""

    replicas: int = 1
    prefill: dict | None = None
    prefill_only: bool = False
    engine_profile: Path | None = None
    rules: dict | None = None
    prefix_cache: bool = True
    hit_ratio: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "replicas", check_number("replicas", self.replicas, lo=1, hi=4096, integer=True))
        object.__setattr__(self, "hit_ratio", check_number("hit_ratio", self.hit_ratio, lo=0.0, hi=1.0))


@dataclass(frozen=True)
class Slo:
    """Service-level targets (s; None: none) that goodput counts against."""

    ttft_s: float | None = None
    tpot_s: float | None = None


_GROUPS = {"layout": Layout, "serving": Serving}
_SLO = {"slo_ttft_s": "ttft_s", "slo_tpot_s": "tpot_s"}


def allowed_keywords() -> tuple[str, ...]:
    """Every flat keyword `options` takes."""
    names = [f.name for g in _GROUPS.values() for f in dataclasses.fields(g)]
    return (*names, *_SLO, *PRICING_FIELDS, "pricing")


def options(pricing: Pricing | None = None, **keywords) -> dict:
    """Flat keywords -> {"layout": Layout, "serving": Serving, "pricing": Pricing, "slo": Slo}
    (`simulate`'s grouped keywords). `pricing`: the settings the pricing keywords replace (`Pricing.of`).
    An unknown keyword is a ConfigError naming the allowed ones."""
    unknown = sorted(set(keywords) - set(allowed_keywords()))
    if unknown:
        raise ConfigError(f"simulate: unknown keyword(s) {', '.join(unknown)}; allowed {', '.join(allowed_keywords())}")
    out = {}
    for name, group in _GROUPS.items():
        fields = {f.name for f in dataclasses.fields(group)}
        out[name] = group(**{k: v for k, v in keywords.items() if k in fields})
    out["slo"] = Slo(**{_SLO[k]: v for k, v in keywords.items() if k in _SLO})
    out["pricing"] = Pricing.of(pricing, **{k: v for k, v in keywords.items() if k in PRICING_FIELDS})
    return out


__all__ = ["Layout", "Serving", "Slo", "allowed_keywords", "options"]
