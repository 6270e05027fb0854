"""Cross-validation and least squares for the fits: k-fold over rows (leave-one-out when a fit has
<= 20 rows, else 10 folds, a fixed permutation); a profile stores median / max absolute % error on
held-out rows, and per row the in-sample and held-out errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import least_squares

from moesim.perf.profile.schema import round_sig as _r


def kfold_indices(n: int, folds: int | None = None) -> list[np.ndarray]:
    if n < 2:
        return []
    k = folds or (n if n <= 20 else 10)
    k = max(2, min(int(k), n))
    perm = np.random.default_rng(0).permutation(n)
    return [np.sort(perm[i::k]) for i in range(k)]


def cross_validate(
    n: int,
    fit: Callable[[np.ndarray], object],
    predict: Callable[[object, np.ndarray], np.ndarray],
    measured: np.ndarray,
    folds: int | None = None,
):
    """Held-out relative errors per row (NaN where a fold could not be fitted)."""
    errs = np.full(n, np.nan)
    parts = kfold_indices(n, folds)
    for test in parts:
        train = np.setdiff1d(np.arange(n), test)
        if len(train) == 0:
            continue
        try:
            p = fit(train)
        except (ValueError, np.linalg.LinAlgError):
            continue
        errs[test] = predict(p, test) / measured[test] - 1.0
    return errs, len(parts)


def cv_summary(errs: np.ndarray, folds: int) -> dict:
    e = np.abs(errs[np.isfinite(errs)]) * 100.0
    if len(e) == 0:
        return {"folds": folds, "median_abs_pct": None, "max_abs_pct": None}
    # p90: the acceptance statistic of issue 14 (median <= 8 %, p90 <= 20 % per family and engine)
    return {
        "folds": folds,
        "median_abs_pct": _r(np.median(e), 3),
        "p90_abs_pct": _r(np.percentile(e, 90), 3),
        "max_abs_pct": _r(np.max(e), 3),
    }


def held_out_median(errs: np.ndarray) -> float:
    """Median |held-out error| (inf when no fold could be fitted): what picks between model variants."""
    return float(np.nanmedian(np.abs(errs))) if np.isfinite(errs).any() else np.inf


def residual(measured: float, fitted: float, cv_err: float) -> dict:
    """The error fields of one row's residual entry."""
    return {
        "measured_us": _r(measured * 1e6, 5),
        "fit_us": _r(fitted * 1e6, 5),
        "fit_err_pct": _r((fitted / measured - 1) * 100, 3),
        "cv_err_pct": _r(cv_err * 100, 3) if np.isfinite(cv_err) else None,
    }


def lsq(residual_fn, starts, lo, hi):
    """Bounded least squares (trf) from several starts; the lowest cost wins."""
    best = None
    for x0 in starts:
        x0 = np.clip(np.asarray(x0, float), lo, hi)
        res = least_squares(residual_fn, x0, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=4000)
        if best is None or res.cost < best.cost:
            best = res
    return best.x


def robust_lsq(residual_fn, starts, lo, hi):
    """Bounded robust least squares (trf, soft-L1 at 5 %: a few glitched rows must not pull the fit)
    from several starts; the lowest cost wins."""
    best = None
    for x0 in starts:
        x0 = np.clip(np.asarray(x0, float), lo, hi)
        res = least_squares(residual_fn, x0, bounds=(lo, hi), method="trf", loss="soft_l1", f_scale=0.05, x_scale="jac")
        if best is None or res.cost < best.cost:
            best = res
    return best.x
