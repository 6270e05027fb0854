"""KV admission and eviction of one DP rank, as each engine does it (`Rules.admission`; the rules
in moesim.simulate.rules): what running requests still reserve, what a new prompt costs, and the
retraction / preemption when a decode step finds no free KV. Tokens."""

from __future__ import annotations

import math

import numpy as np

from moesim.simulate.rules import Rules
from moesim.simulate.state import Rank, Reqs


def reserved(rank: Rank, R: Reqs, ru: Rules) -> float:
    """KV the admitted requests will still need (SGLang: new_token_ratio x clipped remaining output
    plus the prompt still to compute; TRT-LLM no-evict: everything up to their last token)."""
    ids = rank.running + rank.partial
    if not ids:
        return 0.0
    ids = np.asarray(ids)
    if ru.admission == "no-evict":
        return float(np.sum(R.prompt[ids] + R.osl[ids] - R.kv(ids)))
    if ru.admission == "reserve":
        rem = np.minimum(R.osl[ids] - R.gen[ids], ru.clip_max_new_tokens)
        todo = R.prompt[ids] - R.done[ids]
        return float(np.sum(rem) * rank.ratio + np.sum(todo))
    return 0.0


def admit_cost(rank: Rank, R: Reqs, ru: Rules, rid: int, need: float, role: str) -> float:
    """KV a prompt of `need` tokens to compute takes against the room `reserved` leaves."""
    if role == "prefill":  # a PD prefill server keeps the KV only until it is sent
        return need
    if ru.admission == "no-evict":
        return need + float(R.osl[rid] - R.gen[rid])
    if ru.admission == "reserve":
        return need + min(float(R.osl[rid] - R.gen[rid]), ru.clip_max_new_tokens) * rank.ratio
    return 0.0


def make_room(ranks: list, R: Reqs, ru: Rules, cap: float, q_len: float) -> None:
    """Before decode steps: a rank whose free KV cannot take one step retracts (SGLang) or
    preempts (vLLM) requests back to the head of its queue, to be recomputed (prompt + output)."""
    for rank in ranks:
        retracted = False
        while rank.running and cap - rank.kv_used < len(rank.running) * q_len:
            retracted = True
            if ru.admission == "reserve":
                # SGLang retract_decode ('length' policy): fewest outputs, then longest input, go first
                victim = min(rank.running, key=lambda i: (R.gen[i], -R.isl[i]))
            else:
                victim = rank.running[-1]  # vLLM V1: the last scheduled running request
            rank.running.remove(victim)
            rank.kv_used -= R.kv(victim)
            R.prompt[victim] = R.isl[victim] + math.floor(R.gen[victim])
            R.done[victim] = 0.0
            R.preempt[victim] += 1
            rank.waiting.appendleft(victim)
        if retracted and ru.admission == "reserve" and rank.running:
            ids = np.asarray(rank.running)
            # NewTokenRatioTracker.estimate_new_token_ratio_after_retract: (decoded + steps x requests)
            # / (sum of clipped max_new_tokens + 1)
            tot = np.sum(np.minimum(R.osl[ids], ru.clip_max_new_tokens))
            rank.ratio = min(1.0, float((np.sum(R.gen[ids]) + ru.retract_decode_steps * ids.size) / (tot + 1)))


__all__ = ["reserved", "admit_cost", "make_room"]
