"""The notebooks under notebooks/ execute top to bottom on CPU, each in under a minute, and are
committed without outputs."""

import time

import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LIMIT_S = 60.0
EXPECTED = {
    "01_why_ep144.ipynb",
    "02_nic_800g.ipynb",
    "03_mla_vs_gqa.ipynb",
    "04_calibrate_your_gpu.ipynb",
    "05_a_day_of_traffic.ipynb",
}


def test_the_five_studies_are_there():
    assert EXPECTED <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install -e '.[test]')")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip outputs before committing"
    kinds = [c.cell_type for c in nb.cells]
    assert kinds[0] == "markdown" and kinds[-1] == "markdown", f"{path.name}: question first, conclusion last"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install -e '.[test]')")
    nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (pip install -e '.[test]')")
    pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install -e '.[test]')")
    try:
        from jupyter_client.kernelspec import NoSuchKernel, get_kernel_spec

        get_kernel_spec("python3")
    except (ImportError, NoSuchKernel):  # pragma: no cover - depends on the environment
        pytest.skip("no python3 Jupyter kernel (python -m ipykernel install --user)")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=int(LIMIT_S), kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any failing cell
    took = time.perf_counter() - t0
    assert took < LIMIT_S, f"{path.name} took {took:.1f} s (limit {LIMIT_S:.0f} s)"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
