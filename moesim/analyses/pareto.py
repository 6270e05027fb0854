"""Pareto frontiers (maximize both x and y), sort-based and vectorized: O(n log n).

A point is on the frontier when no other point is >= in both coordinates and > in one. Exact
duplicates of a frontier point are all on it. Points with NaN in x or y are never on it.
"""

from __future__ import annotations

import numpy as np

from moesim.errors import ConfigError


def pareto_mask(x, y) -> np.ndarray:
    """Boolean mask of the non-dominated points of (x, y), maximizing both."""
    x = np.asarray(x, float).reshape(-1)
    y = np.asarray(y, float).reshape(-1)
    if x.shape != y.shape:
        raise ConfigError(f"pareto: x and y must have the same length ({x.size} != {y.size})")
    mask = np.zeros(x.size, bool)
    ok = ~(np.isnan(x) | np.isnan(y))
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return mask
    xs, ys = x[idx], y[idx]
    order = np.lexsort((-ys, -xs))  # x descending, then y descending
    xs, ys = xs[order], ys[order]
    n = xs.size
    start = np.ones(n, bool)
    start[1:] = xs[1:] != xs[:-1]  # first point of each equal-x group (its y is the group's max)
    gid = np.cumsum(start) - 1
    starts = np.flatnonzero(start)
    group_max = ys[starts][gid]
    run_max = np.maximum.accumulate(ys)
    # best y among points with strictly larger x = running max just before the group starts
    prev = np.full(starts.size, -np.inf)
    prev[1:] = run_max[starts[1:] - 1]
    has_prev = np.zeros(starts.size, bool)
    has_prev[1:] = True
    before, hp = prev[gid], has_prev[gid]
    front = (ys == group_max) & (~hp | (ys > before))
    mask[idx[order[front]]] = True
    return mask


def pareto(df, x="tokens_per_s_per_user", y="tokens_per_s_per_gpu", group_by=None, only_feasible=True):
    """Frontier rows of `df` (maximize x and y), per group when `group_by` names a column (or a
    list of columns). Rows with valid=False or fits=False are left out when those columns exist
    and only_feasible. Sorted by group, then x ascending."""

    for c in [x, y] + ([] if group_by is None else ([group_by] if isinstance(group_by, str) else list(group_by))):
        if c not in df.columns:
            raise ConfigError(f"pareto: no column {c!r}; available: {', '.join(map(str, df.columns))}")
    numeric = [str(c) for c in df.columns if df[c].dtype.kind in "iuf"]  # numbers (not booleans, not text)
    for flag, c in (("--x", x), ("--y", y)):
        if df[c].dtype.kind not in "iuf":
            raise ConfigError(
                f"pareto: {flag} {c!r} is not a numeric column ({df[c].dtype}); allowed: {', '.join(numeric)}"
            )
    d = df
    if only_feasible:
        keep = np.ones(len(d), bool)
        if "valid" in d.columns:
            keep &= d["valid"].to_numpy(bool)
        if "fits" in d.columns:
            keep &= d["fits"].to_numpy(bool)
        d = d.loc[keep]
    if len(d) == 0:
        return d.copy()
    xv, yv = d[x].to_numpy(float), d[y].to_numpy(float)
    if group_by is None:
        m = pareto_mask(xv, yv)
        return d.loc[m].sort_values([x, y], kind="stable").reset_index(drop=True)
    keys = [group_by] if isinstance(group_by, str) else list(group_by)
    codes = d.groupby(keys, sort=True, dropna=False).ngroup().to_numpy()
    m = np.zeros(len(d), bool)
    for g in np.unique(codes):  # one pass per group (a handful), vectorized inside
        sel = np.flatnonzero(codes == g)
        m[sel] = pareto_mask(xv[sel], yv[sel])
    out = d.loc[m]
    return out.sort_values(keys + [x, y], kind="stable").reset_index(drop=True)


def frontier_at(front, at, x="tokens_per_s_per_user", y="tokens_per_s_per_gpu", log_y=True) -> float:
    """y of a frontier interpolated at x = `at` (linear in x, in log y by default); NaN outside
    the frontier's x range."""
    xv = np.asarray(front[x], float) if not isinstance(front, np.ndarray) else front[:, 0]
    yv = np.asarray(front[y], float) if not isinstance(front, np.ndarray) else front[:, 1]
    ok = np.isfinite(xv) & np.isfinite(yv) & ((yv > 0) if log_y else True)
    xv, yv = xv[ok], yv[ok]
    if xv.size == 0 or at < xv.min() or at > xv.max():
        return float("nan")
    o = np.argsort(xv, kind="stable")
    xv, yv = xv[o], yv[o]
    if log_y:
        return float(np.exp(np.interp(at, xv, np.log(yv))))
    return float(np.interp(at, xv, yv))


__all__ = ["pareto", "pareto_mask", "frontier_at"]
