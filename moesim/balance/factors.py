"""Rank-imbalance factors for one grid (the step waits for the slowest rank).

Defaults: `expert_skew="uniform"` = equal expert popularity with multinomial noise of a finite
batch (the optimistic case); `context_dist="fixed"` = DeepSeek's decode load balancer equalises
KV per rank. Skewed traffic is given with --expert-skew zipf:<s> or a per-expert load CSV.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from moesim.enums import Phase, Tag
from moesim.grid.core import Grid


def imbalance_factors(model, hw, grid: Grid, phase, expert_skew="auto", context_dist="fixed", cost_mode="calibrated"):
    """-> ({"experts": array, "attention": array}, notes). expert_skew "auto": "none" (perfect
    balance) for the roofline lower bound, "uniform" (multinomial noise) otherwise."""
    notes = []
    if expert_skew == "auto":
        expert_skew = "none" if str(cost_mode) == "roofline" else "uniform"
    if expert_skew == "none" and context_dist == "fixed":
        return None, notes
    try:
        # lazy: scipy, only when rank imbalance is modelled (start-up time)
        from moesim.balance import imbalance as I
    except ImportError:
        return None, ["rank imbalance not modelled (moesim.balance unavailable)"]
    out = {}
    phase = Phase(phase)
    if model.is_moe and expert_skew != "none":
        tokens = grid.batch * (grid.q_len if phase != Phase.PREFILL else 1.0) * grid.dp
        # each micro-batch is its own all-to-all synchronisation: with two micro-batches the slowest
        # rank is drawn from half the tokens (more multinomial noise) -> "experts@2"
        factors = {1: np.ones(grid.size), 2: np.ones(grid.size)}
        for ep in np.unique(grid.ep):
            for red in np.unique(grid.redundant[grid.ep == ep]):
                sel = (grid.ep == ep) & (grid.redundant == red)
                shares = I.skew_shares(int(ep), model.moe.num_experts, int(red), expert_skew)
                for ub in factors:
                    factors[ub][sel] = I.expert_rank_imbalance(tokens[sel] / ub, model.moe.top_k, shares)
        out["experts"], out["experts@2"] = factors[1], factors[2]
        if grid.size == 1:
            notes.append(
                f"slowest EP rank receives {factors[1][0]:.2f}x the mean routed load ({factors[2][0]:.2f}x "
                f"per micro-batch of two) (expert_skew={expert_skew}"
                f"{', EPLB over the redundant slots' if grid.redundant[0] else ''}): applied to the expert "
                f"GEMMs, dispatch and combine"
            )
    cv = I.context_dist(context_dist)
    if phase != Phase.PREFILL and cv > 0:
        # expected max over DP ranks of the KV tokens a rank's requests hold (attention-core work)
        out["attention"] = I.dp_attention_imbalance(
            grid.batch, grid.dp, grid.context, cv, context_skewness=I.context_skewness(context_dist)
        )
        if grid.size == 1:
            notes.append(
                f"slowest DP rank holds {float(np.ravel(out['attention'])[0]):.2f}x the mean KV "
                f"(context_dist={context_dist}): applied to the attention core"
            )
    return out, notes


def op_factor(tags, factors: dict):
    """The imbalance factor an op's time takes, read from its tags (moesim.enums.Tag): the slowest
    EP rank's routed load for routed-expert compute and the all-to-alls ("experts"), the slowest DP
    rank's KV for the attention core ("attention"), else 1."""
    if Tag.ROUTED in tags or Tag.A2A in tags:
        return factors.get("experts", 1.0)
    if Tag.CORE in tags:
        return factors.get("attention", 1.0)
    return 1.0


def factors_for(imb, ub):
    """The factors for a micro-batch count: "experts@<ub>" (the slowest rank of one micro-batch)
    replaces "experts" when given."""
    out = {k: v for k, v in imb.items() if "@" not in k}
    if f"experts@{ub}" in imb:
        out["experts"] = imb[f"experts@{ub}"]
    return out


def apply_factors(costs, imb):
    """Scale the slowest rank's op costs: routed experts and their all-to-alls by the expert load
    factor, the attention core by the DP-attention factor."""
    if not imb:
        return costs
    out = []
    for c in costs:
        f = op_factor(c.tags, imb)
        if np.any(np.asarray(f) != 1.0):
            c = dataclasses.replace(
                c, time_s=c.time_s * f, compute_s=c.compute_s * f, memory_s=c.memory_s * f, network_s=c.network_s * f
            )
        out.append(c)
    return out


def check_imbalance_flags(model, expert_skew="auto", context_dist="fixed"):
    """Raise on a bad --expert-skew / --context-dist before any evaluation (sweeps would otherwise
    turn a bad flag into invalid rows)."""
    from moesim.balance import imbalance as I  # lazy: scipy (start-up time)

    I.context_dist(context_dist)
    if model.is_moe and str(expert_skew).strip().lower() not in ("auto", "none"):
        I.skew_shares(1, model.moe.num_experts, 0, expert_skew)
