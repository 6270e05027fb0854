"""Capacity planner: a traffic spec -> nodes per hour, GPU-hours, cost, $ per million tokens,
theoretical revenue and margin, KV-transfer check.

Method (everything from the model's own predictions; no published throughput is an input):

* decode capacity: one ``evaluate_grid`` call sweeps the batch (requests per DP group,
  1..decode.max_batch) at the decode deployment (EP144 DP144 TP1, MTP, traffic context,
  five-stage overlap by default); the planner takes the largest batch that fits memory and keeps
  ``min_tokens_per_s_per_user`` -> output tokens/s per node.
* prefill capacity: one ``evaluate_grid`` call over candidate batches (prompt tokens per DP
  group, ``prefill.batch_tokens`` halved down) at the prefill deployment (EP32 DP32, prompt
  length distribution); the computed tail of each prompt attends to its cached head (cache-hit
  share); with ``max_ttft_s`` the pool runs at the utilisation where the M/G/1 mean TTFT (queueing
  wait + step time x steps per prompt) meets the target, best batch chosen -> computed
  (cache-miss) tokens/s per node.
* per hour: decode nodes = output tokens/s / decode tokens/s per node; prefill nodes =
  cache-miss input tokens/s / prefill tokens/s per node (cache hits skip prefill compute);
  each pool is rounded up to whole deployment units (nodes per unit = GPUs per unit / GPUs per
  node: 4 for EP32 and 18 for EP144 on 8-GPU nodes). The fractional (unrounded) average is also
  reported.
* KV transfer: every prompt token's KV (kv_bytes_per_token x input tokens, hits included) moves
  prefill -> decode over RDMA; the KV of cache hits is also loaded into the prefill pool over
  its NICs. Neither is costed in nodes; both are checked against the pools' NIC capacity
  (hardware rdma_bw x GPUs, per direction) with a warning when an hour exceeds it.
* economics (moesim.metrics.economics): cost = average nodes x GPUs/node x 24 h x $/GPU-hour per day;
  revenue at list prices; margin = revenue / cost - 1; $ per million output tokens charges the
  whole cost to output (DeepSeek's method); a pool-attributed view charges the prefill pool to
  cache-miss input, the decode pool to output, and nothing to cache hits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from moesim.analyses import verify as V
from moesim.analyses.capacity import (
    DecodeCapacity,
    PrefillCapacity,
    decode_capacity,
    prefill_capacity,
    specs_of,
)
from moesim.analyses.plan_agg import plan_aggregated
from moesim.analyses.plan_units import HourlyPlan, intish, nic_warnings, units_for
from moesim.engine.pricing import load_profile_for, profile_info
from moesim.engine.settings import Pricing
from moesim.errors import ConfigError
from moesim.metrics.economics import day_economics
from moesim.specs.traffic import Traffic, load_traffic, traffic_from_dict
from moesim.units import jsonable

__all__ = [
    "plan",
    "PlanResult",
    "DecodeCapacity",
    "PrefillCapacity",
    "decode_capacity",
    "prefill_capacity",
    "day_economics",
    "units_for",
]


# --------------------------------------------------------------------------- the plan
@dataclass
class PlanResult(HourlyPlan):
    decode: DecodeCapacity = field(kw_only=True)
    prefill: PrefillCapacity = field(kw_only=True)
    verified: dict | None = field(kw_only=True, default=None)  # the simulated prefill unit (verify_prefill)

    def to_dict(self) -> dict:
        d, p = self.decode, self.prefill
        pools = {
            "decode_tokens_per_s_per_node": d.tokens_per_s_per_node,
            "prefill_tokens_per_s_per_node": p.tokens_per_s_per_node,
            "decode_batch": d.batch,
            "decode": self._decode_section(),
            "prefill": self._prefill_section(),
        }
        if self.verified is not None:
            pools["verified_prefill"] = jsonable(self.verified)
        return self.plan_dict(pools)

    def _decode_section(self) -> dict:
        d, t = self.decode, self.traffic
        figures = {
            "tokens_per_s_per_user": d.tokens_per_s_per_user,
            "step_time_s": d.step_time_s,
            "tpot_s": d.tpot_s,
            "max_batch_memory": d.max_batch_memory,
        }
        drafts = {"mtp": t.decode.mtp, "acceptance": t.decode.acceptance}
        batch = ("batch", d.batch, "requests per DP group")
        return _pool_section(d, t.decode, batch, figures, drafts, {"context": t.context})

    def _prefill_section(self) -> dict:
        p, t = self.prefill, self.traffic
        figures = {
            "input_tokens_per_s_per_node_incl_hits": jsonable(self.totals["prefill_input_tokens_per_s_per_node"]),
            "ttft_s": p.ttft_s,
            "ttft_kind": "mean (M/G/1 queueing + compute)"
            if t.max_ttft_s
            else "compute only (no queueing: no TTFT target, planned at full load)",
            "utilisation": p.utilisation,
            "full_load_tokens_per_s_per_node": p.full_load_tokens_per_s_per_node,
            "step_time_s": p.step_time_s,
        }
        prompt = {
            "prompt_length": t.prompt_length,
            "prompt_distribution": t.prompt.describe(),
            "attention_context": t.prompt.moment_ratio() * (1.0 + self.totals["cache_hit_share"]),
        }
        batch = ("batch_tokens", p.batch_tokens, "prompt tokens per DP group")
        return _pool_section(p, t.prefill, batch, figures, {}, prompt)


def _pool_section(cap, pool, batch: tuple, figures: dict, drafts: dict, inputs: dict) -> dict:
    """What both pools report, in this order: the batch (key, value, units), what limits it, the
    throughput, the pool's own figures, its deployment (drafts after TP), its traffic inputs."""
    key, value, units = batch
    return {
        key: value,
        "batch_units": units,
        "limited_by": cap.limited_by,
        "tokens_per_s_per_node": cap.tokens_per_s_per_node,
        "tokens_per_s_per_gpu": cap.tokens_per_s_per_gpu,
        **figures,
        "overlap": cap.overlap,
        "ep": pool.ep,
        "dp": pool.dp,
        "tp": pool.tp,
        **drafts,
        "redundant_experts": pool.redundant_experts,
        "gpus_per_unit": cap.gpus,
        "nodes_per_unit": cap.nodes_per_unit,
        **inputs,
    }


def _as_traffic(traffic) -> Traffic:
    if isinstance(traffic, Traffic):
        return traffic
    if isinstance(traffic, dict):
        return traffic_from_dict(traffic)
    if isinstance(traffic, (str, Path)):
        return load_traffic(traffic)
    raise ConfigError(f"traffic: {type(traffic).__name__}; allowed a Traffic, a mapping or a YAML path")


def plan(traffic, model="deepseek-v3", hardware="h800", cost_mode=None, *, set=None, pricing: Pricing | None = None,
         verify=False, **kw) -> PlanResult:  # fmt: skip
    """Nodes, cost and economics for a traffic window (see the module doc for the method), priced by
    `pricing` (default `Pricing()`; cost_mode and the other `Pricing` fields may be given as keywords,
    which win; its engine picks the calibration profile: sglang, trtllm, vllm). A traffic with an
    `aggregated:` pool is planned as one aggregated pool (`moesim.analyses.plan_agg.AggregatedPlan`).
    verify: simulate one prefill unit at its planned prompt rate (`verify_prefill`): the M/G/1 TTFT
    against the simulated one."""
    pricing, _ = Pricing.take("plan", pricing, dict(kw, cost_mode=cost_mode), ())
    t = _as_traffic(traffic)
    m, h = specs_of(model, hardware, set)
    notes: list = []
    info = profile_info(load_profile_for(h, pricing)[0], pricing.engine)
    if t.aggregated is not None:  # ONE aggregated pool: the aggregated-serving model (plan_agg)
        return plan_aggregated(t, m, h, None, pricing, info, notes)
    run = dict(pricing=pricing, notes=notes)
    dec = decode_capacity(m, h, t.decode, context=t.context, min_tokens_per_s_per_user=t.min_tokens_per_s_per_user,
                          **run)  # fmt: skip
    hit_share = t.cache_hit_tokens / t.input_tokens if t.input_tokens > 0 else 0.0
    pre = prefill_capacity(m, h, t.prefill, prompt_length=t.prompt_length, max_ttft_s=t.max_ttft_s,
                           cached_share=min(hit_share, 1.0 - 1e-9), prompt=t.prompt, **run)  # fmt: skip
    gpn = int(h.gpus_per_node)
    price = h.usd_per_gpu_hour if t.usd_per_gpu_hour is None else t.usd_per_gpu_hour
    kvb = float(m.kv_bytes_per_token)
    hourly = _hourly(t, dec, pre, h, kvb, gpn, price)
    totals = _totals(t, dec, pre, hourly, hit_share, gpn)
    econ = day_economics(
        t,
        totals["average_nodes"],
        gpus_per_node=gpn,
        usd_per_gpu_hour=price,
        prefill_nodes=totals["average_prefill_nodes"],
        decode_nodes=totals["average_decode_nodes"],
    )
    nic_util = np.maximum(hourly["nic_utilisation_prefill"], hourly["nic_utilisation_decode"])
    notes += [
        "cache hits skip prefill compute; their KV load (hit tokens x kv_bytes_per_token) is checked as "
        "NIC traffic into the prefill pool, not costed in nodes",
        "throughputs are the model's own predictions at the deployment above; no published figure is an input",
    ]
    verified = V.verify_prefill(m, h, t, pre, hit_share, pricing, set, notes) if verify else None
    return PlanResult(
        traffic=t,
        model=m.name,
        hardware=h.name,
        cost_mode=pricing.cost_mode.value,
        gpus_per_node=gpn,
        usd_per_gpu_hour=float(price),
        kv_bytes_per_token=kvb,
        decode=dec,
        prefill=pre,
        hourly=hourly,
        totals=totals,
        economics=econ,
        warnings=nic_warnings(nic_util, t.hours, h),
        notes=list(dict.fromkeys(notes)),
        pricing=info,
        verified=verified,
    )


def _hourly(t: Traffic, dec: DecodeCapacity, pre: PrefillCapacity, h, kvb: float, gpn: int, price) -> dict:
    """Arrays over the window's hours: token rates, nodes per pool (whole units), cost, KV traffic
    and the pools' NIC utilisation."""
    out_rate = t.hourly_rate(t.output_tokens)
    in_rate = t.hourly_rate(t.input_tokens)
    hit_rate = t.hourly_rate(t.cache_hit_tokens)
    miss_rate = in_rate - hit_rate
    dec_frac = out_rate / dec.tokens_per_s_per_node
    pre_frac = miss_rate / pre.tokens_per_s_per_node
    dec_units = units_for(dec_frac, dec.nodes_per_unit)
    pre_units = units_for(pre_frac, pre.nodes_per_unit)
    dec_nodes = dec_units * dec.nodes_per_unit
    pre_nodes = pre_units * pre.nodes_per_unit
    nodes = dec_nodes + pre_nodes

    nic = h.rdma_Bps(False)  # nominal per GPU per direction
    kv_xfer = in_rate * kvb  # every prompt token's KV, prefill -> decode
    hit_load = hit_rate * kvb  # cache-hit KV loaded into the prefill pool
    with np.errstate(divide="ignore", invalid="ignore"):
        pre_cap = pre_nodes * gpn * nic
        dec_cap = dec_nodes * gpn * nic
        util_pre = np.where(pre_cap > 0, np.maximum(kv_xfer, hit_load) / pre_cap, np.where(kv_xfer > 0, np.inf, 0.0))
        util_dec = np.where(dec_cap > 0, kv_xfer / dec_cap, np.where(kv_xfer > 0, np.inf, 0.0))
    return {
        "hour": np.arange(t.hours),
        "weight": t.weights,
        "output_tokens_per_s": out_rate,
        "input_tokens_per_s": in_rate,
        "cache_hit_tokens_per_s": hit_rate,
        "cache_miss_tokens_per_s": miss_rate,
        "decode_nodes_fractional": dec_frac,
        "prefill_nodes_fractional": pre_frac,
        "decode_units": dec_units,
        "prefill_units": pre_units,
        "decode_nodes": dec_nodes,
        "prefill_nodes": pre_nodes,
        "nodes": nodes,
        "cost_usd": nodes * gpn * price,
        "kv_transfer_Bps": kv_xfer,
        "kv_hit_load_Bps": hit_load,
        "nic_utilisation_prefill": util_pre,
        "nic_utilisation_decode": util_dec,
    }


def _totals(t: Traffic, dec: DecodeCapacity, pre: PrefillCapacity, hourly: dict, hit_share: float, gpn: int) -> dict:
    """Window totals: average / peak nodes (per pool too), node- and GPU-hours, off-peak hours
    freed, the KV-transfer peaks."""
    nodes, pre_nodes, dec_nodes = hourly["nodes"], hourly["prefill_nodes"], hourly["decode_nodes"]
    nic_util = np.maximum(hourly["nic_utilisation_prefill"], hourly["nic_utilisation_decode"])
    node_hours = float(nodes.sum())
    peak = float(nodes.max())
    return {
        "average_nodes": node_hours / t.hours,
        "average_nodes_fractional": float(
            (hourly["decode_nodes_fractional"] + hourly["prefill_nodes_fractional"]).mean()
        ),
        "peak_nodes": intish(peak),
        "average_prefill_nodes": float(pre_nodes.mean()),
        "average_decode_nodes": float(dec_nodes.mean()),
        "peak_prefill_nodes": intish(float(pre_nodes.max())),
        "peak_decode_nodes": intish(float(dec_nodes.max())),
        "prefill_nodes_per_unit": pre.nodes_per_unit,
        "decode_nodes_per_unit": dec.nodes_per_unit,
        "hours": t.hours,
        "node_hours": node_hours,
        "gpu_hours": node_hours * gpn,
        "offpeak_node_hours_freed": peak * t.hours - node_hours,
        "offpeak_gpu_hours_freed": (peak * t.hours - node_hours) * gpn,
        "prefill_input_tokens_per_s_per_node": pre.tokens_per_s_per_node / (1.0 - hit_share) if hit_share < 1 else None,
        "cache_hit_share": hit_share,
        "peak_kv_transfer_Bps": float(hourly["kv_transfer_Bps"].max()),
        "peak_nic_utilisation": float(nic_util.max()),
    }
