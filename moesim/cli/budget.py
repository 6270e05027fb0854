"""`moesim recommend`: the fewest GPUs for R requests/s or C concurrent users under TTFT/TPOT targets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from moesim.analyses.recommend import recommend
from moesim.analyses.sweep import tune_malloc
from moesim.cli import options as O
from moesim.cli.progress import Progress
from moesim.errors import ConfigError
from moesim.report.budget import print_recommend
from moesim.report.writer import frame_json_text

__all__ = ["register"]


@dataclass(frozen=True)
class RecommendOptions(O.OptionBlock):
    """The options of `moesim recommend`: the request shape and targets, the load, the search."""

    isl: Annotated[float, typer.Option("--isl", help="prompt (input) tokens per request")]
    osl: Annotated[float, typer.Option("--osl", help="output tokens per request")]
    max_ttft: Annotated[
        float, O.time_option("--max-ttft", what="TTFT", max_bare_s=O.TTFT_MAX_BARE_S, help="TTFT target: 2s, 500ms")
    ]
    max_tpot: Annotated[
        float, O.time_option("--max-tpot", what="TPOT", max_bare_s=O.TPOT_MAX_BARE_S, help="TPOT target: 50ms, 0.05s")
    ]
    request_rate: Annotated[float | None, typer.Option("--request-rate", help="load: requests/s")] = None
    concurrency: Annotated[float | None, typer.Option("--concurrency", help="load: concurrent users")] = None
    model: O.Model = None
    hardware: O.Hardware = "h800"
    set_: O.Set = None
    cost_mode: O.CostMode = "calibrated"
    engine: O.Engine = "sglang"
    gpus_per_node: O.GpusPerNode = None
    max_gpus: Annotated[
        int | None, typer.Option("--max-gpus", help="search only instances of at most this many GPUs (faster)")
    ] = None
    no_disagg: Annotated[bool, typer.Option("--no-disagg", help="aggregated deployments only")] = False
    top: Annotated[int, typer.Option("--top", help="candidates to show (the best and the runners-up)")] = 5
    verify: Annotated[
        int,
        typer.Option(
            "--verify",
            help="simulate the first N candidates at the load (request-level simulator: "
            "p90 TTFT / TPOT; 0 = closed forms only)",
        ),
    ] = 3
    json_out: O.JsonRows = False
    emit_launch: O.EmitLaunch = False


@O.shared("o", RecommendOptions)
def recommend_cmd(o: RecommendOptions):
    """Fewest GPUs for a load (--request-rate or --concurrency) under TTFT/TPOT targets: aggregated
    replicas or disaggregated prefill + decode instances, with the runners-up."""
    if o.top < 0:
        raise ConfigError("--top: must be >= 0")
    if o.verify < 0:
        raise ConfigError("--verify: must be >= 0 (candidates to simulate)")
    tune_malloc()
    df = _search(o)
    if o.json_out:
        typer.echo(frame_json_text(df.head(o.top)))
        return
    print_recommend(df, o.top)
    if o.emit_launch:
        _launch(df, o)


def _search(o: RecommendOptions):
    """`recommend`'s candidates frame (launch rows of the best in attrs with --emit-launch)."""
    with Progress() as prog:
        return recommend(
            o.model or "deepseek-v3",
            o.hardware,
            isl=o.isl,
            osl=o.osl,
            max_ttft_s=o.max_ttft,
            max_tpot_s=o.max_tpot,
            request_rate=o.request_rate,
            concurrency=o.concurrency,
            gpus_per_node=o.gpus_per_node,
            include_disagg=not o.no_disagg,
            set=o.set_,
            pricing=o.pricing(),
            total_gpus=o.max_gpus,
            progress=prog.update,
            launch_top=1 if o.emit_launch else 0,  # the best candidate's instances
            verify_top=o.verify,
        )


def _launch(df, o: RecommendOptions) -> None:
    """--emit-launch: the best candidate's instances."""
    from moesim.cli.launch import emit_launch as emit  # lazy: only when asked

    for title, row, role in df.attrs.get("launch", []):
        emit([(title, row, role)], o.model, row.get("hardware") or o.hardware, o.set_, o.gpus_per_node, engine=o.engine)


def register(app: typer.Typer) -> None:
    app.command("recommend")(recommend_cmd)
