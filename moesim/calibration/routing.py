"""Expected all-to-all copies per token under the routing the benchmarks used.

Built only from moesim.workload.comm (the byte accounting the cost model uses), plus the one thing
comm.py does not model: node-limited routing. DeepEP's normal-kernel test (tests/test_internode.py)
picks `num_topk_groups = min(num_nodes, 4)` nodes per token by the best expert score in each node,
then the top-8 experts inside those nodes (as DeepSeek-V3's own routing does at EP64: 8 groups of
32 experts, top-4 groups). We treat the picks as uniform over the experts of the chosen nodes, and
the sender's own node as one of the chosen ones with probability groups / nodes.

Counting conventions of the benchmarks (needed to turn published *bandwidths* into *times*):
  * DeepEP normal, intranode ("NVL" bandwidth): received tokens x bytes, where a token counts once
    per distinct destination rank, the sender itself included (test_intranode.py recv_x.numel()).
  * DeepEP normal, internode ("RDMA" bandwidth): tokens x distinct destination *nodes*, the own node
    included (test_internode.py num_rdma_token_sent), x bytes. Local copies do not touch the NIC,
    so this "logical" bandwidth is larger than what the NIC carries.
  * DeepEP low-latency: every (token, selected expert) pair x (hidden + hidden/128*4 + 16) bytes for
    dispatch, x hidden*2 for combine (test_low_latency.py), local pairs included.
Those are conversion rules for published figures only; fits use comm.py's network bytes.
"""

from __future__ import annotations

import numpy as np

from moesim.enums import CommMode
from moesim.workload.comm import (
    a2a_copies,
    expected_distinct_nodes,
    expected_distinct_ranks,
    node_limited_world,
    routed_copies,
)


def _reduced_world(ep, gpus_per_node, experts, topk_groups):
    """DeepEP's benchmark routing = V3's group limit with one expert group per node."""
    ep = np.asarray(ep, dtype=float)
    g = np.minimum(float(gpus_per_node), ep)
    nodes = np.maximum(ep / g, 1.0)
    if topk_groups is None or (np.ndim(topk_groups) == 0 and (topk_groups != topk_groups or topk_groups <= 0)):
        return ep, g, np.ones_like(ep), ep, float(experts) * np.ones_like(ep)
    q = np.ones_like(ep)
    ep_eff = np.empty_like(ep)
    slots_eff = np.empty_like(ep)
    for i, n in np.ndenumerate(nodes):  # benchmark rows only (a few dozen), not configurations
        qi, e_i, s_i = node_limited_world(ep[i], g[i], float(experts), int(round(n)), float(topk_groups))
        q[i], ep_eff[i], slots_eff[i] = float(qi), float(e_i), float(s_i)
    return ep, g, q, ep_eff, slots_eff


def routing_copies(mode, ep, gpus_per_node, experts, topk, topk_groups=None):
    """(rdma_copies, nvlink_copies) per token sent from one rank, expected values: the cost
    model's own accounting (moesim.workload.comm.routed_copies) with one expert group per node and
    `topk_groups` of them chosen, as DeepEP's benchmarks route."""
    ep = np.asarray(ep, dtype=float)
    if topk_groups is None or (np.ndim(topk_groups) == 0 and (topk_groups != topk_groups or topk_groups <= 0)):
        return a2a_copies(mode, ep, gpus_per_node, experts, topk)
    rdma = np.empty_like(ep)
    nvl = np.empty_like(ep)
    g = np.minimum(float(gpus_per_node), ep)
    for i, e in np.ndenumerate(ep):  # benchmark rows only
        nodes = int(round(max(e / g[i], 1.0)))
        r, n = routed_copies(mode, e, gpus_per_node, float(experts), topk, n_group=nodes, topk_group=float(topk_groups))
        rdma[i], nvl[i] = float(np.ravel(r)[0]), float(np.ravel(n)[0])
    return rdma, nvl


def deepep_logical_copies(kind: str, ep, gpus_per_node, experts, topk, topk_groups=None):
    """Copies per token as DeepEP's tests count them (see module docstring).

    kind: "nvl" (normal intranode: distinct ranks incl. self), "rdma" (normal internode: distinct
    nodes incl. own), "ll" (low latency: top-k pairs).
    """
    ep, g, q, ep_eff, slots_eff = _reduced_world(ep, gpus_per_node, experts, topk_groups)
    if kind == "nvl":
        return expected_distinct_ranks(ep_eff, slots_eff, topk) * np.ones_like(ep)
    if kind == "rdma":
        return expected_distinct_nodes(ep_eff, g, slots_eff, topk) * np.ones_like(ep)
    if kind == "ll":  # every top-k pair, own rank included: the cost model's own LL count
        rdma, nvl = a2a_copies(CommMode.DEEPEP_LL, ep, gpus_per_node, experts, topk)
        return (rdma + nvl) * np.ones_like(ep)
    raise ValueError(f"kind must be nvl, rdma or ll, got {kind!r}")
