"""nccl_proto: NCCL's tuning model (src/graph/tuning.cc) with fitted per-protocol (LL, LL128, Simple)
latencies and bandwidths and NVLS: moesim.perf.collectives.nccl_proto_terms; the entry's `custom`
backends are custom_ar entries. Priced by Profile.collective_time (collectives.collective_entry_choice),
fitted by moesim.calibration.fit.collectives.fit_nccl_entry.
"""

from __future__ import annotations

from moesim.perf.models.params import BW_FRAC, US, Num
from moesim.perf.models.sibling import as_is

NAME = "nccl_proto"
# source: the fit (moesim.calibration.fit.collectives) on imported NCCL tables; per protocol k:
# k_us + k_step_us * steps(n) + ring bytes / (k_bw_frac x achievable link)
PARAMS = {
    **{
        f"{k}_{f}": v for k in ("ll", "ll128", "simple") for f, v in (("us", US), ("step_us", US), ("bw_frac", BW_FRAC))
    },
    "nvls_us": US._replace(optional=True),  # NVLS fixed cost, us
    "nvls_bw_frac": BW_FRAC._replace(optional=True),
    "nvls_min_gpus": Num(2.0, integer=True, optional=True),  # NVLS from this many GPUs
}

# sibling GPU (moesim.perf.models.sibling): latencies and the bandwidths as fractions of the live achievable
# link carry over
transfer = as_is
