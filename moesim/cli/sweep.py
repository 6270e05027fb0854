"""`moesim sweep`, `moesim pareto` (`moesim disagg`: moesim.cli.disagg). Module-level imports: typer and moesim only
(pandas, matplotlib and rich load inside the analyses and report functions, so `moesim --help`
stays light)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from moesim.analyses import budget as B
from moesim.analyses.pareto import pareto
from moesim.analyses.sweep import (
    DigestOptions,
    SweepDigest,
    budget_frame,
    check_frame_size,
    digest_plan,
    evaluate_plan,
    parse_values,
    plan_budgeted,
    projection,
    tune_malloc,
)
from moesim.cli import options as O
from moesim.cli.progress import Progress, announce
from moesim.errors import ConfigError
from moesim.report.sweep import print_table, rank, summary
from moesim.report.writer import STREAM_SUFFIXES, frame_json_text, write_frame

AXES = ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "acceptance", "redundant", "overlap", "comm")

__all__ = ["parse_axes", "register", "write_frame"]

# --top: rows kept for the table / --json (a streamed sweep keeps them while the rest streams to --out)
MAX_TOP = 100_000


def parse_axes(**flags) -> dict:
    """Axis flags (comma lists, A:B, A:B:STEP; unset ones left out) -> {axis: values}."""
    return {k: parse_values(k, v) for k, v in flags.items() if v is not None}


def _list_axis(axes: dict, name: str, value: str | None) -> str | None:
    """A comma list of hardware / phases becomes an axis (-> None); one value stays a scalar."""
    if value is not None and "," in value:
        axes[name] = [x.strip() for x in value.split(",") if x.strip()]
        return None
    return value


def _sweep_args(grid: O.GridOptions, only_fits: bool, progress) -> dict:
    """grid: the `options.GridOptions` block -> `sweep` keywords (without the GPU budget: `_digest_options`)."""
    tune_malloc()
    axes = parse_axes(**{k: grid[k] for k in AXES})
    hardware = _list_axis(axes, "hardware", grid["hardware"])
    phase = _list_axis(axes, "phase", grid["phase"])
    return dict(
        model=grid["model"],
        hardware=hardware,
        phase=phase,
        axes=axes,
        cost_mode=grid["cost_mode"],
        engine=grid["engine"],
        expert_skew=grid["expert_skew"],
        context_dist=grid["context_dist"],
        min_tokens_per_s_per_user=grid["min_tokens_per_s_per_user"],
        max_tpot_s=grid["max_tpot"],
        max_ttft_s=grid["max_ttft"],
        only_fits=only_fits or None,
        isl=grid["isl"],
        osl=grid["osl"],
        chunk_tokens=grid["chunk_tokens"],
        request_rate=grid["request_rate"],
        set=grid["set_"],
        study=str(grid["study"]) if grid["study"] else None,
        progress=progress,
        require_valid=True,
    )


def _digest_options(grid: O.GridOptions, top: int = 1, frontier: dict | None = None) -> DigestOptions:
    return DigestOptions(top=top, total_gpus=grid["total_gpus"], gpus_per_node=grid["gpus_per_node"], frontier=frontier)


def run_sweep(grid: O.GridOptions, only_fits: bool):
    """grid: the `options.GridOptions` block -> the evaluated frame in memory, within the GPU budget
    if any (elapsed time in attrs)."""
    with Progress() as prog:
        t0 = time.perf_counter()
        opts = _digest_options(grid)
        plan = plan_budgeted(opts, **_sweep_args(grid, only_fits, prog.update))
        check_frame_size(plan)
        announce("sweep (in memory)", plan.total, *projection(plan, streamed=False))
        df = budget_frame(evaluate_plan(plan), plan, opts)
        df.attrs["elapsed_s"] = time.perf_counter() - t0
    return df


def run_digest(grid: O.GridOptions, only_fits: bool, opts: DigestOptions, out=None) -> SweepDigest:
    """The library's digest of the sweep (`moesim.analyses.sweep.digest_plan`): the rows to `out`
    (.csv / .parquet streamed in bounded memory, .json in memory; or nowhere) -> the digest (its
    top rows' attrs: the whole sweep's counts and the elapsed time)."""
    with Progress() as prog:
        t0 = time.perf_counter()
        plan = plan_budgeted(opts, **_sweep_args(grid, only_fits, prog.update))
        streamed = out is None or Path(out).suffix.lower() in STREAM_SUFFIXES
        if not streamed:
            check_frame_size(plan)
        what = f"sweep (streamed{' to ' + str(out) if out else ''})" if streamed else "sweep (in memory)"
        announce(what, plan.total, *projection(plan, streamed=streamed))
        digest = digest_plan(plan, opts, out)
        digest.top.attrs["elapsed_s"] = time.perf_counter() - t0
    return digest


def space_line(df) -> str:
    """'space: N configurations ...': the size of the cartesian product evaluated, and which axes
    were not given and so kept the default space (the rule of `analyses.sweep.default_axes_for`)."""
    n = df.attrs.get("evaluated", {}).get("configurations", len(df))
    dflt = df.attrs.get("defaulted_axes") or []
    how = f"; not given, so the default space: {', '.join(dflt)} (pass an axis to fix it)" if dflt else ""
    return f"space: {n:,} configurations{how}"


def searched_lines(df, row, ranked: bool = True) -> str:
    """'searched: tp 1,2; ...' (the numeric axes as evaluated) and edge flags of the best row."""
    ax = df.attrs.get("axis_values")  # a streamed sweep: the whole sweep's values, df its top rows
    if ax is None:
        ax = {k: sorted(set(df[k].tolist())) for k in B.NUMERIC_AXES if k in df.columns and len(df)}
    lines = [f"searched: {B.searched(ax)}", space_line(df)]
    b = df.attrs.get("budget")
    if b:
        lines.append(
            f"budget: at most {b['total_gpus']} GPUs in whole instances (node {b['gpus_per_node']} GPUs); "
            f"{b['dropped']:,} configurations need more"
            + ("; ranked by total tokens/s of the replicas" if ranked else "")
        )
    lim = {"tp": b["gpus_per_node"]} if b else {}
    span = df if df.attrs.get("axis_values") is None else _axis_frame(ax)
    lines += [f"note: {f}" for f in B.edge_flags(span, row, limits=lim)]
    return "\n".join(lines)


def _axis_frame(ax: dict):
    """The swept values of each numeric axis as the columns of a frame (edge_flags reads min / max)."""
    import pandas as pd  # lazy: start-up time

    return pd.DataFrame({k: pd.Series(v, dtype=float) for k, v in ax.items()})


def _best_row(ranked):
    ok = ranked["valid"] & ranked["fits"]
    return ranked.loc[ok].iloc[0].to_dict() if ok.any() else None


def _launch(rows: list, grid: O.GridOptions, titles: list) -> None:
    """--emit-launch of sweep / pareto rows (each on its own hardware)."""
    from moesim.cli.launch import emit_launch  # lazy: only when asked

    for title, row in zip(titles, rows):
        if row is None:
            emit_launch([], None, None)
            continue
        cfg = {**row, "chunk_tokens": grid["chunk_tokens"]}
        emit_launch([(title, cfg, None)], grid["model"], row.get("hardware"), grid["set_"], grid["gpus_per_node"],
                    engine=grid["engine"])  # fmt: skip


def emit_rows(df, out, json_out) -> bool:
    """--out / --json of a frame; True when the JSON was printed (nothing else to print)."""
    if out is not None:
        write_frame(df, Path(out), allowed=".csv, .parquet or .json path")
        typer.echo(f"wrote {len(df):,} rows to {out}", err=json_out)
    if json_out:
        typer.echo(frame_json_text(df))
    return json_out


@O.shared("grid", O.GridOptions)
def sweep_cmd(
    grid: O.GridOptions,
    only_fits: Annotated[
        bool, typer.Option("--only-fits", help="keep only valid configurations that fit in memory")
    ] = False,
    top: Annotated[
        int, typer.Option("--top", help=f"rows to print, best tokens/s per GPU first (0 to {MAX_TOP:,})")
    ] = 20,
    out: O.OutRows = None,
    json_out: O.JsonRows = False,
    emit_launch: O.EmitLaunch = False,
):
    """Evaluate the cartesian product of deployment axes; print the best rows (tokens/s per GPU)."""
    if not 0 <= top <= MAX_TOP:
        raise ConfigError(f"--top: {top:,} is out of range; allowed an integer in [0, {MAX_TOP:,}]")
    if not json_out:  # the library's digest: --out .csv / .parquet streamed (grid order), .json ranked
        digest = run_digest(grid, only_fits, _digest_options(grid, top), out)
        df = ranked = digest.top
        n = digest.rows["configurations"]
        if out is not None:
            typer.echo(f"wrote {n:,} rows to {out}")
    else:
        df = run_sweep(grid, only_fits)
        ranked = rank(df, "total_tokens_per_s" if "total_tokens_per_s" in df.columns else "tokens_per_s_per_gpu")
        n = len(ranked)
        if out is not None:
            emit_rows(ranked, out, False)
    if json_out:  # --json prints the --top rows
        typer.echo(frame_json_text(ranked.head(top)))
        return
    what = "total tokens/s in the budget" if "total_tokens_per_s" in df.columns else "tokens/s per GPU"
    print_table(ranked, f"top {min(top, n)} of {n:,} by {what} (feasible first)", top)
    typer.echo(summary(df))
    typer.echo(searched_lines(df, _best_row(ranked)))
    if emit_launch:
        _launch([_best_row(ranked)], grid, ["best row"])


@O.shared("grid", O.GridOptions)
def pareto_cmd(
    grid: O.GridOptions,
    group_by: Annotated[
        str | None,
        typer.Option(
            "--group-by", help="ep | hardware | overlap | tp (one frontier per value; comma list for several)"
        ),
    ] = None,
    x: Annotated[str, typer.Option("--x", help="column to maximize on x")] = "tokens_per_s_per_user",
    y: Annotated[str | None, typer.Option("--y", help="column to maximize on y [default: from --per]")] = None,
    per: Annotated[str, typer.Option("--per", help="node | gpu: throughput per machine or per GPU on y")] = "gpu",
    plot: O.Plot = None,
    out: O.OutRows = None,
    json_out: O.JsonRows = False,
    emit_launch: O.EmitLaunch = False,
):
    """Pareto frontier(s) of throughput vs tokens/s per user (valid configurations that fit)."""
    from moesim.report.plots import plot_frontiers  # lazy: matplotlib only when drawing

    if per not in ("gpu", "node"):
        raise ConfigError(f"--per: {per!r} is not one of {{gpu, node}}")
    y = y or f"tokens_per_s_per_{per}"
    keys = [k.strip() for k in group_by.split(",") if k.strip()] if group_by else None
    kw = dict(x=x, y=y, group_by=keys if keys is None or len(keys) > 1 else keys[0])
    if plot is None:  # bounded memory: the running frontier (the plot's faint points need every row)
        digest = run_digest(grid, True, _digest_options(grid, 1, kw))
        df, front = digest.top, digest.front
    else:
        df = run_sweep(grid, True)
        front = pareto(df, **kw)
    if plot is not None:
        plot_frontiers(df, front, x, y, keys, plot)
    if emit_rows(front, out, json_out):
        return
    print_table(front, f"Pareto frontier{'s by ' + ', '.join(keys) if keys else ''}: max {x} and {y}")
    typer.echo(summary(df))
    typer.echo(searched_lines(df, None, ranked=False))
    if plot is not None:
        typer.echo(f"wrote {plot}")
    if emit_launch and len(front):  # the two ends of the frontier: most throughput, most tokens/s per user
        ends = [front.loc[front[y].idxmax()].to_dict(), front.loc[front[x].idxmax()].to_dict()]
        _launch(ends, grid, [f"frontier: max {y}", f"frontier: max {x}"])


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
    app.command("pareto")(pareto_cmd)
