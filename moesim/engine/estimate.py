"""One configuration in any phase: decode / prefill (`estimate.estimate_step`) or aggregated
serving, "mixed" (`estimate_mixed`: decode and prefill scheduled as the engine schedules them,
`moesim.engine.serving`)."""

from __future__ import annotations

import math

from moesim.engine.serving import check_inputs, load_note, serve
from moesim.engine.settings import Pricing
from moesim.engine.step import STEP_FIELDS, EstimateResult, estimate_step, op_table
from moesim.enums import Phase
from moesim.grid.core import Grid
from moesim.schedule.schemes import micro_batches

# which model produced the mixed phase's TTFT (issue 26): the closed form, not the request-level simulator
TTFT_MODEL = "closed form: steady-state M/G/1 priority queue (moesim.engine.scheduler)"
MIXED_KEYWORDS = ("chunk_tokens", "request_rate")


def estimate(model="deepseek-v3", hardware="h800", *, phase="decode", isl=None, osl=None, set=None,
             pricing: Pricing | None = None, **kw) -> EstimateResult:  # fmt: skip
    """One configuration, per-op detail. Raises MoesimError subclasses on bad input.
    phase "mixed" (aggregated serving) needs isl and osl (tokens); it also takes chunk_tokens
    (prefill tokens per pass; default: the engine's) and request_rate (requests/s: open loop;
    default: closed loop at `batch` concurrent requests per DP group).
    Keywords: the configuration (`StepConfig`: tp, dp, ep, moe_tp, batch, context, mtp, acceptance,
    redundant_experts, overlap) and, for convenience, the pricing settings (`Pricing`: cost_mode,
    engine, comm, expert_skew, context_dist, profile, force_profile, cuda_graphs, comm_sms) that
    replace those of `pricing`; any other keyword is a ConfigError naming the allowed ones."""
    pricing, kw = Pricing.take("estimate", pricing, kw, STEP_FIELDS + MIXED_KEYWORDS)
    phase = Phase.parse(phase, "phase")
    if phase == Phase.MIXED:
        return estimate_mixed(model, hardware, isl=isl, osl=osl, set=set, pricing=pricing, **kw)
    for k in MIXED_KEYWORDS:
        kw.pop(k, None)
    return estimate_step(model, hardware, phase=phase, set=set, pricing=pricing, **kw)


def _mixed_ops(r, share_decode: float) -> list[dict]:
    """The decode step's ops, then the prefill-carrying pass's (named prefill:<op> or fused:<op>);
    each op's share is of the GPU's time (the decode steps take share_decode of it)."""
    tag = "fused:" if r.values["scheduler"][0].startswith("fused") else "prefill:"
    parts = ((r.decode, "", share_decode), (r.prefill, tag, 1.0 - share_decode))
    ops = []
    for ev, prefix, share in parts:
        rows = op_table(ev.op_costs, micro_batches(ev.chosen))
        total = sum(o["time_s"] for o in rows) or 1.0
        ops += [dict(o, name=prefix + o["name"], share=o["time_s"] / total * share) for o in rows]
    return ops


def estimate_mixed(model="deepseek-v3", hardware="h800", *, isl=None, osl=None, chunk_tokens=None, request_rate=None,
                   set=None, pricing: Pricing | None = None, **config) -> EstimateResult:  # fmt: skip
    """Aggregated serving of one configuration -> EstimateResult with phase "mixed". batch:
    concurrent requests per DP group (closed loop) or, with request_rate (requests/s for the
    deployment), the most requests running per DP group. context defaults to ISL + OSL / 2 (mean
    KV length over a request's decode). config: `StepConfig`'s fields; pricing: `Pricing`."""
    isl, osl = check_inputs(isl, osl, chunk_tokens, request_rate)
    pricing = pricing if pricing is not None else Pricing()
    if config.get("context") is None:
        config["context"] = isl + osl / 2.0
    d = estimate_step(model, hardware, phase="decode", set=set, pricing=pricing, **config)
    c = d.config
    g = Grid.single(**{a: c[a] for a in ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "acceptance")},
                    redundant=c["redundant_experts"])  # fmt: skip
    r = serve(d.model, d.hardware, g, isl=isl, osl=osl, overlap=config.get("overlap"), chunk_tokens=chunk_tokens,
              request_rate=request_rate, pricing=pricing)  # fmt: skip
    v = r.values
    config = dict(c, phase="mixed", isl=isl, osl=osl, prefill_chunk_tokens=float(v["prefill_chunk_tokens"][0]),
                  prefill_budget_tokens=float(v["prefill_budget_tokens"][0]), chunk_tokens=chunk_tokens,
                  request_rate=request_rate, scheduler=v["scheduler"][0], load=v["load"][0],
                  overlap=v["overlap"][0], prefill_overlap=v["prefill_overlap"][0], prefill_comm=v["prefill_comm"][0],
                  ttft_model=TTFT_MODEL, set=list(set or []))  # fmt: skip
    notes = list(dict.fromkeys(d.notes + r.notes)) + [load_note(pricing.engine.value, request_rate), _summary(v)]
    notes.append(f"TTFT from the {TTFT_MODEL}; `moesim simulate` replays requests (bursts, waves, percentiles)")
    if not v["stable"][0]:
        notes.append(
            f"unstable: {request_rate:g} requests/s is more than this deployment serves (prefill share "
            f"{float(v['prefill_share'][0]) * 100:.0f}%, {_count(float(v['decode_batch'][0]))} requests would decode at "
            f"once, batch {c['batch']:g}); the queue grows without bound: TTFT and TPOT unbounded (n/a)"
        )
    mem = dict(d.memory, activation_bytes=float(v["activation_bytes"][0]), total_bytes=float(v["total_bytes"][0]),
               fits=bool(v["fits"][0]))  # fmt: skip
    ops = _mixed_ops(r, 1.0 - float(v["prefill_pass_share"][0]))
    return EstimateResult(d.model, d.hardware, config, v, ops, mem, notes)


def _summary(v) -> str:
    f = {k: float(v[k][0]) for k in ("decode_step_time_s", "prefill_chunk_time_s", "prefill_chunk_tokens",
                                     "prefill_share", "ttft_queue_s", "ttft_prefill_s", "decode_batch")}  # fmt: skip
    return (
        f"mixed: decode step {f['decode_step_time_s'] * 1e3:.2f} ms at {_count(f['decode_batch'], '.2f')} requests; "
        f"prefill-carrying pass {f['prefill_chunk_time_s'] * 1e3:.2f} ms with {f['prefill_chunk_tokens']:,.0f} "
        f"prompt tokens ({f['prefill_share'] * 100:.1f}% of the time); TTFT = wait {_ms(f['ttft_queue_s'])} "
        f"+ own passes {_ms(f['ttft_prefill_s'])}"
    )


def _count(x: float, spec: str = ",.0f") -> str:
    """A count for a note; an unbounded one (unstable queue: inf) in words, never `inf`."""
    return format(x, spec) if math.isfinite(x) else "unboundedly many"


def _ms(t_s: float) -> str:
    return f"{t_s * 1e3:.2f} ms" if math.isfinite(t_s) else "unbounded"


__all__ = ["estimate", "estimate_mixed"]
