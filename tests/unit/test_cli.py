import json
import subprocess
import sys

import pytest

from moesim.engine.settings import Pricing
from tests.conftest import ROOT, run_cli


@pytest.mark.slow
def test_help_imports_no_heavy_modules():
    code = (
        "import sys; from moesim.cli import app; import typer.testing as t; "
        "r = t.CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
        "bad = [m for m in ('torch', 'matplotlib', 'pandas') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ""


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--ep", "7"], "ep"),
        (["--batch", "0"], "batch"),
        (["--tp", "3", "--dp", "48"], "tp"),
        (["--model", "nope"], "unknown model"),
        (["--hardware", "nope"], "unknown hardware"),
        (["--set", "hardware.rdma_bw_GBps=-5"], "rdma_bw_GBps"),
        (["--set", "hardware.bogus=1"], "unknown key"),
        (["--set", "model.moe.top_k=999"], "top_k"),
        (["--cost-mode", "magic"], "cost_mode"),
        (["--acceptance", "1.5", "--mtp", "1"], "acceptance"),
    ],
)
def test_bad_input_one_line(args, needle):
    p = run_cli("estimate", *args)
    assert p.returncode != 0
    err = p.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert needle in err


def test_json_contract():
    p = run_cli(
        "estimate",
        "--ep",
        "144",
        "--dp",
        "144",
        "--redundant-experts",
        "32",
        "--batch",
        "88",
        "--context",
        "4989",
        "--mtp",
        "1",
        "--json",
        check=True,
    )
    d = json.loads(p.stdout)
    for k in (
        "step_time_s",
        "tpot_s",
        "tokens_per_s_per_user",
        "tokens_per_s_per_gpu",
        "bottleneck",
        "ops",
        "memory",
        "model_params",
        "active_params",
        "kv_bytes_per_token",
        "max_batch",
        "config",
        "moe_layer_time_s",
        "dense_layer_time_s",
    ):
        assert k in d, k
    for k in ("weights_bytes", "kv_cache_bytes", "total_bytes", "capacity_bytes", "fits"):
        assert k in d["memory"]
    assert {"name", "time_s", "bound", "provenance", "time_per_layer_s"} <= set(d["ops"][0])
    assert d["kv_bytes_per_token"] == 70272


def test_not_fitting_is_reported():
    p = run_cli("estimate", "--hardware", "h100_sxm", "--ep", "8", "--dp", "8", "--batch", "64", "--json", check=True)
    d = json.loads(p.stdout)
    assert d["memory"]["fits"] is False
    assert d["memory"]["total_bytes"] > d["memory"]["capacity_bytes"]
    t = run_cli("estimate", "--hardware", "h100_sxm", "--ep", "8", "--dp", "8", "--batch", "64", check=True)
    assert "DOES NOT FIT" in t.stdout


def test_catalog_lists():
    assert "deepseek-v3" in run_cli("models", check=True).stdout
    assert "h800" in run_cli("hardware", check=True).stdout


# ------------------------------------------------------------------ the one --out writer
def test_writer_is_atomic_and_keeps_the_old_file_on_failure(tmp_path):
    from moesim.errors import ConfigError
    from moesim.report.writer import atomic_write, write_json

    out = tmp_path / "r.json"
    write_json({"a": 1}, out)
    assert json.loads(out.read_text()) == {"a": 1} and out.read_text().endswith("\n")

    def boom(p):
        p.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(ConfigError, match=r"(?i)--out: cannot write .*No space left.*allowed: a writable file path"):
        atomic_write(out, boom, allowed="file path")
    assert json.loads(out.read_text()) == {"a": 1}  # the target is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary left behind


def test_writer_json_cleans_numpy_and_nonfinite():
    np = pytest.importorskip("numpy")
    from moesim.report.writer import json_text

    assert json.loads(json_text({"x": np.float64(1.5), "v": np.arange(2), "n": float("nan")})) == {
        "x": 1.5,
        "v": [0, 1],
        "n": None,
    }
    assert json_text({"b": np.bool_(True), "i": np.int64(3)}) == '{\n  "b": true,\n  "i": 3\n}'


def test_writer_frame_extensions(tmp_path):
    pd = pytest.importorskip("pandas")
    from moesim.errors import ConfigError
    from moesim.report.writer import write_frame

    df = pd.DataFrame({"a": [1, 2]})
    write_frame(df, tmp_path / "x.csv")
    assert (tmp_path / "x.csv").read_text() == "a\n1\n2\n"
    write_frame(df, tmp_path / "x.json")
    assert json.loads((tmp_path / "x.json").read_text()) == [{"a": 1}, {"a": 2}]
    with pytest.raises(ConfigError, match="unknown extension"):
        write_frame(df, tmp_path / "x.xlsx")


def test_shared_options_reach_the_command():
    """A block mounted with options.shared appears in the command's signature and arrives as one
    block instance (read by attribute or as a mapping)."""
    import inspect

    from moesim.cli import options as O

    seen = {}

    @O.shared("cfg", O.ConfigOptions)
    def cmd(cfg: O.ConfigOptions, extra: int = 3):
        seen.update(cfg=cfg, extra=extra)

    params = inspect.signature(cmd).parameters
    assert {"model", "tp", "set_", "extra"} <= set(params) and "cfg" not in params
    assert list(params)[: len(O.ConfigOptions._names())] == list(O.ConfigOptions._names())  # block first, in order
    cmd(**{n: p.default for n, p in params.items()})
    cfg = seen["cfg"]
    assert isinstance(cfg, O.ConfigOptions) and cfg.model == "deepseek-v3" and cfg.tp == 1 and seen["extra"] == 3
    assert cfg["tp"] == 1 and dict(cfg)["set_"] is None and len(cfg) == len(O.ConfigOptions._names())
    with pytest.raises(KeyError):
        cfg["nope"]
    p = O.ConfigOptions(cost_mode="roofline", engine="vllm").pricing(cuda_graphs=False)
    assert (p.cost_mode.value, p.engine.value, p.cuda_graphs) == ("roofline", "vllm", False)
    kw = O.estimate_kwargs({"set_": ["a=1"], "tp": 2, "cost_mode": "roofline"}, cuda_graphs=False)
    assert kw == {"set": ["a=1"], "tp": 2, "pricing": Pricing.of(cost_mode="roofline", cuda_graphs=False)}


def test_option_blocks_are_data():
    """Every command's option block is a frozen dataclass: a misspelt option is a TypeError, a field
    without a default is a required option, and the plain entry points take the block's keywords."""
    import dataclasses
    import inspect

    from moesim.cli import options as O
    from moesim.cli.disagg import DisaggOptions, disagg_cmd
    from moesim.cli.eplb import eplb_command

    with pytest.raises(TypeError):
        O.GridOptions(tpp="1,2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        O.GridOptions().tp = "1"  # type: ignore[misc]
    params = inspect.signature(disagg_cmd).parameters
    assert list(params) == list(DisaggOptions._names())
    assert {n for n, p in params.items() if p.default is inspect.Parameter.empty} == {
        "isl",
        "osl",
        "max_ttft",
        "max_tpot",
    }
    with pytest.raises(TypeError):
        eplb_command(echo=lambda s: None, expert=16)
    from moesim.cli.calibrate import run_kernel

    with pytest.raises(TypeError):
        run_kernel("gemm", device="cpu", threadz=1)  # the timing keywords are RunTiming's fields
