"""Single-kernel work for `moesim kernel`: one OpWork from shape flags, built by the same
constructors the workload uses (one formula per kernel), so a kernel priced alone costs what it
costs inside `estimate`."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from moesim.enums import CommMode, Dtype, OpKind, Stream
from moesim.errors import ConfigError
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import AttentionKind, ModelSpec
from moesim.workload import comm as C
from moesim.workload.attention import mla_core_op
from moesim.workload.ffn import all_to_all
from moesim.workload.ops import OpWork, gemm, grouped_gemm, linear_kw
from moesim.workload.shapes import CollectiveShape

# Largest accepted shape per flag (larger overflows float64 FLOP counts or is no real kernel).
KERNEL_MAX = {"ep": 1e6, "gpus": 1e6, "groups": 1e6, "heads": 1e6, "q_len": 1e6, "context": 1e8, "bytes": 1e15}
OPS = ("gemm", "grouped_gemm", "mla_decode", "mla_prefill", "dispatch", "combine", "all_reduce", "all_gather")
INTEGER_FLAGS = ("groups", "ep", "gpus")


def check_size(name: str, v) -> None:
    """A size flag: finite, > 0, at most KERNEL_MAX (counts: whole numbers)."""
    flag = f"--{name.replace('_', '-')}"
    hi = KERNEL_MAX.get(name, 1e9)
    integer = name in INTEGER_FLAGS
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = float("nan")
    if not np.isfinite(x) or x <= 0 or x > hi or (integer and x != round(x)):
        kind = "an integer" if integer else "a finite number"
        raise ConfigError(f"{flag}: {kind} in {'[1' if integer else '(0'}, {hi:g}] required, got {v}")


def _need(op: str, **kw) -> None:
    for name, v in kw.items():
        if v is None:
            raise ConfigError(f"--{name.replace('_', '-')}: required for --op {op}")
        check_size(name, v)


def _one(x) -> np.ndarray:
    return np.asarray([float(x)])


def _matmul(model: ModelSpec, op: str, m, n, k, groups, layout) -> OpWork:
    operands = linear_kw(model.precision)
    if op == "gemm":
        _need(op, m=m, n=n, k=k)
        return gemm("gemm", _one(m), n, k, operands)
    _need(op, m=m, n=n, k=k, groups=groups)
    if layout not in ("masked", "contiguous"):
        raise ConfigError(f"--layout: {layout!r}; allowed: masked, contiguous")
    g = _one(groups)
    return grouped_gemm("grouped_gemm", _one(m) * groups, n, k, operands, groups=g, active=g, layout=layout)


def _mla(model: ModelSpec, op: str, batch, q_len, context, heads) -> OpWork:
    a = model.attention
    _need(op, batch=batch, context=context)
    if a.kind != AttentionKind.MLA:
        raise ConfigError(
            f"--op {op}: {model.name} has {a.kind.value} attention; allowed for MLA models only (e.g. deepseek-v3)"
        )
    h, b, c = _one(heads or a.num_heads), _one(batch), _one(context)
    if op == "mla_decode":
        return mla_core_op(model, t=b * q_len, b_req=b, q_len=_one(q_len), context=c, heads=h, prefill=False, name=op)
    return mla_core_op(model, t=b * c, b_req=b, q_len=c, context=c, heads=h, prefill=True, name=op)


def _all_to_all(model: ModelSpec, hw: HardwareSpec, op: str, ep, tokens, mode) -> OpWork:
    _need(op, ep=ep, tokens=tokens)
    mode = CommMode.parse(mode, "mode")
    if model.moe is None:
        raise ConfigError(f"--op {op}: {model.name} has no experts")
    e = _one(ep)
    slots = model.moe.num_experts
    return all_to_all(model, hw, op, mode, tokens=_one(tokens), ep=e, slots=slots)


def _collective(hw: HardwareSpec, op: str, gpus, nbytes) -> OpWork:
    _need(op, gpus=gpus, bytes=nbytes)
    g = _one(gpus)
    sent = C.ring_allreduce_bytes(g, nbytes) if op == "all_reduce" else C.ring_allgather_bytes(g, nbytes)
    inside = g <= hw.domain_gpus
    return OpWork(
        op,
        OpKind.COLLECTIVE,
        Dtype.BF16,
        2,
        stream=Stream.COMM,
        net_bytes_nvlink=np.where(inside, sent, 0),
        net_bytes_rdma=np.where(inside, 0, sent),
        group=g,
        comm_op=op,
        shape=CollectiveShape(msg_bytes=_one(nbytes), gpus=g),
    )


@dataclass(frozen=True, kw_only=True)
class KernelFlags:
    """The shape flags of `moesim kernel` (None: not given); which ones an op needs: kernel_op."""

    m: float | None = None  # GEMM rows (grouped: rows per group)
    n: float | None = None  # output columns
    k: float | None = None  # reduction depth
    groups: float | None = 1  # grouped GEMM weight matrices
    layout: str = "masked"  # grouped GEMM layout: masked | contiguous
    batch: float | None = None  # attention requests
    q_len: float | None = 1  # query tokens per request
    context: float | None = None  # KV tokens per request
    heads: float | None = None  # query heads (None: the model's)
    ep: float | None = None  # EP ranks
    tokens: float | None = None  # tokens sent by one rank (dispatch / combine)
    mode: str = "deepep-ll"  # all-to-all comm mode
    gpus: float | None = None  # collective ranks
    nbytes: float | None = None  # collective message bytes


def kernel_op(model: ModelSpec, hw: HardwareSpec, op: str, **flags) -> OpWork:
    """The OpWork of one kernel from shape flags (KernelFlags; arrays of one element). Ops: gemm (m, n,
    k), grouped_gemm (m, n, k, groups, layout), mla_decode / mla_prefill (batch, q_len, context,
    heads), dispatch / combine (ep, tokens, mode), all_reduce / all_gather (gpus, nbytes)."""
    known = {f.name for f in fields(KernelFlags)}
    if set(flags) - known:
        bad = ", ".join(sorted(set(flags) - known))
        raise ConfigError(f"kernel_op: unknown shape flag(s) {bad}; allowed: {', '.join(sorted(known))}")
    f = KernelFlags(**flags)
    for name in ("q_len", "heads", "groups"):
        if getattr(f, name) is not None:
            check_size(name, getattr(f, name))
    if op in ("gemm", "grouped_gemm"):
        return _matmul(model, op, f.m, f.n, f.k, f.groups, f.layout)
    if op in ("mla_decode", "mla_prefill"):
        return _mla(model, op, f.batch, f.q_len, f.context, f.heads)
    if op in ("dispatch", "combine"):
        return _all_to_all(model, hw, op, f.ep, f.tokens, f.mode)
    if op in ("all_reduce", "all_gather"):
        return _collective(hw, op, f.gpus, f.nbytes)
    raise ConfigError(f"--op: {op!r}; allowed: {', '.join(OPS)}")
