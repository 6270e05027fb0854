"""Work (FLOPs, bytes read, bytes written) and SM fill (CTAs per SM) of a profiled kernel family
for a shape: the one mapping from a profile's shape keywords to moesim.perf.efficiency's work
functions, used by the reader (moesim.perf.profile.reader) and the fit (moesim.calibration.fit).
`model_time` is the one place a waves_v1 / stream_v1 entry's time is computed for both."""

from __future__ import annotations

import numpy as np

from moesim.perf import efficiency as E
from moesim.perf.profile.schema import STREAM
from moesim.workload.ffn import expected_active_slots
from moesim.workload.ops import QUANT_BYTES_PER_ELEM

GEMM_FAMILIES = ("gemm", "grouped_gemm", "bmm")
# SiLU(gate) * up of the fused / grouped MoE: reads 2 x width BF16, writes width (FP8 or BF16)
ACT_READ_BYTES = 4.0
# quant ops other than the quant pass itself (aiconfigurator computescale_perf: a dynamic quant's
# time minus the static quant's, collector/<engine>/collect_computescale.py): the scale computation
# is an extra amax pass that reads the BF16 input once and writes nothing of size
QUANT_OP_BYTES_PER_ELEM = {"compute_scale": 2.0}


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


def kernel_work(family: str, dtype: str, sms, shape: dict):
    """(F, B_in, B_out, CTAs per SM) of `family` (GEMMs: m, n, k, groups (or batch; 1 by default),
    tile_pad; MLA decode: batch, q_len, heads, context; moe: tokens, hidden, n, experts, topk, ep,
    tp, layout; quant: m, k, op (the quant pass by default)) in `dtype` (a lower-case name)."""
    if family in GEMM_FAMILIES:
        _need(family, shape, ("m", "n", "k"))
        g = _groups(shape)
        F, b_in, b_out = E.gemm_work(
            shape["m"], shape["n"], shape["k"], g, E.dtype_bytes(dtype), E.out_bytes_for(dtype)
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
        per_elem = QUANT_OP_BYTES_PER_ELEM.get(str(shape.get("op") or ""), QUANT_BYTES_PER_ELEM)
        nb = np.asarray(shape["m"], float) * np.asarray(shape["k"], float) * per_elem
        return np.zeros_like(nb), nb, np.zeros_like(nb), np.ones_like(nb)
    b, s, h, c = (shape.get(k) for k in ("batch", "q_len", "heads", "context"))
    _need(family, shape, ("batch", "q_len", "heads", "context"))
    kvb = E.dtype_bytes(dtype, 2.0)
    F, b_in, b_out = E.mla_decode_work(b, s, h, c, kvb, 2.0 if kvb < 2 else kvb)  # queries/outputs >= 16 bit
    return F, b_in, b_out, E.mla_ctas_per_sm(b, s, h, c, sms)


def moe_rows(shape: dict):
    """(pairs, touched, local experts) of one rank's MoE layer: experts / ep local experts,
    tokens x topk / ep token-expert pairs. Experts receiving >= 1 token: random routing (default)
    E_local (1 - (1 - topk / E)^tokens) (moesim.workload.ffn.expected_active_slots, the
    workload's); routing = "balanced" (the measured tables' even spread: aiconfigurator's
    balanced / uniform rows, whose times step with min(E_local, pairs), not with the random
    expectation) min(E_local, pairs)."""
    _need("moe", shape, ("tokens", "hidden", "n", "experts", "topk"))
    ep = np.asarray(_opt(shape, "ep"), float)
    tokens = np.asarray(shape["tokens"], float)
    experts, topk = np.asarray(shape["experts"], float), np.asarray(shape["topk"], float)
    local = experts / ep
    pairs = tokens * topk / ep
    if shape.get("routing") == "balanced":
        touched = np.minimum(local, np.maximum(pairs, 1.0))
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
    return parts, pairs * inter * (ACT_READ_BYTES + ib)


def waves_parts(family: str, dtype: str, sms, shape: dict):
    """([(B_in, B_out, CTAs, BLOCK_M, BLOCK_N, k, in_bytes) per GEMM of the kernel], streamed bytes):
    the shape-only features of a waves_v1 entry (the fit computes them once per row)."""
    ib = E.dtype_bytes(dtype, 1.0)
    if family == "moe":
        gemms, extra = moe_parts(dtype, shape)
        # random routing: Poisson counts per expert, partial last tiles; balanced: exact ceil
        pad = None if shape.get("routing") == "balanced" else E.routed_tile_padding(gemms[0][3])
    else:
        _need(family, shape, ("m", "n", "k"))
        gemms = [(None, None, None, shape["m"], shape["n"], shape["k"], _groups(shape))]
        extra, pad = 0.0, shape.get("tile_pad")
    parts = []
    for _, _, _, m, n, k, g in gemms:
        _, b_in, b_out = E.gemm_work(m, n, k, g, ib, E.out_bytes_for(dtype))
        ctas, bm, bn = E.gemm_tiling(m, n, g, sms, pad)
        parts.append((b_in, b_out, ctas, bm, bn, np.asarray(k, float), ib))
    return parts, extra


def parts_time(parts, extra, sms, peak, bw, p: dict):
    """alpha + the waves_v1 time of each GEMM (moesim.perf.efficiency.waves_time) + streamed bytes."""
    p0 = {**p, "alpha_us": 0.0}
    t = sum(E.waves_time(*part[:6], part[6], sms, peak, bw, p0) for part in parts)
    return float(p["alpha_us"]) * 1e-6 + t + np.asarray(extra, float) / (bw * float(p["eta_m"]))


def model_time(model: str, family: str, dtype: str, sms, peak, bw, p: dict, shape: dict):
    """Modelled time (s) of a waves_v1 / stream_v1 entry with params p for a broadcast shape."""
    if model == STREAM:
        return E.stream_time(kernel_work(family, dtype, sms, shape)[1], bw, p)
    return parts_time(*waves_parts(family, dtype, sms, shape), sms, peak, bw, p)


def peak_flops(flops: dict, dtype) -> float:
    """Dense peak (FLOP/s) of `dtype` from a {dtype: FLOP/s} table: bf16's, or the largest, when absent."""
    d = str(getattr(dtype, "value", dtype) or "fp8").lower()
    d = {"fp8_block": "fp8", "bfloat16": "bf16"}.get(d, d)
    return float(flops.get(d) or flops.get("bf16") or max(flops.values()))
