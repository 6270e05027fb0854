"""The allowed range of a profile entry's parameter (Num) and the common ranges the model modules
declare their parameters with (moesim.perf.models.<model>.PARAMS; checked by moesim.perf.profile.schema)."""

from __future__ import annotations

from typing import NamedTuple


class Num(NamedTuple):
    """An allowed number: lo <= v (lo < v when lo_open) <= hi; optional ones may be absent or null."""

    lo: float
    hi: float | None = None
    lo_open: bool = False
    optional: bool = False
    integer: bool = False
    inf_ok: bool = False  # +inf allowed (the overlap model's q: .inf = max)


ETA = Num(0.0, 1.0, lo_open=True)  # an efficiency, a fraction of a peak (dimensionless)
US = Num(0.0, 1e6)  # a time in microseconds
GBPS = Num(0.0, 1e6, lo_open=True)  # a bandwidth in GB/s (1e9 B/s)
FRAC = Num(0.0, 1.0, lo_open=True, optional=True)  # an optional fraction of a nominal link
BW_FRAC = Num(0.0, 3.0, lo_open=True)  # a fitted bandwidth over the achievable link it scales
