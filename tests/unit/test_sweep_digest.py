"""`moesim.sweep(..., out=PATH)` streams like `moesim sweep --out PATH` (issue 28 deliverable 5): the
same grid and options give byte-identical files (.csv, .parquet, .json), and the returned
`SweepDigest` holds what the CLI prints (its top-rows table, counts, budget, Pareto frontier)."""

from __future__ import annotations

import importlib.util

import pytest

import moesim
from moesim.analyses.sweep import sweep as library_sweep
from moesim.analyses.sweep_digest import SweepDigest
from moesim.errors import ConfigError
from moesim.report.sweep import print_table, summary
from moesim.report.writer import frame_json_text
from tests.conftest import run_cli

AXES = {"ep": "8,16", "tp": "1,8", "batch": "1:8"}
FLAGS = ["--hardware", "h200", "--ep", "8,16", "--tp", "1,8", "--batch", "1:8"]
SUFFIXES = [".csv", ".json"] + ([".parquet"] if importlib.util.find_spec("pyarrow") else [])


def _library(out, **kw) -> SweepDigest:
    return moesim.sweep("deepseek-v3", "h200", axes=AXES, out=out, require_valid=True, **kw)


def _table(digest: SweepDigest, top: int, capsys) -> str:
    """The table `moesim sweep` prints for the digest's top rows."""
    n = digest.rows["configurations"]
    what = "total tokens/s in the budget" if digest.budget else "tokens/s per GPU"
    capsys.readouterr()
    print_table(digest.top, f"top {min(top, n)} of {n:,} by {what} (feasible first)", top)
    return capsys.readouterr().out


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_library_out_writes_the_cli_bytes_and_digest(tmp_path, suffix, capsys):
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    digest = _library(a, top=3)
    p = run_cli("sweep", *FLAGS, "--top", "3", "--out", b)
    assert p.returncode == 0, p.stderr
    assert a.read_bytes() == b.read_bytes()
    assert isinstance(digest, SweepDigest) and digest.out == a and len(digest.top) == 3
    n = digest.rows["configurations"]
    assert f"wrote {n:,} rows to {b}" in p.stdout
    assert _table(digest, 3, capsys) in p.stdout  # the same top rows, the same title
    rows = digest.rows
    assert f"{n:,} configurations ({rows['valid']:,} valid, {rows['fit']:,} fit)" in p.stdout
    assert summary(digest.top).split(" in ")[0] in p.stdout
    assert digest.evaluated == rows and digest.budget is None and digest.engines == ("sglang",)


def test_digest_under_a_gpu_budget_matches_the_cli(tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    digest = library_sweep("deepseek-v3", "h200", axes=AXES, out=a, top=4, total_gpus=16, require_valid=True)
    p = run_cli("sweep", *FLAGS, "--top", "4", "--total-gpus", "16", "--out", b)
    assert p.returncode == 0, p.stderr
    assert a.read_bytes() == b.read_bytes()
    assert digest.by == "total_tokens_per_s" and digest.budget["total_gpus"] == 16
    assert f"{digest.budget['dropped']:,} configurations need more" in p.stdout
    assert _table(digest, 4, capsys) in p.stdout


def test_digest_frontier_equals_the_pareto_command(tmp_path):
    kw = dict(x="tokens_per_s_per_user", y="tokens_per_s_per_gpu", group_by="ep")
    digest = _library(tmp_path / "a.csv", top=1, frontier=kw, only_fits=True)
    p = run_cli("pareto", *FLAGS, "--group-by", "ep", "--json")
    assert p.returncode == 0, p.stderr
    assert frame_json_text(digest.front) == p.stdout.strip()
    assert len(digest.front) >= 2


def test_without_out_the_frame_is_returned():
    df = moesim.sweep("deepseek-v3", "h200", axes=AXES, total_gpus=16)
    assert len(df) and "total_tokens_per_s" in df.columns and df.attrs["budget"]["total_gpus"] == 16
    with pytest.raises(ConfigError, match="top needs out="):
        moesim.sweep("deepseek-v3", "h200", axes=AXES, top=3)
    with pytest.raises(ConfigError, match="did you mean 'top'"):
        moesim.sweep("deepseek-v3", "h200", axes=AXES, out="x.csv", topp=3)


def test_unknown_out_extension_fails_before_any_work(tmp_path):
    calls = []
    with pytest.raises(ConfigError, match="unknown extension '.txt'"):
        _library(tmp_path / "a.txt", progress=lambda *a: calls.append(a))
    assert calls == [] and not (tmp_path / "a.txt").exists()


@pytest.mark.parametrize("bad", [dict(top=-1), dict(top=2.5), dict(frontier="ep")])
def test_bad_digest_options_are_config_errors(tmp_path, bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        _library(tmp_path / "a.csv", **bad)
