"""`--set` what-ifs that moved nothing: each override is priced once without it; where the answer
(step time, throughput, memory, max batch) is identical, the estimate says so, with the likely
reason, instead of letting a user read an unchanged number as "no effect on the deployment"."""

from __future__ import annotations

import numpy as np

from moesim.errors import MoesimError

# Why a field can be inert (moesim.perf.cost): roofline mode prices links at their nominal bandwidth
# and spec latencies; calibrated mode prices DeepEP / NCCL / pplx from fitted entries (measured per-call
# latencies, link shares of the nominal bandwidths), reading the achievable bandwidths only where no
# fitted entry prices the traffic (e.g. --comm nccl across nodes).
_ROOFLINE_EFF = "roofline mode prices links at their nominal bandwidth (rdma_bw_GBps / nvlink_bw_GBps)"
_FITTED_COMM = (
    "calibrated mode prices this traffic from fitted comm entries (measured latencies, link shares of "
    "the nominal rdma_bw_GBps / nvlink_bw_GBps); what-if the nominal bandwidth instead"
)
REASONS = {
    ("roofline", "rdma_eff_bw_GBps"): _ROOFLINE_EFF,
    ("roofline", "nvlink_eff_bw_GBps"): _ROOFLINE_EFF,
    **{(m, f): _FITTED_COMM for m in ("calibrated", "measured") for f in ("rdma_eff_bw_GBps", "nvlink_eff_bw_GBps")},
    **{(m, f): _FITTED_COMM for m in ("calibrated", "measured") for f in ("rdma_latency_us", "nvlink_latency_us")},
}
SIGNATURE = ("step_time_s", "tokens_per_s_per_gpu", "max_batch")


def _signature(r) -> tuple:
    vals = tuple(float(np.asarray(r.values[k]).reshape(-1)[0]) for k in SIGNATURE if k in r.values)
    return vals + (float(r.memory.get("total_bytes", np.nan)),)


def inert_whatif_notes(estimate, kwargs: dict, result) -> list[str]:
    """Notes for each `set` item of `kwargs` whose removal leaves `result`'s answer unchanged
    (`estimate(**kwargs)` re-priced once per item; a single configuration, so ~one estimate each)."""
    items = list(kwargs.get("set") or [])
    notes, base = [], _signature(result)
    for i, item in enumerate(items):
        try:
            other = estimate(**{**kwargs, "set": items[:i] + items[i + 1 :]})
        except MoesimError:  # without it the configuration is invalid: it clearly mattered
            continue
        if _signature(other) != base:
            continue
        moved = _moved_ops(other, result)
        if moved:  # read, but off the critical path
            notes.append(f"--set {item} moved {', '.join(moved)} but not the step: hidden by the overlap")
            continue
        field = str(item).split("=", 1)[0].split(".")[-1].strip()
        mode = str(result.config.get("cost_mode") or "calibrated")
        why = REASONS.get((mode, field), "nothing this configuration prices reads it")
        notes.append(f"--set {item} changed nothing here: {why}")
    return notes


def _moved_ops(a, b) -> list[str]:
    """Names of the ops whose time differs between two results of the same configuration."""
    ta = {o["name"]: float(o["time_s"]) for o in a.ops}
    return [o["name"] for o in b.ops if ta.get(o["name"]) != float(o["time_s"])]
