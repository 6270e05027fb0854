"""`moesim timeline`: draw one layer's two-stream schedule."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def timeline(
        model: str = typer.Option("deepseek-v3", "--model", "-m"),
        hardware: str = typer.Option("h800", "--hardware", "-g"),
        phase: str = typer.Option("decode", help="decode | prefill"),
        tp: int = typer.Option(1), dp: Optional[int] = typer.Option(None), ep: Optional[int] = typer.Option(None),
        moe_tp: int = typer.Option(1, "--moe-tp"),
        batch: float = typer.Option(64.0, help="decode: requests per DP group; prefill: tokens per DP group"),
        context: float = typer.Option(4096.0), mtp: int = typer.Option(0), acceptance: float = typer.Option(0.8),
        redundant_experts: int = typer.Option(0, "--redundant-experts"),
        overlap: Optional[str] = typer.Option(None, help="serial | shared | sbo | two-batch | five-stage"),
        cost_mode: str = typer.Option("calibrated", "--cost-mode"), comm: Optional[str] = typer.Option(None),
        expert_skew: str = typer.Option("auto", "--expert-skew"),
        set_: Optional[List[str]] = typer.Option(None, "--set"),
        out: Path = typer.Option(Path("timeline.png"), "--out", help="PNG or SVG"),
        json_out: bool = typer.Option(False, "--json"),
    ):
        """Two-stream Gantt chart of one MoE layer (compute vs comm, per micro-batch)."""
        from moesim.errors import ConfigError
        from moesim.timeline import layer_timeline
        if out.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise ConfigError(f"--out: {out.name!r} must end in .png, .svg or .pdf")
        tl = layer_timeline(model, hardware, phase=phase, tp=tp, dp=dp, ep=ep, moe_tp=moe_tp, batch=batch,
                            context=context, mtp=mtp, acceptance=acceptance, redundant_experts=redundant_experts,
                            overlap=overlap, cost_mode=cost_mode, comm=comm, set=set_, expert_skew=expert_skew)
        from moesim.plot import plot_timeline
        plot_timeline(tl, out)
        if json_out:
            import json
            typer.echo(json.dumps(tl, indent=2, default=str))
        else:
            typer.echo(f"{tl['title']}\nwrote {out}")
