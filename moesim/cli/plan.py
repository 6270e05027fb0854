"""`moesim plan`: capacity plan for a day of traffic (nodes per hour, cost, margin). Flags ->
traffic here; the plan: `moesim.analyses.plan`; the report: `moesim.report.plan`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from moesim.analyses.plan import plan as run_plan
from moesim.cli import options as O
from moesim.errors import ConfigError
from moesim.report.plan import print_plan
from moesim.report.writer import check_figure_suffix, json_text, write_frame, write_json
from moesim.specs.traffic import merge, read_traffic_yaml, traffic_from_dict

PLAN_OUT = (".json", ".csv", ".parquet")


def _length_flags(data: dict, over: dict, prompt_length, prompt_dist, output_length, output_dist) -> None:
    """--prompt-length/--prompt-dist/--output-length/--output-dist into ``over`` (the file's value
    of a given key is dropped from ``data``): a shape on the given, the file's, or (prompt) the
    context's mean."""
    for key, mean, dist in (
        ("prompt_length", prompt_length, prompt_dist),
        ("output_length", output_length, output_dist),
    ):
        if dist is not None:
            cur = data.get(key)
            base = mean if mean is not None else (cur.get("mean") if isinstance(cur, dict) else cur)
            if base is None and key == "output_length":
                raise ConfigError("--output-dist: needs a mean length; give --output-length")
            over[key] = {"dist": dist} if base is None else {"mean": base, "dist": dist}
            data.pop(key, None)
        elif mean is not None:
            over[key] = mean
            data.pop(key, None)


def traffic_from_flags(traffic_file: Path | None, flags: TrafficOptions):
    """Traffic from an optional YAML file overlaid with flags (flags win); flags: a `TrafficOptions`
    block."""
    f = flags
    data = read_traffic_yaml(traffic_file) if traffic_file else {}
    suffix = "_per_s" if f["per_second"] else ""
    prices = {"input_hit": f["price_input_hit"], "input_miss": f["price_input_miss"], "output": f["price_output"]}
    over = {
        f"input_tokens{suffix}": f["input_tokens"],
        f"cache_hit_tokens{suffix}": f["cache_hit_tokens"],
        f"output_tokens{suffix}": f["output_tokens"],
        "hours": f["hours"],
        "context": f["context"],
        "slo": {"min_tokens_per_s_per_user": f["min_tokens_per_s_per_user"], "max_ttft_s": f["max_ttft"]},
        "prices": {"usd_per_gpu_hour": f["usd_per_gpu_hour"], "usd_per_million": prices},
        "prefill": {"batch_tokens": f["prefill_batch_tokens"], "redundant_experts": f["redundant_experts"]},
        "decode": {
            "max_batch": f["decode_max_batch"],
            "mtp": f["mtp"],
            "acceptance": f["acceptance"],
            "overlap": f["overlap"],
            "redundant_experts": f["redundant_experts"],
        },
    }
    _length_flags(data, over, f["prompt_length"], f["prompt_dist"], f["output_length"], f["output_dist"])
    diurnal = f["diurnal"]
    if diurnal is not None:
        try:
            over["diurnal"] = [float(x) for x in diurnal.replace(" ", "").split(",") if x]
        except ValueError:
            raise ConfigError(f"--diurnal: {diurnal!r}; allowed comma-separated numbers (24 hourly weights)") from None
    if all(v is None for v in prices.values()):
        over["prices"].pop("usd_per_million")
    data = merge(data, over)
    for section, ep in (("prefill", f["prefill_ep"]), ("decode", f["decode_ep"])):
        if ep is not None:  # a new EP size: attention DP follows (tp x dp = ep)
            sec = dict(data.get(section) or {}) if isinstance(data.get(section), dict) else {}
            sec["ep"] = ep
            sec.pop("dp", None)
            data[section] = sec
    return traffic_from_dict(data, file=traffic_file.name if traffic_file else None)


@dataclass(frozen=True)
class TrafficOptions(O.OptionBlock):
    """The traffic and deployment flags of `moesim plan` (each overrides the traffic YAML)."""

    input_tokens: Annotated[
        float | None, typer.Option("--input-tokens", help="input tokens over the window (hits included)")
    ] = None
    cache_hit_tokens: Annotated[
        float | None, typer.Option("--cache-hit-tokens", help="input tokens that hit the KV cache")
    ] = None
    output_tokens: Annotated[float | None, typer.Option("--output-tokens", help="output tokens over the window")] = None
    per_second: Annotated[bool, typer.Option("--per-second", help="the three token flags are average tokens/s")] = False
    hours: Annotated[int | None, typer.Option("--hours", help="window length in hours (default 24)")] = None
    diurnal: Annotated[
        str | None, typer.Option("--diurnal", help="24 comma-separated hourly weights (default flat)")
    ] = None
    context: Annotated[
        float | None, typer.Option("--context", help="mean KV length per output token (default 4989)")
    ] = None
    prompt_length: Annotated[
        float | None, typer.Option("--prompt-length", help="mean prompt tokens per request (default = context)")
    ] = None
    prompt_dist: Annotated[
        str | None, typer.Option("--prompt-dist", help="prompt length shape: fixed (default) | exp | lognormal:<cv>")
    ] = None
    output_length: Annotated[
        float | None,
        typer.Option(
            "--output-length", help="mean output tokens per request (with a prompt length: sets the decode context)"
        ),
    ] = None
    output_dist: Annotated[
        str | None, typer.Option("--output-dist", help="output length shape: fixed (default) | exp | lognormal:<cv>")
    ] = None
    min_tokens_per_s_per_user: Annotated[
        float | None, typer.Option("--min-tokens-per-s-per-user", help="decode SLO (default 20)")
    ] = None
    max_ttft: Annotated[
        float | None,
        O.time_option("--max-ttft", what="TTFT", max_bare_s=O.TTFT_MAX_BARE_S, help="prefill TTFT SLO: 2s, 800ms"),
    ] = None
    prefill_ep: Annotated[int | None, typer.Option("--prefill-ep", help="prefill unit EP = DP (default 32)")] = None
    decode_ep: Annotated[int | None, typer.Option("--decode-ep", help="decode unit EP = DP (default 144)")] = None
    prefill_batch_tokens: Annotated[
        float | None,
        typer.Option("--prefill-batch-tokens", help="prompt tokens per DP group per step, at most (default 16384)"),
    ] = None
    decode_max_batch: Annotated[
        int | None, typer.Option("--decode-max-batch", help="largest requests per DP group swept (default 512)")
    ] = None
    mtp: Annotated[int | None, typer.Option("--mtp", help="decode draft tokens per step (default 1)")] = None
    acceptance: Annotated[float | None, typer.Option("--acceptance", help="per-draft acceptance (default 0.8)")] = None
    overlap: Annotated[
        str | None, typer.Option("--overlap", help="decode overlap: five-stage (default) | auto | ...")
    ] = None
    redundant_experts: Annotated[int | None, typer.Option("--redundant-experts", help="both pools (default 32)")] = None
    usd_per_gpu_hour: Annotated[
        float | None, typer.Option("--usd-per-gpu-hour", help="default: the hardware spec's")
    ] = None
    price_input_hit: Annotated[
        float | None, typer.Option("--price-input-hit", help="$ per million cache-hit input tokens")
    ] = None
    price_input_miss: Annotated[
        float | None, typer.Option("--price-input-miss", help="$ per million cache-miss input tokens")
    ] = None
    price_output: Annotated[float | None, typer.Option("--price-output", help="$ per million output tokens")] = None


def _write_plan(r, d: dict, out: Path | None, plot: Path | None) -> None:
    """--out: .json (the whole plan) or .csv / .parquet (the hourly table); --plot: the figure."""
    if out is not None:
        if out.suffix.lower() == ".json":
            write_json(d, out, allowed=".json, .csv or .parquet path")
        else:
            write_frame(r.to_dataframe(), out, suffixes=PLAN_OUT, allowed=".json, .csv or .parquet path")
    if plot is not None:
        from moesim.report.plots import plot_plan  # lazy: matplotlib only when drawing

        plot_plan(r, plot)


@dataclass(frozen=True)
class PlanOptions(TrafficOptions):
    """Every option of `moesim plan`: the traffic flags, then the traffic file, the deployment's
    specs and pricing, the outputs."""

    traffic: Annotated[Path | None, typer.Option("--traffic", help="traffic YAML (flags override its values)")] = None
    model: O.Model = "deepseek-v3"
    hardware: O.Hardware = "h800"
    set_: O.Set = None
    cost_mode: O.CostMode = "calibrated"
    engine: O.Engine = "sglang"
    expert_skew: O.ExpertSkew = "auto"
    json_out: O.Json = False
    out: Annotated[
        Path | None, typer.Option("--out", help="write the plan: .json (all) or .csv/.parquet (hourly)")
    ] = None  # fmt: skip
    plot: Annotated[Path | None, typer.Option("--plot", help="PNG/SVG/PDF of hourly nodes and cost")] = None
    verify: O.Verify = True


@O.shared("o", PlanOptions)
def plan(o: PlanOptions):
    """Capacity plan: nodes per hour for a day of traffic, from the model's own throughputs."""
    out, plot = o.out, o.plot
    if out is not None and out.suffix.lower() not in PLAN_OUT:
        raise ConfigError(f"--out: {out.name!r} must end in .json, .csv or .parquet")
    if plot is not None:
        check_figure_suffix(plot, "--plot")
    t = traffic_from_flags(o.traffic, o)
    if plot is not None and t.aggregated is not None:
        raise ConfigError("--plot: draws the prefill and decode pools; not available with an aggregated pool")
    r = run_plan(t, o.model, o.hardware, set=o.set_, pricing=o.pricing(), verify=o.verify)
    d = r.to_dict()
    _write_plan(r, d, out, plot)
    if o.json_out:
        typer.echo(json_text(d))
        return
    print_plan(r)
    for path in (out, plot):
        if path is not None:
            typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command()(plan)
