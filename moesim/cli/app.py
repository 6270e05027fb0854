"""moesim command line (typer). Thin: parse flags, call the analyses, print through moesim.report.
Heavy imports (pandas, matplotlib, torch) happen inside commands, never at start-up."""

from __future__ import annotations

import os
import sys
import typing
from pathlib import Path
from typing import Annotated

import typer

from moesim.analyses.fitting import smallest_fitting_ep
from moesim.cli import options as O
from moesim.engine.estimate import estimate as run_estimate
from moesim.engine.whatif import inert_whatif_notes
from moesim.errors import MoesimError
from moesim.report.tables import does_not_fit_text, hardware_line, model_line, print_estimate
from moesim.report.writer import json_text, write_json
from moesim.specs import catalog, load_hardware, load_model

# Plain help (click's formatter), not typer's rich panels: those read help text as rich markup
# (`A:B:STEP` rendered as `A🅱STEP`) and tag every flag with its Python type (`--json <bool>`).
HELP_MARKUP = None

app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    context_settings={"max_content_width": 120},  # click's default caps help at 80 columns whatever the terminal
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Analytical performance simulator and capacity planner for MoE LLM inference.",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version  # lazy: only for --version

        try:
            v = version("moesim")
        except PackageNotFoundError:  # run from a source tree that was never installed
            v = "(not installed)"
        typer.echo(f"moesim {v} ({Path(__file__).resolve().parents[1]})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
):
    pass


@app.command()
@O.shared("cfg", O.ConfigOptions)
def estimate(
    cfg: O.ConfigOptions,
    cuda_graphs: Annotated[
        bool,
        typer.Option(
            "--cuda-graphs/--no-cuda-graphs",
            help="kernel launch overhead with CUDA graph replay (default) or eager launches",
        ),
    ] = True,
    json_out: O.Json = False,
    out: Annotated[Path | None, typer.Option("--out", help="write JSON to a file")] = None,
    emit_launch: O.EmitLaunch = False,
):
    """One step of one configuration: per-op time, share and bound, memory and throughput."""
    kwargs = O.estimate_kwargs(cfg, cuda_graphs=cuda_graphs)
    r = run_estimate(**kwargs)
    r.notes += inert_whatif_notes(run_estimate, kwargs, r)
    if json_out or out:
        d = r.to_dict()
        if out:  # with --json too: the JSON goes to the file only
            write_json(d, out)
        else:
            typer.echo(json_text(d))
        if not json_out:
            typer.echo(f"wrote {out}")
        return
    print_estimate(r)
    if not r.memory["fits"]:
        typer.echo(does_not_fit_text(r, smallest_fitting_ep(r)))
    if emit_launch:
        from moesim.cli.launch import emit_launch as emit  # lazy: only when asked

        c = r.config
        emit([("estimate", {**c, "redundant": c.get("redundant_experts"), "chunk_tokens": cfg["chunk_tokens"]}, None)],
             cfg["model"], cfg["hardware"], cfg["set_"], engine=c.get("engine") or cfg.get("engine"))  # fmt: skip


def _list_catalog(kind: str, load, line, width: int) -> None:
    """One line per catalog entry; an entry that does not load says why (name padded to ``width``)."""
    for name in catalog(kind):
        try:
            typer.echo(line(load(name)))
        except MoesimError as e:
            typer.echo(f"{name:{width}s} invalid: {e}")


@app.command()
def models():
    """List the model catalog."""
    _list_catalog("models", load_model, model_line, 22)


@app.command()
def hardware():
    """List the hardware catalog."""
    _list_catalog("hardware", load_hardware, hardware_line, 14)


def _mount():
    """Each command lives in its own module (import cost at start-up: typer only; the modules
    import their heavy dependencies inside the command functions)."""
    # lazy: the command modules register on `app`, which must exist first
    from moesim.cli import (
        budget,
        calibrate,
        disagg,
        eplb,
        kernel,
        model_import,
        plan,
        roofline,
        simulate,
        sweep,
        timeline,
        validate,
    )

    app.add_typer(calibrate.app, name="calibrate", help="Run kernels, fit and show calibration profiles.")
    app.add_typer(model_import.app, name="model", help="Model spec tools (import a HF config.json).")
    for mod in (kernel, sweep, disagg, budget, plan, eplb, validate, timeline, roofline, simulate):
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


# `moesim sweep ... | head -1`: the reader went away. Exit 1 quietly, as Python's docs recipe does and as
# rich's Console does for the tables (not 141 = 128 + SIGPIPE: Python ignores SIGPIPE, and one status for both).
BROKEN_PIPE_STATUS = 1


def _stdout_to_devnull() -> None:
    """Python docs' recipe (library/signal, "Note on SIGPIPE"): point stdout at devnull so the
    interpreter's final flush does not raise again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _broken_pipe():
    """The reader of stdout went away (`| head -1`): no traceback, no message, exit 1."""
    _stdout_to_devnull()
    sys.exit(BROKEN_PIPE_STATUS)


def _os_error(e: OSError):
    """An OSError outside the file writer (which raises MoesimError): one line naming the file, or
    standard output when the error names none (stdout on a full disk or /dev/full), and the reason."""
    where = "cannot write to standard output" if e.filename is None else repr(str(e.filename))
    try:
        typer.echo(f"error: {where}: {e.strerror or e}", err=True)
    except OSError:
        pass
    if e.filename is None:
        _stdout_to_devnull()
    sys.exit(2)


def _bad_number(e, argv) -> str | None:
    """moesim's own words for an option value typer could not convert to its int / float annotation
    (typer's and click's wording differs by version): "--batch: 'abc' is not a number"; None otherwise."""
    param, ctx = getattr(e, "param", None), getattr(e, "ctx", None)
    callback = getattr(getattr(ctx, "command", None), "callback", None)
    opts = [o for o in getattr(param, "opts", None) or [] if o.startswith("-")]
    if not opts or callback is None:
        return None
    try:
        hint = typing.get_type_hints(callback).get(param.name)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: keep the library's message
        return None
    kinds = set(typing.get_args(hint)) - {type(None)} if typing.get_args(hint) else {hint}
    if not kinds or not kinds <= {int, float}:
        return None
    value = next(
        (
            a.split("=", 1)[1] if "=" in a else nxt
            for a, nxt in zip(argv, [*argv[1:], ""])
            if a.split("=", 1)[0] in opts
        ),
        None,
    )
    shown = "" if value is None else f"{value!r} "
    return f"{opts[0]}: {shown}is not {'an integer' if kinds == {int} else 'a number'}"


def main(argv=None):
    if sys.stdout is None:  # started with stdout closed (`moesim models >&-`): nothing can be printed
        sys.exit(BROKEN_PIPE_STATUS)
    if sys.stderr is None:  # stderr closed (`2>&-`): errors go nowhere rather than crash on the echo
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives for the process
    try:
        rc = app(args=argv, standalone_mode=False)
        sys.stdout.flush()  # here, not at exit: a full disk or a closed pipe is reported below
    except MoesimError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except BrokenPipeError:
        _broken_pipe()
    except OSError as e:  # an I/O failure outside the file writer (stdout full, an unreadable input)
        _os_error(e)
    except Exception as e:  # click usage errors and the like
        click_errors, click_exits, click_aborts = _click_exception_types()
        if isinstance(e, click_aborts):
            typer.echo("aborted", err=True)
            sys.exit(130)
        if isinstance(e, click_errors) and type(e).__name__ == "NoArgsIsHelpError":
            e.show()  # bare `moesim` / `moesim calibrate`: the help text
            sys.exit(e.exit_code)
        if isinstance(e, click_errors):  # one line, as MoesimError (no usage box)
            msg = _bad_number(e, sys.argv[1:] if argv is None else argv) or " ".join(str(e.format_message()).split())
            typer.echo(f"error: {msg} (see --help)", err=True)
            sys.exit(e.exit_code or 2)
        if isinstance(e, click_exits):
            sys.exit(e.exit_code)
        raise
    # standalone_mode=False: typer.Exit(code) comes back as the return value
    sys.exit(rc if isinstance(rc, int) and not isinstance(rc, bool) else 0)


if __name__ == "__main__":
    main()
