"""Work columns of measured fused-MoE rows: what the collector's workload computed on the timed rank,
turned into the shape keys moesim.perf.profile.work prices (moe_rows, zero_row_bytes, waves_parts),
so that the pricing layer never sees how a measurement tool routed its tokens:

    pairs        token-expert rows the rank computes
    active       local experts with >= 1 row (their weights are read)
    tile_pad     MMA rows per computed row at the kernel's BLOCK_M (NaN: even loads, an exact ceil)
    zero_rows    rows of remote picks the kernel runs and writes as zeros
    block_m_min  the smallest BLOCK_M of a layout that fixes it

The routings (per backend: moesim/calibration/collector_facts.yaml, moesim.calibration.collectors):
"balanced" (aiconfigurator's balanced / uniform rows: an even spread over min(E_local, pairs) local
experts, whose times step with min(E_local, pairs), not with the random expectation), "expert_map"
(balanced local experts plus the zero-written rows of every remote pick) and "packed" (even counts
packed without per-expert alignment). Row by row inside a balanced / expert_map table: a
group-limited router's rank-0 loads (shape keys n_group > 1, topk_group: moesim.calibration.
grouped_router) and the rank-0 clamped segment (shape key rank0 > 0: moesim.calibration.rank0).
"""

from __future__ import annotations

import numpy as np

from moesim.calibration import grouped_router as GR
from moesim.calibration.rank0 import rank0_clamped_rows, rank0_tile_padding
from moesim.perf import efficiency as E
from moesim.perf.profile.work import CONTIG_BLOCK_M
from moesim.perf.triton_moe import TRITON_FUSED_MOE, fused_moe_tiles

BALANCED_ROUTING, EXPERT_MAP_ROUTING, PACKED_ROUTING = "balanced", "expert_map", "packed"
ROUTINGS = (BALANCED_ROUTING, EXPERT_MAP_ROUTING, PACKED_ROUTING)
DESCRIPTORS = ("n_group", "topk_group", "rank0")  # the collector's description, replaced by the columns


def _opt(shape: dict, key: str, default: float = 1.0):
    v = shape.get(key)
    return default if v is None else v


def packed_touched(pairs, local):
    """Experts whose weights a contiguous grouped GEMM reads when the local experts' even counts are
    packed back to back WITHOUT the per-expert 128-row alignment DeepEP's dispatch gives
    (aiconfigurator collector/sglang/collect_wideep_deepep_moe.py passes num_recv = [T topk / E] per
    local expert; SGLang's ep_scatter (ep_moe/kernels.py _fwd_kernel_ep_scatter_1) starts each expert
    at the plain cumsum): every M block of CONTIG_BLOCK_M rows runs the expert of its first row
    (DeepGEMM's grouped_layout lookup), so min(local, ceil(pairs / BLOCK_M)) experts are touched."""
    blocks = np.ceil(np.asarray(pairs, float) / CONTIG_BLOCK_M - 1e-9)
    return np.minimum(np.asarray(local, float), np.maximum(blocks, 1.0))


def _rank0(shape: dict):
    """Rows of an expert_map table whose collector ran the rank-0 clamped workload instead (shape key
    rank0 > 0: a documented table segment, collectors.RANK0_SEGMENTS)."""
    return np.asarray(_opt(shape, "rank0", 0.0), float) > 0.0


def _grouped(shape: dict):
    """Rows of a balanced table routed by a group-limited router (n_group > 1; fit.moe_tables sets it)."""
    return np.asarray(_opt(shape, "n_group"), float) > 1.0


def _grouped_fill(shape: dict, base, per_row):
    """`base` with its group-routed rows replaced by per_row(their rank-0 loads, row mask)."""
    keys = ("tokens", "experts", "topk", "ep", "n_group", "topk_group")
    *cols, out = np.broadcast_arrays(*(np.asarray(_opt(shape, c), float) for c in keys), np.asarray(base, float))
    out = out.copy()
    mask = np.broadcast_to(_grouped(shape), out.shape)
    out[mask] = per_row(GR.grouped_loads(*(c[mask] for c in cols)), mask)
    return out


def _rows(shape: dict, routing: str):
    """(computed pairs, touched experts) of the routing on the timed rank (module docstring)."""
    ep = np.asarray(_opt(shape, "ep"), float)
    tokens = np.asarray(shape["tokens"], float)
    experts, topk = np.asarray(shape["experts"], float), np.asarray(shape["topk"], float)
    local = experts / ep
    pairs = tokens * topk / ep
    if routing == PACKED_ROUTING:
        return pairs, np.maximum(packed_touched(pairs, local), 1e-9)
    touched = np.minimum(local, np.maximum(pairs, 1.0))
    if _grouped(shape).any():  # rows routed by a group-limited router (grouped_router)
        pairs = _grouped_fill(shape, pairs, lambda loads, _: GR.grouped_rows(loads)[0])
        touched = _grouped_fill(shape, touched, lambda loads, _: GR.grouped_rows(loads)[1])
    if _rank0(shape).any():  # rows of a table segment timed by the rank-0 clamped collector
        computed, _, hot_touched = rank0_clamped_rows(tokens, experts, topk, ep)
        pairs, touched = np.where(_rank0(shape), computed, pairs), np.where(_rank0(shape), hot_touched, touched)
    return pairs, np.maximum(touched, 1e-9)


def _tile_pad(shape: dict, routing: str, mg, rank0_bm):
    """MMA rows per computed row: packed blocks (ceil(pairs / BLOCK_M) tiles in all), else NaN (even
    loads: an exact ceil per expert) but on group-routed rows whose loads pad (at DeepGEMM's BLOCK_M)
    and rank-0 rows (the cold experts' and the hot expert 0's tiles at `rank0_bm`(mg), the kernel's
    BLOCK_M; their tile total is exact even where it needs no padding)."""
    if routing == PACKED_ROUTING:
        pairs = np.maximum(mg * _rows(shape, routing)[1], 1e-9)
        return np.ceil(pairs / CONTIG_BLOCK_M - 1e-9) * CONTIG_BLOCK_M / pairs
    if not (_grouped(shape).any() or _rank0(shape).any()):
        return np.nan
    bm = np.broadcast_to(E.gemm_block_m(mg), np.shape(mg))
    pad = np.ones(np.shape(mg))
    if _grouped(shape).any():
        pad = _grouped_fill(shape, pad, lambda loads, m: GR.grouped_tile_padding(loads, bm[m]))
    pad = np.where(pad == 1.0, np.nan, pad)
    args = (shape["tokens"], shape["experts"], shape["topk"], _opt(shape, "ep"))
    return np.where(_rank0(shape), rank0_tile_padding(*args, rank0_bm(bm)), pad)


def work_columns(shape: dict, routing: str, dtype: str, tiling: str | None = None) -> dict:
    """`shape` (tokens, hidden, n, experts, topk, ep, tp; the optional descriptors n_group /
    topk_group, rank0) of measured rows of one backend that ran `routing`, with its work columns
    (module docstring) in place of the descriptors. dtype and tiling (the entry's model key): the
    kernel's BLOCK_M for the rank-0 rows (the Triton fused_moe_kernel's own, moesim.perf.triton_moe)."""
    if routing not in ROUTINGS:
        raise ValueError(f"moe work columns: routing {routing!r} is not one of {', '.join(ROUTINGS)}")
    pairs, touched = _rows(shape, routing)
    mg = pairs / touched
    if tiling == TRITON_FUSED_MOE:
        args = (shape["tokens"], shape["experts"], _opt(shape, "ep"), shape["n"], _opt(shape, "tp"))
        triton_bm = fused_moe_tiles(*args, dtype)[0]
        pad = _tile_pad(shape, routing, mg, lambda _: triton_bm)
    else:
        pad = _tile_pad(shape, routing, mg, lambda bm: bm)
    out = {k: v for k, v in shape.items() if k not in DESCRIPTORS}
    out.update(pairs=pairs, active=touched, tile_pad=pad)
    if routing == EXPERT_MAP_ROUTING:  # every remote pick runs and writes zeros; the rank-0 workload holds none
        remote = np.asarray(shape["tokens"], float) * np.asarray(shape["topk"], float) - pairs
        out["zero_rows"] = np.maximum(np.where(_rank0(shape), 0.0, remote), 0.0)
    if routing == PACKED_ROUTING:  # DeepGEMM's m-grouped contiguous layout: BLOCK_M fixed at its alignment
        out["block_m_min"] = CONTIG_BLOCK_M
    return out
