"""`--emit-launch`: print the engine launch commands of the chosen configuration(s) (thin: specs in,
moesim.report.launch out)."""

from __future__ import annotations

import typer

from moesim.engine.pricing import resolve_specs
from moesim.report.launch import hf_model_path, launch_text

__all__ = ["emit_launch"]


def emit_launch(entries: list, model: str | None, hardware: str | None, set_=None, gpus_per_node=None) -> None:
    """entries: (title, config dict, role) -> every engine's commands, one block each. The model
    path is the spec's Hugging Face repo; a node is --gpus-per-node or the hardware's server size."""
    if not entries:
        typer.echo("# launch: no configuration to launch (nothing fits the filters)")
        return
    model = model or "deepseek-v3"
    spec, hw = resolve_specs(model, hardware or "h800", set_)
    path = hf_model_path(getattr(spec, "source", None), spec.name)
    gpn = int(gpus_per_node or getattr(hw, "gpus_per_node", 0) or hw.domain_gpus)
    entries = [(t, {**cfg, "model_path": path}, role) for t, cfg, role in entries]
    typer.echo(launch_text(entries, gpus_per_node=gpn))
