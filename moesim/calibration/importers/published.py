"""Turn the kernel-level rows of shared/reference/published_figures.csv into measurement CSVs.

    python -m moesim.calibration.importers.published ../shared/reference/published_figures.csv calibration/measurements

writes calibration/measurements/h800/{gemm,grouped_gemm,mla,deepep}.csv (DG, FMLA, DEP rows) and
calibration/measurements/h100_sxm/pplx.csv (PPLXK rows). Only kernel-level families are read;
system-level rows (OII, PPLX, seed cases) are never touched: they are what the model must predict.

Conversions (each row's `note` repeats the one it used):
  * DeepGEMM: time = 2 * groups * m * n * k / published TFLOPS. The published GB/s then equals
    (m*k + n*k + 2*m*n) * groups / time to 0.3 %, which checks the shape parsing.
  * DeepEP low-latency: time = the published latency. The published "RDMA bandwidth" is logical:
    128 tokens x 8 pairs x (7168 + 224 + 16) B (dispatch) or x 14336 B (combine) / latency
    (DeepEP tests/test_low_latency.py); it is kept in GBps and checked, not fitted separately.
  * DeepEP normal: no latency is published, only a logical bottleneck bandwidth, so
    time = logical bytes / bandwidth with DeepEP's own counting (routing.py): 4096 tokens x
    E[distinct ranks incl. self] (intranode, NVL) or x E[distinct nodes incl. own] (internode,
    RDMA, top-min(nodes,4) groups) x 7392 B (FP8 + scales) / 14336 B (BF16).
  * FlashMLA: only best-case peaks without shapes (3000 GB/s memory-bound, 660 TFLOPS
    compute-bound): rows without time_s, fitted as a "peak" model.
  * pplx-kernels: time = the published mean latency.
Rows superseded by a newer kernel version are kept with an `exclude` reason.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from moesim.calibration.records import write_rows
from moesim.calibration.routing import deepep_logical_copies
from moesim.errors import CalibrationError
from moesim.workload.comm import combine_bytes_per_token, dispatch_bytes_per_token

HIDDEN, TOPK, EXPERTS, GPN = 7168, 8, 256, 8
KERNEL_FAMILIES = ("DG", "FMLA", "DEP", "PPLXK")


def _load(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError) as e:
        raise CalibrationError(f"{path}: cannot read published figures ({e})") from None
    need = {"id", "source", "gpu", "kernel_or_system", "condition", "metric", "value", "unit", "notes"}
    if not need <= set(df.columns):
        raise CalibrationError(f"{path}: expected columns {sorted(need)}")
    df["family"] = df["id"].str.split("-").str[0]
    return df[df["family"].isin(KERNEL_FAMILIES)].copy()


def _cite(rows: list, extra: str = "") -> str:
    """'ID (value unit extra), ...: reference | ...' of the published rows one measurement comes from."""
    parts = [f"{r.id} ({r.value} {r.unit}{extra})" for r in rows]
    return ", ".join(parts) + ": " + " | ".join(sorted({r.source for r in rows}))


def _date(source: str) -> str:
    m = re.search(r"(\d{4}-\d{2}-\d{2})", source)
    return m.group(1) if m else ""


def _commit(source: str) -> str:
    m = re.search(r"(\w+/\w+)?\s*README\.md@(\w+)", source)
    repo = re.search(r"github\.com/([\w.-]+/[\w.-]+)", source)
    if m and repo:
        return f"{repo.group(1).split('/')[1]}@{m.group(2)}"
    return ""


COMMON_H800 = {"gpu": "H800 SXM5", "sms": 132, "device": "cuda", "driver": ""}
COMMON_H100 = dict(COMMON_H800, gpu="H100 SXM5")
DSV3_ROUTING = {"hidden": HIDDEN, "topk": TOPK, "experts": EXPERTS, "gpus_per_node": GPN}


def _row(rows: list, extra: str = "", common=COMMON_H800, **kw) -> dict:
    """A measurement row from published rows (itertuples of one reference): the GPU's columns, the
    date and library commit read from the reference, the citation as `source`; `kw` win."""
    ref = rows[0].source
    return {**common, "date": _date(ref), "lib_versions": _commit(ref), "source": _cite(rows, extra), **kw}


def _payload_dtype(op: str) -> str:
    """DeepSeek-V3's all-to-all payloads: FP8 dispatch (with scales), BF16 combine."""
    return "fp8" if op == "dispatch" else ("bf16" if op else "")


# ---------------------------------------------------------------------------- DeepGEMM
DG_SUPERSEDED = "superseded: older DeepGEMM version, replaced by the README table of 2025-04-09"
DG_NOTE = (
    "time_s derived = 2*groups*m*n*k / published TFLOPS; published GB/s = groups*(m*k + n*k + 2*m*n) / time_s (checked)"
)


def _gemm_shape(cond: str) -> tuple[int, int, int, int] | None:
    """(groups, m, n, k) of a DeepGEMM table condition; None for a row without a shape."""
    mg = re.search(r"groups=(\d+) M_per_group=(\d+) N=(\d+) K=(\d+)", cond)
    if mg:
        return tuple(map(int, mg.groups()))
    md = re.search(r"M=(\d+) N=(\d+) K=(\d+)", cond)
    return (1, *map(int, md.groups())) if md else None


def deepgemm_rows(df: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    d = df[(df.family == "DG") & df.metric.isin(["compute throughput", "memory bandwidth"])]
    gemm, grouped = [], []
    for (cond, source), g in d.groupby(["condition", "source"], sort=False):
        tf = g[g.metric == "compute throughput"]
        bw = g[g.metric == "memory bandwidth"]
        if tf.empty:
            continue
        kern = g.kernel_or_system.iloc[0]
        shape = _gemm_shape(cond)
        if shape is None:
            continue
        groups, m, n, k = shape
        tflops = float(tf.value.iloc[0])
        gbps = float(bw.value.iloc[0]) if not bw.empty else None
        t = 2.0 * groups * m * n * k / (tflops * 1e12)
        check = groups * (m * k + n * k + 2.0 * m * n) / t / 1e9
        if gbps is not None and abs(check / gbps - 1) > 0.01:
            raise CalibrationError(
                f"{tf.id.iloc[0]}: published {gbps} GB/s does not match the parsed shape ({check:.0f})"
            )
        exclude = DG_SUPERSEDED if "superseded" in source else ""
        row = _row(
            list(pd.concat([tf, bw]).itertuples()), backend="deep_gemm", dtype="fp8", exclude=exclude, note=DG_NOTE
        )
        row.update(m=m, n=n, k=k, time_s=t, tflops=tflops, GBps=gbps, lib_versions=_commit(source) + "; NVCC 12.8")
        if "grouped" in cond or "m_grouped" in kern:
            row.update(kernel="grouped_gemm", groups=groups, layout="masked" if "masked" in kern else "contiguous")
            grouped.append(row)
        else:
            row.update(kernel="gemm")
            gemm.append(row)
    return gemm, grouped


# ---------------------------------------------------------------------------- FlashMLA
FMLA_USE = {
    "FMLA-001": ("mla_decode", "GBps", "", "memory-bound peak (achieved HBM bandwidth, 'up to'); shape not stated"),
    "FMLA-003": (
        "mla_decode",
        "tflops",
        "",
        "compute-bound peak of the 2025-04-22 kernel (h_q*s_q >= 64); shape not stated",
    ),
    "FMLA-002": (
        "mla_decode",
        "tflops",
        "superseded: original kernel; FMLA-003 (new kernel, +5-15 %) replaces it",
        "compute-bound peak of the original kernel",
    ),
    "FMLA-011": (
        "mla_sparse_decode",
        "tflops",
        "other kernel: DeepSeek-V3.2 sparse FP8 decode (DSA), not V3",
        "batch 128, heads 128, s_q 2, top-k 2048",
    ),
    "FMLA-012": (
        "mla_sparse_decode",
        "tflops",
        "other kernel: DeepSeek-V3.2 sparse FP8 decode (DSA), not V3",
        "previous version of FMLA-011",
    ),
    "FMLA-013": (
        "mla_sparse_decode",
        "tflops",
        "other kernel: DeepSeek-V3.2 sparse FP8 decode (DSA), not V3",
        "top-k 32768",
    ),
    "FMLA-015": (
        "mla_sparse_prefill",
        "tflops",
        "other kernel: sparse (DSA) prefill; corroborates the compute-bound MLA efficiency only",
        "forward, CUDA 12.8",
    ),
}


def flashmla_rows(df: pd.DataFrame) -> list[dict]:
    out = []
    for r in df[df.family == "FMLA"].itertuples():
        if r.id not in FMLA_USE:
            continue  # descriptive rows (specs, clocks, ratios) and Blackwell figures
        kernel, col, exclude, note = FMLA_USE[r.id]
        value = float(re.sub(r"[^\d.]", "", r.value))
        row = _row(
            [r],
            kernel=kernel,
            backend="flash_mla",
            dtype="bf16",
            exclude=exclude,
            note=note + "; no time_s: a best-case figure, fitted as a peak model",
        )
        row[col] = value
        if r.id in ("FMLA-011", "FMLA-012"):
            row.update(batch=128, heads=128, q_len=2)
        out.append(row)
    return out


# ---------------------------------------------------------------------------- DeepEP
def _ep_of(cond: str) -> int:
    m = re.search(r"EP\s?(\d+)", cond)
    return int(m.group(1)) if m else 0


NORMAL_SUPERSEDED = "superseded: Feb 2025 internode kernels; DEP-009..012 (after PR #130) replace EP32/EP64"
LL_SUPERSEDED = "superseded: pure-RDMA LL kernels; NVLink-assisted LL (DEP-037..052, PR #173) replace EP8-EP64"


def _deepep_row(op: str, rows: list, extra: str = "", **kw) -> dict:
    """A DeepEP measurement row: H800, DeepSeek-V3 routing (hidden 7168, top-8 of 256, 8 GPUs per node)."""
    return _row(rows, extra, kernel="deepep", backend="deep_ep", op=op, dtype=_payload_dtype(op), **DSV3_ROUTING, **kw)


def _deepep_normal_row(r) -> dict:
    """Normal kernels publish a logical bottleneck bandwidth only: time = logical bytes / bandwidth."""
    ep = _ep_of(r.condition)
    op = "dispatch" if "dispatch" in r.kernel_or_system else "combine"
    intranode = r.condition.startswith("Intranode")
    groups = min(max(ep // GPN, 1), 4)
    copies = float(deepep_logical_copies("nvl" if intranode else "rdma", ep, GPN, EXPERTS, TOPK, groups))
    per = dispatch_bytes_per_token(HIDDEN) if op == "dispatch" else combine_bytes_per_token(HIDDEN)
    logical = 4096 * copies * per
    bw = float(r.value)
    superseded = "original (Feb 2025) kernels" in r.notes and ep >= 32
    return _deepep_row(
        op,
        [r],
        f" {'NVL' if intranode else 'RDMA'}",
        mode="normal",
        ep=ep,
        tokens=4096,
        topk_groups=groups,
        bytes=logical,
        time_s=logical / (bw * 1e9),
        GBps=bw,
        exclude=NORMAL_SUPERSEDED if superseded else "",
        note=(
            f"time_s derived = logical bytes / published bandwidth; logical bytes = 4096 tokens x "
            f"{copies:.3f} {'distinct ranks incl. self' if intranode else 'distinct nodes incl. own'} "
            f"x {per:.0f} B (DeepEP test counting" + (")" if intranode else f", tokens limited to top-{groups} nodes)")
        ),
    )


def _deepep_ll_row(kern: str, ep: int, source: str, g: pd.DataFrame) -> dict | None:
    """Low-latency kernels: the published latency, checked against the logical bandwidth."""
    lat = g[g.metric == "latency"]
    bwr = g[g.metric == "RDMA bandwidth"]
    if lat.empty:
        return None
    op = "dispatch" if "dispatch" in kern else "combine"
    t = float(lat.value.iloc[0]) * 1e-6
    bw = float(bwr.value.iloc[0]) if not bwr.empty else None
    per_logical = (
        dispatch_bytes_per_token(HIDDEN, header_bytes=16) if op == "dispatch" else combine_bytes_per_token(HIDDEN)
    )
    logical = 128 * TOPK * per_logical
    if bw is not None and abs(logical / t / 1e9 / bw - 1) > 0.06:
        raise CalibrationError(f"{lat.id.iloc[0]}: latency and logical bandwidth disagree")
    superseded = "ebfe47e" in source and ep <= 64  # the original pure-RDMA kernels
    kernels = (
        "; NVLink-assisted LL kernels"
        if "d8dd185" in source
        else "; EP128/EP256 figures unchanged in the NVLink-assisted README (DEP-037 notes)"
        if ep >= 128
        else "; pure-RDMA LL kernels"
    )
    return _deepep_row(
        op,
        list(pd.concat([lat, bwr]).itertuples()),
        mode="ll",
        ep=ep,
        tokens=128,
        topk_groups="",
        bytes=logical,
        time_s=t,
        GBps=bw,
        exclude=LL_SUPERSEDED if superseded else "",
        note="time_s = published latency; GBps = DeepEP logical bandwidth = 128 x 8 pairs x "
        f"{per_logical:.0f} B / latency (checked)" + kernels,
    )


def deepep_rows(df: pd.DataFrame) -> list[dict]:
    d = df[df.family == "DEP"]
    out = [_deepep_normal_row(r) for r in d[d.kernel_or_system.str.startswith("DeepEP normal")].itertuples()]
    ll = d[d.kernel_or_system.str.startswith("DeepEP low-latency")]
    for (kern, ep, source), g in ll.groupby([ll.kernel_or_system, ll.condition.map(_ep_of), ll.source], sort=False):
        row = _deepep_ll_row(kern, ep, source, g)
        if row is not None:
            out.append(row)
    # V2 (ElasticBuffer) figures: recorded, not fitted
    for r in d[d.kernel_or_system.str.startswith("DeepEP V2 ") & (d.unit == "GB/s")].itertuples():
        op = "dispatch" if "dispatch" in r.kernel_or_system else "combine"
        shape = {"mode": "v2", "op": op, "tokens": 8192, "hidden": HIDDEN, "topk": TOPK}
        v2 = "other kernel: DeepEP V2 (NCCL Gin backend), no comm mode for it yet"
        out.append(
            _row([r], kernel="deepep", backend="deep_ep_v2", GBps=float(r.value), exclude=v2, note=r.condition, **shape)
        )
    return out


# ---------------------------------------------------------------------------- pplx-kernels (H100)
def pplx_rows(df: pd.DataFrame) -> list[dict]:
    out = []
    for r in df[df.family == "PPLXK"].itertuples():
        kern = r.kernel_or_system
        ep = _ep_of(r.condition)
        tokens = int(re.search(r"(\d+) token", r.condition).group(1))
        if kern.startswith("torch"):
            backend, op = "torch-all_to_all_single", ""
            exclude = "baseline: the README does not state the payload of the torch all_to_all_single run"
        else:
            transport = kern.split()[1].lower()
            backend = f"pplx-{transport}"
            op = "dispatch" if "Dispatch" in kern else "combine"
            exclude = (
                "IBRC transport (CPU-proxied): IBGDA is the fast path that is fitted" if transport == "ibrc" else ""
            )
        shape = {"mode": "pplx", "op": op, "ep": ep, "tokens": tokens, "dtype": _payload_dtype(op), **DSV3_ROUTING}
        note = "time_s = published mean latency; " + ("NVLink (intranode)" if ep <= GPN else "internode")
        t = float(r.value) * 1e-6
        out.append(
            _row(
                [r], " mean", COMMON_H100, kernel="pplx", backend=backend, time_s=t, exclude=exclude, note=note, **shape
            )
        )
    return out


def extract(reference_csv: Path, out_root: Path) -> dict[str, int]:
    df = _load(Path(reference_csv))
    gemm, grouped = deepgemm_rows(df)
    files = {
        Path(out_root) / "h800" / "gemm.csv": gemm,
        Path(out_root) / "h800" / "grouped_gemm.csv": grouped,
        Path(out_root) / "h800" / "mla.csv": flashmla_rows(df),
        Path(out_root) / "h800" / "deepep.csv": deepep_rows(df),
        Path(out_root) / "h100_sxm" / "pplx.csv": pplx_rows(df),
    }
    counts = {}
    for path, rows in files.items():
        write_rows(path, rows)
        counts[str(path)] = len(rows)
    return counts


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    from moesim.specs.loader import data_root  # lazy: only the maintenance entry point needs it

    ref = Path(sys.argv[1]) if len(sys.argv) > 1 else data_root() / "validation" / "published_figures.csv"
    root = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("calibration/measurements")
    for p, n in extract(ref, root).items():
        print(f"{p}: {n} rows")
