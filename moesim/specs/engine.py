"""The engine model (issue 27): what a pinned engine release RUNS for a deployment, and the flags that
select it. One model per engine in ``moesim/specs/engines/<engine>.yaml`` (the same files hold the serving
sections read by moesim.simulate.engines); this module reads the ``pin``, ``execution`` and ``launch``
sections into a frozen `EngineModel`. Both the pricer (`moe_comm`: which MoE communication path and
all-to-all mode each configuration runs) and `--emit-launch` (moesim.report.launch) read it, so what is
priced is what the emitted command runs (tests/property/test_engine_model.py).

MoE communication paths, per configuration (tp = attention TP, dp = attention-DP groups, ep = EP ranks):
    tp        ep = 1: experts split by MoE TP (no EP traffic beyond the MoE-TP all-reduce)
    a2a       ep > 1 and the engine runs the requested all-to-all kernels here (DeepEP / pplx): dispatch
              and combine of each rank's tokens (moesim.workload.comm)
    allgather ep > 1, attention DP, no all-to-all: the DP ranks' tokens all-gathered to every rank, each
              rank's experts over all of them, the output reduce-scattered back
    allreduce ep > 1, attention TP only (dp = 1), no all-to-all: every rank holds the whole batch, runs its
              own experts on it, the output is all-reduced
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from moesim.enums import DEFAULT_ENGINE, CommMode, Engine, Phase
from moesim.errors import SpecError

ENGINES_DIR = Path(__file__).with_name("engines")
PATHS = ("tp", "a2a", "allgather", "allreduce")
_NO_A2A = ("allgather", "allreduce")


@dataclass(frozen=True)
class Overlap:
    flag: str  # the option that enables it ("" = the engine has none)
    needs_a2a: bool  # only with an all-to-all backend
    min_decode_tokens: int  # decode-only passes with fewer tokens per rank run as one batch (0: none)
    source: str


@dataclass(frozen=True)
class EngineModel:
    engine: Engine
    release: str  # the pinned release (PyPI version)
    dist: str  # PyPI distribution of the server
    router_dist: str  # the PD router's distribution
    router_release: str  # its pinned release
    a2a_backends: dict  # moesim comm value -> the engine's backend selector (text)
    a2a_needs_attention_dp: bool
    a2a_needs_mnnvl: bool
    deepep_auto_mode: bool
    ll_max_tokens_per_rank: int  # 0: no cap
    ll_env: str  # the environment variable that raises the cap
    custom_allreduce_max_bytes: float
    overlap: dict  # moesim overlap value -> Overlap
    ep_slots_divisible: bool
    mtp_both_pd_sides: bool
    moe_kernel: dict  # a2a_low_latency / a2a_normal / no_a2a -> kernel text
    launch: dict  # server, router, port, router_port, bootstrap_port, dist_port
    flags: dict  # setting -> flag spelling of this release
    sources: dict  # dotted key -> source text
    file: str
    budget_tiers: tuple = ()  # ((below GiB, prefill tokens per pass), ...): the scheduler section's default
    chunk_split_over_dp: bool = False  # SGLang: chunked_prefill_size // attn_dp_size

    @property
    def label(self) -> str:
        """``sglang 0.5.23``: what outputs print next to a launch command and a priced engine."""
        return f"{self.engine.value} {self.release}"

    def source(self, key: str) -> str:
        return self.sources.get(key, "")

    def supports(self, comm) -> bool:
        """Does the engine have the all-to-all kernel `comm` (deepep-ll, deepep-normal, pplx, ...)?"""
        return CommMode(comm).value in self.a2a_backends

    def requested(self, comm, phase, aggregated: bool = False) -> CommMode:
        """The all-to-all kernel mode the engine runs for a pass of `phase` when `comm` was asked for.
        SGLang's ``--deepep-mode auto`` (what an aggregated server gets): DeepEP normal for passes that
        carry prefill tokens, low-latency for decode-only passes."""
        comm = CommMode(comm)
        if aggregated and self.deepep_auto_mode and comm in (CommMode.DEEPEP_LL, CommMode.DEEPEP_NORMAL):
            return CommMode.DEEPEP_NORMAL if Phase(phase) != Phase.DECODE else CommMode.DEEPEP_LL
        return comm

    def moe_paths(self, comm, *, dp, ep, mnnvl: bool = False) -> np.ndarray:
        """Per configuration, the MoE communication path the engine runs (PATHS, as an int index
        array) when the all-to-all `comm` is asked for. Vectorized over dp / ep arrays."""
        dp, ep = np.asarray(dp, float), np.asarray(ep, float)
        comm = CommMode(comm)
        runs_a2a = self.supports(comm) and comm.value not in _NO_A2A and (mnnvl or not self.a2a_needs_mnnvl)
        a2a = (ep > 1) & runs_a2a & ((dp > 1) | (not self.a2a_needs_attention_dp))
        out = np.where(ep > 1, np.where(dp > 1, 2, 3), 0)  # allgather with attention DP, else allreduce
        return np.where(a2a, 1, out)

    def runs(self, scheme: str) -> bool:
        """Does this release have the overlap scheme at all (on some configuration)?"""
        return scheme in self.overlap

    def scheme_ok(self, scheme: str, path, tokens_per_rank, phase) -> np.ndarray:  # tokens of a DP rank
        """Per configuration: does the engine run `scheme` there (listed, its all-to-all present where
        it needs one, vLLM DBO above its decode token threshold)?"""
        shape = np.broadcast(np.asarray(path), np.asarray(tokens_per_rank)).shape
        o = self.overlap.get(scheme)
        if o is None:
            return np.zeros(shape, bool)
        ok = np.ones(shape, bool)
        if o.needs_a2a:
            ok &= np.asarray(path) == PATHS.index("a2a")
        if o.min_decode_tokens and Phase(phase) == Phase.DECODE:
            ok &= np.asarray(tokens_per_rank, float) >= o.min_decode_tokens
        return ok


def _leaf(file, key, node):
    if not isinstance(node, dict) or "value" not in node or "source" not in node:
        raise SpecError(f"{file}: {key}: must be {{value: ..., source: '...'}}")
    if not isinstance(node["source"], str) or not node["source"].strip():
        raise SpecError(f"{file}: {key}.source: a non-empty text naming where the value was read")
    return node["value"]


def _int(file, key, node, lo=0):
    v = _leaf(file, key, node)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise SpecError(f"{file}: {key}: must be an integer >= {lo}, got {v!r}")
    return v


def _bool(file, key, node):
    v = _leaf(file, key, node)
    if not isinstance(v, bool):
        raise SpecError(f"{file}: {key}: must be true or false, got {v!r}")
    return v


def _text(file, key, node):
    v = _leaf(file, key, node)
    if not isinstance(v, str):
        raise SpecError(f"{file}: {key}: must be a text, got {v!r}")
    return v


def _section(file, raw, name):
    s = raw.get(name)
    if not isinstance(s, dict):
        raise SpecError(f"{file}: {name}: missing section (the engine model's {name})")
    return s


def _check_keys(file, prefix, d: dict, allowed):
    extra = [k for k in d if k not in allowed]
    if extra:
        raise SpecError(f"{file}: {prefix}.{extra[0]}: unknown key; allowed: {', '.join(allowed)}")
    missing = [k for k in allowed if k not in d]
    if missing:
        raise SpecError(f"{file}: {prefix}.{missing[0]}: missing field")


_EXEC_KEYS = ("a2a_backends", "a2a_needs_attention_dp", "a2a_needs_mnnvl", "deepep_auto_mode",
              "ll_max_tokens_per_rank", "without_a2a_attention_dp", "without_a2a_attention_tp", "moe_kernel",
              "custom_allreduce_max_bytes", "overlap", "ep_slots_divisible", "mtp_both_pd_sides")  # fmt: skip
_LAUNCH_KEYS = ("server", "router", "port", "router_port", "bootstrap_port", "dist_port", "flags")


def _overlaps(file, ex, src) -> dict:
    """execution.overlap -> {scheme: Overlap}."""
    overlaps = {}
    for name, node in (ex["overlap"] or {}).items():
        if not isinstance(node, dict):
            raise SpecError(f"{file}: execution.overlap.{name}: must be a mapping")
        overlaps[name] = Overlap(
            _text(file, f"execution.overlap.{name}", src(f"overlap.{name}", node)),
            bool(node.get("needs_a2a", False)),
            int(node.get("min_decode_tokens", 0)),
            node["source"],
        )
    return overlaps


def _budget(file, eng: Engine, sched: dict):
    """(default prefill tokens per pass by GPU memory, split over the DP-attention ranks?) from the
    scheduler section (its full validation: moesim.simulate.engines)."""
    key = {"sglang": "chunked_prefill_size", "vllm": "max_num_batched_tokens"}.get(eng.value, "max_num_tokens")
    tiers = tuple((float(a), float(b)) for a, b, *_ in ((sched.get(key) or {}).get("tiers") or ()))
    if not tiers:
        raise SpecError(f"{file}: scheduler.{key}.tiers: missing (the default prefill tokens per pass)")
    return tiers, bool((sched.get("chunk_divided_by_dp_attention") or {}).get("value", False))


def _parse(path: Path) -> EngineModel:
    from moesim.specs.loader import read_mapping  # lazy: YAML only when an engine model is read

    raw, file = read_mapping(path), str(path)
    eng = Engine.parse(raw.get("engine"), f"{file}: engine")
    pin, ex, la = (_section(file, raw, n) for n in ("pin", "execution", "launch"))
    _check_keys(file, "pin", pin, ("dist", "release", "router_dist", "router_release"))
    _check_keys(file, "execution", ex, _EXEC_KEYS)
    _check_keys(file, "launch", la, _LAUNCH_KEYS)
    sources: dict = {}

    def src(key, node):
        sources[key] = node.get("source", "") if isinstance(node, dict) else ""
        return node

    backends = {}
    for comm, node in (ex["a2a_backends"] or {}).items():
        CommMode.parse(comm, f"{file}: execution.a2a_backends")
        backends[comm] = _text(file, f"execution.a2a_backends.{comm}", src(f"a2a_backends.{comm}", node))
    for k in ("without_a2a_attention_dp", "without_a2a_attention_tp"):
        v = _text(file, f"execution.{k}", src(k, ex[k]))
        if v not in _NO_A2A:
            raise SpecError(f"{file}: execution.{k}: {v!r} is not one of {{{', '.join(_NO_A2A)}}}")
    overlaps = _overlaps(file, ex, src)
    ll = ex["ll_max_tokens_per_rank"]
    kernels = {k: _text(file, f"execution.moe_kernel.{k}", src(f"moe_kernel.{k}", v))
               for k, v in (ex["moe_kernel"] or {}).items()}  # fmt: skip
    flags = {k: _text(file, f"launch.flags.{k}", src(f"flags.{k}", v)) for k, v in (la["flags"] or {}).items()}
    launch = {}
    for k in _LAUNCH_KEYS[:-1]:
        node = src(f"launch.{k}", la[k])
        launch[k] = _text(file, f"launch.{k}", node) if k in ("server", "router") else _int(file, f"launch.{k}", node)
    tiers, split = _budget(file, eng, raw.get("scheduler") or {})
    return EngineModel(
        budget_tiers=tiers,
        chunk_split_over_dp=split,
        engine=eng,
        release=_text(file, "pin.release", src("pin.release", pin["release"])),
        dist=_text(file, "pin.dist", src("pin.dist", pin["dist"])),
        router_dist=_text(file, "pin.router_dist", src("pin.router_dist", pin["router_dist"])),
        router_release=_text(file, "pin.router_release", src("pin.router_release", pin["router_release"])),
        a2a_backends=backends,
        a2a_needs_attention_dp=_bool(
            file, "execution.a2a_needs_attention_dp", src("a2a_dp", ex["a2a_needs_attention_dp"])
        ),
        a2a_needs_mnnvl=_bool(file, "execution.a2a_needs_mnnvl", src("a2a_mnnvl", ex["a2a_needs_mnnvl"])),
        deepep_auto_mode=_bool(file, "execution.deepep_auto_mode", src("auto", ex["deepep_auto_mode"])),
        ll_max_tokens_per_rank=_int(file, "execution.ll_max_tokens_per_rank", src("ll_cap", ll)),
        ll_env=str(ll.get("env", "") or ""),
        custom_allreduce_max_bytes=float(
            _int(file, "execution.custom_allreduce_max_bytes", src("custom_ar", ex["custom_allreduce_max_bytes"]))
        ),  # fmt: skip
        overlap=overlaps,
        ep_slots_divisible=_bool(file, "execution.ep_slots_divisible", src("ep_slots", ex["ep_slots_divisible"])),
        mtp_both_pd_sides=_bool(file, "execution.mtp_both_pd_sides", src("mtp_pd", ex["mtp_both_pd_sides"])),
        moe_kernel=kernels,
        launch=launch,
        flags=flags,
        sources=sources,
        file=file,
    )


@cache
def load_engine_model(engine=None) -> EngineModel:
    """The shipped engine model of `engine` (sglang | vllm | trtllm; None: the default engine)."""
    e = Engine.parse(engine if engine is not None else DEFAULT_ENGINE, "engine")
    return _parse(ENGINES_DIR / f"{e.value}.yaml")


def prefill_budget_tokens(engine, memory_bytes: float) -> float:
    """The engine's default prefill tokens per pass (whole server) on a GPU of `memory_bytes`: the
    first tier whose memory bound exceeds it (SGLang chunked_prefill_size, vLLM max_num_batched_tokens,
    TRT-LLM max_num_tokens; moesim/specs/engines/*.yaml scheduler)."""
    gib = float(memory_bytes) / 1024.0**3
    tiers = load_engine_model(engine).budget_tiers
    return next((v for below, v in tiers if gib < below), tiers[-1][1])


def path_names(idx) -> np.ndarray:
    """PATHS names of a path index array (for outputs: `moe_comm`)."""
    return np.asarray(PATHS, dtype=object)[np.asarray(idx, int)]


def moe_comm_labels(path, comm) -> np.ndarray:
    """`moe_comm` output column: the path, the all-to-all named by its mode (``a2a:deepep-ll``)."""
    names = path_names(path)
    return np.where(names == "a2a", f"a2a:{CommMode(comm).value}", names).astype(object)


def path_notes(em: EngineModel, comm, path) -> list[str]:
    """One note per reason a configuration does not run the all-to-all that was asked for."""
    comm, path = CommMode(comm), np.asarray(path)
    other = (path >= 2) & (comm.value not in _NO_A2A)
    if not np.any(other):
        return []
    if not em.supports(comm):
        why = f"{em.label} has no {comm.value} all-to-all"
    elif em.a2a_needs_mnnvl:
        why = f"{em.label} runs its all-to-all only on multi-node NVLink (MNNVL) systems"
    else:
        why = f"{em.label} uses its all-to-all only with attention DP > 1"
    kinds = " / ".join(n for n in ("allgather", "allreduce") if np.any(path == PATHS.index(n)))
    return [
        f"moe comm: {why} ({em.source('a2a_mnnvl' if em.a2a_needs_mnnvl else 'a2a_dp')}); "
        f"EP configurations priced with {kinds} after the experts, as it runs them (column moe_comm)"
    ]


__all__ = [
    "EngineModel",
    "load_engine_model",
    "prefill_budget_tokens",
    "PATHS",
    "path_names",
    "moe_comm_labels",
    "path_notes",
    "scheme_notes",
]


def scheme_notes(em: EngineModel, scheme: str) -> list[str]:
    """A note when an explicitly asked overlap scheme is one the engine cannot run."""
    if scheme in ("ideal", "auto") or em.runs(scheme):
        return []
    runs = ", ".join(em.overlap) or "none"
    return [
        f"overlap {scheme}: {em.label} has no such schedule (it runs: {runs}); priced as asked, the "
        f"launched server runs without it (--overlap auto prices only what the engine runs)"
    ]
