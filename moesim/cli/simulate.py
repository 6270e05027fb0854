"""`moesim simulate`: one deployment serving a request stream, step-exact (moesim.simulate)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from moesim.cli import options as O
from moesim.errors import ConfigError

_LOAD = "load (one of): "


def _opt(flag, help, **kw):
    return typer.Option(flag, help=help, **kw)


@dataclass(frozen=True)
class SimulateOptions(O.OptionBlock):
    """One simulated serving run (`moesim.simulate.core.simulate` keywords and a workload)."""

    model: O.Model = "deepseek-v3"
    hardware: O.Hardware = "h800"
    set_: O.Set = None
    tp: O.Tp = 1
    dp: O.Dp = None
    ep: O.Ep = None
    moe_tp: O.MoeTp = 1
    mtp: O.Mtp = 0
    acceptance: O.Acceptance = 0.8
    redundant_experts: O.Redundant = 0
    overlap: O.Overlap = None
    comm: O.Comm = None
    cost_mode: O.CostMode = "calibrated"
    engine: O.Engine = "sglang"
    expert_skew: O.ExpertSkew = "auto"
    replicas: Annotated[
        int, _opt("--replicas", "instances of this layout behind the router (PD: decode instances)")
    ] = 1
    prefill_instances: Annotated[
        int | None, _opt("--prefill-instances", "PD: prefill instances (their layout: --prefill-tp/-dp/-ep/-moe-tp)")
    ] = None
    prefill_tp: Annotated[int | None, _opt("--prefill-tp", "PD: prefill instance attention TP")] = None
    prefill_dp: Annotated[int | None, _opt("--prefill-dp", "PD: prefill instance DP groups")] = None
    prefill_ep: Annotated[int | None, _opt("--prefill-ep", "PD: prefill instance EP ranks")] = None
    prefill_moe_tp: Annotated[int | None, _opt("--prefill-moe-tp", "PD: prefill instance MoE TP")] = None
    concurrency: Annotated[
        int | None,
        _opt(
            "--concurrency",
            _LOAD + "closed loop, N clients (benchmark tools' --max-concurrency with every request ready)",
        ),
    ] = None
    request_rate: Annotated[
        float | None,
        _opt("--request-rate", _LOAD + "open loop, requests/s (Poisson; --burstiness for gamma); inf = all at once"),
    ] = None
    trace: Annotated[
        Path | None,
        _opt(
            "--trace",
            _LOAD + "replay a trace (CSV/JSONL: arrival, input and output "
            "tokens[, prefix]; Mooncake and Azure formats)",
        ),
    ] = None
    num_prompts: Annotated[int, _opt("--num-prompts", "requests to send (closed / open loop)")] = 1000
    isl: Annotated[int | None, _opt("--isl", "input tokens per request (closed / open loop)")] = None
    osl: Annotated[int | None, _opt("--osl", "output tokens per request (closed / open loop)")] = None
    range_ratio: Annotated[
        float | None,
        _opt("--range-ratio", "random lengths as --tool draws them (sglang: [r x len, len]; vllm: len x [1-r, 1+r])"),
    ] = None
    tool: Annotated[
        str, _opt("--tool", "length / arrival rules of: sglang | vllm | vllm-legacy | genai-perf")
    ] = "sglang"  # fmt: skip
    burstiness: Annotated[
        float, _opt("--burstiness", "open loop: gamma shape of the inter-arrival times (1 = Poisson)")
    ] = 1.0
    max_concurrency: Annotated[
        int | None, _opt("--max-concurrency", "open loop: client-side cap on requests in flight")
    ] = None
    warmup: Annotated[int, _opt("--warmup", "requests sent first and left out of the statistics")] = 0
    time_scale: Annotated[float, _opt("--time-scale", "trace: multiply arrival times (2 = half the rate)")] = 1.0
    max_requests: Annotated[int | None, _opt("--max-requests", "trace: the first N requests only")] = None
    chunked_prefill_size: Annotated[
        int | None,
        _opt(
            "--chunked-prefill-size",
            "prompt tokens per pass per DP rank (vLLM / TRT-LLM: the token budget); default: the engine's",
        ),
    ] = None
    max_prefill_tokens: Annotated[
        int | None, _opt("--max-prefill-tokens", "SGLang: prompt tokens per prefill batch")
    ] = None
    max_running_requests: Annotated[
        int | None, _opt("--max-running-requests", "running requests per DP rank; default: the engine's")
    ] = None
    cuda_graph_max_bs: Annotated[int | None, _opt("--cuda-graph-max-bs", "decode batches above run eager")] = None
    router: Annotated[
        str | None,
        _opt("--router", "round-robin | shortest-queue | cache-aware | random | power-of-two (default: the engine's)"),
    ] = None
    engine_profile: Annotated[
        Path | None, _opt("--engine-profile", "serving profile YAML (default: the shipped one of --engine)")
    ] = None
    prefix_cache: Annotated[
        bool, _opt("--prefix-cache/--no-prefix-cache", "reuse cached prompt prefixes (trace prefix ids)")
    ] = True
    prefix_hit_ratio: Annotated[float, _opt("--prefix-hit-ratio", "share of every prompt served from cache")] = 0.0
    max_ttft: O.MaxTtft = None
    max_tpot: O.MaxTpot = None
    seed: Annotated[int, _opt("--seed", "random lengths, arrivals and routing")] = 0


def workload_from(cfg: dict):
    """The request stream the flags describe (exactly one of --concurrency, --request-rate, --trace)."""
    from moesim.simulate import clients as C  # lazy: numpy / pandas only when the command runs

    given = [k for k in ("concurrency", "request_rate", "trace") if cfg.get(k) is not None]
    if len(given) != 1:
        raise ConfigError("simulate: give exactly one of --concurrency N, --request-rate R or --trace FILE")
    if cfg["trace"] is not None:
        for k in ("isl", "osl", "range_ratio"):
            if cfg.get(k) is not None:
                raise ConfigError(f"--{k.replace('_', '-')}: a trace sets its own lengths; drop the flag")
        return C.read_trace(cfg["trace"], time_scale=cfg["time_scale"], max_requests=cfg["max_requests"])
    if cfg["isl"] is None or cfg["osl"] is None:
        raise ConfigError("simulate: --isl and --osl (tokens per request) are needed without --trace")
    common = dict(range_ratio=cfg["range_ratio"], tool=cfg["tool"], warmup=cfg["warmup"], seed=cfg["seed"])
    if cfg["concurrency"] is not None:
        return C.closed_loop(cfg["concurrency"], cfg["num_prompts"], cfg["isl"], cfg["osl"], **common)
    return C.open_loop(cfg["request_rate"], cfg["num_prompts"], cfg["isl"], cfg["osl"], burstiness=cfg["burstiness"],
                       max_concurrency=cfg["max_concurrency"], **common)  # fmt: skip


def simulate_kwargs(cfg: dict) -> dict:
    """The flags -> `simulate` keywords (the workload apart): layout, serving, pricing, slo."""
    from moesim.engine.settings import Pricing  # lazy: the library only when the command runs
    from moesim.simulate.options import options  # lazy: as above

    rules = {
        "chunk_tokens": cfg["chunked_prefill_size"],
        "max_prefill_tokens": cfg["max_prefill_tokens"],
        "max_running": cfg["max_running_requests"],
        "graph_max_bs": cfg["cuda_graph_max_bs"],
        "router": cfg["router"],
    }
    prefill = None
    pre = {k: cfg[f"prefill_{k}"] for k in ("tp", "dp", "ep", "moe_tp")}
    if cfg["prefill_instances"] is not None:
        prefill = {"instances": cfg["prefill_instances"], **{k: v for k, v in pre.items() if v is not None}}
    elif any(v is not None for v in pre.values()):
        raise ConfigError("--prefill-tp/-dp/-ep/-moe-tp describe PD prefill instances: add --prefill-instances N")
    keys = ("tp", "dp", "ep", "moe_tp", "mtp", "acceptance", "redundant_experts", "overlap", "replicas",
            "prefix_cache")  # fmt: skip
    pricing = Pricing.of(cost_mode=cfg["cost_mode"], engine=cfg["engine"], expert_skew=cfg["expert_skew"],
                         comm=cfg["comm"])  # fmt: skip
    grouped = options(pricing, **{k: cfg[k] for k in keys}, engine_profile=cfg["engine_profile"], prefill=prefill,
                      rules={k: v for k, v in rules.items() if v is not None}, hit_ratio=cfg["prefix_hit_ratio"],
                      slo_ttft_s=cfg["max_ttft"], slo_tpot_s=cfg["max_tpot"])  # fmt: skip
    return {"model": cfg["model"], "hardware": cfg["hardware"], "set": cfg["set_"], "seed": cfg["seed"], **grouped}


def register(app: typer.Typer) -> None:
    @app.command()
    @O.shared("cfg", SimulateOptions)
    def simulate(
        cfg: SimulateOptions,
        json_out: O.Json = False,
        out: Annotated[
            Path | None, typer.Option("--out", help="per-request rows to .csv / .parquet, or the summary to .json")
        ] = None,
        plot: Annotated[
            Path | None, typer.Option("--plot", help="running batch, queue, KV use and TTFT over time (.png/.svg/.pdf)")
        ] = None,
    ):
        """Simulate one deployment serving a request stream, step by step: per-request TTFT, TPOT, ITL and
        E2E as a benchmark client measures them (mean, p50/p90/p99), throughput and goodput."""
        # lazy: the simulator, rich and the writers only when the command runs (`moesim --help` start-up)
        from moesim.cli.progress import Progress  # lazy: as above
        from moesim.report.sim_outputs import per_request_frame, plot_timeseries  # lazy: as above
        from moesim.report.simulate import print_simulation  # lazy: as above
        from moesim.report.writer import (  # lazy: as above
            FRAME_SUFFIXES,
            check_figure_suffix,
            checked_suffix,
            json_text,
            write_frame,
            write_json,
        )
        from moesim.simulate.core import simulate as run  # lazy: as above

        if plot is not None:
            check_figure_suffix(plot, "--plot")
        suffix = checked_suffix(out, (*FRAME_SUFFIXES, ".json")) if out is not None else None
        work = workload_from(cfg)
        with Progress(label="simulate", unit="requests") as bar:
            r = run(workload=work, progress=lambda done, total, _t: bar.update(done, total), **simulate_kwargs(cfg))
        if out is not None:
            if suffix == ".json":
                write_json(r.to_dict(), out)
            else:
                write_frame(per_request_frame(r.log), out)
        if plot is not None:
            c = r.config
            plot_timeseries(r.series, r.log, plot, title=f"{c['model']} on {c['hardware']} · {c['workload']}")
        if json_out:
            typer.echo(json_text(r.to_dict()))
            return
        print_simulation(r)
        for p in (out, plot):
            if p is not None:
                typer.echo(f"wrote {p}")


__all__ = ["register", "workload_from", "simulate_kwargs", "SimulateOptions"]
