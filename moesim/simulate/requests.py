"""The data the simulator exchanges: the requests to serve (`Workload`) and what happened to each
(`RequestLog`). Plain arrays, one entry per request, SI units (seconds, tokens)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Workload:
    """Requests in issue order.

    Closed loop (`concurrency` set, `arrival_s` None): `concurrency` clients; the first
    `concurrency` requests are sent at t = 0 (benchmark clients start them together) and each later
    request is sent when a client's previous request finishes (`think_s` later).
    Open loop / trace (`arrival_s` set, `concurrency` None or a client-side cap): request i is sent
    at `arrival_s[i]` (non-decreasing), or when a slot frees if a cap is set (bench_serving's
    --max-concurrency with a request rate).
    The first `warmup` requests are served but left out of the statistics.
    """

    input_tokens: np.ndarray  # int64 >= 1, prompt tokens per request
    output_tokens: np.ndarray  # int64 >= 1, tokens to generate per request
    arrival_s: np.ndarray | None = None  # float64 send time per request (open loop / trace)
    concurrency: int | None = None  # closed loop: concurrent clients (or a cap on an open loop)
    prefix_id: np.ndarray | None = None  # int64 shared-prefix id per request, -1 = none
    prefix_tokens: np.ndarray | None = None  # int64 tokens of that shared prefix (<= input_tokens)
    warmup: int = 0
    think_s: float = 0.0  # closed loop: delay between a response and the client's next request
    label: str = ""  # what produced it, for output ("closed loop, 64 clients, ...")

    @property
    def size(self) -> int:
        return int(np.asarray(self.input_tokens).size)

    def prefix_ids(self) -> np.ndarray:
        return np.full(self.size, -1, np.int64) if self.prefix_id is None else np.asarray(self.prefix_id, np.int64)

    def prefix_lengths(self) -> np.ndarray:
        return np.zeros(self.size, np.int64) if self.prefix_tokens is None else np.asarray(self.prefix_tokens, np.int64)


@dataclass
class RequestLog:
    """What the simulation recorded per request (times in seconds from the start of the run, as
    the client sees them: sent, first token received, last token received)."""

    sent_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_tokens: np.ndarray  # prompt tokens served from the prefix cache
    replica: np.ndarray  # serving instance (decode instance in PD)
    preemptions: np.ndarray  # retractions / preemptions the request went through
    warmup: np.ndarray  # bool: left out of the statistics
    # inter-token latency samples: gaps between streamed tokens, pooled over requests, with weights
    itl_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    itl_weight: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.sent_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.sent_s

    @property
    def tpot_s(self) -> np.ndarray:
        """(last - first token) / (output tokens - 1), NaN for one-token outputs (bench_serving)."""
        n = np.asarray(self.output_tokens, float) - 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(n > 0, (self.finish_s - self.first_token_s) / n, np.nan)


@dataclass
class TimeSeries:
    """Engine state sampled at scheduling events (per deployment, summed over replicas)."""

    t_s: np.ndarray
    running: np.ndarray  # requests in the running (decode) batch
    queued: np.ndarray  # requests waiting for prefill (incl. the KV-transfer queue in PD)
    kv_used_frac: np.ndarray  # KV-cache tokens in use / capacity


__all__ = ["Workload", "RequestLog", "TimeSeries"]
