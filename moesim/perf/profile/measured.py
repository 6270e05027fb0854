"""Measured kernel tables of a profile (`kernels.<family>.measurements`): raw times, log-log
interpolated along m (GEMMs) or context (MLA decode) where this GPU's own measurements cover the
shape. Vectorized over broadcast shape arrays (the `measured` cost mode prices grids with it)."""

from __future__ import annotations

import numpy as np

MAX_GAP = 4.0  # measured_time interpolates only between points at most this ratio apart

# key columns and the interpolation axis per family
TABLE_AXES = {
    "gemm": (("n", "k"), "m"),
    "grouped_gemm": (("layout", "groups", "n", "k"), "m"),
    "mla_decode": (("heads", "q_len", "batch"), "context"),
}
SHAPE_KEYS = ("m", "n", "k", "groups", "batch", "q_len", "context", "heads")


def _arr(x):
    return np.asarray(x, dtype=float)


def numeric_shape(shape: dict):
    """Broadcast shape of the numeric shape keywords (() when none is given)."""
    arrays = [v for k, v in shape.items() if k in SHAPE_KEYS and v is not None]
    return np.broadcast(*[np.asarray(a) for a in arrays]).shape if arrays else ()


def build_table(family: str, e: dict | None):
    """[(key, log axis values, log median times)] of a fitted/measured entry's measurements, or None."""
    meas = (e or {}).get("measurements")
    if not e or e.get("status") not in ("fitted", "measured") or not meas or family not in TABLE_AXES:
        return None
    keys, axis = TABLE_AXES[family]
    cols = list(meas.get("columns") or [])
    if any(c not in cols for c in keys if c != "layout") or axis not in cols or "time_s" not in cols:
        return None
    groups: dict = {}
    for row in meas.get("rows") or []:
        rec = dict(zip(cols, row))
        key = tuple(
            str(rec.get(c, ""))
            if c == "layout"
            else float(rec.get(c) if rec.get(c) is not None else (1.0 if c == "groups" else np.nan))
            for c in keys
        )
        groups.setdefault(key, []).append((float(rec[axis]), float(rec["time_s"])))
    table = []
    for key, pts in groups.items():
        xs = np.array(sorted({x for x, _ in pts}))
        ts = np.array([np.median([t for x2, t in pts if x2 == x]) for x in xs])
        table.append((key, np.log(xs), np.log(ts)))
    return table


def _select(keys, key, cols, layout, lx, xs, shape):
    """Configurations of this table key whose log axis value lies inside the measured range."""
    sel = np.ones(shape, dtype=bool)
    for c, kv in zip(keys, key):
        if c == "layout":
            if kv:
                sel &= (layout == kv) | (layout == "")
        else:
            sel &= np.isclose(cols[c], kv, rtol=1e-6, atol=1e-9)
    return sel & np.isfinite(lx) & (lx >= xs[0] - 1e-9) & (lx <= xs[-1] + 1e-9)


def measured_time(table, family: str, shape: dict):
    """Raw measured kernel times (s), log-log interpolated along m (GEMMs) or context (MLA) where
    the table covers the shape (same n, k, groups, layout / heads, q_len, batch; between two
    measured points at most MAX_GAP apart, or on one); NaN elsewhere."""
    if family not in TABLE_AXES:
        return np.full(numeric_shape(shape), np.nan)
    keys, axis = TABLE_AXES[family]
    arrays = {c: shape.get(c) for c in keys if c != "layout"}
    if family == "grouped_gemm" and arrays.get("groups") is None:
        arrays["groups"] = 1.0
    if shape.get(axis) is None or any(v is None for v in arrays.values()):
        return np.full(numeric_shape(shape), np.nan)
    lay = shape.get("layout")
    lay = np.asarray("" if lay is None else lay, dtype=object)
    bc = np.broadcast(_arr(shape[axis]), lay, *[_arr(v) for v in arrays.values()])
    out = np.full(bc.shape, np.nan)
    if not table:
        return out
    x = np.broadcast_to(_arr(shape[axis]), bc.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        lx = np.log(x)
    cols = {c: np.broadcast_to(_arr(v), bc.shape) for c, v in arrays.items()}
    layout = np.broadcast_to(lay, bc.shape) if "layout" in keys else None
    for key, xs, ts in table:
        sel = _select(keys, key, cols, layout, lx, xs, bc.shape)
        if not sel.any():
            continue
        q = lx[sel]
        if len(xs) == 1:
            out[sel] = np.exp(ts[0])
            continue
        j = np.clip(np.searchsorted(xs, q), 1, len(xs) - 1)
        gap_ok = (xs[j] - xs[j - 1] <= np.log(MAX_GAP) + 1e-9) | np.isclose(q, xs[j]) | np.isclose(q, xs[j - 1])
        val = np.exp(np.interp(q, xs, ts))
        cur = out[sel]
        out[sel] = np.where(gap_ok, val, cur)
    return out
