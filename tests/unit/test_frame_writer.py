"""`--out` frames (moesim.report.writer): CSV and Parquet through pyarrow read back equal to the frame
(values, column order, missing values), the pandas fallback without pyarrow writes the same values, and
a failed write leaves the old file and no temporary file."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from moesim.errors import ConfigError
from moesim.fsio import frames
from moesim.report import writer

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def frame():
    from moesim.analyses.sweep import sweep

    df = sweep(hardware="h800", axes={"ep": [8, 32, 256], "batch": [1, 64], "mtp": [0, 1], "context": [2048]})
    assert {"valid", "fits", "reason", "ttft_s"} <= set(df.columns)
    assert df["ttft_s"].isna().any() and df["fits"].dtype == bool  # missing values and booleans are covered
    return df


def _expected(df):
    """What a CSV reader gives back: an empty string reads as missing."""
    return df.replace("", np.nan)


def test_csv_round_trip_equals_frame(frame, tmp_path):
    out = writer.write_frame(frame, tmp_path / "s.csv")
    # the writer's text is exact (shortest round-trip); pandas 2.0's default float parser is not (last ulp)
    back = pd.read_csv(out, low_memory=False, float_precision="round_trip")
    assert list(back.columns) == list(frame.columns)
    pd.testing.assert_frame_equal(back, _expected(frame), check_exact=True, check_dtype=False)
    assert out.read_text().splitlines()[0] == ",".join(frame.columns)  # header unquoted, as pandas writes it


def test_csv_same_values_without_pyarrow(frame, tmp_path, monkeypatch):
    fast = pd.read_csv(writer.write_frame(frame, tmp_path / "a.csv"), low_memory=False)
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError: pandas.to_csv
        slow = writer.write_frame(frame, tmp_path / "b.csv")
    assert ",True," in slow.read_text() and ",true," in (tmp_path / "a.csv").read_text()  # the two writers
    pd.testing.assert_frame_equal(pd.read_csv(slow, low_memory=False), fast, check_exact=True, check_dtype=False)


def test_csv_header_and_values_that_need_quotes(tmp_path):
    df = pd.DataFrame({"a,b": [1.5, np.nan], 'q"': ["x,y", 'say "hi"'], "ok": [True, False]})
    back = pd.read_csv(writer.write_frame(df, tmp_path / "q.csv"))
    pd.testing.assert_frame_equal(back, df, check_exact=True)


def test_mixed_object_column_falls_back_to_pandas(tmp_path):
    df = pd.DataFrame({"x": pd.Series([1, "a", 2.5], dtype=object)})  # pyarrow cannot type it
    assert frames._arrow_table(df) is None
    assert writer.write_frame(df, tmp_path / "m.csv").read_text() == "x\n1\na\n2.5\n"


def test_parquet_round_trip_equals_frame(frame, tmp_path):
    back = pd.read_parquet(writer.write_frame(frame, tmp_path / "s.parquet"))
    pd.testing.assert_frame_equal(back, frame.reset_index(drop=True), check_exact=True)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_failed_write_keeps_old_file(frame, tmp_path, monkeypatch, suffix):
    out = tmp_path / f"s{suffix}"
    out.write_text("old\n")

    def broken(table, where, *a, **k):
        with open(where, "wb") if not hasattr(where, "write") else where as f:
            f.write(b"half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("pyarrow.csv.write_csv", broken)
    monkeypatch.setattr("pyarrow.parquet.write_table", broken)
    with pytest.raises(ConfigError, match="(?i)--out: cannot write .*No space left"):
        writer.write_frame(frame, out)
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary file left behind


def test_rank_feasible_first_best_first_missing_last_stable():
    """report.sweep.rank (the order --out writes): valid and fitting rows first, each part best first,
    a missing value last in its part, ties in input order; the same as pandas' stable sort."""
    from moesim.report.sweep import rank

    df = pd.DataFrame(
        {
            "valid": [True, True, False, True, True, True, True],
            "fits": [True, False, True, True, True, True, True],
            "tokens_per_s_per_gpu": [5.0, 99.0, 50.0, np.nan, 7.0, 5.0, 7.0],
        },
        index=[10, 11, 12, 13, 14, 15, 16],
    )
    assert rank(df).index.tolist() == [14, 16, 10, 15, 13, 11, 12]
    ref = (
        df.assign(_ok=(df["valid"] & df["fits"]).astype(int))
        .sort_values(["_ok", "tokens_per_s_per_gpu"], ascending=False, na_position="last", kind="stable")
        .drop(columns="_ok")
    )
    pd.testing.assert_frame_equal(rank(df), ref)
