"""OpWork: what one op does per GPU per layer (arrays shaped like the Grid), and the one GEMM
work formula (FLOPs and bytes incl. FP8 block scales) every caller uses."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moesim.enums import Dtype, OpKind, Stream
from moesim.workload.comm import ring_allgather_bytes, ring_allreduce_bytes
from moesim.workload.shapes import (
    BmmShape,
    CollectiveShape,
    ElementwiseShape,
    GemmShape,
    GroupedGemmShape,
    KernelShape,
    QuantShape,
    check_shape,
)


@dataclass
class OpWork:
    name: str
    kind: OpKind
    dtype: Dtype
    stage: int  # 1..5: decode five-stage position (Perplexity/DeepSeek); used by overlap schemes
    stream: Stream = Stream.COMPUTE
    flops: np.ndarray = 0.0
    bytes_weight: np.ndarray = 0.0
    bytes_act: np.ndarray = 0.0
    bytes_kv: np.ndarray = 0.0
    net_bytes_nvlink: np.ndarray = 0.0
    net_bytes_rdma: np.ndarray = 0.0
    messages: np.ndarray = 0.0
    group: np.ndarray = 1.0  # ranks taking part in a collective / EP size for all-to-all
    comm_op: str = ""  # dispatch | combine | all_reduce | all_gather | kv_transfer
    shape: KernelShape = field(default_factory=ElementwiseShape)  # kernel geometry (moesim.workload.shapes)
    present: np.ndarray = 1.0  # 0 where the op does not exist for a config (e.g. tp == 1 all-reduce)
    sm_share: float = 0.0  # SMs a comm kernel holds while in flight (fraction of the GPU)
    tags: frozenset = frozenset()  # moesim.enums.Tag: what the schedule and the imbalance read

    def __post_init__(self):
        check_shape(self.kind, self.shape)

    @property
    def bytes_total(self):
        return np.asarray(self.bytes_weight) + np.asarray(self.bytes_act) + np.asarray(self.bytes_kv)


def scale_bytes(dtype_bytes: float, block: int, elements_per_scale: float) -> float:
    """Bytes of FP8 block scales per tensor element: one fp32 scale per `elements_per_scale`
    elements of a sub-16-bit tensor with block scaling (`block` > 0), else 0 (DeepSeek-V3 report
    sec. 3.3: 128x128 weight blocks -> elements_per_scale = 128**2; 1x128 activation tiles -> 128)."""
    return 4.0 / elements_per_scale if (dtype_bytes < 2 and block) else 0.0


def weight_elem_bytes(w_bytes: float, block: int) -> float:
    """Bytes per weight incl. its share of the fp32 scale of its block x block weight block."""
    return w_bytes + scale_bytes(w_bytes, block, float(block) * block)


def act_elem_bytes(a_bytes: float, block: int) -> float:
    """Bytes per activation incl. its share of the fp32 scale of its 1 x block tile."""
    return a_bytes + scale_bytes(a_bytes, block, float(block))


def matmul_work(rows, n, k, *, weights=1.0, w_bytes: float, a_bytes: float, out_bytes: float = 2.0, block: int = 128):
    """(flops, weight_bytes, input_act_bytes, output_bytes) of `rows` rows through [k, n] weights.

    A GEMM [m, k] x [k, n] is rows = m, weights = 1 (Perplexity seed 004: FLOP = 2mkn; bytes =
    mk + nk + mn, by dtype); a grouped GEMM is rows = all rows of all groups, weights = the weight
    matrices read (groups). FP8 block scaling counted in bytes: one fp32 scale per block x block
    weight block and per 1 x block activation tile (DeepSeek-V3 report sec. 3.3); block = 0 counts
    no scales (DeepGEMM README's byte convention, used by the efficiency fit).
    """
    rows = np.asarray(rows, float)
    n = np.asarray(n, float)
    k = np.asarray(k, float)
    w_elem = weight_elem_bytes(w_bytes, block)
    a_elem = act_elem_bytes(a_bytes, block)
    flops = 2.0 * rows * n * k
    b_weight = np.asarray(weights, float) * n * k * w_elem
    return flops, b_weight, rows * k * a_elem, rows * n * out_bytes


@dataclass(frozen=True)
class Operands:
    """Element sizes of a matmul's operands and the dtype its kernel runs at (matmul_work's byte
    convention)."""

    w_bytes: float  # bytes per weight element
    a_bytes: float  # bytes per input activation element
    dtype: Dtype = Dtype.FP8  # the kernel's compute dtype (its peak and profile variant)
    out_bytes: float = 2.0  # bytes per output element
    block: int = 128  # weight-scale block (0: no block scales counted)

    def work(self, rows, n, k, weights=1.0):
        """matmul_work of `rows` rows through `weights` [k, n] matrices with these operands."""
        kw = dict(w_bytes=self.w_bytes, a_bytes=self.a_bytes, out_bytes=self.out_bytes, block=self.block)
        return matmul_work(rows, n, k, weights=weights, **kw)


def _matmul_op(name, kind, stage, rows, operands: Operands, shape, *, weights=1.0, present=1.0, tags=frozenset()):
    """The OpWork of `rows` rows through `weights` [shape.k, shape.n] matrices (operands.work)."""
    rows = np.asarray(rows, float)
    flops, b_w, b_in, b_out = operands.work(rows, shape.n, shape.k, weights)
    return OpWork(
        name,
        kind,
        Dtype(operands.dtype),
        stage,
        flops=flops,
        bytes_weight=b_w * np.ones_like(rows),
        bytes_act=b_in + b_out,
        shape=shape,
        present=present,
        tags=frozenset(tags),
    )


def linear_kw(precision) -> Operands:
    """The Operands of a model's linear projection: its weight dtype (the kernel and peak it runs
    at: BF16 models run BF16 GEMMs), weight and activation bytes and the weight-scale block."""
    return Operands(
        w_bytes=precision.weight_dtype.bytes,
        a_bytes=precision.activation_dtype.bytes,
        dtype=precision.weight_dtype,
        block=precision.weight_block,
    )


def gemm(name, m, n, k, operands: Operands, *, stage=1, present=1.0, tags=frozenset()) -> OpWork:
    """One [m, k] x [k, n] GEMM (work: matmul_work)."""
    m = np.asarray(m, float)
    ones = np.ones_like(m)
    shape = GemmShape(m=m, n=n * ones, k=k * ones)
    return _matmul_op(name, OpKind.GEMM, stage, m, operands, shape, present=present, tags=tags)


def bmm(name, t, h, n, k, operands: Operands, *, stage) -> OpWork:
    """Per-head batched matmul (h heads, [t, k] x [k, n] each; the MLA absorb form): every head
    reads its own weights (work: matmul_work over t x h rows, h weight matrices)."""
    ones = np.ones_like(np.asarray(t, float))
    shape = BmmShape(m=t, n=n * ones, k=k * ones, groups=h)
    return _matmul_op(name, OpKind.BMM, stage, t * h, operands, shape, weights=h)


def grouped_gemm(name, rows, n, k, operands: Operands, *, groups, active, layout: str, stage=4, tags=frozenset()):
    """Grouped GEMM over `groups` weight matrices [k, n] (DeepGEMM masked/contiguous layouts):
    `rows` rows in all, `active` matrices read (groups that receive >= 1 row); operands' output
    bytes (BF16: 2)."""
    rows = np.asarray(rows, float)
    groups = np.asarray(groups, float)
    ones = np.ones_like(rows)
    # active: the kernel reads only these groups' weights (moesim.perf.profile.work._weights)
    shape = GroupedGemmShape(
        m=rows / np.maximum(groups, 1e-9),
        n=n * ones,
        k=k * ones,
        groups=groups * ones,
        active=np.asarray(active, float) * ones,
        layout=layout,
    )
    kw = dict(weights=active, tags=tags)
    return _matmul_op(name, OpKind.GROUPED_GEMM, stage, rows, operands, shape, **kw)


def elementwise(name, nbytes, *, stage=1, flops=0.0, present=1.0, tags=frozenset(), shape=None) -> OpWork:
    """A BF16 streaming op of `nbytes` activation bytes (shape: ElementwiseShape unless given)."""
    return OpWork(
        name=name,
        kind=OpKind.ELEMENTWISE,
        dtype=Dtype.BF16,
        stage=stage,
        flops=flops,
        bytes_act=np.asarray(nbytes, float),
        present=present,
        tags=frozenset(tags),
        shape=ElementwiseShape() if shape is None else shape,
    )


# FP8 activation quant pass (per-token-group 1 x 128 tiles, DeepSeek-V3 report sec. 3.3; SGLang's
# per_token_group_quant_fp8 before a block-FP8 GEMM whose input is BF16): reads BF16, writes FP8
# plus one fp32 scale per 128 elements. Priced by the `quant` kernel family (stream_v1).
QUANT_BYTES_PER_ELEM = 2.0 + act_elem_bytes(1.0, 128)  # the fit's (aiconfigurator scale_matrix rows)


def quant_pass(name, m, k, *, a_bytes: float, block: int, stage: int, present=1.0, tags=frozenset()) -> OpWork:
    """The unfused pre-GEMM FP8 activation quant of an [m, k] BF16 input; absent (present = 0)
    unless activations are sub-16-bit with block scaling."""
    m = np.asarray(m, float)
    on = float(a_bytes < 2 and bool(block))
    shape = QuantShape(m=m, k=k * np.ones_like(m))
    present = np.asarray(present, float) * on
    return elementwise(name, m * k * QUANT_BYTES_PER_ELEM, stage=stage, present=present, tags=tags, shape=shape)


def permute_bytes(pairs, hidden, a_elem: float):
    """Bytes of the contiguous-layout MoE permute + unpermute per rank (SGLang DeepEP normal path,
    ep_scatter / ep_gather): every received token-expert row is read and written once in the
    dispatched dtype (FP8 + scales: a_elem bytes per element) into the expert-aligned buffer, and
    its BF16 down-GEMM output is read and written once on the way back to token order.
    The masked (DeepEP LL) and fused (Triton) layouts index rows in place: no permute."""
    rows = np.asarray(pairs, float) * np.asarray(hidden, float)
    return rows * (2.0 * a_elem + 2.0 * 2.0)


def _collective(name, comm_op: str, msg, ring_bytes, group, stage, present=1.0) -> OpWork:
    """A BF16 collective over `group` ranks (absent where group = 1): message and ring bytes per rank."""
    group = np.asarray(group, float)
    return OpWork(
        name=name,
        kind=OpKind.COLLECTIVE,
        dtype=Dtype.BF16,
        stage=stage,
        stream=Stream.COMM,
        net_bytes_nvlink=ring_bytes,
        group=group,
        comm_op=comm_op,
        shape=CollectiveShape(msg_bytes=msg, gpus=group),
        present=(group > 1).astype(float) * present,
    )


def allgather(name, total_bytes, group, stage, present=1.0) -> OpWork:
    """Ring all-gather of `total_bytes` (the gathered output) over `group` ranks. A reduce-scatter of
    the same output is priced by it too: NCCL runs both as n - 1 ring steps moving (n-1)/n of the
    message per rank (ring.cc; NCCL's tuning model prices them alike)."""
    return _collective(name, "all_gather", total_bytes, ring_allgather_bytes(group, total_bytes), group, stage, present)


def allreduce(name, tokens, hidden, group, stage, present=1.0) -> OpWork:
    """Ring all-reduce of `tokens` BF16 hidden states over `group` ranks (absent when group = 1)."""
    msg = tokens * hidden * 2.0
    return _collective(name, "all_reduce", msg, ring_allreduce_bytes(group, msg), group, stage, present)
