"""`moesim timeline`: draw one layer's two-stream schedule."""

from __future__ import annotations

from pathlib import Path

import typer


def _check_micro_batches(phase, overlap, batch):
    """A micro-batched schedule needs a request (decode) or token (prefill) per micro-batch, as in
    `moesim estimate` (whose step is then undefined)."""
    import math

    from moesim.engine.evaluate import default_overlap
    from moesim.enums import Overlap, Phase
    from moesim.errors import ConfigError
    from moesim.schedule.schemes import SCHEMES

    name = (Overlap.parse(overlap, "overlap") if overlap else default_overlap(Phase.parse(phase, "phase"))).value
    sch = SCHEMES.get(name)
    ub = sch.micro_batches if sch is not None and name not in ("serial", "shared", "sbo", "ideal") else 1
    if ub > 1 and math.isfinite(batch) and batch < ub:
        raise ConfigError(
            f"overlap: {name} splits the batch into {ub} micro-batches and needs batch >= {ub}; "
            f"allowed for batch {batch:g}: serial, shared, sbo"
        )


def register(app: typer.Typer) -> None:
    @app.command()
    def timeline(
        model: str = typer.Option("deepseek-v3", "--model", "-m"),
        hardware: str = typer.Option("h800", "--hardware", "-g"),
        phase: str = typer.Option("decode", help="decode | prefill"),
        tp: int = typer.Option(1),
        dp: int | None = typer.Option(None),
        ep: int | None = typer.Option(None),
        moe_tp: int = typer.Option(1, "--moe-tp"),
        batch: float = typer.Option(64.0, help="decode: requests per DP group; prefill: tokens per DP group"),
        context: float = typer.Option(4096.0),
        mtp: int = typer.Option(0),
        acceptance: float = typer.Option(0.8),
        redundant_experts: int = typer.Option(0, "--redundant-experts"),
        overlap: str | None = typer.Option(None, help="serial | shared | sbo | two-batch | five-stage"),
        cost_mode: str = typer.Option("calibrated", "--cost-mode"),
        comm: str | None = typer.Option(None),
        expert_skew: str = typer.Option("auto", "--expert-skew"),
        set_: list[str] | None = typer.Option(None, "--set"),
        out: Path = typer.Option(Path("timeline.png"), "--out", help="PNG or SVG"),
        json_out: bool = typer.Option(False, "--json"),
    ):
        """Two-stream Gantt chart of one MoE layer (compute vs comm, per micro-batch)."""
        from moesim.analyses.timeline import layer_timeline
        from moesim.errors import ConfigError

        if out.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise ConfigError(f"--out: {out.name!r} must end in .png, .svg or .pdf")
        _check_micro_batches(phase, overlap, batch)
        tl = layer_timeline(
            model,
            hardware,
            phase=phase,
            tp=tp,
            dp=dp,
            ep=ep,
            moe_tp=moe_tp,
            batch=batch,
            context=context,
            mtp=mtp,
            acceptance=acceptance,
            redundant_experts=redundant_experts,
            overlap=overlap,
            cost_mode=cost_mode,
            comm=comm,
            set=set_,
            expert_skew=expert_skew,
        )
        from moesim.report.plots import plot_timeline

        try:
            plot_timeline(tl, out)
        except OSError as e:
            raise ConfigError(
                f"--out: cannot write {str(out)!r} ({e.strerror or e}); allowed: a writable .png, .svg or .pdf path"
            ) from None
        if json_out:
            import json

            typer.echo(json.dumps(tl, indent=2, default=str))
        else:
            typer.echo(f"{tl['title']}\nwrote {out}")
