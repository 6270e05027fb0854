"""What a simulated engine does, as the scheduler needs it: one frozen record per (engine profile,
deployment), built from the engine's serving profile (`moesim.simulate.engines`, YAML with a
source per number) and the deployment (DP ranks, KV capacity). Seconds and tokens."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from moesim.errors import ConfigError, check_number

POLICIES = ("prefill-priority", "fused")
ADMISSIONS = ("reserve", "incremental", "no-evict")
ROUTERS = ("round-robin", "shortest-queue", "cache-aware", "random", "power-of-two")


@dataclass(frozen=True)
class Rules:
    engine: str
    version: str
    policy: str  # "prefill-priority" (SGLang) or "fused" (vLLM V1 / TRT-LLM: decode + prefill in one pass)
    chunk_tokens: int  # SGLang: prompt tokens per prefill pass per DP rank; fused: the pass's token budget
    max_prefill_tokens: int  # SGLang: prompt tokens one prefill batch admits (besides the chunk)
    max_running: int  # running requests per DP rank
    chunked_prefill: bool  # a prompt may be split over passes (TRT-LLM can turn it off)
    admission: str  # "reserve" (SGLang new-token ratio), "incremental" (vLLM blocks, preempt), "no-evict"
    new_token_ratio_init: float = 0.7
    new_token_ratio_min: float = 0.1
    new_token_ratio_decay: float = 0.001  # per decode step
    clip_max_new_tokens: int = 4096
    step_cpu_s: float = 0.0  # scheduler CPU per pass: fixed ...
    step_cpu_per_req_s: float = 0.0  # ... plus per running request
    cpu_overlapped: bool = False  # CPU scheduling hidden behind the previous pass (overlap scheduler)
    request_in_s: float = 0.0  # request path to the scheduler: HTTP, tokenizer, IPC (fixed) ...
    request_in_per_token_s: float = 0.0  # ... plus per prompt token (tokenization)
    response_out_s: float = 0.0  # a token's path from the scheduler to the client (detokenize, IPC, stream)
    first_token_after_next_pass: bool = False  # the first token leaves after the following pass ends
    graph_max_bs: int | None = None  # decode batches above run eager (None: all graphed)
    prefill_eager: bool = True  # prefill / extend passes launch eagerly
    router: str = "round-robin"  # across replicas
    dp_balance: str = "round-robin"  # across DP ranks of one instance (DP attention)
    long_prefill_tokens: int = 0  # vLLM long_prefill_token_threshold (0: none)
    sources: tuple = ()  # (field, source) pairs, for the output

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ConfigError(f"policy: {self.policy!r} is not one of {POLICIES}")
        if self.admission not in ADMISSIONS:
            raise ConfigError(f"admission: {self.admission!r} is not one of {ADMISSIONS}")
        for r in (self.router, self.dp_balance):
            if r not in ROUTERS:
                raise ConfigError(f"router: {r!r} is not one of {ROUTERS}")
        for name in ("chunk_tokens", "max_prefill_tokens", "max_running"):
            check_number(name, getattr(self, name), lo=1, integer=True)

    @property
    def fused(self) -> bool:
        return self.policy == "fused"

    def with_(self, **kw) -> Rules:
        """A copy with user overrides (CLI flags); None values are ignored."""
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def step_cpu(self, running: int) -> float:
        return self.step_cpu_s + self.step_cpu_per_req_s * running

    def request_in(self, prompt_tokens) -> float:
        return self.request_in_s + self.request_in_per_token_s * prompt_tokens


__all__ = ["Rules", "POLICIES", "ADMISSIONS", "ROUTERS"]


def rules_for(engine, profile=None, *, memory_bytes, dp, overrides=None):
    """TEMPORARY until the engine profiles land."""
    from moesim.engine import scheduler as Sch

    e = str(engine)
    budget = int(Sch.default_budget_tokens(e, memory_bytes, np.asarray([float(dp)]))[0])
    if e == "sglang":
        r = Rules(e, "?", "prefill-priority", budget, 16384, 4096, True, "reserve", cpu_overlapped=True)
    elif e == "vllm":
        r = Rules(e, "?", "fused", budget, budget, 1024, True, "incremental")
    else:
        r = Rules(e, "?", "fused", budget, budget, 2048, True, "no-evict")
    return r.with_(**(overrides or {})), []
