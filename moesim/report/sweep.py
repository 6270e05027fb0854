"""Sweep / pareto tables (rich): the rows of a grid, best first, constant columns in the title."""

from __future__ import annotations

import math

import numpy as np
from rich.console import Console
from rich.table import Table

from moesim import units as U
from moesim.analyses.sweep_digest import FOLDABLE, LATENCIES, rank  # noqa: F401  (rank re-exported)

COLS = [
    ("hardware", "hw", None),
    ("phase", "phase", None),
    ("tp", "TP", "d"),
    ("dp", "DP", "d"),
    ("ep", "EP", "d"),
    ("batch", "batch", "g"),
    ("context", "ctx", "g"),
    ("mtp", "mtp", "d"),
    ("overlap", "overlap", None),
    ("step_time_s", "step ms", "ms"),
    ("tpot_s", "TPOT ms", "ms"),
    ("ttft_s", "TTFT ms", "ms"),
    ("tokens_per_s_per_user", "tok/s/user", ",.1f"),
    ("tokens_per_s_per_gpu", "tok/s/GPU", ",.0f"),
    ("tokens_per_s_per_node", "tok/s/node", ",.0f"),
    ("replicas", "replicas", "d"),
    ("deployment_gpus", "GPUs used", "d"),
    ("total_tokens_per_s", "total tok/s", ",.0f"),
    ("bottleneck", "bound", None),
    ("fits", "fits", None),
    ("reason", "reason", None),
]
TITLED = ("hardware", "phase", "context", "mtp", "overlap")


def fmt_cell(v, f):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, (float, np.floating)) and not math.isfinite(v):
        return U.NA  # human output is finite (issue 17); the row's reason says why
    if f is None:
        return str(v)
    if f == "ms":
        return f"{v * 1e3:,.2f}"
    if f == "d":
        return str(int(v)) if float(v).is_integer() else f"{v:g}"
    return format(v, f)


def console():
    """A rich console; 220 columns wide when not a terminal (pipes, tests). Text is printed as is:
    no markup, no emoji codes (a value such as `A:B:STEP` or `[1, 2]` is data, not styling)."""

    c = Console(markup=False, emoji=False)
    if not c.is_terminal:
        c = Console(width=220, markup=False, emoji=False)
    return c


def _fold_constants(df, cols):
    """(columns left, 'name value' of the constant ones named in the title)."""
    const = []
    known = df.attrs.get("constants")  # a streamed sweep: (one value, the value, all missing) per column
    for name in FOLDABLE:
        if known is not None:
            one, v, missing = known.get(name, (False, None, False))
        elif name in df.columns and len(df):
            one = df[name].nunique(dropna=False) <= 1
            v, missing = df[name].iloc[0], one and name in LATENCIES and df[name].isna().all()
        else:
            continue
        if one:
            if name in LATENCIES and not missing:
                continue
            cols = [c for c in cols if c[0] != name]
            if name in TITLED and v == v and v is not None:
                const.append(f"{name} {fmt_cell(v, 'g' if name == 'context' else None)}")
    return cols, const


def print_table(df, title, top=None):

    cols, const = _fold_constants(df, [c for c in COLS if c[0] in df.columns])
    if const:
        title += " · " + ", ".join(const)
    t = Table(title=title, title_justify="left")
    for _, head, f in cols:
        t.add_column(head, justify="left" if f is None else "right")
    shown = df if top is None else df.head(top)
    for row in shown[[c[0] for c in cols]].itertuples(index=False):
        t.add_row(*[fmt_cell(v, c[2]) for v, c in zip(row, cols)])
    console().print(t)


def filters_text(flt: dict) -> str:
    """The row filters with their units: 'TPOT <= 50.00 ms, TTFT <= 2.000 s, >= 20 tokens/s per user'."""
    parts = []
    for key, label in (("max_tpot_s", "TPOT"), ("max_ttft_s", "TTFT")):
        if flt.get(key) is not None:
            parts.append(f"{label} <= {U.fmt_time(flt[key])}")
    if flt.get("min_tokens_per_s_per_user") is not None:
        parts.append(f">= {flt['min_tokens_per_s_per_user']:g} tokens/s per user")
    if flt.get("only_fits"):
        parts.append("fits in memory")
    return ", ".join(parts)


def summary(df) -> str:
    """'N configurations (V valid, F fit) in T s; batch: unit' and the sweep's notes."""

    rows = df.attrs.get("rows")  # a streamed sweep: df holds the top rows, attrs the whole sweep's counts
    n = rows["configurations"] if rows else len(df)
    valid = rows["valid"] if rows else int(np.sum(df["valid"])) if n else 0
    fits = rows["fit"] if rows else int(np.sum(df["valid"] & df["fits"])) if n else 0
    el = df.attrs.get("elapsed_s", float("nan"))
    ev = df.attrs.get("evaluated")
    shown = f"{n:,} configurations ({valid:,} valid, {fits:,} fit)"
    if ev and ev["configurations"] != n:
        shown = (
            f"{ev['configurations']:,} configurations evaluated ({ev['valid']:,} valid, {ev['fit']:,} fit), "
            f"{n:,} pass the filters"
        )
    eng = rows["engines"] if rows else sorted(df["engine"].unique()) if n and "engine" in df else []
    tail = f" · engine {', '.join(map(str, eng))}" if eng else ""
    lines = [f"{shown} in {el:.2f} s{tail}; batch: {df.attrs.get('units', {}).get('batch', '')}"]
    lines += [f"filters: {t}" for t in [filters_text(df.attrs.get("filters") or {})] if t]
    lines += [f"note: {x}" for x in df.attrs.get("notes", [])]
    return "\n".join(lines)
