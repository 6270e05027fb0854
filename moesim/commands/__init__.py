"""CLI command modules; each exposes register(app). Keep module-level imports light (typer only)."""
