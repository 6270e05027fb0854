"""Provenance strings of profile entries: 'fitted:h800 DG rows (CV median 5.9%)', 'peak:h800 FMLA
rows (upper bound, no CV)', 'inherited:h800', 'derived:gemm (h800)' (shown by estimate and
`moesim calibrate show`)."""

from __future__ import annotations

import re


def label(e: dict) -> str:
    """The published-figure id prefixes of an entry's rows ('DG', 'DEP/PPLXK'), or 'local <backend>'."""
    ids = re.findall(r"\b([A-Z]{2,6})-\d{3}\b", str(e.get("source", "")))
    pre = sorted(set(ids), key=ids.index)
    return "/".join(pre) if pre else f"local {e.get('backend', '')}".strip()


def fit_status(e: dict) -> str:
    """The status of the fit an entry's numbers come from, through a sibling derivation (`derived_status`,
    moesim.calibration.fit.derive) and inheritance (`inherited_status`): "derived" only for a family
    priced with another family's fit (bmm from gemm), never for a whole profile derived from a sibling GPU."""
    st = e.get("derived_status") or e.get("status", "fitted")
    return e.get("inherited_status", st) if st == "inherited" or "derived_status" not in e else st


def entry_provenance(e: dict) -> str:
    st = e.get("status", "fitted")
    gpu = e.get("gpu", "")
    if st == "fitted":
        med = (e.get("cv") or {}).get("median_abs_pct")
        kind = "fitted+measured-residual" if e.get("residual") else "fitted"  # x R(shape), profile.residual
        return f"{kind}:{gpu} {label(e)} rows" + (f" (CV median {med}%)" if med is not None else "")
    if st == "peak":
        return f"peak:{gpu} {label(e)} rows (upper bound, no CV)"
    if st == "derived":
        return f"derived:{e.get('derived_from') or label(e)} ({gpu})"
    if st == "inherited":
        via = f" via {e['via']}" if e.get("via") else ""
        return f"inherited:{e.get('inherited_from', '?')}{via}"
    return f"{st}:{gpu}"


def comm_provenance(ops: dict, gpu: str) -> str:
    """One line for a comm mode's dispatch/combine entries (their CV medians when all were fitted)."""
    first = next(iter(ops.values()))
    if all(e.get("status") == "fitted" for e in ops.values()):
        cv = ", ".join(
            f"{op} {e['cv']['median_abs_pct']}%"
            for op, e in ops.items()
            if e.get("cv", {}).get("median_abs_pct") is not None
        )
        return f"fitted:{first.get('gpu', gpu)} {label(first)} rows" + (f" (CV median {cv})" if cv else "")
    return entry_provenance(first)


# what `moesim calibrate show` prints per entry (a row per kernel family, comm mode/op, collective)
_AIC = re.compile(r"aiconfigurator-core\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


def source_summary(e: dict) -> str:
    """Where an entry's rows came from: 'aiconfigurator-core 0.4.0 h200_sxm sglang 0.5.0 gemm_perf'
    (package, version, system, engine, engine version, table; each distinct one), else the
    published-figure ids ('DG', 'DEP/PPLXK') or 'local <backend>'."""
    text = str(e.get("source", ""))
    hits = list(dict.fromkeys(" ".join(m.groups()) for m in _AIC.finditer(text)))
    if hits:
        return "; ".join(f"aiconfigurator-core {h}" for h in hits)
    return label(e) if text else ""


def _origin(e: dict) -> str:
    st = e.get("status", "fitted")
    if st == "derived":
        was = f" ({e['derived_status']})" if e.get("derived_status") else ""
        return f"{e.get('derived_from', '?')}{was}"
    if st == "inherited":
        return f"{e.get('inherited_from', '?')} ({e.get('inherited_status', '?')})" + (
            f" via {e['via']}" if e.get("via") else ""
        )
    return str(e.get("gpu", ""))


def entry_row(name: str, e: dict) -> dict:
    """One entry: status, where its numbers were measured, source, rows, CV median / p90 / max (%)."""
    cv = e.get("cv") or {}
    return {
        "entry": name,
        "status": e.get("status", "fitted"),
        "origin": _origin(e),
        "model": e.get("model", ""),
        "source": source_summary(e),
        "rows": int(e.get("rows") or 0),
        "cv_median_pct": cv.get("median_abs_pct"),
        "cv_p90_pct": cv.get("p90_abs_pct"),
        "cv_max_pct": cv.get("max_abs_pct"),
        "transfer": e.get("transfer"),
    }


def entry_rows(data: dict, families=()) -> list[dict]:
    """Every entry of a profile mapping as `entry_row`s; `families` absent from the profile are
    listed with status roofline (priced at peak efficiency)."""
    rows = [entry_row(f, e) for f, e in (data.get("kernels") or {}).items()]
    rows += [entry_row(f"{m} {op}", e) for m, ops in (data.get("comm") or {}).items() for op, e in ops.items()]
    rows += [entry_row(op, e) for op, e in (data.get("collectives") or {}).items()]
    have = set(data.get("kernels") or {})
    rows += [entry_row(f, {"status": "roofline", "rows": 0}) for f in families if f not in have]
    return rows
