"""Typed kernel shapes: one frozen dataclass per op kind, the geometry the cost model and the
calibrated kernel models read off an op (OpWork.shape). A misspelt field is a TypeError when the
shape is built; reading is attribute access. Fields are numbers or numpy arrays that broadcast
with the grid (one value per configuration); counts are per GPU unless said.

`as_kwargs()` gives the set fields (not None) as the keyword dict the profile's kernel calls take
(moesim.perf.profile.reader.Profile.kernel_efficiency / kernel_time / measured_time): the keys are
the field names, so they are the profile's shape-column names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.enums import OpKind

Num = float | np.ndarray  # a number or an array shaped like the grid


@dataclass(frozen=True, eq=False, kw_only=True)
class KernelShape:
    """Base of the kernel shapes. `kernel_family`: the profile family an op of a generic kind is
    priced by (a field on the shapes that set one; None: the family of the op's kind)."""

    kernel_family = None  # a class default, not a field: only QuantShape and FusedMoeShape set one

    def as_kwargs(self) -> dict:
        """{field: value} of the set fields (None left out), in field order (the instance dict holds
        exactly the fields: no slots, nothing cached; read directly, as the cost model calls this
        for every priced kernel)."""
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass(frozen=True, eq=False, kw_only=True)
class ElementwiseShape(KernelShape):
    """A streaming elementwise op (norm, activation, permute): no geometry; priced on its bytes."""


@dataclass(frozen=True, eq=False, kw_only=True)
class QuantShape(KernelShape):
    """The FP8 activation quant pass of an [m, k] BF16 input (per-token-group 1 x 128 tiles)."""

    m: Num  # rows (tokens)
    k: Num  # elements per row
    kernel_family: str = "quant"


@dataclass(frozen=True, eq=False, kw_only=True)
class GemmShape(KernelShape):
    """One [m, k] x [k, n] GEMM."""

    m: Num  # rows (tokens)
    n: Num  # output columns
    k: Num  # reduction depth (input columns)


@dataclass(frozen=True, eq=False, kw_only=True)
class BmmShape(GemmShape):
    """A batched matmul: `groups` independent [m, k] x [k, n] products (the MLA absorb BMMs: one per
    head); m counts the rows of all groups."""

    groups: Num  # matrices (heads)


@dataclass(frozen=True, eq=False, kw_only=True)
class GroupedGemmShape(KernelShape):
    """A grouped GEMM over `groups` weight matrices [k, n] (DeepGEMM masked / contiguous layouts).
    The table keys tokens / ep / experts / topk are optional: set, they name the fused MoE call the
    op belongs to in the measured table's terms (moesim.perf.fused_moe.fused_shape)."""

    m: Num  # rows per group (mean)
    n: Num  # output columns
    k: Num  # reduction depth
    groups: Num  # weight matrices (local expert slots)
    active: Num  # matrices that receive >= 1 row (the kernel reads only their weights)
    layout: str  # "masked" | "contiguous"
    tokens: Num | None = None  # tokens entering the MoE layer on the rank
    ep: Num | None = None  # EP ranks
    experts: Num | None = None  # expert slots of the whole EP group
    topk: Num | None = None  # experts per token


@dataclass(frozen=True, eq=False, kw_only=True)
class FusedMoeShape(KernelShape):
    """One fused MoE call (permute, gate/up, activation, down, un-permute) in the measured table's
    terms (aiconfigurator's moe rows; moesim.perf.fused_moe)."""

    tokens: Num  # tokens entering the layer on the rank
    hidden: Num  # model width (the gate/up GEMM's k)
    n: Num  # expert intermediate width (unsharded)
    experts: Num  # expert slots of the whole EP group
    topk: Num  # experts per token
    ep: Num  # EP ranks
    tp: Num  # expert TP ranks
    active: Num  # local slots that receive >= 1 token
    layout: str = "fused"
    kernel_family: str = "moe"


@dataclass(frozen=True, eq=False, kw_only=True)
class AttentionShape(KernelShape):
    """The attention core's geometry (moesim.perf.attention_eff): MLA leaves groups and k unset."""

    batch: Num  # requests (decode) or sequences (prefill)
    q_len: Num  # query tokens per request
    context: Num  # KV tokens per request
    heads: Num  # query heads per GPU
    prefill: bool | np.ndarray  # causal prefill (MHA form) vs decode
    kv_dtype: str  # KV cache dtype (moesim.enums.Dtype value)
    groups: Num | None = None  # KV heads per GPU (MHA / GQA)
    k: Num | None = None  # head dim (MHA / GQA)


@dataclass(frozen=True, eq=False, kw_only=True)
class AllToAllShape(KernelShape):
    """An EP dispatch or combine (moesim.workload.comm; the profile's deepep_v2 terms)."""

    ep: Num  # EP ranks
    tokens: Num  # tokens sent by one rank (per expert-TP shard)
    mode: str  # moesim.enums.CommMode value
    experts: Num  # expert slots of the EP group
    moe_tp: Num  # expert-TP shards each token is sent to
    msg_bytes: Num  # bytes of one token's message
    sms: Num | None = None  # SMs the kernels hold while in flight (None: none held)


@dataclass(frozen=True, eq=False, kw_only=True)
class CollectiveShape(KernelShape):
    """An all-reduce / all-gather (reduce-scatter) over `gpus` ranks."""

    msg_bytes: Num  # the message (all-reduce: per rank; all-gather: the gathered output)
    gpus: Num  # ranks taking part


# The shape types an op of each kind may carry (OpWork checks it; kinds not listed take any shape).
SHAPES_OF_KIND = {
    OpKind.GEMM: (GemmShape,),
    OpKind.BMM: (BmmShape,),
    OpKind.GROUPED_GEMM: (GroupedGemmShape, FusedMoeShape),
    OpKind.ATTENTION: (AttentionShape,),
    OpKind.ELEMENTWISE: (ElementwiseShape, QuantShape),
    OpKind.ALL_TO_ALL: (AllToAllShape,),
    OpKind.COLLECTIVE: (CollectiveShape,),
}


def check_shape(kind: OpKind, shape) -> None:
    """TypeError unless `shape` is a KernelShape an op of `kind` may carry (SHAPES_OF_KIND)."""
    allowed = SHAPES_OF_KIND.get(kind, (KernelShape,))
    if not isinstance(shape, allowed):
        names = ", ".join(t.__name__ for t in allowed)
        raise TypeError(
            f"OpWork.shape of a {kind.value} op: {names} (moesim.workload.shapes); got {type(shape).__name__}"
        )
