"""alpha_beta_max: an EP all-to-all (dispatch / combine) as Hockney's alpha-beta over both links at once,

    t = alpha + max(rdma_bytes / rdma_Bps, nvlink_bytes / nvlink_Bps)

(moesim.perf.collectives.alpha_beta_a2a; fitted by moesim.calibration.fit.comm.fit_a2a; priced by
Profile.comm_params). Bandwidths as fractions of the measuring GPU's nominal links rescale to a sibling.
"""

from __future__ import annotations

from moesim.perf.models.params import FRAC, GBPS, US
from moesim.perf.models.sibling import Sibling
from moesim.perf.profile.blocks import round_sig

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


def transfer(entry: dict, sib: Sibling) -> None:
    """Sibling GPU: the absolute fitted link bandwidths -> fractions of the source's nominal links (the
    reader scales them by the target's nominal links; a `*_frac_nominal` already there is kept); alphas
    carry over. Nothing where the entry names its measuring links (`nominal`: the reader rescales)."""
    if isinstance(entry.get("nominal"), dict):
        return
    p = entry["params"]
    for link in ("rdma", "nvlink"):
        key, frac = f"{link}_GBps", f"{link}_frac_nominal"
        v, nom = p.get(key), sib.source_links_Bps.get(link, 0.0)
        if isinstance(v, (int, float)) and p.get(frac) is None and nom > 0:
            p[frac] = round_sig(min(float(v) * 1e9 / nom, 1.0))
