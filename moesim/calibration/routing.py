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

from moesim.workload.comm import a2a_copies, expected_distinct_nodes, expected_distinct_ranks


def _reduced_world(ep, gpus_per_node, experts, topk_groups):
    ep = np.asarray(ep, dtype=float)
    g = np.minimum(float(gpus_per_node), ep)
    nodes = np.maximum(ep / g, 1.0)
    if topk_groups is None or (np.ndim(topk_groups) == 0 and (topk_groups != topk_groups or topk_groups <= 0)):
        lim = nodes
    else:
        lim = np.minimum(nodes, np.asarray(topk_groups, dtype=float))
    q = lim / nodes  # P(own node among the chosen ones)
    ep_eff = lim * g
    slots_eff = float(experts) * lim / nodes
    return ep, g, q, ep_eff, slots_eff


def routing_copies(mode, ep, gpus_per_node, experts, topk, topk_groups=None):
    """(rdma_copies, nvlink_copies) per token sent from one rank, expected values.

    Without a node limit this is exactly comm.a2a_copies. With one, the token's experts live on
    `topk_groups` nodes: if the own node is among them (probability q) the world shrinks to those
    nodes; otherwise every chosen node is remote.
    """
    ep, g, q, ep_eff, slots_eff = _reduced_world(ep, gpus_per_node, experts, topk_groups)
    r_in, n_in = a2a_copies(mode, ep_eff, g, slots_eff, topk)
    if str(getattr(mode, "value", mode)) == "deepep-ll":
        # LL sends per (token, expert): copies depend only on where the experts are, not on dedup
        r_out = np.full_like(r_in, float(topk))
        n_out = np.zeros_like(n_in)
    elif str(getattr(mode, "value", mode)) == "deepep-normal":
        r_out = expected_distinct_nodes(ep_eff, g, slots_eff, topk)
        n_out = expected_distinct_ranks(ep_eff, slots_eff, topk)
    else:
        dr = expected_distinct_ranks(ep_eff, slots_eff, topk)
        r_out, n_out = dr, np.zeros_like(dr)
    rdma = q * r_in + (1.0 - q) * r_out
    nvl = q * n_in + (1.0 - q) * n_out
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
    if kind == "ll":
        return float(topk) * np.ones_like(ep)
    raise ValueError(f"kind must be nvl, rdma or ll, got {kind!r}")
