"""Output at scale (issue 16 part 5): whole-process `moesim sweep` over a 344,064-configuration
DeepSeek-V3 decode space on one core, without --out and with --out .csv / .parquet (CLI start-up,
evaluation, table and file included), and the writers alone on that frame: moesim's (pyarrow) against
pandas.to_csv / to_parquet. Target: >= 100,000 configurations/s whole-process with CSV output.

    python bench/csv_speed.py [--repeat 3] [--dir /tmp]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one core: before numpy loads

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweep_speed import pin_one_core  # noqa: E402  (bench/ is this script's folder on sys.path)

# 4 tp x 7 ep x 256 batch x 12 context x 2 mtp x 2 redundant = 344,064 configurations
AXES = [
    "--tp", "1,2,4,8", "--ep", "8,16,32,64,128,144,256", "--batch", "1:256:1", "--context", "1024:12288:1024",
    "--mtp", "0,1", "--acceptance", "0.8", "--redundant", "0,32",
]  # fmt: skip
N_CONFIGS = 344_064


def whole_process(extra: list[str], repeat: int) -> float:
    """Best wall time of `python -m moesim.cli sweep AXES --top 1 EXTRA` (seconds)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "moesim.cli", "sweep", *AXES, "--top", "1", *extra],
            cwd=ROOT, env=env, capture_output=True, text=True,
        )  # fmt: skip
        best = min(best, time.perf_counter() - t0)
        if p.returncode != 0:
            sys.exit(p.stderr)
        if f"{N_CONFIGS:,} configurations" not in p.stdout + p.stderr:
            sys.exit(f"expected {N_CONFIGS:,} configurations:\n{p.stdout[-600:]}")
    return best


def writers_alone(out_dir: Path) -> None:
    """The writers on the sweep's frame, in process: moesim's (pyarrow) and pandas'."""
    from moesim.analyses.sweep import sweep
    from moesim.report.writer import write_frame

    ax = dict(zip(AXES[0::2], AXES[1::2], strict=True))
    df = sweep("deepseek-v3", "h800", "decode", {k.lstrip("-"): v for k, v in ax.items()})
    print(f"frame: {len(df):,} rows x {len(df.columns)} columns")
    for suf, pandas_write in ((".csv", lambda p: df.to_csv(p, index=False)), (".parquet", df.to_parquet)):
        p = out_dir / f"moesim_bench{suf}"
        t0 = time.perf_counter()
        write_frame(df, p)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        pandas_write(p)
        t_pd = time.perf_counter() - t0
        print(
            f"  write {suf:8s} moesim (pyarrow) {t_ours:6.2f} s   pandas {t_pd:6.2f} s   ({p.stat().st_size / 1e6:.0f} MB)"
        )
        p.unlink()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (best is reported)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp"), help="folder for the output files")
    a = ap.parse_args()
    print(pin_one_core())
    writers_alone(a.dir)
    print(f"`moesim sweep` whole process, {N_CONFIGS:,} configurations (best of {a.repeat}):")
    for label, extra in (
        ("no --out", []),
        ("--out .csv", ["--out", str(a.dir / "moesim_bench.csv")]),
        ("--out .parquet", ["--out", str(a.dir / "moesim_bench.parquet")]),
    ):
        dt = whole_process(extra, a.repeat)
        print(f"  {label:15s} {dt:6.2f} s  {N_CONFIGS / dt:10,.0f} configurations/s")
    for suf in (".csv", ".parquet"):
        (a.dir / f"moesim_bench{suf}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
