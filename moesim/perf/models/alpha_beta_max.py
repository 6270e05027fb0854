"""alpha_beta_max: an EP all-to-all (dispatch / combine) as Hockney's alpha-beta over both links at once,

    t = alpha + max(rdma_bytes / rdma_Bps, nvlink_bytes / nvlink_Bps)

(moesim.perf.collectives.alpha_beta_a2a; fitted by moesim.calibration.fit.comm.fit_a2a; priced by
Profile.comm_params). Bandwidths as fractions of the measuring GPU's nominal links rescale to a sibling.
"""

from __future__ import annotations

from moesim.perf.models.params import FRAC, GBPS, US

NAME = "alpha_beta_max"
# source: the fit (moesim.calibration.fit.comm) on measured dispatch / combine rows
PARAMS = {
    "alpha_us": US,  # per call, us
    "alpha_intra_us": US._replace(optional=True),  # per call where EP fits in one NVLink domain, us
    "rdma_GBps": GBPS,  # fitted RDMA bandwidth, GB/s
    "nvlink_GBps": GBPS,  # fitted NVLink bandwidth, GB/s
    "rdma_frac_nominal": FRAC,  # the same as fractions of the nominal links (rescaled to the live spec)
    "nvlink_frac_nominal": FRAC,
}
