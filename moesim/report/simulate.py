"""`moesim simulate` as a table: the deployment, then the latencies a benchmark client reports."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table


def _ms(v) -> str:
    return f"{v * 1e3:,.1f} ms" if v is not None and math.isfinite(v) else "n/a"


def _pool_text(p) -> str:
    d = p.to_dict()
    role = {"both": "", "prefill": "prefill ", "decode": "decode "}[d["role"]]
    moe = f" MoE-TP{d['moe_tp']}" if d["moe_tp"] > 1 else ""
    return (
        f"{d['instances']} x {role}TP{d['tp']} DP{d['dp']} EP{d['ep']}{moe} ({d['gpus_per_instance']} GPUs; KV "
        f"{d['kv_capacity_tokens_per_rank']:,.0f} tokens/rank, <= {d['max_running_per_rank']} running/rank, chunk "
        f"{d['chunk_tokens']:,} tokens)"
    )


def print_simulation(r, console: Console | None = None) -> None:
    con = console or Console(soft_wrap=False)
    c, s = r.config, r.summary
    con.print(f"{c['model']} on {c['hardware']} · engine {c['engine']} · {c['gpus']} GPUs · {c['cost_mode']}")
    for p in r.pools:
        con.print(f"  {_pool_text(p)}")
    con.print(f"workload: {c['workload']} ({s['completed']:,} measured, {s['warmup']:,} warm-up)")
    t = Table(title_justify="left")
    for col in ("metric", "mean", "p50", "p90", "p99"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E")):
        t.add_row(label, *[_ms(s.get(f"{key}_{q}_s")) for q in ("mean", "p50", "p90", "p99")])
    con.print(t)
    per_gpu = s.get("output_tokens_per_s_per_gpu", float("nan"))
    con.print(
        f"throughput       {s['requests_per_s']:,.2f} requests/s · {s['output_tokens_per_s']:,.0f} output tokens/s "
        f"({per_gpu:,.1f} per GPU) · {s['input_tokens_per_s']:,.0f} input tokens/s over {s['duration_s']:,.1f} s"
    )
    if s.get("slo_ttft_s") is not None or s.get("slo_tpot_s") is not None:
        slos = ", ".join(
            f"{k.upper()} <= {_ms(s[f'slo_{k}_s'])}" for k in ("ttft", "tpot") if s.get(f"slo_{k}_s") is not None
        )
        con.print(
            f"goodput          {s['goodput_requests_per_s']:,.2f} requests/s meet {slos} "
            f"({s['good_completed']:,} of {s['completed']:,})"
        )
    if s.get("cached_tokens_total"):
        con.print(f"prefix cache     {s['prefix_hit_frac'] * 100:.1f}% of prompt tokens served from cache")
    if s.get("preemptions_total"):
        con.print(
            f"KV pressure      {s['preemptions_total']:,} retractions / preemptions ({s['requests_preempted']:,} requests)"
        )
    st = r.stats
    con.print(
        f"simulated        {st['passes']:,} forward passes ({st['events']:,} events) in {st['run_s']:.2f} s; "
        f"{sum(p.surf.evaluations for p in r.pools):,} pass shapes priced in {st['pricing_s']:.2f} s"
    )
    for n in r.notes:
        con.print(f"note: {n}", highlight=False)


__all__ = ["print_simulation"]
