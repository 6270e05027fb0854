"""A rich progress bar for long grid evaluations (sweep, pareto, disagg)."""

from __future__ import annotations

import time


class Progress:
    """A rich progress bar that appears only when a sweep runs longer than ~2 s."""

    def __init__(self, after_s=1.0):
        self.t0 = time.perf_counter()
        self.after_s = after_s
        self.bar = None
        self.task = None

    def __enter__(self):
        return self

    def update(self, done, total):
        if self.bar is None:
            el = time.perf_counter() - self.t0
            # show when the projected total exceeds ~2 s and some work is still ahead
            if el < self.after_s or done >= total or el / max(done, 1) * total < 2.0:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn  # lazy: start-up time

            self.bar = Progress(
                TextColumn("sweep"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,}"),
                TimeRemainingColumn(),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=total)
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False
