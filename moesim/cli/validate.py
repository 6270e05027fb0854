"""`moesim validate`: accuracy report against published measurements."""

from __future__ import annotations

from pathlib import Path

import typer


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_report(checks, summ, out: Path) -> None:
    import math

    from moesim.report.plots import plot_parity

    png = out.with_suffix(".png")
    plot_parity(checks, png)
    lines = [
        "# moesim validation report",
        "",
        "| case | class | metric | predicted | published | error | tolerance | result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        err = "" if math.isnan(c.rel_error) else f"{c.rel_error * 100:+.1f}%"
        lines.append(
            f"| {c.case} | {c.cls} | {c.metric} | {_fmt(c.predicted)} | {_fmt(c.expected)} | {err} | "
            f"{c.tolerance} | {'pass' if c.passed else 'FAIL'} |"
        )
    lines += ["", "| class | checks | passed | median abs error | max abs error |", "|---|---|---|---|---|"]
    for cls, s in summ.items():
        med = "-" if s["median_abs_error"] is None else f"{s['median_abs_error'] * 100:.1f}%"
        mx = "-" if s["max_abs_error"] is None else f"{s['max_abs_error'] * 100:.1f}%"
        lines.append(f"| {cls} | {s['checks']} | {s['passed']} | {med} | {mx} |")
    lines += ["", f"![parity plot]({png.name})", ""]
    out.write_text("\n".join(lines))


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(
        cases: list[Path] | None = typer.Argument(None, help="case YAML files (default: validation/*cases*.yaml)"),
        only: list[str] | None = typer.Option(None, "--case", help="run only these case ids"),
        out: Path | None = typer.Option(None, "--out", help="write a markdown report (+ parity plot PNG)"),
        json_out: bool = typer.Option(False, "--json"),
    ):
        """Predicted vs published figures, relative error, pass/fail; exits 1 if any case fails."""
        import json
        import math

        from rich.console import Console
        from rich.table import Table

        from moesim.analyses.validate.cases import summary
        from moesim.analyses.validate.cases import validate as run

        checks = run(cases or None, ids=set(only) if only else None)
        summ = summary(checks)
        if json_out:
            typer.echo(json.dumps({"checks": [c.__dict__ for c in checks], "summary": summ}, indent=2, default=str))
        else:
            t = Table(title="moesim validate — predictions vs published", title_justify="left")
            for col in ("case", "class", "metric", "predicted", "published", "error", "tolerance", "result"):
                t.add_column(col)
            for c in checks:
                err = "" if math.isnan(c.rel_error) else f"{c.rel_error * 100:+.1f}%"
                t.add_row(
                    c.case,
                    c.cls,
                    c.metric,
                    _fmt(c.predicted),
                    _fmt(c.expected),
                    err,
                    c.tolerance,
                    "[green]pass[/]" if c.passed else f"[red]FAIL[/] {c.note}",
                )
            con = Console(width=160)
            con.print(t)
            for cls, s in summ.items():
                med = "-" if s["median_abs_error"] is None else f"{s['median_abs_error'] * 100:.1f}%"
                mx = "-" if s["max_abs_error"] is None else f"{s['max_abs_error'] * 100:.1f}%"
                con.print(f"{cls:10s} {s['passed']}/{s['checks']} pass   median |error| {med}   max |error| {mx}")
            n_fail = sum(not c.passed for c in checks)
            con.print(f"summary: {len(checks) - n_fail}/{len(checks)} checks within tolerance")
        if out:
            try:
                write_report(checks, summ, out)
            except OSError as e:
                from moesim.errors import ConfigError

                raise ConfigError(
                    f"--out: cannot write {str(out)!r} ({e.strerror or e}); allowed: a writable .md path"
                ) from None
            typer.echo(f"wrote {out}")
        if any(not c.passed for c in checks):
            raise typer.Exit(1)
