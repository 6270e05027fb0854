"""`moesim disagg` summary: prefill and decode pools, KV transfer, rate match, aggregated baseline."""

from __future__ import annotations

from moesim.report.sweep import console


def _cfg(row, unit):
    return (
        f"TP{row['tp']} DP{row['dp']} EP{row['ep']} ({row['gpus']} GPUs), batch {row['batch']:g} {unit}, "
        f"overlap {row['overlap']}"
    )


def _pool_lines(p, d):
    lines = []
    if p:
        lines.append(
            f"prefill pool     {_cfg(p, 'tokens/DP group')}: {p['tokens_per_s_per_gpu']:,.0f} input tok/s/GPU, "
            f"TTFT {p['ttft_total_s'] * 1e3:,.1f} ms (KV transfer {p['kv_transfer_s'] * 1e3:.2f} ms)"
        )
    if d:
        lines.append(
            f"decode pool      {_cfg(d, 'requests/DP group')}, context {d['context']:g}: "
            f"{d['tokens_per_s_per_gpu']:,.0f} output tok/s/GPU, TPOT {d['tpot_s'] * 1e3:.1f} ms "
            f"({d['tokens_per_s_per_user']:.1f} tok/s/user)"
        )
    return lines


def _system_lines(r, p, d):
    kv, dep = r.kv_transfer, r.deployment
    lines = [
        f"KV transfer      {kv['bytes_per_request'] / 1e6:,.1f} MB/request over "
        f"{kv['link_bytes_per_s'] / 1e9:g} GB/s: {kv['transfer_s_per_request'] * 1e3:.2f} ms; decode "
        f"receives {kv['decode_kv_recv_s_per_step'] * 1e3:.2f} ms/step = "
        f"{kv['decode_kv_share_of_step'] * 100:.1f}% of the step; prefill NIC "
        f"{kv['prefill_kv_send_link_util'] * 100:.1f}% busy",
        f"rate match       {r.ratio_prefill_per_decode_gpu:.3f} prefill GPUs per decode GPU -> "
        f"{r.system_tokens_per_s_per_gpu:,.0f} output tok/s per GPU "
        f"({r.system_total_tokens_per_s_per_gpu:,.0f} input+output)",
    ]
    if dep:
        lines.append(
            f"whole instances  {dep['prefill_instances']} prefill x {p['gpus']} GPUs + "
            f"{dep['decode_instances']} decode x {d['gpus']} GPUs: "
            f"{dep['output_tokens_per_s_per_gpu']:,.0f} output tok/s/GPU, "
            f"{dep['requests_per_s']:,.1f} requests/s"
        )
    return lines


def _aggregated_lines(r, a):
    lines = [
        f"aggregated best  {_cfg(a, 'requests/DP group')}, context {a['context']:g}: {a['tokens_per_s_per_gpu']:,.0f} "
        f"output tok/s/GPU, TPOT {a['tpot_s'] * 1e3:.1f} ms, TTFT {a['ttft_s'] * 1e3:,.1f} ms "
        f"(p90 {a.get('ttft_p90_s', float('nan')) * 1e3:,.1f} ms) "
        f"({a.get('scheduler', 'mixed')}: prefill passes of {a['prefill_chunk_tokens']:,.0f} tokens, "
        f"{a.get('prefill_share', float('nan')) * 100:.1f}% of the time)"
    ]
    if r.speedup_vs_aggregated == r.speedup_vs_aggregated:
        lines.append(f"disaggregated / aggregated = {r.speedup_vs_aggregated:.2f}x output tokens/s per GPU")
    return lines


def _budget_lines(b) -> list[str]:
    """Disaggregated vs aggregated at the same GPU budget, side by side."""
    if not b:
        return []
    head = f"budget {b['total_gpus']} GPUs (instances spanning nodes take whole nodes of {b['gpus_per_node']})"
    rows = [
        f"  disaggregated  {b['disagg_gpus']:>5} GPUs  {b['disagg_output_tokens_per_s']:>12,.0f} output tok/s  "
        f"{b['disagg_output_tokens_per_s_per_gpu']:>9,.0f} per GPU",
        f"  aggregated     {b['aggregated_gpus']:>5} GPUs  {b['aggregated_output_tokens_per_s']:>12,.0f} output tok/s  "
        f"{b['aggregated_output_tokens_per_s_per_gpu']:>9,.0f} per GPU ({b['aggregated_replicas']} replicas)",
        f"  disaggregated / aggregated = {b['disagg_over_aggregated_total']:.2f}x total output tokens/s",
    ]
    return [head] + rows


def _searched_lines(s) -> list[str]:
    """The values each pool's search covered."""
    fmt = lambda vals: ",".join(f"{v:g}" if isinstance(v, int | float) else str(v) for v in vals)  # noqa: E731
    return [f"searched {name:<9} " + "; ".join(f"{k} {fmt(v)}" for k, v in ax.items()) for name, ax in s.items()]


def print_disagg(r) -> None:
    w = r.workload
    lines = [
        f"workload ISL {w['isl']:g} / OSL {w['osl']:g} tokens; targets TTFT <= {w['max_ttft_s'] * 1e3:g} ms, "
        f"TPOT <= {w['max_tpot_s'] * 1e3:g} ms; prefill on {w['prefill_hardware']}, decode on "
        f"{w['decode_hardware']} ({w['cost_mode']}{', engine ' + w['engine'] if w.get('engine') else ''})"
    ]
    p, d, a = r.prefill, r.decode, r.aggregated
    lines += _pool_lines(p, d)
    if p and d:
        lines += _system_lines(r, p, d)
    if a:
        lines += _aggregated_lines(r, a)
    lines += _budget_lines(r.budget) + _verified_lines(r.verified) + _searched_lines(r.searched)
    lines += [f"note: {n}" for n in r.notes]
    console().print("\n".join(lines), highlight=False)


def _verified_lines(rows) -> list[str]:
    """The simulated candidates: p90 as a benchmark client measures them (moesim simulate)."""
    out = []
    for v in rows or []:
        if v.get("skipped"):
            continue  # said in the notes
        out.append(
            f"simulated {v['candidate']:10s} TTFT mean {v['sim_ttft_mean_s'] * 1e3:,.1f} ms p90 "
            f"{v['sim_ttft_p90_s'] * 1e3:,.1f} ms · TPOT mean {v['sim_tpot_mean_s'] * 1e3:.1f} ms p90 "
            f"{v['sim_tpot_p90_s'] * 1e3:.1f} ms · {v['sim_output_tokens_per_s_per_gpu']:,.0f} tok/s/GPU ({v['load']})"
        )
    return out
