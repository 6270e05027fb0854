"""Aggregated serving as a phase ("mixed"): decode and prefill on the same GPUs, scheduled as the
engine schedules them (`moesim.engine.scheduler`: prefill-priority chunked prefill for SGLang,
fused chunked prefill for vLLM / TRT-LLM) under a closed-loop (concurrency = batch) or open-loop
(request rate) load.

Every forward pass is priced by the one evaluation path (`evaluate_grid`), so weights are read
once per pass, never per token:

* the decode step at the batch of requests decoding (context = the mean KV length);
* SGLang on one DP group: a prefill pass of T prompt tokens (phase prefill, batch T, context ISL:
  causal attention over the prompt), T = the prompts waiting when the pass starts, up to the chunk;
* vLLM / TRT-LLM, and SGLang with DP attention (the DP ranks' passes in lock step): ONE
  decode-phase pass carrying the decode tokens plus T prefill tokens on a prefilling rank (`chunk=`
  of the workload: GEMMs, experts and all-to-all over all tokens, attention per request; the
  experts see the mean over the ranks, k T / dp with k ranks prefilling).

The decode batch and T depend on the load and the load on the step times: a few fixed-point
rounds re-price them (`ROUNDS`); within a round the scheduler's closed forms are exact.
Memory: the decode footprint at the batch (requests per DP group) plus one prefill pass's
activations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.engine import scheduler as S
from moesim.engine.evaluate import default_comm
from moesim.engine.pricing import evaluate_grid
from moesim.engine.settings import Pricing
from moesim.enums import Overlap, Phase
from moesim.errors import ConfigError, is_positive_number
from moesim.grid.core import Grid, replace
from moesim.metrics.memory import memory
from moesim.schedule.schemes import micro_batches, overlap_choices
from moesim.specs.engine import load_engine_model

ROUNDS = 3  # pricings of (decode batch, prefill tokens per pass): the first at the batch given


def check_inputs(isl, osl, chunk_tokens=None, request_rate=None):
    """-> (isl, osl) as floats; each must be a positive number, chunk_tokens and request_rate too if given."""
    for name, v in (("isl", isl), ("osl", osl)):
        if not is_positive_number(v):
            raise ConfigError(f"{name}: phase mixed needs a positive {name} (tokens per request); got {v!r}")
    for name, v, unit in (("chunk_tokens", chunk_tokens, "tokens"), ("request_rate", request_rate, "requests/s")):
        if v is not None and not is_positive_number(v):
            raise ConfigError(f"{name}: must be a positive number ({unit}); got {v!r}")
    return float(isl), float(osl)


def prefill_overlap(overlap):
    """The decode overlap scheme if prefill has it (five-stage is decode-only), else its default."""
    if overlap is None:
        return None
    o = Overlap(overlap).value
    return o if o in overlap_choices(Phase.PREFILL) else None


def prefill_grid(grid: Grid, tokens, isl) -> Grid:
    """A prefill pass of `tokens` prompt tokens per DP group over prompts of `isl` tokens."""
    n = grid.size
    return replace(grid, batch=np.asarray(tokens, float) * np.ones(n), context=np.full(n, float(isl)), mtp=np.zeros(n))


@dataclass
class Served:
    values: dict
    notes: list
    decode: object  # Evaluation of the last decode step priced
    prefill: object  # Evaluation of the last prefill-carrying pass priced
    solution: S.Solution
    budget: np.ndarray


def _price(model, hw, grid, batch, chunk, isl, lockstep, overlap, pricing: Pricing):
    """(decode Evaluation, prefill-carrying pass Evaluation, notes) at the decode batch with
    chunk = (T prompt tokens on a prefilling rank, mean prompt tokens per rank through the experts).
    SGLang without DP lock step: a prefill pass of its own; otherwise one decode-phase pass carrying
    the chunk (fused engines; SGLang DP ranks decoding while one prefills, on DeepEP normal as
    SGLang's auto mode picks it when any rank extends)."""
    g = replace(grid, batch=batch)
    T, mean = chunk
    dec, n1 = evaluate_grid(model, hw, g, phase=Phase.DECODE, overlap=overlap, pricing=pricing)
    # the all-to-all mode of a pass carrying prefill tokens on an aggregated server (SGLang: deepep auto
    # -> normal; the fused engines: one backend for every pass): moesim.specs.engine EngineModel.requested
    em = load_engine_model(pricing.engine)
    pp = pricing.replace(comm=em.requested(pricing.comm or default_comm(Phase.DECODE), Phase.PREFILL, aggregated=True))
    if S.fused(pricing.engine.value) or np.any(lockstep > 1):
        ch = (T, np.full(g.size, isl), mean)
        pas, n2 = evaluate_grid(model, hw, g, phase=Phase.DECODE, overlap=overlap, pricing=pp, chunk=ch)
    else:
        pas, n2 = evaluate_grid(model, hw, prefill_grid(g, T, isl), phase=Phase.PREFILL,
                                overlap=prefill_overlap(overlap), pricing=pp)  # fmt: skip
    return dec, pas, list(dict.fromkeys(n1 + n2))


def serve(model, hw, grid: Grid, *, isl, osl, overlap=None, chunk_tokens=None, request_rate=None,
          pricing: Pricing | None = None) -> Served:  # fmt: skip
    """The aggregated-serving fixed point over a grid (batch = concurrency per DP group in closed
    loop, the most running requests in open loop), every pass priced by `pricing` (default `Pricing()`)."""
    isl, osl = check_inputs(isl, osl, chunk_tokens, request_rate)
    pricing = pricing if pricing is not None else Pricing()
    engine = pricing.engine.value
    is_fused = S.fused(engine)
    cap = grid.batch
    lockstep = grid.dp if model.is_moe else np.ones(grid.size)  # DP ranks sharing the MoE layers
    total = S.default_budget_tokens(engine, hw.memory_bytes, grid.dp) if chunk_tokens is None else None
    total = np.maximum(np.full(grid.size, float(chunk_tokens)) if total is None else total, 1.0)
    ub = micro_batches(Overlap(overlap).value) if overlap else 1
    batch, k = cap.copy(), np.ones(grid.size)
    T = np.minimum(isl, _budget(total, batch, grid, is_fused))
    first = None
    for _ in range(ROUNDS):
        dec, pas, notes = _price(model, hw, grid, batch, (T, T * k / lockstep), isl, lockstep, overlap, pricing)
        first = first or dec  # priced at the batch given: the memory footprint
        T_priced, k_priced, budget = T, k, _budget(total, batch, grid, is_fused)
        prices = S.PassTimes(_f(dec, "step_time_s"), _f(pas, "step_time_s"), T, budget, grid.tokens_per_step, is_fused,
                          lockstep)  # fmt: skip
        if request_rate is None:
            sol = S.solve(prices, isl, osl, concurrency=cap)
        else:
            sol = S.solve(prices, isl, osl, rate=float(request_rate) / grid.dp)
        batch = np.minimum(np.maximum(sol.decode_batch, np.minimum(cap, ub)), cap)
        T = np.minimum(sol.next_T, _budget(total, batch, grid, is_fused))
        k = sol.ranks_prefilling
    if request_rate is not None:  # more requests decoding than the engine runs: the queue grows
        sol.stable = sol.stable & (sol.decode_batch <= cap * (1 + 1e-9))
    vals = _values(grid, (dec, pas), sol, (T_priced, budget), (isl, osl), engine, request_rate, hw.gpus_per_node)
    vals["prefill_ranks_per_pass"] = k_priced
    pre_act = memory(model, hw, prefill_grid(grid, T_priced, isl), Phase.PREFILL, pas.comm).activation_bytes
    _memory_values(vals, first, pre_act)
    return Served(vals, notes, dec, pas, sol, budget)


def _budget(total, batch, grid: Grid, is_fused):
    """Prefill tokens one pass takes: the chunk (SGLang), or the token budget less the decode
    tokens it already carries (vLLM V1 schedules running requests first; at least one token)."""
    return np.maximum(total - batch * grid.q_len, 1.0) if is_fused else total


def _f(ev, key):
    return np.asarray(ev.values[key], float)


def _values(grid, evs, sol: S.Solution, tokens, lengths, engine, request_rate, gpus_per_node) -> dict:
    """The mixed phase's columns (the estimate's and the sweep's) but memory (`_memory_values`)."""
    (dec, pas), (T, budget) = evs, tokens
    (isl, osl), a, tp = lengths, grid.tokens_per_step, grid.tp
    td, D, u = _f(dec, "step_time_s"), _f(pas, "step_time_s"), np.minimum(sol.u, 1.0)
    U = np.minimum(np.maximum(sol.any_share, u), 1.0)  # passes in which any (lock-step) rank prefills
    ok = sol.stable
    tpot, ttft = np.where(ok, sol.tpot_s, np.inf), np.where(ok, sol.ttft_s, np.inf)
    out_rate = np.where(ok, sol.lam * osl, np.nan)  # output tokens/s per DP group
    n = grid.size
    return {
        "step_time_s": tpot * a,
        "tpot_s": tpot,
        "tokens_per_s_per_user": 1.0 / tpot,
        "ttft_s": ttft,
        "ttft_p90_s": np.where(ok, sol.ttft_p90_s, np.inf),  # exponential-tail approximation (scheduler)
        "tokens_per_s_per_gpu": out_rate / tp,
        "tokens_per_s_per_node": out_rate / tp * gpus_per_node,
        "input_tokens_per_s_per_gpu": np.where(ok, sol.lam * isl, np.nan) / tp,
        "mfu": (1.0 - U) * _f(dec, "mfu") + U * _f(pas, "mfu"),
        "accepted_tokens_per_step": a,
        "decode_step_time_s": td,
        "prefill_chunk_time_s": D,
        "prefill_chunk_tokens": np.asarray(T, float) * np.ones(n),
        "prefill_share": u,  # of this rank's time
        "prefill_pass_share": U,  # of the time, passes carrying prefill on any DP rank
        "prefill_budget_tokens": budget,
        "ttft_queue_s": np.where(ok, sol.wait_s, np.inf),
        "ttft_prefill_s": sol.own_s,
        "decode_batch": sol.decode_batch,
        "request_rate_per_s": sol.lam * grid.dp,  # offered (open loop) or solved (closed loop)
        "concurrency": np.where(ok, sol.lam * (ttft + osl * tpot), np.nan),
        "stable": ok,
        "scheduler": np.full(n, S.scheduler_name(engine), dtype=object),
        "load": np.full(n, "closed" if request_rate is None else "open", dtype=object),
        "moe_layer_time_s": _f(dec, "moe_layer_time_s"),
        "dense_layer_time_s": _f(dec, "dense_layer_time_s"),
        "bottleneck": np.where(
            U < 0.5, np.asarray(dec.values["bottleneck"], object), np.asarray(pas.values["bottleneck"], object)
        ),  # fmt: skip
        "overlap": np.asarray(dec.values["overlap"], object),
        "prefill_overlap": np.asarray(pas.values["overlap"], object),
        "prefill_comm": np.full(n, pas.comm.value, dtype=object),
    }


def _memory_values(vals: dict, first, pre_act) -> None:
    """The decode footprint at the batch given (KV of every request) plus a prefill pass's activations."""
    vals.update({k: _f(first, k) for k in ("weights_bytes", "kv_cache_bytes", "comm_buffer_bytes", "capacity_bytes")})
    vals["activation_bytes"] = _f(first, "activation_bytes") + np.asarray(pre_act, float)
    vals["total_bytes"] = _f(first, "total_bytes") + np.asarray(pre_act, float)
    vals["fits"] = np.asarray(first.values["fits"], bool) & (vals["total_bytes"] <= vals["capacity_bytes"])
    vals["max_batch"] = _f(first, "max_batch")


def evaluate_mixed(model, hw, grid: Grid, *, isl, osl, overlap=None, chunk_tokens=None, request_rate=None,
                   pricing: Pricing | None = None):  # fmt: skip
    """Vectorized mixed-phase values over a grid (the sweep's path) -> (values, notes)."""
    pricing = pricing if pricing is not None else Pricing()
    r = serve(model, hw, grid, isl=isl, osl=osl, overlap=overlap, chunk_tokens=chunk_tokens,
              request_rate=request_rate, pricing=pricing)  # fmt: skip
    return r.values, r.notes + [load_note(pricing.engine.value, request_rate)]


def load_note(engine, request_rate) -> str:
    """What the output says about the serving model used."""
    sched = (
        "fused chunked prefill (one forward pass per step: decode tokens + prefill tokens up to the token "
        "budget, --max-batched-tokens)"
        if S.fused(engine)
        else "prefill-priority chunked prefill (prompts in their own passes of <= --chunked-prefill-size "
        "tokens, interrupting decode)"
    )
    load = (
        "closed loop at --batch concurrent requests per DP group (Little's law)"
        if request_rate is None
        else f"open loop at {float(request_rate):g} requests/s (Poisson)"
    )
    return (
        f"mixed ({engine}): {sched}; {load}; TTFT = wait (M/G/1 non-preemptive priority, prefill first) + "
        "the prompt's own passes; TTFT p90 from the exponential-tail approximation of the wait; TPOT mean only"
    )


__all__ = [
    "check_inputs",
    "serve",
    "evaluate_mixed",
    "prefill_grid",
    "prefill_overlap",
    "load_note",
    "Served",
    "ROUNDS",
]
