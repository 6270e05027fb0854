"""OpWork: what one op does per GPU per layer (arrays shaped like the Grid)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moesim.enums import Dtype, OpKind, Stream


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
    shape: dict = field(default_factory=dict)  # kernel shape for efficiency curves
    present: np.ndarray = 1.0  # 0 where the op does not exist for a config (e.g. tp == 1 all-reduce)
    sm_share: float = 0.0  # SMs a comm kernel holds while in flight (fraction of the GPU)

    @property
    def bytes_total(self):
        return np.asarray(self.bytes_weight) + np.asarray(self.bytes_act) + np.asarray(self.bytes_kv)


def gemm(
    name,
    m,
    n,
    k,
    *,
    w_bytes: float,
    a_bytes: float,
    out_bytes: float = 2.0,
    dtype=Dtype.FP8,
    stage=1,
    block: int = 128,
    count=1.0,
    present=1.0,
) -> OpWork:
    """[m, k] x [k, n] GEMM (Perplexity seed 004: FLOP = 2mkn; bytes = mk + nk + mn, by dtype).

    FP8 block scaling counted in bytes: one fp32 scale per 128x128 weight block and per 1x128
    activation tile (DeepSeek-V3 report sec. 3.3).
    """
    m = np.asarray(m, float)
    n = np.asarray(n, float)
    k = np.asarray(k, float)
    wscale = 4.0 / (block * block) if (w_bytes < 2 and block) else 0.0
    ascale = 4.0 / block if (a_bytes < 2 and block) else 0.0
    return OpWork(
        name=name,
        kind=OpKind.GEMM,
        dtype=Dtype(dtype),
        stage=stage,
        flops=count * 2.0 * m * n * k,
        bytes_weight=count * n * k * (w_bytes + wscale) * np.ones_like(m),
        bytes_act=count * (m * k * (a_bytes + ascale) + m * n * out_bytes),
        shape={"m": m, "n": n * np.ones_like(m), "k": k * np.ones_like(m)},
        present=present,
    )


def elementwise(name, nbytes, *, stage=1, flops=0.0, present=1.0) -> OpWork:
    return OpWork(
        name=name,
        kind=OpKind.ELEMENTWISE,
        dtype=Dtype.BF16,
        stage=stage,
        flops=flops,
        bytes_act=np.asarray(nbytes, float),
        present=present,
    )
