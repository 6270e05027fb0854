"""`moesim plan` report: traffic and SLO, the two pools, the hourly table, nodes, cost and margin."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from moesim.report.plan_agg import print_aggregated_plan
from moesim.report.plan_lines import fmt_tokens, money_lines, traffic_lines

DECODE_LIMIT = {"slo": "the SLO", "memory": "memory", "sweep": "the sweep limit"}
PREFILL_LIMIT = {"batch_tokens": "prefill.batch_tokens (the cap)", "ttft": "the TTFT SLO", "memory": "memory"}


def _decode_lines(r) -> list[str]:
    t, d = r.traffic, r.decode
    dp_ = t.decode
    return [
        "",
        f"[bold]decode[/bold]       EP{dp_.ep} DP{dp_.dp} TP{dp_.tp}, {d.gpus} GPUs = {d.nodes_per_unit:g} nodes per unit, "
        f"MTP {dp_.mtp} (acceptance {dp_.acceptance:g}), {dp_.redundant_experts} redundant experts, overlap {d.overlap}",
        f"  batch      {d.batch} requests per DP group (swept 1..{dp_.max_batch}) — limited by "
        f"{DECODE_LIMIT[d.limited_by]}: {d.why(t.min_tokens_per_s_per_user)}; memory allows up to {d.max_batch_memory}",
        f"  predicted  {d.tokens_per_s_per_user:.1f} tokens/s per user, step {d.step_time_s * 1e3:.1f} ms, TPOT "
        f"{d.tpot_s * 1e3:.1f} ms, {d.tokens_per_s_per_gpu:,.0f} tokens/s per GPU = "
        f"[bold]{d.tokens_per_s_per_node:,.0f} output tokens/s per node[/bold]",
    ]


def _prefill_lines(r) -> list[str]:
    t, p, tot = r.traffic, r.prefill, r.totals
    hit_pct = tot["cache_hit_share"] * 100
    ttft = (
        f"mean {p.ttft_s:.2f} s at {p.utilisation * 100:.0f}% load (M/G/1 queueing + compute; "
        f"full load {p.full_load_tokens_per_s_per_node:,.0f} computed tokens/s per node)"
        if t.max_ttft_s
        else f"{p.ttft_s:.2f} s of compute, planned at full load (no TTFT target: no queueing headroom)"
    )
    hits = (
        f" (= {tot['prefill_input_tokens_per_s_per_node']:,.0f} input tokens/s per node counting the "
        f"{hit_pct:.0f}% cache hits, whose KV the computed tails attend to)"
        if tot["prefill_input_tokens_per_s_per_node"]
        else ""
    )
    return [
        f"[bold]prefill[/bold]      EP{t.prefill.ep} DP{t.prefill.dp} TP{t.prefill.tp}, {p.gpus} GPUs = "
        f"{p.nodes_per_unit:g} nodes per unit, overlap {p.overlap}",
        f"  batch      {p.batch_tokens:,} prompt tokens per DP group per step — limited by "
        f"{PREFILL_LIMIT[p.limited_by]}",
        "  TTFT       " + ttft,
        f"  predicted  {p.tokens_per_s_per_gpu:,.0f} computed tokens/s per GPU = [bold]{p.tokens_per_s_per_node:,.0f} "
        f"computed tokens/s per node[/bold]" + hits,
    ]


def _hourly_table(r):

    tab = Table(title="per hour (each pool rounded up to whole units, u)", title_justify="left")
    for col in ("hour", "share", "out tok/s", "miss tok/s", "prefill", "decode", "nodes", "$"):
        tab.add_column(col, justify="right")
    h = r.hourly
    for i in range(len(h["hour"])):
        tab.add_row(
            str(int(h["hour"][i])),
            f"{h['weight'][i] * 100:.1f}%",
            fmt_tokens(h["output_tokens_per_s"][i]),
            fmt_tokens(h["cache_miss_tokens_per_s"][i]),
            f"{h['prefill_nodes'][i]:g} ({int(h['prefill_units'][i])}u)",
            f"{h['decode_nodes'][i]:g} ({int(h['decode_units'][i])}u)",
            f"{h['nodes'][i]:g}",
            f"{h['cost_usd'][i]:,.0f}",
        )
    return tab


def _capacity_lines(r) -> list[str]:
    t, tot, e = r.traffic, r.totals, r.economics
    return [
        f"[bold]nodes[/bold]        average {tot['average_nodes']:.2f} (unrounded need {tot['average_nodes_fractional']:.2f}), "
        f"peak {tot['peak_nodes']}; prefill average {tot['average_prefill_nodes']:.2f}, decode average "
        f"{tot['average_decode_nodes']:.2f}",
        f"GPU-hours    {tot['gpu_hours']:,.0f} over {t.hours} h; off-peak freed vs holding the peak all window: "
        f"{tot['offpeak_gpu_hours_freed']:,.0f} GPU-hours ({tot['offpeak_node_hours_freed']:,.1f} node-hours)",
        f"[bold]cost[/bold]         ${e['cost_usd_per_day']:,.0f} per day at ${r.usd_per_gpu_hour:g}/GPU-hour",
    ]


def _tail_lines(r) -> list[str]:
    tot = r.totals
    lines = [
        f"KV transfer  peak {tot['peak_kv_transfer_Bps'] / 1e9:,.1f} GB/s prefill->decode "
        f"({r.kv_bytes_per_token:,.0f} B/token); peak NIC use {tot['peak_nic_utilisation'] * 100:.1f}%"
    ]
    lines += [f"[yellow]warning:[/yellow] {w}" for w in r.warnings]
    lines += [f"note: {n}" for n in r.notes]
    return lines


def print_plan(r) -> None:
    if getattr(r, "aggregated", None) is not None:  # one aggregated pool (moesim.analyses.plan_agg)
        return print_aggregated_plan(r)

    c = Console(emoji=False)
    c.print("\n".join(traffic_lines(r) + _decode_lines(r) + _prefill_lines(r)), highlight=False)
    c.print(_hourly_table(r))
    c.print("\n".join(_capacity_lines(r) + money_lines(r) + _tail_lines(r)), highlight=False)
