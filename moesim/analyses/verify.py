"""Candidates of the closed-form searches (`disagg`, `recommend`, `plan`) verified by the
request-level simulator (`moesim.simulate`): the deployment serves the load as a benchmark client
sends it, and the simulated TTFT / TPOT (mean and p90) stand beside the closed form's, with a note
wherever the two disagree by more than `DISAGREE` (10 %).

The load: a request rate -> open loop, Poisson arrivals at that rate; a number of users -> closed
loop at that concurrency; none (disagg's own pools) -> closed loop with every decode slot of the
deployment taken (instances x DP groups x batch: the load the closed form's throughput assumes).
Lengths are drawn uniform within +-20 % of ISL / OSL (vLLM's random-dataset rule, range ratio 0.2):
fixed lengths would keep closed-loop clients in lock-step waves that no real traffic has. The first
requests (one concurrency's worth: the start-up burst) are left out of the statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from moesim.engine.settings import Pricing

DISAGREE = 0.10  # closed form vs simulation, relative: the threshold
RANGE_RATIO = 0.2
MIN_REQUESTS, MAX_REQUESTS, WAVES = 300, 3000, 6
# most requests in flight a verification simulates: a steady state needs several waves of them
# (WAVES x this many requests, each a few events); larger deployments are left to `moesim simulate`
MAX_IN_FLIGHT = 1024
LAYOUT = ("tp", "dp", "ep", "moe_tp")


@dataclass
class Candidate:
    """One deployment to verify: its decode (or aggregated) row, its prefill row in PD, the instance
    counts and the closed form's figures (ttft_s, tpot_s, optionally ttft_p90_s)."""

    label: str
    decode: dict
    decode_instances: int = 1
    prefill: dict | None = None
    prefill_instances: int = 0
    closed: dict = field(default_factory=dict)


def _layout(row: dict) -> dict:
    out = {k: int(row[k]) for k in LAYOUT if row.get(k) is not None}
    out["redundant_experts"] = int(row.get("redundant", row.get("redundant_experts", 0)) or 0)
    for k in ("overlap", "comm"):
        if isinstance(row.get(k), str):
            out[k] = row[k]
    return out


def in_flight(c: Candidate, osl, load) -> float:
    """Requests in flight at the load: Little's law at a rate (closed-form times), the users, or
    every decode slot of the deployment."""
    kind, value = load if load else ("concurrency", None)
    if kind == "request_rate":
        t = c.closed.get("ttft_s", 0.0) + osl * c.closed.get("tpot_s", 0.0)
        return value * t if math.isfinite(t) else float(value)
    if value is None:
        return c.decode_instances * float(c.decode.get("dp", 1)) * float(c.decode["batch"])
    return float(value)


def _workload(c: Candidate, isl, osl, load, seed):
    from moesim.simulate import clients as C  # lazy: the simulator only when a candidate is verified

    kind, value = load if load else ("concurrency", None)
    flying = in_flight(c, osl, load)
    if kind == "request_rate":
        n = int(min(max(WAVES * flying, MIN_REQUESTS), MAX_REQUESTS))
        warm = int(min(flying, n // 3))
        return C.open_loop(float(value), n - warm, int(isl), int(osl), range_ratio=RANGE_RATIO, tool="vllm",
                           warmup=warm, seed=seed)  # fmt: skip
    conc = max(int(round(flying)), 1)
    n = int(min(max(WAVES * conc, MIN_REQUESTS), MAX_REQUESTS))
    warm = int(min(conc, n // 3))
    return C.closed_loop(conc, n - warm, int(isl), int(osl), range_ratio=RANGE_RATIO, tool="vllm", warmup=warm,
                         seed=seed)  # fmt: skip


def verify(model, hardware, candidates: list[Candidate], *, isl, osl, load=None, pricing: Pricing | None = None,
           set=None, chunk_tokens=None, seed=0) -> list[dict]:  # fmt: skip
    """Simulate each candidate -> one dict per candidate: the simulated figures (sim_*), the closed
    form's, their relative gaps and `disagrees` (notes where a gap exceeds DISAGREE). pricing: its
    engine, cost mode and expert skew go to the simulator (default `Pricing()`)."""
    p = pricing if pricing is not None else Pricing()
    from moesim.simulate.core import simulate  # lazy: the simulator only when a candidate is verified
    from moesim.simulate.options import options  # lazy: as above

    out = []
    for c in candidates:
        flying = in_flight(c, osl, load)
        if flying > MAX_IN_FLIGHT:
            out.append(_skipped(c, flying))
            continue
        d = c.decode
        rules = {"max_running": int(float(d["batch"]))}
        if chunk_tokens is not None:
            rules["chunk_tokens"] = int(chunk_tokens)
        kw = dict(_layout(d), mtp=int(d.get("mtp", 0) or 0), acceptance=float(d.get("acceptance", 0.8)),
                  replicas=max(int(c.decode_instances), 1), rules=rules)  # fmt: skip
        if c.prefill is not None:
            tokens = int(float(c.prefill["batch"]))  # prompt tokens per DP group per pass
            kw["prefill"] = {"instances": max(int(c.prefill_instances), 1), **_layout(c.prefill),
                             "rules": {"chunk_tokens": tokens, "max_prefill_tokens": tokens}}  # fmt: skip
        work = _workload(c, isl, osl, load, seed)
        r = simulate(model, hardware, workload=work, set=set, seed=seed,
                     **options(engine=p.engine, cost_mode=p.cost_mode, expert_skew=p.expert_skew, **kw))  # fmt: skip
        s = r.summary
        row = {
            "candidate": c.label,
            "load": work.label,
            "sim_ttft_mean_s": s["ttft_mean_s"],
            "sim_ttft_p90_s": s["ttft_p90_s"],
            "sim_tpot_mean_s": s["tpot_mean_s"],
            "sim_tpot_p90_s": s["tpot_p90_s"],
            "sim_output_tokens_per_s_per_gpu": s.get("output_tokens_per_s_per_gpu", float("nan")),
            "sim_requests_per_s": s["requests_per_s"],
            "closed_ttft_s": c.closed.get("ttft_s"),
            "closed_tpot_s": c.closed.get("tpot_s"),
            "disagrees": [],
        }
        for k in ("ttft", "tpot"):
            cf, sim = c.closed.get(f"{k}_s"), s[f"{k}_mean_s"]
            if cf is None or not (math.isfinite(cf) and cf > 0 and math.isfinite(sim)):
                row[f"{k}_gap"] = float("nan")
                continue
            gap = sim / cf - 1.0
            row[f"{k}_gap"] = gap
            if abs(gap) > DISAGREE:
                row["disagrees"].append(
                    f"{c.label}: simulated mean {k.upper()} {sim * 1e3:,.1f} ms vs closed form {cf * 1e3:,.1f} ms "
                    f"({gap * 100:+.0f}%)"
                )
        out.append(row)
    return out


def verify_disagg(m, hw, rows, deployment, workload: dict, kw: dict, notes: list) -> list:
    """`disagg`'s chosen PD pair (its instances, every decode slot taken; same hardware for both
    pools) and its aggregated best (one instance), simulated; notes where they disagree or miss a target."""
    prow, drow, agg = rows
    cands = []
    if prow and drow and deployment and workload["prefill_hardware"] == workload["decode_hardware"]:
        cands.append(Candidate("PD", drow, deployment["decode_instances"], prow, deployment["prefill_instances"],
                               closed={"ttft_s": prow["ttft_total_s"], "tpot_s": drow["tpot_s"]}))  # fmt: skip
    if agg:
        cands.append(Candidate("aggregated", agg, 1, closed={"ttft_s": agg["ttft_s"], "tpot_s": agg["tpot_s"]}))
    kw = {k: v for k, v in kw.items() if v is not None}
    out = verify(m, hw, cands, isl=workload["isl"], osl=workload["osl"], **kw)
    notes += notes_of(out, workload["max_ttft_s"], workload["max_tpot_s"])
    return out


def verify_prefill(m, h, t, pre, hit_share: float, pricing: Pricing, set_, notes: list) -> dict | None:
    """One prefill unit at its planned prompt rate (utilisation x full-load computed tokens/s per
    unit / computed tokens per prompt), simulated as a PD prefill pool alone (`moesim.simulate`,
    prefill_only): Poisson arrivals, prompts +-20 % around the traffic's length, the cache-hit share
    served from cache; its TTFT (queue, passes, the KV's transfer) against the planner's M/G/1 (notes
    where they disagree or the simulated p90 misses the target)."""
    from moesim.simulate import clients as C  # lazy: the simulator only when a plan is verified
    from moesim.simulate.core import simulate  # lazy: as above
    from moesim.simulate.options import options  # lazy: as above

    computed = t.prompt_length * (1.0 - hit_share)
    unit_tps = pre.full_load_tokens_per_s_per_node * pre.nodes_per_unit
    rate = pre.utilisation * unit_tps / computed if computed > 0 else float("nan")
    if not (math.isfinite(rate) and rate > 0):
        return None
    in_flight = rate * max(pre.ttft_s, pre.step_time_s)
    n = int(min(max(WAVES * in_flight, MIN_REQUESTS), MAX_REQUESTS))
    work = C.open_loop(rate, n, max(int(round(t.prompt_length)), 2), 1, range_ratio=RANGE_RATIO, tool="vllm",
                       warmup=int(min(in_flight, n // 3)))  # fmt: skip
    p = t.prefill
    tokens = int(pre.batch_tokens)
    r = simulate(m, h, workload=work, set=set_, **options(
                 tp=p.tp, dp=p.dp, ep=p.ep, redundant_experts=p.redundant_experts, overlap=p.overlap, comm=p.comm,
                 engine=pricing.engine, cost_mode=pricing.cost_mode, expert_skew=pricing.expert_skew,
                 hit_ratio=hit_share, prefill_only=True,
                 rules={"chunk_tokens": tokens, "max_prefill_tokens": tokens}))  # fmt: skip
    s = r.summary
    out = {"prompts_per_s_per_unit": rate, "sim_ttft_mean_s": s["ttft_mean_s"], "sim_ttft_p90_s": s["ttft_p90_s"],
           "closed_ttft_s": pre.ttft_s, "load": work.label}  # fmt: skip
    gap = s["ttft_mean_s"] / pre.ttft_s - 1.0 if pre.ttft_s > 0 else float("nan")
    out["ttft_gap"] = gap
    if math.isfinite(gap) and abs(gap) > DISAGREE:
        notes.append(
            f"verify: prefill unit at {rate:,.2f} prompts/s: simulated mean TTFT {s['ttft_mean_s'] * 1e3:,.0f} ms "
            f"(p90 {s['ttft_p90_s'] * 1e3:,.0f} ms, incl. the KV's transfer) vs the planner's M/G/1 "
            f"{pre.ttft_s * 1e3:,.0f} ms ({gap * 100:+.0f}%)"
        )
    if t.max_ttft_s and s["ttft_p90_s"] > t.max_ttft_s:
        notes.append(
            f"verify: prefill unit: simulated p90 TTFT {s['ttft_p90_s'] * 1e3:,.0f} ms misses the target "
            f"{t.max_ttft_s * 1e3:,.0f} ms at the planned load"
        )
    return out


def _skipped(c: Candidate, flying: float) -> dict:
    nan = float("nan")
    row = {k: nan for k in ("sim_ttft_mean_s", "sim_ttft_p90_s", "sim_tpot_mean_s", "sim_tpot_p90_s",
                            "sim_output_tokens_per_s_per_gpu", "sim_requests_per_s", "ttft_gap", "tpot_gap")}  # fmt: skip
    row.update(candidate=c.label, load="not simulated", closed_ttft_s=c.closed.get("ttft_s"),
               closed_tpot_s=c.closed.get("tpot_s"), disagrees=[])  # fmt: skip
    row["skipped"] = (
        f"{c.label}: not simulated ({flying:,.0f} requests in flight, more than {MAX_IN_FLIGHT:,} a verification "
        "runs); `moesim simulate` runs it with the layout and load given"
    )
    return row


def notes_of(rows: list[dict], max_ttft_s=None, max_tpot_s=None) -> list[str]:
    """What the verification says, one line each: disagreements, and SLOs the simulation misses at p90."""
    out = []
    for r in rows:
        if r.get("skipped"):
            out.append(f"verify: {r['skipped']}")
        out += [f"verify: {t}" for t in r["disagrees"]]
        for k, slo in (("ttft", max_ttft_s), ("tpot", max_tpot_s)):
            v = r[f"sim_{k}_p90_s"]
            if slo is not None and math.isfinite(v) and v > slo:
                out.append(
                    f"verify: {r['candidate']}: simulated p90 {k.upper()} {v * 1e3:,.1f} ms misses the target "
                    f"{slo * 1e3:,.0f} ms ({r['load']})"
                )
    return out


__all__ = ["Candidate", "verify", "verify_disagg", "verify_prefill", "notes_of", "DISAGREE"]
