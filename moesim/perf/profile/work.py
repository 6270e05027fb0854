"""Work (FLOPs, bytes read, bytes written) and SM fill (CTAs per SM) of a profiled kernel family
for a shape: the one mapping from a profile's shape keywords to moesim.perf.efficiency's work
functions, used by the kernel models (moesim.perf.models) and the fit (moesim.calibration.fit)."""

from __future__ import annotations

import numpy as np

from moesim.perf import efficiency as E
from moesim.perf.deepgemm_layout import sm90_fp8_layout
from moesim.perf.deepgemm_layout_sm100 import sm100_fp8_layout
from moesim.perf.profile.variants import base_dtype
from moesim.perf.triton_moe import TRITON_FUSED_MOE, fused_moe_ctas, fused_moe_tiles
from moesim.workload.ffn import expected_active_slots
from moesim.workload.ops import QUANT_BYTES_PER_ELEM

GEMM_FAMILIES = ("gemm", "grouped_gemm", "bmm")
DEEPGEMM_SM90 = "deepgemm_sm90"  # an entry's `tiling`: moesim.perf.deepgemm_layout (else efficiency.gemm_tiling)
DEEPGEMM_SM100 = "deepgemm_sm100"  # moesim.perf.deepgemm_layout_sm100 (Blackwell)
DEEPGEMM_LAYOUTS = {DEEPGEMM_SM90: sm90_fp8_layout, DEEPGEMM_SM100: sm100_fp8_layout}
DEEPGEMM_TILING = {9: DEEPGEMM_SM90, 10: DEEPGEMM_SM100}  # SM generation -> DeepGEMM's layout heuristic
# SiLU(gate) * up of the fused / grouped MoE: reads 2 x width BF16, writes width (FP8 or BF16)
ACT_READ_BYTES = 4.0
# DeepGEMM's m-grouped contiguous GEMM: BLOCK_M = the contiguous layout's M alignment, 128 on SM90
# (deep_gemm get_mk_alignment_for_contiguous_layout); an M block runs the expert of its first row
CONTIG_BLOCK_M = 128.0
# per-backend byte keys of a moe entry's passes beyond its GEMMs (fit.moe_tables sets them; params carry them)
PASS_KEYS = ("token_bytes", "pair_bytes", "act_bytes", "expanded_act")
ACT_SLOTS = "act_slots"  # a waves part priced per iteration of the expanded-space activation (expanded_act_iters)
# quant ops other than the quant pass itself (aiconfigurator computescale_perf, collector/<engine>/
# collect_computescale.py). compute_scale (TRT-LLM: dynamic per-tensor minus static quant time): the
# separate amax-reduction kernel, which reads the BF16 input once and writes nothing of size.
# dynamic_per_token (vLLM's dynamic_per_token_scaled_fp8_quant, csrc/quantization/w8a8/fp8/common.cu;
# rows undifferenced at import, importers.aiconfigurator_tables.MINUS): one CTA per token reads its
# BF16 row (the amax pass; the quant pass re-reads it from cache), writes FP8 and one fp32 scale per row
QUANT_OP_BYTES_PER_ELEM = {"compute_scale": 2.0, "dynamic_per_token": 3.0}
QUANT_OP_BYTES_PER_ROW = {"dynamic_per_token": 4.0}


def _need(family: str, shape: dict, cols) -> None:
    missing = [c for c in cols if shape.get(c) is None]
    if missing:
        raise TypeError(f"kernel_efficiency({family!r}) needs shape {', '.join(missing)}")


def _opt(shape: dict, key: str, default: float = 1.0):
    v = shape.get(key)
    return default if v is None else v


def _groups(shape: dict):
    g = shape.get("groups")
    if g is None:
        g = shape.get("batch", 1.0)
    return 1.0 if g is None else g


def _weights(shape: dict):
    """Weight matrices a GEMM reads: `active` (routed groups with >= 1 row: the workload's
    expected_active_slots, moesim.workload.ops.grouped_gemm; a masked / contiguous grouped GEMM
    runs no tile of an empty group, so never loads its weights), else every group (None)."""
    a = shape.get("active")
    return None if a is None else np.minimum(np.asarray(a, float), np.asarray(_groups(shape), float))


def family_work(family: str, dtype: str, sms, shape: dict):
    """(F, B_in, B_out, CTAs per SM) of `family` (GEMMs: m, n, k, groups (or batch; 1 by default),
    tile_pad, active; MLA decode: batch, q_len, heads, context; moe: tokens, hidden, n, experts, topk, ep,
    tp, layout and the optional work columns pairs, active, tile_pad, zero_rows, block_m_min (moe_rows,
    zero_row_bytes, waves_parts); quant: m, k, op (the quant pass by default)) in `dtype` (a lower-case name)."""
    if family in GEMM_FAMILIES:
        _need(family, shape, ("m", "n", "k"))
        g = _groups(shape)
        F, b_in, b_out = E.gemm_work(
            shape["m"], shape["n"], shape["k"], g, E.dtype_bytes(dtype), E.out_bytes_for(dtype), _weights(shape)
        )
        x = E.gemm_ctas_per_sm(shape["m"], shape["n"], g, sms, shape.get("tile_pad"))
        return F, b_in, b_out, x
    if family == "moe":
        parts, act = moe_parts(dtype, shape)
        F = sum(p[0] for p in parts)
        b_in = sum(p[1] for p in parts) + act
        b_out = sum(p[2] for p in parts)
        return F, b_in, b_out, np.ones_like(np.asarray(F, float))
    if family == "quant":
        _need(family, shape, ("m", "k"))
        op = str(shape.get("op") or "")
        per_elem, per_row = QUANT_OP_BYTES_PER_ELEM.get(op, QUANT_BYTES_PER_ELEM), QUANT_OP_BYTES_PER_ROW.get(op, 0.0)
        nb = np.asarray(shape["m"], float) * (np.asarray(shape["k"], float) * per_elem + per_row)
        return np.zeros_like(nb), nb, np.zeros_like(nb), np.ones_like(nb)
    b, s, h, c = (shape.get(k) for k in ("batch", "q_len", "heads", "context"))
    _need(family, shape, ("batch", "q_len", "heads", "context"))
    kvb = E.dtype_bytes(dtype, 2.0)
    F, b_in, b_out = E.mla_decode_work(b, s, h, c, kvb, 2.0 if kvb < 2 else kvb)  # queries/outputs >= 16 bit
    return F, b_in, b_out, E.mla_ctas_per_sm(b, s, h, c, sms)


def moe_rows(shape: dict):
    """(pairs, touched, local experts) of one rank's MoE layer: experts / ep local experts; shape key
    `pairs` (the token-expert pairs the rank computes), else tokens x topk / ep (an even share of the
    layer's picks); shape key `active` (the experts receiving >= 1 row: a priced workload's
    expected_active_slots of its own routing, or a measured row's work column), capped at the local
    experts, else random routing's E_local (1 - (1 - topk / E)^tokens) (moesim.workload.ffn.
    expected_active_slots, the workload's). Measured rows get both as work columns when they are
    prepared for the fit (moesim.calibration.fit.moe_work)."""
    _need("moe", shape, ("tokens", "hidden", "n", "experts", "topk"))
    ep = np.asarray(_opt(shape, "ep"), float)
    tokens = np.asarray(shape["tokens"], float)
    experts, topk = np.asarray(shape["experts"], float), np.asarray(shape["topk"], float)
    local = experts / ep
    pairs = tokens * topk / ep if shape.get("pairs") is None else np.asarray(shape["pairs"], float)
    if shape.get("active") is not None:  # the priced op's (moesim.perf.fused_moe) or the measured row's
        touched = np.minimum(np.asarray(shape["active"], float), local)
    else:
        touched = expected_active_slots(local, experts, topk, tokens)
    return pairs, np.maximum(touched, 1e-9), local


def moe_parts(dtype: str, shape: dict):
    """([(F, B_in, B_out, m per group, n, k, groups) of the up and down grouped GEMMs], act bytes):
    up [m, hidden] x [hidden, 2 n / tp], SiLU & mul, down [m, n / tp] x [n / tp, hidden] over the
    touched local experts; weights read once per touched expert."""
    pairs, touched, _ = moe_rows(shape)
    tp = np.asarray(_opt(shape, "tp"), float)
    inter = np.asarray(shape["n"], float) / tp
    hidden = np.asarray(shape["hidden"], float)
    ib = E.dtype_bytes(dtype, 1.0)
    mg = pairs / touched
    parts = []
    for n, k in ((2.0 * inter, hidden), (hidden, inter)):
        F, b_in, b_out = E.gemm_work(mg, n, k, touched, ib, 2.0)
        parts.append((F, b_in, b_out, mg, n, k, touched))
    act_b = np.asarray(_opt(shape, "act_bytes", ACT_READ_BYTES + ib), float)
    act = pairs * inter * act_b + zero_row_bytes(shape, inter, hidden, ib)
    act = act + pairs * hidden * np.asarray(_opt(shape, "pair_bytes", 0.0), float)
    return parts, act + token_pass_bytes(shape, hidden)


def token_pass_bytes(shape: dict, hidden):
    """Streamed bytes of the passes over EVERY token entering the layer, local picks or not
    (shape key token_bytes: bytes per token and hidden element, set per backend by the fit;
    0 by default): tokens x hidden x token_bytes."""
    per = np.asarray(_opt(shape, "token_bytes", 0.0), float)
    return np.asarray(shape["tokens"], float) * hidden * per


def zero_row_bytes(shape: dict, inter, hidden, ib):
    """Streamed bytes of the token-expert rows whose expert is not on the rank but which the kernel
    still runs (shape key zero_rows, 0 by default): EP without a dispatch, every rank gets all T
    tokens; vLLM's fused_experts with a global-to-local expert map maps remote experts to -1 in
    moe_align_block_size and the Triton kernel's blocks of expert -1 write zeros (fused_moe.py
    `write_zeros_to_output`): each such row still writes its up (2 n) and down (hidden) BF16
    outputs, goes through SiLU & mul and is read by the top-k sum."""
    if shape.get("zero_rows") is None:
        return 0.0
    return np.asarray(shape["zero_rows"], float) * (2.0 * (2.0 * inter + 2.0 * hidden) + inter * (ACT_READ_BYTES + ib))


def expanded_act_iters(shape: dict, sms):
    """Iterations of TRT-LLM-gen's expanded-space DeepSeek-FP8 activation (TensorRT-LLM trtllmGenKernels/
    blockScaleMoe/DevKernel.cu activation::run, activationDeepSeekKernel) when shape key expanded_act is set,
    else 0: grid (ceil(inter / 128) scale blocks, tokens / tpc, topk); every (block, token group, pick)
    iteration loads the picks' permuted indices and runs a 128-thread BlockReduce, local or not (-1) alike,
    so the count is the same at every EP. tpc tokens per CTA: 4 past 32 CTAs per SM, 2 past 4, else 1."""
    flag = np.asarray(_opt(shape, "expanded_act", 0.0), float)
    inter = np.asarray(shape["n"], float) / np.asarray(_opt(shape, "tp"), float)
    t, k = np.asarray(shape["tokens"], float), np.asarray(shape["topk"], float)
    blocks = np.ceil(inter / 128.0 - 1e-9)
    ctas = blocks * t * k
    tpc = np.where(ctas > 32.0 * sms, 4.0, np.where(ctas > 4.0 * sms, 2.0, 1.0))
    return flag * blocks * k * np.ceil(t / tpc - 1e-9)


def _moe_tile_padding(shape: dict, mg):
    """MMA rows per computed row of the moe GEMMs: shape key tile_pad (a measured row's loads; NaN:
    even loads, each expert's rows to an exact ceil), else random counts' expectation
    (efficiency.routed_tile_padding)."""
    pad = shape.get("tile_pad")
    return E.routed_tile_padding(mg) if pad is None else pad


def _gemm_pad(pad):
    """tile_pad as efficiency.gemm_tiling reads it: its even loads (NaN) as 1, an exact ceil."""
    return np.where(np.isnan(pad), 1.0, pad)


def entry_keys(family: str, v: dict) -> dict:
    """Shape keys a fitted GEMM variant adds to the priced shape (its `model_keys`: the `tiling` rule;
    moesim.calibration.fit.gemm.gemm_keys).
    Entries fitted before these keys existed have none and keep the model they were fitted with."""
    return dict(v.get("model_keys") or {}) if family in ("gemm", "moe") else {}


def waves_parts(family: str, dtype: str, sms, shape: dict):
    """([(B_in, B_out, CTAs, BLOCK_M, BLOCK_N, k, in_bytes[, load rows]) per GEMM of the kernel],
    streamed bytes): the shape-only features of a waves_v1 entry (the fit computes them once per row).
    tiling "deepgemm_sm90" / "deepgemm_sm100": DeepGEMM's own layout (block sizes, multicast; moesim.perf.deepgemm_layout
    and deepgemm_layout_sm100)."""
    ib = E.dtype_bytes(dtype, 1.0)
    if family == "moe" and shape.get("tiling") == TRITON_FUSED_MOE:  # the engine's Triton config
        return triton_moe_parts(dtype, shape)
    if family == "moe":
        gemms, extra = moe_parts(dtype, shape)
        # random routing: Poisson counts per expert, partial last tiles; else the rows' own padding
        pad = _gemm_pad(_moe_tile_padding(shape, gemms[0][3]))
        bm_min = float(_opt(shape, "block_m_min", 64.0))  # a layout fixing BLOCK_M: CONTIG_BLOCK_M
        iters = expanded_act_iters(shape, sms)
    elif shape.get("tiling") in DEEPGEMM_LAYOUTS and np.all(np.asarray(_groups(shape)) == 1):  # DeepGEMM's layout
        _need(family, shape, ("m", "n", "k"))
        m, n, k = shape["m"], shape["n"], shape["k"]
        _, b_in, b_out = E.gemm_work(m, n, k, 1.0, ib, E.out_bytes_for(dtype))
        ctas, bm, bn, rows = DEEPGEMM_LAYOUTS[shape["tiling"]](m, n, k, sms)
        return [(b_in, b_out, ctas, bm, bn, np.asarray(k, float), ib, rows)], 0.0
    else:
        _need(family, shape, ("m", "n", "k"))
        gemms = [(None, None, None, shape["m"], shape["n"], shape["k"], _groups(shape))]
        extra, pad, bm_min = 0.0, shape.get("tile_pad"), 64.0
    parts = []
    w = None if family == "moe" else _weights(shape)  # moe_parts' groups are already the touched experts
    for _, _, _, m, n, k, g in gemms:
        _, b_in, b_out = E.gemm_work(m, n, k, g, ib, E.out_bytes_for(dtype), w)
        ctas, bm, bn = E.gemm_tiling(m, n, g, sms, pad, bm_min=bm_min)
        parts.append((b_in, b_out, ctas, bm, bn, np.asarray(k, float), ib))
    if family == "moe" and np.any(iters > 0):  # priced by parts_sides per iteration, not as a GEMM
        parts.append((0.0, 0.0, iters, 0.0, 0.0, 0.0, ACT_SLOTS))
    return parts, extra


def triton_moe_parts(dtype: str, shape: dict):
    """waves_parts of a fused-MoE layer run by the Triton fused_moe_kernel (moesim.perf.triton_moe):
    both GEMMs with the engine's (BLOCK_SIZE_M, BLOCK_SIZE_N) for the layer, M tiles per touched
    expert exact for even loads, expected for random counts (efficiency.expected_tiles at BLOCK_M),
    else from the rows' tile_pad (a measured row's uneven loads); a program loads its BLOCK_M token rows
    (masked: padded rows move no bytes) and BLOCK_N weight rows per k-block."""
    gemms, extra = moe_parts(dtype, shape)
    ib = E.dtype_bytes(dtype, 1.0)
    args = (shape["tokens"], shape["experts"], _opt(shape, "ep"), shape["n"], _opt(shape, "tp"))
    bm, bn = fused_moe_tiles(*args, dtype)
    mg = np.asarray(gemms[0][3], float)
    pad = shape.get("tile_pad")
    tiles = np.ceil(np.maximum(mg, 1e-9) / bm - 1e-9)  # even loads (tile_pad NaN): exact ceil
    if pad is None:  # random counts
        tiles = E.expected_tiles(mg, bm)
    else:  # uneven loads: the rows' padding (moesim.calibration.fit.moe_work: at this kernel's BLOCK_M)
        tiles = np.where(np.isnan(pad), tiles, mg * pad / bm)
    parts = []
    for _, _, _, m, n, k, g in gemms:
        _, b_in, b_out = E.gemm_work(m, n, k, g, ib, E.out_bytes_for(dtype))
        ctas = fused_moe_ctas(m, n, g, bm, bn, tiles)
        parts.append((b_in, b_out, ctas, bm, bn, np.asarray(k, float), ib))
    return parts, extra


def peak_flops(flops: dict, dtype) -> float:
    """Dense peak (FLOP/s) of `dtype` from a {dtype: FLOP/s} table: bf16's, or the largest, when absent."""
    d = base_dtype(getattr(dtype, "value", dtype) or "fp8")
    return float(flops.get(d) or flops.get("bf16") or max(flops.values()))
