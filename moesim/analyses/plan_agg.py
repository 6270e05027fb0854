"""Capacity plan with ONE aggregated pool (traffic `aggregated:`): prefill and decode on the same
GPUs, priced by the aggregated-serving model (`moesim.engine.serving`: the engine's scheduler,
closed loop at a concurrency, TTFT = M/G/1 priority wait + the prompt's own passes).

Method (the model's own predictions; no published throughput is an input):

* requests: ISL = the computed prompt tokens, prompt_length x (1 - cache-hit share) (hits skip
  prefill compute, as in the two-pool plan; the computed tail's attention to the cached head is
  not priced: a small underestimate); OSL = output_length's mean, else output / requests
  (requests = input tokens / prompt_length); decode context = the traffic's context.
* operating point: ONE `serve` call sweeps the concurrency per DP group (micro-batches..max_batch)
  at the pool's deployment; the planner takes the concurrency with the most output tokens/s per
  node that fits memory, is stable, keeps tokens/s per user (1 / TPOT) >= the SLO and, with
  max_ttft_s, the mean TTFT <= the target. Input is served with the output (each request brings
  its prompt: the ISL / OSL ratio is the traffic's).
* per hour: nodes = output tokens/s / output tokens/s per node, rounded up to whole units.
  No prefill -> decode KV transfer; the cache hits' KV load is checked against the pool's NICs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moesim.analyses.capacity import specs_of
from moesim.analyses.plan_units import HourlyPlan, intish, nic_warnings, units_for
from moesim.engine.serving import evaluate_mixed
from moesim.engine.settings import Pricing
from moesim.enums import Overlap
from moesim.errors import ConfigError
from moesim.grid.core import Grid
from moesim.grid.validity import check_grid
from moesim.metrics.economics import day_economics
from moesim.schedule.schemes import micro_batches
from moesim.specs.pools import DecodePool

__all__ = ["AggregatedCapacity", "AggregatedPlan", "aggregated_capacity", "plan_aggregated"]


@dataclass(frozen=True)
class AggregatedCapacity:
    """The aggregated pool's operating point, chosen from the concurrency sweep."""

    batch: int  # concurrent requests per DP group (closed loop)
    tokens_per_s_per_node: float  # output tokens/s per node
    tokens_per_s_per_gpu: float
    input_tokens_per_s_per_node: float  # computed prompt tokens/s per node
    tokens_per_s_per_user: float
    tpot_s: float
    ttft_s: float  # mean
    ttft_p90_s: float
    decode_step_time_s: float
    requests_per_s_per_unit: float
    scheduler: str
    limited_by: str  # "slo" | "ttft" | "memory" | "sweep" (max_batch reached)
    isl: float
    osl: float
    gpus: int
    nodes_per_unit: float
    sweep: dict = field(repr=False, default_factory=dict)


def request_lengths(t, hit_share: float) -> tuple[float, float]:
    """(ISL computed per request, OSL) from the traffic (module doc)."""
    isl = t.prompt_length * (1.0 - hit_share)
    if t.output is not None:
        return isl, float(t.output.mean)
    if t.input_tokens <= 0:
        raise ConfigError("aggregated: needs input tokens or output_length to size the requests")
    return isl, t.output_tokens * t.prompt_length / t.input_tokens


def aggregated_capacity(m, h, pool: DecodePool, *, isl, osl, context, min_tps, max_ttft_s, pricing: Pricing, notes):
    """One serving evaluation over the concurrency 1..pool.max_batch -> AggregatedCapacity."""
    lo = micro_batches(Overlap(pool.overlap).value) if pool.overlap else 1  # a request per micro-batch at least
    batches = np.arange(min(lo, int(pool.max_batch)), int(pool.max_batch) + 1, dtype=float)
    grid = Grid.product(tp=pool.tp, dp=pool.dp, ep=pool.ep, moe_tp=1, batch=batches, context=context, mtp=pool.mtp,
                        acceptance=pool.acceptance, redundant=pool.redundant_experts)  # fmt: skip
    ok, reason = check_grid(m, h, grid, "decode")
    if not ok.all():
        raise ConfigError(f"aggregated: {reason[~ok][0]}")
    v, ns = evaluate_mixed(m, h, grid, isl=isl, osl=osl, overlap=pool.overlap, pricing=pricing.replace(comm=pool.comm))
    if notes is not None:
        notes.extend(ns)
    checks = {
        "memory": np.asarray(v["fits"], bool) & np.asarray(v["stable"], bool),
        "slo": np.asarray(v["tokens_per_s_per_user"], float) >= min_tps,
        "ttft": np.ones(batches.size, bool) if max_ttft_s is None else np.asarray(v["ttft_s"], float) <= max_ttft_s,
    }
    good = checks["memory"] & checks["slo"] & checks["ttft"]
    where = f"aggregated EP{pool.ep} DP{pool.dp} TP{pool.tp} on {h.name} (ISL {isl:,.0f}, OSL {osl:,.0f})"
    if not good.any():
        failed = next(k for k in ("memory", "slo", "ttft") if not (checks[k] & checks["memory"]).any())
        raise ConfigError(f"aggregated: no concurrency 1..{pool.max_batch} at {where} meets {failed} "
                          f"(memory and a stable queue, slo.min_tokens_per_s_per_user, slo.max_ttft_s)")  # fmt: skip
    node = np.asarray(v["tokens_per_s_per_node"], float)
    i = int(np.argmax(np.where(good, node, -np.inf)))
    nxt = "sweep" if i == batches.size - 1 else next((k for k in checks if not checks[k][i + 1]), "slo")
    f = lambda k: float(v[k][i])  # noqa: E731
    gpn = float(h.gpus_per_node)
    return AggregatedCapacity(
        batch=int(batches[i]), tokens_per_s_per_node=f("tokens_per_s_per_node"),
        tokens_per_s_per_gpu=f("tokens_per_s_per_gpu"), input_tokens_per_s_per_node=f("input_tokens_per_s_per_gpu") * gpn,
        tokens_per_s_per_user=f("tokens_per_s_per_user"), tpot_s=f("tpot_s"), ttft_s=f("ttft_s"),
        ttft_p90_s=f("ttft_p90_s"), decode_step_time_s=f("decode_step_time_s"),
        requests_per_s_per_unit=f("request_rate_per_s"), scheduler=str(v["scheduler"][i]), limited_by=nxt,
        isl=float(isl), osl=float(osl), gpus=int(pool.gpus), nodes_per_unit=pool.gpus / gpn,
        sweep={"batch": batches, "tokens_per_s_per_node": node, "ttft_s": v["ttft_s"], "tpot_s": v["tpot_s"]},
    )  # fmt: skip


@dataclass
class AggregatedPlan(HourlyPlan):
    """A plan with one aggregated pool (same reading as `PlanResult`; `aggregated` replaces the
    prefill and decode pools)."""

    aggregated: AggregatedCapacity = field(kw_only=True)

    def to_dict(self) -> dict:
        a, p = self.aggregated, self.traffic.aggregated
        pool = {k: getattr(p, k) for k in ("ep", "dp", "tp", "mtp", "acceptance", "max_batch", "redundant_experts")}
        section = {k: getattr(a, k) for k in a.__dataclass_fields__ if k != "sweep"}
        extra = {"overlap": p.overlap, "batch_units": "concurrent requests per DP group"}
        return self.plan_dict({"aggregated": section | pool | extra})


def plan_aggregated(t, model, hardware, set_, pricing: Pricing, info: dict, notes: list) -> AggregatedPlan:
    """The plan of module doc, priced by `pricing` (info: its engine and profile file, `profile_info`;
    `notes` collects the notes)."""
    cost_mode = pricing.cost_mode.value
    m, h = specs_of(model, hardware, set_)
    hit_share = t.cache_hit_tokens / t.input_tokens if t.input_tokens > 0 else 0.0
    isl, osl = request_lengths(t, min(hit_share, 1.0 - 1e-9))
    agg = aggregated_capacity(m, h, t.aggregated, isl=isl, osl=osl, context=t.context,
                              min_tps=t.min_tokens_per_s_per_user, max_ttft_s=t.max_ttft_s, pricing=pricing,
                              notes=notes)  # fmt: skip
    gpn, kvb = int(h.gpus_per_node), float(m.kv_bytes_per_token)
    price = h.usd_per_gpu_hour if t.usd_per_gpu_hour is None else t.usd_per_gpu_hour
    hourly = _hourly(t, agg, h, kvb, gpn, price)
    nodes = hourly["nodes"]
    node_hours, peak = float(nodes.sum()), float(nodes.max())
    totals = {
        "average_nodes": node_hours / t.hours,
        "average_nodes_fractional": float(hourly["aggregated_nodes_fractional"].mean()),
        "peak_nodes": intish(peak), "aggregated_nodes_per_unit": agg.nodes_per_unit, "hours": t.hours,
        "node_hours": node_hours, "gpu_hours": node_hours * gpn, "offpeak_node_hours_freed": peak * t.hours - node_hours,
        "offpeak_gpu_hours_freed": (peak * t.hours - node_hours) * gpn, "cache_hit_share": hit_share,
        "peak_nic_utilisation": float(hourly["nic_utilisation"].max()),
    }  # fmt: skip
    econ = day_economics(t, totals["average_nodes"], gpus_per_node=gpn, usd_per_gpu_hour=price)
    notes.append("one aggregated pool: prefill and decode share the GPUs (the engine's scheduler, closed loop at the "
                 "planned concurrency); cache hits skip prefill compute; no prefill->decode KV transfer")  # fmt: skip
    return AggregatedPlan(t, m.name, h.name, cost_mode, gpn, float(price), kvb, hourly, totals, econ,
                          nic_warnings(hourly["nic_utilisation"], t.hours, h), list(dict.fromkeys(notes)),
                          info, aggregated=agg)  # fmt: skip


def _hourly(t, agg: AggregatedCapacity, h, kvb: float, gpn: int, price) -> dict:
    """Arrays over the window's hours: token rates, the pool's nodes (whole units), cost, NIC use."""
    out_rate = t.hourly_rate(t.output_tokens)
    hit_rate = t.hourly_rate(t.cache_hit_tokens)
    frac = out_rate / agg.tokens_per_s_per_node
    units = units_for(frac, agg.nodes_per_unit)
    nodes = units * agg.nodes_per_unit
    cap = nodes * gpn * h.rdma_Bps(False)
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(cap > 0, hit_rate * kvb / cap, np.where(hit_rate > 0, np.inf, 0.0))
    return {
        "hour": np.arange(t.hours),
        "weight": t.weights,
        "output_tokens_per_s": out_rate,
        "input_tokens_per_s": t.hourly_rate(t.input_tokens),
        "cache_hit_tokens_per_s": hit_rate,
        "aggregated_nodes_fractional": frac,
        "aggregated_units": units,
        "nodes": nodes,
        "cost_usd": nodes * gpn * price,
        "kv_hit_load_Bps": hit_rate * kvb,
        "nic_utilisation": util,
    }
