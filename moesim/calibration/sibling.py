"""How well "calibrate one GPU, predict its siblings" works, on two GPUs that are both measured.

A profile fitted on the source GPU is derived for the target (moesim.calibration.fit.derive.derive_profile:
the source's efficiencies, latencies and residual ratios, the target's peaks and links) and every
measured row of the TARGET is priced through the profile reader (moesim.perf.profile.reader.Profile),
as `moesim kernel` and the step price it: GEMMs (plus the input quant the linear-op rows hold,
fit.act_quant), fused / grouped MoE (each fitted variant on its own backend's rows), MLA decode /
prefill and MHA attention (the entry's fitted backend), DeepEP LL / normal dispatch and combine, NCCL
all-reduce / all-gather. Per
family and variant: rows, median / p90 |predicted / measured - 1| (%), the median signed error
(bias, > 0: predicted slower) and the same on the decode-sized rows (<= 64 tokens; NCCL: <= 1 MiB).

    python -m moesim.calibration.sibling --source b200 --target gb200_nvl72 --engine trtllm

B200 and GB200 are the same Blackwell die (sm100, 148 SMs, 8 TB/s HBM3e); the hardware specs
differ in the datasheet peaks (GB200 +11 %) and the NVLink domain (8-GPU HGX vs NVL72). The figures
are in docs/calibration.md ("What transfers between sibling GPUs").
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import numpy as np
import pandas as pd

from moesim.calibration.fit import act_quant as AQ
from moesim.calibration.fit.collectives import CollRows
from moesim.calibration.fit.comm import a2a_data
from moesim.calibration.fit.comm_deepep import DeepEPRows
from moesim.calibration.fit.data import load_measurements, usable, usable_rows
from moesim.calibration.fit.derive import derive_profile
from moesim.calibration.fit.gemm import _shape_of as fit_shape
from moesim.calibration.fit.peaks import Peaks
from moesim.perf.profile.reader import Profile, read_profile_file
from moesim.specs.data import data_root
from moesim.specs.loader import load_hardware

SMALL_TOKENS = 64  # decode-sized rows (issue 14's acceptance: 1-64 tokens)
FAMILIES = ("gemm", "moe", "attention", "deepep", "nccl")


def stats(pred, meas) -> dict:
    """rows, median / p90 |pred / meas - 1| and the median signed error (%) over the finite rows."""
    e = np.asarray(pred, float) / np.asarray(meas, float) - 1.0
    e = e[np.isfinite(e)]
    if not len(e):
        return {"rows": 0, "median_abs_pct": None, "p90_abs_pct": None, "bias_pct": None}
    a = np.abs(e) * 100
    return {
        "rows": int(len(e)),
        "median_abs_pct": round(float(np.median(a)), 2),
        "p90_abs_pct": round(float(np.percentile(a, 90)), 2),
        "bias_pct": round(float(np.median(e)) * 100, 2),
    }


def _one_variant(prof: Profile, family: str, v: dict) -> Profile:
    """The profile with `family` holding only variant v (the reader prices the first variant that matches)."""
    p = copy.copy(prof)
    p.kernels = {**prof.kernels, family: {**prof.kernels[family], "variants": [v]}}
    return p


def _usable(df: pd.DataFrame, kernel: str) -> pd.DataFrame:
    return usable_rows(df, kernel).reset_index(drop=True)


def score_gemm(prof: Profile, df: pd.DataFrame, peaks: Peaks) -> list[tuple]:
    """GEMM rows per fitted variant (dtype, backend): the GEMM plus the input quant its linear-op rows hold."""
    out, rows = [], _usable(df, "gemm")
    for v in (prof.kernels.get("gemm") or {}).get("variants") or []:
        dt, be = v.get("dtype"), v.get("backend")
        g = rows[(rows.backend == be) & (rows.dtype == dt)]
        if not len(g):
            continue
        m, n, k = (g[c].to_numpy(float) for c in ("m", "n", "k"))
        t = np.asarray(_one_variant(prof, "gemm", v).kernel_time("gemm", m=m, n=n, k=k, dtype=dt), float)
        if v.get("act_quant_in_rows") and v.get("act_quant_model"):
            t = t + AQ.quant_seconds(m, k, peaks, v["act_quant_model"])
        out.append(("gemm", f"{dt} {be}", t, g.time_s.to_numpy(float), m <= SMALL_TOKENS))
    return out


def score_moe(prof: Profile, df: pd.DataFrame) -> list[tuple]:
    """MoE rows per fitted variant (backend, dtype, layout), shaped as the fit shapes them (fit.gemm)."""
    out, rows = [], _usable(df, "moe")
    for v in (prof.kernels.get("moe") or {}).get("variants") or []:
        be, dt, lay = v.get("backend"), v.get("dtype"), v.get("layout")
        g = rows[(rows.backend == be) & (rows.dtype == dt) & (rows.layout == lay)].reset_index(drop=True)
        if not len(g):
            continue
        shape = {**fit_shape(g, "moe", dt or "fp8", v.get("model_keys")), "layout": lay, "dtype": dt}
        t = np.asarray(_one_variant(prof, "moe", v).kernel_time("moe", **shape), float)
        out.append(("moe", f"{be} {dt} {lay}", t, g.time_s.to_numpy(float), g.tokens.to_numpy(float) <= SMALL_TOKENS))
    return out


def score_attention(prof: Profile, df: pd.DataFrame) -> list[tuple]:
    """MLA decode / prefill and MHA attention rows of each entry's fitted backend, per KV dtype (and phase, head dim)."""
    out = []
    for fam in ("mla_decode", "mla_prefill", "attention"):
        e = prof.kernels.get(fam)
        if e is None:
            continue
        rows = _usable(df, fam)
        rows = rows[rows.backend == e.get("backend")]
        keys = ["dtype"] + (["mode", "k"] if fam == "attention" else [])
        for key, g in rows.groupby(keys):
            key = key if isinstance(key, tuple) else (key,)
            shape = {c: g[c].to_numpy(float) for c in ("batch", "q_len", "heads", "context")}
            shape["kv_dtype"] = key[0]
            if fam == "attention":
                h = g.heads.to_numpy(float)
                shape["groups"] = np.where(np.isfinite(g.groups.to_numpy(float)), g.groups.to_numpy(float), h)
                shape["k"] = np.where(np.isfinite(g.k.to_numpy(float)), g.k.to_numpy(float), 128.0)
                shape["prefill"] = key[1] == "context"
            t = np.broadcast_to(np.asarray(prof.kernel_time(fam, **shape), float), (len(g),))
            small = shape["batch"] * shape["q_len"] <= SMALL_TOKENS
            out.append((fam, " ".join(str(x) for x in key), t, g.time_s.to_numpy(float), small))
    return out


def score_deepep(prof: Profile, df: pd.DataFrame, peaks: Peaks) -> list[tuple]:
    """DeepEP LL / normal rows, bytes and SMs as the comm fit reads them (fit.comm_deepep.DeepEPRows)."""
    out = []
    for mode in ("deepep-ll", "deepep-normal"):
        for op in ("dispatch", "combine"):
            e = (prof.comm.get(mode) or {}).get(op)
            ad = a2a_data(df, mode, op) if e is not None else None
            if ad is None:
                continue
            r = DeepEPRows(ad, mode, op, peaks)
            kw = dict(tokens=r.tokens, rdma_bytes=r.rdma, nvl_bytes=r.nvl, ep=r.ep, experts=r.experts, msg_bytes=r.msg)
            terms = prof.comm_time(mode, op, **kw, sms=r.sms)
            if terms is None:
                continue
            t = np.asarray(terms[0] + terms[1], float) + r.queued
            what = f"{mode} {op} ep {'/'.join(str(int(x)) for x in np.unique(r.ep))}"
            out.append(("deepep", what, t, r.t, r.tokens <= SMALL_TOKENS))
    return out


def score_collectives(prof: Profile, df: pd.DataFrame, peaks: Peaks) -> list[tuple]:
    """NCCL all-reduce / all-gather rows of each entry's backend (NCCL alone), bytes and links as the fit reads
    them (fit.collectives.CollRows); all-reduce rows of 16-bit dtypes only (the reader takes NVLS, as engines run it)."""
    out = []
    for op in ("all_reduce", "all_gather"):
        e = prof.collectives.get(op)
        if e is None:
            continue
        d = df[usable(df, f"nccl_{op}", positive=False) & (df.ep > 1)]
        d = d[d.backend == e.get("backend")]
        if op == "all_reduce":
            d = d[d.dtype.isin(("fp16", "bf16"))]
        if not len(d):
            continue
        r = CollRows(d.reset_index(drop=True), op, peaks)
        terms = prof.collective_time(op, r.n, r.msg, r.ring, r.link, custom=False)
        if terms is None:
            continue
        what = f"{op} {e.get('backend')} gpus {'/'.join(str(int(x)) for x in np.unique(r.n))}"
        out.append(("nccl", what, np.asarray(terms[0] + terms[1], float), r.t, r.msg <= 1 << 20))
    return out


def score_profile(prof: Profile, df: pd.DataFrame, families=FAMILIES) -> list[dict]:
    """One row per family and variant: stats on all rows and on the decode-sized ones (`small`)."""
    peaks = Peaks.from_hardware(prof.hardware)
    parts = []
    if "gemm" in families:
        parts += score_gemm(prof, df, peaks)
    if "moe" in families:
        parts += score_moe(prof, df)
    if "attention" in families:
        parts += score_attention(prof, df)
    if "deepep" in families:
        parts += score_deepep(prof, df, peaks)
    if "nccl" in families:
        parts += score_collectives(prof, df, peaks)
    return [{"family": f, "variant": w, **stats(p, t), "small": stats(p[s], t[s])} for f, w, p, t, s in parts]


def profile_file(gpu: str, engine: str, root: Path | None = None) -> Path:
    return Path(root or data_root() / "calibration" / "profiles") / f"{gpu}.{engine}.yaml"


def measurement_files(gpu: str, engine: str, root: Path | None = None) -> list[Path]:
    folder = Path(root or data_root() / "calibration" / "measurements") / gpu / engine
    return sorted(p for p in folder.iterdir() if p.name.endswith((".csv", ".csv.gz")))


def transfer_scores(source: str, target: str, engine: str, families=FAMILIES, rows: pd.DataFrame | None = None):
    """The target's measured rows priced through its profile derived from the source's shipped one.
    Priced at the source profile's path, so the residual side-car resolves as it does for shipped derived profiles."""
    src_path = profile_file(source, engine)
    src_hw, tgt_hw = load_hardware(source), load_hardware(target)
    derived = derive_profile(read_profile_file(src_path), src_hw, tgt_hw)
    df = rows if rows is not None else load_measurements(measurement_files(target, engine))
    return score_profile(Profile(derived, hardware=tgt_hw, path=src_path), df, families)


def _fmt(s: dict) -> str:
    if not s["rows"]:
        return "-"
    return f"{s['rows']:6d} {s['median_abs_pct']:6.2f} {s['p90_abs_pct']:6.2f} {s['bias_pct']:+6.2f}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="b200")
    ap.add_argument("--target", default="gb200_nvl72")
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--families", default=",".join(FAMILIES))
    a = ap.parse_args(argv)
    print(f"{a.target}.{a.engine} derived from {a.source}: rows, median / p90 |err| %, bias %; decode-sized rows")
    for r in transfer_scores(a.source, a.target, a.engine, tuple(a.families.split(","))):
        print(f"{r['family']:12s} {r['variant'][:60]:60s} {_fmt(r)} | {_fmt(r['small'])}")


if __name__ == "__main__":
    main()
