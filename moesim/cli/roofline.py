"""`moesim roofline`: the kernels of one configuration on the GPU's roofline (data:
`moesim.analyses.roofline`; text and figure: `moesim.report.roofline`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from moesim.analyses.roofline import roofline
from moesim.cli import options as O
from moesim.report.roofline import draw_roofline, roofline_lines
from moesim.report.writer import check_figure_suffix, json_text


@O.shared("cfg", O.ConfigOptions)
def roofline_cmd(
    cfg: O.ConfigOptions,
    measurements: Annotated[
        list[Path] | None,
        typer.Option(
            "--measurements",
            help="measurement CSV(s) or folder(s) to overlay (default: calibration/measurements/<gpu>/)",
        ),
    ] = None,
    no_calibration: Annotated[bool, typer.Option("--no-calibration", help="draw no calibration points")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="draw the figure to this image (.png, .svg or .pdf); none without it")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="also print the points as one JSON object")] = False,
):
    """Place one configuration's kernels on the GPU's roofline, with calibration points."""
    if out is not None:
        check_figure_suffix(out)
    res = roofline(measurements=measurements, calibration=not no_calibration, **O.estimate_kwargs(cfg))
    if out is not None:  # an image only when asked (issue 17)
        draw_roofline(res, out)
    if json_out:
        typer.echo(json_text({**res, "out": None if out is None else str(out)}))
        return
    typer.echo("\n".join(roofline_lines(res)))
    typer.echo(f"wrote {out}" if out is not None else "no figure drawn (--out roofline.png draws one)")


def register(app: typer.Typer) -> None:
    app.command("roofline")(roofline_cmd)
