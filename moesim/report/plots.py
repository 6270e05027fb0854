"""matplotlib figures (imported only by the commands that draw). Each is saved through the one
writer (`moesim.report.writer.write_figure`: format by extension, atomic)."""

from __future__ import annotations

import math

import numpy as np

from moesim.report.writer import write_figure


def _plt():
    # lazy: matplotlib only when a figure is drawn (start-up time)
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn (start-up time)
    import matplotlib.pyplot as plt

    return plt


def plot_timeline(tl: dict, out) -> None:
    """Two-stream Gantt chart of one layer (two periods): blocks per micro-batch and stage, comm
    under compute, bubbles as gaps — in the style of DeepSeek's overlap figures."""
    plt = _plt()
    colors = {0: "#4C72B0", 1: "#DD8452"}
    fig, ax = plt.subplots(figsize=(13, 3.2))
    rows = {"compute": 1.0, "comm": 0.0}
    for ev in tl["events"]:
        y = rows[ev["stream"]]
        x0, w = ev["start_s"] * 1e6, (ev["end_s"] - ev["start_s"]) * 1e6
        ax.barh(
            y,
            w,
            left=x0,
            height=0.6,
            color=colors.get(ev["micro_batch"], "grey"),
            edgecolor="black",
            alpha=0.85 if ev["stream"] == "compute" else 0.55,
        )
        label = f"{'AB'[ev['micro_batch']] if ev['micro_batch'] < 2 else ev['micro_batch']}:{ev['label']}"
        ax.text(x0 + w / 2, y, label, ha="center", va="center", fontsize=7, clip_on=True)
        # op boundaries inside a compute slot (proportional to op times)
        tot = sum(t for _, t in ev["ops"]) or 1.0
        x = x0
        for _, t in ev["ops"][:-1]:
            x += w * t / tot
            ax.plot([x, x], [y - 0.3, y + 0.3], color="white", lw=0.5)
    ax.set_yticks([0, 1], ["comm (NIC/NVLink)", "compute (SMs)"])
    ax.set_xlabel("time (µs)")
    ax.set_title(tl["title"], fontsize=9)
    fig.tight_layout()
    write_figure(fig, out, dpi=130)


def plot_parity(checks, out) -> None:
    """Predicted vs published (log-log), one marker per numeric check, coloured by class."""

    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    pts = [
        (c.expected, c.predicted, c.cls, c.case)
        for c in checks
        if isinstance(c.expected, float)
        and isinstance(c.predicted, float)
        and not math.isnan(c.rel_error)
        and c.expected > 0
        and c.predicted > 0
    ]
    markers = {"kernel": "o", "layer": "s", "system": "^", "economics": "D"}
    for cls in sorted({p[2] for p in pts}):
        xs = [p[0] for p in pts if p[2] == cls]
        ys = [p[1] for p in pts if p[2] == cls]
        ax.scatter(xs, ys, marker=markers.get(cls, "o"), label=cls)
    if pts:
        lo = min(min(p[0], p[1]) for p in pts) / 2
        hi = max(max(p[0], p[1]) for p in pts) * 2
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color="grey", alpha=0.15, label="±20%")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published")
    ax.set_ylabel("predicted by moesim")
    ax.legend(fontsize=8)
    ax.set_title("moesim validate: parity")
    fig.tight_layout()
    write_figure(fig, out, dpi=120)


def plot_frontiers(df, front, x, y, keys, out, flag: str = "--plot") -> None:
    """Pareto frontiers (lines) over the feasible configurations (faint points), one colour per group."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    feas = df[df["valid"] & df["fits"]]
    if keys:
        groups = list(front.groupby(keys, sort=True))
        allg = dict(list(feas.groupby(keys, sort=True)))
    else:
        groups, allg = [(None, front)], {None: feas}
    for g, f in groups:
        label = None if g is None else ", ".join(f"{k}={v}" for k, v in zip(keys, g if isinstance(g, tuple) else (g,)))
        pts = allg.get(g)
        (line,) = ax.plot(f[x], f[y], marker="o", ms=4, label=label)
        if pts is not None and len(pts):
            ax.scatter(pts[x], pts[y], s=6, alpha=0.25, color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.grid(True, which="both", alpha=0.3)
    if keys:
        ax.legend(fontsize=8)
    ax.set_title("Pareto frontiers (maximize both)")
    fig.tight_layout()
    write_figure(fig, out, dpi=120, flag=flag)


def plot_plan(r, out, flag: str = "--plot") -> None:
    """Nodes per hour (prefill + decode, stacked; dashed: the unrounded need) and cost per hour."""

    plt = _plt()
    h = r.hourly
    x = np.asarray(h["hour"])
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    a1.bar(x, h["prefill_nodes"], label="prefill nodes", color="#4c72b0")
    a1.bar(x, h["decode_nodes"], bottom=h["prefill_nodes"], label="decode nodes", color="#dd8452")
    a1.plot(
        x,
        np.asarray(h["prefill_nodes_fractional"]) + np.asarray(h["decode_nodes_fractional"]),
        "k--",
        label="unrounded need",
    )
    a1.axhline(r.totals["average_nodes"], color="grey", lw=1, label=f"average {r.totals['average_nodes']:.1f}")
    a1.set_ylabel("nodes")
    a1.legend(loc="upper left", fontsize=8)
    a1.set_title(f"{r.model} on {r.hardware}: nodes per hour ({r.cost_mode})")
    a2.bar(x, h["cost_usd"], color="#55a868")
    a2.set_ylabel("cost per hour ($)")
    a2.set_xlabel("hour")
    fig.tight_layout()
    write_figure(fig, out, dpi=120, flag=flag)
