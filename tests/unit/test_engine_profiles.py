"""Per-engine profiles (issue 14 §2): the --engine option on every pricing command, profile
resolution <gpu>.<engine>.yaml -> <gpu>.yaml, derived sibling profiles (same SM generation only),
`calibrate show` provenance and the shipped-profile pipeline."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import yaml

import moesim
from moesim.calibration.fit.derive import derive_profile
from moesim.cli.app import app
from moesim.engine.settings import Pricing
from moesim.errors import CalibrationError, MoesimError
from moesim.perf.profile import Profile, load_profile, read_profile_file
from moesim.perf.profile import reader as R
from moesim.perf.profile.reader import profile_path_for
from moesim.specs.loader import data_root, load_hardware
from tests.conftest import run_cli

PROFILES = data_root() / "calibration" / "profiles"
PRICING_COMMANDS = ("estimate", "sweep", "pareto", "plan", "disagg", "kernel", "roofline", "timeline", "validate")


def _options(name: str) -> set:
    import typer.main

    group = typer.main.get_command(app)
    return {o for p in group.commands[name].params for o in getattr(p, "opts", [])}


# ---------------------------------------------------------------------------- the option
@pytest.mark.parametrize("name", PRICING_COMMANDS)
def test_every_pricing_command_takes_engine(name):
    assert "--engine" in _options(name)


def test_engine_option_parses_and_is_echoed():
    p = run_cli("estimate", "--engine", "trtllm", "--json")
    assert p.returncode == 0, p.stderr
    cfg = json.loads(p.stdout)["config"]
    assert cfg["engine"] == "trtllm" and cfg["profile"] == "calibration/profiles/h800.trtllm.yaml"


@pytest.mark.parametrize("cmd", [["estimate"], ["kernel", "--op", "gemm", "--m", "64", "--n", "7168", "--k", "2048"]])
def test_bad_engine_is_one_line_listing_the_engines(cmd):
    p = run_cli(*cmd, "--engine", "tensorrt")
    assert p.returncode == 2
    line = p.stderr.strip()
    assert "\n" not in line and "engine" in line
    for e in ("sglang", "trtllm", "vllm"):
        assert e in line


def test_api_engine_keyword_and_roofline_reads_no_profile():
    r = moesim.estimate("deepseek-v3", "h800", ep=8, dp=8, batch=16, engine="vllm")
    assert r.config["engine"] == "vllm"
    r = moesim.estimate("deepseek-v3", "h800", ep=8, dp=8, batch=16, cost_mode="roofline")
    assert r.config["engine"] == "sglang" and r.config["profile"] is None


def test_sweep_and_plan_name_the_engine():
    df = moesim.sweep("deepseek-v3", "h800", axes={"ep": [8], "batch": [8]}, engine="trtllm")
    assert set(df["engine"]) == {"trtllm"}
    traffic = data_root() / "examples" / "traffic_deepseek_day.yaml"
    d = moesim.plan(str(traffic), engine="trtllm").to_dict()
    assert d["engine"] == "trtllm" and d["profile"].endswith("h800.trtllm.yaml")


# ---------------------------------------------------------------------------- resolution
@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    """A data root with the generic h800 profile and a trtllm one whose GEMM is twice as slow."""
    prof = tmp_path / "calibration" / "profiles"
    prof.mkdir(parents=True)
    shutil.copy(PROFILES / "h800.yaml", prof / "h800.yaml")
    data = yaml.safe_load((PROFILES / "h800.yaml").read_text())
    data["engine"] = "trtllm"
    g = data["kernels"]["gemm"]["params"]
    g["eta_c"], g["eta_m"] = g["eta_c"] / 2, g["eta_m"] / 2
    (prof / "h800.trtllm.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setattr(R, "data_root", lambda: tmp_path)
    return tmp_path


def test_engine_profile_first_then_the_generic_one(tmp_root):
    prof = tmp_root / "calibration" / "profiles"
    assert profile_path_for("h800", "trtllm") == prof / "h800.trtllm.yaml"
    assert profile_path_for("h800", "sglang") == prof / "h800.yaml"  # no sglang profile: generic
    assert profile_path_for("h800") == prof / "h800.yaml"
    assert profile_path_for("h200", "trtllm") is None
    with pytest.raises(Exception, match="engine"):
        profile_path_for("h800", "nope")
    hw = load_hardware("h800")
    assert load_profile(hw, engine="trtllm").engine == "trtllm"
    assert load_profile(hw, engine="vllm").engine is None


def test_the_engine_profile_prices_the_kernels(tmp_root):
    kw = dict(op="gemm", m=4096, n=7168, k=2048)
    t = {}
    for eng in ("sglang", "trtllm"):
        p = run_cli("kernel", "--engine", eng, "--json", *[f"--{k}={v}" for k, v in kw.items()])
        assert p.returncode == 0, p.stderr
        d = json.loads(p.stdout)
        t[eng] = d["time_s"]
        assert d["engine"] == eng
    assert t["trtllm"] > 1.5 * t["sglang"]
    r = moesim.estimate("deepseek-v3", "h800", ep=8, dp=8, batch=64, engine="trtllm")
    assert r.config["profile"] == "calibration/profiles/h800.trtllm.yaml"


# ---------------------------------------------------------------------------- derived siblings
@pytest.fixture(scope="module")
def h200_source():
    return read_profile_file(PROFILES / "h200.yaml")


def test_derived_profile_keeps_efficiencies_and_takes_the_target_peaks(h200_source):
    h200, h100 = load_hardware("h200"), load_hardware("h100_sxm")
    d = derive_profile(h200_source, h200, h100)
    assert d["gpu"] == "h100_sxm" and d["derived_from"] == "h200"
    assert d["roofline"]["hbm_bw_GBps"] == h100.hbm_bw_GBps
    for fam, e in d["kernels"].items():
        assert e["status"] == "derived" and e["params"] == h200_source["kernels"][fam]["params"]
        assert "measurements" not in e and "transfer" in e
    # the same efficiencies against each GPU's own HBM: a memory-bound GEMM is slower on H100
    shape = dict(m=64, n=7168, k=2048)
    t200 = Profile(h200_source, hardware=h200).kernel_time("gemm", **shape)
    t100 = Profile(d, hardware=h100).kernel_time("gemm", **shape)
    assert t100 > 1.2 * t200
    # a what-if on the H100's HBM moves the derived profile's time
    slow = dataclasses.replace(h100, hbm_bw_GBps=h100.hbm_bw_GBps / 2)
    assert Profile(d, hardware=slow).kernel_time("gemm", **shape) > 1.5 * t100


def test_derived_comm_bandwidth_follows_the_target_links(h200_source):
    h200, h800 = load_hardware("h200"), load_hardware("h800")
    d = derive_profile(h200_source, h200, h800)
    _, _, nvl200 = Profile(h200_source, hardware=h200).comm_params("deepep-ll", "dispatch", 8)
    _, _, nvl800 = Profile(d, hardware=h800).comm_params("deepep-ll", "dispatch", 8)
    ratio = h800.nvlink_bw_GBps / h200.nvlink_bw_GBps  # H800: export-reduced NVLink
    assert float(nvl800) == pytest.approx(float(nvl200) * ratio, rel=1e-3)


def test_deriving_across_sm_generations_is_refused_unless_forced(h200_source):
    h200, b200 = load_hardware("h200"), load_hardware("b200")
    with pytest.raises(CalibrationError, match="sm90 -> sm100"):
        derive_profile(h200_source, h200, b200)
    d = derive_profile(h200_source, h200, b200, force=True)
    assert any("forced" in n for n in d["notes"])
    p = run_cli("calibrate", "derive", "--from", "h200.yaml", "--gpu", "b200", "--out", "/dev/null")
    assert p.returncode == 2 and "--force" in p.stderr


def test_hardware_sm_generation():
    gens = {n: load_hardware(n).sm_generation for n in ("h100_sxm", "h200", "h800", "h20", "b200", "a100")}
    assert gens == {"h100_sxm": 9, "h200": 9, "h800": 9, "h20": 9, "b200": 10, "a100": 8}


def test_cli_derive_writes_an_engine_sibling(tmp_path):
    src = tmp_path / "h200.sglang.yaml"
    data = read_profile_file(PROFILES / "h200.yaml")
    src.write_text(yaml.safe_dump({**data, "engine": "sglang"}, sort_keys=False))
    p = run_cli("calibrate", "derive", "--from", src, "--gpu", "h100_sxm")
    assert p.returncode == 0, p.stderr
    out = tmp_path / "h100_sxm.sglang.yaml"
    prof = load_profile(load_hardware("h100_sxm"), path=out)
    assert prof.engine == "sglang" and prof.provenance("gemm").startswith("derived:h800")


# ---------------------------------------------------------------------------- show
def test_show_lists_status_source_rows_and_cv(tmp_path):
    p = run_cli("calibrate", "show", "h800", "--json")
    assert p.returncode == 0, p.stderr
    show = json.loads(p.stdout)
    rows = {r["entry"]: r for r in show["entries"]}
    for key in ("status", "origin", "source", "rows", "cv_median_pct", "cv_p90_pct", "cv_max_pct"):
        assert key in rows["gemm"]
    assert rows["gemm"]["status"] == "fitted" and rows["gemm"]["rows"] > 0 and rows["gemm"]["source"] == "DG"
    assert rows["deepep-ll dispatch"]["cv_median_pct"] is not None
    # a family the profile does not cover is priced at roofline, and says so
    data = read_profile_file(PROFILES / "h800.yaml")
    del data["kernels"]["attention"]
    f = tmp_path / "h800.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    rows = {r["entry"]: r for r in json.loads(run_cli("calibrate", "show", f, "--json").stdout)["entries"]}
    assert rows["attention"]["status"] == "roofline"
    text = run_cli("calibrate", "show", "h200", "--engine", "sglang")
    assert text.returncode == 0 and "inherited" in text.stdout and "CV p90" in text.stdout


def test_show_names_the_aiconfigurator_table():
    from moesim.perf.profile.provenance import source_summary

    e = {"source": "12 rows: aiconfigurator-core 0.4.0 h200_sxm sglang 0.5.5 gemm_perf deep_gemm; more"}
    assert source_summary(e) == "aiconfigurator-core 0.4.0 h200_sxm sglang 0.5.5 gemm_perf"


# ---------------------------------------------------------------------------- fit + shipped pipeline
@pytest.mark.slow  # fits the published H800 GEMM rows twice (seconds)
def test_rebuild_engines_fits_then_derives(tmp_path):
    from moesim.calibration.importers import shipped

    meas = tmp_path / "calibration" / "measurements"
    (meas / "h200" / "sglang").mkdir(parents=True)
    # a synthetic fixture: the published GEMM rows stand in for an engine's table
    shutil.copy(
        data_root() / "calibration" / "measurements" / "h800" / "gemm.csv", meas / "h200" / "sglang" / "gemm.csv"
    )
    prof = tmp_path / "calibration" / "profiles"
    prof.mkdir(parents=True)
    shutil.copy(PROFILES / "h200.yaml", prof / "h200.yaml")
    lines: list = []
    out = shipped.rebuild_engines(tmp_path, echo=lines.append)
    assert set(out) == {"h200.sglang", "h100_sxm.sglang", "h800.sglang"}
    assert any("skip h200.trtllm" in x for x in lines) and any("skip b200" in x for x in lines)
    fitted = read_profile_file(prof / "h200.sglang.yaml")
    assert list(fitted)[:2] == ["schema_version", "gpu"] and fitted["engine"] == "sglang"
    assert fitted["kernels"]["gemm"]["status"] == "fitted"
    assert fitted["kernels"]["mla_decode"]["status"] == "inherited"  # from the generic h200.yaml
    sib = read_profile_file(prof / "h800.sglang.yaml")
    assert sib["engine"] == "sglang" and sib["kernels"]["gemm"]["status"] == "derived"
    assert sib["kernels"]["gemm"]["params"] == fitted["kernels"]["gemm"]["params"]


def test_validate_takes_an_engine():
    from moesim.analyses.validate.cases import validate

    checks = validate(ids={"pplx-combine-ep128-256-tokens"}, engine="trtllm")
    assert checks and all(c.metric != "error" for c in checks)
    with pytest.raises(Exception, match="engine"):
        validate(ids={"pplx-combine-ep128-256-tokens"}, engine="tgi")


@pytest.mark.slow  # fits the published H800 GEMM rows (seconds)
def test_cli_fit_engine_profile_inherits_from_the_gpu_generic_one(tmp_path):
    out = tmp_path / "h200.trtllm.yaml"
    gemm = data_root() / "calibration" / "measurements" / "h800" / "gemm.csv"  # synthetic stand-in rows
    p = run_cli("calibrate", "fit", gemm, "--gpu", "h200", "--engine", "trtllm", "--parent", "h200", "--out", out)
    assert p.returncode == 0, p.stderr
    prof = read_profile_file(out)
    assert prof["engine"] == "trtllm" and prof["kernels"]["gemm"]["status"] == "fitted"
    e = prof["kernels"]["mla_decode"]
    assert e["status"] == "inherited" and e["inherited_from"] == "h800" and e["via"] == "h200"


def test_rebuild_engines_records_a_broken_table_and_goes_on(tmp_path):
    from moesim.calibration.importers import shipped

    bad = tmp_path / "calibration" / "measurements" / "h200" / "vllm"
    bad.mkdir(parents=True)
    (bad / "gemm.csv").write_text("kernel,time_s\ngemm,not-a-number\n")
    (tmp_path / "calibration" / "profiles").mkdir(parents=True)
    with pytest.raises(MoesimError):
        shipped.rebuild_engines(tmp_path, echo=lambda _: None)
    failed: list = []
    assert shipped.rebuild_engines(tmp_path, echo=lambda _: None, failures=failed) == {}
    assert len(failed) == 1 and failed[0].startswith("h200.vllm:")


def test_derive_leaves_entries_that_name_their_measuring_links_alone(h200_source):
    data = json.loads(json.dumps(h200_source))
    e = data["comm"]["pplx"]["dispatch"]
    e["nominal"] = {"rdma_GBps": 50, "nvlink_GBps": 450}  # the reader rescales from these
    d = derive_profile(data, load_hardware("h200"), load_hardware("h800"))
    assert d["comm"]["pplx"]["dispatch"]["params"] == e["params"]
    assert d["comm"]["pplx"]["combine"]["params"] != data["comm"]["pplx"]["combine"]["params"]  # knots rescaled


# ---------------------------------------------------------------------------- the shipped engine profiles
@pytest.mark.parametrize("engine", ["sglang", "trtllm", "vllm"])
def test_shipped_engine_profiles_measured_on_h200_derived_for_h100_and_h800(engine):
    """h200.<engine>.yaml is fitted on the imported H200 tables; h100_sxm / h800 are derived from it
    and are what `--hardware h100_sxm --engine <engine>` prices with, residuals resolved."""
    src = read_profile_file(PROFILES / f"h200.{engine}.yaml")
    assert src["engine"] == engine and "aiconfigurator-core" in src["kernels"]["gemm"]["source"]
    for sib in ("h100_sxm", "h800"):
        assert profile_path_for(sib, engine) == PROFILES / f"{sib}.{engine}.yaml"
        d = read_profile_file(PROFILES / f"{sib}.{engine}.yaml")
        assert d["derived_from"] == "h200" and d["engine"] == engine
        assert all(e["status"] == "derived" for e in d["kernels"].values())
        hw = load_hardware(sib)
        prof = load_profile(hw, engine=engine)
        t = prof.kernel_time("gemm", m=64, n=7168, k=2048)  # a memory-bound FP8 GEMM: the target's HBM
        t200 = load_profile(load_hardware("h200"), engine=engine).kernel_time("gemm", m=64, n=7168, k=2048)
        assert t > t200  # 3.35 TB/s HBM against H200's 4.8


def test_a_variant_without_usable_rows_is_borrowed_from_the_reference_engine():
    """vLLM's block-FP8 GEMM rows are host-bound (excluded): its profile prices FP8 GEMMs with the
    same GPU's SGLang DeepGEMM variant, named as borrowed, its residual file resolved."""
    from moesim.calibration.fit.profile import borrow_variants

    mine = {"gemm": {"status": "fitted", "variants": [{"dtype": "bf16", "backend": "lin", "params": {}}]}}
    donor = {"gpu": "h200", "engine": "sglang", "kernels": {"gemm": {"variants": [
        {"dtype": "fp8_block", "backend": "dg", "params": {"a": 1}}, {"dtype": "bf16", "backend": "x", "params": {}}]}}}  # fmt: skip
    notes: list = []
    borrow_variants(mine, [donor], notes)
    vs = mine["gemm"]["variants"]
    assert [v["backend"] for v in vs] == ["lin", "dg"] and vs[1]["borrowed_from"] == "h200.sglang"
    assert notes and "borrowed" in notes[0]
    shipped = read_profile_file(PROFILES / "h200.vllm.yaml")["kernels"]["gemm"]["variants"]
    fp8 = [v for v in shipped if v["dtype"] == "fp8_block"]
    assert len(fp8) == 1 and fp8[0]["borrowed_from"] == "h200.sglang"
    hw = load_hardware("h200")
    t_v = load_profile(hw, engine="vllm").kernel_time("gemm", m=64, n=7168, k=2048, dtype="fp8")
    t_s = load_profile(hw, engine="sglang").kernel_time("gemm", m=64, n=7168, k=2048, dtype="fp8")
    assert float(t_v) == pytest.approx(float(t_s), rel=1e-9)  # the same DeepGEMM kernel, not the 80 us host time
    shown = run_cli("calibrate", "show", "h200", "--engine", "vllm")
    assert shown.returncode == 0 and "borrowed" in shown.stdout  # `calibrate show` prints the fit's notes


def test_call_time_fits_add_no_second_launch_and_ops_price_their_own_dtype():
    """Entries fitted on measured call times (alpha holds the launch gap) get no extra launch; a BF16
    op (the router) is priced with the BF16 variant, an FP8 GEMM with the FP8 one."""
    from moesim.api import load_profile_for, resolve_specs
    from moesim.enums import Dtype
    from moesim.perf.cost import CostModel
    from moesim.workload.ops import Operands
    from moesim.workload.ops import gemm as gemm_op

    m, h = resolve_specs("deepseek-v3", "h200")
    prof, _ = load_profile_for(h, Pricing.of(cost_mode="calibrated", engine="sglang"))
    assert prof.kernels["gemm"]["alpha_includes_launch"] and prof.launch_for("gemm") == 0.0
    assert prof.launch_for("elementwise") == prof.launch_s > 0  # not fitted on call times
    cm = CostModel(h, m, "calibrated", prof)
    for dt, nbytes in ((Dtype.FP8, 1.0), (Dtype.BF16, 2.0)):
        op = gemm_op("g", np.asarray([64.0]), 7168, 2048, Operands(w_bytes=nbytes, a_bytes=nbytes, dtype=dt))
        t = float(np.ravel(cm.cost(op).time_s)[0])
        assert t == pytest.approx(
            float(prof.kernel_time("gemm", m=64.0, n=7168, k=2048, dtype=dt.value)), rel=2e-3
        )  # op bytes include the block scales


def test_an_engine_without_deepep_tables_takes_the_reference_engines_deepep_fit():
    """DeepEP is one library whichever engine calls it: TRT-LLM's tables have no DeepEP rows, so its
    profile takes the same GPU's SGLang fit (named) where SGLang has one (low-latency), and for normal
    mode what SGLang's H200 profile takes: the H800 DeepEP README fit (aiconfigurator's H200 SGLang
    normal table is a relabelled H100 copy, refused: issue 27)."""
    p = read_profile_file(PROFILES / "h200.trtllm.yaml")
    ll = p["comm"]["deepep-ll"]["dispatch"]
    assert ll["model"] == "deepep_v2" and ll["inherited_from"] == "h200.sglang"
    sg = read_profile_file(PROFILES / "h200.sglang.yaml")["comm"]["deepep-normal"]["dispatch"]
    normal = p["comm"]["deepep-normal"]["dispatch"]
    assert normal["inherited_from"] == sg["inherited_from"] == "h800" and normal["params"] == sg["params"]
    d = read_profile_file(PROFILES / "h100_sxm.trtllm.yaml")["comm"]["deepep-ll"]["dispatch"]
    assert d["model"] == "deepep_v2" and d["status"] == "derived"
