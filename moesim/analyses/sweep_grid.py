"""The numeric grid of a sweep: axis values per phase (defaults, the derived ep or dp) and the
rows of their cartesian product, whole (`build_grid`) or a piece at a time (`grid_piece`, for
streamed sweeps). Units: SI; batch is requests per DP group (decode, mixed) or tokens (prefill)."""

from __future__ import annotations

import numpy as np

from moesim.enums import Phase
from moesim.grid.core import AXES, Grid
from moesim.grid.layout import derive_layout
from moesim.specs.study import NUMERIC_AXES

SCALAR_DEFAULTS = {"tp": 1, "moe_tp": 1, "mtp": 0, "acceptance": 0.8, "redundant": 0}
PHASE_DEFAULTS = {
    "decode": {"batch": 32, "context": 4096},
    "mixed": {"batch": 32, "context": 4096},
    "prefill": {"batch": 16384, "context": 4096},
}


def grid_axes(axes: dict, phase: Phase, isl=None, osl=None) -> tuple[dict, str | None]:
    """Numeric axes -> ({axis: values} in `Grid.product` form, the derived axis "dp" / "ep" / None).
    Defaults per phase; ep (or dp) not given per point is derived from tp x dp = ep x moe_tp."""
    vals = {a: axes[a] for a in NUMERIC_AXES if a in axes}
    for a, v in SCALAR_DEFAULTS.items():
        vals.setdefault(a, [v])
    pd_ = PHASE_DEFAULTS[phase.value]
    vals.setdefault("batch", [pd_["batch"]])
    if "context" not in vals:
        vals["context"] = [isl + osl / 2.0] if phase == Phase.MIXED and isl and osl else [pd_["context"]]
    if phase == Phase.PREFILL:  # no drafts in prefill (as estimate): one row per remaining point
        vals["mtp"], vals["acceptance"] = [0.0], [vals["acceptance"][0]]
    has_ep, has_dp = "ep" in vals, "dp" in vals
    if not has_ep and not has_dp:
        vals["dp"] = [1.0]
        has_dp = True
    derive = None if (has_ep and has_dp) else ("dp" if has_ep else "ep")
    if derive:
        vals[derive] = [np.nan]
    return vals, derive


def derived_grid(g: Grid, derive):
    """The derived axis (dp or ep, NaN in `g`) filled in -> (grid, reason array or None)."""
    if not derive:
        return g, None
    dp, ep, reason = derive_layout(g.tp, g.dp, g.ep, g.moe_tp)  # the one tp x dp = ep x moe_tp rule
    g = Grid(**{**g.to_dict(), "dp": dp, "ep": ep})
    return g, (reason if (reason != "").any() else None)


def build_grid(axes: dict, phase: Phase, isl=None, osl=None):
    """Numeric axes -> (Grid, reason array for derived-axis problems or None). ep (or dp) not
    given per point is derived from tp x dp = ep x moe_tp, vectorized."""
    vals, derive = grid_axes(axes, phase, isl, osl)
    return derived_grid(Grid.product(**vals), derive)


def grid_size(vals: dict) -> int:
    """Rows of the cartesian product of `grid_axes` values."""
    return int(np.prod([len(np.atleast_1d(vals[a])) for a in AXES]))


def grid_piece(vals: dict, derive, start: int, stop: int):
    """Rows [start, stop) of `build_grid`'s grid without building the rest (the same row-major
    cartesian product as `Grid.product`) -> (Grid, reason or None)."""
    lists = [np.atleast_1d(np.asarray(vals[a], dtype=float)) for a in AXES]
    codes = np.unravel_index(np.arange(start, stop, dtype=np.int64), [len(x) for x in lists])
    g = Grid(**{a: x[c] for a, x, c in zip(AXES, lists, codes)})
    return derived_grid(g, derive)
