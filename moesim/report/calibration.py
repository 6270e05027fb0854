"""`moesim calibrate show`: a profile's provenance, what a user needs to trust a number (status,
where it was measured, source table and version, rows, cross-validation error), and its parameters."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from moesim.perf.profile import schema as S
from moesim.perf.profile.provenance import entry_rows


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _param(v) -> str:
    """A parameter as the profile holds it; the norm exponent q = inf (max of compute and memory time,
    moesim.perf.efficiency.smax) reads as '∞ (max)', never `inf`."""
    if isinstance(v, float) and not math.isfinite(v):
        return "∞ (max)" if v > 0 else "n/a"
    return str(v)


def show_data(data: dict, path, launch_s: float) -> dict:
    """The JSON of `calibrate show --json`: the profile's identity and one row per entry."""
    return {
        "gpu": data["gpu"],
        "engine": data.get("engine"),
        "profile": str(path),
        "schema_version": data.get("schema_version"),
        "date": str(data.get("date", "")),
        "derived_from": data.get("derived_from"),
        "transfer": data.get("transfer"),
        "launch_us": launch_s * 1e6,
        "launch_status": (data.get("launch") or {}).get("status", ""),
        "device_note": data.get("device_note", ""),
        "entries": entry_rows(data, S.KERNEL_FAMILIES),
    }


def _params_table(data: dict) -> Table:
    t = Table(title="parameters")
    for c in ("entry", "model", "parameters"):
        t.add_column(c)
    sections = [(f, e) for f, e in data["kernels"].items()]
    sections += [(f"{m} {op}", e) for m, ops in data["comm"].items() for op, e in ops.items()]
    sections += list(data["collectives"].items())
    for name, e in sections:
        t.add_row(
            name, str(e.get("model", "")), ", ".join(f"{k}={_param(v)}" for k, v in (e.get("params") or {}).items())
        )
    return t


def print_show(show: dict, data: dict) -> None:
    con = Console(emoji=False)
    eng = show["engine"] or "generic (no engine's own tables)"
    con.print(
        f"[bold]{show['gpu']}[/]  engine {eng}  file {show['profile']}  schema {show['schema_version']}  "
        f"date {show['date']}  launch {show['launch_us']:.2f} us ({show['launch_status']})"
    )
    if show["derived_from"]:
        tr = show["transfer"] or {}
        con.print(
            f"derived from {show['derived_from']}: transfers {tr.get('from_source', '?')}; "
            f"from this GPU's spec: {tr.get('from_target_spec', '?')}"
        )
    if show["device_note"]:
        con.print(show["device_note"])
    t = Table(title="entries (CV: held-out rows, |predicted/measured - 1|, %)")
    for c in ("entry", "status", "origin", "source", "rows", "CV median", "CV p90", "CV max"):
        t.add_column(c, justify="right" if c.startswith("CV") or c == "rows" else "left")
    for r in show["entries"]:
        t.add_row(
            r["entry"],
            r["status"],
            r["origin"],
            r["source"],
            str(r["rows"]),
            _pct(r["cv_median_pct"]),
            _pct(r["cv_p90_pct"]),
            _pct(r["cv_max_pct"]),
        )
    con.print(t)
    con.print(_params_table(data))
    for n in data.get("notes") or []:  # the fit's notes: variants not fitted, borrowed, backends left out
        con.print(f"note: {n}", markup=False, highlight=False)
