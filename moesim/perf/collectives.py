"""alpha-beta time of a collective: the one definition the cost model (moesim.perf.cost) prices with
and the calibration fit (moesim.calibration.fit.comm) fits, so a fitted alpha or bandwidth means
the same thing on both sides. Vectorized numpy; SI units (s, bytes, bytes/s).

Hockney (1994): a message of n bytes over a link takes alpha + n / beta. EP all-to-all (DeepEP,
pplx-kernels, NCCL) sends over NVLink and RDMA concurrently, so the slower link sets the time:

    t_a2a = alpha + max(rdma_bytes / rdma_Bps, nvlink_bytes / nvlink_Bps)

All-reduce / all-gather (NCCL tuning model): ring = 2(n-1) latency steps for all-reduce, n-1 for
all-gather, with the ring bytes on the wire; one-shot (LL) = 2 steps / 1 step with (n-1) M on the
wire for all-reduce (the all-gather's wire bytes are the ring's); NCCL picks the faster one.
"""

from __future__ import annotations

import numpy as np

from moesim.perf.models.custom_ar import NAME as CUSTOM_AR
from moesim.perf.models.nccl_proto import NAME as NCCL_PROTO
from moesim.workload.comm import DEEPEP_NORMAL_SMS  # noqa: F401  (re-exported for the reader)


def hockney(alpha_s, nbytes, Bps):
    """alpha + bytes / bandwidth (Hockney's alpha-beta model of one transfer)."""
    return alpha_s + np.asarray(nbytes, float) / Bps


def a2a_wire_s(rdma_bytes, nvl_bytes, rdma_Bps, nvl_Bps):
    """Wire time of an all-to-all: max(rdma_bytes / rdma_Bps, nvlink_bytes / nvlink_Bps), both links
    in flight at once; without NVLink (bandwidth <= 0) the NVLink bytes go over the NIC too."""
    nvl_Bps = np.where(np.asarray(nvl_Bps, float) > 0, nvl_Bps, rdma_Bps)
    return np.maximum(np.asarray(rdma_bytes, float) / rdma_Bps, np.asarray(nvl_bytes, float) / nvl_Bps)


def alpha_beta_a2a(alpha_s, rdma_bytes, nvl_bytes, rdma_Bps, nvl_Bps):
    """EP all-to-all: time = alpha + max(rdma_bytes / rdma_Bps, nvlink_bytes / nvlink_Bps)."""
    return alpha_s + a2a_wire_s(rdma_bytes, nvl_bytes, rdma_Bps, nvl_Bps)


def ring_steps(op: str, n):
    """Latency steps of a ring collective over n ranks: 2(n-1) for all_reduce, n-1 for all_gather."""
    n = np.asarray(n, float)
    return 2.0 * (n - 1.0) if op == "all_reduce" else (n - 1.0)


def ring_one_shot_candidates(op: str, n, message_bytes, ring_bytes, latency_s):
    """[("ring", alpha_s, wire_bytes), ("one-shot", alpha_s, wire_bytes)] of an all-reduce /
    all-gather over n ranks (module docstring): ring = ring_steps(op, n) latency steps and the ring
    bytes; one-shot = 2 steps (all-reduce: every rank reads its n-1 peers' messages, the shape of
    the engines' custom one-shot all-reduce, custom_all_reduce.cuh) / 1 step (all-gather) with
    (n-1) M / the ring bytes on the wire."""
    n = np.asarray(n, float)
    a_ring = ring_steps(op, n) * latency_s
    if op == "all_reduce":
        a_one, one_bytes = 2.0 * latency_s, (n - 1.0) * np.asarray(message_bytes, float)
    else:
        a_one, one_bytes = latency_s, ring_bytes
    return [("ring", a_ring, ring_bytes), ("one-shot", a_one, one_bytes)]


def collective_terms(op: str, n, message_bytes, ring_bytes, latency_s, Bps):
    """(alpha_s, wire_bytes) of an all-reduce / all-gather over n ranks: the faster of ring and
    one-shot (module docstring; ring_one_shot_candidates); time = alpha + wire_bytes / Bps."""
    (_, a_ring, ring_bytes), (_, a_one, one_bytes) = ring_one_shot_candidates(
        op, n, message_bytes, ring_bytes, latency_s
    )
    use_one = a_one + one_bytes / Bps < a_ring + ring_bytes / Bps
    return np.where(use_one, a_one, a_ring), np.where(use_one, one_bytes, ring_bytes)


def inter_node_allreduce_terms(n, domain, message_bytes, nic_Bps, nic_latency_s):
    """(alpha_s, wire_s) of the inter-node part of a hierarchical all-reduce over n > domain ranks
    (2D / hierarchical all-reduce: intra-node reduce-scatter over NVLink, an all-reduce of each
    rank's 1/local shard across the nodes over its own NIC (one ring per rail), intra-node
    all-gather; NCCL's ring over nodes sends each shard through the NICs the same way, tuning.cc:
    the net hops carry the latency hwLat[NET], the NVLink hops the intra latency). The intra-node
    halves are the single-node all-reduce of the full message on local = domain ranks (its
    reduce-scatter + all-gather); this adds the inter-node ring over `nodes` ranks:
        2 (nodes - 1) steps x the NIC latency (hardware spec rdma_latency_us)
        + 2 (nodes - 1) / nodes x (M / local) bytes over one NIC per GPU.
    Zero where n <= domain (one NVLink domain)."""
    n = np.asarray(n, float)
    local = np.minimum(n, float(domain))
    nodes = np.ceil(n / local)
    steps = 2.0 * (nodes - 1.0)
    shard = np.asarray(message_bytes, float) / local
    return steps * nic_latency_s, steps / nodes * shard / nic_Bps


# NCCL's three protocols (NCCL src/graph/tuning.cc: every (algorithm, protocol) has a latency
# baseLat + nsteps * hwLat and a bus bandwidth; LL sends 8 B of flag per 8 B of data, LL128 8 B per
# 120 B, Simple whole chunks behind a fence), and NVLS (NVSwitch multicast reduction, SM90+).
NCCL_PROTOCOLS = ("ll", "ll128", "simple")
NVLS_DTYPES = ("fp16", "bf16", "fp32")  # multimem.ld_reduce reduces 16/32-bit floats; no 8-bit types


def nccl_proto_terms(p: dict, op: str, n, message_bytes, ring_bytes, link_Bps, nvls=True):
    """(alpha_s, wire_s) of an NCCL all-reduce / all-gather (model `nccl_proto`): NCCL's tuning model
    (tuning.cc, ncclTopoGetAlgoTime: time = latency + bytes / bandwidth per algorithm and protocol,
    the smallest predicted time picked), with fitted per-protocol latencies and bandwidths:

        ring, protocol k:  (k_us + k_step_us * steps(n)) + ring_bytes / (k_bw_frac * link)
        NVLS (all-reduce): nvls_us + message_bytes / (nvls_bw_frac * link), where `nvls` (a reduction
                           dtype multimem reduces) and n >= nvls_min_gpus (NCCL: none at <= 2 GPUs)
        NVLS (all-gather): nvls_us + ring_bytes / (nvls_bw_frac * link): each rank multicasts its
                           1/n share once (multimem.st, the switch replicates it) and receives the
                           other (n-1)/n of the message; single-node only (NCCL >= 2.19, enqueue.cc)

    `link` is the achievable link the caller prices with, so a what-if on it moves every segment.
    The switch points (LL -> LL128 -> Simple -> NVLS) are where the fitted segments cross."""
    return fastest_of(nccl_proto_candidates(p, op, n, message_bytes, ring_bytes, link_Bps, nvls))[:2]


NCCL_PROTOCOL_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}  # NCCL's names (nccl.h NCCL_PROTO)


def nccl_proto_candidates(p: dict, op: str, n, message_bytes, ring_bytes, link_Bps, nvls=True):
    """[(algorithm, alpha_s, wire_s)] nccl_proto_terms picks the fastest of: "LL", "LL128",
    "Simple" (ring with that protocol) and "NVLS" (wire_s inf where NVLS does not apply)."""
    n = np.asarray(n, float)
    steps = ring_steps(op, n)
    link = np.asarray(link_Bps, float)
    out = [
        (
            NCCL_PROTOCOL_NAMES[k],
            (float(p[f"{k}_us"]) + float(p[f"{k}_step_us"]) * steps) * 1e-6,
            np.asarray(ring_bytes, float) / (float(p[f"{k}_bw_frac"]) * link),
        )
        for k in NCCL_PROTOCOLS
    ]
    if p.get("nvls_us") is not None:
        ok = np.asarray(nvls, bool) & (n >= float(p.get("nvls_min_gpus", 8)))
        nvls_bytes = message_bytes if op == "all_reduce" else ring_bytes
        wire = np.where(ok, np.asarray(nvls_bytes, float) / (float(p["nvls_bw_frac"]) * link), np.inf)
        out.append(("NVLS", np.full(np.shape(n), float(p["nvls_us"]) * 1e-6), wire))
    return out


def custom_ar_terms(p: dict, n, message_bytes, ring_bytes, link_Bps):
    """(alpha_s, wire_s) of an engine's custom all-reduce in CUDA graphs (model `custom_ar`; vLLM /
    SGLang custom_all_reduce.cuh, TRT-LLM customAllReduceKernels.cu): the faster of
        one-shot: every rank reads its n-1 peers' buffers and reduces locally:
                  oneshot_us + oneshot_peer_us * (n-1) + (n-1) * message / (oneshot_bw_frac * link)
        two-shot: reduce-scatter then all-gather through peer buffers (ring bytes on the wire):
                  twoshot_us + twoshot_peer_us * (n-1) + ring_bytes / (twoshot_bw_frac * link)
    (the peer terms: one flag barrier signal per peer)."""
    return fastest_of(custom_ar_candidates(p, n, message_bytes, ring_bytes, link_Bps))[:2]


def custom_ar_candidates(p: dict, n, message_bytes, ring_bytes, link_Bps):
    """[(algorithm, alpha_s, wire_s)] custom_ar_terms picks the fastest of: "one-shot", "two-shot"."""
    n = np.asarray(n, float)
    link = np.asarray(link_Bps, float)
    out = []
    for k, name, wire_bytes in (
        ("oneshot", "one-shot", (n - 1.0) * np.asarray(message_bytes, float)),
        ("twoshot", "two-shot", ring_bytes),
    ):
        alpha = (float(p[f"{k}_us"]) + float(p[f"{k}_peer_us"]) * (n - 1.0)) * 1e-6
        out.append((name, alpha, np.asarray(wire_bytes, float) / (float(p[f"{k}_bw_frac"]) * link)))
    return out


def collective_entry_terms(e: dict, op: str, n, message_bytes, ring_bytes, link_Bps, custom=True):
    """(alpha_s, wire_s) priced by a timed collectives entry (`nccl_proto`) and
    its `custom` backends: a custom all-reduce replaces NCCL up to its `max_bytes` where faster
    (the engine's size switch). NVLS where a nccl_proto entry allows it: engines all-reduce
    16-bit activations. custom=False: NCCL only (the engines' custom all-reduce is single-node:
    vLLM / SGLang CustomAllreduce is disabled when the group spans nodes)."""
    return collective_entry_choice(e, op, n, message_bytes, ring_bytes, link_Bps, "auto" if custom else "nccl")[:2]


COLLECTIVE_LIBRARIES = ("auto", "nccl", "custom")


def collective_entry_choice(e: dict, op: str, n, message_bytes, ring_bytes, link_Bps, library="auto"):
    """(alpha_s, wire_s, algorithm) of collective_entry_terms with the library chosen: "auto" (the
    engine's switch: a custom backend where the message is <= its max_bytes and it is faster, else
    NCCL), "nccl" (the entry alone) or "custom" (the custom backends alone; wire_s inf above their
    max_bytes, where the engine does not run them). `algorithm`: a str array naming what priced
    each element, "nccl LL" / "nccl LL128" / "nccl Simple" / "nccl NVLS" (nccl_proto),
    "custom one-shot" / "custom two-shot" (custom_ar)."""
    backends = [(e, None)] if library != "custom" else []
    if library != "nccl":
        backends += [(c, c["max_bytes"]) for c in (e.get("custom") or {}).values()]
    msg = np.asarray(message_bytes, float)
    best = None
    for ce, cap in backends:
        model = ce.get("model", e["model"])
        a, w, name = fastest_of(_entry_candidates(ce["params"], model, op, n, msg, ring_bytes, link_Bps))
        name = np.char.add("custom " if model == CUSTOM_AR else "nccl ", name)
        if best is None:
            if cap is not None:  # custom only: not run above its size limit
                w = np.where(msg <= float(cap), w, np.inf)
            best = (a, w, name)
            continue
        use = (msg <= float(cap)) & (a + w < best[0] + best[1])
        best = tuple(np.where(use, x, y) for x, y in zip((a, w, name), best))
    if best is None:
        raise ValueError(f"collectives.{op}: no {library} backend in the entry")
    return best


def _entry_candidates(p: dict, model: str, op: str, n, message_bytes, ring_bytes, link_Bps):
    """[(algorithm, alpha_s, wire_s)] of one timed entry or custom backend (collective_entry_choice)."""
    if model == NCCL_PROTO:
        return nccl_proto_candidates(p, op, n, message_bytes, ring_bytes, link_Bps)
    if model == CUSTOM_AR:
        return custom_ar_candidates(p, n, message_bytes, ring_bytes, link_Bps)
    raise ValueError(f"collectives: model {model!r} is not a timed collective ({NCCL_PROTO}, {CUSTOM_AR})")


def _fastest(alphas, wires):
    """(alpha, wire) of the candidate with the smallest alpha + wire, per element."""
    return fastest_of([(str(i), a, w) for i, (a, w) in enumerate(zip(alphas, wires))])[:2]


def fastest_of(candidates):
    """(alpha, wire, name) of the (name, alpha, wire) candidate with the smallest alpha + wire, per
    element (ties: the first listed)."""
    names, alphas, wires = zip(*candidates)
    shape = np.broadcast_shapes(*[np.shape(a) for a in alphas], *[np.shape(w) for w in wires])
    a = np.stack([np.broadcast_to(x, shape) for x in alphas])
    w = np.stack([np.broadcast_to(x, shape) for x in wires])
    k = np.argmin(a + w, axis=0)
    pick = k[None]
    return np.take_along_axis(a, pick, 0)[0], np.take_along_axis(w, pick, 0)[0], np.asarray(names)[k]


def by_ep_params(knots: dict, ep, nominal: dict | None = None):
    """(alpha_s, rdma_Bps, nvlink_Bps) for per-EP alpha-beta knots: alpha and time per byte
    piecewise-linear in log2(EP) between measured EPs (clamped outside); NVLink bandwidth from the
    knots whose traffic stays inside the domain.

    Bandwidth knots are fractions of the nominal link of the GPU they were measured on
    (`rdma_frac_nominal` / `nvlink_frac_nominal` lists) times `nominal` (the live spec's nominal
    {"rdma": Bps, "nvlink": Bps}), so a what-if on a link moves the time (issue 14); without
    fractions or `nominal`, the absolute `*_GBps` knots."""
    x = np.log2(np.asarray(ep, float))
    kx = np.log2(np.asarray(knots["ep"], float))
    alpha = np.interp(x, kx, np.asarray(knots["alpha_us"], float)) * 1e-6
    out = []
    for link in ("rdma", "nvlink"):
        fr = knots.get(f"{link}_frac_nominal")
        live = (nominal or {}).get(link, 0.0)
        if fr is not None and live > 0:
            vals = [None if f is None else float(f) * live for f in fr]
        else:
            vals = [None if b is None else float(b) * 1e9 for b in knots[f"{link}_GBps"]]
        k = [i for i, b in enumerate(vals) if b is not None]
        # interpolate time per byte (1/bandwidth), the quantity that adds
        out.append(1.0 / np.interp(x, kx[k], [1.0 / vals[i] for i in k]) if k else np.full_like(x, 1e30))
    return alpha, out[0], out[1]


def deepep_ll_sms(experts, device_sms):
    """Blocks DeepEP's low-latency kernels launch: ceil(E / ceil(E / SMs)) (internode_ll.cu:
    num_warp_groups = ceil_div(num_experts, num_device_sms); num_sms = ceil_div(num_experts,
    num_warp_groups)), i.e. one SM per expert up to the GPU's SM count."""
    e = np.maximum(np.asarray(experts, float), 1.0)
    return np.ceil(e / np.ceil(e / float(device_sms)))


def rdma_node_share(p: dict, nodes):
    """Multi-node RDMA rate of a deepep_v2 entry relative to rdma_frac_nominal x NIC. With measured
    knots (`rdma_knot_nodes`, `rdma_knot_frac`: the NIC fraction the rows reach at each node count;
    time per byte interpolated in log2(nodes), clamped outside) the rate is that fraction; else the
    smooth 1 / (1 + rdma_node_decay (nodes - 1)). H200 SGLang normal rows: ~48 GB/s per GPU at 4
    nodes, ~22 GB/s at 8 (a fabric property the knots carry, not a smooth function of nodes)."""
    nodes = np.maximum(np.asarray(nodes, float), 1.0)
    kn = p.get("rdma_knot_nodes")
    if kn:
        inv = np.interp(np.log2(nodes), np.log2(np.asarray(kn, float)), 1.0 / np.asarray(p["rdma_knot_frac"], float))
        return 1.0 / inv / float(p["rdma_frac_nominal"])
    return 1.0 / (1.0 + float(p.get("rdma_node_decay", 0.0)) * (nodes - 1.0))


# the work of one DeepEP call deepep_v2_terms prices (keywords, broadcast arrays): tokens sent, bytes over
# RDMA and NVLink, nodes spanned, experts, EP ranks and message bytes
DEEPEP_WORK = ("tokens", "rdma_bytes", "nvl_bytes", "nodes", "experts", "ep", "msg_bytes")


def _deepep_work(work: dict) -> dict:
    """`work` as float arrays, every DEEPEP_WORK keyword present and no other (TypeError naming them)."""
    missing, unknown = [k for k in DEEPEP_WORK if k not in work], sorted(set(work) - set(DEEPEP_WORK))
    if missing or unknown:
        raise TypeError(
            f"deepep_v2_terms: missing {missing or 'none'}, unknown {unknown or 'none'} (want {DEEPEP_WORK})"
        )
    return {k: np.asarray(work[k], float) for k in DEEPEP_WORK}


def deepep_v2_terms(p: dict, *, sms, rdma_Bps, nvl_Bps, host_floor=True, queued_s=0.0, **work):
    """(alpha_s, wire_s) of a DeepEP dispatch / combine (model `deepep_v2`, fitted on the H200
    SGLang tables); time = alpha_s + wire_s:

        t = alpha + (link^q + sm^q)^(1/q)
        alpha = alpha_us + alpha_node_us * log2(nodes) + alpha_expert_us * experts / ep
                + alpha_kB_us * msg_bytes / 1e3        (notify / handshake across nodes, per-expert
                                                        signalling, per-message buffer set-up)
        link  = max(rdma_bytes / (rdma_Bps * rdma_node_share(nodes)), nvl_bytes / nvl_Bps)
        sm    = (tokens * sm_token_us + (rdma_bytes + nvl_bytes) / sm_GBps) / sms
        t     = max(t, host_us - queued_s)      (optional host floor; queued_s: GPU work a benchmark
                                                queued ahead of its start event, which hides host time)

    The SM term is the copy engine the kernel is given: `sms` = the normal kernels' num_sms
    (--comm-sms) or the LL kernels' launch (deepep_ll_sms). The q-norm (q >= 1) blends the
    two limits near their knee (q -> inf: max). Rates in SI units; `p` holds the fitted params;
    `work`: the call's DEEPEP_WORK keywords."""
    w, us = _deepep_work(work), 1e-6
    nodes = np.maximum(w["nodes"], 1.0)
    alpha = (
        float(p["alpha_us"])
        + float(p["alpha_node_us"]) * np.log2(nodes)
        + float(p["alpha_expert_us"]) * w["experts"] / np.maximum(w["ep"], 1.0)
        + float(p["alpha_kB_us"]) * w["msg_bytes"] / 1e3
    ) * us
    rdma_Bps = rdma_Bps * rdma_node_share(p, nodes)
    link = a2a_wire_s(work["rdma_bytes"], work["nvl_bytes"], rdma_Bps, nvl_Bps)
    moved = w["rdma_bytes"] + w["nvl_bytes"]
    sm = (w["tokens"] * float(p["sm_token_us"]) * us + moved / (float(p["sm_GBps"]) * 1e9)) / np.maximum(
        np.asarray(sms, float), 1.0
    )
    q = float(p["q"])
    scale = np.maximum(np.maximum(link, sm), 1e-30)  # normalised q-norm: no overflow at large q
    wire = np.where(moved > 0, scale * ((link / scale) ** q + (sm / scale) ** q) ** (1.0 / q), 0.0)
    # host floor (optional): a host-paced benchmark loop overlaps the GPU work, so a call takes
    # max(host_us, GPU time) (vLLM's DeepEP high-throughput rows: a ~250 us floor up to ~512 tokens)
    # host_floor=False: a call replayed in a CUDA graph (LL decode) has no host pacing
    host = float(p.get("host_us") or 0.0) * us if host_floor else 0.0
    return (np.maximum(alpha, host - np.asarray(queued_s, float) - wire) if host > 0 else alpha), wire


def deepep_entry_terms(e: dict, *, nodes, sms, nominal: dict, host_floor=True, **kw):
    """(alpha_s, wire_s) priced by a deepep_v2 entry on a GPU whose nominal links are `nominal`
    ({"rdma": Bps, "nvlink": Bps}): RDMA as a fraction of the live NIC; the intranode rate is the
    absolute one the kernel reached, capped by the live NVLink. An `intranode` sub-entry (DeepEP
    runs its intranode kernels when every rank is in one NVLink domain: Buffer.dispatch /
    combine with num_rdma_ranks == 1) prices single-node calls. `kw`: deepep_v2_terms' shape args."""
    nodes = np.asarray(nodes, float)

    def terms(p):
        nvl, live = float(p["nvlink_GBps"]) * 1e9, nominal.get("nvlink", 0.0)
        rdma = float(p["rdma_frac_nominal"]) * max(nominal.get("rdma", 0.0), 1.0)
        nvl_live = min(nvl, live) if live > 0 else nvl
        return deepep_v2_terms(p, nodes=nodes, sms=sms, rdma_Bps=rdma, nvl_Bps=nvl_live, host_floor=host_floor, **kw)

    a, w = terms(e["params"])
    if e.get("intranode"):
        ai, wi = terms(e["intranode"]["params"])
        a, w = np.where(nodes <= 1, ai, a), np.where(nodes <= 1, wi, w)
    return a, w
