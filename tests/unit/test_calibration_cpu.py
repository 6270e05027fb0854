"""The calibration loop on the CPU backend (torch on CPU): run -> CSV -> fit -> profile -> predict.

Stated accuracy: the GEMM fit predicts held-back sizes (m = 64, between the measured 16 and 256,
for three DeepSeek-V3 (n, k) pairs) within a median |predicted/measured - 1| <= 35 %. That bound is
loose on purpose: CI boxes have 2 shared cores, and other jobs steal them mid-measurement, so a
single timing can be off by tens of percent (on an idle box the held-out error is ~5-15 %). Runs use
one torch thread: multi-threaded BLAS on an oversubscribed box stalls whenever one of its threads
is descheduled, which makes timings erratic rather than just slow.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from moesim.calibration import fit as F
from moesim.calibration.records import read_csv_rows, write_rows
from moesim.cli.calibrate import run_kernel
from moesim.perf.profile import Profile, read_profile_file

pytestmark = [
    pytest.mark.slow,  # real kernel timings on the CPU (seconds each)
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="the CPU calibration runners need torch (pip install torch==2.13.0)",
    ),
]

HELD_BACK_M = "64"
MEDIAN_BOUND = 0.35


@pytest.fixture(autouse=True)
def _restore_threads():
    import torch  # here, not at module top: importing torch costs seconds even when these tests are deselected

    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_cpu_gemm_runner_resumes_and_the_fit_predicts_held_back_sizes(tmp_path):
    out = tmp_path / "gemm.csv"
    res = run_kernel(
        "gemm", backend="torch", device="cpu", quick=True, out=out, progress=False, threads=1, echo=lambda s: None
    )
    assert res is not None and res.written == 12 and res.skipped_existing == 0
    again = run_kernel(
        "gemm", backend="torch", device="cpu", quick=True, out=out, progress=False, threads=1, echo=lambda s: None
    )
    assert again.written == 0 and again.skipped_existing == 12  # resume: nothing re-timed

    rows = read_csv_rows(out)
    assert {r["backend"] for r in rows} == {"torch"} and {r["dtype"] for r in rows} == {"fp32"}
    assert all(float(r["time_s"]) > 0 and r["gpu"].startswith("cpu") and r["date"] for r in rows)
    train = [r for r in rows if r["m"] != HELD_BACK_M]
    held = [r for r in rows if r["m"] == HELD_BACK_M]
    assert len(held) == 3 and len(train) == 9
    write_rows(tmp_path / "train.csv", train)
    prof = F.fit([tmp_path / "train.csv"], gpu="cpu", out=tmp_path / "cpu.yaml")
    assert prof["kernels"]["gemm"]["status"] == "fitted"
    p = Profile(read_profile_file(tmp_path / "cpu.yaml"))  # no hardware spec: the profile's own peaks
    m = np.array([float(r["m"]) for r in held])
    n = np.array([float(r["n"]) for r in held])
    k = np.array([float(r["k"]) for r in held])
    measured = np.array([float(r["time_s"]) for r in held])
    predicted = p.kernel_time("gemm", m=m, n=n, k=k, dtype="fp32")
    err = np.abs(predicted / measured - 1.0)
    assert np.median(err) <= MEDIAN_BOUND, (err, prof["kernels"]["gemm"]["params"])
    eta = p.kernel_efficiency("gemm", m=m, n=n, k=k, dtype="fp32")[0]
    assert np.all((eta > 0) & (eta <= 1))


def test_cpu_loop_for_grouped_gemm_mla_and_memcpy(tmp_path):
    for kernel, expect in (("grouped_gemm", 6), ("mla", 6), ("memcpy", 4)):
        res = run_kernel(
            kernel,
            backend="torch",
            device="cpu",
            quick=True,
            out=tmp_path / f"{kernel}.csv",
            progress=False,
            threads=1,
            echo=lambda s: None,
        )
        assert res.written == expect, kernel
    prof = F.fit(sorted(tmp_path.glob("*.csv")), gpu="cpu", out=tmp_path / "cpu.yaml")
    kern = prof["kernels"]
    assert kern["grouped_gemm"]["status"] == "fitted" and kern["mla_decode"]["status"] == "fitted"
    assert kern["elementwise"]["status"] == "fitted" and prof["launch"]["status"] == "measured"
    assert 0 < prof["launch"]["us"] < 1e4
    assert {"grouped_gemm", "mla_decode"} <= set(prof["measured_on_this_gpu"])
    p = Profile(read_profile_file(tmp_path / "cpu.yaml"))
    ec, *_ = p.kernel_efficiency(
        "grouped_gemm", m=np.array([8.0, 64.0]), n=7168, k=2048, groups=2, layout="masked", dtype="fp32"
    )
    assert np.all((ec > 0) & (ec <= 1))
    ec, *_ = p.kernel_efficiency(
        "mla_decode", batch=np.array([1.0, 4.0]), q_len=1, heads=16, context=1024, dtype="fp32"
    )
    assert np.all((ec > 0) & (ec <= 1))
    t = p.measured_time("mla_decode", batch=4, q_len=1, heads=16, context=np.array([512.0, 768.0, 4096.0]))
    assert np.isfinite(t[0]) and np.isfinite(t[1]) and np.isnan(t[2])
