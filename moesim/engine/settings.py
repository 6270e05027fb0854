"""`Pricing`: how every configuration of a run is priced, one frozen object (issue 28).

Built once at the edge (`moesim.cli.options.pricing_of`, or `Pricing.of(**keywords)` in the library)
and passed as ``pricing=`` down the evaluation path (estimate_step -> evaluate_grid -> evaluate,
sweep, disagg, recommend, plan, layer_timeline, simulate), so no layer re-passes loose keywords.

    p = Pricing.of(cost_mode="roofline", engine="vllm")
    p2 = p.replace(comm="deepep-ll")          # a copy with one setting changed

Fields (defaults: what `moesim estimate` does with no flag):
    cost_mode      roofline | calibrated | measured                       (CostMode)
    engine         sglang | trtllm | vllm: whose profile and execution     (Engine)
    profile        an explicit calibration profile file (None: the engine's, else the GPU's)
    force_profile  accept a profile fitted for another GPU
    cuda_graphs    False: eager launches (the host launches every kernel)
    comm           the MoE all-to-all (CommMode; None: the engine's choice for the phase)
    comm_sms       SMs given to DeepEP's normal kernels (None: DeepEP's Buffer.num_sms = 20)
    expert_skew    auto | none | uniform | published | zipf:<s> | <load.csv>
    context_dist   fixed | exp | lognormal:<cv>
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from moesim.enums import DEFAULT_ENGINE, CommMode, CostMode, Engine
from moesim.errors import ConfigError, check_number


@dataclass(frozen=True)
class Pricing:
    """The settings that price a run (see the module docstring); enums parsed, numbers checked."""

    cost_mode: CostMode = CostMode.CALIBRATED
    engine: Engine = DEFAULT_ENGINE
    profile: Path | None = None
    force_profile: bool = False
    cuda_graphs: bool = True
    comm: CommMode | None = None
    comm_sms: int | None = None
    expert_skew: object = "auto"
    context_dist: object = "fixed"

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "cost_mode", CostMode.parse(self.cost_mode, "cost_mode"))
        set_(self, "engine", Engine.parse(self.engine, "engine"))
        if self.comm is not None:
            set_(self, "comm", CommMode.parse(self.comm, "comm"))
        if self.profile is not None:
            set_(self, "profile", Path(self.profile))
        if self.comm_sms is not None:  # DeepEP normal: 2 SMs per channel (the GPU's own cap: estimate_step)
            set_(self, "comm_sms", int(check_number("comm_sms", self.comm_sms, lo=2, hi=1024, integer=True)))
        for name in ("force_profile", "cuda_graphs"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: {getattr(self, name)!r}; allowed true or false")

    @classmethod
    def of(cls, pricing: Pricing | None = None, /, **keywords) -> Pricing:
        """`pricing` (default: the defaults) with `keywords` replaced; None values keep the default.
        An unknown keyword is a ConfigError naming the allowed ones."""
        unknown = sorted(set(keywords) - set(FIELDS))
        if unknown:
            raise ConfigError(f"pricing: unknown setting(s) {', '.join(unknown)}; allowed {', '.join(FIELDS)}")
        base = pricing if pricing is not None else cls()
        given = {k: v for k, v in keywords.items() if v is not None}
        return dataclasses.replace(base, **given) if given else base

    @classmethod
    def take(cls, where: str, pricing: Pricing | None, keywords: dict, allowed=None) -> tuple[Pricing, dict]:
        """(`pricing` with the pricing settings of `keywords` replaced, the other keywords) for a
        front door `where` that accepts both; with `allowed` (names), any other keyword is a
        ConfigError naming `where` and the allowed names."""
        given, rest = split_pricing(keywords)
        if allowed is not None:
            unknown = sorted(set(rest) - set(allowed))
            if unknown:
                names = ", ".join(sorted(set(allowed) | set(FIELDS)))
                raise ConfigError(f"{where}: unknown keyword(s) {', '.join(unknown)}; allowed {names}")
        return cls.of(pricing, **given), rest

    def replace(self, **keywords) -> Pricing:
        """A copy with `keywords` changed (None sets a field to None, unlike `of`)."""
        return dataclasses.replace(self, **keywords)

    def as_dict(self) -> dict:
        """Plain values (enum strings, the profile path as text) for outputs' `config`."""
        out = {}
        for f in FIELDS:
            v = getattr(self, f)
            out[f] = str(v.value) if hasattr(v, "value") else (str(v) if isinstance(v, Path) else v)
        return out


FIELDS = tuple(f.name for f in dataclasses.fields(Pricing))


def split_pricing(keywords: dict) -> tuple[dict, dict]:
    """(pricing keywords, the rest) of a keyword dict, for front doors that take both."""
    pricing = {k: v for k, v in keywords.items() if k in FIELDS}
    return pricing, {k: v for k, v in keywords.items() if k not in FIELDS}
