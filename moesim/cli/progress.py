"""Progress of long grid evaluations (sweep, pareto, disagg, budget) on stderr, so stdout stays the
result: a rich bar on a terminal; when stderr is not a terminal (a pipe, a log, CI), one plain line
per 10 % ("sweep: 30% (103,219 of 344,064 configurations), 2.1 s, ~4.9 s left"). Either appears
only when the run is projected to take longer than ~2 s."""

from __future__ import annotations

import sys
import time

PROJECTED_S = 2.0  # runs projected shorter than this show nothing
STEP = 0.1  # plain mode: a line per 10 %


class Progress:
    """``update(done, total)`` callbacks -> a bar (terminal) or a line per 10 % (not a terminal)."""

    def __init__(self, after_s=1.0, *, label: str = "sweep", stream=None, tty: bool | None = None, clock=None,
                 unit: str = "configurations"):  # fmt: skip
        self.clock = clock or time.perf_counter
        self.t0 = self.clock()
        self.after_s = after_s
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.bar = None
        self.task = None
        self.next_step = STEP
        self.printed = False

    def __enter__(self):
        return self

    def update(self, done, total):
        if total <= 0:
            return
        el = self.clock() - self.t0
        if not self.tty:
            self._line(done, total, el)
            return
        if self.bar is None:
            # show when the projected total exceeds ~2 s and some work is still ahead
            if el < self.after_s or done >= total or el / max(done, 1) * total < PROJECTED_S:
                return
            self._start(total)
        self.bar.update(self.task, completed=done)

    def _line(self, done, total, el) -> None:
        """Plain mode: a line each time another 10 % is done, once the run looks longer than ~2 s."""
        frac = done / total
        if frac < self.next_step:
            return
        self.next_step = (int(frac / STEP + 1e-9) + 1) * STEP
        if el / max(frac, 1e-12) < PROJECTED_S or (done >= total and not self.printed):
            return  # short, or all done at the first report: nothing to follow
        self.printed = True
        left = el / frac - el if frac > 0 else float("nan")
        print(f"{self.label}: {frac:.0%} ({done:,} of {total:,} {self.unit}), {el:.1f} s, ~{left:.1f} s left",
              file=self.stream, flush=True)  # fmt: skip

    def _start(self, total) -> None:
        # lazy: start-up time
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        self.bar = Bar(
            TextColumn(self.label),
            BarColumn(),
            TextColumn("{task.completed:,}/{task.total:,}"),
            TimeRemainingColumn(),
            transient=True,
            console=Console(file=self.stream),
        )
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=total)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def announce(what: str, configurations: int, seconds: float, peak_bytes: float, *, stream=None) -> bool:
    """Before a run projected to take longer than ~2 s: one line on stderr with the configurations,
    the projected time and peak memory. True when printed."""
    if seconds < PROJECTED_S:
        return False
    t = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    print(f"{what}: {configurations:,} configurations, ~{t} on one core, ~{peak_bytes / 1e9:.1f} GB peak memory",
          file=stream if stream is not None else sys.stderr, flush=True)  # fmt: skip
    return True


class Activity:
    """Work of unknown length (a calibration fit, an import) on stderr: a rich spinner with the
    elapsed time on a terminal; otherwise one line once it has run ~2 s and one when it ends.
    Nothing for shorter work."""

    def __init__(self, label: str, *, stream=None, tty: bool | None = None, after_s: float = PROJECTED_S):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.after_s = after_s
        self.t0 = time.perf_counter()
        self.timer = self.status = None
        self.said = False

    def __enter__(self):
        import threading  # lazy: only commands with long unknown-length work

        self.t0 = time.perf_counter()
        self.timer = threading.Timer(self.after_s, self._long)
        self.timer.daemon = True
        self.timer.start()
        return self

    def _long(self) -> None:
        self.said = True
        if self.tty:
            from rich.console import Console  # lazy: start-up time

            self.status = Console(file=self.stream).status(f"{self.label} ...")
            self.status.start()
        else:
            print(f"{self.label}: running ({self.after_s:.0f} s so far) ...", file=self.stream, flush=True)

    def __exit__(self, *exc):
        self.timer.cancel()
        if self.status is not None:
            self.status.stop()
        if self.said and not self.tty:
            print(f"{self.label}: done in {time.perf_counter() - self.t0:.1f} s", file=self.stream, flush=True)
        return False
