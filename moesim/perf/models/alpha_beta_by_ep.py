"""alpha_beta_by_ep: per-EP alpha-beta knots of an all-to-all (pplx-kernels' latency is not monotone
in EP), alpha and time per byte piecewise-linear in log2(EP) between the measured EPs
(moesim.perf.collectives.by_ep_params; fitted by moesim.calibration.fit.comm.fit_a2a_by_ep).
Every field is a list, one value per measured EP.
"""

from __future__ import annotations

from moesim.perf.models.params import GBPS, US, Num
from moesim.perf.models.sibling import Sibling
from moesim.perf.profile.blocks import round_sig

NAME = "alpha_beta_by_ep"
# source: the fit (moesim.calibration.fit.comm); equal-length lists, one value per measured EP; a link's
# bandwidth is null where no byte used it
PARAMS = {
    "ep": Num(0.0, lo_open=True),  # the measured EP sizes
    "alpha_us": US,  # per call, us
    "rdma_GBps": GBPS._replace(optional=True),  # GB/s
    "nvlink_GBps": GBPS._replace(optional=True),  # GB/s
    # the knots' bandwidths as fractions of the measuring GPU's nominal links (rescaled to the live spec)
    "rdma_frac_nominal": Num(0.0, 1.0, lo_open=True, optional=True),
    "nvlink_frac_nominal": Num(0.0, 1.0, lo_open=True, optional=True),
}


def transfer(entry: dict, sib: Sibling) -> None:
    """Sibling GPU: each knot's link bandwidth times the target's over the source's nominal link; alphas
    and EPs carry over. Nothing where the entry names its measuring links (`nominal`: the reader rescales)."""
    if isinstance(entry.get("nominal"), dict):
        return
    p, src, tgt = entry["params"], sib.source_links_Bps, sib.target_links_Bps
    for link in ("rdma", "nvlink"):
        v = p.get(f"{link}_GBps")
        if isinstance(v, list) and src.get(link, 0) > 0 and tgt.get(link, 0) > 0:
            r = tgt[link] / src[link]
            p[f"{link}_GBps"] = [None if x is None else round_sig(float(x) * r) for x in v]
