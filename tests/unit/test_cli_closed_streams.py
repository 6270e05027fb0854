"""A command started with a closed stdout or stderr (`>&-`, `2>&-`) exits without a traceback (issue 30's
regression: `moesim models >&-` raised AttributeError on sys.stdout.flush())."""

import subprocess
import sys


def _run(redirect: str) -> subprocess.CompletedProcess:
    cmd = f"{sys.executable} -m moesim models {redirect}"
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)


def test_closed_stdout_exits_quietly():
    p = _run(">&-")
    assert "Traceback" not in p.stderr and p.stderr.strip() == "", p.stderr
    assert p.returncode != 0  # nothing could be written: not a success


def test_closed_stderr_still_prints_the_answer():
    p = _run("2>&-")
    assert p.returncode == 0 and "deepseek-v3" in p.stdout
