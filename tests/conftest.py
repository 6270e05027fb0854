import contextlib
import io
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import yaml

from moesim.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def seed_cases():
    data = yaml.safe_load((ROOT / "validation" / "seed_cases.yaml").read_text())
    return {c["id"]: c for c in data["cases"]}


def _exit_code(code) -> int:
    """What a process exiting with SystemExit(code) returns to the shell."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run_cli(*args, check=False) -> subprocess.CompletedProcess:
    """`moesim ARGS` in-process (as `python -m moesim.cli ARGS` run from the repo root would):
    `moesim.cli.main` with stdout/stderr captured, the exit code from SystemExit, an uncaught
    exception as a traceback on stderr with code 1. Returns what subprocess.run would."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = _exit_code(e.code)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except Exception:  # noqa: BLE001 - a crash reads as it would from a process
            traceback.print_exc(file=sys.stderr)
            code = 1
    p = subprocess.CompletedProcess(["moesim", *argv], code, out.getvalue(), err.getvalue())
    if check and p.returncode != 0:
        raise AssertionError(p.stderr)
    return p


def run_cli_subprocess(*args, check=False, timeout=120) -> subprocess.CompletedProcess:
    """`python -m moesim.cli ARGS` as a real process (for the few true entry-point checks)."""
    p = subprocess.run(
        [sys.executable, "-m", "moesim.cli", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )
    if check and p.returncode != 0:
        raise AssertionError(p.stderr)
    return p


def unwritable_out(tmp_path: Path, name: str, kind: str) -> tuple[Path, str]:
    """An output path the safe writer must refuse, and the reason its one-line error names: a
    directory, a fifo, a character device, a path in a missing folder, or a symlink to a directory."""
    out = tmp_path / name
    if kind == "dir":
        out.mkdir()
        return out, "is a directory"
    if kind == "fifo":
        os.mkfifo(out)
        return out, "fifo"
    if kind == "device":
        return Path("/dev/null"), "character device"
    if kind == "missing-folder":
        return tmp_path / "no" / name, "does not exist"
    (tmp_path / "d").mkdir()
    out.symlink_to(tmp_path / "d")
    return out, "is a directory"
