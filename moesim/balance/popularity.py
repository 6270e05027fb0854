"""Published expert-popularity skew (``balance/expert_popularity.yaml``) -> per-expert load.

One frozen ``PopularityProfile`` per model family, read strictly (moesim.specs.schema.build:
a bad value is one line naming the file, the field and the allowed range). The one number the
model uses is ``per_expert_cv`` (std/mean of the tokens routed to each expert in one step, one
layer): the finite-batch multinomial part (1/mean_pairs_per_expert in the squared CV) is removed,
because ``expert_rank_imbalance`` adds that noise itself for the step's real token count.

Popularity shape: lognormal (the per-expert counts of Table 1 of the source are right-skewed with
one or two experts at ~12x the mean). The E experts take the lognormal's E mid-quantiles
exp(sigma * Phi^-1((i + 1/2)/E)); sigma is solved so that THAT discrete set has the measured CV
(the plain moment relation sigma^2 = ln(1 + cv^2) understates a 256-point set's CV by ~6%).
The hottest expert's max/mean and the per-rank max/mean (naive placement, EPLB) of the source are
checks (tests/unit/test_popularity.py), not inputs.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path

import numpy as np

# special.ndtri: the normal quantile (= stats.norm.ppf, bit for bit; scipy.stats costs 0.7 s to import)
from scipy import special

from moesim.errors import ConfigError, SpecError
from moesim.specs.loader import data_root, read_mapping
from moesim.specs.schema import build, field

__all__ = ["PopularityProfile", "load_profiles", "profile_for", "popularity_file", "expert_popularity"]


@dataclasses.dataclass(frozen=True)
class PopularityProfile:
    """Published routing statistics of one model family (units: ratios and token-expert pairs)."""

    models: tuple[str, ...]
    source: str
    published: str
    retrieved: str
    measured_on: str
    num_experts: int = field(lo=2, hi=100_000, doc="routed experts of the measured model")
    top_k: int = field(lo=1, hi=1_000, doc="experts per token of the measured model")
    per_expert_cv: float = field(lo=0.0, hi=20.0, doc="std/mean of tokens per expert, per layer and step")
    mean_pairs_per_expert: float = field(lo=0.0, hi=1e12, lo_open=True, doc="mean tokens per expert in that step")
    per_expert_max_over_mean: float = field(lo=1.0, hi=100_000.0, doc="check: hottest expert / mean")
    ranks: int = field(lo=1, hi=100_000, doc="EP ranks of the measurement")
    per_rank_max_over_mean_naive: float = field(lo=1.0, hi=100_000.0, doc="check: no EPLB")
    eplb_redundant: int = field(lo=0, hi=100_000, doc="redundant slots of the EPLB measurement")
    per_rank_max_over_mean_eplb: float = field(lo=1.0, hi=100_000.0, doc="check: with EPLB")

    def _validate(self, file=None, path=""):
        where = f"{file}: {path}." if file else f"{path}."
        if not self.models or any(not m.strip() for m in self.models):
            raise SpecError(f"{where}models: must list at least one model name")
        if self.per_expert_max_over_mean > self.num_experts:
            raise SpecError(
                f"{where}per_expert_max_over_mean: {self.per_expert_max_over_mean} out of range, "
                f"allowed [1, num_experts = {self.num_experts}]"
            )
        if self.per_rank_max_over_mean_naive > self.ranks or self.per_rank_max_over_mean_eplb > self.ranks:
            raise SpecError(f"{where}per_rank_max_over_mean_*: out of range, allowed [1, ranks = {self.ranks}]")
        if self.popularity_cv <= 0.0:
            raise SpecError(
                f"{where}per_expert_cv: {self.per_expert_cv} out of range, allowed > "
                f"{np.sqrt(1.0 / self.mean_pairs_per_expert):.4g} (the multinomial noise of "
                f"mean_pairs_per_expert = {self.mean_pairs_per_expert:g} alone)"
            )

    @property
    def popularity_cv(self) -> float:
        """CV of the expected per-expert share: the measured CV less the multinomial noise of a
        step with mean_pairs_per_expert per expert (variances add: cv^2 = cv_pop^2 + 1/mean)."""
        v = self.per_expert_cv**2 - 1.0 / self.mean_pairs_per_expert
        return float(np.sqrt(v)) if v > 0 else 0.0

    def label(self) -> str:
        return f"lognormal popularity, per-expert CV {self.popularity_cv:.3g} ({self.source.split(',')[0]})"


def popularity_file() -> Path:
    return data_root() / "balance" / "expert_popularity.yaml"


def load_profiles(path: Path | None = None) -> dict[str, PopularityProfile]:
    """name -> PopularityProfile; one SpecError line naming file/field/range on a bad entry."""
    p = Path(path) if path is not None else popularity_file()
    return _load(str(p), p.stat().st_mtime_ns if p.is_file() else None)


@lru_cache(maxsize=8)
def _load(path: str, _mtime) -> dict[str, PopularityProfile]:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: popularity data file does not exist")
    data = read_mapping(p)
    profiles = data.get("profiles")
    if set(data) != {"profiles"} or not isinstance(profiles, dict) or not profiles:
        raise SpecError(f"{p}: profiles: expected one top-level key 'profiles' mapping names to profiles")
    return {str(k): build(PopularityProfile, v, file=str(p), path=f"profiles.{k}") for k, v in profiles.items()}


def profile_for(model_name: str, path: Path | None = None, missing_ok: bool = False) -> PopularityProfile | None:
    """The profile listing ``model_name`` in its models, else None (also when ``missing_ok`` and a
    data root without balance/expert_popularity.yaml is in use, e.g. MOESIM_DATA elsewhere)."""
    if missing_ok and not (Path(path) if path is not None else popularity_file()).is_file():
        return None
    key = str(model_name).strip().lower().replace("_", "-")
    for prof in load_profiles(path).values():
        if key in (m.strip().lower().replace("_", "-") for m in prof.models):
            return prof
    return None


@lru_cache(maxsize=64)
def _sigma(cv: float, num_experts: int) -> float:
    q = special.ndtri((np.arange(num_experts) + 0.5) / num_experts)

    def cv_of(s):
        w = np.exp(s * q)
        return w.std() / w.mean() - cv

    if cv <= 0.0:
        return 0.0
    hi = 1.0
    while cv_of(hi) < 0.0:  # the discrete set's CV grows without bound in sigma
        hi *= 2.0
        if hi > 64.0:
            raise ConfigError(f"per_expert_cv: {cv:g} cannot be reached by {num_experts} lognormal experts")
    from scipy import optimize  # lazy: ~0.3 s to import, and only a CV-given profile solves for sigma

    return float(optimize.brentq(cv_of, 0.0, hi, xtol=1e-12))


def expert_popularity(profile: PopularityProfile, num_experts: int, layers: int = 1, seed: int = 0) -> np.ndarray:
    """[layers, num_experts] expected share of routed pairs per expert (rows sum to 1): the
    lognormal mid-quantile popularity with the profile's noise-free CV, the experts' ranks
    permuted per layer with ``numpy.random.default_rng(seed)`` (which expert is hot differs by
    layer; the source's Figure 1 shows hot ranks at different places per layer)."""
    if num_experts != profile.num_experts:
        raise ConfigError(
            f"expert-skew: the published profile was measured on {profile.num_experts} experts, "
            f"the model has {num_experts}; allowed: uniform, zipf:<s> or a per-expert load CSV"
        )
    s = _sigma(round(profile.popularity_cv, 12), int(num_experts))
    w = np.exp(s * special.ndtri((np.arange(num_experts) + 0.5) / num_experts))
    w /= w.sum()
    rng = np.random.default_rng(seed)
    perm = np.argsort(rng.random((int(layers), int(num_experts))), axis=1)
    return w[perm]
