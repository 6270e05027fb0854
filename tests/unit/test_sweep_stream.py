"""Streamed sweeps (issue 17 part 2): the grid evaluated a piece at a time gives the same rows,
columns and values as the in-memory frame (file written piece by piece == `write_frame` of the
whole frame; the running top rows and counts == those of the ranked whole frame); duplicate axis
values are evaluated once; peak memory does not grow with the grid."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from moesim.analyses import budget as B
from moesim.analyses.sweep import plan_sweep, sweep
from moesim.analyses.sweep_digest import Digest, DigestOptions, rank, stream_plan
from moesim.analyses.sweep_stream import iter_pieces, probe_frame
from moesim.errors import ConfigError
from moesim.fsio.frames import stream_frame
from moesim.report.sweep import _fold_constants
from moesim.report.writer import write_frame
from moesim.specs.study import load_study, parse_values
from tests.conftest import ROOT, run_cli

CASES = {
    # derived dp not whole for tp 3 (float dp column, invalid rows with reasons), MTP, redundant
    "decode": dict(
        hardware="h200",
        axes={"tp": [1, 2, 3, 8], "ep": [8, 16, 48], "batch": [1, 7, 64], "mtp": [0, 1], "redundant": [0, 16]},
    ),  # fmt: skip
    # two phases (prefill has one column fewer) and two hardware: blocks with different columns
    "phases": dict(
        fill_defaults=False,
        hardware=["h200", "b200"],
        phase=["decode", "prefill"],
        axes={"ep": [8, 16], "batch": [16, 4096]},
    ),
    # mixed (isl/osl and the scheduler's columns), overlap axis, filters dropping rows
    "mixed": dict(
        hardware="h200",
        phase="mixed",
        isl=1024,
        osl=512,
        max_tpot_s=0.03,
        axes={"tp": [1, 8], "ep": [8, 16], "batch": [8, 64], "overlap": ["auto", "serial"]},
    ),  # fmt: skip
    # every row invalid in the first block (ep 3 does not divide the experts) then valid ones
    "invalid_first": dict(fill_defaults=False, hardware="h200", axes={"ep": [3, 8], "batch": [8, 16]}),
}


def _pieces(plan, rows):
    return (p.frame for p in iter_pieces(plan, rows=rows))


@pytest.mark.parametrize(
    "case, suffix",
    [(c, ".csv") for c in ("decode", "invalid_first", "phases")]
    + [pytest.param("mixed", ".csv", marks=pytest.mark.slow), ("phases", ".parquet"), ("invalid_first", ".parquet")],
)
def test_streamed_file_equals_in_memory_frame(case, suffix, tmp_path):
    kw = {**CASES[case], "chunk_size": 10}  # engine chunks of 10 rows inside pieces of 17
    ref = tmp_path / f"ref{suffix}"
    write_frame(sweep(**kw), ref)
    plan = plan_sweep(**kw)
    got = stream_frame(_pieces(plan, 17), probe_frame(plan), tmp_path / f"got{suffix}", allowed="path")
    if suffix == ".csv":
        assert got.read_bytes() == ref.read_bytes()
    else:
        a, b = pd.read_parquet(ref), pd.read_parquet(got)
        assert list(a.columns) == list(b.columns) and len(a) > 0
        pd.testing.assert_frame_equal(a, b, check_dtype=False)  # an all-missing text column: null vs string


@pytest.mark.parametrize("case", ["decode", "phases"])
def test_digest_equals_the_ranked_whole_frame(case):
    kw = CASES[case]
    df = sweep(**kw)
    ranked = rank(df)
    plan = plan_sweep(**kw)
    d = Digest(5)
    for p in iter_pieces(plan, rows=19):
        d.add(p)
    top = d.frame(plan)
    pd.testing.assert_frame_equal(top, ranked.head(5).reset_index(drop=True), check_dtype=False)
    assert top.attrs["rows"]["configurations"] == len(df)
    assert top.attrs["rows"]["valid"] == int(df["valid"].sum())
    assert top.attrs["evaluated"] == df.attrs["evaluated"]
    assert top.attrs["notes"] == df.attrs["notes"]
    assert top.attrs["axis_values"] == {k: sorted(set(df[k])) for k in B.NUMERIC_AXES}
    cols = [(c, c, None) for c in df.columns]
    assert _fold_constants(top, cols) == _fold_constants(df, cols)


def test_digest_with_gpu_budget_equals_apply_budget():
    kw = dict(hardware="h200", axes={"ep": [8, 16, 32], "batch": [8, 64]}, fill_defaults=False)
    ref = rank(B.apply_budget(sweep(**kw), 16, 8), "total_tokens_per_s")
    top = stream_plan(plan_sweep(**kw), DigestOptions(top=4, total_gpus=16, gpus_per_node=8)).top
    pd.testing.assert_frame_equal(top, ref.head(4).reset_index(drop=True), check_dtype=False)
    assert top.attrs["budget"]["dropped"] == ref.attrs["budget"]["dropped"] > 0


def test_no_valid_configuration_leaves_the_old_file(tmp_path):
    out = tmp_path / "s.csv"
    out.write_text("old\n")
    plan = plan_sweep(hardware="h200", axes={"ep": [3, 6], "batch": [8, 16]}, require_valid=True, fill_defaults=False)
    with pytest.raises(ConfigError, match="none of the 4 configurations is valid"):
        stream_plan(plan, DigestOptions(top=3), out)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]  # no temporary file left


def test_cli_streams_csv_in_grid_order(tmp_path):
    out = tmp_path / "s.csv"
    p = run_cli(
        "sweep", "--hardware", "h200", "--ep", "8,16", "--tp", "1,8", "--batch", "1:8", "--top", "3", "--out", out
    )
    assert p.returncode == 0, p.stderr
    got = pd.read_csv(out)
    ref = sweep("deepseek-v3", "h200", axes={"ep": [8, 16], "tp": [1, 8], "batch": "1:8"})
    assert len(got) == len(ref) and f"wrote {len(ref)} rows" in p.stdout
    np.testing.assert_allclose(got["tokens_per_s_per_gpu"], ref["tokens_per_s_per_gpu"], rtol=1e-12)


# ------------------------------------------------------------------------------ duplicate axis values
def test_duplicate_axis_values_are_evaluated_once(tmp_path):
    assert parse_values("batch", "8,8,8") == [8.0]
    assert parse_values("ep", ["8", 8, "8:16", 16.0]) == [8.0, 16.0]
    assert parse_values("hardware", "h200,b200,h200") == ["h200", "b200"]
    study = tmp_path / "s.yaml"
    study.write_text(
        textwrap.dedent("""\
        hardware: h200
        axes:
          batch: &b [8, 8, 16]
          context: [4096, 4096.0]
          ep: *b
        """)
    )
    assert load_study(study)["axes"]["batch"] == [8.0, 16.0]
    df = sweep(study=str(study), fill_defaults=False)
    assert len(df) == 4 and not df.duplicated(["ep", "batch", "context"]).any()


# ---------------------------------------------------------------------------------- bounded memory
RSS_SCRIPT = """
import resource, sys
from moesim.cli import main
try:
    main(["sweep", "--cost-mode", "roofline", "--tp", "1,2,4,8", "--ep", "8,16,32,64", "--batch", "1:%d:1",
          "--context", "1024:8192:1024", "--mtp", "0,1", "--redundant", "0", "--top", "1", "--out", sys.argv[1]])
except SystemExit as e:
    assert not e.code, e.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _peak_rss_kib(batches: int, out) -> int:
    p = subprocess.run([sys.executable, "-c", RSS_SCRIPT % batches, str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return int(p.stdout.split()[-1])


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_grid(tmp_path):
    """A 4x larger grid (262k -> 1.05 M configurations, 4 -> 16 pieces) to Parquet: the same peak
    RSS (measured: flat after the first few pieces), far under 1 GB (10 M by hand: 365 MB)."""
    small = _peak_rss_kib(1024, tmp_path / "a.parquet")
    large = _peak_rss_kib(4096, tmp_path / "b.parquet")
    assert len(pd.read_parquet(tmp_path / "b.parquet", columns=["tp"])) == 4 * 4 * 4096 * 8 * 2
    assert large < small * 1.1 and large < 1_000_000, (small, large)
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1_000_000


@pytest.mark.parametrize("group_by", [None, "ep", ["hardware", "tp"]])
def test_running_frontier_equals_the_whole_frames(group_by):
    from moesim.analyses.pareto import pareto

    kw = dict(CASES["phases"], only_fits=True)
    fr = dict(x="tokens_per_s_per_user", y="tokens_per_s_per_gpu", group_by=group_by)
    ref = pareto(sweep(**kw), **fr)
    plan = plan_sweep(**kw)
    d = Digest(1, frontier=fr)
    for p in iter_pieces(plan, rows=5):
        d.add(p)
    assert len(ref) >= 1
    pd.testing.assert_frame_equal(d.front, ref, check_dtype=False)
