"""`moesim plan`: capacity plan for a day of traffic (nodes per hour, cost, margin)."""

from __future__ import annotations

from pathlib import Path

import typer


def traffic_from_flags(
    traffic_file: Path | None = None,
    *,
    per_second: bool = False,
    input_tokens=None,
    cache_hit_tokens=None,
    output_tokens=None,
    hours=None,
    diurnal: str | None = None,
    context=None,
    prompt_length=None,
    prompt_dist=None,
    output_length=None,
    output_dist=None,
    min_tokens_per_s_per_user=None,
    max_ttft=None,
    prefill_ep=None,
    decode_ep=None,
    prefill_batch_tokens=None,
    decode_max_batch=None,
    mtp=None,
    acceptance=None,
    overlap=None,
    redundant_experts=None,
    usd_per_gpu_hour=None,
    price_input_hit=None,
    price_input_miss=None,
    price_output=None,
):
    """Traffic from an optional YAML file overlaid with flags (flags win)."""
    from moesim.errors import ConfigError
    from moesim.specs.traffic import merge, read_traffic_yaml, traffic_from_dict

    data = read_traffic_yaml(traffic_file) if traffic_file else {}
    suffix = "_per_s" if per_second else ""
    over = {
        f"input_tokens{suffix}": input_tokens,
        f"cache_hit_tokens{suffix}": cache_hit_tokens,
        f"output_tokens{suffix}": output_tokens,
        "hours": hours,
        "context": context,
        "slo": {"min_tokens_per_s_per_user": min_tokens_per_s_per_user, "max_ttft_s": max_ttft},
        "prices": {
            "usd_per_gpu_hour": usd_per_gpu_hour,
            "usd_per_million": {"input_hit": price_input_hit, "input_miss": price_input_miss, "output": price_output},
        },
        "prefill": {"batch_tokens": prefill_batch_tokens, "redundant_experts": redundant_experts},
        "decode": {
            "max_batch": decode_max_batch,
            "mtp": mtp,
            "acceptance": acceptance,
            "overlap": overlap,
            "redundant_experts": redundant_experts,
        },
    }
    for key, mean, dist in (
        ("prompt_length", prompt_length, prompt_dist),
        ("output_length", output_length, output_dist),
    ):
        if dist is not None:  # a shape on the given, the file's, or (prompt) the context's mean
            cur = data.get(key)
            base = mean if mean is not None else (cur.get("mean") if isinstance(cur, dict) else cur)
            if base is None and key == "output_length":
                raise ConfigError("--output-dist: needs a mean length; give --output-length")
            over[key] = {"dist": dist} if base is None else {"mean": base, "dist": dist}
            data.pop(key, None)
        elif mean is not None:
            over[key] = mean
            data.pop(key, None)
    if diurnal is not None:
        try:
            over["diurnal"] = [float(x) for x in diurnal.replace(" ", "").split(",") if x]
        except ValueError:
            raise ConfigError(f"--diurnal: {diurnal!r}; allowed comma-separated numbers (24 hourly weights)") from None
    if all(v is None for v in over["prices"]["usd_per_million"].values()):
        over["prices"].pop("usd_per_million")
    data = merge(data, over)
    for section, ep in (("prefill", prefill_ep), ("decode", decode_ep)):
        if ep is not None:  # a new EP size: attention DP follows (tp x dp = ep)
            sec = dict(data.get(section) or {}) if isinstance(data.get(section), dict) else {}
            sec["ep"] = ep
            sec.pop("dp", None)
            data[section] = sec
    return traffic_from_dict(data, file=traffic_file.name if traffic_file else None)


def _fmt_tokens(x: float) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:,.3g}{unit}"
    return f"{x:,.0f}"


def print_plan(r) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console()
    t, d, p, tot, e = r.traffic, r.decode, r.prefill, r.totals, r.economics
    title = f"capacity plan{' · ' + t.name if t.name else ''} · {r.model} on {r.hardware} · {r.cost_mode}"
    hit_pct = tot["cache_hit_share"] * 100
    lines = [
        f"[bold]{title}[/bold]",
        f"traffic      input {_fmt_tokens(t.input_tokens)} tokens ({_fmt_tokens(t.cache_hit_tokens)} cache hits, "
        f"{hit_pct:.1f}%), output {_fmt_tokens(t.output_tokens)} over {t.hours} h; context {t.context:g} "
        f"KV tokens per output token, prompt {t.prompt.describe()} tokens"
        + (f", output {t.output.describe()} tokens" if t.output is not None else ""),
        f"SLO          >= {t.min_tokens_per_s_per_user:g} tokens/s per user"
        + (f", TTFT <= {t.max_ttft_s:g} s" if t.max_ttft_s else ", no TTFT limit"),
    ]
    dp_ = t.decode
    lines += [
        "",
        f"[bold]decode[/bold]       EP{dp_.ep} DP{dp_.dp} TP{dp_.tp}, {d.gpus} GPUs = {d.nodes_per_unit:g} nodes per unit, "
        f"MTP {dp_.mtp} (acceptance {dp_.acceptance:g}), {dp_.redundant_experts} redundant experts, overlap {d.overlap}",
        f"  batch      {d.batch} requests per DP group (swept 1..{dp_.max_batch}) — limited by "
        f"{ {'slo': 'the SLO', 'memory': 'memory', 'sweep': 'the sweep limit'}[d.limited_by] }: "
        f"{d.why(t.min_tokens_per_s_per_user)}; memory allows up to {d.max_batch_memory}",
        f"  predicted  {d.tokens_per_s_per_user:.1f} tokens/s per user, step {d.step_time_s * 1e3:.1f} ms, TPOT "
        f"{d.tpot_s * 1e3:.1f} ms, {d.tokens_per_s_per_gpu:,.0f} tokens/s per GPU = "
        f"[bold]{d.tokens_per_s_per_node:,.0f} output tokens/s per node[/bold]",
        f"[bold]prefill[/bold]      EP{t.prefill.ep} DP{t.prefill.dp} TP{t.prefill.tp}, {p.gpus} GPUs = "
        f"{p.nodes_per_unit:g} nodes per unit, overlap {p.overlap}",
        f"  batch      {p.batch_tokens:,} prompt tokens per DP group per step — limited by "
        f"{ {'batch_tokens': 'prefill.batch_tokens (the cap)', 'ttft': 'the TTFT SLO', 'memory': 'memory'}[p.limited_by] }",
        "  TTFT       "
        + (
            f"mean {p.ttft_s:.2f} s at {p.utilisation * 100:.0f}% load (M/G/1 queueing + compute; "
            f"full load {p.full_load_tokens_per_s_per_node:,.0f} computed tokens/s per node)"
            if t.max_ttft_s
            else f"{p.ttft_s:.2f} s of compute, planned at full load (no TTFT target: no queueing headroom)"
        ),
        f"  predicted  {p.tokens_per_s_per_gpu:,.0f} computed tokens/s per GPU = [bold]{p.tokens_per_s_per_node:,.0f} "
        f"computed tokens/s per node[/bold]"
        + (
            f" (= {tot['prefill_input_tokens_per_s_per_node']:,.0f} input tokens/s per node counting the "
            f"{hit_pct:.0f}% cache hits, whose KV the computed tails attend to)"
            if tot["prefill_input_tokens_per_s_per_node"]
            else ""
        ),
    ]
    c.print("\n".join(lines), highlight=False)

    tab = Table(title="per hour (each pool rounded up to whole units, u)", title_justify="left")
    for col in ("hour", "share", "out tok/s", "miss tok/s", "prefill", "decode", "nodes", "$"):
        tab.add_column(col, justify="right")
    h = r.hourly
    for i in range(len(h["hour"])):
        tab.add_row(
            str(int(h["hour"][i])),
            f"{h['weight'][i] * 100:.1f}%",
            _fmt_tokens(h["output_tokens_per_s"][i]),
            _fmt_tokens(h["cache_miss_tokens_per_s"][i]),
            f"{h['prefill_nodes'][i]:g} ({int(h['prefill_units'][i])}u)",
            f"{h['decode_nodes'][i]:g} ({int(h['decode_units'][i])}u)",
            f"{h['nodes'][i]:g}",
            f"{h['cost_usd'][i]:,.0f}",
        )
    c.print(tab)

    money = [
        f"[bold]nodes[/bold]        average {tot['average_nodes']:.2f} (unrounded need {tot['average_nodes_fractional']:.2f}), "
        f"peak {tot['peak_nodes']}; prefill average {tot['average_prefill_nodes']:.2f}, decode average "
        f"{tot['average_decode_nodes']:.2f}",
        f"GPU-hours    {tot['gpu_hours']:,.0f} over {t.hours} h; off-peak freed vs holding the peak all window: "
        f"{tot['offpeak_gpu_hours_freed']:,.0f} GPU-hours ({tot['offpeak_node_hours_freed']:,.1f} node-hours)",
        f"[bold]cost[/bold]         ${e['cost_usd_per_day']:,.0f} per day at ${r.usd_per_gpu_hour:g}/GPU-hour",
    ]
    if e.get("usd_per_million_output_tokens") is not None:
        money.append(
            f"$/M tokens   output ${e['usd_per_million_output_tokens']:.3f} (whole cost on output); by pool: "
            + ", ".join(
                f"{k.replace('_', ' ')} ${v:.3f}" for k, v in e["usd_per_million_by_pool"].items() if v is not None
            )
            + " (cache hits carry no compute)"
        )
    if e.get("revenue_usd_per_day") is not None:
        money.append(
            f"[bold]revenue[/bold]      ${e['revenue_usd_per_day']:,.0f} per day at list prices (every token "
            f"paid) -> "
            + (
                f"margin {e['margin'] * 100:,.0f}% (revenue / cost - 1)"
                if e["margin"] is not None
                else "margin undefined (zero cost)"
            )
        )
    else:
        money.append("revenue      not computed: no list prices (--price-input-hit/--price-input-miss/--price-output)")
    money.append(
        f"KV transfer  peak {tot['peak_kv_transfer_Bps'] / 1e9:,.1f} GB/s prefill->decode "
        f"({r.kv_bytes_per_token:,.0f} B/token); peak NIC use {tot['peak_nic_utilisation'] * 100:.1f}%"
    )
    for w in r.warnings:
        money.append(f"[yellow]warning:[/yellow] {w}")
    for n in r.notes:
        money.append(f"note: {n}")
    c.print("\n".join(money), highlight=False)


def plot_plan(r, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    h = r.hourly
    x = np.asarray(h["hour"])
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    a1.bar(x, h["prefill_nodes"], label="prefill nodes", color="#4c72b0")
    a1.bar(x, h["decode_nodes"], bottom=h["prefill_nodes"], label="decode nodes", color="#dd8452")
    a1.plot(
        x,
        np.asarray(h["prefill_nodes_fractional"]) + np.asarray(h["decode_nodes_fractional"]),
        "k--",
        label="unrounded need",
    )
    a1.axhline(r.totals["average_nodes"], color="grey", lw=1, label=f"average {r.totals['average_nodes']:.1f}")
    a1.set_ylabel("nodes")
    a1.legend(loc="upper left", fontsize=8)
    a1.set_title(f"{r.model} on {r.hardware}: nodes per hour ({r.cost_mode})")
    a2.bar(x, h["cost_usd"], color="#55a868")
    a2.set_ylabel("cost per hour ($)")
    a2.set_xlabel("hour")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    @app.command()
    def plan(
        traffic: Path | None = typer.Option(None, "--traffic", help="traffic YAML (flags override its values)"),
        input_tokens: float | None = typer.Option(
            None, "--input-tokens", help="input tokens over the window (hits included)"
        ),
        cache_hit_tokens: float | None = typer.Option(
            None, "--cache-hit-tokens", help="input tokens that hit the KV cache"
        ),
        output_tokens: float | None = typer.Option(None, "--output-tokens", help="output tokens over the window"),
        per_second: bool = typer.Option(False, "--per-second", help="the three token flags are average tokens/s"),
        hours: int | None = typer.Option(None, "--hours", help="window length in hours (default 24)"),
        diurnal: str | None = typer.Option(None, "--diurnal", help="24 comma-separated hourly weights (default flat)"),
        context: float | None = typer.Option(None, "--context", help="mean KV length per output token (default 4989)"),
        prompt_length: float | None = typer.Option(
            None, "--prompt-length", help="mean prompt tokens per request (default = context)"
        ),
        prompt_dist: str | None = typer.Option(
            None, "--prompt-dist", help="prompt length shape: fixed (default) | exp | lognormal:<cv>"
        ),
        output_length: float | None = typer.Option(
            None,
            "--output-length",
            help="mean output tokens per request (with a prompt length: sets the decode context)",
        ),
        output_dist: str | None = typer.Option(
            None, "--output-dist", help="output length shape: fixed (default) | exp | lognormal:<cv>"
        ),
        min_tps: float | None = typer.Option(None, "--min-tokens-per-s-per-user", help="decode SLO (default 20)"),
        max_ttft: float | None = typer.Option(None, "--max-ttft", help="prefill TTFT SLO in s (default none)"),
        prefill_ep: int | None = typer.Option(None, "--prefill-ep", help="prefill unit EP = DP (default 32)"),
        decode_ep: int | None = typer.Option(None, "--decode-ep", help="decode unit EP = DP (default 144)"),
        prefill_batch_tokens: float | None = typer.Option(
            None, "--prefill-batch-tokens", help="prompt tokens per DP group per step, at most (default 16384)"
        ),
        decode_max_batch: int | None = typer.Option(
            None, "--decode-max-batch", help="largest requests per DP group swept (default 512)"
        ),
        mtp: int | None = typer.Option(None, "--mtp", help="decode draft tokens per step (default 1)"),
        acceptance: float | None = typer.Option(None, "--acceptance", help="per-draft acceptance (default 0.8)"),
        overlap: str | None = typer.Option(None, "--overlap", help="decode overlap: five-stage (default) | auto | ..."),
        redundant_experts: int | None = typer.Option(None, "--redundant-experts", help="both pools (default 32)"),
        usd_per_gpu_hour: float | None = typer.Option(None, "--usd-per-gpu-hour", help="default: the hardware spec's"),
        price_input_hit: float | None = typer.Option(
            None, "--price-input-hit", help="$ per million cache-hit input tokens"
        ),
        price_input_miss: float | None = typer.Option(
            None, "--price-input-miss", help="$ per million cache-miss input tokens"
        ),
        price_output: float | None = typer.Option(None, "--price-output", help="$ per million output tokens"),
        model: str = typer.Option("deepseek-v3", "--model", "-m", help="catalog name, YAML spec or HF config.json"),
        hardware: str = typer.Option("h800", "--hardware", "-g", help="catalog name or YAML spec"),
        set_: list[str] | None = typer.Option(None, "--set", help="what-if override, e.g. hardware.rdma_bw_GBps=100"),
        cost_mode: str = typer.Option("calibrated", "--cost-mode", help="roofline | calibrated | measured"),
        expert_skew: str = typer.Option("auto", "--expert-skew", help="auto | none | uniform | zipf:<s> | load.csv"),
        json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
        out: Path | None = typer.Option(None, "--out", help="write the plan: .json (all) or .csv/.parquet (hourly)"),
        plot: Path | None = typer.Option(None, "--plot", help="PNG/SVG/PDF of hourly nodes and cost"),
    ):
        """Capacity plan: nodes per hour for a day of traffic, from the model's own throughputs."""
        import json

        from moesim.analyses.plan import plan as run
        from moesim.errors import ConfigError

        if out is not None and out.suffix.lower() not in (".json", ".csv", ".parquet"):
            raise ConfigError(f"--out: {out.name!r} must end in .json, .csv or .parquet")
        if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise ConfigError(f"--plot: {plot.name!r} must end in .png, .svg or .pdf")
        t = traffic_from_flags(
            traffic,
            per_second=per_second,
            input_tokens=input_tokens,
            cache_hit_tokens=cache_hit_tokens,
            output_tokens=output_tokens,
            hours=hours,
            diurnal=diurnal,
            context=context,
            prompt_length=prompt_length,
            prompt_dist=prompt_dist,
            output_length=output_length,
            output_dist=output_dist,
            min_tokens_per_s_per_user=min_tps,
            max_ttft=max_ttft,
            prefill_ep=prefill_ep,
            decode_ep=decode_ep,
            prefill_batch_tokens=prefill_batch_tokens,
            decode_max_batch=decode_max_batch,
            mtp=mtp,
            acceptance=acceptance,
            overlap=overlap,
            redundant_experts=redundant_experts,
            usd_per_gpu_hour=usd_per_gpu_hour,
            price_input_hit=price_input_hit,
            price_input_miss=price_input_miss,
            price_output=price_output,
        )
        r = run(t, model, hardware, cost_mode, set=set_, expert_skew=expert_skew)
        d = r.to_dict()
        if out is not None:
            try:
                if out.suffix.lower() == ".json":
                    out.write_text(json.dumps(d, indent=2, allow_nan=False) + "\n")
                else:
                    df = r.to_dataframe()
                    df.to_csv(out, index=False) if out.suffix.lower() == ".csv" else df.to_parquet(out, index=False)
            except OSError as e:
                raise ConfigError(
                    f"--out: cannot write {str(out)!r} ({e.strerror or e}); allowed: a writable "
                    f".json, .csv or .parquet path"
                ) from None
        if plot is not None:
            try:
                plot_plan(r, plot)
            except OSError as e:
                raise ConfigError(
                    f"--plot: cannot write {str(plot)!r} ({e.strerror or e}); allowed: a writable "
                    f".png, .svg or .pdf path"
                ) from None
        if json_out:
            typer.echo(json.dumps(d, indent=2, allow_nan=False))
            return
        print_plan(r)
        for path in (out, plot):
            if path is not None:
                typer.echo(f"wrote {path}")
