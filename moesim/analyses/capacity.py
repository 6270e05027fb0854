"""Pool capacities of the planner: the decode and prefill operating points from the model's own
predictions (one `evaluate_grid` call each); `moesim.analyses.plan` turns them into nodes.

* decode: the batch (requests per DP group, 1..decode.max_batch) is swept at the decode
  deployment; the largest batch that fits memory and keeps ``min_tokens_per_s_per_user`` wins.
* prefill: candidate batches (prompt tokens per DP group, ``prefill.batch_tokens`` halved down)
  at the prefill deployment, the prompt-length distribution and the cached share; with
  ``max_ttft_s`` the pool runs at the M/G/1 utilisation that meets the mean-TTFT target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moesim.engine.pricing import evaluate_grid, resolve_specs
from moesim.engine.settings import Pricing
from moesim.errors import ConfigError, check_number
from moesim.grid.core import Grid
from moesim.grid.validity import check_grid, check_redundant
from moesim.specs.distributions import LengthDist, length_dist
from moesim.specs.pools import DecodePool, PrefillPool

PREFILL_HALVINGS = 8  # candidates: batch_tokens, /2, /4, ... (one evaluate_grid call)


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


def specs_of(model, hardware, set_):
    """(ModelSpec, HardwareSpec) from names, paths or specs, with `--set` overrides."""
    return resolve_specs(model, hardware, set_)


def _finite(name, v, lo, hi, lo_open=False):
    """API callers pass numbers directly (bypassing the traffic loader): finite and in range."""
    allowed = f"allowed a finite number {'>' if lo_open else '>='} {lo:g} and <= {hi:g}"
    return check_number(name, v, lo=lo, hi=hi, lo_open=lo_open, message=f"{name}: {v!r}; {allowed}")


def _evaluate_pool(m, h, pool, phase, batch, context, mtp, acceptance, pricing: Pricing | None, notes) -> dict:
    """One evaluate_grid call over the batches at the pool's deployment (its comm replacing the
    pricing's) -> the engine's values; `notes` (a list or None) collects the engine's notes."""
    check_redundant(m, pool.redundant_experts)
    grid = Grid.product(tp=pool.tp, dp=pool.dp, ep=pool.ep, moe_tp=1, batch=batch, context=context, mtp=mtp,
                        acceptance=acceptance, redundant=pool.redundant_experts)  # fmt: skip
    ok, reason = check_grid(m, h, grid, phase)
    if not ok.all():
        raise ConfigError(f"{phase}: {reason[~ok][0]}")
    pricing = (pricing if pricing is not None else Pricing()).replace(comm=pool.comm)
    ev, ns = evaluate_grid(m, h, grid, phase=phase, overlap=pool.overlap, pricing=pricing)
    if notes is not None:
        notes.extend(ns)
    return ev.values


def decode_capacity(
    model,
    hardware,
    pool: DecodePool = DecodePool(),
    *,
    context: float = 4989.0,
    min_tokens_per_s_per_user: float = 20.0,
    set=None,
    pricing: Pricing | None = None,
    notes: list | None = None,
) -> DecodeCapacity:
    """Largest batch (requests per DP group, swept 1..pool.max_batch in ONE evaluate_grid call)
    that fits memory and keeps tokens/s per user >= the SLO, and the throughput there.
    pricing: `Pricing` (default `Pricing()`); notes: a list the engine's notes extend (None: dropped)."""
    min_tokens_per_s_per_user = _finite("slo.min_tokens_per_s_per_user", min_tokens_per_s_per_user, 0, 1e6)
    max_batch = _finite("decode.max_batch", pool.max_batch, 1, 100_000)
    m, h = specs_of(model, hardware, set)
    batches = np.arange(1, int(max_batch) + 1, dtype=float)
    v = _evaluate_pool(m, h, pool, "decode", batches, context, pool.mtp, pool.acceptance, pricing, notes)
    user = np.asarray(v["tokens_per_s_per_user"], float)
    fits = np.asarray(v["fits"], bool)
    where = f"decode EP{pool.ep} DP{pool.dp} TP{pool.tp} on {h.name} (context {context:g}, mtp {pool.mtp})"
    i = _decode_pick(fits, user >= min_tokens_per_s_per_user, user, min_tokens_per_s_per_user, where)
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
        sweep={
            "batch": batches,
            "tokens_per_s_per_user": user,
            "tokens_per_s_per_node": v["tokens_per_s_per_node"],
            "fits": fits,
            "step_time_s": v["step_time_s"],
        },
    )


def _decode_pick(fits, meets, user, slo, where) -> int:
    """Index of the largest batch that fits and meets the SLO; one-line errors when none does."""
    if not fits.any():
        raise ConfigError(
            f"decode: no batch fits in GPU memory at {where}; allowed: a larger deployment, "
            f"shorter context or more memory"
        )
    ok = fits & meets
    if not ok.any():
        best = float(np.max(np.where(fits, user, 0.0)))
        raise ConfigError(
            f"slo.min_tokens_per_s_per_user: {slo:g} tok/s is not reachable at "
            f"{where}; the model predicts at most {best:.1f}; allowed <= {best:.1f}"
        )
    return int(np.nonzero(ok)[0].max())


def prefill_capacity(
    model,
    hardware,
    pool: PrefillPool = PrefillPool(),
    *,
    prompt_length: float = 4989.0,
    max_ttft_s: float | None = None,
    cached_share: float = 0.0,
    prompt=None,
    set=None,
    pricing: Pricing | None = None,
    notes: list | None = None,
) -> PrefillCapacity:
    """Computed prompt tokens/s per node at the prefill deployment, over candidate batches
    (pool.batch_tokens halved down, ONE evaluate_grid call) that fit memory.

    prompt: the prompt-length distribution (moesim.specs.distributions.LengthDist; default: every
    prompt prompt_length long). cached_share: the share of each prompt already in the KV cache (its
    head). Those tokens skip compute, but the computed tail attends to them (see
    `attention_context`). With max_ttft_s the pool runs at the utilisation of `ttft_utilisation`
    (M/G/1), maximised over the candidate batches; without a TTFT target at full load.
    pricing: `Pricing` (default `Pricing()`); notes: a list the engine's notes extend (None: dropped).
    """
    if max_ttft_s is not None:
        max_ttft_s = _finite("slo.max_ttft_s", max_ttft_s, 0, 1e6, lo_open=True)
    _finite("prefill.batch_tokens", pool.batch_tokens, 1, 1e9)
    c = _finite("cached_share", cached_share, 0, 1)
    if c >= 1.0:
        raise ConfigError(f"cached_share: {cached_share!r}; allowed >= 0 and < 1 (some prompt tokens must be computed)")
    if prompt is None:
        prompt = LengthDist(_finite("prompt_length", prompt_length, 1, 1e8))
    elif not isinstance(prompt, LengthDist):  # a number, {mean, dist} or {bins} as in the traffic YAML
        prompt = length_dist("", "prompt", prompt)
    m, h = specs_of(model, hardware, set)
    cand = np.unique(np.maximum(1.0, np.round(pool.batch_tokens / 2.0 ** np.arange(PREFILL_HALVINGS))))
    v = _evaluate_pool(m, h, pool, "prefill", cand, attention_context(m, prompt, c), 0, 0.0, pricing, notes)
    step = np.asarray(v["step_time_s"], float)
    fits = np.asarray(v["fits"], bool)
    full = np.asarray(v["tokens_per_s_per_node"], float)
    rho, es, ttft = ttft_utilisation(prompt, c, cand, step, max_ttft_s)
    planned = full * rho
    where = f"prefill EP{pool.ep} DP{pool.dp} TP{pool.tp} on {h.name} (prompt {prompt.describe()} tokens)"
    i = _prefill_pick(fits, rho, planned, es, max_ttft_s, where)
    if max_ttft_s is not None:  # the queueing headroom (rho < 1) and the batch both follow the target
        why = "ttft"
    elif i == cand.size - 1:
        why = "batch_tokens"
    else:
        why = "memory"
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
        sweep={
            "batch_tokens": cand,
            "ttft_s": ttft,
            "tokens_per_s_per_node": planned,
            "full_load_tokens_per_s_per_node": full,
            "utilisation": rho,
            "fits": fits,
        },
    )


def attention_context(m, prompt: LengthDist, c: float) -> float:
    """The one prompt length whose causal prefill attends as the mix does.

    A prompt P long with share c cached has (1 - c) P computed tokens and (1 - c^2) P^2 / 2
    (query, key) pairs, so per computed token the keys average (1 + c) E[P^2] / (2 E[P]) over the
    mix -- the causal prefill of one prompt (1 + c) E[P^2] / E[P] long (the attention core is the
    only prefill op that reads the context, as context / 2; its cost is linear in the pairs)."""
    ctx = prompt.moment_ratio() * (1.0 + c)
    if ctx > m.max_context:
        raise ConfigError(
            f"prompt_length: the attention of this prompt mix ({prompt.describe()}, {c:.0%} cached) "
            f"equals one prompt of {ctx:,.0f} tokens (E[P^2]/E[P] x (1 + cached share)), "
            f"beyond {m.name}'s max_context = {m.max_context:,}; allowed a shorter mean or a "
            f"narrower distribution"
        )
    return ctx


def ttft_utilisation(prompt: LengthDist, c: float, cand, step, max_ttft_s):
    """-> (utilisation rho, mean service E[S], mean TTFT), arrays over the candidate batches.

    Prompts arrive as a Poisson stream at each DP group; a prompt's service is S = k S_step (k =
    steps its computed tokens take at this batch; a prompt shorter than the batch shares one step).
    M/G/1 (Pollaczek-Khinchine) mean wait W = rho E[S^2] / (2 E[S] (1 - rho)); mean TTFT = W + E[S]
    <= max_ttft_s gives the highest utilisation rho = (T - E[S]) / (E[S^2] / (2 E[S]) + T - E[S])
    (for one prompt length: the M/D/1 form). Without a target rho = 1 (TTFT = compute only)."""
    lengths, w = prompt.discrete()
    service = np.ceil(lengths[:, None] * (1.0 - c) / cand[None, :]) * step[None, :]  # [prompt bin, batch]
    es = w @ service
    es2 = w @ service**2
    if max_ttft_s is None:
        rho = np.ones_like(step)
    else:
        slack = np.maximum(max_ttft_s - es, 0.0)
        rho = slack / (es2 / (2.0 * es) + slack)  # M/G/1 mean wait = slack
    wait = rho * es2 / (2.0 * es * np.maximum(1.0 - rho, 1e-12))
    ttft = np.where(rho < 1.0, es + wait, es)
    return rho, es, ttft


def _prefill_pick(fits, rho, planned, es, max_ttft_s, where) -> int:
    """Index of the candidate batch with the highest planned rate; one-line errors when none."""
    ok = fits & (rho > 0)
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
    return int(np.argmax(np.where(ok, planned, -np.inf)))
