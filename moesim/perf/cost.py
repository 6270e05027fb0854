"""OpWork x HardwareSpec x CostMode -> OpCost (time, bound, provenance), vectorized.

Kernels: time = alpha + max(FLOP / (peak * eff_c), bytes / (hbm_bw * eff_m)) + launch  (roofline,
Williams et al. 2009; efficiencies and the fixed cost alpha from the calibration profile in
`calibrated` mode: moesim.perf.profile.reader.Profile.kernel_efficiency).
Collectives: alpha-beta per link class (Hockney); all-to-all runs NVLink and RDMA concurrently:
time = alpha + max(rdma_bytes / rdma_bw, nvlink_bytes / nvlink_bw) (moesim.perf.collectives, the
one definition the calibration fit uses too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.enums import BoundCode, CostMode, OpKind, Provenance, Stream, Tag
from moesim.perf import efficiency as E
from moesim.perf.collectives import a2a_wire_s, collective_terms, inter_node_allreduce_terms
from moesim.perf.fused_moe import MOE_FAMILY as FUSED_FAMILY
from moesim.perf.fused_moe import fuse_routed, fused_call, price_call
from moesim.perf.smscale import at_fitted_sms, bounded, fitted_sms
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import AttentionKind, ModelSpec
from moesim.workload.comm import ring_allreduce_bytes
from moesim.workload.ops import OpWork
from moesim.workload.shapes import QuantShape


@dataclass
class OpCost:
    name: str
    stream: Stream
    stage: int
    time_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    network_s: np.ndarray
    bound: np.ndarray  # BoundCode values
    provenance: str
    flops: np.ndarray
    bytes: np.ndarray
    sm_share: float = 0.0
    kind: OpKind = OpKind.GEMM
    tags: frozenset = frozenset()  # the op's moesim.enums.Tag set (schedule and imbalance read it)

    def bound_name(self, i: int = 0) -> str:
        return BoundCode(int(np.atleast_1d(self.bound)[i])).bound.value


def _family(op: OpWork, model: ModelSpec) -> str:
    if op.shape.kernel_family:  # an op with its own kernel family (the FP8 quant pass, a fused MoE call)
        return op.shape.kernel_family
    if op.kind == OpKind.ATTENTION:
        if model.attention.kind == AttentionKind.MLA:
            return "mla_prefill" if op.shape.prefill else "mla_decode"
        return "attention"
    return {
        OpKind.GEMM: "gemm",
        OpKind.GROUPED_GEMM: "grouped_gemm",
        OpKind.BMM: "bmm",
        OpKind.ELEMENTWISE: "elementwise",
    }.get(op.kind, "elementwise")


def _quant_cta_s(profile, shape: QuantShape):
    """CTAs x cta_ns of the quant model a GEMM fit subtracted from its linear-op rows (SGLang's
    per_token_group_quant_8bit, moesim.calibration.fit.act_quant), so the step adds back what the fit took
    out: a linear op is priced once; 0 for a profile without one."""
    aq = profile.gemm_act_quant() if hasattr(profile, "gemm_act_quant") else None
    cta_ns = ((aq or {}).get("params") or {}).get("cta_ns")
    if cta_ns is None:
        return 0.0
    return E.quant_ctas(shape.m, shape.k) * float(cta_ns) * 1e-9


@dataclass
class _Terms:
    """A kernel's pricing terms (`CostModel._kernel_terms`): efficiencies on the FLOP and byte times,
    the fitted fixed cost alpha_s (both sides, unscaled by the work), the launch gap (s), routed
    tiles' padding, SGLang's quant per-CTA floor (s, `_quant_cta_s`), measured times (s) or None."""

    ec: object = 1.0
    em: object = 1.0
    alpha: object = 0.0
    launch: float = 0.0
    prov: str = Provenance.ROOFLINE.value
    pad: object = None
    floor: object = 0.0
    measured: object = None


class CostModel:
    """Prices ops on one hardware in one cost mode. `profile` is a calibration Profile or None."""

    def __init__(
        self,
        hw: HardwareSpec,
        model: ModelSpec,
        mode: CostMode = CostMode.ROOFLINE,
        profile=None,
        cuda_graphs: bool = True,
    ):
        self.hw, self.model, self.mode = hw, model, CostMode(mode)
        self.cuda_graphs = cuda_graphs
        self.profile = profile if self.mode != CostMode.ROOFLINE else None
        self.notes: list[str] = []
        self._at_fit = None  # the same pricing at the profile's fitted SM count (kernel)

    # ------------------------------------------------------------------ kernels
    def kernel(self, op: OpWork) -> OpCost:
        """The kernel's OpCost; on a GPU with another SM count than the profile's fit, bounded by the
        fitted GPU's (moesim.perf.smscale)."""
        cost = self._kernel(op)
        fit = fitted_sms(self.profile)
        if fit is None or fit == self.hw.sms:
            return cost
        if self._at_fit is None:
            hw_fit, prof_fit = at_fitted_sms(self.hw, self.profile)
            self._at_fit = CostModel(hw_fit, self.model, self.mode, prof_fit, self.cuda_graphs)
        return bounded(cost, self._at_fit._kernel(op), more=self.hw.sms > fit)

    def _kernel(self, op: OpWork) -> OpCost:
        hw = self.hw
        flops = np.asarray(op.flops, float)
        nbytes = np.asarray(op.bytes_total, float)
        shape = np.broadcast(flops, nbytes).shape
        flops, nbytes = np.broadcast_to(flops, shape), np.broadcast_to(nbytes, shape)
        t = self._kernel_terms(op) if self.mode != CostMode.ROOFLINE else _Terms()
        prov = t.prov
        compute_s = t.alpha + flops / (hw.peak_flops(op.dtype) * np.asarray(t.ec, float))
        if t.pad is not None and prov == Provenance.ROOFLINE.value:  # no fitted kernel: pad the peak math
            compute_s = compute_s * t.pad
        memory_s = t.alpha + np.maximum(nbytes / (hw.hbm_bw_Bps * np.asarray(t.em, float)), t.floor)
        time_s = np.maximum(compute_s, memory_s) + t.launch
        if t.measured is not None:
            measured = np.broadcast_to(np.asarray(t.measured, float), time_s.shape)
            ok = np.isfinite(measured)
            if ok.any():  # a measured kernel duration, plus the same inter-kernel launch gap
                time_s = np.where(ok, measured + t.launch, time_s)
                prov = Provenance.MEASURED.value if ok.all() else prov + "+measured"
        bound = np.where(compute_s >= memory_s, BoundCode.COMPUTE, BoundCode.MEMORY)
        bound = np.where(t.launch > np.maximum(compute_s, memory_s), 3, bound)
        present = np.asarray(op.present, float)
        return OpCost(op.name, op.stream, op.stage, time_s * present, compute_s * present, memory_s * present,
                      np.zeros(shape), bound, prov, flops * present, nbytes * present, kind=op.kind)  # fmt: skip

    def _kernel_terms(self, op: OpWork) -> _Terms:
        """The calibrated (or measured) terms of a kernel: the profile's efficiencies and fixed cost
        where it covers the op's family, the launch gap, routed tiles' padding, measured times."""
        t = _Terms(launch=self.hw.kernel_launch_s)
        fam = _family(op, self.model)
        kshape = own = op.shape.as_kwargs()  # the profile's shape keywords
        if op.kind == OpKind.GROUPED_GEMM and Tag.ROUTED in op.tags and fam != FUSED_FAMILY:
            # routed token counts per expert are random: each group's last M tile is partly empty
            # but computed whole (the efficiencies were fitted on tile-aligned shapes)
            t.pad = E.routed_tile_padding(kshape["m"])
            kshape = {**kshape, "tile_pad": t.pad}
        if kshape and "dtype" not in kshape:  # the variant of the priced dtype (FP8 GEMM vs BF16 router)
            kshape = {**kshape, "dtype": op.dtype.value}
        if self.profile is not None:
            eff = self.profile.kernel_efficiency(fam, **kshape) if kshape or fam == "elementwise" else None
            if eff is None and fam == "quant":  # no quant table: a streaming elementwise kernel
                eff, t.floor = self.profile.kernel_efficiency("elementwise"), _quant_cta_s(self.profile, op.shape)
            if eff is not None:
                t.ec, t.em, t.alpha = eff
                t.prov = Provenance.FITTED.value
                t.launch = self.profile.launch_for(fam)
            if self.mode == CostMode.MEASURED and own:
                t.measured = self.profile.measured_time(fam, **own)
        if not self.cuda_graphs:  # eager mode: the host launches every kernel
            t.launch = max(t.launch, self.hw.kernel_launch_eager_s)
        return t

    # ------------------------------------------------------------------ the network stream
    def network(self, op: OpWork) -> OpCost:
        """An op of the network stream: an all-to-all (dispatch / combine; its backend is the `comm`
        mode on the op's shape) or a collective (all-reduce / all-gather), alpha-beta per link class."""
        hw = self.hw
        rdma = np.asarray(op.net_bytes_rdma, float)
        nvl = np.asarray(op.net_bytes_nvlink, float)
        group = np.asarray(op.group, float)
        achievable = self.mode != CostMode.ROOFLINE
        prov = Provenance.ROOFLINE.value
        if op.kind == OpKind.ALL_TO_ALL:
            alpha = np.where(rdma > 0, hw.rdma_latency_s, hw.nvlink_latency_s)
            rdma_bw, nvl_bw = hw.rdma_Bps(achievable), hw.nvlink_Bps(achievable)
            mode = op.shape.mode
            if self.profile is not None:
                terms = self._deepep_time(op, mode, rdma, nvl)
                if terms is not None:  # deepep_v2: alpha terms + link / SM copy rate (collectives)
                    a, wire = terms
                    return self._comm_cost(op, a + wire, a, rdma + nvl, Provenance.FITTED.value)
                params = self.profile.comm_params(mode, op.comm_op, op.shape.ep)
                if params is not None:
                    alpha, rdma_bw, nvl_bw = params
                    prov = Provenance.FITTED.value
            net = a2a_wire_s(rdma, nvl, rdma_bw, nvl_bw)  # no NVLink: all over the NIC
        else:
            msg = np.asarray(op.shape.msg_bytes, float)
            alpha, net, prov = self._collective(op.comm_op, group, msg, nvl + rdma, achievable)
        return self._comm_cost(op, np.asarray(net, float) + alpha, alpha, rdma + nvl, prov)

    def _collective(self, comm_op, group, msg, ring_bytes, achievable):
        """(alpha_s, wire_s, provenance) of an all-reduce / all-gather. Inside one NVLink domain:
        NCCL picks ring or one-shot/LL, the faster (NCCL tuning model;
        moesim.perf.collectives.collective_terms), or the profile's fitted entry. An all-reduce over
        several domains is hierarchical (collectives.inter_node_allreduce_terms): the single-domain
        NCCL all-reduce on the local ranks (its reduce-scatter + all-gather; no custom all-reduce,
        single-node only) plus the inter-node ring over the NICs (spec bandwidth and latency)."""
        hw = self.hw
        multi = (comm_op == "all_reduce") & (group > hw.domain_gpus)
        extra_a = extra_w = 0.0
        if np.any(multi):
            local = np.minimum(group, float(hw.domain_gpus))
            ring_bytes = np.where(multi, ring_allreduce_bytes(local, msg), ring_bytes)
            nic = hw.rdma_Bps(achievable)  # scale-out per GPU, all its NICs (rdma_bw_GBps)
            extra_a, extra_w = inter_node_allreduce_terms(group, hw.domain_gpus, msg, nic, hw.rdma_latency_s)
            group = local
        inside = group <= hw.domain_gpus
        bw = np.where(inside & (hw.nvlink_bw_GBps > 0), max(hw.nvlink_Bps(achievable), 1.0), hw.rdma_Bps(achievable))
        lat = np.where(inside, hw.nvlink_latency_s, hw.rdma_latency_s)
        alpha, wire = collective_terms(comm_op, group, msg, ring_bytes, lat, bw)
        prov = Provenance.ROOFLINE.value
        timed = None if self.profile is None else self.profile.collective_time(comm_op, group, msg, ring_bytes, bw)
        if timed is not None and np.any(multi):  # NCCL only where the group spans nodes
            nccl = self.profile.collective_time(comm_op, group, msg, ring_bytes, bw, custom=False)
            timed = (np.where(multi, nccl[0], timed[0]), np.where(multi, nccl[1], timed[1]))
        if timed is not None:  # collective_v2 / nccl_proto: fitted per-step latency, NCCL or the engine's custom AR
            return timed[0] + extra_a, timed[1] + extra_w, Provenance.FITTED.value
        if self.profile is not None:
            params = self.profile.collective_params(comm_op)
            if params is not None:
                a0, eff = params
                alpha, bw = alpha + a0, bw * eff
                prov = Provenance.FITTED.value
        return alpha + extra_a, wire / bw + extra_w, prov

    def _deepep_time(self, op: OpWork, mode, rdma, nvl):
        """The profile's deepep_v2 (alpha_s, wire_s) of an all-to-all op, or None (other models)."""
        sh = op.shape
        return self.profile.comm_time(
            mode,
            op.comm_op,
            tokens=np.asarray(sh.tokens, float) * np.asarray(sh.moe_tp, float),
            rdma_bytes=rdma,
            nvl_bytes=nvl,
            ep=sh.ep,
            experts=sh.experts,
            msg_bytes=sh.msg_bytes,
            sms=sh.sms,
            # a fitted host floor (host-paced benchmark loop) applies where the host paces the call:
            # eager mode, and DeepEP normal always (its dispatch waits on the host for receive counts);
            # LL calls replayed in a CUDA graph have none
            host_floor=(not self.cuda_graphs) or "normal" in str(getattr(mode, "value", mode)),
        )

    def _comm_cost(self, op: OpWork, total, alpha, nbytes, prov: str) -> OpCost:
        """OpCost of a comm op from its time and latency part (the rest is network time)."""
        shape = np.broadcast(total, alpha).shape
        total = np.broadcast_to(np.asarray(total, float), shape)
        alpha = np.broadcast_to(np.asarray(alpha, float), shape)
        net = total - alpha
        present = np.asarray(op.present, float)
        time_s = total * present
        bound = np.where(alpha > net, BoundCode.LATENCY, BoundCode.NETWORK)
        z = np.zeros(shape)
        return OpCost(
            op.name,
            op.stream,
            op.stage,
            time_s,
            z,
            z,
            net * present,
            bound,
            prov,
            z,
            np.asarray(nbytes, float) * present * np.ones(shape),
            # SMs held where the op runs (an all-to-all absent on some configurations holds none there)
            sm_share=op.sm_share * present if op.sm_share and np.any(present != 1.0) else op.sm_share,
            kind=op.kind,
        )

    def cost(self, op: OpWork) -> OpCost:
        if fused_call(self, op):  # one fused MoE call (moesim.perf.fused_moe): on the kernel's own work
            c = price_call(self, op)
        else:
            c = self.network(op) if op.stream == Stream.COMM else self.kernel(op)
        c.tags = op.tags
        return c

    def costs(self, ops: list[OpWork]) -> list[OpCost]:
        """Each op's cost; a run of routed-expert ops as one fused MoE call where the profile's engine
        runs one (moesim.perf.fused_moe)."""
        return fuse_routed(self, ops, [self.cost(o) for o in ops])
