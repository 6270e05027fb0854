"""Kill tests (issue 17 acceptance): SIGINT, SIGTERM or SIGKILL at random points of `moesim sweep --out`
(CSV and Parquet) and `moesim calibrate fit --out` leave either the old file, byte-identical, or the
complete new one (it parses and equals a reference run's output); after SIGINT/SIGTERM no temporary
and no lock file remains.

Each trial runs `python -m moesim ...` in its own folder holding an "old" file (two trials at a time).
The signal goes at a random delay: uniform over the reference run's wall time T for a third of the
trials, uniform over [0.75 T, 1.5 T] (where evaluation ends and the file is written; trials run two at
a time, so a little slower than the reference) for another third, and 0-5 ms after the lock file
appears (inside the write) for the rest. Signals cycle SIGINT, SIGTERM, SIGKILL. The sweep trials
alternate .csv and .parquet (20 in all); wall time ~30 s on 2 idle cores."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

TRIALS = 20
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
GEMM_ROWS = ROOT / "calibration" / "measurements" / "h800" / "gemm.csv"
SWEEP = ("sweep", "--ep", "8,16", "--batch", "1:128:1", "--top", "1")
FIT = ("calibrate", "fit", str(GEMM_ROWS), "--gpu", "h800")


def _cmd(args, out: Path) -> list[str]:
    return [sys.executable, "-m", "moesim", *args, "--out", str(out)]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _run(args, out: Path) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(_cmd(args, out), env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return time.perf_counter() - t0


def _read(path: Path):
    """The file's content as data (what "equal to the reference" compares)."""
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".csv":
        return pd.read_csv(path)
    d = yaml.safe_load(path.read_text())
    d.pop("date", None)  # the fit date: a reference run just before midnight would differ
    return d


def _equal(a, b) -> bool:
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.shape == b.shape and a.equals(b)
    return a == b


def _old_content(ref: Path, old: Path) -> None:
    """A valid, different file of the same kind at ``old`` (the one a kill must leave intact)."""
    if ref.suffix == ".parquet":
        pd.read_parquet(ref).head(5).to_parquet(old, index=False)
    elif ref.suffix == ".csv":
        old.write_text("".join(ref.read_text().splitlines(keepends=True)[:6]))
    else:
        old.write_text(ref.read_text().replace("device_note:", "device_note: old", 1))


def _wait_for(path: Path, proc, deadline_s: float) -> None:
    end = time.perf_counter() + deadline_s
    while not path.exists() and proc.poll() is None and time.perf_counter() < end:
        time.sleep(0.0005)


def _trial(i: int, args, case: dict, folder: Path) -> dict:
    name, wall_s, old_bytes = case["name"], case["wall_s"], case["old"]
    rng = random.Random(1700 + i)
    folder.mkdir()
    out = folder / name
    out.write_bytes(old_bytes)
    sig = SIGNALS[i % 3]
    mode = ("uniform", "late", "in-write")[(i // 3) % 3]
    proc = subprocess.Popen(_cmd(args, out), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if mode == "in-write":
        _wait_for(folder / f".{name}.lock", proc, 3 * wall_s)
        time.sleep(rng.uniform(0, 0.005))
    else:
        time.sleep(wall_s * (rng.uniform(0, 1) if mode == "uniform" else rng.uniform(0.75, 1.5)))
    temp_seen = any(p.name.startswith(f".{name}.") and not p.name.endswith(".lock") for p in folder.iterdir())
    if proc.poll() is None:
        proc.send_signal(sig)
    rc = proc.wait(timeout=60)
    data = out.read_bytes()
    outcome = "old" if data == old_bytes else "new" if _equal(_read(out), case["ref"]) else "CORRUPT"
    litter = sorted(p.name for p in folder.iterdir() if p.name != name)
    return {
        "file": name,
        "sig": sig.name,
        "mode": mode,
        "rc": rc,
        "outcome": outcome,
        "litter": litter,
        "temp_seen": temp_seen,
    }


def _case(tmp_path, args, name: str) -> dict:
    """A reference run (its wall time and its data) and the old file a kill must leave intact."""
    ref = tmp_path / f"ref-{name}" / name
    ref.parent.mkdir()
    wall_s = _run(args, ref)
    old = tmp_path / f"old-{name}" / name
    old.parent.mkdir()
    _old_content(ref, old)
    assert not _equal(_read(old), _read(ref))
    return {"name": name, "wall_s": wall_s, "ref": _read(ref), "old": old.read_bytes()}


def _kill_trials(tmp_path, args, names) -> list[dict]:
    cases = [_case(tmp_path, args, n) for n in names]
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(_trial, i, args, cases[i % len(cases)], tmp_path / f"t{i:02d}") for i in range(TRIALS)]
        results = [j.result() for j in jobs]
    summary: dict = {}
    for r in results:
        key = f"{r['file']} {r['sig']} {r['outcome']}"
        summary[key] = summary.get(key, 0) + 1
    walls = ", ".join(f"{c['name']} {c['wall_s']:.2f} s" for c in cases)
    in_write = sum(r["temp_seen"] for r in results)
    print(f"\n{args[0]}: {len(results)} trials (reference wall {walls}); {summary}")
    print(f"signalled while a temporary file existed: {in_write}")
    assert all(r["outcome"] in ("old", "new") for r in results), results
    caught = [r for r in results if r["sig"] != "SIGKILL"]
    assert all(not r["litter"] for r in caught), [r for r in caught if r["litter"]]
    return results


def test_killing_sweep_out_leaves_the_old_or_the_new_file(tmp_path):
    _kill_trials(tmp_path, SWEEP, ["f.csv", "f.parquet"])


def test_killing_calibrate_fit_out_leaves_the_old_or_the_new_profile(tmp_path):
    _kill_trials(tmp_path, FIT, ["profile.yaml"])
