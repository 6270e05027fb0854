"""The kernel-model registry: one module per profile entry model, named after it
(moesim/perf/models/<name>.py), holding its NAME, its PARAMS (allowed ranges, units, sources), its
time, the least-squares core of its fit where perf owns one (`fit`, taking the caller's optimiser) and
its `transfer` to a sibling GPU (moesim.perf.models.sibling). Kernel models (KERNEL) price a family's
kernel at a shape from the live hardware (KernelContext): sides / efficiency / time(ctx, family, entry,
shape). Comm and collective models (COMM, COLLECTIVE) declare their parameters here; their formulas
are moesim.perf.collectives'.

    model("waves_v1").time(ctx, "gemm", entry, {"m": m, "n": n, "k": k})

The reader (moesim.perf.profile.reader) and the schema (moesim.perf.profile.schema) find an entry's
model here; the fit (moesim.calibration.fit) calls a model's `fit` core with its own optimiser, and the
sibling derivation (moesim.calibration.fit.derive) its `transfer` (`transfer` below).
Adding a model: one module here, its name in one of the tuples below, and the profile entries'
data (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from types import ModuleType

KERNEL = ("overlap_v1", "peak", "waves_v1", "stream_v1", "mla_v2")
COMM = ("alpha_beta_max", "alpha_beta_by_ep", "deepep_v2")
COLLECTIVE = ("ring_alpha_beta", "nccl_proto", "custom_ar")
NAMES = KERNEL + COMM + COLLECTIVE
_LOADED: dict[str, ModuleType] = {}


def model(name: str) -> ModuleType:
    """The module of model `name` (KeyError naming the registered ones when unknown)."""
    mod = _LOADED.get(name)
    if mod is None:
        if name not in NAMES:
            raise KeyError(f"unknown profile model {name!r}; registered: {', '.join(NAMES)}")
        # imported on first use: moesim.perf.collectives imports the comm models' names, and the
        # kernel models import the work mappings that import it (no cycle through this package)
        mod = _LOADED[name] = importlib.import_module(f"{__name__}.{name}")
    return mod


def registry() -> dict[str, ModuleType]:
    """{name: module} of every registered model."""
    return {n: model(n) for n in NAMES}


def transfer(entry: dict, sib, name: str | None = None) -> None:
    """Carry a derived copy of `entry` over to a sibling GPU in place (sib: sibling.Sibling): its
    model's `transfer` (name: the entry's model, default entry["model"]); none without a model."""
    name = entry.get("model") if name is None else name
    if name is not None:
        model(name).transfer(entry, sib)
