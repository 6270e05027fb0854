"""How a profile writes numbers and its `roofline` block (split from moesim.perf.profile.schema,
which re-exports these names)."""

from __future__ import annotations

import numpy as np


def round_sig(x, sig: int = 6):
    """How a profile writes a number: `sig` significant digits, plain Python types (integral -> int),
    None for a missing or non-finite value."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [round_sig(v, sig) for v in x]
    x = float(x)
    if not np.isfinite(x):
        return None
    if x == 0:
        return 0
    v = float(f"{x:.{sig}g}")
    return int(v) if v.is_integer() and abs(v) < 1e15 else v


def no_cv(**extra) -> dict:
    """The cv block of an entry that was not cross-validated."""
    return {"folds": 0, "median_abs_pct": None, "max_abs_pct": None, **extra}


# ---------------------------------------------------------------------------- roofline block
def roofline_to_yaml(source, sms, hbm_Bps, flops: dict, nvlink_Bps, rdma_Bps, domain_gpus) -> dict:
    """The `roofline` block (SI in, the profile's GB/s and TFLOPS out)."""
    return {
        "source": source,
        "sms": sms,
        "hbm_bw_GBps": round_sig(hbm_Bps / 1e9),
        "tflops": {k: round_sig(v / 1e12) for k, v in flops.items()},
        "nvlink_bw_GBps": round_sig(nvlink_Bps / 1e9),
        "rdma_bw_GBps": round_sig(rdma_Bps / 1e9),
        "domain_gpus": domain_gpus,
    }


def roofline_from_yaml(roof: dict) -> dict:
    """Peaks in SI from a `roofline` block, with the defaults of a profile that has none."""
    return {
        "domain_gpus": int(roof.get("domain_gpus", 8)),
        "flops": {k: float(v) * 1e12 for k, v in (roof.get("tflops") or {}).items()} or {"fp8": 1e15},
        "hbm_Bps": float(roof.get("hbm_bw_GBps", 1000.0)) * 1e9,
        "sms": int(roof.get("sms", 132)),
        "nominal": {
            "rdma": float(roof.get("rdma_bw_GBps", 0)) * 1e9,
            "nvlink": float(roof.get("nvlink_bw_GBps", 0)) * 1e9,
        },
    }
