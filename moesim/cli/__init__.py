"""The command line: `moesim` (typer app in app.py, one thin module per command)."""

from moesim.cli.app import app, main

__all__ = ["app", "main"]
