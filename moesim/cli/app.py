"""moesim command line (typer). Thin: parse flags, call the API, print. Heavy imports (pandas,
matplotlib, torch) happen inside commands, never at start-up."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from moesim.cli import options as O
from moesim.errors import MoesimError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Analytical performance simulator and capacity planner for MoE LLM inference.",
)

MODEL_OPT = typer.Option("deepseek-v3", "--model", "-m", help="catalog name, YAML spec or HF config.json")
HW_OPT = typer.Option("h800", "--hardware", "-g", help="catalog name or YAML spec")
SET_OPT = typer.Option(None, "--set", help="what-if override, e.g. hardware.rdma_bw_GBps=100 (repeatable)")


def _emit_json(obj, out: Path | None = None):
    text = json.dumps(obj, indent=2, default=_json_default, allow_nan=False)
    if out:
        try:
            out.write_text(text + "\n")
        except OSError as e:
            from moesim.errors import ConfigError

            raise ConfigError(
                f"--out: cannot write {str(out)!r} ({e.strerror or e.__class__.__name__}); "
                f"allowed: a writable file path"
            ) from None
    else:
        typer.echo(text)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return str(o)


@app.command()
def estimate(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    phase: str = O.PHASE,
    tp: int = O.TP,
    dp: int | None = O.DP,
    ep: int | None = O.EP,
    moe_tp: int = O.MOE_TP,
    batch: float | None = O.BATCH,
    context: float | None = O.CONTEXT,
    mtp: int = O.MTP,
    acceptance: float = O.ACCEPTANCE,
    redundant_experts: int = O.REDUNDANT,
    overlap: str | None = O.OVERLAP,
    cost_mode: str = O.COST_MODE,
    comm: str | None = O.COMM,
    expert_skew: str = O.EXPERT_SKEW,
    context_dist: str = O.CONTEXT_DIST,
    cuda_graphs: bool = typer.Option(
        True,
        "--cuda-graphs/--no-cuda-graphs",
        help="kernel launch overhead with CUDA graph replay (default) or eager launches",
    ),
    set_: list[str] | None = SET_OPT,
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    out: Path | None = typer.Option(None, "--out", help="write JSON to a file"),
    isl: float | None = O.ISL,
    osl: float | None = O.OSL,
):
    """One step of one configuration: per-op time, share and bound, memory and throughput."""
    from moesim.api import estimate as run

    r = run(
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
        context_dist=context_dist,
        cuda_graphs=cuda_graphs,
        isl=isl,
        osl=osl,
    )
    if json_out or out:
        _emit_json(r.to_dict(), out)
        if not json_out:
            typer.echo(f"wrote {out}")
        return
    from moesim.report.tables import print_estimate

    print_estimate(r)


@app.command()
def models():
    """List the model catalog."""
    from moesim.specs import catalog, load_model

    for name in catalog("models"):
        try:
            m = load_model(name)
            typer.echo(
                f"{m.name:22s} {m.total_params() / 1e9:8.1f}B total {m.active_params() / 1e9:7.1f}B active "
                f"{m.attention.kind.value:4s} KV {m.kv_bytes_per_token / 1e3:7.1f} KB/token"
            )
        except MoesimError as e:
            typer.echo(f"{name:22s} invalid: {e}")


@app.command()
def hardware():
    """List the hardware catalog."""
    from moesim.specs import catalog, load_hardware

    for name in catalog("hardware"):
        try:
            h = load_hardware(name)
            typer.echo(
                f"{h.name:14s} FP8 {h.fp8_tflops:7.0f} TFLOP/s  HBM {h.memory_GB:5.0f} GB {h.hbm_bw_GBps / 1e3:4.1f} TB/s  "
                f"NVLink {h.nvlink_bw_GBps:4.0f} GB/s x{h.domain_gpus}  RDMA {h.rdma_bw_GBps:4.0f} GB/s  "
                f"${h.usd_per_gpu_hour:.2f}/GPU-h"
            )
        except MoesimError as e:
            typer.echo(f"{name:14s} invalid: {e}")


def _mount():
    """Each command lives in its own module (import cost at start-up: typer only; the modules
    import their heavy dependencies inside the command functions)."""
    from moesim.cli import calibrate, eplb, kernel, model_import, plan, roofline, sweep, timeline, validate

    app.add_typer(calibrate.app, name="calibrate", help="Run kernels, fit and show calibration profiles.")
    app.add_typer(model_import.app, name="model", help="Model spec tools (import a HF config.json).")
    for mod in (kernel, sweep, plan, eplb, validate, timeline, roofline):
        mod.register(app)


_mount()


def _click_exception_types():
    """(ClickException, Exit, Abort) classes of every click in use: recent typer vendors its own
    click (typer._click), whose exceptions are not the `click` package's."""
    errors, exits, aborts = [], [], []
    for mod, err, ext, abt in (
        ("typer._click.exceptions", "ClickException", None, None),
        ("typer.exceptions", None, "Exit", "Abort"),
        ("click.exceptions", "ClickException", "Exit", "Abort"),
    ):
        try:
            m = __import__(mod, fromlist=["_"])
        except ImportError:
            continue
        for name, acc in ((err, errors), (ext, exits), (abt, aborts)):
            if name and hasattr(m, name):
                acc.append(getattr(m, name))
    return tuple(errors), tuple(exits), tuple(aborts)


def main(argv=None):
    try:
        rc = app(args=argv, standalone_mode=False)
    except MoesimError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # click usage errors and the like
        click_errors, click_exits, click_aborts = _click_exception_types()
        if isinstance(e, click_aborts):
            typer.echo("aborted", err=True)
            sys.exit(130)
        if isinstance(e, click_errors) and type(e).__name__ == "NoArgsIsHelpError":
            e.show()  # bare `moesim` / `moesim calibrate`: the help text
            sys.exit(e.exit_code)
        if isinstance(e, click_errors):  # one line, as MoesimError (no usage box)
            msg = " ".join(str(e.format_message()).split())
            typer.echo(f"error: {msg} (see --help)", err=True)
            sys.exit(e.exit_code or 2)
        if isinstance(e, click_exits):
            sys.exit(e.exit_code)
        raise
    # standalone_mode=False: typer.Exit(code) comes back as the return value
    sys.exit(rc if isinstance(rc, int) and not isinstance(rc, bool) else 0)


if __name__ == "__main__":
    main()
