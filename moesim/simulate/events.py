"""The discrete-event loop: clients -> router -> instances (aggregated), or prefill instances ->
KV transfer (queued per prefill instance's link) -> decode instances (PD); events in time order.

Events: a client sends a request (SEND); it reaches an instance's scheduler after the request
path (ARRIVE: HTTP, tokenizer, IPC; `Rules.request_in`); an instance's pass ends (FREE: its
effects apply, the scheduler chooses the next pass); a prefilled request's KV has reached its
decode instance (KV). A token leaves the scheduler and reaches the client `Rules.response_out`
later (detokenizer, IPC, HTTP streaming); a closed-loop client sends its next request when it has
received the last token of its previous one (`Workload.think_s` later).
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from moesim.simulate.instance import Instance, Reqs
from moesim.simulate.requests import RequestLog, TimeSeries, Workload

SEND, ARRIVE, FREE, KV = 0, 1, 2, 3


@dataclass
class KvLink:
    """PD: one request's KV, prefill -> decode, over the prefill instance's link (a FIFO: transfers
    of one prefill instance queue behind each other)."""

    bytes_per_token: float  # KV bytes per prompt token one instance sends
    link_Bps: float  # the instance's aggregate send bandwidth
    latency_s: float


class Router:
    """Picks an instance for a request (SGLang router policies: round_robin, random, cache_aware,
    power_of_two; shortest-queue)."""

    def __init__(self, policy: str, instances: list, rng: np.random.Generator):
        self.policy, self.insts, self.rng, self.n = policy, instances, rng, 0

    def pick(self, pid: int) -> Instance:
        ins = self.insts
        if len(ins) == 1:
            return ins[0]
        self.n += 1
        p = self.policy
        if p == "round-robin":
            return ins[(self.n - 1) % len(ins)]
        if p == "random":
            return ins[int(self.rng.integers(len(ins)))]
        if p == "power-of-two":
            i, j = self.rng.choice(len(ins), 2, replace=False)
            return ins[i] if ins[i].load() <= ins[j].load() else ins[j]
        loads = [x.load() for x in ins]
        if p == "cache-aware" and pid >= 0:
            # sgl-router cache_aware: the instance holding the prefix unless the load is imbalanced
            # (max - min > 32 requests, its balance_abs_threshold), else the least loaded
            if max(loads) - min(loads) <= 32:
                for x in ins:
                    if x.has_prefix(pid):
                        return x
        return ins[int(np.argmin(loads))]


def run(work: Workload, pools: list, *, link: KvLink | None = None, seed: int = 0, progress=None):
    """Serve `work` on `pools` ([aggregated] or [prefill, decode]; each a list of Instances over one
    shared Reqs) -> (RequestLog, TimeSeries, stats dict)."""
    R: Reqs = pools[0][0].R
    n = work.size
    rng = np.random.default_rng(seed)
    first_pool, last_pool = pools[0], pools[-1]
    pd = len(pools) == 2
    prefill_only = not pd and first_pool[0].role == "prefill"  # a prefill pool alone: served when the KV has left
    rules_in = first_pool[0].rules
    rules_out = last_pool[0].rules
    router_in = Router(rules_in.router, first_pool, rng)
    router_out = Router(rules_out.router, last_pool, rng) if pd else None
    dest = np.full(n, -1, np.int64)  # PD: the decode instance chosen at send time
    link_free = np.zeros(len(first_pool))
    sent = np.full(n, np.nan)
    heap: list = []
    seq = 0

    def push(t, kind, a, b=0):
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, a, b))

    cap = work.concurrency
    pending: deque = deque()
    if work.arrival_s is None:  # closed loop: the first `cap` requests at t = 0
        for i in range(min(cap, n)):
            push(0.0, SEND, i)
        pending.extend(range(min(cap, n), n))
    else:
        for i, t in enumerate(np.asarray(work.arrival_s, float)):
            push(float(t), SEND, i)
    inflight = 0
    isl = R.isl
    out_s = rules_out.response_out_s
    itl: list = []
    ts_t, ts_run, ts_q, ts_kv = [], [], [], []
    all_insts = [x for pool in pools for x in pool]
    single = len(all_insts) == 1
    done_count, events, last_report = 0, 0, time.monotonic()

    def start(inst: Instance, t: float):
        end = inst.next_pass(t)
        if end is not None:
            push(end, FREE, inst.idx, inst.version)

    def deliver(inst: Instance, rid: int, t: float):
        new_end = inst.arrive(rid, t)
        if inst.inflight is None:
            start(inst, t)
        elif new_end is not None:
            push(new_end, FREE, inst.idx, inst.version)

    while heap:
        t, _, kind, a, b = heapq.heappop(heap)
        events += 1
        if kind == SEND:
            if work.arrival_s is not None and cap is not None and inflight >= cap:
                pending.append(a)  # a client-side cap (--max-concurrency with a rate): wait for a slot
                continue
            inflight += 1
            sent[a] = t
            inst = router_in.pick(int(R.pid[a]))
            if pd:
                dest[a] = router_out.pick(int(R.pid[a])).idx
            push(t + rules_in.request_in(float(isl[a])), ARRIVE, inst.idx, a)
        elif kind == ARRIVE:
            deliver(all_insts[a], b, t)
        elif kind == FREE:
            inst = all_insts[a]
            if b != inst.version or inst.inflight is None:
                continue  # a pass cut short by an arrival: its later end is void
            end, done = inst.finish_pass(out_s, itl)
            for rid, tf in done:
                if inst.role == "prefill":
                    j = int(R.inst[rid] - first_pool[0].idx)
                    s = max(tf, link_free[j])
                    xfer = link.latency_s + float(R.prompt[rid]) * link.bytes_per_token / link.link_Bps if link else 0.0
                    link_free[j] = s + xfer
                    push(link_free[j], KV, rid, inst.idx)
                    continue
                done_count += 1
                inflight -= 1
                if pending:
                    nxt = pending.popleft()
                    push(tf + out_s + (work.think_s if work.arrival_s is None else 0.0), SEND, nxt)
            ts_t.append(end)
            if single:
                ts_run.append(inst.running())
                ts_q.append(inst.queued())
                ts_kv.append(inst.kv_frac())
            else:
                ts_run.append(sum(x.running() for x in all_insts))
                ts_q.append(sum(x.queued() for x in all_insts))
                ts_kv.append(sum(x.kv_frac() for x in all_insts) / len(all_insts))
            start(inst, end)
            if progress is not None and events % 4096 == 0 and time.monotonic() - last_report > 0.5:
                last_report = time.monotonic()
                progress(done_count, n, end)
        else:  # KV: the request's KV reached its decode instance
            all_insts[b].release(a)
            if prefill_only:  # its first token is out: the prefill pool's part of TTFT is done
                R.first[a] = R.finish[a] = t
                done_count += 1
                inflight -= 1
                if pending:
                    push(t + out_s + (work.think_s if work.arrival_s is None else 0.0), SEND, pending.popleft())
                continue
            d = all_insts[int(dest[a])]
            deliver(d, a, t)
    if progress is not None:
        progress(done_count, n, float(ts_t[-1]) if ts_t else 0.0)
    first = R.first + out_s
    finish = R.finish + out_s
    warm = np.zeros(n, bool)
    warm[: int(work.warmup)] = True
    gaps = np.concatenate([g for g, _ in itl]) if itl else np.zeros(0)
    wts = np.concatenate([np.full(np.size(g), w) for g, w in itl]) if itl else np.zeros(0)
    log = RequestLog(sent, first, finish, R.isl.copy(), R.osl.copy(), R.cached.copy(), R.inst.copy(),
                     R.preempt.copy(), warm, gaps, wts)  # fmt: skip
    series = TimeSeries(np.asarray(ts_t), np.asarray(ts_run), np.asarray(ts_q), np.asarray(ts_kv))
    span = float(np.nanmax(finish)) if n else 0.0
    stats = {
        "events": events,
        "passes": int(sum(x.passes for x in all_insts)),
        "busy_share": [float(sum(x.busy_s for x in pool) / max(span * len(pool), 1e-300)) for pool in pools],
    }
    return log, series, stats


__all__ = ["run", "KvLink", "Router"]
