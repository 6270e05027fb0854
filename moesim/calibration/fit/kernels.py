"""Kernel fits (gemm, grouped_gemm, timed mla_decode): the overlap_v1 time model of
moesim.perf.efficiency, fitted with scipy.optimize.least_squares on log(predicted / measured), so
every row weighs by its relative error. How loads and math combine (q = inf: max, 2, 1: sum) is
picked by held-out error (GPU tables pick max; CPU BLAS, which packs weights first, picks 2 or 1).
Efficiency eta(shape) = roofline / model time is then a smooth saturating function of the shape:
of m and arithmetic intensity through the compute/load terms, and of the CTA count (m, n, groups)
through the SM-fill factor u.

Peak-only figures (FlashMLA's "up to 3000 GB/s / 660 TFLOPS") give constant (eta_c, eta_m): an
upper bound, no cross-validation possible (one row per parameter). HBM copies give the elementwise
memory efficiency and the launch overhead; families without rows are derived from these fits.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from moesim.calibration.fit.attention import fit_attention_families
from moesim.calibration.fit.cv import cross_validate, cv_summary, held_out_median, lsq, residual
from moesim.calibration.fit.data import id_span, preferred_rows, row_id, sources_text, usable
from moesim.calibration.fit.gemm import fit_table_families
from moesim.calibration.fit.peaks import Peaks
from moesim.perf.models import overlap_v1
from moesim.perf.profile import schema as S
from moesim.perf.profile.schema import round_sig as _r
from moesim.perf.profile.work import family_work

MIN_ROWS_OVERLAP = 6  # the 4-parameter kernel model needs more rows than parameters for a meaningful CV


@dataclass
class KernelData:
    family: str
    rows: pd.DataFrame
    F: np.ndarray
    b_in: np.ndarray
    b_out: np.ndarray
    x: np.ndarray  # CTAs per SM
    peak: float
    bw: float
    t: np.ndarray
    dtype: str
    backend: str
    notes: list = field(default_factory=list)


def kernel_data(df: pd.DataFrame, family: str, peaks: Peaks, notes: list) -> KernelData | None:
    kernel = {"gemm": "gemm", "grouped_gemm": "grouped_gemm", "mla_decode": "mla_decode"}[family]
    d = preferred_rows(df, kernel, notes)
    if family == "mla_decode":
        d = d[np.isfinite(d.batch) & np.isfinite(d.context)].reset_index(drop=True)
    if d.empty:
        return None
    dt = d.dtype.iloc[0] or ("bf16" if family == "mla_decode" else "fp8")
    cols = ("batch", "q_len", "heads", "context") if family == "mla_decode" else ("m", "n", "k")
    shape = {c: d[c].values for c in cols}
    if family != "mla_decode":
        shape["groups"] = np.where(np.isfinite(d.groups.values), d.groups.values, 1.0)
    F, b_in, b_out, x = family_work(family, dt, peaks.sms, shape)
    return KernelData(
        family,
        d,
        F,
        b_in,
        b_out,
        x,
        peaks.peak(dt),
        peaks.hbm_Bps,
        d.time_s.values.astype(float),
        dt,
        d.backend.iloc[0],
    )


Q_CHOICES = (np.inf, 2.0, 1.0)  # max (overlapped), 2-norm, sum (serial); earlier entries win ties
Q_MARGIN = 0.005  # a later q must improve the held-out median by half a percentage point


def _overlap_predict(p, kd: KernelData, idx, q=np.inf):
    work = (kd.F[idx], kd.b_in[idx], kd.b_out[idx], kd.x[idx])
    return overlap_v1.overlap_time(work, kd.peak, kd.bw, overlap_v1.as_params(p, q))


def _overlap_fit(kd: KernelData, idx, q=np.inf):
    work = (kd.F[idx], kd.b_in[idx], kd.b_out[idx], kd.x[idx])
    return overlap_v1.fit(work, kd.peak, kd.bw, kd.t[idx], lsq, q)


def _shape_cols(family: str) -> list[str]:
    return {
        "gemm": ["m", "n", "k"],
        "grouped_gemm": ["layout", "groups", "m", "n", "k"],
        "mla_decode": ["batch", "q_len", "heads", "context"],
    }[family]


def fit_overlap_family(kd: KernelData, gpu: str, folds: int | None) -> dict:
    n = len(kd.t)
    all_idx = np.arange(n)
    best = None
    for q in Q_CHOICES:  # how loads and math combine: chosen by held-out error
        errs, k = cross_validate(
            n, lambda tr, q=q: _overlap_fit(kd, tr, q), lambda p, te, q=q: _overlap_predict(p, kd, te, q), kd.t, folds
        )
        med = held_out_median(errs)
        if best is None or med < best[0] - Q_MARGIN:
            best = (med, q, errs, k)
    _, q, errs, k = best
    p = _overlap_fit(kd, all_idx, q)
    fitted = _overlap_predict(p, kd, all_idx, q)
    cols = _shape_cols(kd.family)
    residuals = []
    for i, r in enumerate(kd.rows.itertuples()):
        shape = {c: (getattr(r, c) if c == "layout" else _r(getattr(r, c))) for c in cols}
        residuals.append({"id": row_id(r.source), **shape, **residual(kd.t[i], fitted[i], errs[i])})
    table = [
        [(getattr(r, c) if c == "layout" else _r(getattr(r, c))) for c in cols] + [_r(r.time_s, 6)]
        for r in kd.rows.itertuples()
    ]
    return {
        "status": "fitted",
        "gpu": gpu,
        "model": S.OVERLAP,
        "dtype": kd.dtype,
        "backend": kd.backend,
        "params": {
            "eta_c": _r(p[0], 5),
            "eta_m": _r(p[1], 5),
            "t0_us": _r(p[2], 5),
            "c": _r(p[3], 5),
            "q": float(q) if np.isfinite(q) else float("inf"),
        },
        "rows": n,
        "cv": cv_summary(errs, k),
        "source": f"{n} rows ({id_span(kd.rows)}): " + sources_text(kd.rows),
        "residuals": residuals,
        "measurements": {"columns": cols + ["time_s"], "rows": table},
    }


def fit_peak_family(df: pd.DataFrame, kernel: str, peaks: Peaks, gpu: str) -> dict | None:
    """Constant efficiencies from best-case published figures (rows without time_s)."""
    d = df[(df.kernel == kernel) & (df.exclude == "") & ~np.isfinite(df.time_s)]
    if d.empty:
        return None
    ec = em = None
    src = []
    dt = d.dtype.iloc[0] or "bf16"
    for r in d.itertuples():
        if np.isfinite(r.tflops):
            v = r.tflops * 1e12 / peaks.peak(r.dtype or dt)
            ec = max(ec or 0.0, v)
            src.append(r.source)
        elif np.isfinite(r.GBps):
            v = r.GBps * 1e9 / peaks.hbm_Bps
            em = max(em or 0.0, v)
            src.append(r.source)
    if ec is None and em is None:
        return None
    return {
        "status": "peak",
        "gpu": gpu,
        "model": S.PEAK,
        "dtype": dt,
        "params": {"eta_c": _r(min(ec, 1.0), 5) if ec else 1.0, "eta_m": _r(min(em, 1.0), 5) if em else 1.0},
        "rows": len(src),
        "cv": S.no_cv(note="best-case figures without shapes: one row per parameter, no CV"),
        "source": " | ".join(src),
        "note": "upper bound (published 'up to' figures): eta_c = achieved TFLOPS / dense peak, "
        "eta_m = achieved GB/s / HBM peak, shape-independent",
    }


def fit_memcpy(df: pd.DataFrame, peaks: Peaks, gpu: str, folds: int | None) -> tuple[dict | None, dict | None]:
    """Elementwise memory efficiency from HBM copies (t = t0 + 2 * bytes / (W * eta_m)); launch overhead."""
    elem = launch = None
    d = df[usable(df, "memcpy", positive=False) & (df.op != "launch") & np.isfinite(df.bytes)]
    if len(d) >= 2:
        moved = 2.0 * d.bytes.values  # read + write
        t = d.time_s.values

        def pred(p, idx):
            return p[0] * 1e-6 + moved[idx] / (peaks.hbm_Bps * p[1])

        def fit(idx):
            return lsq(lambda p: np.log(pred(p, idx) / t[idx]), [[1.0, 0.8], [10.0, 0.5]], [0.0, 0.001], [1e5, 1.0])

        p = fit(np.arange(len(t)))
        errs, k = cross_validate(len(t), fit, pred, t, folds)
        elem = {
            "status": "fitted",
            "gpu": gpu,
            "model": S.PEAK,
            "dtype": "bf16",
            "params": {"eta_c": 1.0, "eta_m": _r(p[1], 5)},
            "copy_t0_us": _r(p[0], 5),
            "rows": len(t),
            "cv": cv_summary(errs, k),
            "source": f"{len(t)} memcpy rows: " + d.source.iloc[0],
            "note": "eta_m = HBM copy bandwidth (read + write) / HBM peak, from t = t0 + 2 bytes / (W eta_m)",
        }
    dl = df[usable(df, positive=False) & ((df.kernel == "launch") | ((df.kernel == "memcpy") & (df.op == "launch")))]
    if len(dl):
        launch = {
            "us": _r(float(np.median(dl.time_s)) * 1e6, 4),
            "status": "measured",
            "rows": len(dl),
            "source": dl.source.iloc[0],
        }
    return elem, launch


def derive_elementwise(kernels: dict, df: pd.DataFrame, gpu: str) -> dict | None:
    """Without copies timed on this GPU: the best published HBM bandwidth fraction."""
    best = None
    for fam, e in kernels.items():
        if e.get("status") == "peak" and e["params"].get("eta_m", 1.0) < 1.0:
            if best is None or e["params"]["eta_m"] > best[1]:
                best = (fam, e["params"]["eta_m"], e["source"])
    if best is None:
        return None
    src = [s for s in best[2].split(" | ") if "GB/s" in s] or [best[2]]
    rid = row_id(src[0])
    return {
        "status": "derived",
        "gpu": gpu,
        "model": S.PEAK,
        "dtype": "bf16",
        "derived_from": f"{rid} HBM fraction" if "-" in rid else f"{best[0]} HBM fraction",
        "params": {"eta_c": 1.0, "eta_m": best[1]},
        "rows": 0,
        "cv": S.no_cv(),
        "source": src[0],
        "note": f"derived: the best published HBM bandwidth fraction on this GPU ({best[0]} memory-bound peak); "
        "norms/activations are streaming kernels bounded by the same HBM; an upper bound",
    }


def derive_from_own_fits(kernels: dict, gpu: str) -> None:
    """Families not timed on this GPU, derived from its own fits: bmm from gemm (the batch as
    groups), prefill attention from the MLA decode kernel's efficiencies."""
    if "gemm" in kernels and "bmm" not in kernels:
        g = kernels["gemm"]
        kernels["bmm"] = copy.deepcopy({k: v for k, v in g.items() if k not in ("residuals", "measurements")})
        kernels["bmm"].update(
            status="derived",
            derived_from="gemm",
            cv=S.no_cv(),
            note="derived: the gemm fit with the batch as groups (CTAs scale with it); no bmm was timed",
        )
    if "mla_decode" in kernels:
        src = kernels["mla_decode"]
        for fam in ("mla_prefill", "attention"):
            if fam not in kernels:
                kernels[fam] = {
                    "status": "derived",
                    "gpu": gpu,
                    "model": S.PEAK,
                    "dtype": "bf16",
                    "params": {"eta_c": src["params"]["eta_c"], "eta_m": src["params"]["eta_m"]},
                    "derived_from": "mla_decode",
                    "rows": 0,
                    "cv": S.no_cv(),
                    "source": src["source"],
                    "note": "derived: the MLA decode kernel's efficiencies used as constants for "
                    "compute-bound prefill attention (no prefill attention was timed; FlashMLA's "
                    "sparse prefill, 640 TFLOPS on H800 (FMLA-015), is in line)",
                }


def fit_kernels(
    df: pd.DataFrame, peaks: Peaks, gpu: str, folds: int | None, notes: list, elementwise=None
) -> tuple[dict, dict | None]:
    """(kernel entries fitted, peaked or derived on this GPU, the measured launch entry or None).
    `elementwise`: the parent's entry (the stand-in input quant of linear-op GEMM rows, fit.act_quant)."""
    kernels: dict = fit_table_families(df, peaks, gpu, folds, notes, elementwise)  # waves_v1 / stream_v1
    kernels.update(fit_attention_families(df, peaks, gpu, notes))  # attention tables: mla_v2
    for fam in ("gemm", "grouped_gemm", "mla_decode"):
        if fam in kernels:
            continue
        kd = kernel_data(df, fam, peaks, notes)
        if kd is not None and len(kd.t) >= MIN_ROWS_OVERLAP:
            kernels[fam] = fit_overlap_family(kd, gpu, folds)
        elif kd is not None:
            notes.append(
                f"{fam}: {len(kd.t)} timed rows are too few for the 4-parameter model "
                f"(need {MIN_ROWS_OVERLAP}); not fitted"
            )
    if "mla_decode" not in kernels:
        pk = fit_peak_family(df, "mla_decode", peaks, gpu)
        if pk:
            kernels["mla_decode"] = pk
    elem, launch = fit_memcpy(df, peaks, gpu, folds)
    if elem:
        kernels["elementwise"] = elem
    derive_from_own_fits(kernels, gpu)
    if "elementwise" not in kernels:
        d = derive_elementwise(kernels, df, gpu)
        if d:
            kernels["elementwise"] = d
    return kernels, launch
