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

from moesim.errors import ConfigError
from moesim.specs.traffic import DecodePool, PrefillPool, Traffic, load_traffic, traffic_from_dict

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

PREFILL_HALVINGS = 8  # candidates: batch_tokens, /2, /4, ... (one evaluate_grid call)


# --------------------------------------------------------------------------- capacities
@dataclass(frozen=True)
class DecodeCapacity:
    """Decode pool operating point chosen from the batch sweep."""

    batch: int  # requests per DP group
    tokens_per_s_per_node: float  # accepted output tokens/s per node
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    step_time_s: float
    tpot_s: float
    limited_by: str  # "slo" | "memory" | "sweep" (decode.max_batch reached)
    max_batch_memory: int  # largest swept batch that fits memory
    overlap: str
    gpus: int
    nodes_per_unit: float
    sweep: dict = field(repr=False, default_factory=dict)  # batch, tokens/s/user, tokens/s/node, fits

    def why(self, slo: float) -> str:
        if self.limited_by == "slo":
            return (
                f"batch {self.batch + 1} would drop below {slo:g} tok/s per user "
                f"({self.sweep['tokens_per_s_per_user'][self.batch]:.2f})"
            )
        if self.limited_by == "memory":
            return f"batch {self.batch + 1} does not fit in GPU memory"
        return f"the sweep's largest batch (decode.max_batch = {self.batch}) still meets the SLO and fits"


@dataclass(frozen=True)
class PrefillCapacity:
    """Prefill pool operating point chosen from the candidate batches."""

    batch_tokens: int  # prompt tokens per DP group per step
    tokens_per_s_per_node: float  # computed (cache-miss) prompt tokens/s per node
    tokens_per_s_per_gpu: float
    ttft_s: float  # mean TTFT: M/G/1 queueing wait + step time x steps per prompt
    step_time_s: float
    limited_by: str  # "batch_tokens" (cap reached) | "ttft" | "memory"
    overlap: str
    gpus: int
    nodes_per_unit: float
    utilisation: float = 1.0  # planned load / full-load capacity (1 without a TTFT target)
    full_load_tokens_per_s_per_node: float = float("nan")
    sweep: dict = field(repr=False, default_factory=dict)


def _specs(model, hardware, set_):
    from moesim.api import resolve_specs

    return resolve_specs(model, hardware, set_)


def _finite(name, v, lo, hi, lo_open=False):
    """API callers pass numbers directly (bypassing the traffic loader): finite and in range."""
    try:
        x = float(v) if not isinstance(v, bool) else float("nan")
    except (TypeError, ValueError):
        x = float("nan")
    if not (np.isfinite(x) and (x > lo if lo_open else x >= lo) and x <= hi):
        raise ConfigError(f"{name}: {v!r}; allowed a finite number {'>' if lo_open else '>='} {lo:g} and <= {hi:g}")
    return x


def _check(m, h, grid, phase, section):
    from moesim.grid.validity import check_grid

    ok, reason = check_grid(m, h, grid, phase)
    if not ok.all():
        raise ConfigError(f"{section}: {reason[~ok][0]}")


def decode_capacity(
    model,
    hardware,
    pool: DecodePool = DecodePool(),
    *,
    context: float = 4989.0,
    min_tokens_per_s_per_user: float = 20.0,
    cost_mode="calibrated",
    set=None,
    expert_skew="auto",
    context_dist="fixed",
    profile=None,
    notes: list | None = None,
) -> DecodeCapacity:
    """Largest batch (requests per DP group, swept 1..pool.max_batch in ONE evaluate_grid call)
    that fits memory and keeps tokens/s per user >= the SLO, and the throughput there."""
    from moesim.api import evaluate_grid
    from moesim.grid.core import Grid

    min_tokens_per_s_per_user = _finite("slo.min_tokens_per_s_per_user", min_tokens_per_s_per_user, 0, 1e6)
    max_batch = _finite("decode.max_batch", pool.max_batch, 1, 100_000)
    m, h = _specs(model, hardware, set)
    batches = np.arange(1, int(max_batch) + 1, dtype=float)
    grid = Grid.product(
        tp=pool.tp,
        dp=pool.dp,
        ep=pool.ep,
        moe_tp=1,
        batch=batches,
        context=context,
        mtp=pool.mtp,
        acceptance=pool.acceptance,
        redundant=pool.redundant_experts,
    )
    _check(m, h, grid, "decode", "decode")
    ev, ns = evaluate_grid(
        m,
        h,
        grid,
        phase="decode",
        overlap=pool.overlap,
        cost_mode=cost_mode,
        comm=pool.comm,
        expert_skew=expert_skew,
        context_dist=context_dist,
        profile_path=profile,
    )
    if notes is not None:
        notes.extend(ns)
    v = ev.values
    user = np.asarray(v["tokens_per_s_per_user"], float)
    fits = np.asarray(v["fits"], bool)
    meets = user >= min_tokens_per_s_per_user
    ok = fits & meets
    sweep = {
        "batch": batches,
        "tokens_per_s_per_user": user,
        "tokens_per_s_per_node": v["tokens_per_s_per_node"],
        "fits": fits,
        "step_time_s": v["step_time_s"],
    }
    where = f"decode EP{pool.ep} DP{pool.dp} TP{pool.tp} on {h.name} (context {context:g}, mtp {pool.mtp})"
    if not fits.any():
        raise ConfigError(
            f"decode: no batch fits in GPU memory at {where}; allowed: a larger deployment, "
            f"shorter context or more memory"
        )
    if not ok.any():
        best = float(np.max(np.where(fits, user, 0.0)))
        raise ConfigError(
            f"slo.min_tokens_per_s_per_user: {min_tokens_per_s_per_user:g} tok/s is not reachable at "
            f"{where}; the model predicts at most {best:.1f}; allowed <= {best:.1f}"
        )
    i = int(np.nonzero(ok)[0].max())
    if i == batches.size - 1:
        why = "sweep"
    elif not fits[i + 1]:
        why = "memory"
    else:
        why = "slo"
    return DecodeCapacity(
        batch=int(batches[i]),
        tokens_per_s_per_node=float(v["tokens_per_s_per_node"][i]),
        tokens_per_s_per_gpu=float(v["tokens_per_s_per_gpu"][i]),
        tokens_per_s_per_user=float(user[i]),
        step_time_s=float(v["step_time_s"][i]),
        tpot_s=float(v["tpot_s"][i]),
        limited_by=why,
        max_batch_memory=int(batches[np.nonzero(fits)[0].max()]),
        overlap=str(v["overlap"][i]),
        gpus=int(pool.gpus),
        nodes_per_unit=pool.gpus / h.gpus_per_node,
        sweep=sweep,
    )


def prefill_capacity(
    model,
    hardware,
    pool: PrefillPool = PrefillPool(),
    *,
    prompt_length: float = 4989.0,
    max_ttft_s: float | None = None,
    cached_share: float = 0.0,
    prompt=None,
    cost_mode="calibrated",
    set=None,
    expert_skew="auto",
    context_dist="fixed",
    profile=None,
    notes: list | None = None,
) -> PrefillCapacity:
    """Computed prompt tokens/s per node at the prefill deployment, over candidate batches
    (pool.batch_tokens halved down, ONE evaluate_grid call) that fit memory.

    prompt: the prompt-length distribution (moesim.specs.traffic.LengthDist; default: every prompt
    prompt_length long). cached_share: the share of each prompt already in the KV cache (its
    head). Those tokens skip compute, but the computed tail attends to them: a prompt P long has
    (1 - c) P computed tokens and (1 - c^2) P^2 / 2 (query, key) pairs, so per computed token the
    keys average (1 + c) E[P^2] / (2 E[P]) over the mix -- the causal prefill of one prompt
    (1 + c) E[P^2] / E[P] long (the attention core is the only prefill op that reads the context,
    as context / 2; its cost is linear in the pairs).

    With max_ttft_s, prompts arrive as a Poisson stream at each DP group; a prompt's service is
    S = k S_step (k = steps its computed tokens take at this batch; a prompt shorter than the batch
    shares one step). M/G/1 (Pollaczek-Khinchine) mean wait W = rho E[S^2] / (2 E[S] (1 - rho));
    mean TTFT = W + E[S] <= max_ttft_s gives the highest utilisation
    rho = (T - E[S]) / (E[S^2] / (2 E[S]) + T - E[S]) (for one prompt length: the M/D/1 form).
    The planned rate is rho x the full-load rate, maximised over the candidate batches. Without a
    TTFT target the pool is planned at full load.
    """
    from moesim.api import evaluate_grid
    from moesim.grid.core import Grid
    from moesim.specs.traffic import LengthDist

    if max_ttft_s is not None:
        max_ttft_s = _finite("slo.max_ttft_s", max_ttft_s, 0, 1e6, lo_open=True)
    _finite("prefill.batch_tokens", pool.batch_tokens, 1, 1e9)
    c = _finite("cached_share", cached_share, 0, 1)
    if c >= 1.0:
        raise ConfigError(f"cached_share: {cached_share!r}; allowed >= 0 and < 1 (some prompt tokens must be computed)")
    if prompt is None:
        prompt = LengthDist(_finite("prompt_length", prompt_length, 1, 1e8))
    elif not isinstance(prompt, LengthDist):  # a number, {mean, dist} or {bins} as in the traffic YAML
        from moesim.specs.traffic import _length

        prompt = _length("", "prompt", prompt)
    m, h = _specs(model, hardware, set)
    attn_context = prompt.moment_ratio() * (1.0 + c)
    if attn_context > m.max_context:
        raise ConfigError(
            f"prompt_length: the attention of this prompt mix ({prompt.describe()}, {c:.0%} cached) "
            f"equals one prompt of {attn_context:,.0f} tokens (E[P^2]/E[P] x (1 + cached share)), "
            f"beyond {m.name}'s max_context = {m.max_context:,}; allowed a shorter mean or a "
            f"narrower distribution"
        )
    cand = np.unique(np.maximum(1.0, np.round(pool.batch_tokens / 2.0 ** np.arange(PREFILL_HALVINGS))))
    grid = Grid.product(
        tp=pool.tp,
        dp=pool.dp,
        ep=pool.ep,
        moe_tp=1,
        batch=cand,
        context=attn_context,
        mtp=0,
        acceptance=0.0,
        redundant=pool.redundant_experts,
    )
    _check(m, h, grid, "prefill", "prefill")
    ev, ns = evaluate_grid(
        m,
        h,
        grid,
        phase="prefill",
        overlap=pool.overlap,
        cost_mode=cost_mode,
        comm=pool.comm,
        expert_skew=expert_skew,
        context_dist=context_dist,
        profile_path=profile,
    )
    if notes is not None:
        notes.extend(ns)
    v = ev.values
    step = np.asarray(v["step_time_s"], float)
    lengths, w = prompt.discrete()
    service = np.ceil(lengths[:, None] * (1.0 - c) / cand[None, :]) * step[None, :]  # [prompt bin, batch]
    es = w @ service
    es2 = w @ service**2
    fits = np.asarray(v["fits"], bool)
    full = np.asarray(v["tokens_per_s_per_node"], float)
    if max_ttft_s is None:
        rho = np.ones_like(step)
    else:
        slack = np.maximum(max_ttft_s - es, 0.0)
        rho = slack / (es2 / (2.0 * es) + slack)  # M/G/1 mean wait = slack
    planned = full * rho
    ok = fits & (rho > 0)
    where = f"prefill EP{pool.ep} DP{pool.dp} TP{pool.tp} on {h.name} (prompt {prompt.describe()} tokens)"
    if not fits.any():
        raise ConfigError(
            f"prefill: no batch fits in GPU memory at {where}; allowed: a larger deployment or shorter prompts"
        )
    if not ok.any():
        best = float(np.min(np.where(fits, es, np.inf)))
        raise ConfigError(
            f"slo.max_ttft_s: {max_ttft_s:g} s is not reachable at {where}; the model predicts at "
            f"least {best:.3g} s of compute per prompt on average; allowed > {best:.3g}"
        )
    i = int(np.argmax(np.where(ok, planned, -np.inf)))
    if max_ttft_s is not None:  # the queueing headroom (rho < 1) and the batch both follow the target
        why = "ttft"
    elif i == cand.size - 1:
        why = "batch_tokens"
    else:
        why = "memory"
    wait = rho * es2 / (2.0 * es * np.maximum(1.0 - rho, 1e-12))
    ttft = np.where(rho < 1.0, es + wait, es)
    sweep = {
        "batch_tokens": cand,
        "ttft_s": ttft,
        "tokens_per_s_per_node": planned,
        "full_load_tokens_per_s_per_node": full,
        "utilisation": rho,
        "fits": fits,
    }
    return PrefillCapacity(
        batch_tokens=int(cand[i]),
        tokens_per_s_per_node=float(planned[i]),
        tokens_per_s_per_gpu=float(planned[i] / h.gpus_per_node),
        ttft_s=float(ttft[i]),
        step_time_s=float(step[i]),
        limited_by=why,
        overlap=str(v["overlap"][i]),
        gpus=int(pool.gpus),
        nodes_per_unit=pool.gpus / h.gpus_per_node,
        utilisation=float(rho[i]),
        full_load_tokens_per_s_per_node=float(full[i]),
        sweep=sweep,
    )


# --------------------------------------------------------------------------- economics
def units_for(nodes_fractional, nodes_per_unit: float):
    """Whole deployment units covering the fractional node need (0 when there is no traffic)."""
    x = np.asarray(nodes_fractional, float) / nodes_per_unit
    return np.ceil(x - 1e-9 * np.maximum(1.0, x)).astype(int).clip(min=0)


def day_economics(
    traffic: Traffic,
    average_nodes: float,
    *,
    gpus_per_node: int,
    usd_per_gpu_hour: float,
    prefill_nodes: float | None = None,
    decode_nodes: float | None = None,
) -> dict:
    """Per-day economics at ``average_nodes`` (time-average over the window) through
    moesim.metrics.economics. Token volumes are scaled to a day when the window is not 24 h.

    Keys: cost_usd_per_day, revenue_usd_per_day / margin (None without list prices),
    usd_per_million_output_tokens (whole cost on output, DeepSeek's method),
    usd_per_million_input_tokens, usd_per_million_tokens, revenue_usd_by_class, gpu_hours_per_day,
    and, when the pool split is given, usd_per_million_by_pool {input_hit (0: no compute),
    input_miss (prefill pool), output (decode pool)}."""
    from moesim.metrics import economics as E

    tin, hit, tout = (
        traffic.per_day(x) for x in (traffic.input_tokens, traffic.cache_hit_tokens, traffic.output_tokens)
    )
    cost = E.daily_cost_usd(average_nodes, gpus_per_node, usd_per_gpu_hour, 24.0)
    out = {
        "cost_usd_per_day": cost,
        "revenue_usd_per_day": None,
        "margin": None,
        "usd_per_million_output_tokens": E.usd_per_million_output_tokens(cost, tout) if tout > 0 else None,
        "usd_per_million_input_tokens": E.usd_per_million_tokens(cost, tin) if tin > 0 else None,
        "usd_per_million_tokens": E.usd_per_million_tokens(cost, tin + tout),
        "revenue_usd_by_class": None,
        "gpu_hours_per_day": float(average_nodes) * gpus_per_node * 24.0,
        "usd_per_gpu_hour": float(usd_per_gpu_hour),
    }
    if traffic.usd_per_million is not None:
        prices = traffic.usd_per_million.as_dict()
        if cost > 0:
            rep = E.economics_report(average_nodes, gpus_per_node, usd_per_gpu_hour, tin, hit, tout, prices, hours=24.0)
            out["margin"] = rep["margin"]
            out["revenue_usd_by_class"] = rep["revenue_usd_by_class"]
        out["revenue_usd_per_day"] = E.revenue_usd(tin, hit, tout, prices)
    if prefill_nodes is not None and decode_nodes is not None:
        pc = E.daily_cost_usd(prefill_nodes, gpus_per_node, usd_per_gpu_hour, 24.0)
        dc = E.daily_cost_usd(decode_nodes, gpus_per_node, usd_per_gpu_hour, 24.0)
        out["cost_usd_per_day_by_pool"] = {"prefill": pc, "decode": dc}
        out["usd_per_million_by_pool"] = {
            "input_hit": 0.0,
            "input_miss": E.usd_per_million_tokens(pc, tin - hit) if tin - hit > 0 else None,
            "output": E.usd_per_million_tokens(dc, tout) if tout > 0 else None,
        }
    return out


# --------------------------------------------------------------------------- the plan
@dataclass
class PlanResult:
    traffic: Traffic
    model: str
    hardware: str
    cost_mode: str
    gpus_per_node: int
    usd_per_gpu_hour: float
    kv_bytes_per_token: float
    decode: DecodeCapacity
    prefill: PrefillCapacity
    hourly: dict  # arrays over the window's hours
    totals: dict
    economics: dict
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)

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
        return [{k: _py(self.hourly[k][i]) for k in keys} for i in range(len(self.hourly["hour"]))]

    def to_dataframe(self):
        import pandas as pd

        return pd.DataFrame(self.hourly_rows())

    def to_dict(self) -> dict:
        d, p, t = self.decode, self.prefill, self.traffic
        out = {k: _py(v) for k, v in self.totals.items()}
        out.update(
            {
                k: _py(v) if not isinstance(v, dict) else {a: _py(b) for a, b in v.items()}
                for k, v in self.economics.items()
            }
        )
        out.update(
            {
                "decode_tokens_per_s_per_node": d.tokens_per_s_per_node,
                "prefill_tokens_per_s_per_node": p.tokens_per_s_per_node,
                "decode_batch": d.batch,
                "decode": {
                    "batch": d.batch,
                    "batch_units": "requests per DP group",
                    "limited_by": d.limited_by,
                    "tokens_per_s_per_node": d.tokens_per_s_per_node,
                    "tokens_per_s_per_gpu": d.tokens_per_s_per_gpu,
                    "tokens_per_s_per_user": d.tokens_per_s_per_user,
                    "step_time_s": d.step_time_s,
                    "tpot_s": d.tpot_s,
                    "max_batch_memory": d.max_batch_memory,
                    "overlap": d.overlap,
                    "ep": t.decode.ep,
                    "dp": t.decode.dp,
                    "tp": t.decode.tp,
                    "mtp": t.decode.mtp,
                    "acceptance": t.decode.acceptance,
                    "redundant_experts": t.decode.redundant_experts,
                    "gpus_per_unit": d.gpus,
                    "nodes_per_unit": d.nodes_per_unit,
                    "context": t.context,
                },
                "prefill": {
                    "batch_tokens": p.batch_tokens,
                    "batch_units": "prompt tokens per DP group",
                    "limited_by": p.limited_by,
                    "tokens_per_s_per_node": p.tokens_per_s_per_node,
                    "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
                    "input_tokens_per_s_per_node_incl_hits": _py(self.totals["prefill_input_tokens_per_s_per_node"]),
                    "ttft_s": p.ttft_s,
                    "ttft_kind": "mean (M/G/1 queueing + compute)"
                    if t.max_ttft_s
                    else "compute only (no queueing: no TTFT target, planned at full load)",
                    "utilisation": p.utilisation,
                    "full_load_tokens_per_s_per_node": p.full_load_tokens_per_s_per_node,
                    "step_time_s": p.step_time_s,
                    "overlap": p.overlap,
                    "ep": t.prefill.ep,
                    "dp": t.prefill.dp,
                    "tp": t.prefill.tp,
                    "redundant_experts": t.prefill.redundant_experts,
                    "gpus_per_unit": p.gpus,
                    "nodes_per_unit": p.nodes_per_unit,
                    "prompt_length": t.prompt_length,
                    "prompt_distribution": t.prompt.describe(),
                    "attention_context": t.prompt.moment_ratio() * (1.0 + self.totals["cache_hit_share"]),
                },
                "model": self.model,
                "hardware": self.hardware,
                "cost_mode": self.cost_mode,
                "gpus_per_node": self.gpus_per_node,
                "kv_bytes_per_token": self.kv_bytes_per_token,
                "traffic": t.to_dict(),
                "hourly": self.hourly_rows(),
                "units": {
                    "tokens": "tokens",
                    "rates": "tokens/s",
                    "money": "USD",
                    "time": "s (hourly bins of 1 h)",
                    "bandwidth": "B/s",
                },
                "warnings": list(self.warnings),
                "notes": list(self.notes),
            }
        )
        return out


def _py(v):
    if v is None:
        return None
    a = np.asarray(v)
    if a.ndim:
        return [_py(x) for x in a.tolist()]
    x = a.item()
    if isinstance(x, bool):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    return x


def _as_traffic(traffic) -> Traffic:
    if isinstance(traffic, Traffic):
        return traffic
    if isinstance(traffic, dict):
        return traffic_from_dict(traffic)
    if isinstance(traffic, (str, Path)):
        return load_traffic(traffic)
    raise ConfigError(f"traffic: {type(traffic).__name__}; allowed a Traffic, a mapping or a YAML path")


def plan(
    traffic,
    model="deepseek-v3",
    hardware="h800",
    cost_mode="calibrated",
    *,
    set=None,
    expert_skew="auto",
    context_dist="fixed",
    profile=None,
) -> PlanResult:
    """Nodes, cost and economics for a traffic window (see the module doc for the method)."""
    from moesim.enums import CostMode

    t = _as_traffic(traffic)
    cost_mode = CostMode.parse(cost_mode, "cost_mode").value
    m, h = _specs(model, hardware, set)
    notes: list = []
    dec = decode_capacity(
        m,
        h,
        t.decode,
        context=t.context,
        min_tokens_per_s_per_user=t.min_tokens_per_s_per_user,
        cost_mode=cost_mode,
        expert_skew=expert_skew,
        context_dist=context_dist,
        profile=profile,
        notes=notes,
    )
    hit_share = t.cache_hit_tokens / t.input_tokens if t.input_tokens > 0 else 0.0
    pre = prefill_capacity(
        m,
        h,
        t.prefill,
        prompt_length=t.prompt_length,
        max_ttft_s=t.max_ttft_s,
        cached_share=min(hit_share, 1.0 - 1e-9),
        prompt=t.prompt,
        cost_mode=cost_mode,
        expert_skew=expert_skew,
        context_dist=context_dist,
        profile=profile,
        notes=notes,
    )
    gpn = int(h.gpus_per_node)
    price = h.usd_per_gpu_hour if t.usd_per_gpu_hour is None else t.usd_per_gpu_hour

    # ---- per hour (arrays over the window's hours)
    hours = np.arange(t.hours)
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

    kvb = float(m.kv_bytes_per_token)
    nic = h.rdma_Bps(False)  # nominal per GPU per direction
    kv_xfer = in_rate * kvb  # every prompt token's KV, prefill -> decode
    hit_load = hit_rate * kvb  # cache-hit KV loaded into the prefill pool
    with np.errstate(divide="ignore", invalid="ignore"):
        pre_cap = pre_nodes * gpn * nic
        dec_cap = dec_nodes * gpn * nic
        util_pre = np.where(pre_cap > 0, np.maximum(kv_xfer, hit_load) / pre_cap, np.where(kv_xfer > 0, np.inf, 0.0))
        util_dec = np.where(dec_cap > 0, kv_xfer / dec_cap, np.where(kv_xfer > 0, np.inf, 0.0))
    nic_util = np.maximum(util_pre, util_dec)
    hourly = {
        "hour": hours,
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

    node_hours = float(nodes.sum())
    avg = node_hours / t.hours
    avg_frac = float((dec_frac + pre_frac).mean())
    peak = float(nodes.max())
    totals = {
        "average_nodes": avg,
        "average_nodes_fractional": avg_frac,
        "peak_nodes": _intish(peak),
        "average_prefill_nodes": float(pre_nodes.mean()),
        "average_decode_nodes": float(dec_nodes.mean()),
        "peak_prefill_nodes": _intish(float(pre_nodes.max())),
        "peak_decode_nodes": _intish(float(dec_nodes.max())),
        "prefill_nodes_per_unit": pre.nodes_per_unit,
        "decode_nodes_per_unit": dec.nodes_per_unit,
        "hours": t.hours,
        "node_hours": node_hours,
        "gpu_hours": node_hours * gpn,
        "offpeak_node_hours_freed": peak * t.hours - node_hours,
        "offpeak_gpu_hours_freed": (peak * t.hours - node_hours) * gpn,
        "prefill_input_tokens_per_s_per_node": pre.tokens_per_s_per_node / (1.0 - hit_share) if hit_share < 1 else None,
        "cache_hit_share": hit_share,
        "peak_kv_transfer_Bps": float(kv_xfer.max()),
        "peak_nic_utilisation": float(nic_util.max()),
    }
    econ = day_economics(
        t,
        avg,
        gpus_per_node=gpn,
        usd_per_gpu_hour=price,
        prefill_nodes=float(pre_nodes.mean()),
        decode_nodes=float(dec_nodes.mean()),
    )

    warnings = []
    over = np.nonzero(nic_util > 1.0)[0]
    if over.size:
        warnings.append(
            f"KV transfer exceeds the NIC capacity in {over.size} of {t.hours} hours (peak "
            f"{nic_util.max():.2f}x of rdma {h.rdma_bw_GBps:g} GB/s x GPUs); prefill->decode "
            f"transfer would throttle: add pool NICs or raise the cache hit rate"
        )
    elif nic_util.max() > 0.5:
        warnings.append(
            f"KV transfer uses up to {nic_util.max() * 100:.0f}% of the pools' NIC capacity; it shares "
            f"the NICs with the EP all-to-all"
        )
    notes.append(
        "cache hits skip prefill compute; their KV load (hit tokens x kv_bytes_per_token) is checked as "
        "NIC traffic into the prefill pool, not costed in nodes"
    )
    notes.append("throughputs are the model's own predictions at the deployment above; no published figure is an input")
    notes = list(dict.fromkeys(notes))
    return PlanResult(
        traffic=t,
        model=m.name,
        hardware=h.name,
        cost_mode=cost_mode,
        gpus_per_node=gpn,
        usd_per_gpu_hour=float(price),
        kv_bytes_per_token=kvb,
        decode=dec,
        prefill=pre,
        hourly=hourly,
        totals=totals,
        economics=econ,
        warnings=warnings,
        notes=notes,
    )


def _intish(x: float):
    return int(x) if float(x).is_integer() else float(x)
