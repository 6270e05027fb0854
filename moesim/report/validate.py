"""`moesim validate` report: the predictions-vs-published table (terminal), the markdown report and
the parity plot. One `--out` is one file, its kind from the suffix (REPORT_SUFFIXES)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from moesim.errors import ConfigError
from moesim.report.plots import plot_parity
from moesim.report.writer import FIGURE_SUFFIXES, write_text

REPORT_SUFFIXES = (".md", *FIGURE_SUFFIXES)
COLUMNS = ("case", "class", "metric", "predicted", "published", "error", "tolerance", "result")


def fmt_value(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _err(c) -> str:
    return "" if math.isnan(c.rel_error) else f"{c.rel_error * 100:+.1f}%"


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def print_validate(checks, summ) -> None:

    t = Table(title="moesim validate — predictions vs published", title_justify="left")
    for col in COLUMNS:
        t.add_column(col)
    for c in checks:
        result = "[green]pass[/]" if c.passed else f"[red]FAIL[/] {c.note}"
        t.add_row(c.case, c.cls, c.metric, fmt_value(c.predicted), fmt_value(c.expected), _err(c), c.tolerance, result)
    con = Console(width=160, emoji=False)
    con.print(t)
    for cls, s in summ.items():
        med, mx = _pct(s["median_abs_error"]), _pct(s["max_abs_error"])
        con.print(f"{cls:10s} {s['passed']}/{s['checks']} pass   median |error| {med}   max |error| {mx}")
    n_fail = sum(not c.passed for c in checks)
    con.print(f"summary: {len(checks) - n_fail}/{len(checks)} checks within tolerance")


def check_report_suffix(out, flag: str = "--out", allowed=REPORT_SUFFIXES) -> None:
    """A clean error before any work when ``out``'s suffix is not one ``validate`` writes."""
    if out is not None and Path(out).suffix.lower() not in allowed:
        raise ConfigError(f"{flag}: {Path(out).name!r} has no known extension; allowed: {', '.join(allowed)}")


def write_report(checks, summ, out: Path, plot: Path | None = None) -> None:
    """``out`` by its suffix: .md the markdown table of every check and per-class summary (linking
    to ``plot`` when one is drawn), .png/.svg/.pdf the parity plot. One file per flag."""
    out = Path(out)
    if out.suffix.lower() != ".md":
        plot_parity(checks, out)
        return
    lines = [
        "# moesim validation report",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        lines.append(
            f"| {c.case} | {c.cls} | {c.metric} | {fmt_value(c.predicted)} | {fmt_value(c.expected)} | {_err(c)} | "
            f"{c.tolerance} | {'pass' if c.passed else 'FAIL'} |"
        )
    lines += ["", "| class | checks | passed | median abs error | max abs error |", "|---|---|---|---|---|"]
    for cls, s in summ.items():
        lines.append(
            f"| {cls} | {s['checks']} | {s['passed']} | {_pct(s['median_abs_error'])} | {_pct(s['max_abs_error'])} |"
        )
    if plot is not None:
        lines += ["", f"![parity plot]({Path(os.path.relpath(Path(plot).resolve(), out.resolve().parent)).as_posix()})"]
    write_text("\n".join([*lines, ""]), out, allowed=".md path")
