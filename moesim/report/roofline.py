"""`moesim roofline` text: roofs, one line per placed op, calibration families, notes; and the
figure of a roofline result (`draw_roofline`)."""

from __future__ import annotations

from moesim import units as U


def draw_roofline(res: dict, out) -> None:
    """The figure of `moesim.analyses.roofline.roofline`'s result, saved to ``out``."""
    from moesim.report.roofline_plot import plot_roofline  # lazy: matplotlib only when drawing

    keys = ("peaks", "hbm_Bps", "calibration", "ceilings", "title")  # named as plot_roofline's keywords
    plot_roofline(res["ops"], out, **{k: res[k] for k in keys})


def roofline_lines(res: dict) -> list[str]:
    lines = [res["title"]]
    peaks = ", ".join(
        f"{k} {v / 1e12:,.0f} TFLOP/s (ridge {v / res['hbm_Bps']:,.0f} FLOP/B)" for k, v in res["peaks"].items()
    )
    lines.append(f"roofs: {peaks}; HBM {res['hbm_Bps'] / 1e12:.2f} TB/s")
    lines.append(f"{'op':18s} {'FLOP/B':>8s} {'TFLOP/s':>9s} {'time/step':>10s} {'share':>6s}  bound")
    for p in res["ops"]:
        share = "" if p.get("share") is None else f"{p['share'] * 100:5.1f}%"
        lines.append(
            f"{p['name']:18s} {p['intensity']:8.1f} {p['flops_per_s'] / 1e12:9.1f} "
            f"{U.fmt_time(p['time_s']):>10s} {share:>6s}  {p['bound']}"
        )
    if res["calibration"] or res["ceilings"]:
        fams: dict = {}
        for c in res["calibration"]:
            fams[c["kernel"]] = fams.get(c["kernel"], 0) + 1
        parts = [f"{k} {v} points" for k, v in fams.items()] + [c["label"] for c in res["ceilings"]]
        lines.append("calibration: " + "; ".join(parts))
    lines += [f"note: {n}" for n in res["notes"]]
    return lines
