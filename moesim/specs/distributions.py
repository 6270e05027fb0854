"""The length / context distribution grammar: how long prompts, outputs and contexts are.

* ``--context-dist`` / ``dist``: fixed | exp | lognormal:<cv> -> a coefficient of variation
  (`context_dist`).
* A length in the traffic YAML (`length_dist`): a number (the mean, fixed), ``{mean, dist}`` or
  ``{bins: [[tokens, share of requests], ...]}`` -> `LengthDist` (moments and a discrete form).

Units: tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.errors import ConfigError, check_number, key_text, unknown_keys

__all__ = ["LengthDist", "context_dist", "length_dist", "section", "MAX_CONTEXT_CV", "LENGTH_BINS_DISCRETE"]


def context_dist(spec: str) -> float:
    """Context-length distribution string -> coefficient of variation:
    "fixed" -> 0, "exp" -> 1, "lognormal:<cv>" -> cv (>= 0)."""
    s = str(spec).strip().lower()
    if s == "fixed":
        return 0.0
    if s in ("exp", "exponential"):
        return 1.0
    if s.startswith("lognormal:"):
        try:
            cv = float(s.split(":", 1)[1])
        except ValueError:
            cv = float("nan")
        if np.isfinite(cv) and 0 <= cv <= MAX_CONTEXT_CV:
            return cv
    raise ConfigError(f"context-dist: {spec!r} is not one of fixed, exp, lognormal:<cv in [0, {MAX_CONTEXT_CV:g}]>")


MAX_CONTEXT_CV = 100.0  # beyond this the lognormal moments overflow; real traffic has cv ~ 0.5-3


def section(where, name, d, allowed):
    """A mapping with only `allowed` keys (None -> {}); one-line error naming the field otherwise."""
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ConfigError(f"{where}{name}: must be a mapping with keys {', '.join(allowed)}")
    unknown = unknown_keys(d, allowed)
    if unknown:
        raise ConfigError(f"{where}{name}.{key_text(unknown[0])}: unknown key; allowed {', '.join(allowed)}")
    return d


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


def length_dist(where, name, v, default_mean=None) -> LengthDist | None:
    """YAML value -> LengthDist: a number (mean, fixed), {mean, dist} or {bins: [[tokens, share], ...]}."""
    if v is None:
        return None if default_mean is None else LengthDist(float(default_mean))
    if isinstance(v, LengthDist):
        return v
    if not isinstance(v, dict):
        return LengthDist(check_number(name, v, lo=1, hi=1e8, where=where))
    d = section(where, name, v, ("mean", "dist", "bins"))
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
                    check_number(f"{name}.bins[{i}][0]", row[0], lo=1, hi=1e8, where=where),
                    check_number(f"{name}.bins[{i}][1]", row[1], lo=0, hi=1e18, where=where),
                )
            )
        tot = sum(w for _, w in rows)
        if not tot > 0:
            raise ConfigError(f"{where}{name}.bins: all shares are 0; allowed non-negative shares, not all 0")
        rows = tuple((x, w / tot) for x, w in rows)
        return LengthDist(sum(x * w for x, w in rows), "bins", rows)
    mean = check_number(f"{name}.mean", d.get("mean", default_mean), lo=1, hi=1e8, where=where)
    dist = str(d.get("dist") or "fixed").strip().lower()
    try:
        context_dist(dist)
    except ConfigError:
        raise ConfigError(f"{where}{name}.dist: {dist!r}; allowed fixed, exp, lognormal:<cv>") from None
    return LengthDist(mean, dist)
