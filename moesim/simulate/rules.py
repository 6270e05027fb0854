"""What a simulated engine does, as the scheduler needs it: one frozen record per (engine profile,
deployment), built from the engine's serving profile (`moesim.simulate.engines`, YAML with a
source per number) and the deployment (DP ranks, KV capacity). Seconds and tokens.

Admission and KV (`Rules.admission`): "reserve" = SGLang's PrefillAdder (a prompt is admitted when
its KV plus new_token_ratio x the output still to come, for it and for every running request,
fits; the ratio decays per decode step and jumps back when decode runs out of KV, which retracts
the requests with the fewest outputs back to the queue); "incremental" = vLLM's block allocation
(the prompt's chunk must fit; when a decode step finds no free KV the most recently admitted
request is preempted, recompute); "no-evict" = TRT-LLM's GUARANTEED_NO_EVICT (admitted only when
its whole prompt + output fits next to the running requests' whole prompt + output).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

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
    clip_max_new_tokens: int = (
        4096  # SGLang schedule_policy.py CLIP_MAX_NEW_TOKENS (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION)
    )
    retract_decode_steps: int = 20  # SGLang: decode steps per request the ratio reserves after a retraction
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


# the profiles' policy names -> the simulator's (vLLM ships no replica router and TRT-LLM's attention-DP
# ranks draw from one executor queue with balancing off: both taken as round robin)
_ROUTER_NAMES = {"cache_aware": "cache-aware", "round_robin": "round-robin", "random": "random",
                 "power_of_two": "power-of-two", "least_loaded": "shortest-queue", "shortest_queue": "shortest-queue",
                 "none": "round-robin", "follow_bootstrap_room": "round-robin"}  # fmt: skip
_ADMISSION = {"sglang": "reserve", "vllm": "incremental", "trtllm": "no-evict"}


def rules_for(engine, profile=None, *, memory_bytes, dp, tp=1, kv_tokens=None, context_len=None, overrides=None):
    """-> (Rules, notes): the engine's serving profile (`moesim.simulate.engines`: shipped or a
    user's file) at this GPU memory, attention-DP size and KV pool, with `overrides` (Rules fields)."""
    from moesim.simulate.engines import load_engine_profile  # lazy: YAML only when a simulation is built

    p = load_engine_profile(profile if profile is not None else engine)
    e = p.engine.value
    sch, ov = p.scheduler, p.overheads
    budget = p.prefill_budget_tokens(memory_bytes)
    if e == "sglang" and sch.chunk_divided_by_dp_attention and dp > 1:
        budget = max(budget // int(dp), 1)  # SGLang splits the chunk over the DP-attention ranks
    running = p.max_running_requests(memory_bytes, kv_tokens, context_len)
    if e == "trtllm" and sch.capacity_scheduler_policy != "GUARANTEED_NO_EVICT":
        admission = "incremental"
    else:
        admission = _ADMISSION[e]
    ratio0, ratio_min = 0.7, 0.7  # unused outside SGLang ("reserve" admission)
    if e == "sglang":  # NewTokenRatioTracker.from_config: init x conservativeness (x 0.3 with DP attention)
        cons = float(sch.schedule_conservativeness) * (float(sch.dp_attention_conservativeness_factor) if dp > 1 else 1)
        ratio0 = min(float(sch.init_new_token_ratio) * cons, 1.0)
        ratio_min = min(ratio0 * float(sch.min_new_token_ratio_factor), 1.0)
    steps = float(sch.new_token_ratio_decay_steps) if e == "sglang" else 1.0
    chunked = bool(sch.enable_chunked_prefill) if e != "sglang" else True
    graph_tokens = getattr(p.cuda_graph, "prefill_graph_max_tokens", 0) or 0
    r = Rules(
        engine=e,
        version=p.version,
        policy="prefill-priority" if sch.kind == "prefill_priority" else "fused",
        chunk_tokens=int(budget),
        max_prefill_tokens=int(getattr(sch, "max_prefill_tokens", budget)) if e == "sglang" else int(budget),
        max_running=int(running),
        chunked_prefill=chunked,
        admission=admission,
        new_token_ratio_init=ratio0,
        new_token_ratio_min=ratio_min,
        new_token_ratio_decay=(ratio0 - ratio_min) / steps,
        retract_decode_steps=int(getattr(sch, "retract_decode_steps", 20) if e == "sglang" else 20),
        step_cpu_s=float(ov.step_cpu_fixed_s),
        step_cpu_per_req_s=float(ov.step_cpu_per_request_s),
        cpu_overlapped=p.step_cpu_overlapped,
        request_in_s=p.request_fixed_s,
        request_in_per_token_s=float(ov.tokenize_per_token_s),
        response_out_s=p.token_out_s(1),
        first_token_after_next_pass=bool(p.first_token.after_next_pass_completes),
        graph_max_bs=p.cuda_graph_max_bs(memory_bytes, tp),
        prefill_eager=p.prefill_eager or budget > graph_tokens,
        router=_ROUTER_NAMES[p.router_policy],
        dp_balance=_ROUTER_NAMES[p.dp_rank_policy],
        long_prefill_tokens=int(getattr(sch, "long_prefill_token_threshold", 0) or 0),
        sources=(("profile", f"{Path(p.file).name} ({p.version})"),),
    )
    return r.with_(**(overrides or {})), [f"engine: {p.version}, serving profile {Path(p.file).name}"]
