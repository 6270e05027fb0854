"""`moesim plan` report for one aggregated pool (`moesim.analyses.plan_agg.AggregatedPlan`)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from moesim.report.plan_lines import fmt_tokens, money_lines, traffic_lines

LIMIT = {"slo": "the tokens/s-per-user SLO", "ttft": "the TTFT SLO", "memory": "memory or a stable queue",
         "sweep": "the sweep limit (aggregated.max_batch)"}  # fmt: skip


def _pool_lines(r) -> list[str]:
    a, p = r.aggregated, r.traffic.aggregated
    return [
        "",
        f"[bold]aggregated[/bold]   EP{p.ep} DP{p.dp} TP{p.tp}, {a.gpus} GPUs = {a.nodes_per_unit:g} nodes per unit, "
        f"MTP {p.mtp}, {p.redundant_experts} redundant experts, overlap {p.overlap}; scheduler {a.scheduler}",
        f"  requests   ISL {a.isl:,.0f} computed prompt tokens, OSL {a.osl:,.0f} output tokens",
        f"  load       {a.batch} concurrent requests per DP group (swept up to {p.max_batch}) — limited by "
        f"{LIMIT[a.limited_by]}; {a.requests_per_s_per_unit:,.3g} requests/s per unit",
        f"  predicted  TPOT {a.tpot_s * 1e3:.1f} ms ({a.tokens_per_s_per_user:.1f} tokens/s per user; decode step "
        f"{a.decode_step_time_s * 1e3:.1f} ms), TTFT {a.ttft_s * 1e3:,.0f} ms (p90 {a.ttft_p90_s * 1e3:,.0f} ms), "
        f"[bold]{a.tokens_per_s_per_node:,.0f} output tokens/s per node[/bold] "
        f"(+ {a.input_tokens_per_s_per_node:,.0f} computed prompt tokens/s)",
    ]


def _hourly_table(r):
    tab = Table(title="per hour (rounded up to whole units, u)", title_justify="left")
    for col in ("hour", "share", "out tok/s", "in tok/s", "nodes", "$"):
        tab.add_column(col, justify="right")
    h = r.hourly
    for i in range(len(h["hour"])):
        tab.add_row(str(int(h["hour"][i])), f"{h['weight'][i] * 100:.1f}%", fmt_tokens(h["output_tokens_per_s"][i]),
                    fmt_tokens(h["input_tokens_per_s"][i]), f"{h['nodes'][i]:g} ({int(h['aggregated_units'][i])}u)",
                    f"{h['cost_usd'][i]:,.0f}")  # fmt: skip
    return tab


def print_aggregated_plan(r) -> None:
    tot, e = r.totals, r.economics
    c = Console(emoji=False)
    c.print("\n".join(traffic_lines(r) + _pool_lines(r)), highlight=False)
    c.print(_hourly_table(r))
    lines = [
        f"[bold]nodes[/bold]        average {tot['average_nodes']:.2f} (unrounded need "
        f"{tot['average_nodes_fractional']:.2f}), peak {tot['peak_nodes']}",
        f"GPU-hours    {tot['gpu_hours']:,.0f} over {r.traffic.hours} h; off-peak freed vs holding the peak: "
        f"{tot['offpeak_gpu_hours_freed']:,.0f} GPU-hours",
        f"[bold]cost[/bold]         ${e['cost_usd_per_day']:,.0f} per day at ${r.usd_per_gpu_hour:g}/GPU-hour",
    ]
    lines += money_lines(r) + [f"[yellow]warning:[/yellow] {w}" for w in r.warnings] + [f"note: {n}" for n in r.notes]
    c.print("\n".join(lines), highlight=False)
