"""All-reduce / all-gather fit, model `collective_v2`: NCCL's latency grows with the GPU count,
alpha(n) = alpha_us + step_us * steps(n) (ring: 2(n-1) steps for all-reduce, n-1 for all-gather;
one-shot: 2 / 1), the faster of ring and one-shot (moesim.perf.collectives.collective_terms, the
function the cost model prices with), bytes over bw_efficiency x the achievable link.

Backends are fitted separately: NCCL is the entry; an engine's one-shot custom all-reduce inside
CUDA graphs (SGLang / vLLM / TRT-LLM custom AR tables, `backend` = the table's kernel_source) is
kept under `custom` with the largest message it was measured at: the engine runs it up to that
size, so the cost model takes the faster of the two there.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moesim.calibration.fit.cv import cross_validate, cv_summary, lsq
from moesim.calibration.fit.peaks import Peaks
from moesim.perf.collectives import collective_terms
from moesim.perf.profile import schema as S
from moesim.perf.profile.schema import round_sig as _r
from moesim.workload.comm import ring_allgather_bytes, ring_allreduce_bytes


def _rows(df: pd.DataFrame, op: str) -> pd.DataFrame:
    return df[
        (df.kernel == f"nccl_{op}")
        & (df.exclude == "")
        & np.isfinite(df.time_s)
        & np.isfinite(df.bytes)
        & np.isfinite(df.ep)
        & (df.ep > 1)
    ].reset_index(drop=True)


def _fit_backend(d: pd.DataFrame, op: str, peaks: Peaks, folds) -> tuple[dict, dict, np.ndarray]:
    n, msg, t = d.ep.values.astype(float), d.bytes.values.astype(float), d.time_s.values.astype(float)
    ring = ring_allreduce_bytes(n, msg) if op == "all_reduce" else ring_allgather_bytes(n, msg)
    bw = np.where(
        n <= peaks.domain_gpus, peaks.nvlink_eff_Bps or peaks.nvlink_Bps, peaks.rdma_eff_Bps or peaks.rdma_Bps
    )

    def pred(p, idx):
        a, wire = collective_terms(op, n[idx], msg[idx], ring[idx], p[1] * 1e-6, bw[idx] * p[2])
        return p[0] * 1e-6 + a + wire / (bw[idx] * p[2])

    def fit(idx):
        res = lambda p: np.log(pred(p, idx) / t[idx])  # noqa: E731
        return lsq(res, [[2.0, 1.0, 0.8], [5.0, 0.3, 1.2], [1.0, 3.0, 0.5]], [0.0, 0.0, 0.01], [1e4, 1e3, 3.0])

    p = fit(np.arange(len(t)))
    errs, k = cross_validate(len(t), fit, pred, t, folds)
    params = {"alpha_us": _r(p[0], 5), "step_us": _r(p[1], 5), "bw_efficiency": _r(p[2], 5)}
    e = np.abs(errs[np.isfinite(errs)]) * 100
    cv = cv_summary(errs, k) | {"p90_abs_pct": _r(np.percentile(e, 90), 3) if len(e) else None}
    return params, cv, errs


def fit_collective_v2(df: pd.DataFrame, op: str, peaks: Peaks, gpu: str, folds: int | None) -> dict | None:
    """The collective_v2 entry of `op` (NCCL rows; custom all-reduce backends under `custom`)."""
    d = _rows(df, op)
    if len(d) < 6:
        return None
    nccl = d[d.backend.str.upper() == "NCCL"]
    main = nccl if len(nccl) >= 6 else d
    params, cv, _ = _fit_backend(main, op, peaks, folds)
    entry = {
        "status": "fitted",
        "gpu": gpu,
        "model": S.COLLECTIVE_V2,
        "backend": str(main.backend.iloc[0]),
        "params": params,
        "rows": len(main),
        "cv": cv,
        "source": f"{len(main)} rows: " + str(main.source.iloc[0]),
        "note": "t = alpha_us + step_us * steps(n) + wire bytes / (bw_efficiency x achievable link), ring or "
        "one-shot, the faster (moesim.perf.collectives.collective_terms)",
    }
    custom = {}
    for backend, g in d[d.backend.str.upper() != "NCCL"].groupby("backend"):
        if len(g) < 6:
            continue
        p, c, _ = _fit_backend(g.reset_index(drop=True), op, peaks, folds)
        custom[str(backend)] = {"params": p, "cv": c, "rows": len(g), "max_bytes": _r(float(g.bytes.max()))}
    if custom:
        entry["custom"] = custom
    return entry
