"""moesim.cli.progress: a line per 10 % on a non-terminal stderr once a run looks longer than ~2 s,
nothing for short runs; the estimate line before a long run; the sweep's projection."""

from __future__ import annotations

import io

from moesim.analyses.sweep import BASE_BYTES, FRAME_BYTES_PER_ROW, plan_sweep, projection
from moesim.cli.progress import Progress, announce


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run(seconds_total: float, steps: int = 50, total: int = 1000) -> list[str]:
    clock, out = Clock(), io.StringIO()
    with Progress(stream=out, tty=False, clock=clock) as p:
        for i in range(1, steps + 1):
            clock.t = seconds_total * i / steps
            p.update(total * i // steps, total)
    return out.getvalue().splitlines()


def test_plain_lines_every_ten_percent_when_long():
    lines = _run(20.0)
    assert len(lines) == 10
    assert lines[0].startswith("sweep: 10% (100 of 1,000 configurations), 2.0 s, ~18.0 s left")
    assert lines[-1].startswith("sweep: 100% (1,000 of 1,000 configurations)")


def test_no_lines_for_a_short_run():
    assert _run(1.5) == []
    assert _run(30.0, steps=1) == []  # all done at the first report: nothing to follow


def test_a_jump_past_several_steps_prints_one_line():
    clock, out = Clock(), io.StringIO()
    p = Progress(stream=out, tty=False, clock=clock)
    clock.t = 10.0
    p.update(450, 1000)
    p.update(460, 1000)
    clock.t = 20.0
    p.update(1000, 1000)
    assert [x.split(" (")[0] for x in out.getvalue().splitlines()] == ["sweep: 45%", "sweep: 100%"]


def test_announce_only_long_runs():
    out = io.StringIO()
    assert not announce("sweep", 1000, 0.5, 1e9, stream=out)
    assert announce("sweep", 12_000_000, 150.0, 3.2e9, stream=out)
    assert out.getvalue() == "sweep: 12,000,000 configurations, ~2.5 min on one core, ~3.2 GB peak memory\n"


def test_projection_streamed_memory_does_not_grow():
    small = plan_sweep(hardware="h200", axes={"ep": [8, 16], "batch": "1:65536:1"}, fill_defaults=False)
    large = plan_sweep(hardware="h200", axes={"ep": [8, 16], "batch": "1:262144:1"}, fill_defaults=False)
    assert projection(large, True)[1] == projection(small, True)[1]
    assert projection(large, False)[1] == BASE_BYTES + 2 * 262144 * FRAME_BYTES_PER_ROW
    assert projection(large, True)[0] == 4 * projection(small, True)[0]


def test_activity_lines_only_for_long_work():
    import time as _t

    from moesim.cli.progress import Activity

    out = io.StringIO()
    with Activity("calibrate fit", stream=out, tty=False, after_s=0.05):
        _t.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines[0] == "calibrate fit: running (0 s so far) ..." and lines[1].startswith("calibrate fit: done in ")
    quiet = io.StringIO()
    with Activity("calibrate fit", stream=quiet, tty=False, after_s=5.0):
        pass
    assert quiet.getvalue() == ""
