"""Work (FLOPs, bytes read, bytes written) and SM fill (CTAs per SM) of a profiled kernel family
for a shape: the one mapping from a profile's shape keywords to moesim.perf.efficiency's work
functions, used by the reader (moesim.perf.profile.reader) and the fit (moesim.calibration.fit)."""

from __future__ import annotations

from moesim.perf import efficiency as E

GEMM_FAMILIES = ("gemm", "grouped_gemm", "bmm")


def _need(family: str, shape: dict, cols) -> None:
    missing = [c for c in cols if shape.get(c) is None]
    if missing:
        raise TypeError(f"kernel_efficiency({family!r}) needs shape {', '.join(missing)}")


def kernel_work(family: str, dtype: str, sms, shape: dict):
    """(F, B_in, B_out, CTAs per SM) of `family` (GEMMs: m, n, k, groups (or batch; 1 by default),
    tile_pad; MLA decode: batch, q_len, heads, context) in `dtype` (a lower-case name)."""
    if family in GEMM_FAMILIES:
        _need(family, shape, ("m", "n", "k"))
        g = shape.get("groups")
        if g is None:
            g = shape.get("batch", 1.0)
        g = 1.0 if g is None else g
        F, b_in, b_out = E.gemm_work(
            shape["m"], shape["n"], shape["k"], g, E.dtype_bytes(dtype), E.out_bytes_for(dtype)
        )
        x = E.gemm_ctas_per_sm(shape["m"], shape["n"], g, sms, shape.get("tile_pad"))
        return F, b_in, b_out, x
    b, s, h, c = (shape.get(k) for k in ("batch", "q_len", "heads", "context"))
    _need(family, shape, ("batch", "q_len", "heads", "context"))
    kvb = E.dtype_bytes(dtype, 2.0)
    F, b_in, b_out = E.mla_decode_work(b, s, h, c, kvb, 2.0 if kvb < 2 else kvb)  # queries/outputs >= 16 bit
    return F, b_in, b_out, E.mla_ctas_per_sm(b, s, h, c, sms)


def peak_flops(flops: dict, dtype) -> float:
    """Dense peak (FLOP/s) of `dtype` from a {dtype: FLOP/s} table: bf16's, or the largest, when absent."""
    d = str(getattr(dtype, "value", dtype) or "fp8").lower()
    return float(flops.get(d) or flops.get("bf16") or max(flops.values()))
