"""`simulate`: one deployment serving a request stream, step-exact (the package doc).

Builds each pool's instances (layout checked and priced by `moesim.engine.step.estimate_step`,
the one evaluation path, through `moesim.simulate.engine_calls`), their cost surfaces (`surface.build`), their KV pools (the memory model:
what is left of the GPU after weights, activations, buffers and the reserve, in tokens) and the
engine's rules (`moesim.simulate.engines`: the engine's serving profile), then runs the events.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from moesim.engine.settings import Pricing
from moesim.enums import Phase
from moesim.errors import ConfigError, check_number
from moesim.grid.core import Grid
from moesim.metrics.memory import kv_bytes_per_token_per_gpu, max_batch, memory
from moesim.simulate import stats as ST
from moesim.simulate import surface as S
from moesim.simulate.engine_calls import default_comm, estimate_pass, resolve_specs
from moesim.simulate.events import KvLink, run
from moesim.simulate.instance import Instance, PrefixCache
from moesim.simulate.options import Layout, Serving, Slo
from moesim.simulate.requests import RequestLog, TimeSeries, Workload
from moesim.simulate.rules import Rules, rules_for
from moesim.simulate.state import Reqs
from moesim.specs.engine import load_engine_model

LAYOUT_KEYS = ("tp", "dp", "ep", "moe_tp", "redundant_experts", "overlap", "comm")


@dataclass
class Pool:
    """One pool of identical instances as built: its priced deployment, rules and KV pool."""

    role: str
    instances: int
    config: dict  # the layout as priced (estimate_step's config)
    rules: Rules
    surf: S.Surfaces
    kv_capacity_tokens: float  # per DP rank
    deployment: S.Deployment = None

    def to_dict(self) -> dict:
        c = self.config
        return {
            "role": self.role,
            "instances": self.instances,
            "gpus_per_instance": c["gpus"],
            **{k: c[k] for k in ("tp", "dp", "ep", "moe_tp", "redundant_experts", "overlap", "comm")},
            "kv_capacity_tokens_per_rank": self.kv_capacity_tokens,
            "max_running_per_rank": self.rules.max_running,
            "chunk_tokens": self.rules.chunk_tokens,
            "cuda_graph_max_bs": self.rules.graph_max_bs,
            "passes_priced": self.surf.evaluations,
        }


@dataclass
class SimResult:
    log: RequestLog
    series: TimeSeries
    summary: dict
    pools: list
    config: dict
    notes: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "pools": [p.to_dict() for p in self.pools],
            "rules": _rules_dict(self.pools[-1].rules),
            **self.summary,
            "simulation": self.stats,
            "notes": self.notes,
        }


def _rules_dict(r: Rules) -> dict:
    d = {k: getattr(r, k) for k in r.__dataclass_fields__ if k != "sources"}
    d["sources"] = dict(r.sources)
    return d


def kv_capacity_tokens(model, hw, grid_row: Grid, comm, mean_len: float) -> float:
    """KV tokens one DP rank holds: the most requests of `mean_len` tokens that fit beside the
    weights, activations, buffers and reserve (`moesim.metrics.memory.max_batch`), times their tokens."""
    g = Grid.single(**{a: float(getattr(grid_row, a)[0]) for a in ("tp", "dp", "ep", "moe_tp", "mtp", "acceptance")},
                    redundant=float(grid_row.redundant[0]), batch=1.0, context=float(mean_len))  # fmt: skip
    mem = memory(model, hw, g, Phase.DECODE, comm)
    b = float(max_batch(mem)[0])
    return b * (mean_len + float(g.q_len[0]))


def _deployment(model, hardware, layout: dict, pricing: Pricing, mean_len: float, phase: str = "decode"):
    """-> (Deployment, estimate config, notes): the layout checked by estimate_step (one decode step,
    or for a PD prefill pool one prefill pass: its overlap and all-to-all are the prefill's)."""
    kw = {k: layout.get(k) for k in LAYOUT_KEYS if k != "comm"}
    pricing = pricing.replace(comm=layout.get("comm"))
    batch = 1 if phase == "decode" else max(mean_len, 1.0)
    d = estimate_pass(model, hardware, pricing, phase=phase, batch=batch, context=max(mean_len, 1.0), mtp=layout["mtp"],
                      acceptance=layout["acceptance"], **kw)  # fmt: skip
    c = d.config
    g = Grid.single(tp=c["tp"], dp=c["dp"], ep=c["ep"], moe_tp=c["moe_tp"], batch=1, context=mean_len, mtp=c["mtp"],
                    acceptance=c["acceptance"], redundant=c["redundant_experts"])  # fmt: skip
    # every pass of a surface is priced at its own KV length (context_dist fixed), CUDA graphs as the engine runs them
    dep_pricing = pricing.replace(comm=c["comm"], context_dist="fixed")
    dep = S.Deployment(
        d.model, d.hardware, g, overlap=kw.get("overlap"), pricing=dep_pricing
    )  # None: the engine default per pass
    return dep, c, []  # the batch-1 step's own notes (its rank imbalance, its memory) do not describe the run


def _pool(role, model, hardware, layout, pricing: Pricing, engine: tuple, work: Workload, instances: int):
    """layout: LAYOUT_KEYS, mtp and acceptance; engine: (name, profile file or None, Rules overrides)."""
    isl = np.asarray(work.input_tokens, float)
    osl = np.asarray(work.output_tokens, float)
    mean_len = float(np.mean(isl + osl)) if role != "prefill" else float(np.mean(isl))
    if role == "prefill":  # a prefill server runs no draft tokens
        layout = dict(layout, mtp=0)
    dep, c, notes = _deployment(
        model, hardware, layout, pricing, mean_len, "prefill" if role == "prefill" else "decode"
    )
    kv = kv_capacity_tokens(dep.model, dep.hw, dep.grid, c["comm"], mean_len)
    dp = c["dp"] if dep.model.is_moe else 1  # without MoE layers DP groups are independent instances
    name, prof, overrides = engine
    rules, src = rules_for(name, prof, memory_bytes=dep.hw.memory_bytes, dp=dp, tp=c["tp"], kv_tokens=kv,
                           context_len=dep.model.max_context, overrides=overrides)  # fmt: skip
    notes = notes + src
    if kv < float(np.max(isl)) + 1:
        raise ConfigError(
            f"{'serving' if role == 'both' else role} instance ({c['gpus']} GPUs, TP{c['tp']} DP{c['dp']} EP{c['ep']}): its KV pool holds "
            f"{kv:,.0f} tokens per rank, less than the longest prompt ({np.max(isl):,.0f}); more GPUs or a smaller model"
        )
    # running requests per rank: the engine's limit, and no more than the KV pool can hold at once
    max_run = min(rules.max_running, max(int(kv // (float(np.min(isl)) + 1.0)), 1))
    rules = rules.with_(max_running=max_run)
    max_ctx = float(np.max(isl + osl)) + 1.0
    # SGLang's DeepEP auto mode runs normal-mode all-to-all in a pass in which any rank extends
    # (moesim.engine.serving._price does the same); the fused engines keep the deployment's
    # (moesim.specs.engine EngineModel.requested: what an aggregated server's prefill-carrying pass runs)
    fused_comm = None
    if role == "both":
        em = load_engine_model(name)
        fused_comm = em.requested(layout.get("comm") or default_comm(Phase.DECODE), Phase.PREFILL, aggregated=True)
    elif role == "prefill" and layout.get("comm") is None:
        fused_comm = default_comm(Phase.PREFILL)
    surf = S.build(dep, max_batch=rules.max_running, max_context=max_ctx, budget_tokens=rules.chunk_tokens,
                   prefill=not rules.fused or role == "prefill", fused=rules.fused or dp > 1,
                   graph_max_bs=rules.graph_max_bs, prefill_eager=rules.prefill_eager,
                   fused_comm=fused_comm)  # fmt: skip
    return Pool(role, instances, c, rules, surf, kv, dep), dp, notes


def _specs(layout: dict, replicas: int, prefill, rules, prefill_only: bool) -> list:
    """The pools to build: (role, layout, instances, Rules overrides) each."""
    if prefill_only:
        if prefill is not None:
            raise ConfigError("prefill_only: the layout is the prefill instance; give no `prefill` pool")
        return [("prefill", layout, replicas, rules)]
    if prefill is None:
        return [("both", layout, replicas, rules)]
    p = dict(prefill)
    n_pre = check_number("prefill.instances", p.pop("instances", 1), lo=1, hi=4096, integer=True)
    unknown = [k for k in p if k not in (*LAYOUT_KEYS, "rules")]
    if unknown:
        raise ConfigError(
            f"prefill: unknown keys {sorted(unknown)}; allowed: instances, rules, {', '.join(LAYOUT_KEYS)}"
        )
    pre_rules = {**(rules or {}), **(p.pop("rules", None) or {})}
    pre_layout = {**layout, **{k: v for k, v in p.items() if v is not None}}
    return [("prefill", pre_layout, n_pre, pre_rules), ("decode", layout, replicas, rules)]


def kv_tiers(pool: Pool) -> list:
    """The KV-cache tiers below HBM of one DP rank, from the hardware spec: (name, tokens, load s per
    token). Every GPU of the rank holds its share of a token's KV (MLA: the whole latent on each
    attention-TP GPU) and loads it over its own link, so capacity and load time are per GPU's share."""
    hw, m, c = pool.deployment.hw, pool.deployment.model, pool.config
    per_gpu = float(kv_bytes_per_token_per_gpu(m, c["tp"]))
    out = []
    for name, cap, bw in (("host", hw.host_kv_bytes, hw.host_Bps), ("disk", hw.disk_kv_bytes, hw.disk_Bps)):
        if cap > 0 and bw > 0:
            out.append((name, cap / per_gpu, per_gpu / bw))
    return out


def _kv_link(pre: Pool) -> KvLink:
    """Every GPU of a prefill instance sends its rank's KV over its own NIC (rdma_Bps: achievable)."""
    h = pre.deployment.hw
    return KvLink(float(pre.deployment.model.kv_bytes_per_token) / pre.config["gpus"], h.rdma_Bps(True),
                  h.rdma_latency_s)  # fmt: skip


def _check(workload: Workload, pricing: Pricing) -> None:
    if workload.size == 0:
        raise ConfigError("workload: no requests to simulate")
    if not pricing.cuda_graphs:
        raise ConfigError("simulate: cuda_graphs false: the engine's rules decide which passes are graphed; "
                          "allowed: rules={'graph_max_bs': 0} for eager decode steps")  # fmt: skip
    if str(pricing.context_dist) != "fixed":
        raise ConfigError(f"simulate: context_dist {pricing.context_dist!r}: every pass is priced at its own KV "
                          "length; allowed: fixed")  # fmt: skip


def _instances(pool: Pool, dp: int, reqs: Reqs, first: int, serving: Serving) -> list:
    """The pool's instances, numbered from `first`."""
    cache = PrefixCache(serving.prefix_cache, serving.hit_ratio, tuple(kv_tiers(pool)))
    return [Instance(first + i, pool.rules, pool.surf, reqs, dp=dp, kv_capacity=pool.kv_capacity_tokens,
                     tokens_per_step=pool.deployment.tokens_per_step, q_len=pool.deployment.q_len, role=pool.role,
                     cache=cache)
            for i in range(pool.instances)]  # fmt: skip


def _config(m, h, pricing: Pricing, layout: Layout, serving: Serving, workload: Workload, seed, gpus) -> dict:
    return {"model": m.name, "hardware": h.name, "engine": pricing.engine.value, "gpus": gpus,
            "workload": workload.label, "requests": workload.size, "warmup": int(workload.warmup), "seed": seed,
            "prefix_cache": bool(serving.prefix_cache), "hit_ratio": serving.hit_ratio,
            "cost_mode": str(pricing.cost_mode), "mtp": layout.mtp, "acceptance": layout.acceptance}  # fmt: skip


def simulate(model="deepseek-v3", hardware="h800", *, workload: Workload, layout: Layout | None = None,
             serving: Serving | None = None, pricing: Pricing | None = None, slo: Slo | None = None, set=None,
             seed: int = 0, progress=None) -> SimResult:  # fmt: skip
    """Simulate `workload` on `serving.replicas` instances of `layout` (aggregated), or with
    `serving.prefill` prefill instances feeding the replicas as decode instances (PD), or
    (`serving.prefill_only`) PD prefill instances alone; every pass priced by `pricing` (default:
    `Pricing()`). set: spec what-ifs ("hardware.memory_GB=95"); seed: routing draws; progress:
    called as progress(done, total, t_s). Flat keywords: `moesim.simulate.options.options`."""
    t0 = time.perf_counter()
    layout, serving = layout or Layout(), serving or Serving()
    pricing, slo = pricing or Pricing(), slo or Slo()
    _check(workload, pricing)
    lay = dict(layout.as_dict(), comm=None if pricing.comm is None else pricing.comm.value)
    R = Reqs(workload.input_tokens, workload.output_tokens, workload.prefix_ids(), workload.prefix_lengths())
    m, h = resolve_specs(model, hardware, set)
    pools, inst_pools, notes = [], [], []
    engine = (pricing.engine.value, serving.engine_profile)
    for role, lay_i, count, over in _specs(lay, serving.replicas, serving.prefill, serving.rules, serving.prefill_only):
        pool, dpn, n1 = _pool(role, m, h, lay_i, pricing, (*engine, over), workload, count)
        notes += n1
        inst_pools.append(_instances(pool, dpn, R, sum(map(len, inst_pools)), serving))
        pools.append(pool)
    link = _kv_link(pools[0]) if pools[0].role == "prefill" else None
    if link is not None:
        notes.append(
            "PD: a prompt's KV leaves its prefill instance after the prompt's last pass, over that instance's NICs "
            "(one transfer at a time per instance, queued); the decode instance admits it at its next step"
        )
    t_run = time.perf_counter()
    log, series, st = run(workload, inst_pools, link=link, seed=seed, progress=progress)
    st.update(run_s=time.perf_counter() - t_run, pricing_s=t_run - t0)
    summary = ST.summarize(log, slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s)
    gpus = sum(p.config["gpus"] * p.instances for p in pools)
    if math.isfinite(summary.get("output_tokens_per_s", math.nan)):
        summary["output_tokens_per_s_per_gpu"] = summary["output_tokens_per_s"] / gpus
    config = _config(m, h, pricing, layout, serving, workload, seed, gpus)
    return SimResult(log, series, summary, pools, config, list(dict.fromkeys(notes)), st)


__all__ = ["simulate", "SimResult", "Pool", "Layout", "Serving", "Slo", "kv_capacity_tokens"]
