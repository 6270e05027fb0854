"""THE parallel layout rule: every GPU holds attention and experts, so tp x dp = ep x moe_tp (= GPUs).

One derivation, vectorized (`derive_layout`: arrays, NaN = "derive this one", with a reason per row) and
scalar (`resolve_parallel`: raises a one-line ConfigError). Dense models have no experts: ep = 1 and
the FFN is split over every GPU (moe_tp = tp x dp).
"""

from __future__ import annotations

import numpy as np

from moesim.errors import ConfigError, check_number
from moesim.specs.model import ModelSpec

MAX_GPUS = 1_000_000

DP_REASON = "dp: ep x moe_tp must be a multiple of tp (dp is derived as ep x moe_tp / tp)"
EP_REASON = "ep: tp x dp must be a multiple of moe_tp (ep is derived as tp x dp / moe_tp)"


def derive_layout(tp, dp, ep, moe_tp):
    """Fill dp (where NaN) from ep x moe_tp / tp, else ep (where NaN) from tp x dp / moe_tp.
    -> (dp, ep, reason): reason is '' where the derived degree is whole."""
    tp, dp, ep, moe_tp = np.broadcast_arrays(*(np.asarray(x, float) for x in (tp, dp, ep, moe_tp)))
    want_dp, want_ep = np.isnan(dp), np.isnan(ep) & ~np.isnan(dp)
    dp = np.where(want_dp, ep * moe_tp / tp, dp)
    ep = np.where(want_ep, tp * dp / moe_tp, ep)
    reason = np.full(dp.shape, "", dtype=object)  # (a fixed-width str array of the reasons is ~300 B a row)
    reason[want_dp & (dp != np.round(dp))] = DP_REASON
    reason[want_ep & (ep != np.round(ep))] = EP_REASON
    return dp, ep, reason


def parallel_degree(name: str, v):
    """None, or a positive whole number (an int, or a float/numpy value equal to one)."""
    if v is None:
        return None
    return check_number(
        name, v, lo=1, integer=True, message=f"{name}: {v!r} must be a positive integer (1 .. {MAX_GPUS:,} GPUs)"
    )


def resolve_parallel(model: ModelSpec, tp, dp, ep, moe_tp):
    """Fill the missing one of tp x dp = ep x moe_tp (= GPUs); scalar, raises on a bad layout."""
    tp, dp, ep, moe_tp = (parallel_degree(n, v) for n, v in (("tp", tp), ("dp", dp), ("ep", ep), ("moe_tp", moe_tp)))
    tp = 1 if tp is None else tp
    moe_tp = 1 if moe_tp is None else moe_tp
    if not model.is_moe:
        ep = 1 if ep is None else ep
        dp = 1 if dp is None else dp
        moe_tp = tp * dp if moe_tp == 1 and ep == 1 else moe_tp
        return tp, dp, ep, moe_tp
    if dp is None and ep is None:
        dp = 1
    nan = float("nan")
    d, e, reason = derive_layout(tp, nan if dp is None else dp, nan if ep is None else ep, moe_tp)
    reason = reason.reshape(-1)[0]
    if reason == DP_REASON:
        raise ConfigError(f"dp: ep x moe_tp = {ep * moe_tp} is not divisible by tp = {tp}; pass --dp explicitly")
    if reason == EP_REASON:
        raise ConfigError(f"ep: tp x dp = {tp * dp} is not divisible by moe_tp = {moe_tp}")
    return tp, int(d.reshape(-1)[0]), int(e.reshape(-1)[0]), moe_tp
