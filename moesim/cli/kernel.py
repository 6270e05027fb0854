"""`moesim kernel`: one kernel's predicted time, FLOPs, bytes, bound, efficiency, provenance."""

from __future__ import annotations

import typer

from moesim.cli import options as O
from moesim.workload.kernels import OPS, kernel_work

# kernel_work moved to moesim.workload.kernels; re-exported for callers of the old name
__all__ = ["OPS", "kernel_work", "register"]


def register(app: typer.Typer) -> None:
    @app.command()
    def kernel(
        op: str = typer.Option(..., "--op", help=" | ".join(OPS)),
        model: str = typer.Option("deepseek-v3", "--model", "-m"),
        hardware: str = typer.Option("h800", "--hardware", "-g"),
        cost_mode: str = typer.Option("calibrated", "--cost-mode"),
        engine: O.Engine = "sglang",
        m: float | None = typer.Option(None, "--m"),
        n: float | None = typer.Option(None, "--n"),
        k: float | None = typer.Option(None, "--k"),
        groups: float = typer.Option(1, "--groups"),
        layout: str = typer.Option("masked", "--layout"),
        batch: float | None = typer.Option(None, "--batch"),
        q_len: float = typer.Option(1, "--q-len"),
        context: float | None = typer.Option(None, "--context"),
        heads: float | None = typer.Option(None, "--heads"),
        ep: float | None = typer.Option(None, "--ep"),
        tokens: float | None = typer.Option(None, "--tokens"),
        mode: str = typer.Option("deepep-ll", "--mode"),
        gpus: float | None = typer.Option(None, "--gpus"),
        nbytes: float | None = typer.Option(None, "--bytes"),
        set_: list[str] | None = typer.Option(None, "--set"),
        json_out: bool = typer.Option(False, "--json"),
    ):
        """Predict one kernel: time_s, flops, bytes, bound, efficiency, provenance."""
        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim import units as U

        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim.engine.pricing import load_profile_for, profile_info, resolve_specs

        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim.enums import CostMode

        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim.perf.kernel import price_kernel
        from moesim.report.writer import json_text  # lazy: strict JSON only for --json

        mdl, hw = resolve_specs(model, hardware, set_)
        cm_mode = CostMode.parse(cost_mode, "cost_mode")
        prof, notes = load_profile_for(hw, cm_mode, engine=engine)
        shape = dict(m=m, n=n, k=k, groups=groups, layout=layout, batch=batch, q_len=q_len, context=context)
        shape |= dict(heads=heads, ep=ep, tokens=tokens, mode=mode, gpus=gpus, nbytes=nbytes)
        w = kernel_work(mdl, hw, op, **shape)
        res = {"op": op, "hardware": hw.name, "cost_mode": cm_mode.value} | profile_info(prof, engine)
        res |= price_kernel(w, mdl, hw, cm_mode, prof) | {"notes": notes}
        if json_out:
            typer.echo(json_text(res))
            return
        typer.echo(
            f"{op} on {hw.name} ({cm_mode.value}, {res['engine']}): {U.fmt_time(res['time_s'])}  bound {res['bound']}  "
            f"efficiency vs roofline {res['efficiency'] * 100:.0f}%  [{res['provenance']}]  "
            f"{res['flops'] / 1e9:.2f} GFLOP  {U.fmt_bytes(res['bytes'])}"
        )
        for x in notes + ([res["note"]] if res.get("note") else []):
            typer.echo(f"note: {x}")
