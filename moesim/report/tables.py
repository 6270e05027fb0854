"""Human-readable tables for the CLI (rich)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from moesim import units as U
from moesim.schedule.schemes import micro_batches


def model_line(m) -> str:
    """One line of `moesim models`."""
    return (
        f"{m.name:22s} {m.total_params() / 1e9:8.1f}B total {m.active_params() / 1e9:7.1f}B active "
        f"{m.attention.kind.value:4s} KV {m.kv_bytes_per_token / 1e3:7.1f} KB/token"
    )


def hardware_line(h) -> str:
    """One line of `moesim hardware`: the FP8 peak, or the BF16 one on a GPU without FP8 (A100)."""
    peak = f"FP8  {h.fp8_tflops:7.0f}" if h.has_fp8 else f"BF16 {h.bf16_tflops:7.0f}"
    return (
        f"{h.name:14s} {peak} TFLOP/s  HBM {h.memory_GB:5.0f} GB {h.hbm_bw_GBps / 1e3:4.1f} TB/s  "
        f"NVLink {h.nvlink_bw_GBps:4.0f} GB/s x{h.domain_gpus}  RDMA {h.rdma_bw_GBps:4.0f} GB/s  "
        f"${h.usd_per_gpu_hour:.2f}/GPU-h"
    )


OP_COLUMNS = [
    ("op", "left"),
    ("stage", "right"),
    ("per call", "right"),
    ("calls/step", "right"),
    ("per step", "right"),
    ("share", "right"),
    ("bound", "left"),
    ("provenance", "left"),
]


def _estimate_title(r) -> str:
    cfg = r.config
    return (
        f"{r.model.name} on {r.hardware.name} · {cfg['phase']} · TP{cfg['tp']} DP{cfg['dp']} EP{cfg['ep']}"
        f"{' MoE-TP' + str(cfg['moe_tp']) if cfg['moe_tp'] > 1 else ''} · {cfg['gpus']} GPUs · batch "
        f"{cfg['batch']:g} {'requests' if cfg['phase'] != 'prefill' else 'tokens'}/DP group · context "
        f"{cfg['context']:g} · overlap {cfg['overlap']} · {cfg['cost_mode']} · moe {cfg.get('moe_comm') or cfg['comm']}"
        f"{' · ' + cfg['engine_release'] if cfg.get('engine_release') else (' · engine ' + cfg['engine'] if cfg.get('engine') else '')}"
    )


def _ops_table(r, wide: bool):
    """One row per op, slowest first; narrow terminals drop stage and provenance (in --json),
    never wrap cells."""

    t = Table(title=_estimate_title(r), title_justify="left")
    cols = OP_COLUMNS if wide else [x for x in OP_COLUMNS if x[0] not in ("stage", "provenance")]
    for col, j in cols:
        t.add_column(col, justify=j, no_wrap=True)
    for o in sorted(r.ops, key=lambda o: -o["time_s"]):
        row = {
            "op": o["name"],
            "stage": str(o["stage"]),
            "per call": U.fmt_time(o["time_per_call_s"]),
            "calls/step": f"{o['count']:g}",
            "per step": U.fmt_time(o["time_s"]),
            "share": f"{o['share'] * 100:.1f}%",
            "bound": o["bound"],
            "provenance": o["provenance"],
        }
        t.add_row(*[row[col] for col, _ in cols])
    return t


def _step_lines(r) -> list[str]:
    cfg, v = r.config, r.values
    f = lambda k: float(v[k][0])  # noqa: E731
    n = U.fmt_num
    # an unstable open-loop queue (mixed) has no step time: n/a with the reason, never `inf`
    why = "" if math.isfinite(f("step_time_s")) else " (unstable: the queue grows without bound; see the notes)"
    lines = [
        f"step time        {U.fmt_time(f('step_time_s'))}{why}   (MoE layer {U.fmt_time(f('moe_layer_time_s'))}, "
        f"dense layer {U.fmt_time(f('dense_layer_time_s'))}; sum of op times above is the serial view)"
    ]
    if cfg["phase"] == "prefill":
        lines.append(f"TTFT             {U.fmt_time(f('ttft_s'))}")
    else:
        lines.append(
            f"TPOT             {U.fmt_time(f('tpot_s'))}   ({n(f('accepted_tokens_per_step'), '.2f')} tokens/step)"
        )
        lines.append(f"tokens/s/user    {n(f('tokens_per_s_per_user'), ',.1f')}")
    if cfg["phase"] == "mixed":
        lines += _mixed_lines(cfg, f)
    lines += [
        f"tokens/s/GPU     {n(f('tokens_per_s_per_gpu'), ',.0f')}     tokens/s/node {n(f('tokens_per_s_per_node'), ',.0f')}",
        f"MFU              {n(f('mfu') * 100, '.1f')}%      bottleneck: {v['bottleneck'][0]}",
    ]
    return lines


def _mixed_lines(cfg, f) -> list[str]:
    """Aggregated serving: TTFT and its parts, the scheduler and the load (moesim.engine.serving)."""
    n = U.fmt_num
    return [
        f"TTFT             {U.fmt_time(f('ttft_s'))}   (wait {U.fmt_time(f('ttft_queue_s'))} + own prefill passes "
        f"{U.fmt_time(f('ttft_prefill_s'))}; p90 {U.fmt_time(f('ttft_p90_s'))})",
        f"serving          {cfg['scheduler']} ({cfg['engine']}), {cfg['load']} loop: {n(f('request_rate_per_s'), ',.3g')} "
        f"requests/s, {n(f('concurrency'), ',.3g')} concurrent/DP group, decode batch {n(f('decode_batch'), ',.3g')}, "
        f"prefill {n(f('prefill_share') * 100, '.1f')}% of the time (any DP rank: "
        f"{n(f('prefill_pass_share') * 100, '.1f')}%)",
    ]


def _memory_lines(r) -> list[str]:
    m = r.memory
    wb = m["weights_breakdown_bytes"]
    return [
        f"memory/GPU       {U.fmt_bytes(m['total_bytes'])} of {U.fmt_bytes(m['capacity_bytes'])} -> "
        f"{'fits' if m['fits'] else 'DOES NOT FIT'}; max batch {int(float(r.values['max_batch'][0]))}",
        "  weights "
        + U.fmt_bytes(m["weights_bytes"])
        + " ("
        + ", ".join(f"{k.replace('_', ' ')} {U.fmt_bytes(x)}" for k, x in wb.items() if x)
        + ")",
        f"  KV cache {U.fmt_bytes(m['kv_cache_bytes'])}, activations {U.fmt_bytes(m['activation_bytes'])}, "
        f"comm buffers {U.fmt_bytes(m['comm_buffer_bytes'])}, reserve {U.fmt_bytes(m['reserve_bytes'])}",
    ]


def _scheme_time(scheme: str, t_s: float, batch: float, phase: str) -> str:
    """'two-batch 19.73 ms', or 'two-batch n/a (needs batch >= 2 ...)' for a scheme that cannot run here
    (the engine prices it as inf: moesim.engine.evaluate)."""
    if math.isfinite(t_s):
        return f"{scheme} {U.fmt_time(t_s)}"
    ub, unit = micro_batches(scheme), "token" if phase == "prefill" else "request"
    why = f"needs batch >= {ub}: one {unit} per micro-batch" if batch < ub else "not applicable here"
    return f"{scheme} {U.NA} ({why})"


def _model_lines(r) -> list[str]:
    lines = [
        f"model            {r.model.total_params() / 1e9:.1f}B params, {r.model.active_params() / 1e9:.1f}B "
        f"active, KV {r.model.kv_bytes_per_token:,.0f} B/token"
    ]
    v = r.values
    by = {k[len("step_time_s[") : -1]: float(x[0]) for k, x in v.items() if k.startswith("step_time_s[")}
    if len(by) > 1:
        order = sorted(by.items(), key=lambda kv: (not math.isfinite(kv[1]), kv[1]))  # runnable first
        b, ph = float(r.config["batch"]), str(r.config["phase"])
        lines.append("by overlap       " + ", ".join(_scheme_time(k, x, b, ph) for k, x in order))
    return lines + [f"note: {n}" for n in r.notes]


def does_not_fit_text(r, fit) -> str:
    """The verdict of an estimate that does not fit, with the smallest EP that does (``fit``: a
    `moesim.analyses.fitting.FittingEp` or None)."""
    c, mem = r.config, r.memory
    head = (
        f"DOES NOT FIT: {r.model.name} on {c['gpus']} x {r.hardware.name} (TP{c['tp']} DP{c['dp']} EP{c['ep']}) needs "
        f"{U.fmt_bytes(mem['total_bytes'])} per GPU of {U.fmt_bytes(mem['capacity_bytes'])}; the step above is "
        "priced as if it fitted."
    )
    if fit is None and not r.model.is_moe:
        return head + " A dense model: raise --tp (its weights split over TP ranks) or lower --batch or --context."
    if fit is None:
        return head + " No EP size fits at this batch and context: lower --batch or --context, or use larger GPUs."
    return (
        f"{head}\nsmallest EP that fits (same TP, batch, context): --ep {fit.ep} --dp {fit.dp} = {fit.gpus} GPUs, "
        f"{U.fmt_bytes(fit.total_bytes)} of {U.fmt_bytes(fit.capacity_bytes)} per GPU"
    )


def print_estimate(r) -> None:

    c = Console(markup=False, emoji=False)  # notes carry user text (file names, `--set` values): printed as is
    c.print(_ops_table(r, wide=c.width >= 100))
    c.print("\n".join(_step_lines(r) + _memory_lines(r) + _model_lines(r)), highlight=False)
