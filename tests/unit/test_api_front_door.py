"""The library's front door (issue 28, deliverable 7): typed public functions, keywords checked with
a message naming the function and the allowed names, `EstimateResult["tpot_s"]` a scalar, `dir(moesim)`
listing the API, `py.typed` shipped, `import moesim` light, `moesim.simulate(...)` callable."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import moesim
from moesim.errors import ConfigError, MoesimError

API = ("estimate", "sweep", "pareto", "plan", "simulate", "load_model", "load_hardware", "load_profile")


def test_a_misspelt_keyword_names_the_function_and_the_allowed_names():
    with pytest.raises(ConfigError) as e:
        moesim.estimate("deepseek-v3", "h800", batchh=8)
    msg = str(e.value)
    assert msg.startswith("moesim.estimate: unknown keyword 'batchh' (did you mean 'batch'?)")
    assert "allowed:" in msg and all(k in msg for k in ("batch", "context", "cost_mode", "engine", "tp"))
    assert isinstance(e.value, TypeError)  # also what Python raises for a keyword a function does not take


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: moesim.sweep("deepseek-v3", "h800", axis={"ep": [8]}), "moesim.sweep"),
        (lambda: moesim.pareto(None, groupby="hardware"), "moesim.pareto"),
        (lambda: moesim.plan("x.yaml", verfy=True), "moesim.plan"),
        (lambda: moesim.simulate(workload=None, replica=2), "moesim.simulate"),
        (lambda: moesim.load_model("deepseek-v3", override={}), "moesim.load_model"),
        (lambda: moesim.load_hardware("h800", overides={}), "moesim.load_hardware"),
        (lambda: moesim.load_profile("h800", engin="vllm"), "moesim.load_profile"),
    ],
)
def test_every_public_function_checks_its_keywords_before_running(call, name):
    with pytest.raises(ConfigError, match=rf"^{name}: unknown keyword .*; allowed: "):
        call()


def test_pricing_settings_are_checked_before_anything_runs():
    with pytest.raises(MoesimError, match="cost_mode"):
        moesim.estimate("deepseek-v3", "h800", cost_mode="fast")
    with pytest.raises(MoesimError, match="comm_sms"):
        moesim.sweep("deepseek-v3", "h800", comm_sms=1)


def test_pricing_object_and_keywords_price_alike():
    kw = dict(ep=8, dp=8, batch=16, context=2048)
    a = moesim.estimate("deepseek-v3", "h800", cost_mode="roofline", **kw)
    b = moesim.estimate("deepseek-v3", "h800", pricing=moesim.Pricing.of(cost_mode="roofline"), **kw)
    assert a.to_dict() == b.to_dict()


def test_estimate_result_item_is_a_scalar_and_the_rest_is_unchanged():
    r = moesim.estimate("deepseek-v3", "h800", ep=8, dp=8, batch=16, context=2048, cost_mode="roofline")
    t = r["tpot_s"]
    assert type(t) is float and t > 0
    assert t == float(r.values["tpot_s"][0])  # the arrays stay where they were
    assert isinstance(r["bottleneck"], str) and isinstance(r["fits"], bool)
    assert isinstance(r.to_dict()["tpot_s"], float)
    with pytest.raises(KeyError, match="tpot_ms.*allowed: .*tpot_s"):
        r["tpot_ms"]


def test_dir_lists_the_api():
    names = dir(moesim)
    assert set(API) | {"Pricing", "EstimateResult", "SimResult", "closed_loop", "__version__"} <= set(names)
    assert all(hasattr(moesim, n) for n in moesim.__all__)


def test_public_functions_are_annotated_and_documented():
    for n in API:
        fn = getattr(moesim, n)
        sig = inspect.signature(fn)
        assert sig.return_annotation is not inspect.Signature.empty, n
        assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()), n
        assert (inspect.getdoc(fn) or "").strip(), n


def test_py_typed_is_present_and_packaged():
    root = Path(moesim.__file__).parent
    assert (root / "py.typed").is_file()
    pyproject = (root.parent / "pyproject.toml").read_text()
    assert '"moesim" = ["py.typed"]' in pyproject


def test_import_moesim_is_light():
    code = (
        "import sys, moesim; print(' '.join(m for m in ('pandas', 'torch', 'matplotlib', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_simulate_is_the_package_and_the_front_door():
    import moesim.simulate.clients as C  # the package's modules stay importable by their dotted names

    w = C.closed_loop(2, 6, 500, 20)
    r = moesim.simulate("deepseek-v3", "h200", workload=w, tp=8, ep=8, cost_mode="roofline")
    assert r.summary["completed"] == 6 and r.config["cost_mode"] == "roofline"
    assert "workload" in inspect.signature(moesim.simulate).parameters
