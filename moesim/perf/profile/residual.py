"""Measured residual correction of a table-fitted kernel entry: T = T_physics(shape) x R(shape).

R = exp(w(shape) x L(shape)), where L interpolates the stored log residuals log(t_measured /
T_physics) at the measured shapes and w fades the correction out beyond the measured hull:

* shapes live in log space, each axis divided by its mean grid step (log range / (distinct values
  - 1); log 2 for an axis with a single value), so one grid step is a distance of 1 on every axis;
* L = the median of the residuals of the K_NEAREST nearest measured shapes; an exact hit
  (d < EXACT) returns that shape's residual, so a measured shape reproduces its measurement.
  Chosen by leave-one-shape-out error on the H200 sglang DeepGEMM table (29.5k shapes): median of
  12 neighbours 6.2 % / p90 21.7 % vs inverse-distance weighting 8.7 % / 31.7 % (single noisy
  neighbours, e.g. DeepGEMM's m = 4096 slow rows, drag an IDW mean). A block may carry
  `axis_weights` that scale the neighbour search per axis (block-scaled FP8 GEMMs on Hopper: m 3000, n 5, k 1,
  moesim.calibration.fit.residual.AXIS_WEIGHTS: their configuration depends on m and n, not k;
  grouped-CV p90 on that table 23.0 -> 21.1 % at m 30, n 3, 20.6 -> 18.4 % at m 3000, n 5). Multilinear on the grid (a held-out point from its axial
  neighbours) held out 7.2 % / 21.5 % (bf16 table: 5.6 / 16.1 vs 4.7 / 16.5 here), and needs a
  full grid, which the MoE tables never are;
* w = exp(-max(0, d_box - 1)^2), d_box the normalized distance to the measured bounding box:
  full correction inside it and up to one grid step out, 0.37 at two steps, ~0 at three; physics
  alone beyond. R depends on the shape only (never on peaks), so a what-if on HBM bandwidth or
  peak FLOPs still moves the priced time through T_physics.

Residuals are a shape property of the kernel (like efficiencies), so a profile derived from another
GPU's (H100 / H800 from H200) references the same side-car file. Storage: one
np.savez_compressed file per profile (`<gpu>.<engine>.residuals.npz`, keys `<key>.points` [N x d]
log shapes and `<key>.logr` [N]); the entry's `residual` block names the file, key, axes, point
count and the file's sha256 (first 16 hex digits). Numpy only: nothing here imports scipy.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

from moesim.errors import CalibrationError
from moesim.fsio import atomic_write_bytes
from moesim.grid.core import unique_rows

K_NEAREST = 12  # neighbours whose median residual is taken (chosen by leave-one-shape-out CV)
EXACT = 1e-6  # normalized distance below which a query is the measured shape
CHUNK = 256  # queries per distance block (CHUNK x N floats at a time)
FIX = "python -m moesim.calibration.importers.shipped"
AXIS_DEFAULTS = {"ep": 1.0, "tp": 1.0, "groups": 1.0}  # absent parallel sizes: 1 (as the fit reads them)


def axis_steps(points: np.ndarray) -> np.ndarray:
    """Mean grid step of each log axis (log 2 where an axis has a single value)."""
    steps = np.full(points.shape[1], np.log(2.0))
    for j in range(points.shape[1]):
        u = np.unique(points[:, j])
        if len(u) > 1:
            steps[j] = (u[-1] - u[0]) / (len(u) - 1)
    return steps


def dedup(points: np.ndarray, logr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct shapes and the median log residual of each (duplicate rows of one shape)."""
    u, inv = np.unique(np.round(points, 9), axis=0, return_inverse=True)
    inv = inv.ravel()
    if len(u) == len(inv):  # no duplicate rows (the usual grid)
        med = np.empty(len(u))
        med[inv] = logr
        return u, med
    order = np.argsort(inv, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(inv[order]) > 0, True])
    vals = logr[order]
    med = np.array([np.median(vals[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    return u, med


def nearest(train: np.ndarray, query: np.ndarray, k: int):
    """(indices [Q x k], distances [Q x k]) of the k nearest train rows of each query (normalized
    coordinates; brute force in blocks of CHUNK queries, numpy only: the pricing path)."""
    k = max(1, min(k, len(train)))
    idx = np.empty((len(query), k), np.int64)
    dist = np.empty((len(query), k))
    for a in range(0, len(query), CHUNK):
        q = query[a : a + CHUNK]
        d2 = np.zeros((len(q), len(train)))
        for j in range(train.shape[1]):
            d2 += (q[:, j, None] - train[None, :, j]) ** 2
        part = np.argpartition(d2, k - 1, axis=1)[:, :k] if k < len(train) else np.tile(np.arange(k), (len(q), 1))
        dd = np.take_along_axis(d2, part, 1)
        order = np.argsort(dd, axis=1)  # nearest first (an exact hit is column 0)
        idx[a : a + CHUNK] = np.take_along_axis(part, order, 1)
        dist[a : a + CHUNK] = np.sqrt(np.take_along_axis(dd, order, 1))
    return idx, dist


def neighbour_median(values: np.ndarray, idx: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """Median of values over each query's nearest shapes; an exact hit (d < EXACT) takes its value."""
    out = np.median(values[idx], axis=1)
    hit = dist[:, 0] < EXACT
    return np.where(hit, values[idx[:, 0]], out)


def search_weights(weights, d: int) -> np.ndarray:
    """Per-axis scales of the neighbour search (1 each when absent): an axis with weight w counts
    one grid step as a distance w, so neighbours are taken first along the light axes (a residual
    block's `axis_weights`, written by the fit where a family's residual varies sharply on some axes)."""
    w = np.ones(d) if weights is None else np.asarray(weights, float).reshape(-1)
    if w.shape != (d,) or not (np.isfinite(w).all() and (w > 0).all()):
        raise CalibrationError("residual: axis_weights must be one positive number per axis")
    return w


def hull_weight(zq: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """exp(-max(0, d_box - 1)^2): 1 inside the measured box and up to one grid step out, -> 0 beyond."""
    box = np.sqrt((np.maximum(0.0, np.maximum(lo - zq, zq - hi)) ** 2).sum(1))
    return np.exp(-(np.maximum(0.0, box - 1.0) ** 2))


class Residual:
    """A log-residual interpolator over measured shapes (`points` in log space, one row a shape)."""

    def __init__(self, axes, points, logr, k: int = K_NEAREST, weights=None):
        points = np.asarray(points, float).reshape(len(logr), -1)
        if points.shape[1] != len(axes) or not np.isfinite(points).all() or not np.isfinite(logr).all():
            raise CalibrationError("residual: points must be finite, one column per axis")
        self.axes = tuple(axes)
        self.points, self.logr = dedup(points, np.asarray(logr, float))
        self.steps = axis_steps(self.points)
        self.z = self.points / self.steps
        self.lo, self.hi = self.z.min(0), self.z.max(0)
        self.w = search_weights(weights, len(self.axes))
        self.k = k
        self._memo: dict = {}

    def log_factor(self, zq: np.ndarray, nearest_fn=None) -> np.ndarray:
        """w x L at normalized log query shapes zq [Q x d] (distinct rows); `nearest_fn(train,
        query, k)` may replace the brute-force search (the fit passes a k-d tree: same neighbours).
        The neighbour search scales each axis by its weight; the hull fade and the exact-hit test do
        not (the stored log shapes are rounded to 1e-9: a weight of 3000 would lift that past EXACT)."""
        idx, _ = (nearest_fn or self._tree_nearest)(self.z * self.w, zq * self.w, self.k)
        exact = np.sqrt(((self.z[idx[:, 0]] - zq) ** 2).sum(1))[:, None]  # unweighted, nearest only
        return hull_weight(zq, self.lo, self.hi) * neighbour_median(self.logr, idx, exact)

    def _tree_nearest(self, train: np.ndarray, query: np.ndarray, k: int):
        """`nearest` through a k-d tree of the train rows built once per residual (scipy's cKDTree,
        exact k nearest: the same neighbours as the brute force up to the order of equidistant ones;
        the brute force is O(Q x N) per call and dominated whole sweeps)."""
        from scipy.spatial import cKDTree  # lazy: start-up time

        if getattr(self, "_tree", None) is None:
            self._tree = cKDTree(train)
        k = max(1, min(k, len(train)))
        dist, idx = self._tree.query(query, k)
        return np.asarray(idx, np.int64).reshape(len(query), k), np.asarray(dist, float).reshape(len(query), k)

    def factor(self, shape: dict) -> np.ndarray:
        """R for a broadcast shape (keywords named by the axes); 1 where an axis is missing or not > 0.
        Distinct query shapes are priced once (a sweep has millions of configurations, few shapes)."""
        cols = [shape.get(a, AXIS_DEFAULTS.get(a)) for a in self.axes]
        if any(c is None for c in cols):
            return np.ones(())
        cols = np.broadcast_arrays(*[np.asarray(c, float) for c in cols])
        out_shape = cols[0].shape
        q = np.stack([c.ravel() for c in cols], 1)
        ok = np.isfinite(q).all(1) & (q > 0).all(1)
        r = np.ones(len(q))
        if ok.any():
            u, inv = unique_rows(q[ok])  # = np.unique(.., axis=0, return_inverse=True)
            key = u.tobytes()  # the cost model asks twice per op (efficiency, time): price once
            if key not in self._memo:
                if len(self._memo) > 64:
                    self._memo.clear()
                self._memo[key] = np.exp(self.log_factor(np.log(u) / self.steps))
            r[ok] = self._memo[key][inv.ravel()]
        return r.reshape(out_shape)


# ---------------------------------------------------------------------------- side-car file
def file_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def save_npz(path: Path, arrays: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """Write {key: (points, logr)} to `path` (np.savez_compressed, atomically); its sha256 prefix."""
    path = Path(path)
    flat = {}
    for key, (points, logr) in sorted(arrays.items()):
        flat[f"{key}.points"] = np.asarray(points, np.float64)
        flat[f"{key}.logr"] = np.asarray(logr, np.float64)
    buf = io.BytesIO()
    np.savez_compressed(buf, **flat)
    atomic_write_bytes(path, buf.getvalue())
    return file_sha(path)


_FILES: dict = {}  # (resolved path, sha) -> {key: arrays}; a sweep loads each side-car once
_MODELS: dict = {}  # (resolved path, sha, key) -> Residual


def load_residual(block: dict, base_dir) -> Residual:
    """The Residual of an entry's `residual` block, its file resolved next to the profile; a missing
    file, a sha256 mismatch or a missing key is one CalibrationError line naming the file and the fix."""
    if block.get("_data") is not None:  # an in-memory fit (not written yet)
        return block["_data"]
    path = (Path(base_dir) if base_dir else Path(".")) / str(block["file"])
    cache_key = (str(path.resolve()), block["sha256"], block["key"])
    if cache_key in _MODELS:
        return _MODELS[cache_key]
    if not path.exists():
        raise CalibrationError(f"residual file {path} does not exist; rebuild it with `{FIX}`")
    fkey = cache_key[:2]
    if fkey not in _FILES:
        if file_sha(path) != block["sha256"]:
            raise CalibrationError(
                f"residual file {path}: sha256 does not match its profile (sha256 {block['sha256']}); rebuild with `{FIX}`"
            )
        with np.load(path) as z:
            _FILES[fkey] = {n: z[n] for n in z.files}
    arrays = _FILES[fkey]
    key = str(block["key"])
    if f"{key}.points" not in arrays or f"{key}.logr" not in arrays:
        raise CalibrationError(f"residual file {path}: no key {key!r}; rebuild it with `{FIX}`")
    model = Residual(block["axes"], arrays[f"{key}.points"], arrays[f"{key}.logr"], weights=block.get("axis_weights"))
    _MODELS[cache_key] = model
    return model
