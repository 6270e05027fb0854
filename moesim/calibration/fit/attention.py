"""Attention kernel fits (mla_decode, mla_prefill, attention = MHA/GQA context and generation):
the mla_v2 time model of moesim.perf.attention_eff, fitted per variant (phase x KV dtype) by
robust least squares on log(predicted / measured) (soft-L1: a few glitched rows in the imported
tables, e.g. one 1.47 ms row among 15 us neighbours, must not pull the fit). Cross-validation holds
out whole shapes (every context of one batch x heads x head-dim curve: grouped k-fold), and reports
the median and p90 |error|, also for decode-sized shapes (<= 64 tokens, context <= 8192); beside
it the physics alone and leave-one-shape-out (fit.residual: one exact shape held out of the residual).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moesim.calibration.fit import residual as R
from moesim.calibration.fit.cv import residual, robust_lsq
from moesim.calibration.fit.data import usable_rows
from moesim.perf import attention_eff as A
from moesim.perf.efficiency import dtype_bytes
from moesim.perf.models import mla_v2
from moesim.perf.profile import schema as S
from moesim.perf.profile.schema import round_sig as _r

MIN_ROWS = 40  # the mla_v2 model has up to 8 parameters: it needs a table (smaller sets: overlap_v1)
CV_FOLDS = 10
SMALL_TOKENS = 64  # decode-sized: batch x q_len <= 64 tokens ...
SMALL_CONTEXT = 8192  # ... and a short context
# the kernel each engine runs by default on Hopper, preferred where a table has several backends
BACKEND_PREFERENCE = ("fa3", "flash_attention", "vllm_flash_attn_fa3", "default", "torch_flow", "flashinfer")
PARAM_NAMES = mla_v2.FIT_NAMES  # the fitted vector, its bounds and least-squares core: mla_v2.fit
MMHA_ETA_C_LO = 0.001  # MMHA's math runs on CUDA cores: a ceiling far below the tensor-core peak
# XQA streams the KV of one (request, KV head, block) per CTA with few loads in flight: HBM
# saturates only with several CTAs per SM (Little's law), so its sat (CTAs per SM that saturate
# the loads, attn_time) may exceed 1; FA3 / FlashMLA / MMHA keep sat <= 1
XQA_SAT_HI = 4.0
GROUP_COLS = ("batch", "heads", "groups", "k")  # a shape = one curve over the context / isl


def variant_key(family: str, mode: str, dtype: str, head_dim=None) -> str:
    """The key of a fitted variant: `<dtype>` (MLA) or `<context|generation>.<dtype>.d<head dim>`
    (MHA/GQA: FA3 compiles one kernel per head dim, with its own tile sizes)."""
    return f"{mode}.{dtype}.d{int(head_dim)}" if family == "attention" else dtype


def _rows(df: pd.DataFrame, family: str, notes: list) -> pd.DataFrame:
    d = usable_rows(df, family)
    if d.empty:
        return d
    backends = list(d.backend.unique())
    pref = [b for b in BACKEND_PREFERENCE if b in backends]
    best = pref[0] if pref else max(backends, key=lambda b: (int((d.backend == b).sum()), b))
    if len(backends) > 1:
        notes.append(f"{family}: fitted backend {best}; rows of {', '.join(sorted(set(backends) - {best}))} not used")
    return d[d.backend == best].reset_index(drop=True)


PASSES = {"kv": "pass_eta", "q": "qpass_eta"}  # unfused pass kinds (attention_eff.pass_time) -> param


def work_arrays(d: pd.DataFrame, family: str, dtype: str, sms: int, kind=None, split_kv=A.SPLIT_KV_MIN, kernel=None):
    """(F, B, CTAs, KV elements, KV bytes) of the rows (moesim.perf.attention_eff.attn_work); with
    kind "kv" the kernel reads a BF16 copy of the cache made by an unfused up-cast pass; "q": the
    queries are quantized to FP8 by an unfused pass; None: no pass."""
    shape = {c: d[c].values for c in ("batch", "q_len", "heads", "context", "groups", "k") if c in d}
    if family == "attention":
        shape["groups"] = np.where(np.isfinite(d.groups.values), d.groups.values, d.heads.values)
        shape["k"] = np.where(np.isfinite(d.k.values), d.k.values, 128.0)
        shape["prefill"] = str(d["mode"].iloc[0]) == "context"
        shape["kernel"] = kernel
    kvb = dtype_bytes(dtype, 2.0)
    F, B, ctas, kv_elems, split = A.attn_work(family, shape, 2.0 if kind == "kv" else kvb, sms, split_kv)
    b = d.batch.values.astype(float)
    # the last item: the kernel's bounds (eta_c lower, sat upper)
    bounds = (
        MMHA_ETA_C_LO if kernel in (A.MMHA, A.TLLM_GEN) else mla_v2.FIT_LO[1],
        XQA_SAT_HI if kernel == A.XQA else mla_v2.FIT_HI[4],
    )
    if kind == "q":
        return F, B, ctas, split, A.q_elems(family, shape), 3.0, b, bounds
    return F, B, ctas, split, kv_elems, (kvb + 2.0 if kind == "kv" else 0.0), b, bounds


Q_CHOICES = (np.inf, 2.0, 1.0)  # compute/memory combination: max, 2-norm, sum; chosen by held-out error


def _predict(p, w, idx, peak, bw, sms, q=np.inf):
    return mla_v2.fit_time(p, _rows_of(w, idx), (peak, bw, sms), q)


def _rows_of(w, idx):
    """The work arrays of rows idx (the pass bytes per element: a scalar)."""
    F, B, ctas, split, pass_elems, pass_bytes, batch = w[:7]
    return F[idx], B[idx], ctas[idx], split[idx], pass_elems[idx], pass_bytes, batch[idx]


MAX_FIT_ROWS = 3000  # big tables are fitted on a fixed random subset (errors are scored on every row)


def _fit(w, t, idx, peak, bw, sms, q=np.inf):
    """mla_v2.fit over (a subset of) rows idx, with robust_lsq (soft-L1: a few glitched rows must not pull it)."""
    if len(idx) > MAX_FIT_ROWS:
        idx = np.sort(np.random.default_rng(1).choice(idx, MAX_FIT_ROWS, replace=False))
    return mla_v2.fit(_rows_of(w, idx), (peak, bw, sms), t[idx], robust_lsq, q, w[7])


def shape_groups(d: pd.DataFrame) -> np.ndarray:
    """One integer per row: the shape (curve) it belongs to, for leave-shapes-out CV."""
    cols = [c for c in GROUP_COLS if c in d]
    key = d[cols].fillna(-1.0).astype(float)
    return key.groupby(cols, sort=True).ngroup().values


def cv_block(errs, folds: int, small) -> dict:
    """median / p90 / max |held-out error| (%), all rows and the decode-sized subset."""

    def stats(e):
        e = np.abs(e[np.isfinite(e)]) * 100.0
        if len(e) == 0:
            return None, None, None
        return _r(np.median(e), 3), _r(np.percentile(e, 90), 3), _r(np.max(e), 3)

    med, p90, mx = stats(errs)
    smed, sp90, _ = stats(errs[small])
    return {
        "folds": folds,
        "grouping": "leave shapes out: " + " x ".join(GROUP_COLS),
        "median_abs_pct": med,
        "p90_abs_pct": p90,
        "max_abs_pct": mx,
        "small": {"rows": int(np.sum(small)), "median_abs_pct": smed, "p90_abs_pct": sp90},
    }


def _structure(d: pd.DataFrame, family: str, dtype: str, peak, bw, sms, kernel=None):
    """(work arrays, q, pass kind): how compute and memory combine (q) and, for a sub-16-bit KV cache
    in decode, whether the engine runs an unfused KV up-cast or query-quantization pass; chosen by the robust in-sample cost on all
    rows (a choice must cut it by 5 %: these are structural choices, not extra freedom)."""
    t = d.time_s.values.astype(float)
    idx = np.arange(len(t))
    decode = family == "mla_decode" or (family == "attention" and str(d["mode"].iloc[0]) != "context")
    best = None
    for kind in (None, "kv", "q") if decode and dtype_bytes(dtype, 2.0) < 2 else (None,):
        w = work_arrays(d, family, dtype, sms, kind, kernel=kernel)
        for q in Q_CHOICES:
            r = np.log(_predict(_fit(w, t, idx, peak, bw, sms, q), w, idx, peak, bw, sms, q) / t)
            cost = float(np.sum(np.sqrt(1.0 + (r / 0.05) ** 2) - 1.0))  # the fit's soft-L1 cost
            if best is None or cost < 0.95 * best[0]:
                best = (cost, w, q, kind)
    return best[1:]


def kernel_of(d: pd.DataFrame, family: str, sms: int, sm_generation: int = 9) -> np.ndarray:
    """Per row: the kernel TRT-LLM's generation attention runs (A.XQA or A.MMHA, by
    moesim.perf.attention_eff.mmha_rows; on SM100 A.TLLM_GEN for the MMHA rows), else "" (one
    kernel per phase for the other engines)."""
    trt = ((family == "attention") & (d["mode"] == "generation") & d.backend.isin(A.MMHA_BACKENDS)).values
    kvb = np.array([dtype_bytes(t or "bf16", 2.0) for t in d.dtype], float)
    mmha = A.mmha_rows(d.heads.values, d.groups.fillna(d.heads).values, d.batch.values, d.context.values, sms, kvb)
    small = A.TLLM_GEN if sm_generation >= 10 else A.MMHA
    return np.where(trt, np.where(mmha, small, A.XQA), "")


class _AttnData:
    """The fit.residual data protocol (t, d, fit, predict) over one variant's work arrays."""

    family = dtype = None  # no neighbour-search weights (fit.residual.weights_for)

    def __init__(self, d, w, t, peak, bw, sms, q):
        self.d, self.w, self.t, self._k = d, w, t, (peak, bw, sms, q)

    def predict(self, p, idx):
        return _predict(p, self.w, idx, *self._k)

    def fit(self, idx, x0=None):
        return _fit(self.w, self.t, idx, *self._k)


def _parts(groups: np.ndarray, folds: int = CV_FOLDS) -> list[np.ndarray]:
    """grouped_cv's folds (whole shapes together, the same permutation) as row-index arrays."""
    ug = np.unique(groups)
    k = max(2, min(folds, len(ug)))
    perm = np.random.default_rng(0).permutation(ug)
    return [np.flatnonzero(np.isin(groups, perm[i::k])) for i in range(k)]


def fit_variant(d: pd.DataFrame, family: str, dtype: str, peak: float, bw: float, sms: int, kernel=None, key=None):
    """One variant's params, CV block, row count and the worst held-out residuals; kernel: None, or
    A.MMHA (TRT-LLM's MMHA generation kernel: one CTA per query head). With a residual `key`, the
    measured residual (fit.residual: physics x R over R.AXES[family]; held-out by the same grouped
    folds, R built from training rows only) is attached and the cv block is physics x R."""
    t = d.time_s.values.astype(float)
    w, q, kind = _structure(d, family, dtype, peak, bw, sms, kernel)
    parts = _parts(shape_groups(d))
    data = _AttnData(d, w, t, peak, bw, sms, q)
    params = [data.fit(np.setdiff1d(np.arange(len(t)), te)) if len(t) - len(te) >= MIN_ROWS else None for te in parts]
    pts = R.log_points(d, R.AXES[family])
    cv_errs = R.residual_cv(data, pts, parts, params)
    errs = cv_errs["grouped"] if key else cv_errs["physics"]
    p = _fit(w, t, np.arange(len(t)), peak, bw, sms, q)
    fitted = _predict(p, w, np.arange(len(t)), peak, bw, sms, q)
    small = (d.batch.values * d.q_len.values <= SMALL_TOKENS) & (d.context.values <= SMALL_CONTEXT)
    worst = np.argsort(-np.nan_to_num(np.abs(errs)))[:5]
    cv = cv_block(errs, len(parts), small)
    out = {
        "params": {
            **{n: _r(v, 5) for n, v in zip(PARAM_NAMES[:-1], p)},
            **({PASSES[kind]: _r(p[-1], 5)} if kind else {}),
            "q": float(q) if np.isfinite(q) else float("inf"),
        },
        "rows": len(t),
        "cv": cv,
        "worst": [
            {
                **{c: _r(d[c].iloc[i]) for c in ("batch", "q_len", "heads", "context")},
                **residual(t[i], fitted[i], errs[i]),
            }
            for i in worst
        ],
    }
    if key:
        for name, e in (("physics", cv_errs["physics"]), ("leave_one_shape_out", cv_errs["loso"])):
            b = cv_block(e, len(parts), small)  # LOSO: fit.residual (one exact shape held out of R)
            cv[name] = {k: b[k] for k in ("median_abs_pct", "p90_abs_pct", "max_abs_pct", "small")}
        cv["corrected_by"] = "measured residual (moesim.perf.profile.residual)"
        R.attach(out, key, R.AXES[family], *R.residual_arrays(data, pts, p))
    return out


def fit_attention_family(df: pd.DataFrame, family: str, peaks, gpu: str, notes: list) -> dict | None:
    """The kernels.<family> entry (model mla_v2): the main variant's params, the others under
    `variants`; None without enough rows. Compute ceilings are fractions of the BF16 dense peak
    (the MMA type of the MLA/FA3 kernels; an FP8 variant's eta_c is relative to the same peak)."""
    d = _rows(df, family, notes)
    if d.empty:
        return None
    peak, bw, sms = peaks.peak("bf16"), peaks.hbm_Bps, peaks.sms
    modes = d["mode"].where(d["mode"] != "", "generation" if family != "mla_prefill" else "context")
    variants = {}
    d = d.assign(mode=modes, hd=d.k.fillna(0.0) if family == "attention" else 0.0)
    d = d.assign(kernel_sel=kernel_of(d, family, sms, getattr(peaks, "sm_generation", 0) or 9))
    for (mode, dt, hd, kernel), g in d.groupby(["mode", "dtype", "hd", "kernel_sel"], sort=True):
        dt = dt or "bf16"
        key = variant_key(family, mode, dt, hd) + (f".{A.MMHA}" if kernel in (A.MMHA, A.TLLM_GEN) else "")
        if len(g) < MIN_ROWS:
            notes.append(f"{family} {key}: {len(g)} rows, too few for the mla_v2 model (needs {MIN_ROWS})")
            continue
        variants[key] = fit_variant(
            g.reset_index(drop=True), family, dt, peak, bw, sms, kernel or None, f"{family}|{key}"
        )
        if kernel:
            variants[key]["kernel"] = kernel
    if not variants:
        return None
    main = min(variants, key=lambda v: ("bf16" not in v, "generation" not in v, ".d128" not in v, v))
    m = variants[main]
    return {
        "status": "fitted",
        "gpu": gpu,
        "model": S.MLA_V2,
        "dtype": "bf16" if "bf16" in main else main.split(".")[min(1, main.count("."))],
        "backend": str(d.backend.iloc[0]),
        "params": m["params"],
        "variant": main,
        "rows": int(sum(v["rows"] for v in variants.values())),
        "cv": m["cv"],
        "variants": variants,
        "source": " | ".join(sorted(set(d.source))),
        "note": "mla_v2 (moesim/perf/attention_eff.py): alpha + cta_us x waves + wave fill x "
        "max(F / (P eta_c), B / (W eta_m)); eta_c vs the BF16 dense peak",
    }


def fit_attention_families(df: pd.DataFrame, peaks, gpu: str, notes: list) -> dict:
    """kernels.{mla_decode, mla_prefill, attention} entries (mla_v2) where a family has a timed
    table of at least MIN_ROWS rows with the attention shape columns; the others are left to the
    generic fits (moesim.calibration.fit.kernels)."""
    out = {}
    for fam in A.ATTN_FAMILIES:
        d = usable_rows(df, fam, positive=False)
        d = d[np.isfinite(d.batch) & np.isfinite(d.q_len) & np.isfinite(d.heads) & np.isfinite(d.context)]
        if len(d) >= MIN_ROWS:
            e = fit_attention_family(d, fam, peaks, gpu, notes)
            if e is not None:
                out[fam] = e
    return out
