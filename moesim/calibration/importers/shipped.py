"""Rebuild every shipped profile: the generic ones from the published kernel figures, then the
per-engine ones from the imported measurement rows, then the derived siblings.

  python -m moesim.calibration.importers.shipped [../shared/reference/published_figures.csv]

Generic (`rebuild`):

calibration/measurements/h800/*.csv, h100_sxm/pplx.csv   <- DG, FMLA, DEP, PPLXK rows
calibration/profiles/h800.yaml      GEMM, grouped GEMM (DeepGEMM), MLA peaks (FlashMLA), DeepEP LL + normal
calibration/profiles/h100_sxm.yaml  pplx dispatch/combine fitted; the rest inherited from h800
calibration/profiles/h200.yaml      everything inherited (no H200 measurement exists here)

Per engine (`rebuild_engines`), for every GPU and engine with rows:
calibration/measurements/<gpu>/<engine>/*.csv[.gz] (+ the GPU's own <gpu>/*.csv[.gz])
                                    -> calibration/profiles/<gpu>.<engine>.yaml, inheriting from <gpu>.yaml
calibration/profiles/h200.<engine>.yaml -> h100_sxm.<engine>.yaml, h800.<engine>.yaml (derived: same SM
                                    generation; moesim.calibration.fit.derive says what transfers)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from moesim.calibration import fit as F
from moesim.calibration.fit.derive import derive_file
from moesim.calibration.importers.published import extract
from moesim.enums import Engine
from moesim.errors import MoesimError
from moesim.specs.loader import data_root

ENGINE_GPUS = ("h200", "b200", "gb200_nvl72")  # GPUs with imported measured tables (issue 14)
DERIVED = {"h200": ("h100_sxm", "h800")}
REFERENCE_ENGINE = Engine.SGLANG.value  # fitted first: the donor of variants another engine's rows cannot give  # measured GPU -> siblings of its SM generation

NOTES = {
    "h800": (
        "No GPU was run for this profile: every H800 entry is a fit of published kernel measurements taken on "
        "DeepSeek's H800 SXM5 cluster (DeepGEMM, FlashMLA and DeepEP READMEs; rows and conversions in "
        "calibration/measurements/h800). Entries for kernels without such figures are derived, and say so."
    ),
    "h100_sxm": (
        "No GPU was run for this profile: pplx dispatch/combine are fits of the pplx-kernels README latencies "
        "(H100 cluster, NVLink 450 GB/s, CX7 IB); GEMM, grouped GEMM, MLA and DeepEP entries are inherited "
        "from the H800 fits - same GH100 SM count, HBM bandwidth and dense peaks, so the same efficiencies; "
        "DeepEP bandwidths as fractions of the nominal NVLink / RDMA bandwidth."
    ),
    "h200": (
        "No H200 GPU was available in this session: nothing was measured on an H200. Every entry is inherited "
        "from the Hopper fits (H800 DeepGEMM/FlashMLA/DeepEP rows, H100 pplx rows) and evaluated against the "
        "datasheet peaks and bandwidths of hardware/h200.yaml (4.8 TB/s HBM3e, NVLink 450 GB/s)."
    ),
}


def rebuild(reference: Path, root: Path | None = None) -> dict[str, dict]:
    root = Path(root) if root else data_root()
    meas = root / "calibration" / "measurements"
    prof = root / "calibration" / "profiles"
    extract(reference, meas)
    out = {}
    out["h800"] = F.fit(
        sorted((meas / "h800").glob("*.csv")), gpu="h800", out=prof / "h800.yaml", device_note=NOTES["h800"]
    )
    out["h100_sxm"] = F.fit(
        sorted((meas / "h100_sxm").glob("*.csv")),
        gpu="h100_sxm",
        out=prof / "h100_sxm.yaml",
        inherit=[prof / "h800.yaml"],
        device_note=NOTES["h100_sxm"],
    )
    out["h200"] = F.fit(
        [],
        gpu="h200",
        out=prof / "h200.yaml",
        inherit=[prof / "h800.yaml", prof / "h100_sxm.yaml"],
        device_note=NOTES["h200"],
    )
    return out


def _csvs(folder: Path) -> list[Path]:
    return sorted([*folder.glob("*.csv"), *folder.glob("*.csv.gz")])


def engine_note(gpu: str, engine: str) -> str:
    return (
        f"Fitted from the measured {engine} kernel tables of a {gpu} (calibration/measurements/{gpu}/{engine}; "
        f"each entry's source names the package, version, system, engine version and table); kernels those "
        f"tables do not cover are inherited from the generic {gpu}.yaml and say so."
    )


def rebuild_engines(root: Path | None = None, echo=print, failures: list | None = None) -> dict[str, dict]:
    """<gpu>.<engine>.yaml for every GPU / engine with measurement rows, then the derived siblings
    (a GPU or engine without rows is skipped and says so). A fit the rows break raises, or, with a
    `failures` list, is recorded there ("<gpu>.<engine>: <error>") and the others go on."""
    root = Path(root) if root else data_root()
    meas, prof = root / "calibration" / "measurements", root / "calibration" / "profiles"
    out = {}
    for gpu in ENGINE_GPUS:
        for engine in Engine:
            rows = _csvs(meas / gpu / engine.value)
            if not rows:
                echo(f"skip {gpu}.{engine.value}: no rows in {meas / gpu / engine.value}")
                continue
            try:
                out.update(_engine_profiles(gpu, engine.value, rows + _csvs(meas / gpu), prof))
            except MoesimError as e:
                if failures is None:
                    raise
                failures.append(f"{gpu}.{engine.value}: {e}")
                echo(f"FAILED {failures[-1]}")
    return out


def _engine_profiles(gpu: str, engine: str, rows: list[Path], prof: Path) -> dict[str, dict]:
    """Fit one GPU's engine profile (inheriting from its generic one), then derive its siblings."""
    generic, target = prof / f"{gpu}.yaml", prof / f"{gpu}.{engine}.yaml"
    # a kernel variant an engine's rows cannot give (host-bound rows) comes from the same GPU's
    # reference-engine profile running the same kernel (fit.profile.borrow_variants); fitted first
    donor = prof / f"{gpu}.{REFERENCE_ENGINE}.yaml"
    out = {
        f"{gpu}.{engine}": F.fit(
            rows,
            gpu=gpu,
            out=target,
            inherit=[generic] if generic.exists() else [],
            device_note=engine_note(gpu, engine),
            engine=engine,
            borrow=[donor] if engine != REFERENCE_ENGINE and donor.exists() else [],
        )
    }
    for sib in DERIVED.get(gpu, ()):
        out[f"{sib}.{engine}"] = derive_file(target, sib, out=prof / f"{sib}.{engine}.yaml")
    return out


def _print_cv(name: str, p: dict) -> None:
    for r in F.cv_table(p):
        p90 = r.get("p90_abs_pct")
        print(
            f"{name:20s} {r['kernel']:24s} rows {r['rows']:4d} folds {r['folds']:3d} median {r['median_abs_pct']:6.2f}%  "
            f"p90 {'-' if p90 is None else f'{p90:6.2f}%'}  max {r['max_abs_pct']:7.2f}%"
        )


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    ref = Path(sys.argv[1]) if len(sys.argv) > 1 else data_root() / "validation" / "published_figures.csv"
    for gpu, p in rebuild(ref).items():
        _print_cv(gpu, p)
    t0, failed = time.perf_counter(), []
    for name, p in rebuild_engines(failures=failed).items():
        _print_cv(name, p)
    print(f"engine profiles in {time.perf_counter() - t0:.1f} s" + (f"; {len(failed)} FAILED" if failed else ""))
    sys.exit(1 if failed else 0)
