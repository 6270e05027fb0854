"""`moesim model ...` sub-commands (mounted by moesim.cli as `moesim model`).

moesim model import path/to/config.json [--out models/x.yaml] [--name x]
"""

from __future__ import annotations

from pathlib import Path

import typer

from moesim.errors import MoesimError, SpecError
from moesim.report.writer import write_text
from moesim.specs.hf_import import to_yaml
from moesim.specs.loader import import_hf_config
from moesim.specs.model import ModelSpec
from moesim.specs.schema import build

app = typer.Typer(
    help="Model specs: import a Hugging Face config.json.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _group() -> None:
    """Model specs: import a Hugging Face config.json."""


def _summary(spec) -> list[str]:
    return [
        f"total params:  {spec.total_params() / 1e9:.2f} B (main model, MTP excluded)",
        f"active params: {spec.active_params() / 1e9:.2f} B per token",
        f"KV cache:      {spec.kv_bytes_per_token:,.0f} B/token ({spec.precision.kv_dtype} x {spec.num_layers} layers)",
    ]


@app.command("import")
def import_cmd(
    config: Path = typer.Argument(..., help="Hugging Face config.json"),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="write the spec YAML here (e.g. models/x.yaml); without it the YAML goes to stdout"
    ),
    name: str | None = typer.Option(None, "--name", help="spec name (default: the folder or file name)"),
) -> None:
    """Convert a Hugging Face config.json into a moesim model spec YAML."""
    try:
        mapping = import_hf_config(config, name=name)
        spec = build(ModelSpec, mapping, file=str(config))
        if out is not None:
            _write_spec(mapping, out)
    except MoesimError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if out is None:
        typer.echo("".join(f"# {line}\n" for line in _summary(spec)) + to_yaml(mapping), nl=False)
        return
    typer.echo(f"wrote {out}")
    for line in _summary(spec):
        typer.echo(line)


def _write_spec(mapping: dict, out: Path) -> None:
    """The spec YAML to ``out`` (.yaml / .yml; missing folders are made)."""
    if out.suffix not in (".yaml", ".yml"):
        raise SpecError(f"--out: {str(out)!r} must end in .yaml or .yml")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecError(f"--out: cannot write {str(out)!r} ({e.__class__.__name__}: {e})") from None
    write_text(to_yaml(mapping), out, allowed=".yaml path")
