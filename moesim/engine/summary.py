"""A priced workload reduced to what schedules and metrics need (one micro-batch count)."""

from __future__ import annotations

import numpy as np

from moesim.enums import BoundCode
from moesim.schedule.primitives import seq
from moesim.schedule.schemes import StageSums, ideal_period


class Summary:
    """A priced workload (one micro-batch count) reduced to what schedules and metrics need:
    stage sums per layer group, step extras, time by bound, FLOPs and resource totals per step."""

    def __init__(self, wl, groups, ub, skip=()):
        self.ub = ub
        self.n_moe, self.n_dense, self.mtp_count = wl.n_moe_layers, wl.n_dense_layers, wl.mtp_count
        self.has = {name: bool(groups[name]) for name in groups}
        keep = {name: [c for c in groups[name] if not (set(skip) & c.tags)] for name in groups}
        self.sums = {name: StageSums(keep[name]) for name in ("moe_layer", "dense_layer")}
        mtp = groups["mtp"]
        self.extra = {
            "step": seq(*[c.time_s for c in keep["step"]]),
            "mtp": seq(mtp[0].time_s, mtp[-1].time_s) if mtp else 0.0,
        }
        counted = (
            [(c, self.n_moe * ub) for c in keep["moe_layer"]]
            + [(c, self.n_dense * ub) for c in keep["dense_layer"]]
            + [(c, ub) for c in keep["step"]]
            + [(c, self.mtp_count * ub) for c in keep["mtp"]]
        )
        self.counted = counted
        self.acc = _bound_times(counted)
        self.flops = seq(*[c.flops * n for c, n in counted])
        self.ideal = ideal_period([c for c, _n in counted], counts=[n for _c, n in counted])[1]
        self.layer_ideal = {name: ideal_period(keep[name])[1] for name in ("moe_layer", "dense_layer")}

    def core_count(self):
        """How many times per step the attention core runs (per micro-batch count)."""
        n = (self.n_moe if self.has["moe_layer"] else 0) + (self.n_dense if self.has["dense_layer"] else 0)
        return (n + (self.mtp_count if self.has["mtp"] else 0.0)) * self.ub

    def expand(self, inv, core):
        """Rows `inv` of this (deduplicated) summary plus the attention core priced on every row."""
        take = lambda x: np.asarray(x)[..., inv] if np.ndim(x) else x  # noqa: E731
        out = object.__new__(Summary)
        out.ub, out.n_moe, out.n_dense, out.has = self.ub, self.n_moe, self.n_dense, self.has
        out.mtp_count = take(self.mtp_count)
        out.sums = {}
        for name, ss in self.sums.items():
            e = object.__new__(StageSums)
            e.stage = {k: take(v) for k, v in ss.stage.items()}
            e.named = {k: take(v) for k, v in ss.named.items()}
            e.gemm = {k: take(v) for k, v in ss.gemm.items()}
            e.comm = {k: take(v) for k, v in ss.comm.items()}
            e.sm_share = take(ss.sm_share)
            if self.has[name]:
                e.stage[core.stage] = seq(e.stage.get(core.stage, 0.0), core.time_s)
            out.sums[name] = e
        out.extra = {k: take(v) for k, v in self.extra.items()}
        n = out.core_count()
        out.counted = None
        out.acc = take(self.acc) + np.stack([np.where(core.bound == b, core.time_s * n, 0.0) for b in BoundCode])
        out.flops = take(self.flops) + core.flops * n
        comp, mem, net = (take(x) for x in self.ideal)
        out.ideal = (comp + core.compute_s * n, mem + core.memory_s * n, net)
        out.layer_ideal = {}
        for name, (c, m, k) in self.layer_ideal.items():
            add = 1.0 if self.has[name] else 0.0
            out.layer_ideal[name] = (take(c) + core.compute_s * add, take(m) + core.memory_s * add, take(k))
        return out


def _bound_times(counted):
    """(len(BoundCode), N) time per step spent in ops bound by compute / memory / network / latency."""
    n_cfg = max([np.size(c.time_s) for c, _ in counted] + [1])
    nb = len(BoundCode)
    acc = np.zeros(nb * n_cfg)
    col = np.arange(n_cfg)
    for c, n in counted:  # loop over ops (~100), each a vector over all configurations
        t = np.broadcast_to(np.asarray(c.time_s * n, float), (n_cfg,))
        b = np.broadcast_to(c.bound, (n_cfg,))
        acc += np.bincount(b * n_cfg + col, weights=t, minlength=nb * n_cfg)
    return acc.reshape(nb, n_cfg)
