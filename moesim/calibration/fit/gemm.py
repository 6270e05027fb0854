"""waves_v1 fits (GEMM, fused / grouped MoE) and stream_v1 fits (FP8 activation quant) on big
measured tables (aiconfigurator: tens of thousands of rows per kernel).

The time models are moesim.perf.models.waves_v1 / stream_v1 through
moesim.perf.profile.work (one definition for the fit and the reader). Least squares on
log(predicted / measured); cross-validation holds out whole SHAPES (GEMM: (n, k); MoE: the layer
dims and parallelism), 10 folds over the distinct shapes, so a held-out row's shape was never seen.
Fits train on at most FIT_ROWS rows (a fixed random subset) so that `calibrate fit` on 30k rows
takes seconds; errors are measured on every held-out row. Residual and measurement tables are
written into the profile only for small tables (<= TABLE_ROWS rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moesim.calibration.collectors import EXPERT_MAP
from moesim.calibration.fit import act_quant as AQ
from moesim.calibration.fit import moe_tables as MT
from moesim.calibration.fit import moe_work as MW
from moesim.calibration.fit import residual as R
from moesim.calibration.fit.cv import cv_summary, lsq
from moesim.calibration.fit.data import sources_text, usable_rows
from moesim.calibration.fit.peaks import Peaks
from moesim.perf.models import stream_v1, waves_v1
from moesim.perf.profile import schema as S
from moesim.perf.profile.schema import round_sig as _r
from moesim.perf.profile.work import DEEPGEMM_TILING, family_work, waves_parts

FIT_ROWS = 2000  # rows a least-squares fit trains on (fixed random subset of the training rows)
TABLE_ROWS = 200  # residuals / measurements written into the profile only up to this many rows
MIN_ROWS = 12
CV_FOLDS = 10
DECODE_MAX = 64.0  # decode-sized shapes: m (GEMM) or tokens (MoE) 1..64, reported separately
SHAPE_KEYS = {
    "gemm": ["n", "k"],
    "moe": ["hidden", "n", "experts", "topk", "ep", "tp"],
    "quant": ["k"],
}
SIZE_KEY = {"gemm": "m", "moe": "tokens", "quant": "m"}
MOE_COLS = ["tokens", "hidden", "n", "experts", "topk", "ep", "tp", "layout"]
# (aiconfigurator after 0.12.0 times EP rank 0 with remote picks clamped to expert 0; the collector facts
# of each backend, moesim/calibration/collector_facts.yaml, say which rows: moesim.calibration.fit.moe_work)
# waves_v1's fitted params (its fit core: bounds, starts) and the extra ones a table adds (start, lo, hi):
# host_us (fit.moe_tables.HOST_TIMED: max(host, GPU)), act_iter_ns (waves_v1.FIT_EXTRA), cta_ns (the act quant's)
WAVES_NAMES = waves_v1.FIT_NAMES
HOST_NAME = "host_us"
EXTRA = {**waves_v1.FIT_EXTRA, AQ.CTA_PARAM: AQ.CTA_BOUNDS}


def _shape_of(d: pd.DataFrame, family: str, dtype: str = "fp8", keys: dict | None = None) -> dict:
    """The priced shape of measured rows `d` (one group); moe: the collector's workload as work
    columns (moesim.calibration.fit.moe_work: pairs, active, tile_pad, ...) for the entry's model
    `keys` (its tiling) and `dtype`, plus the backend's pass bytes (moe_tables.routing_keys)."""
    cols = MOE_COLS if family == "moe" else ["m", "n", "k", "groups"]
    out = {c: d[c].values if c == "layout" else d[c].values.astype(float) for c in cols if c in d}
    if "groups" in out:
        out["groups"] = np.where(np.isfinite(out["groups"]), out["groups"], 1.0)
    if family == "moe":  # measured tables route evenly (excluded otherwise); absent tp / ep: 1
        for c in ("tp", "ep"):
            v = out.get(c, np.ones(len(d)))
            out[c] = np.where(np.isfinite(v), v, 1.0)
        tiling = (keys or {}).get("tiling")
        out = MW.work_columns({**out, **MT.routing_keys(d, out)}, MT.routing(d), dtype, tiling)
    return out


def shape_ids(d: pd.DataFrame, family: str) -> np.ndarray:
    keys = [c for c in SHAPE_KEYS[family] + (["layout"] if family == "moe" else []) if c in d]
    return pd.factorize(d[keys].astype(str).agg("|".join, axis=1))[0]


def shape_folds(ids: np.ndarray, folds: int = CV_FOLDS) -> list[np.ndarray]:
    """Row indices of each fold: whole shapes held out together (fixed permutation of the shapes)."""
    n_shapes = int(ids.max()) + 1 if len(ids) else 0
    k = max(2, min(folds, n_shapes))
    fold_of = np.random.default_rng(0).permutation(n_shapes) % k
    return [np.flatnonzero(fold_of[ids] == f) for f in range(k)]


def _subset(idx: np.ndarray, n: int = FIT_ROWS) -> np.ndarray:
    if len(idx) <= n:
        return idx
    return np.sort(np.random.default_rng(1).choice(idx, n, replace=False))


def gemm_keys(family: str, d: pd.DataFrame, dtype: str, peaks: Peaks) -> dict:
    """The entry's `model_keys` (the reader adds them to the priced shape): tiling "deepgemm_sm90" / "deepgemm_sm100"
    for DeepGEMM's normal FP8 GEMM on Hopper / Blackwell (its layout heuristic, moesim.perf.deepgemm_layout*)."""
    keys = MT.tiling_keys(d, dtype, peaks.sm_generation) if family == "moe" else {}  # Triton MoE tiles
    if family != "gemm" or not len(d):
        return keys
    deepgemm = "backend" in d and d["backend"].astype(str).str.lower().str.contains("deepgemm").all()
    if dtype in ACT_QUANT_DTYPES and peaks.sm_generation in DEEPGEMM_TILING and deepgemm:
        keys["tiling"] = DEEPGEMM_TILING[peaks.sm_generation]
    return keys


class WavesData:
    """The shape-only features of a waves_v1 table, computed once; predict() slices them."""

    def __init__(self, family: str, d: pd.DataFrame, dtype: str, peaks: Peaks):
        self.family, self.d, self.dtype = family, d, dtype
        self.t = d.time_s.values.astype(float)
        self.sms, self.peak, self.bw = peaks.sms, peaks.peak(dtype), peaks.hbm_Bps
        self.sm_generation = peaks.sm_generation  # the residual's neighbour weights (fit.residual)
        self.keys = gemm_keys(family, d, dtype, peaks)
        self.shape = {**_shape_of(d, family, dtype, self.keys), **self.keys}
        self.parts, self.extra = waves_parts(family, dtype, self.sms, self.shape)
        self.extra = np.broadcast_to(np.asarray(self.extra, float), self.t.shape)
        self.known = np.zeros_like(self.t)  # a per-row time outside the kernel (moesim.calibration.fit.act_quant)
        self.quant = None  # (peaks, act_quant_model): a known quant whose per-CTA time is fitted (CTA_PARAM)
        self.names = WAVES_NAMES + (MT.extra_params(d, HOST_NAME) if family == "moe" else ())

    def work(self, idx):
        """(parts, streamed bytes, sms, peak, bw) of rows idx (waves_v1's work of a fit)."""
        parts = [
            tuple(np.broadcast_to(a, self.t.shape)[idx] for a in part[:6])
            + (part[6],)
            + tuple(np.broadcast_to(a, self.t.shape)[idx] for a in part[7:])
            for part in self.parts
        ]
        return parts, self.extra[idx], self.sms, self.peak, self.bw

    def known_under(self, p, idx):
        """The rows' known time under p (a fitted quant's per-CTA time is p's last, AQ.attach_quant)."""
        if self.quant is not None:
            self.known = AQ.quant_seconds(self.d.m.values, self.d.k.values, *self.quant, p[-1])
        return self.known[idx]

    def predict(self, p, idx):
        t = waves_v1.parts_time(*self.work(idx), dict(zip(self.names, p)))
        return t + self.known_under(p, idx)

    def fit(self, idx, x0=None):
        """Least squares on log time over (a subset of) rows idx (waves_v1.fit); from x0 alone when
        given (the cross-validation folds start from the all-rows fit: same optimum basin, a few iterations)."""
        idx = _subset(idx)
        extra = {n: EXTRA[n] for n in self.names[len(WAVES_NAMES) :]}
        known = (self.known[idx], lambda p: self.known_under(p, idx))
        return waves_v1.fit(self.work(idx), self.t[idx], lsq, extra, known, x0)


def cv_block(errs: np.ndarray, folds: int, size: np.ndarray) -> dict:
    """cv_summary + p90 and the decode-sized subset `small` (size <= 64 tokens; the attention fits'
    block, moesim.calibration.fit.attention.cv_block), by shape-grouped folds."""
    out = cv_summary(errs, folds)
    st = R.err_stats(errs, size, DECODE_MAX)
    out["p90_abs_pct"] = st["p90_abs_pct"]
    out["small"] = st["small"]
    return out


def _entry(data, gpu: str, backend: str, model: str, params: dict, cv: dict) -> dict:
    d = data.d
    e = {
        "status": "fitted",
        "gpu": gpu,
        "model": model,
        "dtype": data.dtype,
        "backend": backend,
        "params": params,
        "rows": len(d),
        "cv": cv,
        "source": f"{len(d)} rows: " + sources_text(d),
    }
    if len(d) <= TABLE_ROWS:
        cols = MOE_COLS if data.family == "moe" else ["m", "n", "k"]
        e["measurements"] = {
            "columns": cols + ["time_s"],
            "rows": [
                [(v if c == "layout" else _r(v)) for c, v in zip(cols, r)] + [_r(t, 6)]
                for r, t in zip(d[cols].itertuples(index=False), d.time_s)
            ],
        }
    else:
        e["tables_note"] = f"{len(d)} rows > {TABLE_ROWS}: residuals and measurements not written"
    return e


def _cv_with_residual(family: str, data, ids, folds, p, x0) -> dict:
    """The cv block (grouped folds, physics x measured residual; `physics` alone and leave-one-
    shape-out beside it, moesim.calibration.fit.residual) and the residual block's arrays."""
    parts = shape_folds(ids, folds or CV_FOLDS)
    pts = R.log_points(data.d, R.AXES[family])
    errs = R.residual_cv(data, pts, parts, R.fold_params(data, parts, x0))
    size = data.d[SIZE_KEY[family]].values.astype(float)
    cv = cv_block(errs["grouped"], len(parts), size)
    cv["grouped_by"] = "shape (" + ", ".join(SHAPE_KEYS[family]) + ")"
    cv["physics"] = R.err_stats(errs["physics"], size, DECODE_MAX)
    cv["leave_one_shape_out"] = R.err_stats(errs["loso"], size, DECODE_MAX)
    cv["corrected_by"] = "measured residual (moesim.perf.profile.residual)"
    return cv, pts


def _key(family: str, e: dict, layout: str = "") -> str:
    op = f"|{e['op']}" if e.get("op") and e["op"] != OP_PREFERENCE[0] else ""  # the quant pass: no suffix
    return f"{family}|{layout or '-'}|{e['dtype']}|{e['backend']}{op}"


# aiconfigurator's FP8 GEMM rows time the engine's linear op on a BF16 input (input quant + GEMM,
# collector/<engine>/collect_gemm.py): fitted as the GEMM alone plus a known quant time (fit.act_quant).
ACT_QUANT_DTYPES = frozenset({"fp8_block", "fp8"})
ACT_QUANT_SOURCE = "aiconfigurator-core"


def act_quant_in_rows(d: pd.DataFrame, dtype: str) -> bool:
    """True when every row of an FP8 GEMM group was timed as an engine linear op with its input quant."""
    return dtype in ACT_QUANT_DTYPES and bool(d["source"].astype(str).str.startswith(ACT_QUANT_SOURCE).all())


def fit_waves(
    family: str, d: pd.DataFrame, dtype: str, backend: str, peaks: Peaks, gpu: str, folds=None, quant=None
) -> dict:
    """A waves_v1 entry (gemm or moe) fitted on rows `d` of one backend and dtype, with its measured
    residual block (the layout is added to the key by fit_variants). GEMM rows timed as linear ops with
    their input quant: the entry prices the GEMM alone, the quant model `quant` (act_quant_model) known."""
    data = WavesData(family, d.reset_index(drop=True), dtype, peaks)
    linear_op = family == "gemm" and quant is not None and act_quant_in_rows(data.d, dtype)
    if linear_op:
        AQ.attach_quant(data, peaks, quant)  # known; SGLang's per-CTA quant time fitted with the GEMM
    ids = shape_ids(data.d, family)
    p = data.fit(np.arange(len(data.t)))
    cv, pts = _cv_with_residual(family, data, ids, folds, p, list(p))
    params = {n: _r(v, 5) for n, v in zip(data.names, p)}
    quant = AQ.with_fitted_cta(quant, params)  # a param of the quant model, not of the GEMM's
    if family == "moe":  # the passes beyond the GEMMs, priced the same way by the reader (work.model_time)
        params.update(MT.pass_keys(data.d))
    e = _entry(data, gpu, backend, S.WAVES, params, cv)
    if linear_op:
        e["act_quant_in_rows"] = True
        e["act_quant_model"] = quant
    if data.keys:  # the shape keys the physics was fitted with: the reader prices with the same
        e["model_keys"] = dict(data.keys)
    R.attach(e, _key(family, e), R.AXES[family], *R.residual_arrays(data, pts, p), R.weights_for(data))
    return e


class StreamData:
    """quant rows: t = alpha + bytes / (W eta_m), bytes = m k (2 + 1 + 4/128) for the quant pass,
    m k 2 for compute_scale (an amax pass), m (3 k + 4) for dynamic_per_token (work.family_work)."""

    def __init__(self, d: pd.DataFrame, peaks: Peaks, op: str = ""):
        self.family, self.d, self.dtype = "quant", d, "fp8"
        self.t = d.time_s.values.astype(float)
        self.bw = peaks.hbm_Bps
        self.nbytes = family_work("quant", "fp8", peaks.sms, {"m": d.m.values, "k": d.k.values, "op": op})[1]

    def predict(self, p, idx):
        return stream_v1.stream_time(self.nbytes[idx], self.bw, stream_v1.as_params(p))

    def fit(self, idx, x0=None):
        idx = _subset(idx)
        return stream_v1.fit(self.nbytes[idx], self.bw, self.t[idx], lsq)


QUANT_NOTES = {
    "": "FP8 activation quant pass: reads BF16, writes FP8 + one fp32 scale per 128 elements",
    "compute_scale": "scale computation of a dynamic FP8 quant (measured as dynamic minus static quant "
    "time): an amax pass reading the BF16 input; not the pass the workload prices",
    "dynamic_per_token": "dynamic per-token FP8 quant (one CTA per token: amax, then quant; reads BF16, writes "
    "FP8 + one fp32 scale per token), undifferenced at import; not the pass the workload prices",
}


def fit_stream(d: pd.DataFrame, backend: str, peaks: Peaks, gpu: str, folds=None, op: str = "") -> dict:
    """A stream_v1 entry for the quant rows `d` of one backend and op (the quant pass by default)."""
    data = StreamData(d.reset_index(drop=True), peaks, op)
    p = data.fit(np.arange(len(data.t)))
    cv, pts = _cv_with_residual("quant", data, shape_ids(data.d, "quant"), folds, p, None)
    e = _entry(data, gpu, backend, S.STREAM, {"alpha_us": _r(p[0], 5), "eta_m": _r(p[1], 5)}, cv)
    e["note"] = QUANT_NOTES.get(op, QUANT_NOTES[""])
    if op:
        e["op"] = op
    R.attach(e, _key("quant", e), R.AXES["quant"], *R.residual_arrays(data, pts, p))
    return e


# ---------------------------------------------------------------------------- families of a table
DTYPE_PREFERENCE = ("fp8_block", "fp8", "bf16")  # the main entry: what the engine runs DeepSeek in
LAYOUT_PREFERENCE = ("masked", "fused", "contiguous")  # moe: decode's layout first
OP_PREFERENCE = ("scale_matrix", "")  # quant: the quant pass the workload prices, before compute_scale
BIG_TABLE = 200  # timed rows from which gemm uses waves_v1 (measured tables spanning m); fewer: overlap_v1


VARIANT_KEYS = (
    "op",
    "dtype",
    "backend",
    "params",
    "rows",
    "cv",
    "residual",
    "act_quant_in_rows",
    "act_quant_model",
    "model_keys",
)


def _rank(values, preference) -> int:
    return min((preference.index(v) if v in preference else len(preference)) for v in values)


def _variant(e: dict, **keys) -> dict:
    return {
        **keys,
        **{k: e[k] for k in VARIANT_KEYS if k in e},
    }


def fit_variants(family: str, d: pd.DataFrame, peaks: Peaks, gpu: str, folds, notes: list, quant=None) -> dict | None:
    """One waves_v1 / stream_v1 fit per (layout, dtype, backend) group of `d` (>= MIN_ROWS timed rows);
    the preferred group is the entry, every group is listed under `variants` (the reader picks the
    one matching the priced dtype / layout). quant rows are also grouped by op: the quant pass
    (scale_matrix) and a dynamic quant's scale computation (compute_scale) are different kernels."""
    keys = ["layout", "dtype", "backend", "op" if family == "quant" else "layout"]
    fits = []
    for (layout, dtype, backend, op), g in d.groupby(keys, sort=True):
        op = op if family == "quant" else ""
        if family == "moe":
            g = MT.fit_rows(g, f"{layout or '-'} {dtype} {backend}", EXPERT_MAP, notes)
        if len(g) < MIN_ROWS:
            notes.append(f"{family} {layout or '-'} {dtype} {backend} {op}: {len(g)} rows, too few to fit".strip())
            continue
        e = (
            fit_stream(g, backend, peaks, gpu, folds, op)
            if family == "quant"
            else fit_waves(family, g, dtype or S.DEFAULT_DTYPE[family], backend, peaks, gpu, folds, quant)
        )
        if layout:
            e["layout"] = layout
            e["residual"]["key"] = _key(family, e, layout)
        rank = (
            _rank([op], OP_PREFERENCE),
            _rank([layout], LAYOUT_PREFERENCE),
            _rank([dtype], DTYPE_PREFERENCE),
            -len(g),
        )
        fits.append((rank, layout, e))
    if not fits:
        return None
    fits.sort(key=lambda f: f[0])
    main = dict(fits[0][2])
    main["variants"] = [_variant(e, **({"layout": lay} if lay else {})) for _, lay, e in fits]
    return main


def fit_table_families(df: pd.DataFrame, peaks: Peaks, gpu: str, folds, notes: list, elementwise=None) -> dict:
    """Entries for gemm (big tables), moe and quant from measured rows; {} when there are none. quant
    first: linear-op GEMM rows are fitted less their input quant (act_quant_model: this quant fit, else
    the stand-in from `elementwise`, the entry the step prices the engine's quant op with)."""
    timed = usable_rows(df)
    out = {}
    for family in ("quant", "gemm", "moe"):
        d = timed[timed.kernel == family]
        if family == "gemm" and len(d) < BIG_TABLE:
            continue  # small README tables keep overlap_v1 (moesim.calibration.fit.kernels)
        if len(d):
            quant = AQ.act_quant_model(out.get("quant"), elementwise, peaks) if family == "gemm" else None
            e = fit_variants(family, d, peaks, gpu, folds, notes, quant)
            if e:
                out[family] = e
    if "moe" in out and "grouped_gemm" not in out:
        out["grouped_gemm"] = derive_grouped(out["moe"])
    return out


def derive_grouped(moe: dict) -> dict:
    """grouped_gemm from the moe fit of the masked (else first) layout: the same waves_v1 tile
    params; the layer's alpha split over its two grouped GEMMs (the SiLU pass is its own op)."""
    v = next((v for v in moe["variants"] if v.get("layout") == "masked"), moe["variants"][0])
    p = {k: x for k, x in v["params"].items() if k not in (MT.ACT_ITER_PARAM, "expanded_act")}  # moe-only kernel
    p["alpha_us"] = _r(p["alpha_us"] / 2.0, 5)
    return {
        "status": "derived",
        "gpu": moe["gpu"],
        "model": S.WAVES,
        "dtype": v["dtype"],
        "backend": v["backend"],
        "params": p,
        "derived_from": f"moe ({v.get('layout', '-')})",
        "rows": 0,
        "cv": S.no_cv(),
        "source": moe["source"],
        "note": "derived: the MoE layer fit's grouped-GEMM tile params; alpha halved over up and down GEMMs",
    }
