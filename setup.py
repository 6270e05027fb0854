"""Build hook: a wheel carries the data moesim reads at run time as `moesim/_data/`.

Everything else is in pyproject.toml. In a checkout (and an editable install) moesim reads the data
folders beside the package (moesim/specs/data.py); an installed wheel reads the copy made here.
Measurement tables are left out except the kernel-level CSVs that `moesim validate` (kernel_rows) and
`moesim roofline` read: profiles carry their own measured tables, and the 7 MB of imported engine
tables (calibration/measurements/<gpu>/<engine>/) are fit inputs only.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# (folder, glob patterns) relative to the repository root, copied to moesim/_data/<folder>/
DATA = [
    ("models", ("*.yaml",)),
    ("hardware", ("*.yaml",)),
    ("calibration/profiles", ("*.yaml", "*.npz", "README.md")),
    ("calibration/measurements", ("README.md", "*/*.csv")),
    ("validation", ("*.yaml", "*.csv", "README.md")),
    ("balance", ("*.yaml",)),
    ("examples", ("*.yaml",)),
]


def data_files() -> list[Path]:
    """Every file of DATA, relative to the repository root."""
    return sorted({p.relative_to(ROOT) for folder, pats in DATA for pat in pats for p in (ROOT / folder).glob(pat)})


class BuildPyWithData(build_py):
    """build_py that also copies DATA under <build_lib>/moesim/_data (not in editable mode: an editable
    install reads the checkout's folders directly)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for rel in data_files():
            target = Path(self.build_lib) / "moesim" / "_data" / rel
            self.mkpath(str(target.parent))
            self.copy_file(str(ROOT / rel), str(target))


setup(cmdclass={"build_py": BuildPyWithData})
