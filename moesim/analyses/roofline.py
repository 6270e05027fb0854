"""Roofline data for `moesim roofline`: the kernels of one configuration on the GPU's roofline.

Each compute op of the step (as `moesim estimate` prices it) becomes one point: arithmetic
intensity = FLOPs / bytes of memory traffic, achieved FLOP/s = FLOPs / predicted time. Ops without
FLOPs (norms, activations, RoPE, embedding) and communication ops have no place on a FLOP roofline
and are listed instead. The MTP module repeats the main layers' kernels at the same shapes, so an
``mtp_<op>`` is drawn once, as ``<op>``.

Calibration points come from ``calibration/measurements/<gpu>/*.csv`` (the GPU's folder, or
``--measurements``): per row, FLOP/s = ``tflops`` (else 2·groups·m·n·k / ``time_s``) and bytes/s =
``GBps`` (else ``bytes`` / ``time_s``); their ratio is the intensity. Rows with a non-empty
``exclude`` are left out as in the fit; a best-case figure without a shape (only TFLOP/s or only
GB/s, e.g. FlashMLA's README) is drawn as a dotted measured ceiling; communication rows are skipped.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from moesim.engine.estimate import estimate
from moesim.errors import ConfigError
from moesim.specs.data import data_root, data_roots
from moesim.specs.loader import gpu_key

COMM_KERNELS = {"deepep", "pplx", "nccl", "all_to_all", "all_reduce", "all_gather", "dispatch", "combine"}


def op_points(result) -> tuple[list[dict], list[str]]:
    """EstimateResult -> (one point per compute op with FLOPs, names of the ops left out)."""
    names = {o["name"] for o in result.ops}
    pts, left_out = [], []
    for o in result.ops:
        if o.get("stream") != "compute" or not (o["flops"] > 0 and o["bytes"] > 0 and o["time_s"] > 0):
            left_out.append(o["name"])
            continue
        if o["name"].startswith("mtp_") and o["name"][4:] in names:
            continue  # same kernel at the same shape as the main layer's op
        pts.append(
            {
                "name": o["name"],
                "intensity": o["flops"] / o["bytes"],
                "flops_per_s": o["flops"] / o["time_s"],
                "flops": o["flops"],
                "bytes": o["bytes"],
                "time_s": o["time_s"],
                "share": o.get("share"),
                "bound": o["bound"],
                "provenance": o["provenance"],
            }
        )
    pts.sort(key=lambda p: -p["time_s"])
    return pts, left_out


def measurements_dir(hw_name: str) -> Path:
    """calibration/measurements/<gpu>/ for a hardware name ('h100-sxm' -> h100_sxm/): the user root's
    ($MOESIM_DATA, where `calibrate run` writes) when it has one, else the shipped one."""
    for base in (r / "calibration" / "measurements" for r in data_roots()):
        for cand in dict.fromkeys((hw_name, hw_name.replace("-", "_"), gpu_key(hw_name))):
            if (base / cand).is_dir():
                return base / cand
    return data_root() / "calibration" / "measurements" / hw_name.replace("-", "_")


def _f(row: dict, key: str) -> float | None:
    v = (row.get(key) or "").strip()
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _source_id(src: str) -> str:
    m = re.match(r"\s*([A-Za-z]+-\d+)", src or "")
    return m.group(1) if m else ""


def _row_rates(row: dict) -> tuple[float | None, float | None]:
    """(FLOP/s, B/s) of one measurement row: tflops / GBps, else from the shape, bytes and time."""
    t = _f(row, "time_s")
    m, n, k = _f(row, "m"), _f(row, "n"), _f(row, "k")
    flops = 2.0 * (_f(row, "groups") or 1.0) * m * n * k if None not in (m, n, k) else None
    fps = _f(row, "tflops")
    fps = fps * 1e12 if fps else (flops / t if flops and t else None)
    bps = _f(row, "GBps")
    nbytes = _f(row, "bytes")
    bps = bps * 1e9 if bps else (nbytes / t if nbytes and t else None)
    return fps, bps


def _row_entry(row: dict, f: Path) -> tuple[str, dict | None]:
    """('exclude' | 'comm' | 'bad', None), ('point', calibration point) or ('ceiling', measured ceiling)."""
    kernel = (row.get("kernel") or f.stem).strip()
    if (row.get("exclude") or "").strip():
        return "exclude", None
    if kernel in COMM_KERNELS or (row.get("op") or "").strip() in COMM_KERNELS:
        return "comm", None
    fps, bps = _row_rates(row)
    backend = (row.get("backend") or "").strip()
    sid = _source_id(row.get("source", ""))
    if fps and bps:
        return "point", {
            "kernel": kernel,
            "backend": backend,
            "intensity": fps / bps,
            "flops_per_s": fps,
            "bytes_per_s": bps,
            "source": sid,
            "file": str(f),
        }
    if fps or bps:
        what = f"{fps / 1e12:,.0f} TFLOP/s" if fps else f"{bps / 1e9:,.0f} GB/s"
        return "ceiling", {
            "label": f"{kernel} ({backend}) best case {what}" + (f" [{sid}]" if sid else ""),
            "flops_per_s": fps,
            "bytes_per_s": None if fps else bps,
            "kernel": kernel,
            "source": sid,
        }
    return "bad", None


def _legend(pts: list[dict]) -> None:
    """One legend entry per kernel family: backends and row count."""
    by_kernel: dict = {}
    for p in pts:
        by_kernel.setdefault(p["kernel"], []).append(p)
    for kern, rows in by_kernel.items():
        backends = sorted({r["backend"] for r in rows if r["backend"]})
        legend = f"{kern} measured ({', '.join(backends) or 'csv'}, {len(rows)} rows)"
        for r in rows:
            r["legend"] = legend


def measurement_points(paths) -> tuple[list[dict], list[dict], list[str]]:
    """CSV files or folders -> (calibration points, measured ceilings, notes)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files += sorted(p.glob("*.csv")) if p.is_dir() else [p]
    found: dict[str, list] = {"point": [], "ceiling": [], "exclude": [], "comm": [], "bad": []}
    for f in files:
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                kind, entry = _row_entry(row, f)
                found[kind].append(entry)
    pts = found["point"]
    _legend(pts)
    notes = []
    if not files:
        notes.append("no measurement CSVs found: no calibration points drawn")
    if found["exclude"]:
        notes.append(
            f"{len(found['exclude'])} measurement rows marked exclude (superseded or out of the fit) are not drawn"
        )
    if found["comm"]:
        notes.append(f"{len(found['comm'])} communication rows (no FLOPs) are not on a FLOP roofline")
    if found["bad"]:
        notes.append(f"{len(found['bad'])} measurement rows lack TFLOP/s, GB/s or a shape and time: not drawn")
    return pts, found["ceiling"], notes


def _calibration(hw, measurements, notes: list[str]) -> tuple[list[dict], list[dict]]:
    """Calibration points and ceilings from ``measurements`` or the GPU's folder (notes appended)."""
    paths = [Path(p) for p in measurements] if measurements else []
    if not paths:
        d = measurements_dir(hw.name)
        if not d.is_dir():
            notes.append(f"no calibration measurements for {hw.name} ({d} does not exist): no calibration points drawn")
            return [], []
        paths = [d]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise ConfigError(f"--measurements: {', '.join(missing)} does not exist")
    cal, ceil, n = measurement_points(paths)
    notes += n
    return cal, ceil


def _title(r) -> str:
    c, hw = r.config, r.hardware
    return (
        f"{r.model.name} on {hw.name} · {c['phase']} TP{c['tp']} DP{c['dp']} EP{c['ep']} · batch {c['batch']:g} "
        f"· context {c['context']:g}"
        + (f" · MTP {c['mtp']}" if c.get("mtp") else "")
        + f" · {c['overlap']} · {c['cost_mode']}"
        + (f" · engine {c['engine']}" if c.get("engine") else "")
    )


def roofline(model="deepseek-v3", hardware="h800", *, measurements=None, calibration=True, **estimate_kwargs) -> dict:
    """Estimate one configuration, place its ops on the roofline, overlay calibration points.

    measurements: CSV files / folders to overlay (default: the GPU's calibration/measurements
    folder when it exists); calibration=False draws none. Draw the result with
    `moesim.report.roofline.draw_roofline`.
    -> dict with title, peaks, hbm_Bps, ops (points), left_out, calibration, ceilings, notes.
    """
    r = estimate(model, hardware, **estimate_kwargs)
    hw = r.hardware
    pts, left_out = op_points(r)
    peaks = {"FP8": hw.fp8_tflops * 1e12, "BF16": hw.bf16_tflops * 1e12}
    if not hw.has_fp8:  # Ampere: FP8 GEMMs run at the BF16 rate, one roof
        del peaks["FP8"]
    fp4 = getattr(hw, "fp4_tflops", None)
    if fp4:
        peaks = {"FP4": fp4 * 1e12, **peaks}
    notes = list(r.notes)
    cal, ceil = _calibration(hw, measurements, notes) if calibration else ([], [])
    if left_out:
        base = [n for n in left_out if not (n.startswith("mtp_") and n[4:] in left_out)]
        more = " (and their mtp_ copies)" if len(base) < len(left_out) else ""
        notes.append(f"not placed (no FLOPs, or communication): {', '.join(base)}{more}")
    return {
        "title": _title(r),
        "model": r.model.name,
        "hardware": hw.name,
        "config": r.config,
        "peaks": peaks,
        "hbm_Bps": hw.hbm_bw_Bps,
        "ops": pts,
        "left_out": left_out,
        "calibration": cal,
        "ceilings": ceil,
        "notes": notes,
    }
