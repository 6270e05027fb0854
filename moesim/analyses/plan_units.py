"""Helpers of the capacity planners (`moesim.analyses.plan`, `moesim.analyses.plan_agg`): whole
deployment units, the NIC warning, integer-valued floats."""

from __future__ import annotations

import numpy as np

from moesim.units import jsonable

__all__ = ["units_for", "nic_warnings", "intish", "HourlyPlan"]


def units_for(nodes_fractional, nodes_per_unit: float):
    """Whole deployment units covering the fractional node need (0 when there is no traffic)."""
    x = np.asarray(nodes_fractional, float) / nodes_per_unit
    return np.ceil(x - 1e-9 * np.maximum(1.0, x)).astype(int).clip(min=0)


def nic_warnings(nic_util, hours: int, h) -> list:
    """A warning when the KV transfer exceeds (or nears) the pools' NIC capacity in some hour."""
    over = np.nonzero(nic_util > 1.0)[0]
    if not np.all(np.isfinite(nic_util)):  # inf: KV flows where a pool has 0 nodes (never printed as inf)
        n = int(np.sum(~np.isfinite(nic_util)))
        return [f"KV transfer flows in {n} of {hours} hours while a pool is planned at 0 nodes; NIC use n/a"]
    if over.size:
        return [
            f"KV transfer exceeds the NIC capacity in {over.size} of {hours} hours (peak "
            f"{nic_util.max():.2f}x of rdma {h.rdma_bw_GBps:g} GB/s x GPUs); prefill->decode "
            f"transfer would throttle: add pool NICs or raise the cache hit rate"
        ]
    if nic_util.max() > 0.5:
        return [
            f"KV transfer uses up to {nic_util.max() * 100:.0f}% of the pools' NIC capacity; it shares "
            f"the NICs with the EP all-to-all"
        ]
    return []


def intish(x: float):
    return int(x) if float(x).is_integer() else float(x)


class HourlyPlan:
    """What every plan result reads the same way (the pools' plan and the aggregated one): its
    `hourly` arrays, `totals` and `to_dict()` (defined by each result)."""

    def __getitem__(self, key):
        return self.to_dict()[key]

    @property
    def average_nodes(self) -> float:
        return self.totals["average_nodes"]

    @property
    def peak_nodes(self) -> int:
        return self.totals["peak_nodes"]

    def hourly_rows(self) -> list:
        keys = list(self.hourly)
        return [{k: jsonable(self.hourly[k][i]) for k in keys} for i in range(len(self.hourly["hour"]))]

    def to_dataframe(self):
        import pandas as pd  # lazy: start-up time (the CLI imports the plan modules for --help)

        return pd.DataFrame(self.hourly_rows())
