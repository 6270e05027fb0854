"""deepep_v2: a DeepEP dispatch / combine (alpha terms for nodes, experts and message size; the
q-norm of the link time and the SM copy time; an optional host floor): the formula is
moesim.perf.collectives.deepep_v2_terms, priced by Profile.comm_time (collectives.deepep_entry_terms)
and fitted by moesim.calibration.fit.comm_deepep.
"""

from __future__ import annotations

from moesim.perf.models.params import GBPS, US, Num
from moesim.perf.models.sibling import as_is

NAME = "deepep_v2"
# source: the fit (moesim.calibration.fit.comm_deepep) on the engines' DeepEP tables
PARAMS = {
    "alpha_us": US,  # per call, us
    "alpha_node_us": US,  # per log2(nodes), us
    "alpha_expert_us": US,  # per local expert, us
    "alpha_kB_us": US,  # per kB of message, us
    "rdma_frac_nominal": Num(0.0, 1.0, lo_open=True),  # RDMA rate as a fraction of the live NIC
    "nvlink_GBps": GBPS,  # absolute: what the kernel achieves inside a node (capped by the live link)
    "sm_GBps": GBPS,  # copy rate per SM, GB/s
    "sm_token_us": US,  # SM time per token, us
    "q": Num(1.0, 64.0),  # q-norm of link and SM time
    "rdma_node_decay": Num(0.0, 100.0, optional=True),  # RDMA share 1 / (1 + decay (nodes - 1))
    "host_us": US._replace(optional=True),  # host floor of a host-paced benchmark loop, us
}

# sibling GPU (moesim.perf.models.sibling): its bandwidths are read against the live spec already (RDMA as a
# fraction, NVLink capped by the live link)
transfer = as_is
