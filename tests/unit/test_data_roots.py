"""Where moesim reads and writes its data (moesim/specs/data.py): the checkout, an installed wheel's
moesim/_data, and the user root ($MOESIM_DATA / ~/.local/share/moesim). Fast and in-process; the
real wheel is built and installed by test_packaging.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

import moesim
from moesim.perf.profile.reader import profile_path_for
from moesim.specs import catalog, load_model
from moesim.specs import data as D
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_user_env(monkeypatch):
    monkeypatch.delenv("MOESIM_DATA", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)


def test_a_checkout_reads_and_writes_its_own_folders(no_user_env):
    assert D.is_checkout()
    assert D.data_root() == ROOT
    assert D.user_root() is None
    assert D.data_roots() == [ROOT]
    assert D.write_root() == ROOT  # `calibrate run` keeps appending to calibration/measurements/
    assert D.find_data("models/deepseek_v3.yaml") == ROOT / "models" / "deepseek_v3.yaml"
    assert D.find_data("models/nope.yaml") is None


def test_moesim_data_adds_and_overrides_catalog_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("MOESIM_DATA", str(tmp_path))
    (tmp_path / "models").mkdir()
    spec = yaml.safe_load((ROOT / "models" / "deepseek_v3.yaml").read_text())
    spec["name"] = "my-moe"
    (tmp_path / "models" / "my_moe.yaml").write_text(yaml.safe_dump(spec))
    spec["name"] = "deepseek-v3-mine"
    (tmp_path / "models" / "deepseek_v3.yaml").write_text(yaml.safe_dump(spec))
    cat = catalog("models")
    assert cat["my-moe"] == tmp_path / "models" / "my_moe.yaml"  # added
    assert cat["deepseek-v3"] == tmp_path / "models" / "deepseek_v3.yaml"  # the user's wins
    assert cat["kimi-k2"] == ROOT / "models" / "kimi_k2.yaml"  # the shipped ones stay
    assert load_model("my-moe").name == "my-moe"
    assert D.write_root() == tmp_path
    p = run_cli("models")
    assert p.returncode == 0, p.stderr
    assert "my-moe" in p.stdout and "kimi-k2" in p.stdout


def test_moesim_data_profiles_are_read_first(tmp_path, monkeypatch):
    monkeypatch.setenv("MOESIM_DATA", str(tmp_path))
    assert profile_path_for("h800") == ROOT / "calibration" / "profiles" / "h800.yaml"
    prof = tmp_path / "calibration" / "profiles"
    prof.mkdir(parents=True)
    shutil.copy(ROOT / "calibration" / "profiles" / "h800.yaml", prof / "h800.yaml")
    assert profile_path_for("h800") == prof / "h800.yaml"
    # an engine profile anywhere beats a generic one: the shipped h800.sglang.yaml still prices sglang
    assert profile_path_for("h800", "sglang") == ROOT / "calibration" / "profiles" / "h800.sglang.yaml"


def test_an_installed_wheel_reads_its_package_data_and_writes_to_the_user_dir(tmp_path, monkeypatch, no_user_env):
    pkg = tmp_path / "site-packages" / "moesim"
    (pkg / "_data" / "models").mkdir(parents=True)
    monkeypatch.setattr(D, "_PACKAGE", pkg)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert not D.is_checkout()
    assert D.data_root() == pkg / "_data"
    assert D.user_root() == tmp_path / "home" / ".local" / "share" / "moesim"
    assert D.write_root() == D.user_root()  # never into site-packages
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert D.write_root() == tmp_path / "xdg" / "moesim"
    monkeypatch.setenv("MOESIM_DATA", str(tmp_path / "mine"))
    assert D.data_roots() == [tmp_path / "mine", pkg / "_data"]


def test_an_empty_catalog_names_the_folder_it_looked_in(tmp_path, monkeypatch, no_user_env):
    monkeypatch.setattr(D, "_PACKAGE", tmp_path / "moesim")  # no models/ beside it, no _data in it
    assert catalog("models") == {}
    p = run_cli("estimate", "--model", "deepseek-v3")
    assert p.returncode == 2
    assert f"catalog empty: no {tmp_path / 'models'} folder" in p.stderr


def test_version_flag_and_metadata_agree():
    p = run_cli("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"moesim {moesim.__version__} (")
    meta = (ROOT / "pyproject.toml").read_text()  # (tomllib is 3.11+; the package supports 3.10)
    assert re.search(r'^version = "(.+)"$', meta, re.M).group(1) == moesim.__version__
    assert re.search(r'^license = "Apache-2.0"$', meta, re.M)
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "aiconfigurator" in (ROOT / "NOTICE").read_text()


def test_imported_measurements_go_to_the_user_root_and_are_read_back(tmp_path, monkeypatch):
    from moesim.analyses.roofline import measurements_dir

    shipped = ROOT / "calibration" / "measurements" / "h800" / "gemm.csv"
    before = shipped.read_bytes()
    assert measurements_dir("h800") == shipped.parent
    monkeypatch.setenv("MOESIM_DATA", str(tmp_path))
    p = run_cli("calibrate", "import", "published", ROOT / "validation" / "published_figures.csv")
    assert p.returncode == 0, p.stderr
    mine = tmp_path / "calibration" / "measurements" / "h800"
    assert (mine / "gemm.csv").read_bytes() == before  # same extraction, written to the user root
    assert shipped.read_bytes() == before
    assert measurements_dir("h800") == mine  # `moesim roofline` draws the user's rows
    assert measurements_dir("b200") == ROOT / "calibration" / "measurements" / "b200"  # else the shipped ones
