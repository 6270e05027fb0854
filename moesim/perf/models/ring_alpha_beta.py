"""ring_alpha_beta: an all-reduce / all-gather at the hardware's ring / one-shot alpha-beta
(moesim.perf.collectives.collective_terms) with a fitted extra alpha and a bandwidth efficiency on the
achievable link (Profile.collective_params; fitted by moesim.calibration.fit.collectives.fit_collective).
"""

from __future__ import annotations

from moesim.perf.models.params import ETA, US
from moesim.perf.models.sibling import as_is

NAME = "ring_alpha_beta"
# source: the fit (moesim.calibration.fit.collectives) on measured NCCL rows
PARAMS = {
    "alpha_us": US,  # added to the hardware's per-step latencies, us
    "bw_efficiency": ETA,  # fraction of the achievable link bandwidth
}

# sibling GPU (moesim.perf.models.sibling): the extra alpha and the efficiency on the live achievable link carry over
transfer = as_is
