"""Rebuild the shipped measurement CSVs and profiles from the published kernel figures.

  python -m moesim.calibration.importers.shipped [../shared/reference/published_figures.csv]

calibration/measurements/h800/*.csv, h100_sxm/pplx.csv   <- DG, FMLA, DEP, PPLXK rows
calibration/profiles/h800.yaml      GEMM, grouped GEMM (DeepGEMM), MLA peaks (FlashMLA), DeepEP LL + normal
calibration/profiles/h100_sxm.yaml  pplx dispatch/combine fitted; the rest inherited from h800
calibration/profiles/h200.yaml      everything inherited (no H200 measurement exists here)
"""

from __future__ import annotations

import sys
from pathlib import Path

from moesim.calibration import fit as F
from moesim.calibration.importers.published import extract
from moesim.specs.loader import data_root

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


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    ref = Path(sys.argv[1]) if len(sys.argv) > 1 else data_root() / "validation" / "published_figures.csv"
    for gpu, p in rebuild(ref).items():
        for r in F.cv_table(p):
            print(
                f"{gpu:9s} {r['kernel']:24s} rows {r['rows']:3d} folds {r['folds']:3d} "
                f"median {r['median_abs_pct']:6.2f}%  max {r['max_abs_pct']:7.2f}%"
            )
