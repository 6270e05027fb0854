"""Rank-imbalance factors for one grid (the step waits for the slowest rank).

Defaults (`expert_skew="auto"`, `resolve_expert_skew`): prefill takes the published routing skew
of the model (balance/expert_popularity.yaml, "published") where there is one; decode and models
without published statistics take "uniform" = equal expert popularity with the multinomial noise
of a finite batch (the balanced "DeepSeek profile" case). `context_dist="fixed"` = DeepSeek's
decode load balancer equalises KV per rank. Other skews: --expert-skew zipf:<s> or a load CSV.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from moesim.enums import Phase, Tag
from moesim.grid.core import Grid


def resolve_expert_skew(model, phase, expert_skew="auto", cost_mode="calibrated") -> str:
    """The skew an ``--expert-skew`` value means here. "auto": "none" (perfect balance) for the
    roofline lower bound; in prefill "published" when balance/expert_popularity.yaml has routing
    statistics for the model (real routing is not uniform: issue 15 section 2); else "uniform"
    (multinomial noise only; decode keeps it, see docs/calibration.md "Expert load")."""
    if expert_skew is None or str(expert_skew).strip().lower() == "auto":
        if str(cost_mode) == "roofline":
            return "none"
        if model.is_moe and Phase(phase) == Phase.PREFILL:
            from moesim.balance.popularity import profile_for  # lazy: scipy (start-up time)

            if profile_for(model.name, missing_ok=True) is not None:
                return "published"
        return "uniform"
    return str(expert_skew).strip()


def skew_source(model, expert_skew: str) -> str:
    """Where a resolved skew comes from, for notes and the JSON config."""
    if expert_skew == "published":
        from moesim.balance.popularity import popularity_file, profile_for  # lazy: scipy

        prof = profile_for(model.name)
        return f"{prof.label()}; {popularity_file().name}" if prof else "published"
    if expert_skew == "uniform":
        return "equal expert popularity, multinomial noise of the step's tokens (balanced 'DeepSeek profile' case)"
    return expert_skew


def _expert_factors(imb_mod, model, grid: Grid, phase, expert_skew):
    """{1: slowest-rank factor, 2: per micro-batch of two} over the grid."""
    tokens = grid.batch * (grid.q_len if phase != Phase.PREFILL else 1.0) * grid.dp
    # each micro-batch is its own all-to-all synchronisation: with two micro-batches the slowest
    # rank is drawn from half the tokens (more multinomial noise) -> "experts@2"
    factors = {1: np.ones(grid.size), 2: np.ones(grid.size)}
    layers = model.n_moe_layers if expert_skew == "published" else 1  # hot experts sit elsewhere per layer
    for ep in np.unique(grid.ep):
        for red in np.unique(grid.redundant[grid.ep == ep]):
            sel = (grid.ep == ep) & (grid.redundant == red)
            shares = imb_mod.skew_shares(
                int(ep), model.moe.num_experts, int(red), expert_skew, layers=layers, model=model.name
            )
            for ub in factors:
                factors[ub][sel] = imb_mod.expert_rank_imbalance(tokens[sel] / ub, model.moe.top_k, shares)
    return factors


def imbalance_factors(model, hw, grid: Grid, phase, expert_skew="auto", context_dist="fixed", cost_mode="calibrated"):
    """-> ({"experts": array, "experts@2": array, "attention": array}, notes); ``expert_skew`` as
    ``resolve_expert_skew``."""
    notes = []
    expert_skew = resolve_expert_skew(model, phase, expert_skew, cost_mode)
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
        factors = _expert_factors(I, model, grid, phase, expert_skew)
        out["experts"], out["experts@2"] = factors[1], factors[2]
        if grid.size == 1:
            notes.append(
                f"slowest EP rank receives {factors[1][0]:.2f}x the mean routed load ({factors[2][0]:.2f}x "
                f"per micro-batch of two) (expert_skew={expert_skew}: {skew_source(model, expert_skew)}"
                f"{'; EPLB over the redundant slots' if grid.redundant[0] else '; no redundant experts'}): its experts "
                f"priced on its own pairs and the experts they touch, dispatch and combine on its extra bytes"
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


def expert_load_info(model, phase, expert_skew, cost_mode, imbalance, micro_batches: int) -> dict:
    """The slowest EP rank's routed-load factor of a one-configuration evaluation and where it came
    from (for the JSON config): the step's factor, the per-micro-batch-of-two one, and the one the
    chosen schedule (``micro_batches`` per step) applied; ``imbalance`` as `imbalance_factors`."""
    skew = resolve_expert_skew(model, phase, expert_skew, cost_mode)
    imb = imbalance or {}
    one = float(np.ravel(imb["experts"])[0]) if "experts" in imb else 1.0
    two = float(np.ravel(imb["experts@2"])[0]) if "experts@2" in imb else one
    return {
        "skew": skew,
        "source": skew_source(model, skew) if model.is_moe else "dense model",
        "slowest_rank_factor": one,
        "slowest_rank_factor_per_micro_batch_of_two": two,
        "applied": float(np.ravel(factors_for(imb, micro_batches).get("experts", 1.0))[0]) if imb else 1.0,
    }


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


def apply_factors(costs, imb, routed_in_work: bool = False):
    """Scale the slowest rank's op costs: its all-to-alls' wire time by the expert load factor (the
    latency part does not grow with the bytes), routed experts by it (unless ``routed_in_work``: the
    workload already built them on the slowest rank's pairs, `moesim.workload.build(load=...)`), the
    attention core by the DP-attention factor."""
    if not imb:
        return costs
    out = []
    for c in costs:
        f = op_factor(c.tags, imb)
        if Tag.ROUTED in c.tags and routed_in_work:
            # built on the slowest rank's pairs: its FLOPs (linear in the pairs) back to the mean rank's,
            # what MFU and the FLOP totals count
            c = dataclasses.replace(c, flops=c.flops / np.asarray(f, float))
            f = 1.0
        if np.any(np.asarray(f) != 1.0):
            if Tag.A2A in c.tags:  # alpha + wire: only the wire carries the extra tokens
                extra = c.network_s * (np.asarray(f) - 1.0)
                c = dataclasses.replace(c, time_s=c.time_s + extra, network_s=c.network_s + extra)
            else:
                c = dataclasses.replace(
                    c, time_s=c.time_s * f, compute_s=c.compute_s * f, memory_s=c.memory_s * f,
                    network_s=c.network_s * f,
                )  # fmt: skip
        out.append(c)
    return out


def check_imbalance_flags(model, expert_skew="auto", context_dist="fixed"):
    """Raise on a bad --expert-skew / --context-dist before any evaluation (sweeps would otherwise
    turn a bad flag into invalid rows)."""
    from moesim.balance import imbalance as I  # lazy: scipy (start-up time)

    I.context_dist(context_dist)
    if model.is_moe and str(expert_skew).strip().lower() not in ("auto", "none"):
        I.skew_shares(1, model.moe.num_experts, 0, expert_skew, model=model.name)
