"""Which part of a profile entry prices a shape: the variant of a table-fitted entry (per layout,
dtype, backend). Split from moesim.perf.profile.reader."""

from __future__ import annotations


def base_dtype(d) -> str:
    """The dtype a variant is matched on: fp8_block = fp8, bfloat16 = bf16 (lower case)."""
    d = str(d or "").lower()
    return {"fp8_block": "fp8", "bfloat16": "bf16"}.get(d, d)


def pick_variant(e: dict, dtype: str, layout=None) -> dict:
    """The entry's variant (waves_v1 / stream_v1 fits per layout, dtype, backend) for a priced dtype
    and layout: the first listed (preferred) one whose dtype matches (fp8 = fp8_block) and, where
    the shape names one scalar layout, whose layout matches; the entry itself when none does."""
    lay = layout if isinstance(layout, str) else None
    for v in e.get("variants") or []:
        if base_dtype(v.get("dtype")) == base_dtype(dtype) and (lay is None or v.get("layout") in (None, lay)):
            return v
    return e
