"""DeepEP dispatch / combine fit, model `deepep_v2` (moesim.perf.collectives.deepep_v2_terms, the
function the cost model prices with): alpha terms (per call, per node doubling, per local expert,
per message kB), the link term (RDMA as a fraction of the measuring GPU's nominal NIC; NVLink as
the absolute rate the kernel reached: DeepEP LL inside a node is bounded by its own copy loop, not
by the nominal NVLink) and the SM copy term (per token and per byte, over the SMs the kernel runs
on: --comm-sms for the normal kernels, the LL launch's one SM per expert), blended by a q-norm.

Bytes: moesim.workload.comm under the benchmark's routing (moesim.calibration.routing), the same
accounting the cost model uses. Cross-validation holds out whole shapes (hidden, top-k, experts,
EP, SMs: every token count of one together): `cv` in 10 folds (the kernel families' scheme, fit.gemm
shape_folds), `cv.leave_one_shape_out` one shape at a time. Rows of glitched collector cases have
left before (fit.comm.a2a_data, comm_bench.token_glitches).
"""

from __future__ import annotations

import numpy as np

from moesim.calibration.fit.comm import A2AData, _residuals
from moesim.calibration.fit.comm_bench import GLITCH_RULE, bf16_dispatch, combine_queued_s
from moesim.calibration.fit.cv import cv_summary, lsq
from moesim.calibration.fit.data import id_span, sources_text
from moesim.calibration.fit.gemm import CV_FOLDS, shape_folds
from moesim.calibration.fit.peaks import Peaks
from moesim.calibration.fit.residual import err_stats
from moesim.perf.collectives import DEEPEP_NORMAL_SMS, deepep_ll_sms, deepep_v2_terms
from moesim.perf.profile import schema as S
from moesim.perf.profile.schema import round_sig as _r
from moesim.workload.comm import combine_bytes_per_token, dispatch_bytes_per_token

NAMES = ("alpha_us", "alpha_node_us", "alpha_expert_us", "alpha_kB_us", "rdma_frac_nominal", "nvlink_GBps")
NAMES += ("sm_GBps", "sm_token_us", "q", "rdma_node_decay", "host_us")
LO = np.array([0.0, 0.0, 0.0, 0.0, 0.02, 10.0, 0.5, 0.0, 1.0, 0.0, 0.0])
HI = np.array([500.0, 500.0, 10.0, 50.0, 1.0, 2000.0, 2000.0, 100.0, 16.0, 10.0, 5000.0])
STARTS = (
    [10.0, 10.0, 0.1, 0.5, 0.5, 300.0, 5.0, 0.5, 4.0, 0.0, 0.0],
    [30.0, 20.0, 0.05, 1.0, 0.8, 200.0, 20.0, 2.0, 2.0, 0.2, 0.0],
    [10.0, 20.0, 0.1, 0.2, 0.3, 300.0, 2.0, 0.1, 8.0, 0.05, 0.0],
)
HOST_GAIN = 0.05  # the host floor is a structural choice: kept where it cuts the all-rows cost by 5 %
SHAPE_KEYS = ["hidden", "topk", "experts", "ep", "sms"]
SMALL_TOKENS = 64  # the decode-sized subset of the cv blocks: 1-64 tokens per rank


class DeepEPRows:
    """The per-row inputs of deepep_v2_terms for one (mode, op) table."""

    def __init__(self, ad: A2AData, mode: str, op: str, peaks: Peaks, pins: dict | None = None, host: bool = False):
        d = ad.rows
        col = lambda c, default: np.where(np.isfinite(d[c].values.astype(float)), d[c].values.astype(float), default)  # noqa: E731
        self.t, self.rdma, self.nvl = ad.t, ad.rdma_bytes, ad.nvl_bytes
        self.tokens = d.tokens.values.astype(float)
        self.hidden = col("hidden", 7168.0)
        self.experts = col("experts", 256.0)
        self.ep = d.ep.values.astype(float)
        self.nodes = np.maximum(self.ep / col("gpus_per_node", 8.0), 1.0)
        fp8 = (op == "dispatch") & ~bf16_dispatch(d)  # comm_bench: the vLLM collector dispatches BF16
        self.msg = np.array(
            [(dispatch_bytes_per_token if f else combine_bytes_per_token)(int(h)) for f, h in zip(fp8, self.hidden)]
        )
        # GPU work the harness queued ahead of the timer, hiding host time (comm_bench.combine_queued_s)
        self.queued = combine_queued_s(d, mode, op, self.rdma + self.nvl, peaks.hbm_Bps)
        ll = deepep_ll_sms(self.experts, peaks.sms)
        self.sms = ll if mode == "deepep-ll" else col("sms", float(DEEPEP_NORMAL_SMS))
        self.r_nom = peaks.rdma_Bps or 50e9
        keys = np.stack([col(c, -1.0) if c != "sms" else self.sms for c in SHAPE_KEYS], axis=1)
        self.shape_id = np.unique(keys, axis=0, return_inverse=True)[1].ravel()
        # the NIC fraction per measured node count (rows at >= 2 multi-node counts): knots, replacing
        # rdma_frac_nominal (pinned to 1) and the smooth decay (pinned to 0); collectives.rdma_node_share
        multi = np.unique(self.nodes[self.nodes > 1])
        self.knot_nodes = multi if len(multi) >= 2 else np.array([])
        k = len(self.knot_nodes)
        pins = dict(pins or {}) | ({"rdma_frac_nominal": 1.0, "rdma_node_decay": 0.0} if k else {})
        pins = pins | ({} if host else {"host_us": 0.0})  # host floor only where asked for (_fit_one)
        # pinned params (not identified by these rows): lo = hi = the value
        self.lo, self.hi = np.concatenate([LO, np.full(k, 0.02)]), np.concatenate([HI, np.ones(k)])
        fp8 = np.array([dispatch_bytes_per_token(int(h)) for h in self.hidden]) if op == "dispatch" else self.msg
        self.starts = _starts(float(np.mean(self.msg / fp8)), 0.9e6 * float(np.min(self.t)) if host else 0.0, k)
        for name, v in pins.items():
            i = NAMES.index(name)
            self.lo[i] = self.hi[i] = float(v)

    def params(self, p) -> dict:
        """The deepep_v2 params of a fitted vector (knot lists where the rows have them)."""
        out = dict(zip(NAMES, (float(v) for v in p[: len(NAMES)])))
        if len(self.knot_nodes):
            out["rdma_knot_nodes"] = [float(v) for v in self.knot_nodes]
            out["rdma_knot_frac"] = [float(v) for v in p[len(NAMES) :]]
        return out

    def predict(self, p, idx):
        prm = self.params(p)
        a, w = deepep_v2_terms(
            prm,
            tokens=self.tokens[idx],
            rdma_bytes=self.rdma[idx],
            nvl_bytes=self.nvl[idx],
            nodes=self.nodes[idx],
            experts=self.experts[idx],
            ep=self.ep[idx],
            msg_bytes=self.msg[idx],
            sms=self.sms[idx],
            rdma_Bps=prm["rdma_frac_nominal"] * self.r_nom,
            nvl_Bps=prm["nvlink_GBps"] * 1e9,
            queued_s=self.queued[idx],
        )
        return a + w

    def fit(self, idx):
        res = lambda p: np.log(self.predict(p, idx) / self.t[idx])  # noqa: E731
        free = self.lo < self.hi
        if free.all():
            return lsq(res, self.starts, self.lo, self.hi)

        def expand(q):
            p = self.lo.copy()
            p[free] = q
            return p

        q = lsq(lambda q: res(expand(q)), [np.asarray(s)[free] for s in self.starts], self.lo[free], self.hi[free])
        return expand(q)


def _starts(unit: float, host_us: float, knots: int) -> list[list[float]]:
    """Optimizer starts: STARTS hold rates for FP8-dispatch messages; rows moving `unit` x those bytes
    a message (the vLLM collector's BF16 dispatch, comm_bench) start at the same physical point, so
    the bytes' unit does not change where the optimizer lands."""
    out = []
    for s in STARTS:
        s = list(s)
        s[NAMES.index("alpha_kB_us")] /= unit
        s[NAMES.index("nvlink_GBps")] *= unit
        s[NAMES.index("sm_GBps")] *= unit
        out.append(s[:-1] + [host_us] + [0.8] * knots)
    return out


def held_out(rows: DeepEPRows, parts) -> np.ndarray:
    """Relative errors (held-out prediction / measured - 1) per row, each part of `parts` (row
    indices) predicted by a fit on the others."""
    errs = np.full(len(rows.t), np.nan)
    everything = np.arange(len(rows.t))
    for test in parts:
        train = np.setdiff1d(everything, test)
        if len(train) < len(NAMES) + 2:
            continue
        errs[test] = rows.predict(rows.fit(train), test) / rows.t[test] - 1.0
    return errs


def shape_cv(rows: DeepEPRows) -> np.ndarray:
    """Leave-one-shape-out relative errors per row."""
    return held_out(rows, [np.flatnonzero(rows.shape_id == s) for s in np.unique(rows.shape_id)])


def grouped_cv(rows: DeepEPRows) -> tuple[np.ndarray, np.ndarray, int]:
    """(errors of CV_FOLDS folds of whole shapes, leave-one-shape-out errors, folds): the kernel
    families' two schemes (fit.gemm); with <= CV_FOLDS shapes both are one shape a fold."""
    parts = shape_folds(rows.shape_id, CV_FOLDS)
    errs = held_out(rows, parts)
    n_shapes = len(np.unique(rows.shape_id))
    return errs, (errs if n_shapes <= CV_FOLDS else shape_cv(rows)), len(parts)


def cv_block(errs, tokens, folds: int, loso=None, shapes: int = 0) -> dict:
    """cv summary plus p90 and the decode-sized subset (`small`: 1-64 tokens per rank); with
    `loso` (leave-one-shape-out errors of the same rows) its block as `leave_one_shape_out`."""
    out = cv_summary(errs, folds)
    st = err_stats(errs, tokens, SMALL_TOKENS)
    out["p90_abs_pct"], out["small"] = st["p90_abs_pct"], st["small"] | {"max_tokens": SMALL_TOKENS}
    if loso is not None:
        lo = err_stats(loso, tokens, SMALL_TOKENS)
        out["leave_one_shape_out"] = {"folds": shapes} | lo | {"small": lo["small"] | {"max_tokens": SMALL_TOKENS}}
    return out


def single_node_pins(parent: dict | None) -> dict:
    """Params single-node rows leave unidentified: no node growth of alpha or RDMA decay (not
    observable), and the RDMA share of the parent entry (e.g. the H800 DeepEP README fit) or 0.8."""
    frac = ((parent or {}).get("params") or {}).get("rdma_frac_nominal")
    frac = float(frac) if isinstance(frac, (int, float)) and 0 < frac <= 1 else 0.8
    return {"alpha_node_us": 0.0, "rdma_node_decay": 0.0, "rdma_frac_nominal": frac}


def parent_knots(parent: dict | None) -> dict:
    """The parent entry's NIC share per node count (rdma_knot_nodes / rdma_knot_frac), or {}."""
    p = (parent or {}).get("params") or {}
    kn, kf = p.get("rdma_knot_nodes"), p.get("rdma_knot_frac")
    if isinstance(kn, list) and isinstance(kf, list) and len(kn) == len(kf) > 0:
        return {"rdma_knot_nodes": [float(v) for v in kn], "rdma_knot_frac": [float(v) for v in kf]}
    return {}


def _subset(ad: A2AData, sel) -> A2AData:
    return A2AData(ad.rows[sel].reset_index(drop=True), ad.rdma_bytes[sel], ad.nvl_bytes[sel], ad.t[sel])


def fit_deepep_v2(ad: A2AData, mode: str, op: str, peaks: Peaks, gpu: str, parent: dict | None = None) -> dict | None:
    """The deepep_v2 entry of one (mode, op), or None with too few rows / shapes. `parent`: the
    entry the single-node pins take the RDMA share from. Tables with both single- and multi-node
    normal-mode rows get an `intranode` sub-entry: DeepEP runs other kernels inside one NVLink domain
    (Buffer.dispatch / combine: intranode kernels when num_rdma_ranks == 1, internode otherwise)."""
    nodes = np.maximum(ad.rows.ep.values.astype(float) / ad.rows.gpus_per_node.fillna(8.0).values.astype(float), 1.0)
    one = nodes <= 1
    main = intra = None
    if mode == "deepep-normal" and one.any() and (~one).any():  # LL: one kernel (internode_ll.cu)
        main = _fit_one(_subset(ad, ~one), mode, op, peaks, gpu, parent)
        intra = _fit_one(_subset(ad, one), mode, op, peaks, gpu, main or parent)
    if main is None or intra is None:
        return _glitch_note(_fit_one(ad, mode, op, peaks, gpu, parent), ad.glitches)
    errs = np.array(
        [r["cv_err_pct"] if r["cv_err_pct"] is not None else np.nan for r in main["residuals"] + intra["residuals"]]
    )
    loso = np.concatenate([main.pop("_loso"), intra.pop("_loso")])
    tokens = np.concatenate([ad.rows.tokens.values[~one], ad.rows.tokens.values[one]]).astype(float)
    main["intranode"] = {k: intra[k] for k in ("params", "rows", "cv", "cv_method", "note")}
    main["internode_cv"] = main["cv"]
    shapes = main["cv"]["leave_one_shape_out"]["folds"] + intra["cv"]["leave_one_shape_out"]["folds"]
    main["cv"] = cv_block(errs / 100.0, tokens, main["cv"]["folds"] + intra["cv"]["folds"], loso, shapes)
    main["cv_method"] = f"internode: {main['cv_method']}; intranode: {intra['cv_method']} (pooled in cv)"
    main["rows"] += intra["rows"]
    main["residuals"] += intra["residuals"]
    return _glitch_note(main, ad.glitches)


def _glitch_note(e: dict | None, glitches: int) -> dict | None:
    """The entry with its leave-one-shape-out errors dropped and the glitch rule's count in its note."""
    if e is None:
        return None
    e.pop("_loso", None)
    e["note"] += (
        f"; {glitches} rows of glitched collector cases left the fit and the CV (comm_bench.token_glitches: {GLITCH_RULE})"
    )
    return e


def _host_choice(ad: A2AData, mode: str, op: str, peaks: Peaks, pins: dict | None):
    """(rows, host floor?): the floor max(host_us, GPU time) where it cuts the all-rows cost by
    HOST_GAIN (a benchmark loop paced by the host; collectives.deepep_v2_terms), else none."""
    every, out = None, []
    for host in (False, True):
        rows = DeepEPRows(ad, mode, op, peaks, pins, host=host)
        every = np.arange(len(rows.t))
        if host and len(rows.t) < 3 * int(np.sum(rows.lo < rows.hi)):
            break  # too few rows for one more parameter
        cost = float(np.sum(np.log(rows.predict(rows.fit(every), every) / rows.t) ** 2))
        out.append((cost, rows, host))
    return out[1][1:] if len(out) > 1 and out[1][0] < (1.0 - HOST_GAIN) * out[0][0] else out[0][1:]


def _fit_one(ad: A2AData, mode: str, op: str, peaks: Peaks, gpu: str, parent: dict | None = None) -> dict | None:
    """The deepep_v2 entry of one (mode, op), or None with too few rows / shapes. `parent`: the
    entry the single-node pins take the RDMA share from. `_loso`: the leave-one-shape-out errors."""
    one_node = bool(np.all(DeepEPRows(ad, mode, op, peaks).nodes <= 1))
    pins = single_node_pins(parent) if one_node else None
    rows, host = _host_choice(ad, mode, op, peaks, pins)
    n_shapes = len(np.unique(rows.shape_id))
    method = f"{CV_FOLDS} folds of whole shapes ({', '.join(SHAPE_KEYS)}: every token count of one together)"
    if n_shapes < 3:  # e.g. the one intranode shape of a table: hold out token counts instead
        rows.shape_id = np.unique(rows.tokens, return_inverse=True)[1].ravel()
        n_shapes, method = len(np.unique(rows.shape_id)), f"{CV_FOLDS} folds of token counts (fewer than 3 shapes)"
    if len(rows.t) < 3 * int(np.sum(rows.lo < rows.hi)) or n_shapes < 3:
        return None
    everything = np.arange(len(rows.t))
    p = rows.fit(everything)
    errs, loso, folds = grouped_cv(rows)
    fitted = rows.predict(p, everything)
    prm = {k: _r(v, 5) for k, v in rows.params(p).items()}
    out = {
        "status": "fitted",
        "gpu": gpu,
        "model": S.DEEPEP_V2,
        "params": prm,
        "nominal": {"rdma_GBps": _r(rows.r_nom / 1e9), "nvlink_GBps": _r((peaks.nvlink_Bps or 0) / 1e9)},
        "rows": len(rows.t),
        "cv": cv_block(errs, rows.tokens, folds, loso, n_shapes),
        "cv_method": method + "; leave_one_shape_out: one at a time",
        "source": f"{len(rows.t)} rows ({id_span(ad.rows)}): " + sources_text(ad.rows),
        "residuals": _residuals(ad, fitted, errs),
        "note": _note(ad, rows, one_node, prm, parent),
        "_loso": loso,
    }
    if one_node:  # the fit's own rows say nothing about RDMA: its multi-node prices are derived, and say so
        out["internode"] = internode_derived(gpu, prm, parent)
        out["source"] += f"; {INTERNODE_SOURCE}"
    return out


INTERNODE_SOURCE = "nodes > 1: derived from this single-node fit + the NIC spec, no multi-node row measured"


def parent_origin(parent: dict | None) -> str:
    """Where the parent entry's numbers come from ('h800', 'h200.sglang'), or 'no parent'."""
    return str((parent or {}).get("inherited_from") or (parent or {}).get("gpu") or "no parent")


def internode_derived(gpu: str, prm: dict, parent: dict | None) -> dict:
    """Provenance of a single-node fit's multi-node prices (issue 27): status derived, from what."""
    knots = "rdma_knot_nodes" in prm
    share = (
        f"the per-node-count NIC share rdma_knot_frac at nodes {prm['rdma_knot_nodes']} carried from {parent_origin(parent)}"
        if knots
        else f"rdma_frac_nominal = {prm['rdma_frac_nominal']} pinned from {parent_origin(parent)}"
    )
    return {
        "status": "derived",
        "derived_from": "single-node fit + NIC spec",
        "source": (
            f"no row of this fit spans nodes: over nodes DeepEP normal / LL is priced with this fit's single-node "
            f"terms (alpha, SM copy, NVLink) and the RDMA link of hardware/{gpu}.yaml's NIC x {share}; "
            "alpha_node_us = rdma_node_decay = 0 (not observable). Not measured."
        ),
    }


def _note(ad: A2AData, rows: DeepEPRows, one_node: bool, prm: dict, parent: dict | None) -> str:
    """The entry's note (pinned single-node params and the parent's NIC knots go into `prm`)."""
    note = (
        "t = alpha_us + alpha_node_us*log2(nodes) + alpha_expert_us*experts/ep + alpha_kB_us*msg_kB "
        "+ (link^q + sm^q)^(1/q); link = max(rdma_bytes/(rdma_frac_nominal*NIC), nvl_bytes/nvlink_GBps) "
        "(nvlink_GBps absolute, capped by the live NVLink); sm = (tokens*sm_token_us + bytes/sm_GBps)/SMs "
        "(moesim.perf.collectives.deepep_v2_terms); CV holds out whole shapes"
    )
    if bf16_dispatch(ad.rows).any():
        note += (
            "; vLLM collector rows (moesim.calibration.fit.comm_bench): BF16 dispatch bytes, and the host floor of "
            "a combine row less the clone of the received activations queued ahead of its timer"
        )
    if len(rows.knot_nodes):
        note += (
            "; rdma_knot_nodes / rdma_knot_frac: the NIC fraction the rows reach at each measured node count "
            "(time per byte interpolated in log2 nodes; replaces rdma_frac_nominal x the smooth decay, pinned 1 / 0)"
        )
    if one_node:
        note += (
            "; single-node rows: alpha_node_us = rdma_node_decay = 0 (node growth not observable) and "
            f"rdma_frac_nominal = {prm['rdma_frac_nominal']} pinned from the parent entry ({parent_origin(parent)})"
        )
        knots = parent_knots(parent)
        if knots:  # the parent measured the NIC share per node count: the same library's, so carried
            prm.update(knots)
            note += "; rdma_knot_nodes / rdma_knot_frac carried from the parent (rows of one node cannot show them)"
    return note
