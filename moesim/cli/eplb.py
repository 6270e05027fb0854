"""`moesim eplb`: place experts with the EPLB balancer and report imbalance before/after.

``eplb_command`` is the plain function (returns the result dict, prints the summary or one
JSON object); ``app`` is a typer app with one command ``eplb`` for the main CLI to mount
(``app.add_typer`` or ``app.command("eplb")(eplb)``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import typer

from moesim.balance.eplb import check_layout, load_from_csv, rebalance_experts, zipf_load
from moesim.errors import ConfigError, MoesimError
from moesim.report.eplb import print_eplb
from moesim.report.writer import json_text

__all__ = ["eplb_command", "app", "eplb", "register"]

DEFAULT_ZIPF = 1.0
DEFAULT_EXPERTS = 256  # DeepSeek-V3 routed experts
DEFAULT_LAYERS = 58  # DeepSeek-V3 MoE layers (61 layers, first 3 dense)


MAX_CELLS = 50_000_000  # layers x slots (the placement arrays; ~400 MB of float64)
LIMITS = {
    "experts": 100_000,
    "slots": 1_000_000,
    "gpus": 1_000_000,
    "nodes": 1_000_000,
    "groups": 100_000,
    "layers": 10_000,
    "seed": 2**32 - 1,
}


def _check_int(name: str, v, lo: int) -> int:
    hi = LIMITS.get(name)
    try:
        ok = v is not None and not isinstance(v, bool) and int(v) == v and lo <= v <= (hi if hi else v)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ConfigError(f"--{name}: {v!r} must be an integer >= {lo}" + (f" and <= {hi:,}" if hi else ""))
    return int(v)


def _load_weight(experts, slots, zipf, load, layers, seed):
    """-> (loads [layers, experts], experts, source text, note or None) from exactly one source."""
    if load is not None:
        weight = load_from_csv(load)
        experts = None if experts is None else _check_int("experts", experts, 1)
        layers = None if layers is None else _check_int("layers", layers, 1)
        if weight.shape[0] * slots > MAX_CELLS:
            raise ConfigError(
                f"--load x --slots: {weight.shape[0] * slots:,} placement cells; allowed at most {MAX_CELLS:,}"
            )
        if experts is not None and int(experts) != weight.shape[1]:
            raise ConfigError(f"--experts: {experts} does not match {load} ({weight.shape[1]} columns)")
        if layers is not None and int(layers) != weight.shape[0]:
            raise ConfigError(f"--layers: {layers} does not match {load} ({weight.shape[0]} rows)")
        return weight, weight.shape[1], f"csv {load}", None
    note = None
    if zipf is None:
        zipf = DEFAULT_ZIPF
        note = f"note: no --zipf/--load given; using Zipf s={DEFAULT_ZIPF} expert popularity"
    if not np.isfinite(zipf) or zipf < 0:
        raise ConfigError(f"--zipf: {zipf!r} must be a number >= 0")
    experts = _check_int("experts", DEFAULT_EXPERTS if experts is None else experts, 1)
    layers = _check_int("layers", DEFAULT_LAYERS if layers is None else layers, 1)
    if layers * max(experts, slots) > MAX_CELLS:
        raise ConfigError(
            f"--layers x --slots: {layers * max(experts, slots):,} placement cells; allowed at most {MAX_CELLS:,}"
        )
    return zipf_load(experts, zipf, layers=layers, seed=seed), experts, f"zipf s={zipf:g}, seed {seed}", note


# what `check_layout`'s messages call the layout numbers here: this command's flags
FLAG_NAMES = {**{k: f"--{k}" for k in ("slots", "gpus", "nodes", "groups", "experts")}, "expert_count": "--experts"}


def _result(res, experts, slots, gpus, nodes, groups, source) -> dict:
    placement = res.phy2log.reshape(res.num_layers, gpus, res.slots_per_gpu)
    return {
        "experts": experts,
        "slots": slots,
        "gpus": gpus,
        "nodes": nodes,
        "groups": groups,
        "layers": res.num_layers,
        "load_source": source,
        "policy": res.policy,
        "slots_per_gpu": res.slots_per_gpu,
        "imbalance_before": res.imbalance_before_mean,
        "imbalance_after": res.imbalance_after_mean,
        "imbalance_before_per_layer": res.imbalance_before.tolist(),
        "imbalance_after_per_layer": res.imbalance_after.tolist(),
        "naive_kept_layers": np.flatnonzero(res.naive_kept).tolist(),
        "placement": placement.tolist(),
        "replica_count": res.replica_count.tolist(),
        "gpu_load": res.gpu_load.tolist(),
    }


def eplb_command(
    experts: int | None = None,
    slots: int = 288,
    gpus: int = 144,
    nodes: int | None = None,
    groups: int | None = None,
    zipf: float | None = None,
    load: Path | None = None,
    layers: int | None = None,
    seed: int = 0,
    json_out: bool = False,
    echo=print,
) -> dict:
    """Run EPLB and print the placement summary (or one JSON object with ``json_out``).

    experts: logical experts (default 256, or the CSV's column count with ``load``);
    slots: physical expert slots (experts + redundant); gpus: EP ranks; nodes / groups:
    hierarchical policy when groups % nodes == 0 (default 1 / 1: global); zipf / load:
    exactly one load source (default zipf 1.0, noted on stderr); layers: MoE layers for
    zipf (default 58; with ``load`` the CSV's rows). Raises MoesimError on bad input.
    """
    if zipf is not None and load is not None:
        raise ConfigError("--zipf/--load: give exactly one load source, not both")
    if zipf is not None:
        try:
            zipf = float(zipf)
        except (TypeError, ValueError):
            raise ConfigError(f"--zipf: {zipf!r} must be a number >= 0") from None
    nodes = 1 if nodes is None else _check_int("nodes", nodes, 1)
    groups = 1 if groups is None else _check_int("groups", groups, 1)
    gpus = _check_int("gpus", gpus, 1)
    slots = _check_int("slots", slots, 1)
    seed = _check_int("seed", seed, 0)
    weight, experts, source, note = _load_weight(experts, slots, zipf, load, layers, seed)
    check_layout(experts, slots, gpus, nodes, groups, FLAG_NAMES)
    res = rebalance_experts(weight, slots, groups, nodes, gpus)
    out = _result(res, experts, slots, gpus, nodes, groups, source)
    if note:
        print(note, file=sys.stderr)
    if json_out:
        echo(json_text(out, indent=None))
    else:
        print_eplb(out, res, weight, echo)
    return out


app = typer.Typer(help="Expert-parallel load balancing (EPLB).", no_args_is_help=True, add_completion=False)


@app.callback()
def _main() -> None:
    """Expert-parallel load balancing (EPLB)."""


@app.command("eplb")
def eplb(
    experts: int | None = typer.Option(None, "--experts", help="logical experts (default 256, or the CSV's columns)"),
    slots: int = typer.Option(288, "--slots", help="physical expert slots = experts + redundant"),
    gpus: int = typer.Option(144, "--gpus", help="GPUs (EP ranks); slots must be a multiple"),
    nodes: int | None = typer.Option(None, "--nodes", help="nodes (default 1)"),
    groups: int | None = typer.Option(
        None, "--groups", help="expert groups (default 1); hierarchical policy when nodes divide groups"
    ),
    zipf: float | None = typer.Option(None, "--zipf", help="Zipf exponent s of expert popularity (default 1.0)"),
    load: Path | None = typer.Option(None, "--load", help="CSV of expert loads: rows = layers, columns = experts"),
    layers: int | None = typer.Option(None, "--layers", help="MoE layers for --zipf (default 58)"),
    seed: int = typer.Option(0, "--seed", help="seed of the per-layer Zipf permutation"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Place experts with EPLB; print per-GPU experts and imbalance before/after."""
    try:
        eplb_command(experts, slots, gpus, nodes, groups, zipf, load, layers, seed, json_out, echo=typer.echo)
    except MoesimError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(code=2) from None


def register(main_app: typer.Typer) -> None:
    """Mount `moesim eplb` on the main CLI (moesim.cli looks for register(app))."""
    main_app.command("eplb")(eplb)


if __name__ == "__main__":  # pragma: no cover
    app()
