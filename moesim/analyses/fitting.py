"""The smallest expert-parallel size at which one configuration fits in GPU memory: the hint of
`moesim estimate` when the deployment asked for (by default one GPU) does not fit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.enums import CommMode, Phase
from moesim.grid.core import Grid
from moesim.grid.validity import check_grid
from moesim.metrics.memory import memory


@dataclass(frozen=True)
class FittingEp:
    ep: int  # expert-parallel ranks
    dp: int  # attention DP groups that go with it (ep x moe_tp = tp x dp)
    gpus: int
    total_bytes: float  # memory per GPU there
    capacity_bytes: float


def smallest_fitting_ep(r) -> FittingEp | None:
    """``r``: an `EstimateResult`. Every EP size that is a valid layout with the result's TP, MoE
    TP, batch, context, MTP and redundant experts (ep x moe_tp = tp x dp; ep divides the expert
    slots) is priced for memory at once (`moesim.metrics.memory`, the estimate's own model), and
    the smallest that fits is returned; None for a dense model or when none fits."""
    m, h, c = r.model, r.hardware, r.config
    if not m.is_moe:
        return None
    phase = Phase.DECODE if c["phase"] == Phase.MIXED.value else Phase(c["phase"])  # mixed holds decode's KV
    slots = m.moe.num_experts + int(c["redundant_experts"])
    ep = np.arange(1, slots + 1, dtype=float)
    dp = ep * c["moe_tp"] / c["tp"]
    ep, dp = ep[dp == np.round(dp)], dp[dp == np.round(dp)]
    grid = Grid(tp=c["tp"], dp=dp, ep=ep, moe_tp=c["moe_tp"], batch=c["batch"], context=c["context"], mtp=c["mtp"],
                acceptance=c["acceptance"], redundant=c["redundant_experts"])  # fmt: skip
    ok, _ = check_grid(m, h, grid, phase)
    mem = memory(m, h, grid, phase, CommMode(c["comm"]))
    idx = np.flatnonzero(ok & mem.fits)
    if idx.size == 0:
        return None
    i = int(idx[0])
    return FittingEp(int(ep[i]), int(dp[i]), int(c["tp"] * dp[i]), float(mem.total_bytes[i]), float(mem.capacity_bytes))
