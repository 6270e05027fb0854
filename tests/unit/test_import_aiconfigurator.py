"""aiconfigurator importer on a tiny fake `systems/` tree: mapping, units, exclusions, refusals.

No real aiconfigurator package is needed: the fixture writes small parquet files (pandas + pyarrow)
laid out as aiconfigurator-core ships them (systems/data/<system>/<family>/<engine>/<version>/).
"""

from __future__ import annotations

import gzip
import importlib.util

import pandas as pd
import pytest
import yaml

from moesim.calibration.importers import aiconfigurator as A
from moesim.calibration.records import COLUMNS, SIZE_COLUMNS, read_csv_rows, write_rows
from moesim.errors import CalibrationError

needs_pyarrow = pytest.mark.skipif(
    importlib.util.find_spec("pyarrow") is None, reason="parquet fixtures need pyarrow (the aiconfigurator extra)"
)
DEV = {"framework": "SGLang", "version": "0.5.14", "device": "NVIDIA H200"}


def _table(path, rows: list[dict], status="complete", extra=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{**(extra if extra is not None else DEV), **r} for r in rows]).to_parquet(path)
    meta = path.parent / "collection_meta.yaml"
    doc = yaml.safe_load(meta.read_text()) if meta.exists() else {"schema_version": 2, "tables": {}}
    doc["tables"][path.stem] = {"status": status, "collected_at": "2026-07-31"}
    meta.write_text(yaml.safe_dump(doc))


def _gemm(m, dtype, lat_ms, src="sglang_deepgemm"):
    return dict(op_name="gemm", kernel_source=src, gemm_dtype=dtype, m=m, n=2048, k=7168, latency=lat_ms)


def _moe(tokens, dtype, dist, lat_ms):
    return dict(
        op_name="moe", kernel_source="sglang_fused_moe_triton", moe_dtype=dtype, num_tokens=tokens,
        hidden_size=7168, inter_size=2048, topk=8, num_experts=256, moe_tp_size=1, moe_ep_size=8,
        distribution=dist, latency=lat_ms,
    )  # fmt: skip


def _deepep(d: dict) -> dict:
    base = dict(op_name="ll", kernel_source="deepep", node_num=2, hidden_size=7168, num_token=128, num_topk=8,
                num_experts=256)  # fmt: skip
    return {**base, **d}


@pytest.fixture
def systems(tmp_path):
    root = tmp_path / "systems"
    data = root / "data" / "h200_sxm"
    spec = {"gpu": {"sm_version": 90}, "node": {"num_gpus_per_node": 8}, "misc": {"nccl_version": "2.29.2"}}
    (root / "data").mkdir(parents=True)
    (root / "h200_sxm.yaml").write_text(yaml.safe_dump(spec))
    (root / "query_versions.yaml").write_text(yaml.safe_dump({"defaults": {"sglang": {"current": "0.5.14"}}}))
    _table(data / "gemm/sglang/0.5.14/gemm_perf.parquet", [_gemm(1, "fp8_block", 0.0123456789),
           _gemm(129, "bfloat16", 0.02), _gemm(1, "fp8", 0.01)])  # fmt: skip
    _table(data / "gemm/sglang/0.5.16/gemm_perf.parquet", [_gemm(1, "fp8_block", 9.0)])  # newer than the pin
    _table(data / "moe/sglang/0.5.14/moe_perf.parquet", [_moe(64, "fp8_block", "balanced", 0.1),
           _moe(64, "fp8_block", "power_law_1.2", 0.2), _moe(64, "int4_wo", "balanced", 0.3)])  # fmt: skip
    mla = dict(op_name="mla_generation", kernel_source="flash_attention", mla_dtype="bfloat16",
               kv_cache_dtype="fp8", num_heads=16, batch_size=4, isl=1, tp_size=8, step=1023, latency=0.05)  # fmt: skip
    _table(data / "mla/sglang/0.5.14/generation_mla_perf.parquet", [mla])
    ll = _deepep(dict(dispatch_avg_t_us=100.0, dispatch_bandwidth_gbps=90.0, combine_avg_t_us=150.0,
                      combine_bandwidth_gbps=95.0))  # fmt: skip
    _table(data / "comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet", [ll])
    normal = _deepep(dict(op_name="normal", dispatch_sms=24, dispatch_transmit_us=200.0, dispatch_notify_us=50.0,
                          combine_sms=24, combine_transmit_us=300.0, combine_notify_us=60.0))  # fmt: skip
    _table(data / "comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet", [normal], status="partial")
    _table(data / "comm/sglang/0.5.6.post2/wideep_deepep_normal_perf.parquet", [normal])
    nccl = [dict(op_name=op, kernel_source="NCCL", nccl_dtype=dt, num_gpus=8, message_size=1024, latency=0.02)
            for op in ("all_reduce", "alltoall") for dt in ("half", "int8")]  # fmt: skip
    _table(data / "comm/nccl/2.29.2/nccl_perf.parquet", nccl)
    car = [dict(op_name="all_reduce", kernel_source=f"SGLang_CustomAllReduce_{g}", allreduce_dtype="bfloat16",
                num_gpus=8, message_size=4096, latency=0.005) for g in ("graph", "eager")]  # fmt: skip
    _table(data / "comm/sglang/0.5.14/custom_allreduce_perf.parquet", car)
    (data / "kda/sglang/0.5.16").mkdir(parents=True)  # a family moesim does not model
    bad = data / "gemm/sglang/0.5.14"
    (bad / "silicon_sample.csv").write_text("never,read\n")
    (bad / "e2e_perf.parquet").write_bytes(b"not a parquet file: opening it would fail")
    e2e = data / "e2e/sglang/0.5.14"
    e2e.mkdir(parents=True)
    (e2e / "serving_perf.parquet").write_bytes(b"an end-to-end table: never opened")
    h100 = root / "data" / "h100_sxm" / "gemm/sglang/0.5.14"
    h100.mkdir(parents=True)
    (h100 / "gemm_perf.parquet").write_bytes(b"h100 is the validation set: never opened")
    (root / "h100_sxm.yaml").write_text(yaml.safe_dump(spec))
    return root


def _rows(out, name, engine="sglang"):
    return read_csv_rows(out / "h200" / engine / f"{name}.csv.gz")


@pytest.fixture
def imported(systems, tmp_path, monkeypatch):
    opened = []
    real = pd.read_parquet
    monkeypatch.setattr(pd, "read_parquet", lambda p, *a, **k: opened.append(str(p)) or real(p, *a, **k))
    out = tmp_path / "meas"
    summary = A.import_aiconfigurator("h200_sxm", "sglang", systems, out)
    return out, summary, opened


@needs_pyarrow
def test_gemm_and_moe_rows_units_and_filters(imported):
    out, summary, _ = imported
    gemm = _rows(out, "gemm_perf")
    assert [(r["dtype"], r["m"]) for r in gemm] == [("bf16", "129"), ("fp8_block", "1")]  # per-tensor fp8 dropped
    fp8 = gemm[1]
    assert float(fp8["time_s"]) == pytest.approx(1.235e-5, rel=1e-9)  # ms -> s, 4 significant digits
    assert (fp8["n"], fp8["k"], fp8["gpu"], fp8["backend"]) == ("2048", "7168", "h200", "sglang_deepgemm")
    assert fp8["source"] == "aiconfigurator-core unknown h200_sxm sglang 0.5.14 gemm_perf sglang_deepgemm"
    moe = _rows(out, "moe_perf")
    assert len(moe) == 1 and moe[0]["note"] == "balanced" and moe[0]["layout"] == "fused"
    assert (moe[0]["tokens"], moe[0]["n"], moe[0]["ep"], moe[0]["tp"]) == ("64", "2048", "8", "1")
    moe_file = next(f for f in summary.files if f["table"] == "moe_perf")
    assert moe_file["dropped"][A.T.SKEWED] == 1  # skewed routing rows are counted, not written


@needs_pyarrow
def test_mla_decode_context_is_isl_plus_step(imported):
    (r,) = _rows(imported[0], "generation_mla_perf")
    assert (r["kernel"], r["q_len"], r["context"], r["heads"], r["batch"], r["tp"]) == (
        "mla_decode", "1", "1024", "16", "4", "8")  # fmt: skip
    assert r["dtype"] == "fp8"


@needs_pyarrow
def test_deepep_rows_split_per_op_and_ep_from_nodes(imported):
    out, summary, _ = imported
    ll = {r["op"]: r for r in _rows(out, "wideep_deepep_ll_perf")}
    assert set(ll) == {"dispatch", "combine"} and ll["dispatch"]["ep"] == "16"  # 2 nodes x 8 GPUs
    assert float(ll["combine"]["time_s"]) == pytest.approx(150e-6) and ll["combine"]["GBps"] == "95"
    normal = {r["op"]: r for r in _rows(out, "wideep_deepep_normal_perf")}
    assert float(normal["dispatch"]["time_s"]) == pytest.approx(250e-6)  # transmit + notify
    assert normal["dispatch"]["sms"] == "24" and "notify_us 50" in normal["dispatch"]["note"]
    assert "0.5.6.post2" in normal["dispatch"]["source"]  # the partial 0.5.12 table was skipped ...
    assert any("partial collection (1 rows), skipped" in n for n in summary.notes)  # ... with a note


@needs_pyarrow
def test_nccl_bytes_and_custom_allreduce(imported):
    out = imported[0]
    nccl = {(r["kernel"], r["dtype"]): r for r in _rows(out, "nccl_perf")}
    assert nccl[("nccl_all_reduce", "fp16")]["bytes"] == "2048"  # message_size is elements
    assert nccl[("nccl_all_to_all", "int8")]["bytes"] == "1024"
    assert nccl[("nccl_all_reduce", "fp16")]["source"].startswith("aiconfigurator-core unknown h200_sxm nccl 2.29.2")
    car = {r["backend"]: r for r in _rows(out, "custom_allreduce_perf")}
    graph, eager = car["SGLang_CustomAllReduce_graph"], car["SGLang_CustomAllReduce_eager"]
    assert graph["kernel"] == "nccl_all_reduce" and graph["bytes"] == "8192" and graph["exclude"] == ""
    assert eager["exclude"].startswith("eager launch")


@needs_pyarrow
def test_pin_skipped_families_and_never_opened_files(imported):
    out, summary, opened = imported
    assert all("0.5.16" not in p for p in opened)  # newer than query_versions.yaml's pin
    assert not any("e2e" in p or "silicon_sample" in p or "h100" in p for p in opened)
    assert any(n.startswith("h200_sxm/kda/: skipped") for n in summary.notes)
    assert not (out / "h200" / "sglang" / "kda_perf.csv.gz").exists()


@needs_pyarrow
def test_reimport_is_byte_identical_and_replaces(systems, tmp_path):
    out = tmp_path / "meas"
    A.import_aiconfigurator("h200_sxm", "sglang", systems, out)
    stale = out / "h200" / "sglang" / "old_table_perf.csv.gz"
    write_rows(stale, [{"kernel": "gemm", "time_s": 1.0, "source": "x"}])
    files = sorted((out / "h200" / "sglang").glob("*.csv.gz"))
    before = {f.name: f.read_bytes() for f in files if f != stale}
    A.import_aiconfigurator("h200_sxm", "sglang", systems, out)
    after = {f.name: f.read_bytes() for f in sorted((out / "h200" / "sglang").glob("*.csv.gz"))}
    assert after == before  # same bytes (gzip mtime 0), the stale file removed


@needs_pyarrow
def test_failed_status_is_refused(systems, tmp_path):
    meta = systems / "data/h200_sxm/moe/sglang/0.5.14/collection_meta.yaml"
    doc = yaml.safe_load(meta.read_text())
    doc["tables"]["moe_perf"]["status"] = "failed"
    meta.write_text(yaml.safe_dump(doc))
    with pytest.raises(CalibrationError, match="status 'failed'"):
        A.import_aiconfigurator("h200_sxm", "sglang", systems, tmp_path / "meas")


def test_h100_is_refused_and_all_skips_it(systems, tmp_path):
    with pytest.raises(CalibrationError, match="out-of-sample validation"):
        A.import_aiconfigurator("h100_sxm", "all", systems, tmp_path / "meas")
    assert "h100_sxm" not in A.available(systems)


@needs_pyarrow
def test_all_systems_skips_pre_hopper_and_never_opens_h100(systems, tmp_path, monkeypatch):
    (systems / "a100_sxm.yaml").write_text(yaml.safe_dump({"gpu": {"sm_version": 80}}))
    (systems / "data" / "a100_sxm").mkdir()
    opened = []
    real = pd.read_parquet
    monkeypatch.setattr(pd, "read_parquet", lambda p, *a, **k: opened.append(str(p)) or real(p, *a, **k))
    summary = A.import_aiconfigurator("all", "sglang", systems, tmp_path / "meas")
    assert opened and not any("h100" in p for p in opened)
    assert any(n.startswith("a100_sxm: skipped") and "SM 80" in n for n in summary.notes)
    assert sorted(p.name for p in (tmp_path / "meas").iterdir()) == ["h200"]


def test_cli_error_without_data(monkeypatch, capsys):
    from moesim.cli.app import main

    monkeypatch.setattr(A.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "import", "aiconfigurator"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert 'pip install "moesim[aiconfigurator]"' in err and len(err.strip().splitlines()) == 1


def test_csv_gz_roundtrip_and_old_csv_without_tp(tmp_path):
    rows = [{"kernel": "gemm", "m": 64, "tp": 2, "time_s": 1.5e-5, "source": "s"}]
    a, b = tmp_path / "a.csv.gz", tmp_path / "b.csv.gz"
    write_rows(a, rows)
    write_rows(b, rows)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes()[:2] == b"\x1f\x8b"  # gzip, deterministic
    assert gzip.decompress(a.read_bytes()).decode().splitlines()[0] == ",".join(COLUMNS)
    assert read_csv_rows(a)[0]["tp"] == "2" and SIZE_COLUMNS[-1] == "tp"
    old = tmp_path / "old.csv"
    old_cols = [c for c in COLUMNS if c != "tp"]
    old.write_text(",".join(old_cols) + "\n" + ",".join("gemm" if c == "kernel" else "" for c in old_cols) + "\n")
    (r,) = read_csv_rows(old)
    assert r["kernel"] == "gemm" and r["tp"] == ""


def test_version_order():
    vs = ["1.3.0", "0.5.14", "1.3.0rc23", "0.5.6.post2", "0.5.9", "1.3.0rc10", "0.1.dev19262", "0.5.6"]
    assert sorted(vs, key=A.version_key) == [
        "0.1.dev19262", "0.5.6", "0.5.6.post2", "0.5.9", "0.5.14", "1.3.0rc10", "1.3.0rc23", "1.3.0"]  # fmt: skip


def test_host_bound_gemm_groups_are_excluded_with_the_reason():
    """A backend whose tiny GEMMs take > 20 us timed the host, not the kernel (vLLM's eager block-FP8
    linear on H200: 55-160 us); the group is kept, excluded, and the other backends are untouched."""
    import pandas as pd

    from moesim.calibration.importers.aiconfigurator_tables import mark_host_bound
    from moesim.calibration.records import COLUMNS

    rows = []
    for backend, dtype, floor in (
        ("eager_fp8", "fp8_block", 60e-6),
        ("deepgemm", "fp8_block", 3e-6),
        ("lin", "bf16", 2.5e-6),
    ):
        for m in (1, 8, 64, 4096):
            rows.append(
                dict(kernel="gemm", backend=backend, dtype=dtype, m=m, n=128, k=128, time_s=floor * (1 + m / 4096))
            )
    df = mark_host_bound(pd.DataFrame(rows).reindex(columns=COLUMNS).astype(object).fillna(""))
    bad = df.exclude != ""
    assert set(df[bad].backend) == {"eager_fp8"} and bad.sum() == 4
    assert "host-bound" in df[bad].exclude.iloc[0] and "60 us" in df[bad].exclude.iloc[0]


def test_host_bound_deepep_ll_groups_are_excluded_normal_mode_kept():
    """A DeepEP table whose LL phase takes > 40 us at <= 8 tokens per rank timed the host (vLLM's eager
    prepare / finalize: 50-92 us where SGLang's tables time the same kernels at 10-20 us); only that
    (backend, LL op) group is excluded: the kernel-level LL rows and normal mode are kept."""
    import pandas as pd

    from moesim.calibration.importers.aiconfigurator_tables import mark_host_bound_ll
    from moesim.calibration.records import COLUMNS

    rows = []
    for backend, mode, op, floor in (
        ("vllm_a2a", "ll", "combine", 60e-6),
        ("vllm_a2a", "ll", "dispatch", 12e-6),
        ("vllm_a2a", "normal", "dispatch", 250e-6),
        ("deepep", "ll", "combine", 11e-6),
    ):
        for t in (1, 4, 8, 128):
            rows.append(dict(kernel="deepep", backend=backend, mode=mode, op=op, tokens=t, time_s=floor * (1 + t / 64)))
    df = mark_host_bound_ll(pd.DataFrame(rows).reindex(columns=COLUMNS).astype(object).fillna(""))
    bad = df.exclude != ""
    assert (
        set(zip(df[bad]["backend"], df[bad]["mode"], df[bad]["op"])) == {("vllm_a2a", "ll", "combine")}
        and bad.sum() == 4
    )
    assert (
        "host-bound" in df[bad].exclude.iloc[0] and "64 us" in df[bad].exclude.iloc[0]
    )  # median of 60 x (1 + t / 64), t 1..8


# --- integrity (issue 27): tables naming another GPU, or copies of another system's table, are refused


def _normal_rows(scale=1.0):
    return [
        _deepep(dict(op_name="normal", num_token=t, dispatch_sms=24, dispatch_transmit_us=scale * (100.0 + t),
                     dispatch_notify_us=scale * (20.0 + t / 7), combine_sms=24, combine_transmit_us=scale * (150.0 + t),
                     combine_notify_us=scale * (30.0 + t / 3)))
        for t in (1, 16, 128, 1024)
    ]  # fmt: skip


def _write_normal(path, rows, device):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{**DEV, "device": d, **r} for r, d in zip(rows, device)]).to_parquet(path)


NORMAL = "comm/sglang/0.5.6.post2/wideep_deepep_normal_perf.parquet"


@pytest.fixture
def parquet_opened(monkeypatch):
    """Every path pandas or pyarrow parses during the test (byte reads are not parsing)."""
    import pyarrow.parquet as pq

    opened = []
    real_pd, real_file, real_table = pd.read_parquet, pq.ParquetFile, pq.read_table
    monkeypatch.setattr(pd, "read_parquet", lambda p, *a, **k: opened.append(str(p)) or real_pd(p, *a, **k))
    monkeypatch.setattr(pq, "ParquetFile", lambda p, *a, **k: opened.append(str(p)) or real_file(p, *a, **k))
    monkeypatch.setattr(pq, "read_table", lambda p, *a, **k: opened.append(str(p)) or real_table(p, *a, **k))
    return opened


@needs_pyarrow
def test_rows_naming_another_gpu_refuse_the_table(systems, tmp_path):
    rows = _normal_rows()
    _write_normal(
        systems / "data/h200_sxm" / NORMAL, rows, ["NVIDIA H200", "NVIDIA H100", "NVIDIA H200", "NVIDIA H100"]
    )
    out = tmp_path / "meas"
    stale = out / "h200" / "sglang" / "wideep_deepep_normal_perf.csv.gz"  # the earlier import of that table
    write_rows(stale, [{"kernel": "deepep", "mode": "normal", "time_s": 1e-4, "source": "x"}])
    summary = A.import_aiconfigurator("h200_sxm", "sglang", systems, out)
    assert not stale.exists()  # refused: not written, and the earlier copy removed
    assert len(_rows(out, "wideep_deepep_ll_perf")) == 2  # the rest of the import goes on
    (why,) = summary.refused
    assert why.startswith("h200_sxm/comm/sglang/0.5.6.post2/wideep_deepep_normal_perf.parquet: not imported")
    assert "2 of 4 rows name the device 'NVIDIA H100'" in why and "H200" in why and "rows 2, 4" in why
    assert any(line.startswith("REFUSED: h200_sxm/comm/sglang") for line in summary.lines())


@needs_pyarrow
def test_a_byte_copy_of_another_systems_table_is_refused_without_parsing_it(systems, tmp_path, parquet_opened):
    mine = systems / "data/h200_sxm" / NORMAL
    h100 = systems / "data/h100_sxm" / NORMAL
    h100.parent.mkdir(parents=True, exist_ok=True)
    h100.write_bytes(mine.read_bytes())  # the same file filed under both systems
    summary = A.import_aiconfigurator("h200_sxm", "sglang", systems, tmp_path / "meas")
    (why,) = summary.refused
    assert "byte-identical to h100_sxm/comm/sglang/0.5.6.post2/wideep_deepep_normal_perf.parquet" in why
    assert not (tmp_path / "meas/h200/sglang/wideep_deepep_normal_perf.csv.gz").exists()
    assert parquet_opened and not any("h100" in p for p in parquet_opened)  # compared as bytes, never parsed


@needs_pyarrow
def test_a_relabelled_copy_is_refused_by_its_measured_columns(systems, tmp_path, parquet_opened):
    """Device names rewritten (so the file hash differs) but every measured column the other
    system's: the measured column chunks occur verbatim in the other file's bytes."""
    rows = _normal_rows()
    _write_normal(systems / "data/h200_sxm" / NORMAL, rows, ["NVIDIA H200"] * 4)
    _write_normal(systems / "data/h100_sxm" / NORMAL, rows, ["NVIDIA H100"] * 4)
    assert (systems / "data/h200_sxm" / NORMAL).read_bytes() != (systems / "data/h100_sxm" / NORMAL).read_bytes()
    summary = A.import_aiconfigurator("h200_sxm", "sglang", systems, tmp_path / "meas")
    (why,) = summary.refused
    assert "measured columns (combine_notify_us, combine_transmit_us, dispatch_notify_us, dispatch_transmit_us)" in why
    assert "h100_sxm/comm/sglang/0.5.6.post2/wideep_deepep_normal_perf.parquet" in why
    assert not any("h100" in p for p in parquet_opened)


@needs_pyarrow
def test_same_shapes_other_timings_on_another_system_are_imported(systems, tmp_path):
    """Another system's table of the same shape sweep (same num_token, hidden, ... columns) but its own
    timings is no copy: the table is imported and nothing is refused."""
    rows = _normal_rows()
    _write_normal(systems / "data/h200_sxm" / NORMAL, rows, ["NVIDIA H200"] * 4)
    _write_normal(systems / "data/b200_sxm" / NORMAL, _normal_rows(scale=0.7), ["NVIDIA B200"] * 4)
    summary = A.import_aiconfigurator("h200_sxm", "sglang", systems, tmp_path / "meas")
    assert summary.refused == []
    assert len(_rows(tmp_path / "meas", "wideep_deepep_normal_perf")) == 8


def test_gpu_model_names():
    from moesim.calibration.importers.aiconfigurator_integrity import models_in, system_model

    assert [system_model(s) for s in ("h200_sxm", "gb200", "b200_sxm", "l40s")] == ["H200", "GB200", "B200", "L40S"]
    assert models_in("NVIDIA H100 80GB HBM3") == ["H100"] and models_in("NVIDIA GB200") == ["GB200"]
    assert models_in("") == [] and "B200" not in models_in("NVIDIA GB200")
