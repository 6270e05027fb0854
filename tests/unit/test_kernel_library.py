"""`moesim kernel --op all_reduce|all_gather --library auto|nccl|custom` (moesim.perf.kernel.price_collective):
one library priced alone, the algorithm that priced it, the engine's custom -> NCCL switch size."""

import json

import numpy as np
import pytest

from moesim.engine.pricing import load_profile_for, resolve_specs
from moesim.engine.settings import Pricing
from moesim.enums import CostMode
from moesim.perf import collectives as C
from moesim.perf import kernel as K
from moesim.perf.cost import CostModel
from moesim.perf.profile.reader import load_profile
from moesim.workload.kernels import kernel_op
from tests.conftest import ROOT, run_cli

CAP = 16777216.0  # h200.sglang.yaml collectives.all_reduce.custom.SGLang_CustomAllReduce_graph.max_bytes
SMALL, LARGE = 1e6, 1e8  # below / above CAP


def _specs():
    return resolve_specs("deepseek-v3", "h200", None)


def _price(library, nbytes, gpus=8, mode=CostMode.CALIBRATED, op="all_reduce"):
    mdl, hw = _specs()
    prof = load_profile_for(hw, Pricing.of(cost_mode=mode, engine="sglang"))[0]
    engine_prof = load_profile_for(hw, Pricing.of(cost_mode=CostMode.CALIBRATED, engine="sglang"))[0]
    w = kernel_op(mdl, hw, op, gpus=gpus, nbytes=nbytes)
    return K.price_collective(w, mdl, hw, mode, prof, library, backends_profile=engine_prof, engine="sglang")


def _cli_json(*args):
    p = run_cli("kernel", "--op", "all_reduce", "-g", "h200", "--gpus", "8", *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_profile_cap_is_the_one_the_tests_assume():
    mdl, hw = _specs()
    prof = load_profile_for(hw, Pricing.of(cost_mode=CostMode.CALIBRATED, engine="sglang"))[0]
    assert K.custom_backends(prof, "all_reduce") == {"SGLang_CustomAllReduce_graph": CAP}
    assert K.custom_backends(prof, "all_gather") == {}


@pytest.mark.parametrize("mode", [CostMode.CALIBRATED, CostMode.ROOFLINE])
def test_auto_is_the_faster_below_the_custom_limit_and_nccl_above(mode):
    small = {lib: _price(lib, SMALL, mode=mode) for lib in ("auto", "nccl", "custom")}
    t = {lib: r["time_s"] for lib, r in small.items()}
    assert t["auto"] == min(t["nccl"], t["custom"])
    assert t["custom"] < 0.8 * t["nccl"]  # the flag matters: 1 MB on 8 H200s, custom well ahead of NCCL
    assert small["custom"]["algorithm"].startswith("custom ") and small["nccl"]["algorithm"].startswith("nccl ")
    assert small["auto"]["algorithm"] == small["custom"]["algorithm"]
    big_auto, big_nccl = _price("auto", LARGE, mode=mode), _price("nccl", LARGE, mode=mode)
    assert big_auto["time_s"] == big_nccl["time_s"] and big_auto["algorithm"] == big_nccl["algorithm"]
    assert big_auto["by_library"]["custom"]["error"].startswith("--library custom:")


@pytest.mark.parametrize("mode", [CostMode.CALIBRATED, CostMode.ROOFLINE])
@pytest.mark.parametrize(
    "gpus,nbytes,op",
    [
        (8, SMALL, "all_reduce"),
        (4, LARGE, "all_reduce"),
        (16, SMALL, "all_reduce"),
        (8, SMALL, "all_gather"),
        (16, SMALL, "all_gather"),
    ],
)
def test_auto_is_what_every_command_prices(mode, gpus, nbytes, op):
    """library auto = price_kernel (CostModel), in both paths (timed entry; roofline ring / one-shot)."""
    mdl, hw = _specs()
    prof = load_profile_for(hw, Pricing.of(cost_mode=mode, engine="sglang"))[0]
    w = kernel_op(mdl, hw, op, gpus=gpus, nbytes=nbytes)
    ref = K.price_kernel(w, mdl, hw, mode, prof)
    got = K.price_collective(w, mdl, hw, mode, prof, "auto")
    for k in ("time_s", "bytes", "roofline_time_s"):
        assert got[k] == pytest.approx(ref[k], rel=1e-12), k
    assert (got["bound"], got["provenance"]) == (ref["bound"], ref["provenance"])


def test_untimed_path_matches_cost_model_with_a_profile_without_collectives():
    """CostModel's ring / one-shot path at the achievable link (a profile with no collectives entry)."""
    mdl, hw = _specs()
    prof = load_profile(hw, path=ROOT / "calibration/profiles/h200.yaml")
    assert not K._timed(prof, "all_reduce")
    for gpus, nbytes in ((8, 1e4), (8, LARGE), (16, SMALL)):
        w = kernel_op(mdl, hw, "all_reduce", gpus=gpus, nbytes=nbytes)
        ref = float(np.ravel(CostModel(hw, mdl, CostMode.CALIBRATED, prof).cost(w).time_s)[0])
        assert K.price_collective(w, mdl, hw, CostMode.CALIBRATED, prof, "auto")["time_s"] == pytest.approx(
            ref, rel=1e-12
        )
    # no fitted collectives: the custom all-reduce's size limit is unknown, so custom is priced (one-shot) and said so
    w = kernel_op(mdl, hw, "all_reduce", gpus=8, nbytes=LARGE)
    r = K.price_collective(w, mdl, hw, CostMode.CALIBRATED, prof, "custom")
    assert r["custom_backends"] is None and r["algorithm"] == "custom one-shot"
    assert any("max_bytes unknown" in n for n in r["library_notes"])


def test_cli_json_fields_and_flag_is_read():
    auto, nccl, custom = (_cli_json("--bytes", "1e6", "--library", lib) for lib in ("auto", "nccl", "custom"))
    assert [r["library"] for r in (auto, nccl, custom)] == ["auto", "nccl", "custom"]
    assert nccl["time_s"] > auto["time_s"] == custom["time_s"]
    assert nccl["algorithm"] == "nccl LL128" and custom["algorithm"] in ("custom one-shot", "custom two-shot")
    assert auto["custom_backends"] == {"SGLang_CustomAllReduce_graph": CAP}
    assert auto["engine_switch_bytes"] == CAP and auto["engine_switch_reason"] == "max_bytes"
    assert auto["by_library"]["nccl"] == {"time_s": nccl["time_s"], "algorithm": "nccl LL128"}
    assert auto["by_library"]["custom"]["time_s"] == custom["time_s"]
    assert _cli_json("--bytes", "1e6") == auto  # the default is auto
    # the switch list: custom below the limit, NCCL from it on; custom's own list stops at its limit
    to_nccl = [s for s in auto["algorithm_switches"] if s["to"].startswith("nccl")]
    assert to_nccl[0]["bytes"] == CAP and to_nccl[0]["from"].startswith("custom")
    assert custom["switch_range_bytes"][1] == CAP
    assert all(s["to"].startswith("custom") for s in custom["algorithm_switches"])
    assert all(s["to"].startswith("nccl") for s in nccl["algorithm_switches"])


def test_switch_points_are_where_the_algorithm_changes():
    mdl, hw = _specs()
    prof = load_profile_for(hw, Pricing.of(cost_mode=CostMode.CALIBRATED, engine="sglang"))[0]
    w = kernel_op(mdl, hw, "all_reduce", gpus=8, nbytes=SMALL)
    sw = K.algorithm_switches(w, mdl, hw, CostMode.CALIBRATED, prof, "nccl")
    assert [s["to"] for s in sw] == ["nccl LL128", "nccl Simple", "nccl NVLS"]
    for s in sw:
        below, above = (
            K._library_times(K._sized(w, [s["bytes"] * f]), mdl, hw, CostMode.CALIBRATED, prof, "nccl")[2][0]
            for f in (1 - 1e-5, 1 + 1e-5)
        )
        assert (below, above) == (s["from"], s["to"])


def test_roofline_engine_switch_is_where_nccl_gets_faster():
    r = _price("auto", SMALL, mode=CostMode.ROOFLINE)
    x = r["engine_switch_bytes"]
    assert r["engine_switch_reason"] == "nccl faster" and 1e5 < x < CAP
    below, above = (
        {lib: _price(lib, x * f, mode=CostMode.ROOFLINE)["time_s"] for lib in ("nccl", "custom")} for f in (0.99, 1.01)
    )
    assert below["custom"] < below["nccl"] and above["custom"] > above["nccl"]
    assert any(n.startswith("roofline auto =") for n in r["library_notes"])
    assert _price("nccl", SMALL, mode=CostMode.ROOFLINE)["algorithm"] == "nccl ring"
    assert _price("custom", SMALL, mode=CostMode.ROOFLINE)["algorithm"] == "custom one-shot"


def test_multi_node_is_nccl_only():
    auto, nccl = _price("auto", SMALL, gpus=16), _price("nccl", SMALL, gpus=16)
    assert auto["time_s"] == nccl["time_s"] and auto["algorithm"].endswith(" + inter-node ring")
    assert auto["engine_switch_bytes"] is None
    assert "single-node" in auto["by_library"]["custom"]["error"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--op", "gemm", "--m", "64", "--n", "4096", "--k", "7168", "--library", "nccl"], "--library: only for --op"),
        (["--op", "all_reduce", "--gpus", "8", "--bytes", "1e6", "--library", "rccl"], "allowed: auto, nccl, custom"),
        (["--op", "all_reduce", "--gpus", "8", "--bytes", "1e8", "--library", "custom"], "max_bytes 16777216"),
        (["--op", "all_reduce", "--gpus", "16", "--bytes", "1e6", "--library", "custom"], "single-node"),
        (["--op", "all_gather", "--gpus", "8", "--bytes", "1e6", "--library", "custom"], "no custom all-gather"),
        (
            ["--op", "all_reduce", "--gpus", "8", "--bytes", "1e8", "--library", "custom", "--cost-mode", "roofline"],
            "max_bytes 16777216",
        ),
    ],
)
def test_bad_combinations_are_one_line_errors(args, needle):
    p = run_cli("kernel", "-g", "h200", *args)
    assert p.returncode != 0 and not p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_table_names_library_algorithm_and_switch():
    p = run_cli("kernel", "--op", "all_reduce", "-g", "h200", "--gpus", "8", "--bytes", "1e6", "--library", "nccl")
    assert p.returncode == 0, p.stderr
    assert "library nccl: nccl LL128" in p.stdout
    assert "engine switches custom -> NCCL at 16777216 B" in p.stdout
    r = run_cli(
        "kernel", "--op", "all_reduce", "-g", "h200", "--gpus", "8", "--bytes", "1e6", "--cost-mode", "roofline"
    )
    assert "note: roofline auto =" in r.stdout


def test_entry_choice_labels_and_custom_limit():
    e = {
        "model": C.NCCL_PROTO,
        "params": dict.fromkeys(["ll_us", "ll128_us", "simple_us"], 5.0)
        | dict.fromkeys(["ll_step_us", "ll128_step_us", "simple_step_us"], 1.0)
        | {"ll_bw_frac": 0.05, "ll128_bw_frac": 0.5, "simple_bw_frac": 0.9},
        "custom": {
            "x": {
                "model": C.CUSTOM_AR,
                "max_bytes": 1e6,
                "params": {"oneshot_us": 1.0, "oneshot_peer_us": 0.1, "oneshot_bw_frac": 0.7}
                | {"twoshot_us": 2.0, "twoshot_peer_us": 0.5, "twoshot_bw_frac": 0.85},
            }
        },
    }
    msg = np.array([1e3, 5e5, 2e6])
    ring = 2 * 7 / 8 * msg
    a, w, alg = C.collective_entry_choice(e, "all_reduce", 8, msg, ring, 4.5e11, "auto")
    assert list(alg) == ["custom one-shot", "custom two-shot", "nccl Simple"]
    ta, tw = C.collective_entry_terms(e, "all_reduce", 8, msg, ring, 4.5e11)
    assert np.array_equal(a, ta) and np.array_equal(w, tw)
    _, wc, algc = C.collective_entry_choice(e, "all_reduce", 8, msg, ring, 4.5e11, "custom")
    assert np.isinf(wc[2]) and np.isfinite(wc[:2]).all() and all(x.startswith("custom") for x in algc)
    an, wn, algn = C.collective_entry_choice(e, "all_reduce", 8, msg, ring, 4.5e11, "nccl")
    assert all(x.startswith("nccl") for x in algn) and (an + wn)[0] > (a + w)[0]
