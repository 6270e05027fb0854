"""`moesim validate`: accuracy report against published measurements."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from moesim.analyses.validate.cases import summary
from moesim.analyses.validate.cases import validate as run
from moesim.cli import options as O
from moesim.report.plots import plot_parity
from moesim.report.validate import check_report_suffix, print_validate, write_report
from moesim.report.writer import check_figure_suffix, json_text


def validate(
    cases: Annotated[
        list[Path] | None, typer.Argument(help="case YAML files (default: validation/*cases*.yaml)")
    ] = None,
    only: Annotated[list[str] | None, typer.Option("--case", help="run only these case ids")] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="write the report: .md (markdown table) or .png/.svg/.pdf (parity plot)"),
    ] = None,
    plot: O.Plot = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
    engine: Annotated[
        str | None, typer.Option("--engine", help=O.HELP["engine"] + " (default: each case's own, else sglang)")
    ] = None,
    serving: Annotated[
        bool,
        typer.Option(
            "--serving",
            help="also replay the published serving runs with the simulator "
            "(validation/simulate_cases.yaml: TTFT / TPOT / ITL percentiles; ~15 s)",
        ),
    ] = False,
):
    """Predicted vs published figures, relative error, pass/fail; exits 1 if any case fails."""
    check_report_suffix(out)
    if plot is not None:
        check_figure_suffix(plot, "--plot")
    checks = run(cases or None, ids=set(only) if only else None, engine=engine, serving=serving)
    summ = summary(checks)
    if json_out:
        typer.echo(json_text({"checks": [c.__dict__ for c in checks], "summary": summ}))
    else:
        print_validate(checks, summ)
    if plot:
        plot_parity(checks, plot)
        typer.echo(f"wrote {plot}")
    if out:
        write_report(checks, summ, out, plot=plot)
        typer.echo(f"wrote {out}")
    if any(not c.passed for c in checks):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(validate)
