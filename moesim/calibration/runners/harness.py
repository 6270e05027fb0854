"""Run a kernel over its shapes, time it, and append rows to the CSV (resumable, atomic).

Timing
  * CUDA: warm-up calls, then `repeats` timed calls between CUDA events, each preceded by a
    256 MiB write that flushes the 50 MiB L2 (outside the timed region); the median is kept.
  * CPU: time.perf_counter around each call after warm-up; the median is kept.
Inputs are random and non-zero (randn; scales > 0).

Resume: shapes whose key (kernel, backend, device, gpu, shape columns) is already in the CSV are
skipped. Each finished shape is appended atomically (temp file + os.replace), so an interrupted
run leaves the previous CSV plus the shapes it completed, never a torn file.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from moesim.calibration.records import SHAPE_COLUMNS, append_rows_atomic, done_keys, row_key
from moesim.calibration.runners.backends import machine_info
from moesim.errors import CalibrationError

L2_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass
class KernelSpec:
    """What a runner module provides to the harness."""

    kernel: str
    shapes: Callable[[bool, str, str], list[dict]]  # (quick, device, backend) -> shapes
    build: Callable[[dict, str, str], Callable[[], object]]  # (shape, backend, device) -> zero-arg callable
    work: Callable[[dict, str], tuple] | None = None  # (shape, dtype) -> (flops, bytes) for tflops / GBps
    dtype: Callable[[str, str], str] = lambda backend, device: ""  # (backend, device) -> dtype label
    note: Callable[[dict, str, str], str] = lambda shape, backend, device: ""
    # (device, backend) -> the shapes an engine (SGLang serving DeepSeek-V3) runs; None: the full set
    engine_shapes: Callable[[str, str], list[dict]] | None = None


SHAPE_PRESETS = ("default", "quick", "engine")


def preset_shapes(spec: KernelSpec, preset: str, device: str, backend: str) -> list[dict]:
    """The shapes of a --shapes preset: default (the runner's full set), quick, engine."""
    if preset not in SHAPE_PRESETS:
        raise CalibrationError(f"--shapes: {preset!r}; allowed: {', '.join(SHAPE_PRESETS)}")
    if preset == "engine" and spec.engine_shapes is not None:
        return spec.engine_shapes(device, backend)
    return spec.shapes(preset == "quick", device, backend)


@dataclass(frozen=True)
class Timing:
    """How a run times each shape: warm-up calls, timed calls (None: the device's and preset's
    defaults, Timing.resolve) and the timer (None: CUDA events on a GPU, perf_counter on the CPU)."""

    warmup: int | None = None
    repeats: int | None = None
    timer: Callable | None = None

    def resolve(self, device: str, quick: bool) -> tuple:
        """(warmup, repeats, timer) with the defaults filled in."""
        warmup = self.warmup if self.warmup is not None else (2 if quick else 5)
        cpu_repeats = 5 if quick else 20
        repeats = (
            self.repeats if self.repeats is not None else cpu_repeats if device == "cpu" else (10 if quick else 30)
        )
        return warmup, repeats, self.timer or default_timer(device)


@dataclass
class RunResult:
    path: Path | None
    written: int = 0
    skipped_existing: int = 0
    rows: list = field(default_factory=list)


def time_cpu(fn: Callable, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


_FLUSH = {}


def time_cuda(fn: Callable, warmup: int, repeats: int, flush_l2: bool = True) -> float:  # pragma: no cover - GPU
    import torch  # lazy: torch only when timing on a GPU (the harness imports without it)

    dev = torch.cuda.current_device()
    if flush_l2 and dev not in _FLUSH:
        _FLUSH[dev] = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for s, e in zip(starts, ends):
        if flush_l2:
            _FLUSH[dev].zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e-3


def default_timer(device: str) -> Callable[[Callable, int, int], float]:
    return time_cuda if device == "cuda" else time_cpu


def free_device_memory(device: str) -> None:
    if device == "cuda":  # pragma: no cover - GPU
        import torch  # lazy: torch only when timing on a GPU

        torch.cuda.empty_cache()


def _pending(spec: KernelSpec, backend: str, device: str, out: Path, todo: Iterable[dict], machine: dict):
    """(rows still to time, how many shapes the CSV already has)."""
    done = done_keys(out)
    base = {"kernel": spec.kernel, "backend": backend, "dtype": spec.dtype(backend, device), **machine}
    pending = []
    skipped = 0
    for s in todo:
        row = {**base, **s}
        if row_key(row) in done:
            skipped += 1
        else:
            pending.append(row)
    return pending, skipped


def _progress(spec: KernelSpec, backend: str, device: str, total: int, console):
    """A rich progress bar (started) and its task."""
    # lazy: rich's progress bar only while a run prints one
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(
        TextColumn(f"[bold]{spec.kernel}[/] {backend}/{device}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=False,
    )
    prog.start()
    return prog, prog.add_task("", total=total)


PROGRESS_KEYS = ("m", "n", "k", "groups", "batch", "context", "ep", "tokens", "bytes", "layout", "op")


def _time_row(spec: KernelSpec, row: dict, backend: str, device: str, timing: tuple, label: str) -> dict:
    """Time one shape; the row with time_s (and tflops / GBps when the spec knows the work)."""
    warmup, repeats, timer = timing
    shape = {c: row[c] for c in SHAPE_COLUMNS if c in row and c != "dtype"}
    fn = spec.build(shape, backend, device)
    t = float(timer(fn, warmup, repeats)) / float(getattr(fn, "calls", 1))
    del fn
    free_device_memory(device)
    row = dict(row)
    row["time_s"] = t
    if spec.work is not None:
        flops, nbytes = spec.work(shape, spec.dtype(backend, device))
        if flops:
            row["tflops"] = flops / t / 1e12
        if nbytes:
            row["GBps"] = nbytes / t / 1e9
    row["source"] = label
    row["note"] = spec.note(shape, backend, device) or f"median of {repeats} timed calls after {warmup} warm-up"
    return row


def run_kernel(
    spec: KernelSpec,
    backend: str,
    device: str,
    out: Path,
    *,
    shapes: Iterable[dict] | None = None,
    preset: str | None = None,
    machine: dict | None = None,
    timing: Timing = Timing(),
    progress: bool = True,
    console=None,
) -> RunResult:
    """Time every shape not yet in `out` and append one row per shape. preset: default (None) |
    quick | engine (preset_shapes), unless `shapes` are given; timing: Timing (defaults by device)."""
    out = Path(out)
    if machine is None:
        machine = machine_info(device, backend)
    preset = preset or "default"
    timing_args = timing.resolve(device, preset == "quick")
    todo = list(shapes) if shapes is not None else preset_shapes(spec, preset, device, backend)
    pending, skipped = _pending(spec, backend, device, out, todo, machine)
    result = RunResult(out, 0, skipped)
    label = (
        f"local run: moesim calibrate run {spec.kernel} --backend {backend} --device {device}"
        f"{'' if preset == 'default' else ' --shapes ' + preset} ({machine.get('gpu', '')})"
    )
    prog, task = _progress(spec, backend, device, len(pending), console) if progress and pending else (None, None)
    try:
        for row in pending:
            if prog is not None:
                desc = ", ".join(f"{k}={row[k]}" for k in SHAPE_COLUMNS if k in row and k in PROGRESS_KEYS)
                prog.update(task, description=desc)
            row = _time_row(spec, row, backend, device, timing_args, label)
            append_rows_atomic(out, [row])
            result.rows.append(row)
            result.written += 1
            if prog is not None:
                prog.advance(task)
    finally:
        if prog is not None:
            prog.stop()
    return result
