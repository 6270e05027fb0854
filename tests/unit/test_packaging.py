"""A plain (non-editable) install works: build the wheel, install it into a fresh venv, run it from
a directory that is not the checkout (issue 16: `pip install .` used to give an empty catalog).

Offline: the wheel is built with the running interpreter's setuptools (--no-build-isolation) and the
venv sees this interpreter's packages (--system-site-packages) for the dependencies."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import moesim
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".git", "tests", "notebooks", "bench", "docs", "build", "dist", "out", ".venv", ".hypothesis"}
ESTIMATE = ["estimate", "--model", "deepseek-v3", "--hardware", "h800", "--ep", "16", "--dp", "16", "--batch", "64"]
MAX_WHEEL_BYTES = 12e6  # profiles + residuals ~9 MB uncompressed; the 7 MB of engine tables stay out

pytestmark = pytest.mark.slow  # venv + wheel build: ~10 s


def _ignore(folder, names):
    top = Path(folder) == ROOT
    return [n for n in names if (top and n in SKIP) or n == "__pycache__" or n.endswith(".egg-info")]


def _setuptools_major() -> int:
    try:
        import setuptools
    except ImportError:
        return 0
    return int(setuptools.__version__.split(".")[0])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the source tree (the checkout gets no build/ or egg-info)."""
    if _setuptools_major() < 77:  # pyproject's build-system needs it; offline, pip cannot fetch it
        pytest.skip("building the wheel offline needs setuptools>=77 in this environment")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_ignore)
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-w", str(tmp)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (whl,) = tmp.glob("moesim-*.whl")
    return whl


def test_the_wheel_carries_what_the_runtime_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = "moesim/_data/"
    for need in (
        "models/deepseek_v3.yaml",
        "hardware/h800.yaml",
        "calibration/profiles/h200.sglang.yaml",
        "calibration/profiles/h200.sglang.residuals.npz",
        "calibration/measurements/h800/gemm.csv",  # `validate` kernel_rows
        "validation/seed_cases.yaml",
        "balance/expert_popularity.yaml",
        "examples/traffic_deepseek_day.yaml",
    ):
        assert data + need in names, need
    assert "moesim/py.typed" in names  # PEP 561: the annotations are usable
    assert not [n for n in names if n.endswith(".csv.gz")]  # imported engine tables: fit inputs only
    assert {f"moesim-{moesim.__version__}.dist-info/licenses/{f}" for f in ("LICENSE", "NOTICE")} <= names
    assert wheel.stat().st_size < MAX_WHEEL_BYTES


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp / "v")], check=True, timeout=120)
    py = tmp / "v" / "bin" / "python"
    if sys.prefix != sys.base_prefix:  # this interpreter is a venv: --system-site-packages shows its base, not it
        child = subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # after the child's own site-packages (the wheel's moesim first); a .pth line's own .pth files are not
        # read, so this venv's editable moesim stays out
        (Path(child) / "_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    p = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return tmp / "v"


def _moesim(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MOESIM_DATA", "XDG_DATA_HOME")}
    env["HOME"] = str(cwd / "home")
    return subprocess.run(
        [str(venv / "bin" / "moesim"), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_the_installed_wheel_runs_from_anywhere(venv, tmp_path):
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "moesim"
    p = _moesim(venv, tmp_path, "--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"moesim {moesim.__version__} ({site})"  # the venv's copy, not the checkout
    p = _moesim(venv, tmp_path, "models")
    assert p.returncode == 0, p.stderr
    assert "deepseek-v3" in p.stdout and "kimi-k2" in p.stdout
    p = _moesim(venv, tmp_path, *ESTIMATE, "--json")
    assert p.returncode == 0, p.stderr
    here = run_cli(*ESTIMATE, "--json", check=True)  # the checkout's answer: same data, same numbers
    assert json.loads(p.stdout)["step_time_s"] == json.loads(here.stdout)["step_time_s"]


def test_the_installed_wheel_reads_user_catalogs(venv, tmp_path):
    user = tmp_path / "home" / ".local" / "share" / "moesim" / "hardware"
    user.mkdir(parents=True)
    (user / "my_gpu.yaml").write_text((ROOT / "hardware" / "h800.yaml").read_text().replace("h800", "my-gpu"))
    p = _moesim(venv, tmp_path, "hardware")
    assert p.returncode == 0, p.stderr
    assert "my-gpu" in p.stdout and "h200" in p.stdout


def test_the_installed_wheel_writes_parquet(wheel, venv, tmp_path):
    """pyarrow is a core dependency (issue 16 part 5): a plain install writes .parquet and .csv."""
    meta = zipfile.ZipFile(wheel).read(f"moesim-{moesim.__version__}.dist-info/METADATA").decode()
    assert any(ln.startswith("Requires-Dist: pyarrow") for ln in meta.splitlines())
    pd = pytest.importorskip("pandas")
    for suf in (".parquet", ".csv"):
        out = tmp_path / f"s{suf}"
        p = _moesim(venv, tmp_path, "sweep", "--ep", "8,16", "--batch", "1,8", "--top", "1", "--out", str(out))
        assert p.returncode == 0, p.stderr
        back = pd.read_parquet(out) if suf == ".parquet" else pd.read_csv(out)
        assert len(back) > 0 and back.columns[0] == "model"
