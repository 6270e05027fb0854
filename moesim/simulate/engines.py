"""Serving-engine profiles as data: scheduler settings, serving overheads, CUDA-graph limits, first-token
timing, routing and PD defaults of SGLang, vLLM V1 and TensorRT-LLM (issue 26).

The numbers live in ``moesim/specs/engines/<engine>.yaml`` (the engine model; its ``execution`` / ``launch`` sections are read by moesim.specs.engine), one engine version per file; every leaf is
``{value: ..., source: "..."}`` naming the engine file and function (or a published measurement, or
``derived: <how>`` for an estimate). This module reads a profile strictly (unknown or missing keys, wrong
types and out-of-range numbers are one-line ``SpecError``s naming the file and field) into frozen
dataclasses in SI units: keys ending ``_us`` are microseconds in the file and seconds here (``_s``).

Memory-dependent defaults are tiers ``[gpu_memory_below_GiB, value]`` (first match wins, the last tier
is ``.inf``), or ``[below_GiB, value if tp < tp_threshold, value otherwise]`` for the CUDA-graph batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from moesim.enums import Engine
from moesim.errors import SpecError, check_number, key_text, unknown_keys
from moesim.specs.loader import read_mapping

GiB = 1024.0**3
# one engine model per engine and version (moesim/specs/engines): this module reads its serving sections;
# moesim.specs.engine reads `execution` and `launch` (what the engine runs and the flags that select it)
ENGINES_DIR = Path(__file__).resolve().parent.parent / "specs" / "engines"
OTHER_SECTIONS = ("pin", "execution", "launch")
US = 1e-6  # seconds per microsecond

# field kinds: ("int", lo), ("us", lo) (microseconds -> seconds), ("float", lo, hi), ("str", allowed | None),
# ("bool",), ("tiers",) memory tiers, ("tiers_tp",) memory x TP tiers
_SCHEMA: dict[str, dict[str, tuple]] = {
    "scheduler": {
        "kind": ("str", ("prefill_priority", "fused_chunked_prefill")),
        "schedule_policy": ("str", None),
        "mixed_chunk": ("bool",),
        "dp_attention_lock_step": ("bool",),
    },
    "overheads": {
        "http_request_us": ("us", 0.0),
        "tokenize_fixed_us": ("us", 0.0),
        "tokenize_per_token_us": ("us", 0.0),
        "ipc_hop_us": ("us", 0.0),
        "ipc_hops_to_engine": ("int", 0),
        "ipc_hops_from_engine": ("int", 0),
        "detokenize_per_token_us": ("us", 0.0),
        "stream_chunk_us": ("us", 0.0),
        "step_cpu_fixed_us": ("us", 0.0),
        "step_cpu_per_request_us": ("us", 0.0),
        "step_cpu_overlapped": ("bool",),
    },
    "cuda_graph": {
        "decode_max_bs": ("tiers_tp",),
        "prefill_mode": ("str", ("eager", "piecewise", "breakable", "full")),
        "prefill_graph_max_tokens": ("int", 0),
    },
    "first_token": {
        "after_next_pass_launch": ("bool",),
        "after_next_pass_completes": ("bool",),
        "stream_interval": ("int", 1),
    },
    "router": {
        "replica_policy": ("str", ("cache_aware", "round_robin", "random", "power_of_two", "none")),
        "dp_rank_policy": ("str", None),
    },
    "pd": {
        "kv_transfer_backend": ("str", None),
        "kv_transfer_granularity": ("str", ("per_layer", "per_chunk", "whole_prompt")),
        "decode_admission": ("str", None),
    },
}

# the per-engine scheduler knobs (on top of _SCHEMA["scheduler"]) and the other per-engine extras
_ENGINE_SCHEMA: dict[Engine, dict[str, dict[str, tuple]]] = {
    Engine.SGLANG: {
        "scheduler": {
            "chunked_prefill_size": ("tiers",),
            "chunk_divided_by_dp_attention": ("bool",),
            "max_prefill_tokens": ("int", 1),
            "max_running_requests_rule": ("str", None),
            "max_running_requests_floor": ("int", 1),
            "max_running_requests_ceiling": ("int", 1),
            "schedule_conservativeness": ("float", 0.0, None),
            "dp_attention_conservativeness_factor": ("float", 0.0, None),
            "init_new_token_ratio": ("float", 0.0, 1.0),
            "min_new_token_ratio_factor": ("float", 0.0, 1.0),
            "new_token_ratio_decay_steps": ("int", 1),
            "retract_decode_steps": ("int", 0),
            "retraction": ("str", None),
            "page_size": ("int", 1),
            "mem_fraction_static_rule": ("str", None),
            "num_continuous_decode_steps": ("int", 1),
        },
        "router": {
            "cache_threshold": ("float", 0.0, 1.0),
            "balance_abs_threshold": ("int", 0),
            "balance_rel_threshold": ("float", 1.0, None),
            "eviction_interval_s": ("float", 0.0, None),
            "power_of_two_load_check_interval_s": ("float", 0.0, None),
        },
        "pd": {
            "prefill_dp_rank_policy": ("str", None),
            "decode_reserved_tokens": ("int", 0),
            "router_prefill_policy": ("str", None),
            "router_decode_policy": ("str", None),
        },
    },
    Engine.VLLM: {
        "scheduler": {
            "max_num_batched_tokens": ("tiers",),
            "max_num_seqs": ("tiers",),
            "long_prefill_token_threshold": ("int", 0),
            "enable_chunked_prefill": ("bool",),
            "scheduling_order": ("str", ("running_then_waiting",)),
            "preemption": ("str", None),
            "async_scheduling": ("bool",),
        },
    },
    Engine.TRTLLM: {
        "scheduler": {
            "max_num_tokens": ("tiers",),
            "max_batch_size": ("tiers",),
            "enable_chunked_prefill": ("bool",),
            "capacity_scheduler_policy": ("str", ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION", "STATIC_BATCH")),
            "overlap_scheduler": ("bool",),
        },
    },
}


@dataclass(frozen=True)
class Tiers:
    """A default that depends on GPU memory (and, for the CUDA-graph batch, on TP): ``rows`` of
    (below_bytes, value[, value at tp >= tp_threshold]), first row with memory < below_bytes wins."""

    rows: tuple[tuple, ...]
    source: str
    tp_threshold: int = 1

    def at(self, gpu_memory_bytes: float, tp: int = 1) -> int:
        for row in self.rows:
            if gpu_memory_bytes < row[0]:
                return int(row[2] if len(row) > 2 and tp >= self.tp_threshold else row[1])
        return int(self.rows[-1][-1])  # unreachable: the last row is below .inf (checked at load)


@dataclass(frozen=True)
class Section:
    """One profile section: ``values`` (SI: ``*_us`` keys become ``*_s`` seconds) and each one's source."""

    values: dict
    sources: dict

    def __getattr__(self, name):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class EngineProfile:
    """A serving engine's profile (one version). Sections: scheduler, overheads, cuda_graph, first_token,
    router, pd (attribute access to their values, e.g. ``profile.scheduler.max_prefill_tokens``)."""

    engine: Engine
    version: str
    file: str
    scheduler: Section
    overheads: Section
    cuda_graph: Section
    first_token: Section
    router: Section
    pd: Section

    # --- the derived quantities the simulator calls -------------------------------------------
    def prefill_budget_tokens(self, gpu_memory_bytes: float) -> int:
        """The most prefill tokens one pass takes per DP group: SGLang chunked_prefill_size, vLLM
        max_num_batched_tokens, TRT-LLM max_num_tokens (each by GPU memory)."""
        key = {Engine.SGLANG: "chunked_prefill_size", Engine.VLLM: "max_num_batched_tokens"}.get(
            self.engine, "max_num_tokens"
        )
        return self.scheduler.values[key].at(gpu_memory_bytes)

    def max_running_requests(self, gpu_memory_bytes: float, kv_token_capacity: int | None = None, context_len=None):
        """The default cap on running requests per DP worker: vLLM max_num_seqs, TRT-LLM max_batch_size
        (by GPU memory); SGLang min(clamp(capacity / context_len x 512, floor, ceiling), capacity // 2)
        (needs the KV token capacity and the context length; without them the ceiling)."""
        s = self.scheduler.values
        if self.engine == Engine.VLLM:
            return s["max_num_seqs"].at(gpu_memory_bytes)
        if self.engine == Engine.TRTLLM:
            return s["max_batch_size"].at(gpu_memory_bytes)
        lo, hi = s["max_running_requests_floor"], s["max_running_requests_ceiling"]
        if kv_token_capacity is None or not context_len:
            return hi
        est = max(min(int(kv_token_capacity / context_len * 512), hi), lo)
        return max(1, min(est, int(kv_token_capacity) // 2))

    def cuda_graph_max_bs(self, gpu_memory_bytes: float, tp: int = 1) -> int:
        """The largest decode batch replayed from a CUDA graph; a larger decode step runs eager."""
        return self.cuda_graph.values["decode_max_bs"].at(gpu_memory_bytes, tp)

    @property
    def prefill_eager(self) -> bool:
        """True when a prefill/extend pass runs without any CUDA graph (TRT-LLM); vLLM (piecewise) and
        SGLang (breakable) graph prefill passes up to ``cuda_graph.prefill_graph_max_tokens`` tokens."""
        return self.cuda_graph.prefill_mode == "eager"

    def step_cpu_s(self, batch) -> float:
        """Scheduler CPU time of one step with ``batch`` running requests (s): a + b x batch. Hidden
        behind the GPU pass when ``overheads.step_cpu_overlapped``."""
        o = self.overheads.values
        return o["step_cpu_fixed_s"] + o["step_cpu_per_request_s"] * batch

    def request_in_s(self, input_tokens) -> float:
        """Request path before the scheduler sees it (s): HTTP + tokenize + IPC hops to the engine."""
        o = self.overheads.values
        return (
            o["http_request_s"]
            + o["tokenize_fixed_s"]
            + o["tokenize_per_token_s"] * input_tokens
            + o["ipc_hop_s"] * o["ipc_hops_to_engine"]
        )

    def token_out_s(self, tokens=1) -> float:
        """Path of one streamed chunk of ``tokens`` tokens from the engine to the client (s)."""
        o = self.overheads.values
        return o["ipc_hop_s"] * o["ipc_hops_from_engine"] + o["detokenize_per_token_s"] * tokens + o["stream_chunk_s"]

    @property
    def request_fixed_s(self) -> float:
        """Per-request fixed cost on the request path (s): HTTP + fixed tokenize + IPC hops to the engine."""
        return self.request_in_s(0)

    @property
    def step_cpu_overlapped(self) -> bool:
        return bool(self.overheads.step_cpu_overlapped)

    @property
    def first_token_after_next_pass(self) -> bool:
        """True: the first token leaves the engine only once the next pass has been launched (overlap
        scheduler / async scheduling), i.e. after max(prefill pass end, next pass launch); it does not
        wait for the next pass to complete unless ``first_token.after_next_pass_completes``."""
        return bool(self.first_token.after_next_pass_launch)

    @property
    def router_policy(self) -> str:
        return self.router.replica_policy

    @property
    def dp_rank_policy(self) -> str:
        return self.router.dp_rank_policy


def _fail(where: str, msg: str):
    raise SpecError(f"{where}: {msg}")


def _tiers(where: str, leaf: dict, with_tp: bool) -> Tiers:
    allowed = {"source", "tiers"} | ({"tp_threshold"} if with_tp else set())
    extra = unknown_keys(leaf, allowed)
    if extra:
        _fail(where, f"unknown key {key_text(extra[0])!r}; allowed: {', '.join(sorted(allowed))}")
    for k in sorted(allowed):
        if k not in leaf:
            _fail(where, f"missing key {k!r}")
    source = leaf["source"]
    if not isinstance(source, str) or not source.strip():
        _fail(f"{where}.source", "must be a non-empty string naming where the value comes from")
    tp_threshold = check_number(
        "tp_threshold", leaf.get("tp_threshold", 1), lo=1, integer=True, where=f"{where}.", error=SpecError
    )
    rows = leaf["tiers"]
    width = 3 if with_tp else 2
    if not isinstance(rows, list) or not rows:
        _fail(f"{where}.tiers", f"must be a non-empty list of [gpu_memory_below_GiB{', value' * (width - 1)}]")
    out, last = [], 0.0
    for i, row in enumerate(rows):
        w = f"{where}.tiers[{i}]"
        if not isinstance(row, list) or len(row) != width:
            _fail(w, f"must be a list of {width} numbers [gpu_memory_below_GiB{', value' * (width - 1)}]")
        if isinstance(row[0], float) and row[0] == math.inf:  # .inf: the open-ended last tier
            below = math.inf
        else:
            below = check_number("below_GiB", row[0], lo=0, lo_open=True, where=f"{w}.", error=SpecError)
        if below <= last:
            _fail(w, f"gpu_memory_below_GiB {below:g} must increase over the tiers")
        last = below
        vals = [check_number("value", v, lo=0, integer=True, where=f"{w}.", error=SpecError) for v in row[1:]]
        out.append((below * GiB, *vals))
    if not math.isinf(last):
        _fail(f"{where}.tiers", "the last tier must be below .inf (cover every GPU memory size)")
    return Tiers(tuple(out), source, tp_threshold)


def _leaf(where: str, kind: tuple, leaf):
    """-> (value in SI, source) of one {value, source} leaf."""
    if kind[0] in ("tiers", "tiers_tp"):
        if not isinstance(leaf, dict):
            _fail(where, "must be a mapping with source and tiers")
        t = _tiers(where, leaf, kind[0] == "tiers_tp")
        return t, t.source
    if not isinstance(leaf, dict):
        _fail(where, 'must be a mapping {value: ..., source: "..."}')
    extra = unknown_keys(leaf, ("value", "source"))
    if extra:
        _fail(where, f"unknown key {key_text(extra[0])!r}; allowed: value, source")
    for k in ("value", "source"):
        if k not in leaf:
            _fail(where, f"missing key {k!r}")
    source = leaf["source"]
    if not isinstance(source, str) or not source.strip():
        _fail(f"{where}.source", "must be a non-empty string naming where the value comes from")
    v = leaf["value"]
    t = kind[0]
    if t == "bool":
        if not isinstance(v, bool):
            _fail(f"{where}.value", f"{key_text(v)!r} is not a boolean; allowed: true, false")
    elif t == "str":
        if not isinstance(v, str) or not v.strip():
            _fail(f"{where}.value", f"{key_text(v)!r} is not a non-empty string")
        if kind[1] is not None and v not in kind[1]:
            _fail(f"{where}.value", f"{v!r} is not one of {{{', '.join(kind[1])}}}")
    elif t == "int":
        v = check_number("value", v, lo=kind[1], integer=True, where=f"{where}.", error=SpecError)
    elif t == "us":
        v = check_number("value", v, lo=kind[1], where=f"{where}.", error=SpecError) * US
    else:  # float
        v = check_number("value", v, lo=kind[1], hi=kind[2], where=f"{where}.", error=SpecError)
    return v, source


def _section(file: str, name: str, raw, schema: dict[str, tuple]) -> Section:
    where = f"{file}: {name}"
    if not isinstance(raw, dict):
        _fail(where, "must be a mapping of fields")
    extra = unknown_keys(raw, schema)
    if extra:
        _fail(f"{where}.{key_text(extra[0])}", f"unknown key; allowed: {', '.join(sorted(schema))}")
    values, sources = {}, {}
    for key, kind in schema.items():
        if key not in raw:
            _fail(f"{where}.{key}", "missing field")
        v, src = _leaf(f"{where}.{key}", kind, raw[key])
        out_key = key[: -len("_us")] + "_s" if kind[0] == "us" else key
        values[out_key], sources[out_key] = v, src
    return Section(values, sources)


def _resolve(engine: str | Path) -> Path:
    text = str(engine)
    p = Path(text)
    if p.suffix in (".yaml", ".yml") or "/" in text or "\\" in text:
        if not p.is_file():
            raise SpecError(f"engine profile: file {text!r} does not exist")
        return p
    try:
        e = Engine(text.strip().lower())
    except ValueError:
        allowed = ", ".join(m.value for m in Engine)
        raise SpecError(
            f"engine profile: unknown engine {text!r}; allowed: {allowed} (or a path to a YAML file)"
        ) from None
    return ENGINES_DIR / f"{e.value}.yaml"


def load_engine_profile(engine: str | Path, version: str | None = None) -> EngineProfile:
    """The serving profile of ``engine`` (catalog name sglang / vllm / trtllm, or a path to a profile
    YAML). ``version``, when given, must equal the profile's ``version`` text (the catalog holds one
    version per engine). Raises SpecError (one line: file, field, allowed) on any problem."""
    path = _resolve(engine)
    raw = read_mapping(path)
    file = str(path)
    top = ("engine", "version", *_SCHEMA)
    extra = unknown_keys(raw, top + OTHER_SECTIONS)
    if extra:
        _fail(f"{file}: {key_text(extra[0])}", f"unknown key; allowed: {', '.join(top)}")
    for k in top:
        if k not in raw:
            _fail(f"{file}: {k}", "missing field")
    e = Engine.parse(raw["engine"], f"{file}: engine")
    ver = raw["version"]
    if not isinstance(ver, str) or not ver.strip():
        _fail(f"{file}: version", "must be a non-empty string naming the engine release read")
    if version is not None and version != ver:
        _fail(f"{file}: version", f"profile is {ver!r}, not the requested {version!r}")
    sections = {}
    for name, common in _SCHEMA.items():
        schema = {**common, **_ENGINE_SCHEMA[e].get(name, {})}
        sections[name] = _section(file, name, raw[name], schema)
    return EngineProfile(engine=e, version=ver, file=file, **sections)


def shipped_profiles() -> dict[Engine, Path]:
    """Engine -> its shipped profile file."""
    return {e: ENGINES_DIR / f"{e.value}.yaml" for e in Engine}
