"""`moesim kernel`: one kernel's predicted time, FLOPs, bytes, bound, efficiency, provenance."""

from __future__ import annotations

import typer

from moesim.cli import options as O
from moesim.engine.settings import Pricing
from moesim.workload.kernels import OPS, kernel_work

LIBRARY_HELP = (
    "all_reduce | all_gather only. auto (default): what the engine picks at this size: its custom all-reduce "
    "(one-shot / two-shot) up to its max_bytes where faster, else NCCL | nccl: NCCL only (ring LL / LL128 / Simple, "
    "NVLS; what nccl-tests measures) | custom: the engine's custom all-reduce only (single NVLink domain, up to its "
    "max_bytes). The output names the algorithm that priced it and the size (bytes) where the engine switches to NCCL"
)

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
        gpus: float | None = typer.Option(None, "--gpus", help="all_reduce | all_gather: ranks in the group (GPUs)"),
        nbytes: float | None = typer.Option(
            None, "--bytes", help="all_reduce | all_gather: message size in bytes (each rank's buffer, e.g. 1e6)"
        ),
        library: str | None = typer.Option(None, "--library", help=LIBRARY_HELP),
        set_: list[str] | None = typer.Option(None, "--set"),
        json_out: bool = typer.Option(False, "--json"),
    ):
        """Predict one kernel: time_s, flops, bytes, bound, efficiency, provenance. A collective also names the
        library and algorithm that priced it (--library) and the message size where the engine switches to NCCL."""
        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim import units as U

        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim.engine.pricing import load_profile_for, profile_info, resolve_specs

        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim.enums import CostMode

        # lazy: start-up time (`moesim --help` imports every command module)
        from moesim.errors import ConfigError
        from moesim.perf.kernel import COLLECTIVE_OPS
        from moesim.report.writer import json_text  # lazy: strict JSON only for --json

        mdl, hw = resolve_specs(model, hardware, set_)
        cm_mode = CostMode.parse(cost_mode, "cost_mode")
        prof, notes = load_profile_for(hw, Pricing.of(cost_mode=cm_mode, engine=engine))
        shape = dict(m=m, n=n, k=k, groups=groups, layout=layout, batch=batch, q_len=q_len, context=context)
        shape |= dict(heads=heads, ep=ep, tokens=tokens, mode=mode, gpus=gpus, nbytes=nbytes)
        if library is not None and op not in COLLECTIVE_OPS:
            raise ConfigError(f"--library: only for --op {' | '.join(COLLECTIVE_OPS)} (got --op {op})")
        w = kernel_work(mdl, hw, op, **shape)
        res = {"op": op, "hardware": hw.name, "cost_mode": cm_mode.value} | profile_info(prof, engine)
        got = _price(w, mdl, hw, cm_mode, prof, library or "auto", engine)
        notes = notes + got.pop("library_notes", [])
        res |= got | {"notes": notes}
        if json_out:
            typer.echo(json_text(res))
            return
        typer.echo(
            f"{op} on {hw.name} ({cm_mode.value}, {res['engine']}): {U.fmt_time(res['time_s'])}  bound {res['bound']}  "
            f"efficiency vs roofline {res['efficiency'] * 100:.0f}%  [{res['provenance']}]  "
            f"{res['flops'] / 1e9:.2f} GFLOP  {U.fmt_bytes(res['bytes'])}"
        )
        if op in COLLECTIVE_OPS:
            for line in _library_lines(res):
                typer.echo(line)
        for x in notes + ([res["note"]] if res.get("note") else []):
            typer.echo(f"note: {x}")


def _price(w, mdl, hw, cm_mode, prof, library: str, engine: str) -> dict:
    """price_kernel's dict; a collective's from price_collective (with its library fields)."""
    # lazy: start-up time (`moesim --help` imports every command module)
    from moesim.engine.pricing import load_profile_for
    from moesim.enums import CostMode
    from moesim.perf.kernel import COLLECTIVE_OPS, price_collective, price_kernel

    if w.comm_op not in COLLECTIVE_OPS:
        return price_kernel(w, mdl, hw, cm_mode, prof)
    # roofline mode reads no profile; the custom all-reduce's backends and size limit come from the engine's
    engine_prof = prof or load_profile_for(hw, Pricing.of(cost_mode=CostMode.CALIBRATED, engine=engine))[0]
    return price_collective(w, mdl, hw, cm_mode, prof, library, backends_profile=engine_prof, engine=engine)


def _library_lines(res: dict) -> list[str]:
    """The collective's library lines: what priced it, the other libraries, the engine's switch to NCCL."""
    # lazy: start-up time (`moesim --help` imports every command module)
    from moesim import units as U

    lines = [f"library {res['library']}: {res['algorithm']}"]
    for lib, r in res["by_library"].items():
        got = (
            f"{U.fmt_time(r['time_s'])} ({r['algorithm']})"
            if "time_s" in r
            else "not run: " + r["error"].split(": ", 1)[1]
        )
        lines.append(f"  {lib}: {got}")
    backends = res["custom_backends"] or {}
    caps = ", ".join(f"{k} max_bytes {v:.0f} ({U.fmt_bytes(v)})" for k, v in backends.items())
    x = res["engine_switch_bytes"]
    lo, hi = res["switch_range_bytes"]
    if x is not None:
        why = "the custom all-reduce's max_bytes" if res["engine_switch_reason"] == "max_bytes" else "NCCL faster above"
        lines.append(
            f"engine switches custom -> NCCL at {x:.0f} B ({U.fmt_bytes(x)}; {why}){'; ' + caps if caps else ''}"
        )
    else:
        lines.append(
            f"engine runs NCCL at every size in {U.fmt_bytes(lo)}..{U.fmt_bytes(hi)}{'; ' + caps if caps else ''}"
        )
    sw = res["algorithm_switches"]
    if sw:
        steps = ", ".join(f"{s['to']} from {U.fmt_bytes(s['bytes'])}" for s in sw)
        lines.append(f"{res['library']} over {U.fmt_bytes(lo)}..{U.fmt_bytes(hi)}: {sw[0]['from']}, then {steps}")
    return lines
