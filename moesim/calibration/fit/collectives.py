"""All-reduce / all-gather fit, model `nccl_proto` (moesim.perf.collectives.nccl_proto_terms, the
function the cost model prices with): NCCL's own tuning model (src/graph/tuning.cc) with fitted
numbers. Each protocol (LL, LL128, Simple) is a ring segment latency + steps(n) x per-step latency +
ring bytes / bandwidth; NVLS (NVSwitch multicast: all-reduce for the dtypes multimem reduces,
all-gather for any) a segment of its own, from the GPU count the rows show it at; NCCL runs the fastest. So time vs
bytes is piecewise (1 KB .. 1 GB): the switch points are where the fitted segments cross, not
constants taken from NCCL. Bandwidths are fractions of the achievable link (NVLink inside the domain).

Backends are fitted separately: NCCL is the entry; an engine's custom all-reduce in CUDA graphs
(`backend` = the table's kernel_source) is kept under `custom` (model `custom_ar`: one-shot or
two-shot, the faster) with `max_bytes`, the message size up to which the engine runs it (fitted:
above it the table's rows are NCCL's times, the engine's fallback).

Cross-validation leaves one shape (GPU count x message bytes; both dtypes and repeated rows of it)
out at a time; `small` is the decode-sized subset (messages <= SMALL_BYTES), `by_gpus` per count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moesim.calibration.fit.cv import lsq
from moesim.calibration.fit.data import usable
from moesim.calibration.fit.peaks import Peaks
from moesim.perf.collectives import NCCL_PROTOCOLS, NVLS_DTYPES, custom_ar_terms, nccl_proto_terms
from moesim.perf.profile import schema as S
from moesim.perf.profile.schema import round_sig as _r
from moesim.workload.comm import ring_allgather_bytes, ring_allreduce_bytes

SMALL_BYTES = 1 << 20  # decode-sized message: 64 tokens x 8192 hidden x 2 B (bf16)
RING_NAMES = [f"{k}_{f}" for k in NCCL_PROTOCOLS for f in ("us", "step_us", "bw_frac")]
NVLS_NAMES = ["nvls_us", "nvls_bw_frac"]
RING_LO, RING_HI = [0.0, 0.0, 0.005] * 3, [200.0, 50.0, 3.0] * 3
RING_STARTS = ([4.0, 0.5, 0.05, 6.0, 1.0, 0.3, 10.0, 1.5, 1.0], [2.0, 1.0, 0.1, 8.0, 0.5, 0.5, 20.0, 1.0, 1.0])
NVLS_STARTS = ([20.0, 1.0], [10.0, 0.8])
CUSTOM_NAMES = [f"{k}_{f}" for k in ("oneshot", "twoshot") for f in ("us", "peer_us", "bw_frac")]
CUSTOM_LO, CUSTOM_HI = [0.0, 0.0, 0.01] * 2, [200.0, 50.0, 3.0] * 2
CUSTOM_START = [2.0, 0.1, 0.5, 4.0, 0.5, 0.8]


def _rows(df: pd.DataFrame, op: str) -> pd.DataFrame:
    ok = usable(df, f"nccl_{op}", positive=False) & np.isfinite(df.bytes) & np.isfinite(df.ep) & (df.ep > 1)
    return df[ok].reset_index(drop=True)


class CollRows:
    """Per-row inputs of one backend's table: GPUs, message and ring bytes, the link, NVLS dtype."""

    def __init__(self, d: pd.DataFrame, op: str, peaks: Peaks):
        self.op = op
        self.n, self.msg = d.ep.values.astype(float), d.bytes.values.astype(float)
        self.t = d.time_s.values.astype(float)
        self.ring = (
            ring_allreduce_bytes(self.n, self.msg) if op == "all_reduce" else ring_allgather_bytes(self.n, self.msg)
        )
        inside = self.n <= peaks.domain_gpus
        self.link = np.where(inside, peaks.nvlink_eff_Bps or peaks.nvlink_Bps, peaks.rdma_eff_Bps or peaks.rdma_Bps)
        dtype = d["dtype"].astype(str).str.lower().values if "dtype" in d else np.full(len(d), "bf16")
        # NVLS inside one NVSwitch domain: all-reduce where multimem reduces the dtype (16/32-bit floats;
        # rows without a dtype are taken as the engines' bf16); all-gather (multimem stores, no
        # reduction) for every dtype
        reducible = np.isin(dtype, NVLS_DTYPES + ("nan", "")) if op == "all_reduce" else np.ones(len(d), bool)
        self.nvls = reducible & inside
        self.shape_id = np.unique(np.stack([self.n, self.msg], 1), axis=0, return_inverse=True)[1].ravel()


def nccl_params(p, nvls_min: float | None) -> dict:
    out = dict(zip(RING_NAMES, (float(v) for v in p[:9])))
    if nvls_min is not None:
        out.update(dict(zip(NVLS_NAMES, (float(v) for v in p[9:11]))), nvls_min_gpus=nvls_min)
    return out


def _fit_nccl(r: CollRows, idx, nvls_min: float | None, starts=None):
    """Least squares (log time) of the protocol segments (+ NVLS) on rows `idx` (`starts`: a warm
    start, e.g. the all-rows fit for a CV fold)."""

    def pred(p, i):
        a, w = nccl_proto_terms(nccl_params(p, nvls_min), r.op, r.n[i], r.msg[i], r.ring[i], r.link[i], r.nvls[i])
        return a + w

    nv = nvls_min is not None
    lo, hi = RING_LO + ([0.0, 0.05] if nv else []), RING_HI + ([500.0, 5.0] if nv else [])
    starts = starts or [s + list(v) for s in RING_STARTS for v in (NVLS_STARTS if nv else [[]])]
    p = lsq(lambda p: np.log(pred(p, idx) / r.t[idx]), starts, np.array(lo), np.array(hi))
    return p, pred


def _nvls_choice(r: CollRows, op: str) -> float | None:
    """The GPU count from which NCCL runs NVLS, as the rows show it: none (no NVLS row), else the
    measured count > 2 (nvls.cc: no NVLS at <= 2 GPUs) with the lowest fit cost. All-reduce and
    all-gather (NCCL >= 2.19 runs single-node NVLS all-gather: enqueue.cc's algorithm loop)."""
    counts = np.unique(r.n[r.nvls & (r.n > 2)])
    if op not in ("all_reduce", "all_gather") or len(counts) == 0:
        return None
    every = np.arange(len(r.t))
    cost = {}
    for c in counts:
        p, pred = _fit_nccl(r, every, float(c))
        cost[float(c)] = float(np.sum(np.log(pred(p, every) / r.t) ** 2))
    return min(cost, key=cost.get)


def loso(r: CollRows, fit_pred) -> np.ndarray:
    """Leave-one-shape-out relative errors: `fit_pred(train, test)` -> predicted times of `test`."""
    errs = np.full(len(r.t), np.nan)
    for s in np.unique(r.shape_id):
        test, train = np.flatnonzero(r.shape_id == s), np.flatnonzero(r.shape_id != s)
        errs[test] = fit_pred(train, test) / r.t[test] - 1.0
    return errs


def cv_block(errs, r: CollRows) -> dict:
    """median / p90 / max |held-out error| (%), the decode-sized subset and per GPU count."""

    def stats(sel):
        e = np.abs(errs[sel & np.isfinite(errs)]) * 100.0
        if len(e) == 0:
            return {"rows": 0, "median_abs_pct": None, "p90_abs_pct": None}
        return {"rows": len(e), "median_abs_pct": _r(np.median(e), 3), "p90_abs_pct": _r(np.percentile(e, 90), 3)}

    every = np.ones(len(r.t), bool)
    e = np.abs(errs[np.isfinite(errs)]) * 100.0
    return {
        "folds": len(np.unique(r.shape_id)),
        "grouping": "leave shapes out: gpus x bytes",
        **{k: v for k, v in stats(every).items() if k != "rows"},
        "max_abs_pct": _r(np.max(e), 3) if len(e) else None,
        "small": stats(r.msg <= SMALL_BYTES) | {"max_bytes": SMALL_BYTES},
        "by_gpus": {int(n): stats(r.n == n) for n in np.unique(r.n)},
    }


def fit_nccl(d: pd.DataFrame, op: str, peaks: Peaks) -> tuple[dict, dict, CollRows]:
    """(params, cv, rows) of the nccl_proto fit of one backend's rows."""
    r = CollRows(d, op, peaks)
    nvls_min = _nvls_choice(r, op)
    every = np.arange(len(r.t))
    p, pred = _fit_nccl(r, every, nvls_min)

    def fit_pred(train, test):
        q, _ = _fit_nccl(r, train, nvls_min, [p])
        return pred(q, test)

    params = {k: _r(v, 5) for k, v in nccl_params(p, nvls_min).items()}
    return params, cv_block(loso(r, fit_pred), r), r


def fit_custom(d: pd.DataFrame, peaks: Peaks, nccl: dict) -> dict:
    """The custom_ar entry of one engine backend: its kernel below `max_bytes` (where faster than
    NCCL, as the reader prices it), NCCL's fitted time above; max_bytes from the measured sizes."""
    r = CollRows(d, "all_reduce", peaks)
    a, w = nccl_proto_terms(nccl, "all_reduce", r.n, r.msg, r.ring, r.link, r.nvls)
    t_nccl = a + w

    def pred(p, cap, i):
        ca, cw = custom_ar_terms(dict(zip(CUSTOM_NAMES, p)), r.n[i], r.msg[i], r.ring[i], r.link[i])
        return np.where(r.msg[i] <= cap, np.minimum(ca + cw, t_nccl[i]), t_nccl[i])

    def fit(idx, caps, start=CUSTOM_START):
        best = None
        for cap in caps:
            p = lsq(
                lambda p, cap=cap: np.log(pred(p, cap, idx) / r.t[idx]),
                [start],
                np.array(CUSTOM_LO),
                np.array(CUSTOM_HI),
            )
            cost = float(np.sum(np.log(pred(p, cap, idx) / r.t[idx]) ** 2))
            if best is None or cost < best[0]:
                best = (cost, p, cap)
        return best[1], best[2]

    sizes = np.unique(r.msg)
    p, cap = fit(np.arange(len(r.t)), sizes)
    k = int(np.searchsorted(sizes, cap))
    near = sizes[max(k - 2, 0) : k + 3]  # folds re-fit the switch among the neighbouring sizes

    def fit_pred(train, test):
        q, c = fit(train, near, p)
        return pred(q, c, test)

    return {
        "model": S.CUSTOM_AR,
        "params": {k: _r(v, 5) for k, v in zip(CUSTOM_NAMES, p)},
        "cv": cv_block(loso(r, fit_pred), r),
        "rows": len(r.t),
        "max_bytes": int(cap),
    }


def fit_nccl_entry(df: pd.DataFrame, op: str, peaks: Peaks, gpu: str, folds: int | None = None) -> dict | None:
    """The nccl_proto entry of `op` (NCCL rows; custom all-reduce backends under `custom`).
    `folds` is unused: CV leaves one shape out."""
    d = _rows(df, op)
    if len(d) < 6:
        return None
    nccl = d[d.backend.str.upper() == "NCCL"]
    main = nccl if len(nccl) >= 3 * len(RING_NAMES) else d
    if len(main) < 3 * len(RING_NAMES):
        return None
    params, cv, _ = fit_nccl(main.reset_index(drop=True), op, peaks)
    entry = {
        "status": "fitted",
        "gpu": gpu,
        "model": S.NCCL_PROTO,
        "backend": str(main.backend.iloc[0]),
        "params": params,
        "rows": len(main),
        "cv": cv,
        "cv_method": "leave-one-shape-out",
        "source": f"{len(main)} rows: " + str(main.source.iloc[0]),
        "note": "NCCL tuning model (tuning.cc): per protocol (LL, LL128, Simple) k_us + k_step_us*steps(n) + ring "
        "bytes / (k_bw_frac x achievable link), NVLS (all-reduce of 16/32-bit floats, or all-gather, n >= "
        "nvls_min_gpus) nvls_us + bytes / (nvls_bw_frac x link); the fastest (moesim.perf.collectives.nccl_proto_terms); the protocol "
        "switch points are where the fitted segments cross",
    }
    custom = {}
    for backend, g in d[d.backend.str.upper() != "NCCL"].groupby("backend"):
        if op == "all_reduce" and len(g) >= 3 * len(CUSTOM_NAMES):
            custom[str(backend)] = fit_custom(g.reset_index(drop=True), peaks, params)
    if custom:
        entry["custom"] = custom
    return entry
