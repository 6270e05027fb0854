"""`moesim eplb`: place experts with the EPLB balancer and report imbalance before/after.

``eplb_command`` is the plain function (returns the result dict, prints the summary or one
JSON object); ``app`` is a typer app with one command ``eplb`` for the main CLI to mount
(``app.add_typer`` or ``app.command("eplb")(eplb)``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from moesim.balance.eplb import check_layout, load_from_csv, rebalance_experts, zipf_load
from moesim.cli import options as O
from moesim.errors import ConfigError, MoesimError
from moesim.report.eplb import print_eplb
from moesim.report.writer import json_text

__all__ = ["EplbOptions", "eplb_command", "app", "eplb", "register"]

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


@dataclass(frozen=True)
class EplbOptions(O.OptionBlock):
    """The options of `moesim eplb` (the keywords of `eplb_command`)."""

    experts: Annotated[
        int | None, typer.Option("--experts", help="logical experts (default 256, or the CSV's columns)")
    ] = None
    slots: Annotated[int, typer.Option("--slots", help="physical expert slots = experts + redundant")] = 288
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs (EP ranks); slots must be a multiple")] = 144
    nodes: Annotated[int | None, typer.Option("--nodes", help="nodes (default 1)")] = None
    groups: Annotated[
        int | None,
        typer.Option("--groups", help="expert groups (default 1); hierarchical policy when nodes divide groups"),
    ] = None
    zipf: Annotated[
        float | None, typer.Option("--zipf", help="Zipf exponent s of expert popularity (default 1.0)")
    ] = None  # fmt: skip
    load: Annotated[
        Path | None, typer.Option("--load", help="CSV of expert loads: rows = layers, columns = experts")
    ] = None
    layers: Annotated[int | None, typer.Option("--layers", help="MoE layers for --zipf (default 58)")] = None
    seed: Annotated[int, typer.Option("--seed", help="seed of the per-layer Zipf permutation")] = 0
    json_out: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False


def eplb_command(echo=print, **options) -> dict:
    """Run EPLB and print the placement summary (or one JSON object with ``json_out``).

    options: the fields of `EplbOptions` (a misspelt one is a TypeError). experts: logical experts
    (default 256, or the CSV's column count with ``load``); slots: physical expert slots (experts
    + redundant); gpus: EP ranks; nodes / groups: hierarchical policy when groups % nodes == 0
    (default 1 / 1: global); zipf / load: exactly one load source (default zipf 1.0, noted on
    stderr); layers: MoE layers for zipf (default 58; with ``load`` the CSV's rows); seed: the
    per-layer Zipf permutation. Raises MoesimError on bad input.
    """
    o = EplbOptions(**options)
    zipf = _check_zipf(o.zipf, o.load)
    nodes = 1 if o.nodes is None else _check_int("nodes", o.nodes, 1)
    groups = 1 if o.groups is None else _check_int("groups", o.groups, 1)
    gpus = _check_int("gpus", o.gpus, 1)
    slots = _check_int("slots", o.slots, 1)
    seed = _check_int("seed", o.seed, 0)
    weight, experts, source, note = _load_weight(o.experts, slots, zipf, o.load, o.layers, seed)
    check_layout(experts, slots, gpus, nodes, groups, FLAG_NAMES)
    res = rebalance_experts(weight, slots, groups, nodes, gpus)
    out = _result(res, experts, slots, gpus, nodes, groups, source)
    if note:
        print(note, file=sys.stderr)
    if o.json_out:
        echo(json_text(out, indent=None))
    else:
        print_eplb(out, res, weight, echo)
    return out


def _check_zipf(zipf, load):
    """--zipf as a number (None: not given); with --load too: an error (one load source)."""
    if zipf is not None and load is not None:
        raise ConfigError("--zipf/--load: give exactly one load source, not both")
    if zipf is not None:
        try:
            zipf = float(zipf)
        except (TypeError, ValueError):
            raise ConfigError(f"--zipf: {zipf!r} must be a number >= 0") from None
    return zipf


app = typer.Typer(help="Expert-parallel load balancing (EPLB).", no_args_is_help=True, add_completion=False)


@app.callback()
def _main() -> None:
    """Expert-parallel load balancing (EPLB)."""


@app.command("eplb")
@O.shared("o", EplbOptions)
def eplb(o: EplbOptions) -> None:
    """Place experts with EPLB; print per-GPU experts and imbalance before/after."""
    try:
        eplb_command(echo=typer.echo, **o)
    except MoesimError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(code=2) from None


def register(main_app: typer.Typer) -> None:
    """Mount `moesim eplb` on the main CLI (moesim.cli looks for register(app))."""
    main_app.command("eplb")(eplb)


if __name__ == "__main__":  # pragma: no cover
    app()
