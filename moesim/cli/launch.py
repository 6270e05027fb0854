"""`--emit-launch`: print the launch commands of the chosen configuration(s) on the engine they were
priced for (thin: specs in, moesim.report.launch out)."""

from __future__ import annotations

import typer

from moesim.engine.pricing import resolve_specs
from moesim.report.launch import hf_model_path, launch_text

__all__ = ["emit_launch"]


def emit_launch(entries: list, model: str | None, hardware: str | None, set_=None, gpus_per_node=None,
                engine: str | None = None) -> None:  # fmt: skip
    """entries: (title, config dict, role) -> the priced engine's commands, one block each (role "pd":
    config = {prefill, decode, prefill_instances, decode_instances}). The model path is the spec's
    Hugging Face repo; a node is --gpus-per-node or the hardware's server size."""
    if not entries:
        typer.echo("# launch: no configuration to launch (nothing fits the filters)")
        return
    model = model or "deepseek-v3"
    spec, hw = resolve_specs(model, hardware or "h800", set_)
    path = hf_model_path(getattr(spec, "source", None), spec.name)
    gpn = int(gpus_per_node or getattr(hw, "gpus_per_node", 0) or hw.domain_gpus)
    extra = {"model_path": path, "experts": spec.moe.num_experts if spec.is_moe else 0}

    def full(cfg: dict) -> dict:
        return {**cfg, **extra}

    out = []
    for t, cfg, role in entries:
        if role == "pd":
            cfg = dict(cfg, prefill=full(cfg["prefill"]), decode=full(cfg["decode"]))
        else:
            cfg = full(cfg)
        out.append((t, cfg, role))
    mnnvl = hw.domain_gpus > hw.gpus_per_node  # multi-node NVLink (GB200 NVL72)
    typer.echo(launch_text(out, gpus_per_node=gpn, engine=engine or "sglang", mnnvl=mnnvl))
