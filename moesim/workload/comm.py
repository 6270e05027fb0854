"""Network volume of MoE all-to-all and TP collectives, per GPU, as expected values.

All functions broadcast over numpy arrays. Byte accounting (DESIGN.md "Collectives"):
  * dispatch = FP8 hidden + one fp32 scale per 128 values; combine = BF16 hidden (DeepEP README).
  * deepep-ll: one copy per (token, selected expert) straight to that expert's rank, no per-rank
    dedup, the sender's own rank included (DeepEP low-latency kernels: per-expert receive
    buffers); copies to ranks inside the
    NVLink domain travel over NVLink (NVLink-assisted LL, DeepEP PR 2025-04), the rest over RDMA.
  * deepep-normal: one RDMA copy per distinct destination *node*, forwarded over NVLink to each
    distinct destination rank there (DeepEP normal kernels; V3 report sec. 3.2.2).
  * nccl / pplx: one copy per distinct destination rank, sent directly.
Distinct destinations use the hypergeometric expectation for top-k picks over `slots` expert slots
spread evenly over ranks/nodes (uniform routing; skew enters through the imbalance factor).
"""

from __future__ import annotations

import numpy as np

from moesim.enums import CommMode

# SMs DeepEP's normal kernels get by default: deep_ep Buffer.num_sms = 20 (buffer.py; SGLang and
# vLLM keep it: vllm all2all.py "This is the DeepEP default"); `--comm-sms` overrides it. The LL
# kernels launch their own (moesim.perf.collectives.deepep_ll_sms) and, with the receive hook,
# hold no SMs between calls (DeepSeek decode overlap figure, OII-017).
DEEPEP_NORMAL_SMS = 20


def dispatch_bytes_per_token(
    hidden: int, dtype_bytes: float = 1.0, scale_block: int = 128, header_bytes: float = 0.0
) -> float:
    """FP8 payload + fp32 scale per `scale_block` values (7168 + 224 = 7392 B for V3, seed 002).
    header_bytes: DeepEP low-latency messages carry a 16-byte header (an int4 of metadata) that
    its benchmarks count in their bandwidths (test_low_latency.py); the cost model does not."""
    scales = (np.ceil(hidden / scale_block) * 4.0) if (dtype_bytes < 2 and scale_block) else 0.0
    return float(hidden * dtype_bytes + scales + header_bytes)


def combine_bytes_per_token(hidden: int, dtype_bytes: float = 2.0) -> float:
    return float(hidden * dtype_bytes)


def a2a_message_bytes(op: str, hidden: int, precision) -> float:
    """Bytes one token carries in `op` (dispatch | combine) at the model's dispatch/combine dtype."""
    if op == "dispatch":
        return dispatch_bytes_per_token(hidden, precision.dispatch_dtype.bytes, 128)
    return combine_bytes_per_token(hidden, precision.combine_dtype.bytes)


def a2a_network_bytes(mode: CommMode, op: str, model, *, tokens, ep, gpus_per_domain, slots):
    """(rdma_bytes, nvlink_bytes) one rank sends in an EP dispatch or combine of `tokens` tokens:
    tokens x expected copies per token under the model's group-limited routing (routed_copies)
    x the per-token message (a2a_message_bytes). The one formula for the workload, `moesim
    kernel` and the calibration."""
    m = model.moe
    rdma_c, nvl_c = routed_copies(mode, ep, gpus_per_domain, slots, m.top_k, m.n_group, m.topk_group)
    msg = a2a_message_bytes(op, model.hidden_size, model.precision)
    return tokens * rdma_c * msg, tokens * nvl_c * msg


def p_not_hit(slots, slots_in_target, k):
    """P(a token's k distinct picks among `slots` all miss a target holding `slots_in_target`).

    Hypergeometric: prod_{i<k} (S - s - i) / (S - i). Vectorized over arrays; k is a scalar.
    """
    S = np.asarray(slots, dtype=float)
    s = np.minimum(np.asarray(slots_in_target, dtype=float), S)
    p = np.ones(np.broadcast(S, s).shape)
    for i in range(int(k)):  # k is the model's top-k (<= a few dozen), not a config axis
        p = p * np.clip((S - s - i) / np.maximum(S - i, 1e-12), 0.0, 1.0)
    return p


def expected_distinct_ranks(ep, slots, k):
    """E[# distinct EP ranks a token's top-k experts live on] (slots spread evenly)."""
    ep = np.asarray(ep, dtype=float)
    return ep * (1.0 - p_not_hit(slots, np.asarray(slots, float) / ep, k))


def expected_distinct_nodes(ep, gpus_per_domain, slots, k):
    """E[# distinct NVLink domains (nodes) a token reaches]."""
    ep = np.asarray(ep, dtype=float)
    nodes = np.maximum(ep / np.minimum(gpus_per_domain, ep), 1.0)
    return nodes * (1.0 - p_not_hit(slots, np.asarray(slots, float) / nodes, k))


def a2a_copies(mode: CommMode, ep, gpus_per_domain, slots, k):
    """(rdma_copies, nvlink_copies) per token sent from one rank, expected values.

    Copies to the sending rank itself are local (HBM) and excluded, except in deepep-ll: the
    low-latency kernels write every (token, selected expert) pair through the same per-expert
    receive buffers, the sender's own rank included (DeepEP test_low_latency.py counts all top-k
    copies; the measured H200 LL times scale with that count), so LL moves k copies per token.
    """
    mode = CommMode(mode)
    ep = np.asarray(ep, dtype=float)
    g = np.minimum(np.asarray(gpus_per_domain, dtype=float), ep)
    local_frac = g / ep  # share of slots inside my NVLink domain (incl. myself)
    if mode == CommMode.DEEPEP_LL:
        rdma = k * (1.0 - local_frac)
        nvl = np.where(ep > 1.0, k * local_frac, 0.0)  # own-rank copy included (docstring)
    elif mode == CommMode.DEEPEP_NORMAL:
        nodes = np.maximum(ep / g, 1.0)
        dn = expected_distinct_nodes(ep, g, slots, k)
        # the own node is reached with probability 1 - p_not_hit(own node); remote = dn - that
        p_own = 1.0 - p_not_hit(slots, np.asarray(slots, float) / nodes, k)
        rdma = np.maximum(dn - p_own, 0.0)
        dr = expected_distinct_ranks(ep, slots, k)
        p_self = 1.0 - p_not_hit(slots, np.asarray(slots, float) / ep, k)
        nvl = np.maximum(dr - p_self, 0.0)  # every destination rank gets its copy over NVLink
    else:  # nccl, pplx: one copy per distinct destination rank, sent directly
        dr = expected_distinct_ranks(ep, slots, k)
        p_self = 1.0 - p_not_hit(slots, np.asarray(slots, float) / ep, k)
        remote_share = np.where(ep > g, (ep - g) / np.maximum(ep - 1.0, 1e-12), 0.0)
        others = np.maximum(dr - p_self, 0.0)
        rdma = others * remote_share
        nvl = others - rdma
    zero = np.zeros(np.broadcast(ep, g).shape)
    return rdma + zero, nvl + zero


def node_limited_world(ep, gpus_per_domain, slots, n_group=1, topk_group=1):
    """Group-limited routing (DeepSeek-V3: 8 expert groups, each token's experts from the top-4
    groups; V3 report sec. 2.1.2 / 3.2.2). With a contiguous placement the chosen groups cover
    `lim` of the `nodes` NVLink domains: topk_group * nodes / n_group when a group spans whole
    nodes; otherwise the expected number of nodes holding >= 1 chosen group (hypergeometric).
    -> (q = P(own node is among them), ep_eff, slots_eff): the token routes uniformly inside a
    smaller world of lim nodes and slots * topk_group / n_group slots.
    Without a limit (n_group <= 1 or topk_group >= n_group) the world is unchanged (q = 1)."""
    ep = np.asarray(ep, dtype=float)
    g = np.minimum(np.asarray(gpus_per_domain, dtype=float), ep)
    nodes = np.maximum(ep / g, 1.0)
    slots = np.asarray(slots, dtype=float)
    if n_group is None or n_group <= 1 or topk_group >= n_group:
        return np.ones_like(nodes), ep * np.ones_like(nodes), slots * np.ones_like(nodes)
    frac = float(topk_group) / float(n_group)
    per_node = n_group / nodes  # groups per node (< 1: a group spans several nodes)
    spans = frac * nodes
    covered = nodes * (1.0 - p_not_hit(float(n_group), np.maximum(per_node, 1.0), int(topk_group)))
    lim = np.clip(np.where(per_node <= 1.0, spans, covered), 1.0, nodes)
    return lim / nodes, lim * g, slots * frac * np.ones_like(nodes)


def routed_copies(mode: CommMode, ep, gpus_per_domain, slots, k, n_group=1, topk_group=1):
    """(rdma_copies, nvlink_copies) per token under group-limited routing: with probability q the
    sender's node is among the chosen ones and the token routes inside the reduced world;
    otherwise every chosen node is remote (LL: k RDMA copies; normal: one RDMA copy per distinct
    node, NVLink fan-out there; nccl/pplx: one copy per distinct rank over RDMA)."""
    mode = CommMode(mode)
    q, ep_eff, slots_eff = node_limited_world(ep, gpus_per_domain, slots, n_group, topk_group)
    g = np.minimum(np.asarray(gpus_per_domain, dtype=float), np.asarray(ep, dtype=float))
    r_in, n_in = a2a_copies(mode, ep_eff, g, slots_eff, k)
    if np.all(q == 1.0):
        return r_in, n_in
    if mode == CommMode.DEEPEP_LL:
        r_out, n_out = np.full_like(r_in, float(k)), np.zeros_like(n_in)
    elif mode == CommMode.DEEPEP_NORMAL:
        r_out = expected_distinct_nodes(ep_eff, g, slots_eff, k)
        n_out = expected_distinct_ranks(ep_eff, slots_eff, k)
    else:
        r_out = expected_distinct_ranks(ep_eff, slots_eff, k)
        n_out = np.zeros_like(r_out)
    return q * r_in + (1.0 - q) * r_out, q * n_in + (1.0 - q) * n_out


def ring_allreduce_bytes(n, message_bytes):
    """Bytes each rank sends in a ring all-reduce: 2 (n-1)/n * M (NCCL ring)."""
    n = np.asarray(n, dtype=float)
    return np.where(n > 1, 2.0 * (n - 1.0) / n * message_bytes, 0.0)


def ring_allgather_bytes(n, message_bytes):
    """Bytes each rank sends in a ring all-gather of a total message M: (n-1)/n * M."""
    n = np.asarray(n, dtype=float)
    return np.where(n > 1, (n - 1.0) / n * message_bytes, 0.0)
