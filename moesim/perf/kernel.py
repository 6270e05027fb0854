"""Price one kernel alone (`moesim kernel`): its time in a cost mode and against the roofline; a
collective with one library (price_collective)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from moesim import units as U
from moesim.enums import BoundCode, CostMode, OpKind, Provenance, Stream
from moesim.errors import ConfigError
from moesim.grid.validity import require_dtypes
from moesim.perf.collectives import (
    COLLECTIVE_LIBRARIES,
    collective_entry_choice,
    fastest_of,
    inter_node_allreduce_terms,
    ring_one_shot_candidates,
)
from moesim.perf.cost import CostModel
from moesim.perf.profile.schema import TIMED_COLLECTIVES
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.comm import ring_allreduce_bytes
from moesim.workload.ops import OpWork, quant_pass

LINEAR_OP_NOTE = (
    "GEMM alone; the engine's linear op adds its input quant ({us:.2f} us, priced as the step's own quant op; "
    "the GEMM fit subtracted {src})"
)


def price_kernel(work: OpWork, model: ModelSpec, hw: HardwareSpec, cost_mode: CostMode, profile) -> dict:
    """-> {time_s, flops, bytes, bound, efficiency, roofline_time_s, provenance} of a one-element
    OpWork; efficiency = roofline time / predicted time (1 where the predicted time is 0). The
    model's compute dtypes must run on the GPU (require_dtypes), as in every other command."""
    require_dtypes(model, hw)
    cost_model = CostModel(hw, model, cost_mode, profile)
    cost = cost_model.cost(work)
    roof = CostModel(hw, model, CostMode.ROOFLINE, None).cost(work)
    t = float(np.ravel(cost.time_s)[0])
    t_roof = float(np.ravel(roof.time_s)[0])
    return {
        "time_s": t,
        "flops": float(np.ravel(cost.flops)[0]) if work.stream == Stream.COMPUTE else 0.0,
        "bytes": float(np.ravel(cost.bytes)[0]),
        "bound": cost.bound_name(0),
        "efficiency": t_roof / t if t > 0 else 1.0,
        "roofline_time_s": t_roof,
        "provenance": cost.provenance,
    } | _input_quant(work, model, cost_model)


def _input_quant(work: OpWork, model: ModelSpec, cost_model: CostModel) -> dict:
    """{input_quant_s, note} of a GEMM whose profile variant was fitted on linear-op rows less their input
    quant (moesim.calibration.fit.act_quant): the quant pass of its [m, k] input, priced as the step
    prices it (Tag.ACT_QUANT ops, moesim.workload.ffn); {} for any other kernel or profile."""
    prof = cost_model.profile
    aq = prof.gemm_act_quant(work.dtype.value) if work.kind == OpKind.GEMM and hasattr(prof, "gemm_act_quant") else None
    if not aq:
        return {}
    p = model.precision
    q = quant_pass(
        "input_quant", work.shape.m, work.shape.k, a_bytes=p.activation_dtype.bytes, block=p.weight_block, stage=1
    )
    t = float(np.ravel(cost_model.cost(q).time_s)[0])
    src = aq.get("source", "a quant model").split(";")[0]
    return {"input_quant_s": t, "note": LINEAR_OP_NOTE.format(us=t * 1e6, src=src)}


# ---------------------------------------------------------------------------------------------- collectives
# `moesim kernel --op all_reduce|all_gather --library auto|nccl|custom`: the engine's pick (auto), NCCL
# alone (what nccl-tests measures) or the engine's custom all-reduce alone, and which algorithm priced it.
COLLECTIVE_OPS = ("all_reduce", "all_gather")
SWITCH_RANGE_BYTES = (2.0**10, 2.0**30)  # message sizes (bytes) the switch points are looked for in
_GRID_PER_OCTAVE = 32  # switch search grid: 2^(1/32) apart (2.2 %), then bisected to 1e-6 relative
_INTER_NODE = " + inter-node ring"  # a hierarchical all-reduce's NIC ring (collectives.inter_node_allreduce_terms)
ROOFLINE_LIBRARY = {
    # what the roofline (spec link bandwidth and latency, no fitted profile) prices for each library;
    # ring / one-shot: moesim.perf.collectives.ring_one_shot_candidates
    ("all_reduce", "nccl"): "roofline nccl = NCCL's ring: 2(n-1) steps x spec link latency + 2(n-1)/n x bytes / spec "
    "link bandwidth (NCCL's LL/LL128/Simple protocols and NVLS need a fitted profile)",
    ("all_reduce", "custom"): "roofline custom = the custom all-reduce's one-shot: 2 steps x spec link latency + "
    "(n-1) x bytes / spec link bandwidth (each rank reads its n-1 peers' buffers; the two-shot needs a fitted profile)",
    ("all_reduce", "auto"): "roofline auto = the faster of NCCL's ring and the custom one-shot, as every command's "
    "roofline prices it (the custom all-reduce's max_bytes is not applied in roofline mode)",
    ("all_gather", "nccl"): "roofline nccl = the faster of ring (n-1 steps) and one-shot (1 step), (n-1)/n x bytes at "
    "the spec link bandwidth; --library auto prices the same (no custom all-gather)",
    ("all_gather", "auto"): "roofline auto = the faster of ring (n-1 steps) and one-shot (1 step), (n-1)/n x bytes at "
    "the spec link bandwidth (NCCL: no engine runs a custom all-gather)",
}

ROOFLINE_ACROSS_NODES = (
    "across NVLink domains the roofline prices the local phase with the faster of ring and one-shot too "
    "(moesim.perf.cost.CostModel._collective), though the engines run NCCL there; --library nccl prices the ring"
)

NO_CUSTOM_LIMIT = (
    "no fitted {engine} collectives for {hw}: the one-shot stands for the custom all-reduce, with no size limit "
    "(max_bytes unknown)"
)


def custom_backends(profile, op: str) -> dict | None:
    """{backend name: max_bytes} of the engine's custom all-reduce in `profile` (collectives.<op>.custom); {}
    where its timed entry has none (every all-gather: NCCL at every size); None where unknown (no profile, or
    no timed entry for the op)."""
    if not _timed(profile, op):
        return None
    return {k: float(c["max_bytes"]) for k, c in (profile.collectives[op].get("custom") or {}).items()}


def library_error(work: OpWork, hw: HardwareSpec, library: str, backends: dict | None, engine: str) -> str | None:
    """Why the engine would not run `library` for this collective (one line naming the limit), or None.
    backends: custom_backends (None: unknown, the custom all-reduce is priced without a size limit)."""
    if library not in COLLECTIVE_LIBRARIES:
        return f"--library: {library!r}; allowed: {', '.join(COLLECTIVE_LIBRARIES)}"
    if library != "custom":
        return None
    op, g = work.comm_op, float(np.ravel(work.group)[0])
    msg = float(np.ravel(work.shape.msg_bytes)[0])
    if op == "all_gather" or backends == {}:
        what = "custom all-gather" if op == "all_gather" else "custom all-reduce in its profile"
        return f"--library custom: the {engine} engine has no {what} (it runs NCCL at every size); use --library auto or nccl"
    name = f" ({', '.join(backends)})" if backends else ""
    if g > hw.domain_gpus:
        return (
            f"--library custom: --gpus {g:g} spans {int(np.ceil(g / hw.domain_gpus))} NVLink domains of {hw.domain_gpus} "
            f"GPUs ({hw.name}); the engine's custom all-reduce{name} is single-node (vLLM / SGLang disable it across "
            "nodes): use --library nccl or auto"
        )
    cap = min(backends.values()) if backends else np.inf
    if msg > cap:
        return (
            f"--library custom: --bytes {msg:g} is above the custom all-reduce's size limit, max_bytes {cap:.0f} "
            f"({U.fmt_bytes(cap)}{name}); the engine runs NCCL above it: use --library nccl or auto"
        )
    return None


class _OneLibrary:
    """A calibration profile whose timed collective entries price one library (collectives.
    collective_entry_choice) and record the algorithm that priced each call: `algorithm[custom]`, the
    `custom` flag CostModel._collective passed (False: the NCCL part of a hierarchical all-reduce)."""

    def __init__(self, profile, library: str):
        self._profile, self.library, self.algorithm = profile, library, {}

    def __getattr__(self, name):
        return getattr(self._profile, name)

    def collective_time(self, op, n, message_bytes, ring_bytes, link_Bps, custom=True):
        e = self._profile.collectives.get(str(op))
        if e is None or e.get("model") not in TIMED_COLLECTIVES:  # as Profile.collective_time
            return None
        lib = self.library if custom else "nccl"
        a, w, alg = collective_entry_choice(e, str(op), n, message_bytes, ring_bytes, link_Bps, lib)
        self.algorithm[custom] = alg
        return a, w


def _timed(profile, op: str) -> bool:
    e = None if profile is None else (getattr(profile, "collectives", None) or {}).get(op)
    return e is not None and e.get("model") in TIMED_COLLECTIVES


def _untimed_terms(work: OpWork, hw: HardwareSpec, achievable: bool, params, library: str):
    """(alpha_s, wire_s, algorithm) without a timed collectives entry: CostModel._collective's ring /
    one-shot path (spec latency per step; achievable or spec link; the profile's collective_params
    alpha and bandwidth efficiency), limited to the library: all-reduce ring = NCCL, one-shot = the
    custom all-reduce; all-gather both NCCL. tests/unit/test_kernel_library.py holds "auto" to CostModel."""
    op = work.comm_op
    group = np.asarray(work.group, float)
    msg = np.asarray(work.shape.msg_bytes, float)
    ring = np.asarray(work.net_bytes_nvlink, float) + np.asarray(work.net_bytes_rdma, float)
    multi = (op == "all_reduce") & (group > hw.domain_gpus)
    extra_a = extra_w = 0.0
    if np.any(multi):  # hierarchical all-reduce, NCCL only (CostModel._collective)
        local = np.minimum(group, float(hw.domain_gpus))
        ring = np.where(multi, ring_allreduce_bytes(local, msg), ring)
        nic = hw.rdma_Bps(achievable)
        extra_a, extra_w = inter_node_allreduce_terms(group, hw.domain_gpus, msg, nic, hw.rdma_latency_s)
        group = local
    inside = group <= hw.domain_gpus
    bw = np.where(inside & (hw.nvlink_bw_GBps > 0), max(hw.nvlink_Bps(achievable), 1.0), hw.rdma_Bps(achievable))
    lat = np.where(inside, hw.nvlink_latency_s, hw.rdma_latency_s)
    cands = ring_one_shot_candidates(op, group, msg, ring, lat)
    names = {"ring": "nccl ring", "one-shot": "custom one-shot" if op == "all_reduce" else "nccl one-shot"}
    if library == "nccl" and op == "all_reduce":
        cands = cands[:1]
    elif library == "custom":
        cands = cands[1:]
    # the choice at the link bandwidth, the price at its fitted efficiency (CostModel._collective)
    alpha, wire_bytes, alg = fastest_of([(names[k], a, np.asarray(b, float) / bw) for k, a, b in cands])
    wire_bytes = wire_bytes * bw
    if params is not None:
        alpha, bw = alpha + params[0], bw * params[1]
    alg = np.where(multi, np.char.add(alg, _INTER_NODE), alg)
    return alpha + extra_a, wire_bytes / bw + extra_w, alg


def _library_times(work: OpWork, model: ModelSpec, hw: HardwareSpec, cost_mode: CostMode, profile, library: str):
    """(time_s, alpha_s, algorithm, provenance) of a collective priced with one library (arrays)."""
    if cost_mode != CostMode.ROOFLINE and _timed(profile, work.comm_op):
        prof = _OneLibrary(profile, library)
        cost = CostModel(hw, model, cost_mode, prof).cost(work)
        alg = prof.algorithm[True]
        if False in prof.algorithm:  # a hierarchical all-reduce: NCCL on the local ranks + the NIC ring
            multi = np.asarray(work.group, float) > hw.domain_gpus
            alg = np.where(multi, np.char.add(prof.algorithm[False], _INTER_NODE), alg)
        return cost.time_s, cost.time_s - cost.network_s, alg, cost.provenance
    achievable = cost_mode != CostMode.ROOFLINE
    params = profile.collective_params(work.comm_op) if achievable and profile is not None else None
    alpha, wire, alg = _untimed_terms(work, hw, achievable, params, library)
    prov = Provenance.FITTED.value if params is not None else Provenance.ROOFLINE.value
    return alpha + wire, alpha, alg, prov


def _sized(work: OpWork, sizes) -> OpWork:
    """The collective at other message sizes (its wire bytes are linear in the message: workload.comm)."""
    scale = np.asarray(sizes, float) / float(np.ravel(work.shape.msg_bytes)[0])
    return replace(
        work,
        net_bytes_nvlink=np.asarray(work.net_bytes_nvlink, float) * scale,
        net_bytes_rdma=np.asarray(work.net_bytes_rdma, float) * scale,
        shape=replace(work.shape, msg_bytes=np.asarray(sizes, float)),
    )


def algorithm_switches(work, model, hw, cost_mode, profile, library, lo=None, hi=None, caps=()) -> list[dict]:
    """[{bytes, from, to}]: the message sizes in [lo, hi] (default SWITCH_RANGE_BYTES) where the
    algorithm pricing `library` changes; `bytes` = where `to` takes over (a grid 2^(1/32) apart, each
    change bisected in log size to 1e-6 relative), exactly a custom backend's max_bytes (`caps`)
    where that size limit is the switch (the backend runs up to and including it)."""
    lo, hi = lo or SWITCH_RANGE_BYTES[0], hi or SWITCH_RANGE_BYTES[1]
    if hi <= lo:
        return []
    sizes = np.exp2(np.arange(np.log2(lo), np.log2(hi), 1.0 / _GRID_PER_OCTAVE))
    sizes = np.append(sizes, hi)
    alg = _library_times(_sized(work, sizes), model, hw, cost_mode, profile, library)[2]
    at = np.flatnonzero(alg[1:] != alg[:-1])
    if not len(at):
        return []
    a, b, first = sizes[at], sizes[at + 1], alg[at]
    while np.any(b / a > 1.0 + 1e-6):
        mid = np.sqrt(a * b)
        same = _library_times(_sized(work, mid), model, hw, cost_mode, profile, library)[2] == first
        a, b = np.where(same, mid, a), np.where(same, b, mid)
    to = _library_times(_sized(work, b), model, hw, cost_mode, profile, library)[2]
    b = [next((c for c in caps if x <= c < y), y) for x, y in zip(a, b)]
    return [{"bytes": float(x), "from": str(f), "to": str(t)} for x, f, t in zip(b, first, to)]


def engine_switch(switches: list[dict], caps) -> dict:
    """{engine_switch_bytes, engine_switch_reason}: the size from which the engine's pick (the
    `auto` switches) is NCCL for good, after a custom all-reduce below it; the reason "max_bytes"
    where it is the custom backend's size limit (algorithm_switches puts it there exactly), else "nccl
    faster". None where the engine never runs the custom all-reduce in SWITCH_RANGE_BYTES or runs it again
    above the switch."""
    ends = [s for s in switches if s["from"].startswith("custom") and s["to"].startswith("nccl")]
    if not ends or any(s["to"].startswith("custom") for s in switches if s["bytes"] > ends[-1]["bytes"]):
        return {"engine_switch_bytes": None, "engine_switch_reason": None}
    x = ends[-1]["bytes"]
    return {"engine_switch_bytes": x, "engine_switch_reason": "max_bytes" if x in caps else "nccl faster"}


def _by_library(work, model, hw, cost_mode, profile, lib, backends, engine) -> dict:
    """{time_s, algorithm} of the collective priced with `lib` alone, or {error} where the engine would not run it."""
    why = library_error(work, hw, lib, backends, engine)
    if why:
        return {"error": why}
    tl, _, al, _ = _library_times(work, model, hw, cost_mode, profile, lib)
    return {"time_s": float(np.ravel(tl)[0]), "algorithm": str(np.ravel(al)[0])}


def price_collective(
    work: OpWork,
    model: ModelSpec,
    hw: HardwareSpec,
    cost_mode: CostMode,
    profile,
    library: str = "auto",
    *,
    backends_profile=False,
    engine: str = "sglang",
) -> dict:
    """price_kernel's dict for an all-reduce / all-gather priced with `library` ("auto": the engine's
    pick, = price_kernel; "nccl": NCCL alone; "custom": the engine's custom all-reduce alone), plus
    library, algorithm (what priced it, e.g. "custom one-shot", "nccl LL128", "nccl NVLS", "nccl ring"),
    custom_backends ({name: max_bytes}; None: unknown), engine_switch_bytes / _reason (engine_switch),
    algorithm_switches (of `library`, over switch_range_bytes) and by_library ({nccl, custom}: time_s and
    algorithm, or `error` where the engine would not run it). efficiency and roofline_time_s compare
    with the same library's roofline (ROOFLINE_LIBRARY). `backends_profile`: the profile the custom
    backends are read from (default `profile`; roofline mode reads none, the CLI passes the engine's). Raises ConfigError where the
    engine would not run `library` (library_error)."""
    require_dtypes(model, hw)
    if work.comm_op not in COLLECTIVE_OPS:
        raise ConfigError(f"--library: only for --op {' | '.join(COLLECTIVE_OPS)} (got --op {work.name})")
    backends = custom_backends(profile if backends_profile is False else backends_profile, work.comm_op)
    err = library_error(work, hw, library, backends, engine)
    if err:
        raise ConfigError(err)
    t, alpha, alg, prov = _library_times(work, model, hw, cost_mode, profile, library)
    t_roof = _library_times(work, model, hw, CostMode.ROOFLINE, None, library)[0]
    t, alpha, t_roof = (float(np.ravel(x)[0]) for x in (t, alpha, t_roof))
    by_library = {
        lib: _by_library(work, model, hw, cost_mode, profile, lib, backends, engine) for lib in ("nccl", "custom")
    }
    hi = SWITCH_RANGE_BYTES[1]
    caps = tuple((backends or {}).values())
    if library == "custom" and caps:  # the engine does not run it above its size limit
        hi = min(hi, min(caps))
    auto_sw = algorithm_switches(work, model, hw, cost_mode, profile, "auto", caps=caps)
    sw = (
        auto_sw
        if library == "auto"
        else algorithm_switches(work, model, hw, cost_mode, profile, library, hi=hi, caps=caps)
    )
    notes = [ROOFLINE_LIBRARY[(work.comm_op, library)]] if cost_mode == CostMode.ROOFLINE else []
    if notes and library == "auto" and work.comm_op == "all_reduce" and float(np.ravel(work.group)[0]) > hw.domain_gpus:
        notes.append(ROOFLINE_ACROSS_NODES)
    if backends is None and work.comm_op == "all_reduce":
        notes.append(NO_CUSTOM_LIMIT.format(hw=hw.name, engine=engine))
    return {
        "time_s": t,
        "flops": 0.0,
        "bytes": float(np.ravel(np.asarray(work.net_bytes_nvlink) + np.asarray(work.net_bytes_rdma))[0]),
        "bound": (BoundCode.LATENCY if alpha > t - alpha else BoundCode.NETWORK).bound.value,  # CostModel._comm_cost
        "efficiency": t_roof / t if t > 0 else 1.0,
        "roofline_time_s": t_roof,
        "provenance": prov,
        "library": library,
        "algorithm": str(np.ravel(alg)[0]),
        "custom_backends": backends,
        **engine_switch(auto_sw, caps),
        "switch_range_bytes": [SWITCH_RANGE_BYTES[0], hi],
        "algorithm_switches": sw,
        "by_library": by_library,
        "library_notes": notes,
    }
