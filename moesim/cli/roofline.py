"""`moesim roofline`: the kernels of one configuration on the GPU's roofline.

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

import typer

COMM_KERNELS = {"deepep", "pplx", "nccl", "all_to_all", "all_reduce", "all_gather", "dispatch", "combine"}


# ------------------------------------------------------------------------------ data
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
    """calibration/measurements/<gpu>/ for a hardware name ('h100-sxm' -> h100_sxm/)."""
    from moesim.specs.loader import data_root

    base = data_root() / "calibration" / "measurements"
    for cand in (hw_name, hw_name.replace("-", "_"), hw_name.lower().replace("-", "_")):
        if (base / cand).is_dir():
            return base / cand
    return base / hw_name.replace("-", "_")


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


def measurement_points(paths) -> tuple[list[dict], list[dict], list[str]]:
    """CSV files or folders -> (calibration points, measured ceilings, notes)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files += sorted(p.glob("*.csv")) if p.is_dir() else [p]
    pts, ceilings = [], []
    n_excl = n_comm = n_bad = 0
    for f in files:
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                kernel = (row.get("kernel") or f.stem).strip()
                if (row.get("exclude") or "").strip():
                    n_excl += 1
                    continue
                if kernel in COMM_KERNELS or (row.get("op") or "").strip() in COMM_KERNELS:
                    n_comm += 1
                    continue
                t = _f(row, "time_s")
                m, n, k = _f(row, "m"), _f(row, "n"), _f(row, "k")
                flops = 2.0 * (_f(row, "groups") or 1.0) * m * n * k if None not in (m, n, k) else None
                fps = _f(row, "tflops")
                fps = fps * 1e12 if fps else (flops / t if flops and t else None)
                bps = _f(row, "GBps")
                nbytes = _f(row, "bytes")
                bps = bps * 1e9 if bps else (nbytes / t if nbytes and t else None)
                backend = (row.get("backend") or "").strip()
                sid = _source_id(row.get("source", ""))
                if fps and bps:
                    pts.append(
                        {
                            "kernel": kernel,
                            "backend": backend,
                            "intensity": fps / bps,
                            "flops_per_s": fps,
                            "bytes_per_s": bps,
                            "source": sid,
                            "file": str(f),
                        }
                    )
                elif fps or bps:
                    what = f"{fps / 1e12:,.0f} TFLOP/s" if fps else f"{bps / 1e9:,.0f} GB/s"
                    ceilings.append(
                        {
                            "label": f"{kernel} ({backend}) best case {what}" + (f" [{sid}]" if sid else ""),
                            "flops_per_s": fps,
                            "bytes_per_s": None if fps else bps,
                            "kernel": kernel,
                            "source": sid,
                        }
                    )
                else:
                    n_bad += 1
    by_kernel: dict = {}
    for p in pts:
        by_kernel.setdefault(p["kernel"], []).append(p)
    for kern, rows in by_kernel.items():
        backends = sorted({r["backend"] for r in rows if r["backend"]})
        legend = f"{kern} measured ({', '.join(backends) or 'csv'}, {len(rows)} rows)"
        for r in rows:
            r["legend"] = legend
    notes = []
    if not files:
        notes.append("no measurement CSVs found: no calibration points drawn")
    if n_excl:
        notes.append(f"{n_excl} measurement rows marked exclude (superseded or out of the fit) are not drawn")
    if n_comm:
        notes.append(f"{n_comm} communication rows (no FLOPs) are not on a FLOP roofline")
    if n_bad:
        notes.append(f"{n_bad} measurement rows lack TFLOP/s, GB/s or a shape and time: not drawn")
    return pts, ceilings, notes


def roofline(
    model="deepseek-v3", hardware="h800", *, out=None, measurements=None, calibration=True, **estimate_kwargs
) -> dict:
    """Estimate one configuration, place its ops on the roofline, overlay calibration points.

    measurements: CSV files / folders to overlay (default: the GPU's calibration/measurements
    folder when it exists); calibration=False draws none. Draws to ``out`` when given.
    -> dict with title, peaks, hbm_Bps, ops (points), left_out, calibration, ceilings, notes.
    """
    from moesim.api import estimate

    r = estimate(model, hardware, **estimate_kwargs)
    hw = r.hardware
    pts, left_out = op_points(r)
    peaks = {"FP8": hw.fp8_tflops * 1e12, "BF16": hw.bf16_tflops * 1e12}
    fp4 = getattr(hw, "fp4_tflops", None)
    if fp4:
        peaks = {"FP4": fp4 * 1e12, **peaks}
    notes = list(r.notes)
    cal, ceil = [], []
    if calibration:
        paths = [Path(p) for p in measurements] if measurements else []
        if not paths:
            d = measurements_dir(hw.name)
            if d.is_dir():
                paths = [d]
            else:
                notes.append(
                    f"no calibration measurements for {hw.name} ({d} does not exist): no calibration points drawn"
                )
        if paths:
            missing = [str(p) for p in paths if not p.exists()]
            if missing:
                from moesim.errors import ConfigError

                raise ConfigError(f"--measurements: {', '.join(missing)} does not exist")
            cal, ceil, n = measurement_points(paths)
            notes += n
    if left_out:
        base = [n for n in left_out if not (n.startswith("mtp_") and n[4:] in left_out)]
        more = " (and their mtp_ copies)" if len(base) < len(left_out) else ""
        notes.append(f"not placed (no FLOPs, or communication): {', '.join(base)}{more}")
    c = r.config
    title = (
        f"{r.model.name} on {hw.name} · {c['phase']} TP{c['tp']} DP{c['dp']} EP{c['ep']} · batch {c['batch']:g} "
        f"· context {c['context']:g}"
        + (f" · MTP {c['mtp']}" if c.get("mtp") else "")
        + f" · {c['overlap']} · {c['cost_mode']}"
    )
    res = {
        "title": title,
        "model": r.model.name,
        "hardware": hw.name,
        "config": c,
        "peaks": peaks,
        "hbm_Bps": hw.hbm_bw_Bps,
        "ops": pts,
        "left_out": left_out,
        "calibration": cal,
        "ceilings": ceil,
        "notes": notes,
    }
    if out is not None:
        from moesim.report.roofline_plot import plot_roofline

        plot_roofline(pts, out, peaks=peaks, hbm_Bps=hw.hbm_bw_Bps, calibration=cal, ceilings=ceil, title=title)
    return res


# ------------------------------------------------------------------------------ CLI
def register(app: typer.Typer) -> None:
    from moesim.cli import options as O

    @app.command("roofline")
    def roofline_cmd(
        model: str = typer.Option("deepseek-v3", "--model", "-m", help="catalog name, YAML spec or HF config.json"),
        hardware: str = typer.Option("h800", "--hardware", "-g", help="catalog name or YAML spec"),
        phase: str = O.PHASE,
        tp: int = O.TP,
        dp: int | None = O.DP,
        ep: int | None = O.EP,
        moe_tp: int = O.MOE_TP,
        batch: float | None = O.BATCH,
        context: float | None = O.CONTEXT,
        mtp: int = O.MTP,
        acceptance: float = O.ACCEPTANCE,
        redundant_experts: int = O.REDUNDANT,
        overlap: str | None = O.OVERLAP,
        cost_mode: str = O.COST_MODE,
        comm: str | None = O.COMM,
        expert_skew: str = O.EXPERT_SKEW,
        context_dist: str = O.CONTEXT_DIST,
        set_: list[str] | None = typer.Option(None, "--set", help="what-if override, e.g. hardware.hbm_bw_GBps=4800"),
        isl: float | None = O.ISL,
        osl: float | None = O.OSL,
        measurements: list[Path] | None = typer.Option(
            None,
            "--measurements",
            help="measurement CSV(s) or folder(s) to overlay (default: calibration/measurements/<gpu>/)",
        ),
        no_calibration: bool = typer.Option(False, "--no-calibration", help="draw no calibration points"),
        out: Path = typer.Option(Path("roofline.png"), "--out", help="image to write (.png, .svg or .pdf)"),
        json_out: bool = typer.Option(False, "--json", help="also print the points as one JSON object"),
    ):
        """Place one configuration's kernels on the GPU's roofline, with calibration points."""
        import json

        from moesim import units as U
        from moesim.errors import ConfigError

        if out.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise ConfigError(f"--out: {out.name!r} must end in .png, .svg or .pdf")
        res = roofline(
            model,
            hardware,
            out=out,
            measurements=measurements,
            calibration=not no_calibration,
            phase=phase,
            tp=tp,
            dp=dp,
            ep=ep,
            moe_tp=moe_tp,
            batch=batch,
            context=context,
            mtp=mtp,
            acceptance=acceptance,
            redundant_experts=redundant_experts,
            overlap=overlap,
            cost_mode=cost_mode,
            comm=comm,
            set=set_,
            expert_skew=expert_skew,
            context_dist=context_dist,
            isl=isl,
            osl=osl,
        )
        if json_out:
            typer.echo(json.dumps({**res, "out": str(out)}, indent=2, default=str))
            return
        typer.echo(res["title"])
        peaks = ", ".join(
            f"{k} {v / 1e12:,.0f} TFLOP/s (ridge {v / res['hbm_Bps']:,.0f} FLOP/B)" for k, v in res["peaks"].items()
        )
        typer.echo(f"roofs: {peaks}; HBM {res['hbm_Bps'] / 1e12:.2f} TB/s")
        typer.echo(f"{'op':18s} {'FLOP/B':>8s} {'TFLOP/s':>9s} {'time/step':>10s} {'share':>6s}  bound")
        for p in res["ops"]:
            share = "" if p.get("share") is None else f"{p['share'] * 100:5.1f}%"
            typer.echo(
                f"{p['name']:18s} {p['intensity']:8.1f} {p['flops_per_s'] / 1e12:9.1f} "
                f"{U.fmt_time(p['time_s']):>10s} {share:>6s}  {p['bound']}"
            )
        if res["calibration"] or res["ceilings"]:
            fams: dict = {}
            for c in res["calibration"]:
                fams[c["kernel"]] = fams.get(c["kernel"], 0) + 1
            parts = [f"{k} {v} points" for k, v in fams.items()] + [c["label"] for c in res["ceilings"]]
            typer.echo("calibration: " + "; ".join(parts))
        for n in res["notes"]:
            typer.echo(f"note: {n}")
        typer.echo(f"wrote {out}")
