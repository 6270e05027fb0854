"""Aggregated serving as engines schedule it: steady-state closed forms over arrays (one DP group).

Two schedulers (`--engine`):

* prefill-priority (SGLang's default scheduler, `scheduler.get_next_batch_to_run`: a waiting
  prompt is prefilled before the next decode step): prompts run in their own forward passes of at
  most one chunk (`--chunked-prefill-size`; whole prompts batched together up to it, a longer
  prompt over ceil(ISL / chunk) passes); decode steps run the running batch in between.
* fused chunked prefill (vLLM V1 scheduler, TRT-LLM in-flight batching): each step is ONE forward
  pass over the running decode tokens plus prefill tokens filling the token budget
  (`--max-batched-tokens`); the prefill tokens add only their increment to the step.

Per DP rank, with n_p = lam x ISL / T prefill-carrying passes per second (T prefill tokens per
pass, lam requests/s) of duration D, a decode step of t_d and a accepted tokens per step; with DP
attention the dp ranks' passes run in lock step (one MoE layer for all: SGLang's MLP sync, vLLM's
DP+EP dummy batches), so a pass in which any rank prefills holds every rank for D:

    u      = n_p x D                                      time share in which this rank prefills
    U      = 1 - (1 - u)^dp                               ... in which any rank does (independent)
    steps  = (U - u) / D + (1 - U) / t_d  (prefill-priority: no decode on a prefilling rank)
           = U / D + (1 - U) / t_d        (fused: its prefill-carrying steps advance decode too)
    TPOT   = 1 / (a x steps)
    TTFT   = W + max(1, ISL / budget) x D                 the prompt's own passes
    W      = R / (1 - u)                                  M/G/1 non-preemptive priority, prefill the
                                                          high class (Cobham 1954): R = mean
                                                          residual of the pass in flight
    R      = (U x D + busy_decode x t_d) / 2              deterministic passes: residual = half

Load: open loop at a request rate (Poisson arrivals: PASTA), or closed loop at N concurrent
clients (what benchmark tools run): lam = N / (TTFT + OSL x TPOT) (Little's law), solved by
bisection on arrays (the right side falls as lam grows). A closed-loop arrival sees the other N - 1
clients only (arrival theorem, Reiser & Lavenberg 1980): u and the prefill rate it sees scale by
(N - 1) / N, and the decode step is busy when one of the N - 1 others decodes; at N = 1 there is
no queueing and no interruption (TPOT = the decode step).

p90 TTFT: the priority queue has no closed-form waiting-time distribution, so the wait takes the
exponential-tail approximation with the exact mean and the exact probability of waiting
(p_w = P(a pass is in flight on arrival), PASTA / arrival theorem):

    P(W > t) = p_w exp(-p_w t / E[W])    ->    W_p90 = E[W] / p_w x ln(p_w / 0.1)  (0 if p_w <= 0.1)
    TTFT_p90 = W_p90 + the prompt's own passes (deterministic)

exact for M/M/1 (waiting time: an atom 1 - rho at 0 and an exponential tail of mean E[W] / rho),
and the M/G/1 tail is asymptotically exponential (Cramer-Lundberg; Kingman 1962 in heavy
traffic); for near-deterministic passes (M/D/1) it overstates the tail a little. TPOT: means only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.enums import Engine

# Default per-pass prefill token budgets: the engine model's scheduler tiers (moesim/specs/engines/*.yaml:
# SGLang chunked_prefill_size, split over the DP-attention ranks; vLLM max_num_batched_tokens; TRT-LLM
# max_num_tokens; each by GPU memory), read by moesim.specs.engine.prefill_budget_tokens.
GiB = 1024.0**3


def fused(engine) -> bool:
    """vLLM and TRT-LLM fuse prefill chunks into decode steps; SGLang prefills first."""
    return Engine.parse(engine, "engine") != Engine.SGLANG


def scheduler_name(engine) -> str:
    return "fused-chunked-prefill" if fused(engine) else "prefill-priority-chunked"


def default_budget_tokens(engine, memory_bytes: float, dp) -> np.ndarray:
    """The engine's default prefill tokens per forward pass per DP group (the engine model)."""
    from moesim.specs.engine import load_engine_model, prefill_budget_tokens  # lazy: YAML on first use

    dp = np.asarray(dp, float)
    total = float(prefill_budget_tokens(engine, memory_bytes))
    if load_engine_model(engine).chunk_split_over_dp:  # SGLang: chunked_prefill_size // attn_dp_size
        return np.floor(total / dp)
    return np.full(dp.shape, total)


@dataclass
class PassTimes:
    """Arrays per DP group: t_d decode step (s), D duration of a pass carrying T prefill tokens (s)
    on a rank, budget = most prefill tokens one pass takes, a = accepted tokens per step."""

    t_d: np.ndarray
    D: np.ndarray
    T: np.ndarray
    budget: np.ndarray
    a: np.ndarray
    fused: bool
    dp: np.ndarray = 1.0  # DP ranks whose passes run in lock step


def _busy(in_decode, n, dp):
    """P(some request decodes in the deployment) seen by an arrival: Poisson numbers (open loop) or
    each of the other clients decoding with its time share (closed loop), on dp ranks."""
    if n is None:
        return -np.expm1(-in_decode * dp)
    f = np.minimum(in_decode / n, 1.0)
    return 1.0 - (1.0 - f) ** (np.maximum(n - 1.0, 0.0) + n * (dp - 1.0))


def _rates(lam, p: PassTimes, isl, osl, n):
    """(TTFT, TPOT, u, W, own, U, p_w) at request rate lam per DP group; n = concurrency (closed) or
    None (open); p_w = the probability that an arrival waits (a pass in flight)."""
    g = 1.0 if n is None else np.maximum(n - 1.0, 0.0) / n  # share of the load an arrival sees (arrival theorem)
    n_p = lam * isl / p.T
    u = n_p * p.D
    ug = np.minimum(g * u, 1.0)
    # passes are in lock step over the DP ranks (one MoE layer for all): any rank's prefill holds
    # every rank for D; ranks prefill independently
    any_ = 1.0 - (1.0 - ug) * (1.0 - np.minimum(u, 1.0)) ** (p.dp - 1.0)
    steps = (any_ - (0.0 if p.fused else ug)) / p.D + (1.0 - any_) / p.t_d
    tpot = np.where(ug < 1.0, 1.0 / (p.a * np.maximum(steps, 1e-300)), np.inf)
    in_decode = lam * osl * np.where(np.isfinite(tpot), tpot, 0.0)  # requests decoding per rank (Little)
    busy = _busy(in_decode, n, p.dp)
    p_wait = np.minimum(any_ + np.minimum(busy, 1.0 - any_), 1.0)
    residual = 0.5 * (any_ * p.D + np.minimum(busy, 1.0 - any_) * p.t_d)
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(ug < 1.0, residual / (1.0 - ug), np.inf)
    # a prompt longer than the budget takes ISL / budget passes of D, the last one partial
    # (proportional to its tokens: between that and ceil(ISL / budget) full passes)
    own = np.maximum(1.0, isl / p.budget) * p.D
    return wait + own, tpot, u, wait, own, any_, p_wait


def wait_p90(mean_wait, p_wait):
    """90th percentile of the wait under P(W > t) = p_w exp(-p_w t / E[W]) (module doc)."""
    p = np.asarray(p_wait, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.asarray(mean_wait, float) / p * np.log(p / 0.1)
    return np.where(p > 0.1, w, 0.0)


@dataclass
class Solution:
    lam: np.ndarray  # requests/s per DP group
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    u: np.ndarray  # time share of the passes in which this rank prefills
    wait_s: np.ndarray  # queueing for prefill incl. the residual of the pass in flight
    own_s: np.ndarray  # the prompt's own prefill passes
    decode_batch: np.ndarray  # requests a decoding request shares its step with (itself included)
    next_T: np.ndarray  # prefill tokens per pass at this load (prompts batched up to the budget)
    stable: np.ndarray
    any_share: np.ndarray  # time share of the passes in which any DP rank prefills
    dp: np.ndarray = 1.0  # DP ranks in lock step
    ttft_p90_s: np.ndarray = np.nan  # exponential-tail approximation of the wait (module doc) + own passes

    @property
    def ranks_prefilling(self):
        """Mean DP ranks prefilling in a pass that carries prefill (>= 1)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.asarray(self.u, float) * self.dp / np.asarray(self.any_share, float)
        return np.clip(np.nan_to_num(k, nan=1.0), 1.0, np.maximum(self.dp, 1.0))


def solve(p: PassTimes, isl: float, osl: float, *, concurrency=None, rate=None, iterations: int = 80) -> Solution:
    """Closed loop (concurrency: clients per DP group) or open loop (rate: requests/s per DP group)."""
    if concurrency is not None:
        n = np.asarray(concurrency, float)
        _, tpot0, _, _, own0, *_ = _rates(np.zeros_like(n), p, isl, osl, n)
        hi = n / (own0 + osl * tpot0)  # TTFT >= own passes, TPOT >= its value without load
        hi = np.minimum(hi, p.T / (isl * p.D) * (1.0 - 1e-12))  # a rank prefills < 100% of the time
        lo = np.zeros_like(n)
        for _ in range(iterations):  # lam x (TTFT + OSL x TPOT) rises with lam: bisection
            mid = 0.5 * (lo + hi)
            ttft, tpot, *_ = _rates(mid, p, isl, osl, n)
            over = mid * (ttft + osl * tpot) > n
            lo, hi = np.where(over, lo, mid), np.where(over, mid, hi)
        lam = 0.5 * (lo + hi)
    else:
        n = None
        lam = np.asarray(rate, float) * np.ones_like(p.t_d)
    ttft, tpot, u, wait, own, any_, p_wait = _rates(lam, p, isl, osl, n)
    in_decode = lam * osl * tpot
    share = 1.0 if n is None else np.maximum(n - 1.0, 0.0) / n
    others = in_decode if n is None else np.maximum(n - 1.0, 0.0) * np.minimum(in_decode / n, 1.0)
    queued = lam * wait * share
    next_T = np.minimum((1.0 + queued) * isl, p.budget)
    stable = np.isfinite(ttft) & np.isfinite(tpot) & (u < 1.0)
    p90 = np.where(np.isfinite(wait), wait_p90(wait, p_wait) + own, np.inf)
    return Solution(lam, ttft, tpot, u, wait, own, 1.0 + others, next_T, stable, any_, np.asarray(p.dp, float), p90)


__all__ = ["PassTimes", "Solution", "solve", "wait_p90", "default_budget_tokens", "fused", "scheduler_name"]
