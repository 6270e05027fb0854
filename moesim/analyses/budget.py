"""GPU budgets: whole instances under at most N GPUs, the fewest GPUs for a load, and what was searched.

Counting (issue 16): an instance of `gpus` GPUs occupies `gpus` GPUs when it fits in one node
(`gpus_per_node`, default the hardware's NVLink domain) and whole nodes when it spans several
(ceil(gpus / node) x node: a multi-node instance cannot share its nodes). An aggregated
deployment is `replicas` copies of one instance; a disaggregated one is x prefill + y decode
instances whose request rates match (prefill admits gpus x input tok/s/GPU / ISL requests/s, decode
finishes gpus x output tok/s/GPU / OSL). Everything is vectorized over the rows of a sweep frame.
"""

from __future__ import annotations

import numpy as np

from moesim.errors import ConfigError

NUMERIC_AXES = ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "acceptance", "redundant")


# A GPU budget of at most 100,000 GPUs (the largest clusters built): the disaggregated search
# holds (prefill sizes x decode sizes x instances) cells, instances up to N / the smallest instance.
MAX_BUDGET_GPUS = 100_000


def check_budget(total_gpus, gpus_per_node=None) -> tuple[int, int | None]:
    """(total_gpus, gpus_per_node) as ints in [1, MAX_BUDGET_GPUS] (gpus_per_node may stay None)."""
    out = []
    for name, v in (("total_gpus", total_gpus), ("gpus_per_node", gpus_per_node)):
        if v is None and name == "gpus_per_node":
            out.append(None)
            continue
        if v is None or float(v) != int(v) or int(v) < 1:
            raise ConfigError(f"{name}: must be a whole number >= 1; got {v!r}")
        if int(v) > MAX_BUDGET_GPUS:
            raise ConfigError(f"{name}: {v!r} is out of range; allowed a whole number in [1, {MAX_BUDGET_GPUS:,}]")
        out.append(int(v))
    return out[0], out[1]


def allocated_gpus(gpus, gpus_per_node: int) -> np.ndarray:
    """GPUs an instance occupies: itself inside one node, whole nodes when it spans several."""
    g = np.asarray(gpus, float)
    node = float(gpus_per_node)
    return np.where(g > node, np.ceil(g / node) * node, g)


def prune_axes(axes: dict, total_gpus: int) -> dict:
    """Axis values that alone exceed the budget (tp, ep, tp x dp > N) removed before the sweep (the
    cheap part of the filter; the frame filter below is exact)."""
    out = dict(axes)
    for k in ("tp", "ep", "dp"):
        if k in out and np.ndim(out[k]) > 0:
            kept = [v for v in out[k] if float(v) <= total_gpus]
            out[k] = kept or [min(out[k])]
    return out


def apply_budget(df, total_gpus: int, gpus_per_node: int):
    """Rows whose instance fits the budget, with `instance_gpus_allocated`, `replicas` (whole
    copies in N GPUs), `deployment_gpus` and `total_tokens_per_s` (replicas x gpus x tok/s/GPU)."""
    alloc = allocated_gpus(df["gpus"].to_numpy(float), gpus_per_node)
    replicas = np.floor(total_gpus / alloc)
    keep = replicas >= 1
    d = df.loc[keep].copy()
    d["instance_gpus_allocated"] = alloc[keep].astype(int)
    d["replicas"] = replicas[keep].astype(int)
    d["deployment_gpus"] = (replicas[keep] * alloc[keep]).astype(int)
    tps = d["tokens_per_s_per_gpu"].to_numpy(float) * d["gpus"].to_numpy(float)
    d["total_tokens_per_s"] = d["replicas"].to_numpy(float) * tps
    d["tokens_per_s_per_deployed_gpu"] = d["total_tokens_per_s"] / d["deployment_gpus"]
    d.attrs.update(df.attrs)
    d.attrs["budget"] = {"total_gpus": total_gpus, "gpus_per_node": gpus_per_node, "dropped": int((~keep).sum())}
    return d


def best_per_size(df, gpus_per_node: int, ok=None):
    """Index of the best row (max tokens/s per GPU) for each allocated instance size, among `ok`
    (default slo_ok): for one size, the most tokens/s per GPU is the most per instance."""
    ok = df["slo_ok"].to_numpy(bool) if ok is None else np.asarray(ok, bool)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return df.index[[]]
    alloc = allocated_gpus(df["gpus"].to_numpy(float)[idx], gpus_per_node)
    tps = df["tokens_per_s_per_gpu"].to_numpy(float)[idx]
    order = np.lexsort((-tps, alloc))  # by size, best first inside a size
    first = np.ones(order.size, bool)
    first[1:] = alloc[order][1:] != alloc[order][:-1]
    return df.index[idx[order[first]]]


def _pool_caps(df, rows, length, gpus_per_node):
    """(allocated GPUs, requests/s per instance) of the chosen rows (length: ISL or OSL tokens)."""
    g = df.loc[rows, "gpus"].to_numpy(float)
    return allocated_gpus(g, gpus_per_node), g * df.loc[rows, "tokens_per_s_per_gpu"].to_numpy(float) / length


def disagg_budget(pre, dec, isl, osl, total_gpus: int, gpus_per_node: int) -> dict:
    """Best x prefill + y decode instances within N GPUs: max requests/s (then fewest GPUs). Over
    each pair of (prefill size, decode size), every x, and y = the fewest decode instances that
    drain x prefill instances (or all that remain)."""
    pi, di = best_per_size(pre, gpus_per_node), best_per_size(dec, gpus_per_node)
    if len(pi) == 0 or len(di) == 0:
        return {}
    pg, preq = _pool_caps(pre, pi, isl, gpus_per_node)
    dg, dreq = _pool_caps(dec, di, osl, gpus_per_node)
    # x prefill instances: beyond N / the smallest instance none fits (the same best, fewer cells)
    x = np.arange(1, total_gpus // max(int(np.min(pg)), 1) + 1, dtype=float)
    PG, DG, X = np.meshgrid(pg, dg, x, indexing="ij")
    PR, DR, _ = np.meshgrid(preq, dreq, x, indexing="ij")
    y_room = np.floor((total_gpus - X * PG) / DG)
    y = np.minimum(y_room, np.ceil(X * PR / DR - 1e-9))
    ok = (y >= 1) & (y_room >= 1)
    req = np.where(ok, np.minimum(X * PR, y * DR), -np.inf)
    gpus = X * PG + y * DG
    if not ok.any():
        return {}
    flat = np.lexsort((np.where(ok, gpus, np.inf).ravel(), -req.ravel()))[0]
    a, b, c = np.unravel_index(flat, req.shape)
    r = float(req[a, b, c])
    used = int(gpus[a, b, c])
    return {
        "prefill_index": pi[a],
        "decode_index": di[b],
        "prefill_instances": int(X[a, b, c]),
        "decode_instances": int(y[a, b, c]),
        "prefill_gpus": int(X[a, b, c] * PG[a, b, c]),
        "decode_gpus": int(y[a, b, c] * DG[a, b, c]),
        "gpus": used,
        "requests_per_s": r,
        "output_tokens_per_s": r * osl,
        "output_tokens_per_s_per_gpu": r * osl / used,
    }


def agg_budget(mix) -> int | None:
    """Index of the budgeted aggregated row with the most total tokens/s (then fewest GPUs), or None."""
    ok = mix["slo_ok"].to_numpy(bool)
    if not ok.any():
        return None
    tot = np.where(ok, mix["total_tokens_per_s"].to_numpy(float), -np.inf)
    gp = mix["deployment_gpus"].to_numpy(float)
    return mix.index[int(np.lexsort((gp, -tot))[0])]


def budget_summary(budget, dep, agg) -> dict:
    """Disaggregated vs aggregated at the same GPU budget: GPUs used, total and per-GPU output tok/s."""
    total_gpus, gpn = budget
    d_tot = dep.get("output_tokens_per_s", float("nan")) if dep else float("nan")
    a_tot = agg["total_tokens_per_s"] if agg else float("nan")
    return {
        "total_gpus": total_gpus,
        "gpus_per_node": gpn,
        "disagg_gpus": dep.get("gpus", 0) if dep else 0,
        "disagg_output_tokens_per_s": d_tot,
        "disagg_output_tokens_per_s_per_gpu": dep.get("output_tokens_per_s_per_gpu", float("nan")),
        "aggregated_replicas": agg["replicas"] if agg else 0,
        "aggregated_gpus": agg["deployment_gpus"] if agg else 0,
        "aggregated_output_tokens_per_s": a_tot,
        "aggregated_output_tokens_per_s_per_gpu": agg["tokens_per_s_per_deployed_gpu"] if agg else float("nan"),
        "disagg_over_aggregated_total": d_tot / a_tot if (dep and agg) else float("nan"),
    }


def edge_flags(df, row, axes=NUMERIC_AXES, flag_names=None, limits=None) -> list[str]:
    """'best batch is the largest tried: widen --batch' for each swept numeric axis (more than one
    value in the frame) on which `row` sits at the largest value, unless that value is already the
    axis's physical limit (`limits`, e.g. tp: the NVLink domain)."""
    flag_names, limits = flag_names or {}, limits or {}
    out = []
    for k in axes:
        if k not in df.columns or row is None or k not in row:
            continue
        col = df[k].to_numpy(float)
        if col.size == 0 or np.isnan(col).all():
            continue
        lo, hi = np.nanmin(col), np.nanmax(col)
        if hi > lo and float(row[k]) == hi and hi < limits.get(k, np.inf):
            flag = flag_names.get(k, "--" + k.replace("_", "-"))
            out.append(f"best {k} is the largest tried ({hi:g}): widen {flag}")
    return out


def searched(axes: dict) -> str:
    """'tp 1,2,4,8; ep 8,16; ...' of an axes dict (what the search covered)."""
    parts = []
    for k, v in axes.items():
        vals = v if isinstance(v, list | tuple | np.ndarray) else [v]
        parts.append(f"{k} {','.join(f'{float(x):g}' if _num(x) else str(x) for x in vals)}")
    return "; ".join(parts)


def _num(x) -> bool:
    try:
        float(x)
    except (TypeError, ValueError):
        return False
    return True


__all__ = [
    "agg_budget",
    "allocated_gpus",
    "apply_budget",
    "best_per_size",
    "budget_summary",
    "check_budget",
    "disagg_budget",
    "edge_flags",
    "prune_axes",
    "searched",
]
