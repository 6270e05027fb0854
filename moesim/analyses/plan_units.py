"""Helpers of the capacity planners (`moesim.analyses.plan`, `moesim.analyses.plan_agg`): whole
deployment units, the NIC warning, integer-valued floats."""

from __future__ import annotations

from dataclasses import dataclass, field

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


UNITS = {"tokens": "tokens", "rates": "tokens/s", "money": "USD", "time": "s (hourly bins of 1 h)", "bandwidth": "B/s"}


@dataclass
class HourlyPlan:
    """What every plan result holds and reads the same way (the pools' plan and the aggregated
    one): the day, the specs' names, the `hourly` arrays, `totals`, `economics`; each result adds
    its pools (keyword-only fields) and the pools' sections of `to_dict()`."""

    traffic: object
    model: str
    hardware: str
    cost_mode: str
    gpus_per_node: int
    usd_per_gpu_hour: float
    kv_bytes_per_token: float
    hourly: dict  # arrays over the window's hours
    totals: dict
    economics: dict
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    pricing: dict = field(default_factory=dict)  # engine and profile file (engine.pricing.profile_info)

    def plan_dict(self, pools: dict) -> dict:
        """The plan's JSON: totals, economics, the result's `pools` sections, then what every plan
        has (specs, traffic, hours, units, notes)."""
        return (
            jsonable(self.totals)
            | jsonable(self.economics)
            | pools
            | {
                "model": self.model,
                "hardware": self.hardware,
                "cost_mode": self.cost_mode,
                **self.pricing,
                "gpus_per_node": self.gpus_per_node,
                "kv_bytes_per_token": self.kv_bytes_per_token,
                "traffic": self.traffic.to_dict(),
                "hourly": self.hourly_rows(),
                "units": dict(UNITS),
                "warnings": list(self.warnings),
                "notes": list(self.notes),
            }
        )

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
