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

from moesim.simulate.instance import Instance
from moesim.simulate.requests import RequestLog, TimeSeries, Workload
from moesim.simulate.state import Reqs

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


class Loop:
    """The event loop's state: the heap, the clients, the routers, the KV links, the records."""

    def __init__(self, work: Workload, pools: list, link: KvLink | None, seed: int, progress):
        self.work, self.pools, self.link, self.progress = work, pools, link, progress
        self.R: Reqs = pools[0][0].R
        n = work.size
        rng = np.random.default_rng(seed)
        self.pd = len(pools) == 2
        self.prefill_only = not self.pd and pools[0][0].role == "prefill"  # served when its KV has left
        self.rules_in = pools[0][0].rules
        self.out_s = pools[-1][0].rules.response_out_s
        self.router_in = Router(self.rules_in.router, pools[0], rng)
        self.router_out = Router(pools[-1][0].rules.router, pools[-1], rng) if self.pd else None
        self.dest = np.full(n, -1, np.int64)  # PD: the decode instance chosen at send time
        self.link_free = np.zeros(len(pools[0]))
        self.sent = np.full(n, np.nan)
        self.insts = [x for pool in pools for x in pool]
        self.heap: list = []
        self.seq = self.inflight = self.done = self.events = 0
        self.pending: deque = deque()
        self.itl: list = []
        self.ts: list = []  # (t, running, queued, KV share)
        self.last_report = time.monotonic()
        cap = work.concurrency
        if work.arrival_s is None:  # closed loop: the first `cap` requests at t = 0
            for i in range(min(cap, n)):
                self.push(0.0, SEND, i)
            self.pending.extend(range(min(cap, n), n))
        else:
            for i, t in enumerate(np.asarray(work.arrival_s, float)):
                self.push(float(t), SEND, i)

    def push(self, t, kind, a, b=0):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def start(self, inst: Instance, t: float):
        end = inst.next_pass(t)
        if end is not None:
            self.push(end, FREE, inst.idx, inst.version)

    def deliver(self, inst: Instance, rid: int, t: float):
        new_end = inst.arrive(rid, t)
        if inst.inflight is None:
            self.start(inst, t)
        elif new_end is not None:
            self.push(new_end, FREE, inst.idx, inst.version)

    def served(self, t_client: float):
        """A request's last token reached its client: a closed-loop client (or a capped open loop's
        waiting request) sends the next one."""
        self.done += 1
        self.inflight -= 1
        if self.pending:
            think = self.work.think_s if self.work.arrival_s is None else 0.0
            self.push(t_client + think, SEND, self.pending.popleft())

    def on_send(self, t, rid):
        w = self.work
        if w.arrival_s is not None and w.concurrency is not None and self.inflight >= w.concurrency:
            self.pending.append(rid)  # a client-side cap (--max-concurrency with a rate): wait for a slot
            return
        self.inflight += 1
        self.sent[rid] = t
        inst = self.router_in.pick(int(self.R.pid[rid]))
        if self.pd:
            self.dest[rid] = self.router_out.pick(int(self.R.pid[rid])).idx
        self.push(t + self.rules_in.request_in(float(self.R.isl[rid])), ARRIVE, inst.idx, rid)

    def on_free(self, inst: Instance, version: int):
        if version != inst.version or inst.inflight is None:
            return  # a pass cut short by an arrival: its later end is void
        end, done = inst.finish_pass(self.itl)
        for rid, tf in done:
            if inst.role != "prefill":
                self.served(tf + self.out_s)
                continue
            j = int(self.R.inst[rid] - self.pools[0][0].idx)  # the prefill instance's link (a FIFO)
            lk = self.link
            xfer = lk.latency_s + float(self.R.prompt[rid]) * lk.bytes_per_token / lk.link_Bps if lk else 0.0
            self.link_free[j] = max(tf, self.link_free[j]) + xfer
            self.push(self.link_free[j], KV, rid, inst.idx)
        self.record(end, inst)
        self.start(inst, end)

    def on_kv(self, t, rid, src):
        """The request's KV has reached its decode instance (PD), or left the prefill pool (alone)."""
        self.insts[src].release(rid)
        if self.prefill_only:  # its first token is out: the prefill pool's part of TTFT is done
            self.R.first[rid] = self.R.finish[rid] = t
            self.served(t + self.out_s)
            return
        self.deliver(self.insts[int(self.dest[rid])], rid, t)

    def record(self, t, inst):
        xs = [inst] if len(self.insts) == 1 else self.insts
        self.ts.append((t, sum(x.running() for x in xs), sum(x.queued() for x in xs),
                        sum(x.kv_frac() for x in xs) / len(xs)))  # fmt: skip
        if self.progress is not None and self.events % 4096 == 0 and time.monotonic() - self.last_report > 0.5:
            self.last_report = time.monotonic()
            self.progress(self.done, self.work.size, t)

    def run(self):
        while self.heap:
            t, _, kind, a, b = heapq.heappop(self.heap)
            self.events += 1
            if kind == SEND:
                self.on_send(t, a)
            elif kind == ARRIVE:
                self.deliver(self.insts[a], b, t)
            elif kind == FREE:
                self.on_free(self.insts[a], b)
            else:
                self.on_kv(t, a, b)
        if self.progress is not None:
            self.progress(self.done, self.work.size, self.ts[-1][0] if self.ts else 0.0)
        return self.result()

    def result(self):
        R, n, out_s = self.R, self.work.size, self.out_s
        finish = R.finish + out_s
        warm = np.zeros(n, bool)
        warm[: int(self.work.warmup)] = True
        itl = self.itl
        gaps = np.concatenate([g for g, _ in itl]) if itl else np.zeros(0)
        wts = np.concatenate([np.full(np.size(g), w) for g, w in itl]) if itl else np.zeros(0)
        log = RequestLog(self.sent, R.first + out_s, finish, R.isl.copy(), R.osl.copy(), R.cached.copy(),
                         R.inst.copy(), R.preempt.copy(), warm, gaps, wts)  # fmt: skip
        ts = np.asarray(self.ts, float).reshape(-1, 4)
        series = TimeSeries(ts[:, 0], ts[:, 1], ts[:, 2], ts[:, 3])
        span = max(float(np.nanmax(finish)) if n else 0.0, 1e-300)
        stats = {
            "events": self.events,
            "passes": int(sum(x.passes for x in self.insts)),
            "busy_share": [float(sum(x.busy_s for x in pool) / (span * len(pool))) for pool in self.pools],
        }
        return log, series, stats


def run(work: Workload, pools: list, *, link: KvLink | None = None, seed: int = 0, progress=None):
    """Serve `work` on `pools` ([aggregated] or [prefill, decode]; each a list of Instances over one
    shared Reqs) -> (RequestLog, TimeSeries, stats dict)."""
    return Loop(work, pools, link, seed, progress).run()


__all__ = ["run", "KvLink", "Router"]
