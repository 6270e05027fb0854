"""The state a simulation keeps: per-request arrays (`Reqs`), a DP rank's queues and KV (`Rank`),
and a pass in flight (`Pass`). Tokens and seconds."""

from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np


class Reqs:
    """Per-request state of a simulation, as arrays indexed by request id."""

    def __init__(self, isl, osl, prefix_id, prefix_tokens):
        n = len(isl)
        self.isl = np.asarray(isl, np.int64)
        self.osl = np.asarray(osl, np.int64)
        self.pid = np.asarray(prefix_id, np.int64)
        self.ptok = np.minimum(np.asarray(prefix_tokens, np.int64), self.isl - 1)
        self.prompt = self.isl.astype(float)  # tokens to (re)compute before decoding: isl, or more after a retraction
        self.done = np.zeros(n)  # prompt tokens whose KV exists (computed or cached)
        self.gen = np.zeros(n)  # output tokens generated
        self.cached = np.zeros(n)  # prompt tokens served from the prefix cache
        self.first = np.full(n, np.nan)  # first token leaves the scheduler
        self.finish = np.full(n, np.nan)  # last token leaves the scheduler
        self.last = np.zeros(n)  # when the request's previous token left (inter-token gaps)
        self.preempt = np.zeros(n, np.int64)
        self.inst = np.full(n, -1, np.int64)
        self.rank = np.full(n, -1, np.int64)

    def kv(self, rid) -> np.ndarray:
        return self.done[rid] + self.gen[rid]


class Tier:
    """A KV-cache tier below HBM (host memory, disk): LRU prefixes up to `capacity` tokens, loaded
    back into HBM at `load_s_per_token`."""

    __slots__ = ("name", "capacity", "load_s_per_token", "lru", "tokens")

    def __init__(self, name: str, capacity: float, load_s_per_token: float):
        self.name, self.capacity, self.load_s_per_token = name, float(capacity), float(load_s_per_token)
        self.lru: OrderedDict = OrderedDict()
        self.tokens = 0


class Rank:
    __slots__ = ("waiting", "running", "partial", "kv_used", "cache", "cache_tokens", "ratio", "idx", "tiers")

    def __init__(self, idx: int, ratio: float, tiers=()):
        self.idx = idx
        self.waiting: deque = deque()
        self.running: list = []  # decoding
        self.partial: list = []  # admitted, prompt not yet all computed (chunked)
        self.kv_used = 0.0  # KV tokens held by admitted requests
        self.cache: OrderedDict = OrderedDict()  # prefix id -> tokens (LRU), in the free KV
        self.cache_tokens = 0
        self.ratio = ratio  # SGLang new_token_ratio
        self.tiers = [Tier(*t) for t in tiers if t[1] > 0]  # host memory, disk: spill targets, in order

    def load(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.partial)

    def holds(self, pid: int) -> bool:
        return pid in self.cache or any(pid in t.lru for t in self.tiers)

    def cache_get(self, pid: int, cap: float, take: bool = True) -> tuple[int, float]:
        """(tokens of prefix `pid` cached on this rank, seconds to bring them into HBM): a hit in
        HBM is free; one in a lower tier is loaded back (and is HBM's most recent again). take
        False: look only (nothing moves)."""
        if pid < 0:
            return 0, 0.0
        if pid in self.cache:
            if take:
                self.cache.move_to_end(pid)
            return self.cache[pid], 0.0
        for t in self.tiers:
            if pid in t.lru:
                tok = t.lru[pid]
                if take:
                    del t.lru[pid]
                    t.tokens -= tok
                    self.cache_put(pid, tok, cap)
                return tok, tok * t.load_s_per_token
        return 0, 0.0

    def cache_put(self, pid: int, tokens: int, cap: float) -> None:
        if pid in self.cache:
            self.cache.move_to_end(pid)
            return
        self.cache[pid] = tokens
        self.cache_tokens += tokens
        self.evict(cap)

    def evict(self, cap: float) -> None:
        """Cached prefixes live in the free KV: the least recently used go when requests need it,
        down to the next tier (host memory, then disk) while it has room, else they are dropped."""
        while self.cache and self.cache_tokens > cap - self.kv_used:
            pid, tok = self.cache.popitem(last=False)
            self.cache_tokens -= tok
            self._spill(0, pid, tok)

    def _spill(self, i: int, pid: int, tok: int) -> None:
        if i >= len(self.tiers) or tok > self.tiers[i].capacity:
            return
        t = self.tiers[i]
        t.lru[pid] = tok
        t.tokens += tok
        while t.tokens > t.capacity:
            p2, k2 = t.lru.popitem(last=False)
            t.tokens -= k2
            self._spill(i + 1, p2, k2)


class Pass:
    """A pass (or a run of decode steps) in flight: what it changes when it ends."""

    __slots__ = ("ends", "rids", "need", "picks", "decoding", "kind", "ranks_b", "start")

    def __init__(self, kind, start, ends, rids=None, need=None, picks=None, decoding=None, ranks_b=None):
        self.kind = kind
        self.start = start  # "run" (decode steps) or "pass" (one pass with prefill)
        self.ends = ends  # step end times (run) or [end] (pass)
        self.rids = rids  # run: the decoding requests
        self.need = need  # run: steps each still needs
        self.picks = picks or []  # pass: (rank, rid, new prompt tokens)
        self.decoding = decoding  # pass: requests advancing one decode step
        self.ranks_b = ranks_b  # run: (rank, batch) pairs


__all__ = ["Reqs", "Rank", "Pass"]
