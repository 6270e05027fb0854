"""`moesim kernel`: one kernel's predicted time, FLOPs, bytes, bound, efficiency, provenance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from moesim.cli import options as O
from moesim.engine.settings import Pricing
from moesim.errors import ConfigError
from moesim.workload.kernels import OPS, kernel_op

LIBRARY_HELP = (
    "all_reduce | all_gather only. auto (default): what the engine picks at this size: its custom all-reduce "
    "(one-shot / two-shot) up to its max_bytes where faster, else NCCL | nccl: NCCL only (ring LL / LL128 / Simple, "
    "NVLS; what nccl-tests measures) | custom: the engine's custom all-reduce only (single NVLink domain, up to its "
    "max_bytes). The output names the algorithm that priced it and the size (bytes) where the engine switches to NCCL"
)

# kernel_op lives in moesim.workload.kernels; re-exported
__all__ = ["OPS", "KernelOptions", "kernel", "kernel_op", "register"]


@dataclass(frozen=True)
class KernelOptions(O.OptionBlock):
    """The options of `moesim kernel`: the op, the specs and pricing, the kernel's shape flags."""

    op: Annotated[str, typer.Option("--op", help=" | ".join(OPS))]
    model: Annotated[str, typer.Option("--model", "-m")] = "deepseek-v3"
    hardware: Annotated[str, typer.Option("--hardware", "-g")] = "h800"
    cost_mode: Annotated[str, typer.Option("--cost-mode")] = "calibrated"
    engine: O.Engine = "sglang"
    m: Annotated[float | None, typer.Option("--m")] = None
    n: Annotated[float | None, typer.Option("--n")] = None
    k: Annotated[float | None, typer.Option("--k")] = None
    groups: Annotated[float, typer.Option("--groups")] = 1
    layout: Annotated[str, typer.Option("--layout")] = "masked"
    batch: Annotated[float | None, typer.Option("--batch")] = None
    q_len: Annotated[float, typer.Option("--q-len")] = 1
    context: Annotated[float | None, typer.Option("--context")] = None
    heads: Annotated[float | None, typer.Option("--heads")] = None
    ep: Annotated[float | None, typer.Option("--ep")] = None
    tokens: Annotated[float | None, typer.Option("--tokens")] = None
    mode: Annotated[str, typer.Option("--mode")] = "deepep-ll"
    gpus: Annotated[
        float | None, typer.Option("--gpus", help="all_reduce | all_gather: ranks in the group (GPUs)")
    ] = None  # fmt: skip
    nbytes: Annotated[
        float | None,
        typer.Option("--bytes", help="all_reduce | all_gather: message size in bytes (each rank's buffer, e.g. 1e6)"),
    ] = None
    library: Annotated[str | None, typer.Option("--library", help=LIBRARY_HELP)] = None
    set_: Annotated[list[str] | None, typer.Option("--set")] = None
    json_out: Annotated[bool, typer.Option("--json")] = False

    def shape(self) -> dict:
        """The shape flags as `kernel_op` keywords."""
        return {name: self[name] for name in SHAPE_FLAGS}


SHAPE_FLAGS = ("m", "n", "k", "groups", "layout", "batch", "q_len", "context", "heads", "ep", "tokens", "mode", "gpus",
               "nbytes")  # fmt: skip


@O.shared("opts", KernelOptions)
def kernel(opts: KernelOptions):
    """Predict one kernel: time_s, flops, bytes, bound, efficiency, provenance. A collective also names the
    library and algorithm that priced it (--library) and the message size where the engine switches to NCCL."""
    from moesim.report.writer import json_text  # lazy: strict JSON only for --json

    res = _predict(opts)
    if opts.json_out:
        typer.echo(json_text(res))
        return
    for line in _text_lines(res, opts.op):
        typer.echo(line)


def _predict(o: KernelOptions) -> dict:
    """The kernel's prediction: op, hardware, cost mode, the profile's fields, the priced fields, notes."""
    # lazy: start-up time (`moesim --help` imports every command module)
    from moesim.engine.pricing import load_profile_for, profile_info, resolve_specs

    # lazy: start-up time (`moesim --help` imports every command module)
    from moesim.enums import CostMode
    from moesim.perf.kernel import COLLECTIVE_OPS

    op, engine, library = o.op, o.engine, o.library
    mdl, hw = resolve_specs(o.model, o.hardware, o.set_)
    cm_mode = CostMode.parse(o.cost_mode, "cost_mode")
    prof, notes = load_profile_for(hw, Pricing.of(cost_mode=cm_mode, engine=engine))
    if library is not None and op not in COLLECTIVE_OPS:
        raise ConfigError(f"--library: only for --op {' | '.join(COLLECTIVE_OPS)} (got --op {op})")
    w = kernel_op(mdl, hw, op, **o.shape())
    res = {"op": op, "hardware": hw.name, "cost_mode": cm_mode.value} | profile_info(prof, engine)
    got = _price(w, mdl, hw, cm_mode, prof, library or "auto", engine)
    notes = notes + got.pop("library_notes", [])
    return res | got | {"notes": notes}


def _text_lines(res: dict, op: str) -> list[str]:
    """The plain-text report: one summary line, a collective's library lines, the notes."""
    # lazy: start-up time (`moesim --help` imports every command module)
    from moesim import units as U
    from moesim.perf.kernel import COLLECTIVE_OPS

    lines = [
        f"{op} on {res['hardware']} ({res['cost_mode']}, {res['engine']}): {U.fmt_time(res['time_s'])}  "
        f"bound {res['bound']}  efficiency vs roofline {res['efficiency'] * 100:.0f}%  [{res['provenance']}]  "
        f"{res['flops'] / 1e9:.2f} GFLOP  {U.fmt_bytes(res['bytes'])}"
    ]
    if op in COLLECTIVE_OPS:
        lines += _library_lines(res)
    return lines + [f"note: {x}" for x in res["notes"] + ([res["note"]] if res.get("note") else [])]


def register(app: typer.Typer) -> None:
    app.command()(kernel)


def _price(w, mdl, hw, cm_mode, prof, library: str, engine: str) -> dict:
    """price_kernel's dict; a collective's from price_collective (with its library fields)."""
    # lazy: start-up time (`moesim --help` imports every command module)
    from moesim.engine.pricing import load_profile_for
    from moesim.enums import CostMode
    from moesim.perf.kernel import COLLECTIVE_OPS, price_collective, price_kernel

    if w.comm_op not in COLLECTIVE_OPS:
        return price_kernel(w, mdl, hw, cm_mode, prof)
    # roofline mode reads no profile; the custom all-reduce's backends and size limit come from the engine's
    engine_prof = prof or load_profile_for(hw, Pricing.of(cost_mode=CostMode.CALIBRATED, engine=engine))[0]
    return price_collective(w, mdl, hw, cm_mode, prof, library, backends_profile=engine_prof, engine=engine)


def _library_lines(res: dict) -> list[str]:
    """The collective's library lines: what priced it, the other libraries, the engine's switch to NCCL."""
    # lazy: start-up time (`moesim --help` imports every command module)
    from moesim import units as U

    lines = [f"library {res['library']}: {res['algorithm']}"]
    for lib, r in res["by_library"].items():
        got = (
            f"{U.fmt_time(r['time_s'])} ({r['algorithm']})"
            if "time_s" in r
            else "not run: " + r["error"].split(": ", 1)[1]
        )
        lines.append(f"  {lib}: {got}")
    backends = res["custom_backends"] or {}
    caps = ", ".join(f"{k} max_bytes {v:.0f} ({U.fmt_bytes(v)})" for k, v in backends.items())
    x = res["engine_switch_bytes"]
    lo, hi = res["switch_range_bytes"]
    if x is not None:
        why = "the custom all-reduce's max_bytes" if res["engine_switch_reason"] == "max_bytes" else "NCCL faster above"
        lines.append(
            f"engine switches custom -> NCCL at {x:.0f} B ({U.fmt_bytes(x)}; {why}){'; ' + caps if caps else ''}"
        )
    else:
        lines.append(
            f"engine runs NCCL at every size in {U.fmt_bytes(lo)}..{U.fmt_bytes(hi)}{'; ' + caps if caps else ''}"
        )
    sw = res["algorithm_switches"]
    if sw:
        steps = ", ".join(f"{s['to']} from {U.fmt_bytes(s['bytes'])}" for s in sw)
        lines.append(f"{res['library']} over {U.fmt_bytes(lo)}..{U.fmt_bytes(hi)}: {sw[0]['from']}, then {steps}")
    return lines
