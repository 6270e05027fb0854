"""`moesim timeline`: draw one layer's two-stream schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from moesim.analyses.timeline import layer_timeline
from moesim.cli import options as O
from moesim.engine.evaluate import default_overlap
from moesim.enums import Overlap, Phase
from moesim.errors import ConfigError
from moesim.report.writer import check_figure_suffix, json_text
from moesim.schedule.schemes import SCHEMES


def _check_micro_batches(phase, overlap, batch):
    """A micro-batched schedule needs a request (decode) or token (prefill) per micro-batch, as in
    `moesim estimate` (whose step is then undefined)."""
    name = (Overlap.parse(overlap, "overlap") if overlap else default_overlap(Phase.parse(phase, "phase"))).value
    sch = SCHEMES.get(name)
    ub = sch.micro_batches if sch is not None and name not in ("serial", "shared", "sbo", "ideal") else 1
    if ub > 1 and math.isfinite(batch) and batch < ub:
        raise ConfigError(
            f"overlap: {name} splits the batch into {ub} micro-batches and needs batch >= {ub}; "
            f"allowed for batch {batch:g}: serial, shared, sbo"
        )


@dataclass(frozen=True)
class TimelineOptions(O.OptionBlock):
    """The configuration `layer_timeline` draws (its keywords; ``--set`` is its ``set``)."""

    model: O.Model = "deepseek-v3"
    hardware: O.Hardware = "h800"
    phase: Annotated[str, typer.Option("--phase", help="decode | prefill")] = "decode"
    tp: O.Tp = 1
    dp: O.Dp = None
    ep: O.Ep = None
    moe_tp: O.MoeTp = 1
    batch: Annotated[float, typer.Option("--batch", help=O.HELP["batch"])] = 64.0
    context: Annotated[float, typer.Option("--context", help=O.HELP["context"])] = 4096.0
    mtp: O.Mtp = 0
    acceptance: O.Acceptance = 0.8
    redundant_experts: O.Redundant = 0
    overlap: Annotated[
        str | None, typer.Option("--overlap", help="serial | shared | sbo | two-batch | five-stage")
    ] = None  # fmt: skip
    cost_mode: O.CostMode = "calibrated"
    engine: O.Engine = "sglang"
    comm: O.Comm = None
    expert_skew: O.ExpertSkew = "auto"
    set_: O.Set = None


@O.shared("cfg", TimelineOptions)
def timeline(
    cfg: TimelineOptions,
    out: Annotated[
        Path | None, typer.Option("--out", help="draw the chart to this image (.png, .svg or .pdf); none without it")
    ] = None,
    json_out: O.Json = False,
):
    """Two-stream Gantt chart of one MoE layer (compute vs comm, per micro-batch)."""
    from moesim.report.plots import plot_timeline  # lazy: matplotlib only when drawing

    if out is not None:
        check_figure_suffix(out)
    _check_micro_batches(cfg["phase"], cfg["overlap"], cfg["batch"])
    tl = layer_timeline(**O.estimate_kwargs(cfg))
    if out is not None:  # an image only when asked (issue 17)
        plot_timeline(tl, out)
    if json_out:
        typer.echo(json_text(tl))
    else:
        typer.echo(
            f"{tl['title']}\n"
            + (f"wrote {out}" if out is not None else "no chart drawn (--out timeline.png draws one)")
        )


def register(app: typer.Typer) -> None:
    app.command()(timeline)
