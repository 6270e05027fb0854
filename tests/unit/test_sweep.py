"""moesim.analyses.sweep / mixed / disagg / the sweep CLI commands."""

import json

import numpy as np
import pytest

from moesim.analyses.sweep import sweep
from moesim.api import estimate
from moesim.errors import ConfigError, MoesimError
from moesim.specs.study import DEFAULT_AXES, DEFAULT_PREFILL_BATCH, load_study, parse_values
from tests.conftest import run_cli

METRICS = (
    "step_time_s",
    "tpot_s",
    "tokens_per_s_per_user",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_node",
    "mfu",
    "moe_layer_time_s",
    "max_batch",
    "total_bytes",
    "kv_cache_bytes",
)


def _estimate_row(row, **extra):
    return estimate(
        row["model"],
        row["hardware"],
        phase=row["phase"],
        tp=int(row["tp"]),
        dp=int(row["dp"]),
        ep=int(row["ep"]),
        moe_tp=int(row["moe_tp"]),
        batch=float(row["batch"]),
        context=float(row["context"]),
        mtp=int(row["mtp"]),
        acceptance=float(row["acceptance"]),
        redundant_experts=int(row["redundant"]),
        overlap=None if row["overlap_requested"] == "default" else row["overlap_requested"],
        cost_mode=row["cost_mode"],
        comm=None if row["comm_requested"] == "default" else row["comm_requested"],
        **extra,
    )


def _same(row, r):
    for k in METRICS:
        want = float(np.asarray(r.values[k]).reshape(-1)[0])
        got = float(row[k])
        if np.isnan(want):
            assert np.isnan(got), k
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), k
    assert row["bottleneck"] == r.values["bottleneck"][0]
    assert row["overlap"] == r.values["overlap"][0]
    assert bool(row["fits"]) == r.memory["fits"]


@pytest.fixture(scope="module")
def decode_df():
    return sweep(
        "deepseek-v3",
        ["h800", "h200"],
        "decode",
        {
            "tp": [1, 2, 8],
            "ep": [8, 32, 144, 256],
            "batch": "1:256",
            "context": [1000, 5000],
            "mtp": [0, 1],
            "acceptance": [0.6],
            "redundant": [0, 32],
            "overlap": ["default", "auto", "shared"],
        },
        cost_mode="calibrated",
        chunk_size=1000,
    )


def test_shape_and_columns(decode_df):
    df = decode_df
    assert len(df) == 2 * 3 * 4 * 9 * 2 * 2 * 2 * 3  # every point is a row, invalid ones included
    for c in (
        "model",
        "hardware",
        "phase",
        "tp",
        "dp",
        "ep",
        "moe_tp",
        "batch",
        "context",
        "mtp",
        "acceptance",
        "redundant",
        "step_time_s",
        "tpot_s",
        "tokens_per_s_per_user",
        "tokens_per_s_per_gpu",
        "tokens_per_s_per_node",
        "mfu",
        "bottleneck",
        "overlap",
        "fits",
        "valid",
        "reason",
        "max_batch",
    ):
        assert c in df.columns, c
    assert set(df["hardware"]) == {"h800", "h200"}
    assert (df["ep"] * df["moe_tp"] == df["tp"] * df["dp"]).all()  # dp derived from ep


def test_rows_equal_estimate(decode_df):
    ok = decode_df[decode_df["valid"]]
    rng = np.random.default_rng(4)
    for i in rng.choice(len(ok), 10, replace=False):
        row = ok.iloc[int(i)]
        _same(row, _estimate_row(row))


def test_prefill_and_mixed_rows_equal_estimate():
    df = sweep(
        hardware="h800",
        phase=["prefill"],
        axes={"tp": [1, 4], "ep": [16, 32], "batch": [4096, 16384], "context": [2000]},
    )
    assert (df["mtp"] == 0).all() and df["valid"].all()
    for i in (0, 5):
        _same(df.iloc[i], _estimate_row(df.iloc[i]))
    mx = sweep(hardware="h800", phase="mixed", axes={"ep": [32, 64], "batch": [16, 64], "mtp": [1]}, isl=3000, osl=500)
    assert (mx["context"] == 3000 + 250).all()  # default decode context: ISL + OSL / 2
    for i in (0, 3):
        row = mx.iloc[i]
        r = _estimate_row(row, isl=3000, osl=500)
        _same(row, r)
        assert row["ttft_s"] == pytest.approx(float(r.values["ttft_s"][0]), rel=1e-9)
        # SGLang's default chunk (8192 tokens on an 80-160 GiB GPU) split over the DP ranks; a 3000-token
        # prompt fills every pass
        assert row["prefill_budget_tokens"] == 8192 // row["dp"]
        assert row["prefill_chunk_tokens"] == row["prefill_budget_tokens"]


def test_mixed_passes_are_the_decode_and_prefill_estimates():
    """SGLang on one DP group: the prefill pass is the prefill phase's own estimate at the pass's
    prompt tokens (the last fixed-point round's); TPOT and TTFT bound below by the passes."""
    kw = dict(isl=4000, osl=1000, tp=8, ep=8, batch=32, mtp=0)
    r = estimate("deepseek-v3", "h200", phase="mixed", **kw)
    v = {k: float(np.ravel(x)[0]) for k, x in r.values.items() if np.asarray(x).dtype.kind == "f"}
    assert r.config["phase"] == "mixed" and r.config["scheduler"] == "prefill-priority-chunked"
    assert r.config["load"] == "closed" and r.config["prefill_budget_tokens"] == 8192
    p = estimate("deepseek-v3", "h200", phase="prefill", tp=8, ep=8, batch=v["prefill_chunk_tokens"], context=4000)
    assert v["prefill_chunk_time_s"] == pytest.approx(p["step_time_s"], rel=1e-12)
    assert v["tpot_s"] >= v["decode_step_time_s"] and v["ttft_s"] >= v["prefill_chunk_time_s"]
    assert v["tokens_per_s_per_gpu"] == pytest.approx(v["request_rate_per_s"] * 1000 / 8, rel=1e-9)
    assert r.to_dict()["tokens_per_s_per_gpu"] > 0
    # DP attention (EP32 DP32): the DP ranks' passes run in lock step; the prefill-carrying pass is
    # a decode-phase pass carrying the chunk on the prefilling rank (8192 / 32 tokens per rank)
    d = estimate("deepseek-v3", "h800", phase="mixed", isl=4000, osl=1000, ep=32, batch=32, mtp=0)
    assert d.config["prefill_budget_tokens"] == 256 and d.config["prefill_comm"] == "deepep-normal"
    assert d["prefill_ranks_per_pass"] >= 1.0 and any(o["name"] == "prefill:prefill_attn_core" for o in d.ops)
    with pytest.raises(ConfigError, match="isl"):
        estimate("deepseek-v3", "h800", phase="mixed", ep=32)


def test_invalid_rows_masked_with_reasons(decode_df):
    df = decode_df
    bad = df[~df["valid"]]
    assert len(bad) > 0 and (bad["reason"] != "").all() and (df[df["valid"]]["reason"] == "").all()
    assert bad[["step_time_s", "tokens_per_s_per_gpu"]].isna().all().all()  # never evaluated
    assert not bad["fits"].any()
    r144 = df[(df["ep"] == 144) & (df["redundant"] == 0)]
    assert (~r144["valid"]).all() and r144["reason"].str.startswith("ep: must divide").all()
    assert df[(df["ep"] == 144) & (df["redundant"] == 32)]["valid"].all()
    assert df[df["valid"]][["step_time_s", "tokens_per_s_per_gpu"]].notna().all().all()
    # derived dp not a whole number; overlap that does not apply to the phase; tp not dividing heads
    d2 = sweep(hardware="h800", axes={"tp": [16, 3], "ep": [8]})
    assert not d2["valid"].any()
    assert d2["reason"].iloc[0].startswith("dp: ep x moe_tp must be a multiple of tp")
    d3 = sweep(
        hardware="h800",
        phase=["decode", "prefill"],
        axes={"ep": [32], "batch": [64], "overlap": ["five-stage"]},
        fill_defaults=False,
    )
    assert d3.set_index("phase").loc["decode", "valid"]
    pre = d3.set_index("phase").loc["prefill"]
    assert not pre["valid"] and "overlap" in pre["reason"]


def test_derive_ep_from_dp():
    df = sweep(hardware="h800", axes={"tp": [1, 2], "dp": [8, 16], "batch": [8]}, fill_defaults=False)
    assert list(df["ep"]) == [8, 16, 16, 32]
    assert df["valid"].all()


def test_one_axis_does_not_collapse_the_others():
    """The rule: an axis given replaces its default; the others keep the default space (ep is
    derived, not defaulted, when dp is given; a prefill-only sweep defaults batch to prefill tokens)."""
    df = sweep(hardware="h800", axes={"batch": [64]})
    assert set(df["batch"]) == {64}
    for axis, values in DEFAULT_AXES.items():
        if axis != "batch":
            assert set(df[axis]) == set(values), axis
    assert len(df) == np.prod([len(v) for k, v in DEFAULT_AXES.items() if k != "batch"])
    assert set(df["context"]) == {4096} and set(df["acceptance"]) == {0.8}  # workload: one value
    dp = sweep(hardware="h800", axes={"dp": [8], "tp": [1, 2], "batch": [8], "mtp": [0]})
    assert sorted(dp["ep"]) == [8, 8, 16, 16]  # ep derived from tp x dp (x redundant 0, 32)
    pre = sweep(hardware="h800", phase="prefill", axes={"ep": [32], "tp": [1]})
    assert set(pre["batch"]) == set(DEFAULT_PREFILL_BATCH) and set(pre["mtp"]) == {0}
    small = sweep(model="mixtral-8x7b", hardware="h200", axes={"ep": [8]})  # 8 experts: 32 slots out of bound
    assert set(small["redundant"]) == {0}
    one = sweep(hardware="h800", axes={"batch": [64]}, fill_defaults=False)
    assert len(one) == 1  # the API's opt-out: exactly the axes given


def test_chunking_and_progress_do_not_change_results():
    axes = {"tp": [1, 2], "ep": [16, 64, 144], "batch": "1:64", "redundant": [0, 32]}
    calls = []
    a = sweep(hardware="h800", axes=axes, chunk_size=5, progress=lambda d, t: calls.append((d, t)))
    b = sweep(hardware="h800", axes=axes)
    assert calls[-1][0] == calls[-1][1] == len(a)
    assert np.allclose(a["step_time_s"].to_numpy(float), b["step_time_s"].to_numpy(float), equal_nan=True)


def test_filters(decode_df):
    axes = {"tp": [1, 2, 8], "ep": [8, 32, 256], "batch": "1:256", "mtp": [1]}
    df = sweep(hardware="h800", axes=axes, min_tokens_per_s_per_user=40)
    v = df[df["valid"]]
    assert len(v) and (v["tokens_per_s_per_user"] >= 40).all()
    full = sweep(hardware="h800", axes=axes)
    assert len(df) < len(full)
    t = sweep(hardware="h800", axes=axes, filters={"max_tpot_s": 0.03, "only_fits": True})
    assert len(t) and (t["tpot_s"] <= 0.03).all() and t["fits"].all() and t["valid"].all()
    assert len(sweep(hardware="h800", axes=axes, keep_invalid=False, max_tpot_s=1e-9)) == 0
    # a TTFT filter does not drop decode rows (TTFT undefined there)
    assert len(sweep(hardware="h800", axes=axes, max_ttft_s=1e-9)) == len(full)
    with pytest.raises(ConfigError, match="unknown filter"):
        sweep(hardware="h800", axes=axes, filters={"max_latency": 1})


def test_parse_values():
    assert parse_values("batch", "1:256") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert parse_values("acceptance", "0:1:0.25") == [0, 0.25, 0.5, 0.75, 1.0]
    assert parse_values("ep", "8,16,32:128") == [8, 16, 32, 64, 128]
    assert parse_values("context", ["31.0e3"]) == [31000.0]  # YAML reads 31.0e3 as a string
    for bad in ("a", "8:1", "0:8", "1:2:0", "1:2:3:4"):
        with pytest.raises(ConfigError, match="batch"):
            parse_values("batch", bad)
    with pytest.raises(ConfigError, match="unknown axis 'bogus'"):
        sweep(axes={"bogus": [1]})


def test_study_yaml(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: t\nmodel: deepseek-v3\nhardware: h200\nphase: decode\n"
        "axes:\n  ep: [8]\n  tp: [1, 8]\n  batch: '1:4'\n  context: [5.0e3]\n  mtp: [1]\n"
        "filters:\n  only_fits: true\n"
    )
    kw = load_study(p)
    assert kw["axes"]["context"] == [5000.0]
    df = sweep(study=p)
    ref = sweep(
        hardware="h200",
        axes={"ep": [8], "tp": [1, 8], "batch": [1, 2, 4], "context": [5000], "mtp": [1], "redundant": [0, 32]},
        only_fits=True,
    )
    assert len(df) == 12 and np.allclose(df["step_time_s"], ref["step_time_s"])
    assert (sweep(study=p, hardware="h800")["hardware"] == "h800").all()  # explicit arguments win
    cases = {
        "bogus: 1\n": "unknown key 'bogus'",
        "axes:\n  width: [1]\n": "unknown axis 'width'",
        "axes: [1, 2]\n": "axes",
        "filters:\n  max_latency: 1\n": "unknown filter 'max_latency'",
        "axes:\n  ep: [eight]\n": "ep",
        "- 1\n- 2\n": "mapping",
        "axes: {ep: [8\n": "not valid YAML",
    }
    for text, needle in cases.items():
        p.write_text(text)
        with pytest.raises(ConfigError, match=needle) as e:
            sweep(study=p)
        assert "\n" not in str(e.value)
    with pytest.raises(MoesimError, match="study"):
        sweep(study=tmp_path / "missing.yaml")


def test_user_errors_raise():
    with pytest.raises(MoesimError, match="unknown hardware"):
        sweep(hardware="nope", axes={"ep": [8]})
    with pytest.raises(MoesimError, match="overlap"):
        sweep(axes={"ep": [8], "overlap": ["magic"]})
    with pytest.raises(ConfigError, match="isl"):
        sweep(phase="mixed", axes={"ep": [8]})


def test_package_exports_are_callable():
    import moesim.analyses.pareto  # noqa: F401  (the submodule import must not break the function export)
    import moesim.analyses.sweep  # noqa: F401

    df = moesim.sweep(hardware="h800", axes={"ep": [32, 64], "batch": [8, 64]})
    assert len(moesim.pareto(df)) >= 1


def test_disagg_rate_matching():
    from moesim.analyses.disagg import disagg

    r = disagg(
        hardware="h800",
        isl=4000,
        osl=1000,
        max_ttft_s=2.0,
        max_tpot_s=0.08,
        prefill_axes={"tp": [1], "ep": [16, 32], "batch": [8192, 16384]},
        decode_axes={"tp": [1, 2], "ep": [32, 64], "batch": [16, 64, 128], "mtp": [1]},
    )
    p, d = r.prefill, r.decode
    assert p["ttft_total_s"] <= 2.0 and d["tpot_s"] <= 0.08 and d["fits"]
    ratio = (d["tokens_per_s_per_gpu"] / 1000) / (p["tokens_per_s_per_gpu"] / 4000)
    assert r.ratio_prefill_per_decode_gpu == pytest.approx(ratio)
    assert r.system_tokens_per_s_per_gpu == pytest.approx(d["tokens_per_s_per_gpu"] / (1 + ratio))
    kv = r.kv_transfer
    assert kv["bytes_per_request"] == 4000 * 70272
    assert 0 < kv["decode_kv_share_of_step"] <= 1
    assert r.deployment["output_tokens_per_s_per_gpu"] <= r.system_tokens_per_s_per_gpu * (1 + 1e-9)
    assert r.aggregated is not None and r.speedup_vs_aggregated > 0
    json.dumps(r.to_dict())
    with pytest.raises(ConfigError, match="isl"):
        disagg(isl=0, osl=1, max_ttft_s=1, max_tpot_s=1)


def test_cli_sweep_pareto_disagg(tmp_path):
    out = tmp_path / "s.csv"
    p = run_cli(
        "sweep", "--hardware", "h200", "--ep", "8,16", "--tp", "1,8", "--batch", "1:8", "--top", "3", "--out", out
    )
    assert p.returncode == 0, p.stderr
    import pandas as pd

    assert len(pd.read_csv(out)) == 16 * 4  # x the default mtp (2), redundant (2)
    assert "tok/s/GPU" in p.stdout and "space: 64 configurations" in p.stdout
    png = tmp_path / "f.png"
    p = run_cli(
        "pareto",
        "--hardware",
        "h200,h100_sxm",
        "--ep",
        "8,128",
        "--batch",
        "1:16",
        "--group-by",
        "hardware,ep",
        "--per",
        "node",
        "--plot",
        png,
        "--json",
    )
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert rows and {"hardware", "ep", "tokens_per_s_per_node"} <= set(rows[0])
    assert png.stat().st_size > 1000
    p = run_cli(
        "disagg",
        "--isl",
        "2000",
        "--osl",
        "500",
        "--max-ttft",
        "2",
        "--max-tpot",
        "0.06",
        "--prefill-ep",
        "16",
        "--prefill-tp",
        "1",
        "--decode-ep",
        "32,64",
        "--decode-tp",
        "1",
        "--decode-batch",
        "16,64",
        "--mtp",
        "1",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["system_tokens_per_s_per_gpu"] > 0
    for args, needle in (
        (("sweep", "--ep", "8", "--out", tmp_path / "x.xlsx"), "--out"),
        (("sweep", "--batch", "4:1"), "batch"),
        (("pareto", "--per", "rack"), "--per"),
        (("estimate", "--phase", "mixed", "--isl", "100"), "osl"),
    ):
        p = run_cli(*args)
        assert p.returncode != 0 and "Traceback" not in p.stderr and needle in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


def test_parquet_needs_pyarrow(tmp_path):
    pytest.importorskip("pandas")
    try:
        import pyarrow  # noqa: F401

        pytest.skip("pyarrow installed")
    except ImportError:
        pass
    from moesim.cli.sweep import write_frame

    df = sweep(hardware="h800", axes={"ep": [32], "batch": [8]})
    with pytest.raises(ConfigError, match="pyarrow"):
        write_frame(df, tmp_path / "x.parquet")


def test_study_numeric_axes_are_the_grid_axes():
    """specs.study spells out the numeric axes (specs sit below grid); they must stay grid.core.AXES."""
    from moesim.grid.core import AXES
    from moesim.specs.study import NUMERIC_AXES

    assert NUMERIC_AXES == AXES
