"""custom_ar: an engine's custom all-reduce (vLLM / SGLang custom_all_reduce.cuh, TRT-LLM
customAllReduceKernels.cu), the faster of one-shot and two-shot: moesim.perf.collectives.custom_ar_terms.
An entry under a nccl_proto entry's `custom`, used up to its max_bytes where faster than NCCL.
"""

from __future__ import annotations

from moesim.perf.models.params import BW_FRAC, US
from moesim.perf.models.sibling import as_is

NAME = "custom_ar"
# source: the fit (moesim.calibration.fit.collectives.fit_custom) on the engines' custom all-reduce rows;
# per algorithm k: k_us + k_peer_us (n - 1) + wire bytes / (k_bw_frac x achievable link)
PARAMS = {f"{k}_{f}": v for k in ("oneshot", "twoshot") for f, v in (("us", US), ("peer_us", US), ("bw_frac", BW_FRAC))}

# sibling GPU (moesim.perf.models.sibling): latencies and the bandwidths as fractions of the live achievable
# link carry over
transfer = as_is
