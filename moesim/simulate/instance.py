"""One serving instance (an engine server: TP x DP GPUs) and its scheduler, step-exact.

Each DP rank has its own queue (SGLang's DP-attention controller hands every request to one rank;
without DP attention there is one rank). A pass is chosen at every step boundary as the engine's
scheduler chooses it (`Rules.policy`):

* prefill-priority (SGLang `Scheduler.get_next_batch_to_run`): a rank with admissible waiting
  prompts runs a prefill (extend) pass of up to `chunk_tokens` prompt tokens (`max_prefill_tokens`
  per batch; a longer prompt continues as the chunked request, first in the next pass) instead of
  decoding; with DP attention the ranks' passes run in lock step, so a pass in which any rank
  prefills holds every rank (priced as one decode pass carrying the largest chunk).
* fused (vLLM V1 `Scheduler.schedule`; TRT-LLM in-flight batching): one pass carries every running
  request's decode tokens first, then prompt tokens of partially prefilled and waiting requests up
  to the token budget `chunk_tokens`.

Admission and KV: `Rules.admission` (moesim.simulate.rules).

Between events nothing changes the decode batch, so consecutive decode steps are taken as one
run: their times are the surface's steps at the growing KV length, summed with numpy; an arrival
during a run ends it at the step boundary after the arrival (the scheduler looks at its queue
between steps), exactly as the step-by-step loop would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from moesim.simulate import admission as A
from moesim.simulate.rules import Rules
from moesim.simulate.state import Pass, Rank, Reqs
from moesim.simulate.surface import Surfaces, effective_length

KMAX = 4096  # decode steps priced at once in a run (bounded arrays)


@dataclass(frozen=True)
class PrefixCache:
    """An instance's prompt cache: `enabled` reuses cached prefixes (trace prefix ids); `hit_ratio`
    (0..1) serves that share of every prompt from cache instead; `tiers`: (name, tokens per rank,
    load s per token) below HBM (host memory, disk)."""

    enabled: bool = True
    hit_ratio: float = 0.0
    tiers: tuple = ()


class Instance:
    """A serving instance: `ranks` DP ranks in lock step, a KV pool of `kv_capacity` tokens per
    rank, priced by `surf`. role: "both" (aggregated), "prefill" or "decode" (PD)."""

    def __init__(self, idx, rules: Rules, surf: Surfaces, reqs: Reqs, *, dp, kv_capacity, tokens_per_step, q_len,
                 role="both", cache: PrefixCache = PrefixCache()):  # fmt: skip
        self.idx, self.rules, self.surf, self.R = idx, rules, surf, reqs
        self.ranks = [Rank(i, rules.new_token_ratio_init, list(cache.tiers)) for i in range(int(dp))]
        self.cap = float(kv_capacity)
        self.a = float(tokens_per_step)  # accepted tokens per decode step (MTP: 1 + sum of acceptance)
        self.q = float(q_len)  # tokens a decoding request puts through a pass (1 + drafts)
        self.role = role
        self.prefix_cache, self.hit_ratio = cache.enabled, float(cache.hit_ratio)
        self.inflight: Pass | None = None
        self.version = 0
        self.rr = 0
        self.pending_first: list = []
        self.load_s = 0.0  # cached KV the next pass loads from host / disk first (s)
        self.passes = 0
        self.busy_s = 0.0

    # ------------------------------------------------------------------ routing and arrival
    def pick_rank(self) -> Rank:
        if len(self.ranks) == 1:
            return self.ranks[0]
        if self.rules.dp_balance == "round-robin":
            self.rr += 1
            return self.ranks[(self.rr - 1) % len(self.ranks)]
        return min(self.ranks, key=Rank.load)

    def load(self) -> int:
        return sum(r.load() for r in self.ranks)

    def has_prefix(self, pid) -> bool:
        return pid >= 0 and any(r.holds(pid) for r in self.ranks)

    def arrive(self, rid: int, t: float) -> float | None:
        """A request reaches the scheduler at t; -> the new end of the pass in flight when the
        arrival cuts a decode run short (None: nothing to reschedule)."""
        R = self.R
        rank = self.pick_rank()
        R.inst[rid], R.rank[rid] = self.idx, rank.idx
        rank.waiting.append(rid)
        p = self.inflight
        if p is None or p.kind != "run" or len(p.ends) <= 1:
            return None
        j = int(np.searchsorted(p.ends, t, side="left"))
        if j >= len(p.ends) - 1:
            return None
        p.ends = p.ends[: j + 1]  # the step in progress completes, then the scheduler sees the queue
        self.version += 1
        return float(p.ends[-1])

    # ------------------------------------------------------------------ the prefix cache
    def _hit(self, rank: Rank, rid: int, take: bool = False) -> tuple[float, float]:
        """(prompt tokens served from cache, seconds to load them into HBM): a given share of every
        prompt, or the request's prefix where its rank holds it (`Rank.cache_get`: HBM, host, disk)."""
        R = self.R
        if self.hit_ratio > 0:
            return math.floor(self.hit_ratio * (R.isl[rid] - 1)), 0.0
        if not self.prefix_cache:
            return 0.0, 0.0
        tokens, load_s = rank.cache_get(int(R.pid[rid]), self.cap, take)
        return float(min(tokens, R.ptok[rid])), load_s

    def _cache_insert(self, rank: Rank, rid: int) -> None:
        if self.prefix_cache and self.R.pid[rid] >= 0 and self.R.ptok[rid] > 0:
            rank.cache_put(int(self.R.pid[rid]), int(self.R.ptok[rid]), self.cap)

    # ------------------------------------------------------------------ choosing the next pass
    def _picks(self, rank: Rank, budget: float, decoding: int) -> list:
        """(rid, new tokens) of prompt work for this rank's next pass, FCFS, within `budget` tokens."""
        R, ru = self.R, self.rules
        picks = []
        for rid in list(rank.partial):  # the chunked request first (SGLang add_chunked_req; vLLM running first)
            if budget <= 0:
                break
            take = min(R.prompt[rid] - R.done[rid], budget)
            if ru.long_prefill_tokens:
                take = min(take, ru.long_prefill_tokens)
            if ru.admission == "incremental" and rank.kv_used + take > self.cap:
                break
            picks.append((rid, take))
            budget -= take
        room = self.cap - rank.kv_used - A.reserved(rank, self.R, self.rules)
        inputs = float(ru.max_prefill_tokens) if not ru.fused else math.inf
        while rank.waiting and budget > 0 and inputs > 0 and decoding + len(rank.partial) + len(picks) < ru.max_running:
            rid = rank.waiting[0]
            hit, load_s = self._hit(rank, rid) if R.done[rid] == 0 else (0.0, 0.0)
            hit = min(hit, R.prompt[rid] - 1)
            need = R.prompt[rid] - R.done[rid] - hit
            take = min(need, budget)
            if ru.long_prefill_tokens:
                take = min(take, ru.long_prefill_tokens)
            if take < need and not ru.chunked_prefill:
                break
            cost = (
                A.admit_cost(rank, self.R, self.rules, rid, need, self.role)
                if ru.admission != "incremental"
                else hit + take
            )
            if cost > room:
                break
            rank.waiting.popleft()
            if hit > 0 and self.hit_ratio == 0:
                self._hit(rank, rid, take=True)  # promoted into HBM (from host / disk: loaded first)
                self.load_s += load_s
            R.cached[rid] += hit
            R.done[rid] += hit
            rank.kv_used += hit
            room -= cost
            picks.append((rid, take))
            rank.partial.append(rid)
            budget -= take
            inputs -= need
            if take < need and not ru.fused:
                break  # SGLang: a truncated prompt becomes the chunked request and ends the batch
        rank.kv_used += sum(take for _, take in picks)
        rank.evict(self.cap)
        return picks

    def next_pass(self, t: float) -> float | None:
        """Choose and start the next pass at t; -> its end (None: idle)."""
        ru = self.rules
        if self.role == "decode":
            self._admit_transferred(t)
        picks_by_rank = []
        if self.role != "decode":
            for rank in self.ranks:
                dec = len(rank.running)
                budget = ru.chunk_tokens - (dec * self.q if ru.fused else 0.0)
                picks_by_rank.append(self._picks(rank, budget, dec) if (rank.waiting or rank.partial) else [])
        if any(picks_by_rank):
            return self._start_pass(t, picks_by_rank)
        if any(r.running for r in self.ranks):
            return self._start_run(t)
        self.inflight = None
        return None

    def _admit_transferred(self, t: float) -> None:
        """PD decode: requests whose KV arrived join the running batch (SGLang's prebuilt batch:
        no forward pass; the first token, computed by the prefill server, leaves now)."""
        R, ru = self.R, self.rules
        for rank in self.ranks:
            room = self.cap - rank.kv_used - A.reserved(rank, self.R, self.rules)
            while rank.waiting and len(rank.running) < ru.max_running:
                rid = rank.waiting[0]
                cost = (
                    A.admit_cost(rank, R, ru, rid, R.prompt[rid], self.role)
                    if ru.admission != "incremental"
                    else R.prompt[rid] + 1
                )
                if cost > room:
                    break
                rank.waiting.popleft()
                room -= cost
                R.done[rid] = R.prompt[rid]
                rank.kv_used += R.prompt[rid] + R.gen[rid]
                rank.running.append(rid)
                if np.isnan(R.first[rid]):
                    R.first[rid] = t
                R.last[rid] = t

    def _cpu(self, gpu_s, running):
        c = self.rules.step_cpu(running)
        return np.maximum(gpu_s, c) if self.rules.cpu_overlapped else gpu_s + c

    def _start_pass(self, t, picks_by_rank) -> float:
        """One pass with prompt work on some rank(s)."""
        R, ru, surf = self.R, self.rules, self.surf
        picks, decoding = [], []
        T_max, news, cached, b_max, kv_b = 0.0, [], [], 0, 0.0
        T_sum = 0.0
        for rank, pk in zip(self.ranks, picks_by_rank):
            T = sum(tk for _, tk in pk)
            T_sum += T
            for rid, tk in pk:
                picks.append((rank, rid, tk))
                news.append(tk)
                cached.append(R.done[rid])
            T_max = max(T_max, T)
            # a rank decodes in this pass when the engine fuses, or (lock step) when it has no prompt work
            if rank.running and (ru.fused or not pk):
                decoding.extend(rank.running)
                if len(rank.running) > b_max:
                    b_max, kv_b = len(rank.running), float(np.sum(R.kv(np.asarray(rank.running))))
        L = effective_length(news, cached)
        if not ru.fused and len(self.ranks) == 1:  # an extend pass of its own (one DP group)
            gpu = surf.prefill(T_max, L)
        else:  # one pass for all: decode on some ranks, chunks of unequal size on others (lock step)
            share = T_sum / (len(self.ranks) * T_max) if T_max > 0 else 1.0
            gpu = surf.fused(b_max, kv_b / max(b_max, 1), T_max, L, share)
        running = sum(len(r.running) for r in self.ranks)
        # cached prefixes from host memory / disk are loaded before the pass (not overlapped: an upper bound)
        dur = float(self._cpu(gpu, running + len(picks))) + self.load_s
        self.load_s = 0.0
        end = t + dur
        self.inflight = Pass("pass", t, np.array([end]), picks=picks, decoding=np.asarray(decoding, np.int64))
        self.version += 1
        return end

    def _start_run(self, t) -> float:
        R = self.R
        A.make_room(self.ranks, self.R, self.rules, self.cap, self.q)
        ranks = [r for r in self.ranks if r.running]
        if not ranks:
            self.inflight = None
            return None
        rids = np.asarray([rid for r in ranks for rid in r.running], np.int64)
        need = np.maximum(np.ceil((R.osl[rids] - R.gen[rids]) / self.a - 1e-9), 1.0)
        k = int(min(need.min(), KMAX))
        b_max, kv_b = 0, 0.0
        for r in ranks:
            b = len(r.running)
            free = self.cap - r.kv_used
            k = min(k, max(int(free // (b * self.a)), 1))
            if b > b_max:  # the busiest rank sets the step: its batch and the KV it reads
                b_max, kv_b = b, r.kv_used
        ctx = kv_b / b_max + self.a * np.arange(k)
        gpu = self.surf.decode(b_max, ctx)
        dt = self._cpu(gpu, len(rids))
        ends = t + np.cumsum(dt)
        self.inflight = Pass("run", t, ends, rids=rids, need=need, ranks_b=[(r, len(r.running)) for r in ranks])
        self.version += 1
        return float(ends[-1])

    # ------------------------------------------------------------------ ending a pass
    def finish_pass(self, itl: list) -> tuple[float, list]:
        """Apply the pass in flight at its end -> (end time, [(rid, finish time)]) of requests that
        finished (PD prefill: whose prompt is done); first tokens, inter-token gaps (`itl`: list of
        (gaps, weight)) recorded."""
        R, p = self.R, self.inflight
        self.passes += 1
        for rid in self.pending_first:
            R.first[rid] = float(p.ends[0])
        self.pending_first = []
        end, done = self._apply_run(p, itl) if p.kind == "run" else self._apply_pass(p, itl)
        if self.role != "prefill":  # a prefilled request stays until its KV has left (`release`)
            for rid, tf in done:
                self._retire(rid, tf)
        self.busy_s += end - p.start
        self.inflight = None
        return end, done

    def _apply_run(self, p: Pass, itl: list):
        """m decode steps of the running requests: tokens, KV, the SGLang ratio's decay."""
        R, ru, ends, rids = self.R, self.rules, p.ends, p.rids
        m = len(ends)
        itl.append((ends[0] - R.last[rids], 1.0))
        if m > 1:
            itl.append((np.diff(ends), float(rids.size)))
        R.gen[rids] = np.minimum(R.gen[rids] + m * self.a, R.osl[rids])
        R.last[rids] = ends[-1]
        for rank, b in p.ranks_b:
            rank.kv_used += m * self.a * b
            if ru.admission == "reserve":
                rank.ratio = max(rank.ratio - m * ru.new_token_ratio_decay, ru.new_token_ratio_min)
        fin = p.need <= m
        done = [(int(rid), float(tf)) for rid, tf in zip(rids[fin], ends[(p.need[fin] - 1).astype(int)])]
        return float(ends[-1]), done

    def _apply_pass(self, p: Pass, itl: list):
        """One pass with prompt work: its decoding requests advance a step, its chunks are computed,
        a completed prompt samples its first token."""
        R, ru = self.R, self.rules
        end, d, done = float(p.ends[0]), p.decoding, []
        if d.size:
            itl.append((end - R.last[d], 1.0))
            R.gen[d] = np.minimum(R.gen[d] + self.a, R.osl[d])
            R.last[d] = end
            for rank in self.ranks:
                if rank.running and (ru.fused or not any(pr is rank for pr, _, _ in p.picks)):
                    rank.kv_used += self.a * len(rank.running)
            done += [(int(r), end) for r in d[R.gen[d] >= R.osl[d]]]
        for rank, rid, tk in p.picks:
            R.done[rid] += tk
            if R.done[rid] < R.prompt[rid] - 1e-9:
                continue
            rank.partial.remove(rid)
            if R.gen[rid] == 0:  # the pass that completes the prompt samples the first token
                R.gen[rid] = 1.0
                rank.kv_used += 1.0
                if self.role == "prefill":
                    done.append((rid, end))
                    continue
                if ru.first_token_after_next_pass:
                    self.pending_first.append(rid)
                else:
                    R.first[rid] = end
                R.last[rid] = end
            if self.role != "prefill":
                if R.gen[rid] >= R.osl[rid]:
                    done.append((rid, end))
                else:
                    rank.running.append(rid)
        return end, done

    def _retire(self, rid: int, t: float) -> None:
        """A finished request frees its KV (its prefix stays in the cache)."""
        R = self.R
        rank = self.ranks[R.rank[rid]]
        if rid in rank.running:
            rank.running.remove(rid)
        rank.kv_used -= R.kv(rid)
        R.finish[rid] = t
        if rid in self.pending_first:  # a one-token output: its first token is its last
            self.pending_first.remove(rid)
        if np.isnan(R.first[rid]):
            R.first[rid] = t
        self._cache_insert(rank, rid)

    def release(self, rid: int) -> None:
        """PD prefill: the request's KV has been sent; its slots are free (prefix kept in the cache)."""
        rank = self.ranks[self.R.rank[rid]]
        rank.kv_used -= self.R.kv(rid)
        self._cache_insert(rank, rid)

    def queued(self) -> int:  # requests waiting for admission
        return sum(len(r.waiting) for r in self.ranks)

    def running(self) -> int:  # admitted requests (decoding or prompt in progress)
        return sum(len(r.running) + len(r.partial) for r in self.ranks)

    def kv_frac(self) -> float:  # KV in use / the pool
        return sum(r.kv_used for r in self.ranks) / (self.cap * len(self.ranks))


__all__ = ["Instance", "KMAX"]
