"""`moesim disagg`: disaggregated prefill / decode pools for (ISL, OSL) under TTFT / TPOT targets,
vs aggregated serving (the search: `moesim.analyses.disagg`; the report: `moesim.report.disagg`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from moesim.analyses.disagg import DEFAULT_DECODE_AXES, DEFAULT_PREFILL_AXES, disagg
from moesim.analyses.sweep import defaults_not_given, tune_malloc
from moesim.cli import options as O
from moesim.cli.progress import Progress
from moesim.cli.sweep import parse_axes
from moesim.engine.pricing import resolve_specs
from moesim.errors import ConfigError
from moesim.report.disagg import print_disagg
from moesim.report.writer import json_text, write_json

__all__ = ["DisaggOptions", "disagg_cmd", "register"]


@dataclass(frozen=True)
class DisaggOptions(O.OptionBlock):
    """The options of `moesim disagg`: the request shape and targets, the specs, the prefill and
    decode axes, pricing, the pool bounds, the outputs."""

    isl: Annotated[float, typer.Option("--isl", help="prompt (input) tokens per request")]
    osl: Annotated[float, typer.Option("--osl", help="output tokens per request")]
    max_ttft: Annotated[
        float,
        O.time_option(
            "--max-ttft", what="TTFT", max_bare_s=O.TTFT_MAX_BARE_S, help="TTFT target incl. KV transfer: 2s, 500ms"
        ),
    ]
    max_tpot: Annotated[
        float,
        O.time_option("--max-tpot", what="TPOT", max_bare_s=O.TPOT_MAX_BARE_S, help="TPOT target: 50ms, 0.05s"),
    ]
    model: O.Model = None
    hardware: O.Hardware = "h800"
    set_: O.Set = None
    prefill_hardware: Annotated[str | None, typer.Option(help="[default: --hardware]")] = None
    decode_hardware: Annotated[str | None, typer.Option(help="[default: --hardware]")] = None
    prefill_tp: Annotated[str | None, typer.Option(help=f"prefill TP: {O.AXIS_HELP}")] = None
    prefill_ep: Annotated[str | None, typer.Option(help="prefill EP ranks")] = None
    prefill_batch: Annotated[str | None, typer.Option(help="prefill tokens per DP group per step")] = None
    tp: Annotated[str | None, typer.Option("--decode-tp", "--tp", help="decode TP")] = None
    ep: Annotated[str | None, typer.Option("--decode-ep", "--ep", help="decode EP ranks")] = None
    batch: Annotated[str | None, typer.Option("--decode-batch", "--batch", help="decode requests per DP group")] = None
    context: Annotated[str | None, typer.Option(help="decode mean KV length [default: isl + osl/2]")] = None
    mtp: O.MtpAxis = None
    acceptance: O.AcceptanceAxis = None
    redundant: O.RedundantAxis = None
    cost_mode: O.CostMode = "calibrated"
    engine: O.Engine = "sglang"
    expert_skew: O.ExpertSkew = "auto"
    context_dist: O.ContextDist = "fixed"
    max_instances: Annotated[int, typer.Option(help="largest pool size in instances")] = 64
    total_gpus: O.TotalGpus = None
    gpus_per_node: O.GpusPerNode = None
    chunk_tokens: O.ChunkTokens = None
    no_aggregated: Annotated[
        bool, typer.Option("--no-aggregated", help="skip the aggregated (mixed) comparison")
    ] = False  # fmt: skip
    verify: O.Verify = True
    json_out: O.Json = False
    out: O.Out = None
    emit_launch: O.EmitLaunch = False


@O.shared("o", DisaggOptions)
def disagg_cmd(o: DisaggOptions):
    """Disaggregated prefill/decode pools for (ISL, OSL) under TTFT/TPOT targets vs aggregated serving."""
    tune_malloc()
    model = o.model or "deepseek-v3"
    r = _search(o, model, *_pool_axes(o, model))
    d = r.to_dict()
    if o.out is not None:
        write_json(d, o.out)
        typer.echo(f"wrote {o.out}", err=o.json_out)
    if o.json_out:
        typer.echo(json_text(d))
    else:
        print_disagg(r)
        if o.emit_launch:
            _launch_disagg(r, model, o)


def _pool_axes(o: DisaggOptions, model: str) -> tuple[dict, dict]:
    """(prefill axes, decode axes): the flags over the defaults."""
    pax = {**DEFAULT_PREFILL_AXES, **parse_axes(tp=o.prefill_tp, ep=o.prefill_ep, batch=o.prefill_batch)}
    spec, _ = resolve_specs(model, o.decode_hardware or o.hardware, o.set_)
    decode = parse_axes(tp=o.tp, ep=o.ep, batch=o.batch, context=o.context, mtp=o.mtp, acceptance=o.acceptance,
                        redundant=o.redundant)  # fmt: skip
    return pax, _decode_axes(spec, o.mtp, decode)


def _search(o: DisaggOptions, model: str, pax: dict, dax: dict):
    """`disagg` over the two pools' axes (with a progress bar)."""
    with Progress() as prog:
        return disagg(
            model,
            o.hardware,
            isl=o.isl,
            osl=o.osl,
            max_ttft_s=o.max_ttft,
            max_tpot_s=o.max_tpot,
            prefill_hardware=o.prefill_hardware,
            decode_hardware=o.decode_hardware,
            prefill_axes=pax,
            decode_axes=dax,
            pricing=o.pricing(),
            set=o.set_,
            compare_aggregated=not o.no_aggregated,
            chunk_tokens=o.chunk_tokens,
            max_instances=o.max_instances,
            progress=prog.update,
            total_gpus=o.total_gpus,
            gpus_per_node=o.gpus_per_node,
            verify=o.verify,
        )


def _decode_axes(spec, mtp, axes) -> dict:
    """The default decode space drafts with MTP; a model without it cannot (redundant slots: the
    defaults within the model's bound)."""
    dax = {**defaults_not_given(DEFAULT_DECODE_AXES, axes, spec), **axes}
    if not spec.mtp_layers:
        if mtp is not None and any(v > 0 for v in dax["mtp"]):
            raise ConfigError(f"mtp: {spec.name} has no MTP module (mtp_layers = 0); allowed 0")
        dax["mtp"] = [0.0]
    return dax


def _launch_disagg(r, model: str, o: DisaggOptions) -> None:
    """--emit-launch of `disagg`: the whole PD deployment (every prefill and decode instance and the
    router over them) and the aggregated best."""
    from moesim.cli.launch import emit_launch  # lazy: only when asked

    set_, gpn, hardware, engine = o.set_, o.gpus_per_node, o.hardware, o.engine

    dep = r.deployment or {}
    n_p, n_d = dep.get("prefill_instances"), dep.get("decode_instances")
    if r.prefill and r.decode:
        pd = {"prefill": r.prefill, "decode": r.decode, "prefill_instances": n_p or 1, "decode_instances": n_d or 1}
        title = f"PD: {n_p or 1} prefill + {n_d or 1} decode instances"
        emit_launch([(title, pd, "pd")], model, o.decode_hardware or hardware, set_, gpn, engine=engine)
    if r.aggregated:
        agg = {**r.aggregated, "chunk_tokens": r.aggregated.get("prefill_chunk_tokens")}
        emit_launch([("aggregated best", agg, None)], model, hardware, set_, gpn, engine=engine)


def register(app: typer.Typer) -> None:
    app.command("disagg")(disagg_cmd)
