import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def seed_cases():
    data = yaml.safe_load((ROOT / "validation" / "seed_cases.yaml").read_text())
    return {c["id"]: c for c in data["cases"]}


def run_cli(*args, check=False):
    p = subprocess.run([sys.executable, "-m", "moesim.cli", *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    if check and p.returncode != 0:
        raise AssertionError(p.stderr)
    return p
