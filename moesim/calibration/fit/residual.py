"""Measured residual correction of table fits (moesim.perf.profile.residual): log residuals
log(t_measured / T_physics) of the all-rows physics fit, stored per fitted variant, and an honest
cross-validation of physics x R.

Generic over the fit: any `data` object with `t` (measured seconds), `d` (the rows), `fit(idx, x0)`
and `predict(params, idx)` (the waves_v1 / stream_v1 fits of fit.gemm; attention fits can call it
the same way). Two held-out schemes, both reported:

* grouped (the physics CV's folds: whole shapes, e.g. every m of a GEMM (n, k)): per fold the
  physics is refitted on the training folds and the interpolator is built from training rows only;
* leave-one-shape-out (LOSO, the acceptance's wording: one exact shape held out): each row is
  predicted by the physics of the grouped fold that held its shape out, times R interpolated from
  every OTHER shape's residual under that same physics; the measured box is recomputed without it.

No held-out row enters its own prediction in either scheme (a test plants an outlier to check it).
A fit module uses it as fit.gemm does (attention: the same calls with its own axes):

    pts = log_points(rows, axes)
    errs = residual_cv(data, pts, parts, fold_params(data, parts, x0))   # physics / grouped / loso
    cv["physics"] = err_stats(errs["physics"], size, 64); cv["leave_one_shape_out"] = ...
    attach(entry, key, axes, *residual_arrays(data, pts, params_all_rows))

fit.profile.write_residuals then writes every block's arrays into the profile's side-car file.
Profiles inheriting an entry (fit.profile._parent_entry; H100 / H800 from H200) keep its block and
so reference the same file, next to theirs: residuals are a shape property of the kernel.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from moesim.perf.profile import residual as RS
from moesim.perf.profile.schema import round_sig as _r

# a fit whose rows hold a known time outside the kernel (data.known: the input quant of a linear op,
# moesim.calibration.fit.act_quant) stores the residual of the kernel part, (t - known) / (T - known),
# and predicts known + (T - known) R; the kernel part is floored at this share of the measured time
# (where the known model exceeds a row's measurement the kernel is not free)
KERNEL_PART_FLOOR = 0.05

AXES = {  # shape columns the residual is interpolated over (log space), per family
    "gemm": ("m", "n", "k"),
    "moe": ("tokens", "hidden", "n", "experts", "topk", "ep", "tp"),
    "quant": ("m", "k"),
    # attention (mla_v2 variants; fit.attention): one curve per batch x heads (x KV heads), over the context
    "mla_decode": ("batch", "q_len", "heads", "context"),
    "mla_prefill": ("batch", "q_len", "heads", "context"),
    "attention": ("batch", "q_len", "heads", "groups", "context"),
}


# Neighbour-search weights (moesim.perf.profile.residual.search_weights), one per axis of AXES, per
# (family, dtype) or, first, (family, dtype, SM generation); absent: 1 each. Block-scaled FP8 GEMMs choose their tile and wave configuration
# from m and n (DeepGEMM SM90: block sizes, multicast and waves from m, n, with k only in the
# integer-rounded cost, moesim.perf.deepgemm_layout; TRT-LLM / CUTLASS block-scale GEMMs dispatch
# tiles on m, n likewise), so what the physics misses of that choice is shared by the k's of one
# (m, n) and changes abruptly with m and n, down to one row (m 4096 -> 4097 is another layout; the
# m axis's mean log step is 0.14, so one row there is 0.002 steps): neighbours are taken along k at
# the same m first. Not for bf16 (cuBLAS picks algorithms and split-K by k too: weighting made
# those tables worse). Values chosen by held-out error (grouped CV / LOSO p90 %, same physics):
# Hopper (sm90) weights 30, 3, 1 -> 3000, 5, 1: H200 sglang DeepGEMM 20.6 / 21.1 -> 18.4 / 18.0,
# TRT-LLM 9.1 / 9.8 -> 7.8 / 7.2. Blackwell keeps 30, 3, 1 (re-checked with DeepGEMM's SM100 layout,
# moesim.perf.deepgemm_layout_sm100: 3000, 5, 1 there: GB200 sglang 15.1 / 15.3 -> 16.2 / 15.8;
# B200 sglang stayed 23.9 / 23.8 under any weights tried, before the quant CTA term: its own scatter).
AXIS_WEIGHTS = {("gemm", "fp8_block"): (30.0, 3.0, 1.0), ("gemm", "fp8_block", 9): (3000.0, 5.0, 1.0)}


def weights_for(data):
    """The neighbour-search weights of a fit's data object (its family, dtype and SM generation), or None."""
    key = (getattr(data, "family", None), getattr(data, "dtype", None))
    return AXIS_WEIGHTS.get((*key, getattr(data, "sm_generation", 0)), AXIS_WEIGHTS.get(key))


def log_points(d, axes) -> np.ndarray:
    """[N x d] log shape of rows `d` (absent ep / tp / groups: 1)."""
    cols = []
    for a in axes:
        v = d[a].values.astype(float) if a in d else np.full(len(d), np.nan)
        cols.append(np.where(np.isfinite(v), v, RS.AXIS_DEFAULTS.get(a, np.nan)))
    return np.log(np.stack(cols, 1))


def _box_without_self(z: np.ndarray):
    """Per shape, the normalized measured box of every OTHER shape (lo, hi arrays [U x d])."""
    lo, hi = np.empty_like(z), np.empty_like(z)
    for j in range(z.shape[1]):
        v = z[:, j]
        u = np.unique(v)
        for out, first, second in ((lo, u[0], u[min(1, len(u) - 1)]), (hi, u[-1], u[max(len(u) - 2, 0)])):
            alone = (v == first) & ((v == first).sum() == 1)
            out[:, j] = np.where(alone, second, first)
    return lo, hi


def tree_nearest(train: np.ndarray, query: np.ndarray, k: int):
    """moesim.perf.profile.residual.nearest through a k-d tree (scipy; the fit only): same neighbours."""
    k = max(1, min(k, len(train)))
    dist, idx = cKDTree(train).query(query, k)
    return np.asarray(idx).reshape(len(query), k), np.asarray(dist).reshape(len(query), k)


def _known(data, idx) -> np.ndarray | float:
    known = getattr(data, "known", None)
    return 0.0 if known is None else known[idx]


def log_ratio(data, pred: np.ndarray) -> np.ndarray:
    """log(measured / modelled) of every row's kernel part (pred: data.predict over all rows)."""
    known = _known(data, slice(None))
    return np.log(np.maximum(data.t - known, KERNEL_PART_FLOOR * data.t) / (pred - known))


def corrected(data, pred: np.ndarray, log_factor: np.ndarray, idx) -> np.ndarray:
    """Rows idx predicted with their kernel part times exp(log_factor) (pred, log_factor: of rows idx)."""
    known = _known(data, idx)
    return known + (pred - known) * np.exp(log_factor)


def fold_params(data, parts, x0=None) -> list:
    """The physics params of each grouped fold (fitted on the other folds)."""
    n = len(data.t)
    return [data.fit(np.setdiff1d(np.arange(n), test), x0) if len(test) else None for test in parts]


def residual_cv(data, points: np.ndarray, parts, params) -> dict:
    """Held-out relative errors per row: {'physics', 'grouped', 'loso'} (NaN where not predicted)."""
    n = len(data.t)
    out = {k: np.full(n, np.nan) for k in ("physics", "grouped", "loso")}
    u, inv = np.unique(np.round(points, 9), axis=0, return_inverse=True)
    inv = inv.ravel()
    zu = u / RS.axis_steps(u)
    weights = weights_for(data)
    w = RS.search_weights(weights, points.shape[1])
    idx, dist = tree_nearest(zu * w, zu * w, RS.K_NEAREST + 1)  # column 0 is the shape itself: dropped
    idx, dist = idx[:, 1:], dist[:, 1:]
    w_loso = RS.hull_weight(zu, *_box_without_self(zu))  # the box of the other shapes
    all_rows = np.arange(n)
    for test, p in zip(parts, params):
        if p is None or len(test) == 0:
            continue
        pred = data.predict(p, all_rows)
        logr = log_ratio(data, pred)
        out["physics"][test] = pred[test] / data.t[test] - 1.0
        train = np.setdiff1d(all_rows, test)
        model = RS.Residual(range(points.shape[1]), points[train], logr[train], weights=weights)
        lf = model.log_factor(points[test] / model.steps, tree_nearest)
        out["grouped"][test] = corrected(data, pred[test], lf, test) / data.t[test] - 1.0
        _, med = RS.dedup(points, logr)  # every shape's residual under this fold's physics
        lf_u = w_loso * RS.neighbour_median(med, idx, dist)  # neighbours: the OTHER shapes only
        out["loso"][test] = corrected(data, pred[test], lf_u[inv[test]], test) / data.t[test] - 1.0
    return out


def err_stats(errs: np.ndarray, size: np.ndarray, decode_max: float) -> dict:
    """median / p90 |error| % over all rows and over the decode-sized subset `small` (size <=
    decode_max; rows, median, p90: the attention fits' block)."""
    e = np.abs(errs) * 100.0
    ok = np.isfinite(e)
    small = ok & (np.asarray(size, float) <= decode_max)

    def stat(mask, q):
        return _r(np.percentile(e[mask], q), 3) if mask.any() else None

    return {
        "median_abs_pct": stat(ok, 50),
        "p90_abs_pct": stat(ok, 90),
        "small": {"rows": int(small.sum()), "median_abs_pct": stat(small, 50), "p90_abs_pct": stat(small, 90)},
    }


def residual_arrays(data, points: np.ndarray, p) -> tuple[np.ndarray, np.ndarray]:
    """(distinct log shapes, median log residual of each) under the all-rows physics params p."""
    return RS.dedup(points, log_ratio(data, data.predict(p, np.arange(len(data.t)))))


def attach(entry: dict, key: str, axes, points: np.ndarray, logr: np.ndarray, weights=None) -> None:
    """The entry's `residual` block (file and sha256 filled when the profile is written); the
    neighbour-search weights, where the family has them, as `axis_weights`."""
    model = RS.Residual(axes, points, logr, weights=weights)
    entry["residual"] = {"key": key, "axes": list(axes), "points": len(model.logr), "_data": model}
    if weights is not None:
        entry["residual"]["axis_weights"] = [float(v) for v in weights]


def _entries(profile: dict):
    """Every kernel entry of a profile and its variants (a list, waves_v1, or a mapping, mla_v2)."""
    for e in (profile.get("kernels") or {}).values():
        vs = e.get("variants") or []
        yield from [e, *(vs.values() if isinstance(vs, dict) else vs)]


def collect(profile: dict) -> dict:
    """{key: (points, logr)} of every in-memory residual block of a profile's kernel entries."""
    out = {}
    for v in _entries(profile):
        b = v.get("residual")
        if b and b.get("_data") is not None:
            out[b["key"]] = (b["_data"].points, b["_data"].logr)
    return out


def finalize(profile: dict, file_name: str, sha: str) -> None:
    """Point every residual block at the written side-car file (drops the in-memory arrays)."""
    for v in _entries(profile):
        b = v.get("residual")
        if b and b.get("_data") is not None:  # a borrowed variant keeps its donor's file
            b.pop("_data", None)
            b.update(file=file_name, sha256=sha)
