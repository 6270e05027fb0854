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
