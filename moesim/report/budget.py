"""`moesim recommend`: the fewest-GPU deployments for a load, with the runners-up and what was searched."""

from __future__ import annotations

from rich.table import Table

from moesim.report.sweep import console


def _searched(s: dict) -> list[str]:
    fmt = lambda vals: ",".join(f"{v:g}" if isinstance(v, int | float) else str(v) for v in vals)  # noqa: E731
    return [f"searched {name:<10} " + "; ".join(f"{k} {fmt(v)}" for k, v in ax.items()) for name, ax in s.items()]


def _ms(v) -> str:
    """A simulated time in ms; blank where the candidate was not simulated."""
    return f"{v * 1e3:,.1f}" if v == v else ""


def print_recommend(df, top: int) -> None:
    load = df.attrs.get("load", {})
    what = f"{load['request_rate']:g} requests/s" if "request_rate" in load else f"{load.get('concurrency', 0):g} users"
    c = console()
    if len(df) == 0:
        c.print(f"no deployment serves {what} under the targets", highlight=False)
    else:
        best = df.iloc[0]
        c.print(f"fewest GPUs for {what}: {best['gpus']} ({best['mode']}: {best['deployment']})", highlight=False)
        t = Table(title=f"best {min(top, len(df))} of {len(df):,} candidates (fewest GPUs, then tok/s/GPU)",
                  title_justify="left")  # fmt: skip
        sim = "sim_ttft_p90_s" in df.columns
        heads = ["GPUs", "mode", "deployment", "req/s capacity", "users", "tok/s/GPU", "TTFT ms", "TPOT ms"]
        heads += ["sim TTFT p90", "sim TPOT p90"] if sim else []
        for head in heads:
            t.add_column(head, justify="left" if head in ("mode", "deployment") else "right")
        for r in df.head(top).itertuples(index=False):
            cells = [str(r.gpus), r.mode, r.deployment, f"{r.capacity_requests_per_s:,.1f}", f"{r.capacity_users:,.0f}",
                     f"{r.tokens_per_s_per_gpu:,.0f}", f"{r.ttft_s * 1e3:,.1f}", f"{r.tpot_s * 1e3:.1f}"]  # fmt: skip
            if sim:
                cells += [_ms(r.sim_ttft_p90_s), _ms(r.sim_tpot_p90_s)]
            t.add_row(*cells)
        c.print(t)
    lines = [f"instances spanning nodes take whole nodes of {df.attrs.get('gpus_per_node')} GPUs"]
    if "sim_ttft_p90_s" in df.columns:
        lines.append("sim: p90 as a benchmark client measures it, from the request-level simulator at this load "
                     "(moesim simulate; closed-form TTFT / TPOT are means)")  # fmt: skip
    lines += _searched(df.attrs.get("searched", {}))
    lines += [f"note: {n}" for n in df.attrs.get("notes", [])]
    c.print("\n".join(lines), highlight=False)
