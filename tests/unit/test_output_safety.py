"""Issue 17 §1/§5 through the CLI: images only when asked, one --out is one file, every write through
the one safe writer (symlinks written through, non-regular files refused, one writer per path), and
every I/O failure one line naming the path and the reason (disk full, broken pipe, stdout full)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import subprocess
import sys

import pytest

from moesim.cli.app import main
from tests.conftest import ROOT, run_cli, unwritable_out

FAST_ROOF = ("--no-calibration", "--ep", "8", "--dp", "8", "--batch", "16")
ONE_CASE = ("--case", "seed002-decode-roofline")


def _images_in_root() -> set:
    return {p.name for p in ROOT.iterdir() if p.suffix in (".png", ".svg", ".pdf")}


def _one_error_line(p) -> str:
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    return lines[0]


def test_roofline_and_timeline_json_write_no_image_nobody_asked_for():
    before = _images_in_root()  # run_cli runs in the repository root, where the old default wrote
    r = run_cli("roofline", *FAST_ROOF, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["out"] is None
    t = run_cli("timeline", "--ep", "8", "--dp", "8", "--batch", "16", "--json")
    assert t.returncode == 0, t.stderr
    assert json.loads(t.stdout)["events"]
    r = run_cli("roofline", *FAST_ROOF)
    assert r.returncode == 0 and "no figure drawn" in r.stdout
    assert _images_in_root() == before


def test_validate_out_is_one_file_chosen_by_its_suffix(tmp_path):
    p = run_cli("validate", *ONE_CASE, "--out", tmp_path / "v.png")
    assert p.returncode in (0, 1), p.stderr
    assert (tmp_path / "v.png").read_bytes()[:4] == b"\x89PNG"  # the chart, not markdown over it
    assert sorted(x.name for x in tmp_path.iterdir()) == ["v.png"]
    p = run_cli("validate", *ONE_CASE, "--out", tmp_path / "r.md", "--plot", tmp_path / "p.svg")
    assert p.returncode in (0, 1), p.stderr
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("# moesim validation report") and "![parity plot](p.svg)" in md
    assert b"<svg" in (tmp_path / "p.svg").read_bytes()[:2000]
    line = _one_error_line(run_cli("validate", *ONE_CASE, "--out", tmp_path / "v.txt"))
    assert all(s in line for s in (".md", ".png", ".svg", ".pdf"))


@pytest.mark.parametrize("kind", ["dir", "fifo", "missing-folder", "link-to-dir"])
def test_out_that_cannot_be_replaced_is_one_line_naming_path_and_reason(tmp_path, kind):
    out, reason = unwritable_out(tmp_path, "r.json", kind)
    before = sorted(x.name for x in tmp_path.iterdir())
    line = _one_error_line(run_cli("estimate", "--out", out))
    assert str(out) in line and reason in line and "--out" in line
    assert sorted(x.name for x in tmp_path.iterdir()) == before


def test_out_through_a_symlink_writes_the_target_and_keeps_the_link_and_the_mode(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}\n")
    os.chmod(real, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    p = run_cli("estimate", "--out", link)
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and "step_time_s" in json.loads(real.read_text())
    assert oct(real.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_disk_full_during_sweep_out_keeps_the_old_file(tmp_path, monkeypatch):
    from moesim.fsio import frames  # the frame writers (re-exported by moesim.report.writer)

    def full(df, path):
        with open(path, "w") as f:
            f.write("half a table")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(frames, "write_csv", full)
    # `sweep --out x.csv` streams its pieces (issue 17 part 2)
    monkeypatch.setattr(frames, "_write_csv_pieces", lambda path, pieces, schema: full(None, path))
    out = tmp_path / "f.csv"
    out.write_text("old\n")
    line = _one_error_line(run_cli("sweep", "--ep", "8", "--batch", "1:4", "--out", out))
    assert str(out) in line and "no space left on device" in line
    assert out.read_text() == "old\n" and [x.name for x in tmp_path.iterdir()] == ["f.csv"]


LOCK_HOLDER = (
    "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
    "fcntl.flock(fd, fcntl.LOCK_EX); print(1, flush=True); time.sleep(30)"
)


def test_a_second_moesim_writing_the_same_path_is_refused(tmp_path):
    out = tmp_path / "e.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(tmp_path / ".e.json.lock")], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"1"
        line = _one_error_line(run_cli("estimate", "--out", out))
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert str(out) in line and "being written by another moesim process" in line and not out.exists()


class _Full(io.StringIO):
    """stdout on a full disk (/dev/full): every write fails with ENOSPC."""

    def write(self, s):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_stdout_on_a_full_disk_is_one_line():
    err = io.StringIO()
    with contextlib.redirect_stdout(_Full()), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        main(["estimate", "--json"])
    assert e.value.code == 2
    assert err.getvalue().strip() == "error: cannot write to standard output: No space left on device"


def test_a_closed_stdout_pipe_exits_quietly_with_status_1():
    """`moesim ... | head -1`: the reader is gone before the first line; no traceback, no message."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "moesim", "models"],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        os.close(w)
    assert p.returncode == 1 and p.stderr == "", p.stderr
