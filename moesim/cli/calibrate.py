"""`moesim calibrate {run,fit,show,derive,import,compare}`: time kernels, fit profiles, show them, derive
siblings, import tables, compare two sources of one GPU.

Mounted by moesim.cli as the `calibrate` sub-app. Module import stays light (typer, yaml); numpy,
torch, scipy and pandas load inside the commands. The work is in moesim.calibration (runners,
fit) and moesim.perf.profile (reader).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

import typer

from moesim.calibration.runners import backends as B
from moesim.calibration.runners.harness import SHAPE_PRESETS, Timing
from moesim.calibration.runners.harness import run_kernel as _run
from moesim.cli.progress import Activity
from moesim.errors import CalibrationError
from moesim.fsio import resolve_target
from moesim.specs.data import data_root, data_roots, find_data, write_root

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run kernels, fit and show calibration profiles.",
)

import_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Import measured kernel tables as measurement rows (aiconfigurator, published figures).",
)
app.add_typer(import_app, name="import")

RUNNERS = {
    "gemm": "moesim.calibration.runners.gemm",
    "grouped_gemm": "moesim.calibration.runners.grouped_gemm",
    "mla": "moesim.calibration.runners.mla",
    "memcpy": "moesim.calibration.runners.memcpy",
}


@dataclass(frozen=True)
class RunTiming:
    """How `run_kernel` times a kernel: explicit shapes (None: the preset's), a progress bar, warm-up
    and repeat counts (None: the runner's), torch intra-op threads for a CPU run (None: torch's)."""

    shapes: object = None
    progress: bool = True
    warmup: int | None = None
    repeats: int | None = None
    threads: int | None = None


def run_kernel(
    kernel: str,
    backend: str | None = None,
    device: str | None = None,
    quick: bool = False,
    out: Path | None = None,
    *,
    echo=print,
    strict: bool = False,
    preset: str | None = None,
    **timing,
):
    """Python entry point of `calibrate run`: returns the RunResult, or None when skipped.

    strict: the wanted backend (--backend, or the kernel's best on the device) must import, else
    CalibrationError (the CLI exits non-zero); without it a missing library runs the torch
    fallback (rows carry backend torch). preset: default | quick | engine (the shapes SGLang runs).

    timing: the fields of `RunTiming` (shapes, progress, warmup, repeats, threads; a misspelt one is
    a TypeError). threads: CPU only, torch intra-op threads for the run (recorded in the `sms`
    column). One thread is the robust choice on a shared box: multi-threaded BLAS stalls whenever
    one thread is descheduled.
    """
    t = RunTiming(**timing)
    if kernel not in B.KERNELS:
        raise CalibrationError(f"kernel {kernel!r} is not one of {{{', '.join(B.KERNELS)}}}")
    if preset not in (None, *SHAPE_PRESETS):
        raise CalibrationError(f"--shapes: {preset!r}; allowed: {', '.join(SHAPE_PRESETS)}")
    if kernel == "deepep":
        return _run_deepep(backend, quick, out, echo, strict)
    dev = B.resolve_device(device)
    try:
        b = B.choose_backend(kernel, backend, dev, strict=strict, echo=echo)
    except B.Skipped as e:
        echo(str(e))
        return None
    spec = importlib.import_module(RUNNERS[kernel]).SPEC
    if t.threads and dev == "cpu":
        import torch  # lazy: torch only for a CPU run (start-up time of every other command)

        torch.set_num_threads(int(t.threads))
    machine = B.machine_info(dev, b)
    if out is None:
        out = write_root() / "calibration" / "measurements" / B.gpu_slug(machine["gpu"]) / f"{kernel}.csv"
    res = _run(
        spec,
        b,
        dev,
        Path(out),
        shapes=t.shapes,
        preset=preset or ("quick" if quick else "default"),
        machine=machine,
        progress=t.progress,
        timing=Timing(t.warmup, t.repeats),
    )
    echo(
        f"{kernel}: {res.written} rows written, {res.skipped_existing} already in {out} ({b} on {dev}, "
        f"{machine['gpu']})"
    )
    return res


def _run_deepep(backend, quick, out, echo, strict=False):
    b = backend or "deep_ep"
    if b not in B.BACKENDS["deepep"]:
        raise CalibrationError(f"--backend {b!r} is not available for deepep; allowed: deep_ep, nccl")
    why = B.unavailable(b, "cuda")
    if why and strict:
        raise CalibrationError(f"--strict: deepep backend {b}: {why}")
    if why:
        echo(f"skipped: {why}")
        return None
    from moesim.calibration.runners import deepep  # lazy: torch.distributed, only for a deepep run

    if out is None:
        name = B.machine_info("cuda", b)["gpu"]
        out = (
            write_root()
            / "calibration"
            / "measurements"
            / B.gpu_slug(name)
            / ("deepep.csv" if b == "deep_ep" else "nccl.csv")
        )
    if "WORLD_SIZE" in os.environ:
        return deepep.main(["--backend", b, "--out", str(out)] + (["--quick"] if quick else []))
    return deepep.launch(b, quick, Path(out))


@app.command("run")
def run_cmd(
    kernel: str = typer.Argument(..., help="gemm | grouped_gemm | mla | deepep | memcpy"),
    backend: str | None = typer.Option(
        None, "--backend", help="deep_gemm | flash_mla | deep_ep | nccl | torch (default: the best importable)"
    ),
    device: str = typer.Option("auto", "--device", help="auto | cuda | cpu"),
    quick: bool = typer.Option(False, "--quick", help="a small subset of the shapes"),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="CSV to append to (default: calibration/measurements/<gpu>/<kernel>.csv in the checkout, else "
        "under $MOESIM_DATA or ~/.local/share/moesim)",
    ),
    threads: int | None = typer.Option(None, "--threads", help="CPU only: torch threads (default: torch's)"),
    shapes: str = typer.Option(
        "default", "--shapes", help="default | quick | engine (the shapes SGLang runs for DeepSeek-V3)"
    ),
    strict: bool = typer.Option(
        False, "--strict", help="exit non-zero when the wanted library does not import (no torch fallback)"
    ),
):
    """Time one kernel family over DeepSeek-V3 shapes; re-running resumes where it stopped."""
    preset = "quick" if quick and shapes == "default" else shapes
    run_kernel(kernel, backend, device, quick, out, threads=threads, echo=typer.echo, strict=strict, preset=preset)


@app.command("fit")
def fit_cmd(
    csv: list[Path] = typer.Argument(None, help="measurement CSVs (calibration/measurements/<gpu>/*.csv)"),
    out: Path = typer.Option(..., "--out", help="profile YAML to write (calibration/profiles/<gpu>.yaml)"),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU name (default: the CSVs' folder name)"),
    inherit: list[Path] | None = typer.Option(
        None, "--inherit", help="profile(s) to inherit uncovered kernels from, first wins (repeatable)"
    ),
    folds: int | None = typer.Option(None, "--folds", help="CV folds (default: leave-one-out up to 20 rows, else 10)"),
    note: str = typer.Option("", "--note", help="device note stored in the profile"),
    engine: str | None = typer.Option(
        None, "--engine", help="sglang | trtllm | vllm: the rows are this engine's (writes an engine profile)"
    ),
    parent: list[str] | None = typer.Option(
        None, "--parent", help="profile (path or GPU name: its generic <gpu>.yaml) to inherit from (repeatable)"
    ),
):
    """Fit efficiency curves and alpha-beta parameters; print the cross-validation table."""
    from moesim.calibration import fit as F  # lazy: pandas + scipy (CLI start-up time)

    resolve_target(out)  # a directory or device at --out: refused before the fit, not after it
    parents = [_profile_file(p) for p in parent or []] + list(inherit or [])
    with Activity("calibrate fit"):  # a spinner / a line on stderr when the fit runs longer than ~2 s
        prof = F.fit(csv or [], gpu=gpu, out=out, inherit=parents, folds=folds, device_note=note, engine=engine)
    print_cv_table(prof)
    typer.echo(f"wrote {out}")


def print_cv_table(prof: dict) -> None:
    from rich.console import Console  # lazy: rich tables only when printing (start-up time)
    from rich.table import Table

    from moesim.calibration.fit import cv_table  # lazy: pandas + scipy (CLI start-up time)

    rows = cv_table(prof)
    t = Table(title=f"cross-validation, {prof['gpu']} (held-out rows, |predicted/measured - 1|)")
    for c in ("kernel", "rows", "folds", "median abs err %", "max abs err %"):
        t.add_column(c, justify="left" if c == "kernel" else "right")
    for r in rows:
        t.add_row(r["kernel"], str(r["rows"]), str(r["folds"]), _pct(r["median_abs_pct"]), _pct(r["max_abs_pct"]))
    Console(emoji=False).print(t)
    inh = prof.get("inherited") or {}
    if inh:
        typer.echo("inherited: " + ", ".join(f"{k} <- {v}" for k, v in inh.items()))


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _profile_file(gpu: str, engine: str | None = None) -> Path:
    """A profile path as given, or the file `gpu` is priced with under `engine` (the engine's
    <gpu>.<engine>.yaml, else the generic <gpu>.yaml: moesim.perf.profile.reader.profile_path_for)."""
    from moesim.perf.profile.reader import profile_path_for  # lazy: numpy (CLI start-up time)

    p = Path(gpu)
    if p.suffix in (".yaml", ".yml") or "/" in gpu:
        if not p.exists():
            raise CalibrationError(f"no calibration profile {p}: file does not exist")
        return p
    found = profile_path_for(gpu.strip(), engine)
    if found is None:
        have = sorted({x.stem for r in data_roots() for x in (r / "calibration" / "profiles").glob("*.yaml")})
        raise CalibrationError(f"no calibration profile for {gpu!r}; available: {', '.join(have) or '(none)'}")
    return found


@app.command("show")
def show_cmd(
    gpu: str = typer.Argument(..., help="GPU name (h800, h100-sxm, h200) or a profile path"),
    engine: str | None = typer.Option(
        None, "--engine", help="sglang | trtllm | vllm: the engine's profile (else the GPU's generic one)"
    ),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """Per entry: status (measured / fitted / derived / inherited / roofline), source, rows, CV error."""
    from moesim.perf.profile import Profile, read_profile_file  # lazy: numpy (CLI start-up time)
    from moesim.report.calibration import print_show, show_data  # lazy: rich tables only when printing
    from moesim.report.writer import json_text

    path = _profile_file(gpu, engine)
    data = read_profile_file(path)
    show = show_data(data, path, Profile(data).launch_s)
    if json_out:
        typer.echo(json_text(show))
        return
    print_show(show, data)


@app.command("derive")
def derive_cmd(
    source: Path = typer.Option(..., "--from", help="profile measured on the source GPU, e.g. h200.sglang.yaml"),
    gpu: str = typer.Option(..., "--gpu", help="target GPU of the same SM generation (h100_sxm, h800)"),
    out: Path | None = typer.Option(None, "--out", help="profile to write (default: <gpu>.<engine>.yaml beside it)"),
    force: bool = typer.Option(False, "--force", help="derive across SM generations anyway (not recommended)"),
):
    """A sibling GPU's profile: the source's efficiencies and latencies, the target's peaks and links."""
    from moesim.calibration.fit.derive import derive_file  # lazy: pandas + scipy (CLI start-up time)

    rel = Path("calibration") / "profiles" / source
    src = source if source.exists() or "/" in str(source) else find_data(rel) or data_root() / rel
    prof = derive_file(src, gpu, out=out, force=force)
    n = len(prof["derived"])
    typer.echo(f"derived {n} entries of {prof['derived_from']} for {prof['gpu']} ({prof.get('engine') or 'generic'})")


@import_app.command("aiconfigurator")
def import_aiconfigurator_cmd(
    system: str = typer.Option(
        "h200_sxm", "--system", help="aiconfigurator system (h200_sxm, b200_sxm, gb200, all); h100_sxm is refused"
    ),
    engine: str = typer.Option("all", "--engine", help="sglang | trtllm | vllm | all"),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="aiconfigurator `systems` folder (default: the installed aiconfigurator_core's)"
    ),
    out_dir: Path | None = typer.Option(
        None,
        "--out-dir",
        help="measurements root (default: calibration/measurements of the checkout, $MOESIM_DATA or "
        "~/.local/share/moesim); writes <gpu>/<engine>/*.csv.gz",
    ),
    all_shapes: bool = typer.Option(
        False, "--all-shapes", help="no size trims (attention head_dim 128, GEMM n, k <= 16384)"
    ),
):
    """Import aiconfigurator's measured kernel tables (replaces the files it wrote before)."""
    # lazy: pandas, numpy and pyarrow only for an import (CLI start-up time)
    from moesim.calibration.importers.aiconfigurator import import_aiconfigurator

    with Activity("calibrate import aiconfigurator"):
        summary = import_aiconfigurator(system, engine, data_dir, out_dir, all_shapes=all_shapes)
    for line in summary.lines():
        typer.echo(line)


@import_app.command("published")
def import_published_cmd(
    reference: Path = typer.Argument(..., help="published_figures.csv (kernel-level DG / FMLA / DEP / PPLXK rows)"),
    out_dir: Path | None = typer.Option(
        None, "--out-dir", help="measurements root (default: calibration/measurements of the checkout or user root)"
    ),
):
    """Extract the kernel-level published figures into h800/ and h100_sxm/ measurement CSVs."""
    from moesim.calibration.importers.published import extract  # lazy: pandas (CLI start-up time)

    root = out_dir or write_root() / "calibration" / "measurements"
    for path, n in extract(reference, root).items():
        typer.echo(f"{path}: {n} rows")


@app.command("compare")
def compare_cmd(
    rows: list[Path] = typer.Argument(..., help="measurement CSVs (.csv / .csv.gz) or folders: source A"),
    against: list[Path] = typer.Option(
        ...,
        "--against",
        help="CSVs or folders of source B, same GPU (repeatable), e.g. calibration/measurements/h200/sglang",
    ),
    tolerance: float = typer.Option(
        0.10, "--tolerance", help="nearest shape: every size within this relative distance"
    ),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
):
    """Two sources, one GPU: per kernel family, median / p90 of A/B - 1 over matched shapes."""
    from moesim.calibration.compare import compare  # lazy: numpy (CLI start-up time)

    res = compare(rows, against, tolerance)
    if json_out:
        from moesim.report.writer import json_text  # lazy: the JSON writer only for --json

        typer.echo(json_text(res))
        return
    print_compare(res)


def print_compare(res: dict) -> None:
    from rich.console import Console  # lazy: rich tables only when printing (start-up time)
    from rich.table import Table

    t = Table(title=f"A vs B per family (A/B - 1; shapes matched exactly or within {res['tolerance']:.0%})")
    for c in ("family", "matched", "exact", "unmatched A", "median %", "p10 %", "p90 %", "p90 |.| %"):
        t.add_column(c, justify="left" if c == "family" else "right")
    for f in res["families"]:
        pct = [_pct(None if f[k] is None else 100 * f[k]) for k in ("median", "p10", "p90", "p90_abs")]
        t.add_row(f["family"], str(f["count"]), str(f["exact"]), str(f["unmatched"]), *pct)
    con = Console(emoji=False)
    con = Console(width=max(con.width, 150), emoji=False)  # family names are long: no truncation in a pipe (80 columns)
    con.print(t)
    con.print(
        f"A: {res['a_rows']} rows ({res['a_left_out']} left out: excluded or no time) from {len(res['a'])} files; "
        f"B: {res['b_rows']} rows ({res['b_left_out']} left out) from {len(res['b'])} files"
    )
