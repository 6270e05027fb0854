"""Roofline figure (matplotlib; imported only by the commands and notebooks that draw).

Log-log: arithmetic intensity (FLOP per byte of memory traffic) on x, achieved FLOP/s on y. The
roofs are min(peak, HBM bandwidth x intensity) for each compute peak given (FP8 and BF16 for the
Hopper GPUs); the ridge point of each roof is where the HBM slope meets the peak.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from moesim.report.writer import write_figure

BOUND_COLORS = {"compute": "#C44E52", "memory": "#4C72B0", "latency": "#8172B2", "network": "#55A868"}
CAL_MARKERS = ("s", "D", "^", "v", "P", "X", "<", ">")


def _plt():
    # lazy: matplotlib only when a figure is drawn (start-up time)
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn (start-up time)
    import matplotlib.pyplot as plt

    return plt


def plot_roofline(
    points: Sequence[Mapping],
    out,
    *,
    peaks: Mapping[str, float],
    hbm_Bps: float,
    calibration: Iterable[Mapping] = (),
    ceilings: Iterable[Mapping] = (),
    title: str | None = None,
    label_points: bool = True,
) -> None:
    """Draw a roofline and save it to ``out`` (PNG, SVG or PDF by extension).

    points: one mapping per op with ``name``, ``intensity`` (FLOP/B), ``flops_per_s`` and
        optionally ``bound`` (colours the marker); non-positive values are skipped.
    peaks: compute ceilings in FLOP/s by label, e.g. {"FP8": 1.979e15, "BF16": 9.89e14}.
    hbm_Bps: memory bandwidth in B/s (the slope of every roof).
    calibration: measured kernels, each with ``kernel``, ``intensity`` and ``flops_per_s``
        (hollow markers, one style per kernel family).
    ceilings: measured best-case figures without a shape, each with ``label`` and either
        ``flops_per_s`` (a horizontal dotted line) or ``bytes_per_s`` (a dotted slope).
    """
    plt = _plt()
    pts = [p for p in points if _pos(p.get("intensity")) and _pos(p.get("flops_per_s"))]
    cal = [c for c in calibration if _pos(c.get("intensity")) and _pos(c.get("flops_per_s"))]
    ceil = list(ceilings)
    peak_vals = [v for v in peaks.values() if _pos(v)]
    if not peak_vals or not _pos(hbm_Bps):
        raise ValueError("plot_roofline: needs at least one positive peak and a positive hbm_Bps")
    (x_lo, x_hi), (y_lo, y_hi) = _limits(pts, cal, peak_vals, hbm_Bps)

    fig, ax = plt.subplots(figsize=(9.5, 6.2))
    n = 256
    grid = [x_lo * (x_hi / x_lo) ** (i / (n - 1)) for i in range(n)]
    _draw_roofs(ax, grid, peaks, hbm_Bps)
    _draw_ceilings(ax, grid, ceil, x_lo)
    _draw_calibration(ax, cal)
    _draw_ops(ax, pts)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of memory traffic)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)
    ax.legend(fontsize=7.5, loc="lower right", framealpha=0.9)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    _slope_label(ax, x_lo * 1.6, hbm_Bps, f"HBM {hbm_Bps / 1e12:.2f} TB/s")
    for c in ceil:
        if _pos(c.get("bytes_per_s")) and not _pos(c.get("flops_per_s")):
            _slope_label(ax, x_lo * 1.6, c["bytes_per_s"], c["label"], color="dimgrey", below=True, fontsize=7)
    if label_points:
        _label(fig, ax, pts, avoid=cal)
    write_figure(fig, out, dpi=130)


def _limits(pts, cal, peak_vals, hbm_Bps):
    """((x_lo, x_hi), (y_lo, y_hi)): decades around every point and ridge, room above the peaks."""
    xs = [p["intensity"] for p in pts] + [c["intensity"] for c in cal] + [v / hbm_Bps for v in peak_vals]
    ys = [p["flops_per_s"] for p in pts] + [c["flops_per_s"] for c in cal] + peak_vals
    x_lo = 10 ** math.floor(math.log10(min(xs) / 2))
    x_hi = 10 ** math.ceil(math.log10(max(xs) * 2))
    y_hi = max(ys) * 2.5
    y_lo = min(min(ys) / 3, hbm_Bps * x_lo)
    return (x_lo, x_hi), (y_lo, y_hi)


def _draw_roofs(ax, grid, peaks, hbm_Bps) -> None:
    """One roof per peak: min(peak, HBM bandwidth x intensity), highest peak first."""
    styles = ("-", "--", "-.", ":")
    for i, (label, peak) in enumerate(sorted(peaks.items(), key=lambda kv: -kv[1])):
        if not _pos(peak):
            continue
        roof = [min(peak, hbm_Bps * x) for x in grid]
        ax.plot(
            grid,
            roof,
            color="black",
            lw=1.6 if i == 0 else 1.1,
            ls=styles[i % len(styles)],
            label=f"{label} peak {peak / 1e12:,.0f} TFLOP/s (ridge {peak / hbm_Bps:,.0f} FLOP/B)",
        )


def _draw_ceilings(ax, grid, ceil, x_lo) -> None:
    """Measured best cases without a shape: dotted FLOP/s lines or dotted bandwidth slopes."""
    for c in ceil:
        if _pos(c.get("flops_per_s")):
            ax.axhline(c["flops_per_s"], color="grey", ls=":", lw=1.0)
            ax.text(
                x_lo * 1.15, c["flops_per_s"] * 1.04, c["label"], fontsize=7, color="dimgrey", ha="left", va="bottom"
            )
        elif _pos(c.get("bytes_per_s")):
            bw = c["bytes_per_s"]
            ax.plot(grid, [bw * x for x in grid], color="grey", ls=":", lw=1.0)


def _draw_calibration(ax, cal) -> None:
    """Hollow markers, one style per kernel family (in order of first appearance)."""
    fams = []
    for c in cal:
        if c.get("kernel") not in fams:
            fams.append(c.get("kernel"))
    for j, fam in enumerate(fams):
        sel = [c for c in cal if c.get("kernel") == fam]
        src = sel[0].get("legend") or f"{fam} (measured, {len(sel)} rows)"
        ax.scatter(
            [c["intensity"] for c in sel],
            [c["flops_per_s"] for c in sel],
            s=26,
            marker=CAL_MARKERS[j % len(CAL_MARKERS)],
            facecolors="none",
            edgecolors="dimgrey",
            lw=0.9,
            label=src,
            zorder=3,
        )


def _draw_ops(ax, pts) -> None:
    """Filled markers coloured by bound; one legend entry per bound."""
    seen_bounds = set()
    for p in pts:
        b = str(p.get("bound") or "")
        color = BOUND_COLORS.get(b, "#DD8452")
        lab = None
        if b not in seen_bounds:
            seen_bounds.add(b)
            lab = f"op ({b}-bound)" if b else "op"
        ax.scatter(
            [p["intensity"]], [p["flops_per_s"]], s=46, color=color, edgecolors="black", lw=0.6, zorder=4, label=lab
        )


def _label(fig, ax, pts, avoid=(), fontsize: float = 7.0) -> None:
    """Op names next to their markers; a label that would overlap one already placed moves up or down
    by a line (in display space), with a leader line back to its marker."""
    bbox = ax.get_window_extent()
    (x0, x1), (y0, y1) = [tuple(math.log10(v) for v in lim) for lim in (ax.get_xlim(), ax.get_ylim())]
    sx, sy = bbox.width / (x1 - x0), bbox.height / (y1 - y0)
    px = fig.dpi / 72.0
    h = fontsize * 1.35 * px
    boxes = []  # placed label boxes (left, bottom, right, top) in pixels
    marks = [((math.log10(p["intensity"]) - x0) * sx, (math.log10(p["flops_per_s"]) - y0) * sy) for p in pts]
    r = 4.0 * px  # markers are obstacles too
    for q in list(pts) + list(avoid):
        X, Y = (math.log10(q["intensity"]) - x0) * sx, (math.log10(q["flops_per_s"]) - y0) * sy
        boxes.append((X - r, Y - r, X + r, Y + r))

    def free(b):
        return all(b[2] < o[0] or b[0] > o[2] or b[3] < o[1] or b[1] > o[3] for o in boxes)

    order = sorted(range(len(pts)), key=lambda i: (-pts[i].get("time_s", 0.0), i))
    for i in order:
        p, (X, Y) = pts[i], marks[i]
        w = len(p["name"]) * fontsize * 0.62 * px
        dx = 6 * px
        chosen = None
        for step in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6):
            for side in (1, -1):
                left = X + dx if side > 0 else X - dx - w
                b = (left, Y - h / 2 + step * h, left + w, Y + h / 2 + step * h)
                if b[0] < 0 or b[2] > bbox.width:
                    continue
                if free(b):
                    chosen = (side, step, b)
                    break
            if chosen:
                break
        if chosen is None:
            chosen = (1, 0, (X + dx, Y - h / 2, X + dx + w, Y + h / 2))
        side, step, b = chosen
        boxes.append(b)
        moved = step != 0
        ax.annotate(
            p["name"],
            (p["intensity"], p["flops_per_s"]),
            xytext=((dx if side > 0 else -dx) / px, step * h / px),
            textcoords="offset points",
            fontsize=fontsize,
            ha="left" if side > 0 else "right",
            va="center",
            arrowprops=dict(arrowstyle="-", lw=0.4, color="grey", shrinkA=0, shrinkB=3) if moved else None,
            zorder=5,
        )


def _slope_label(ax, x, bw, text, *, color="black", below=False, fontsize=8) -> None:
    """Text along the line y = bw * x, rotated to its on-screen angle."""
    p0 = ax.transData.transform((x, bw * x))
    p1 = ax.transData.transform((x * 10, bw * x * 10))
    angle = math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))
    ax.annotate(
        text,
        (x, bw * x),
        xytext=(4, -7 if below else 4),
        textcoords="offset points",
        rotation=angle,
        rotation_mode="anchor",
        fontsize=fontsize,
        color=color,
        ha="left",
        va="top" if below else "bottom",
    )


def _pos(v) -> bool:
    try:
        return v is not None and math.isfinite(float(v)) and float(v) > 0
    except (TypeError, ValueError):
        return False


__all__ = ["plot_roofline"]
