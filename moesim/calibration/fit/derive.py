"""Derived sibling profiles: "calibrate one GPU, predict its siblings".

A profile measured on one GPU (e.g. calibration/profiles/h200.sglang.yaml) becomes the profile of
another GPU of the same SM generation (h100_sxm.sglang.yaml, h800.sglang.yaml): every entry is
carried over with status `derived`, `derived_from: <source gpu>` and a `transfer` note.

What transfers and why (same SM architecture, same clocks, same tensor-core and TMA pipelines):
    efficiencies (eta_c, eta_m: fractions of a peak), fixed per-call latencies (alpha, t0, launch),
    tile / wave constants, the fits' shape parameters.
What comes from the target's hardware spec (hardware/<gpu>.yaml), read LIVE by the profile reader
(moesim.perf.profile.reader): dense FLOP/s peaks, HBM bandwidth, SM count, NVLink and NIC bandwidth
(comm bandwidths as fractions of the nominal link: `*_frac_nominal`).
Raw measured tables (`measurements`, used by the `measured` cost mode) are the source GPU's own
times and are dropped. The measured residual ratios (`residual` blocks: measurement / physics at each
measured shape, moesim.perf.profile.residual) transfer like the efficiencies: they are how far the
kernel runs from its physics at a shape (tile configs, kernel switches), a property of the kernel and
the SM, multiplied onto the TARGET's physics (its own peaks and bandwidths); the side-car file is the
source's, next to the derived profile. The reader applies them to every entry whose fit is its own
(moesim.perf.profile.provenance.fit_status: `derived_status` is the source entry's status), not to a
family priced with another family's fit (bmm from gemm). Measured check on two measured siblings
(B200 <-> GB200, moesim.calibration.sibling; docs/calibration.md): MoE variants 17-30 % median
without the residuals, 2-4 % with them. Not transferable by this rule: a host-paced alpha (vLLM's
eager DeepEP normal loop; the host CPU is no GPU spec) and terms fitted at one EP only. Deriving across SM generations (Hopper sm90 -> Blackwell sm100) is
refused unless forced: the efficiencies of another micro-architecture are not these.
"""

from __future__ import annotations

import copy
import datetime as _dt
from pathlib import Path

from moesim.calibration.fit.peaks import Peaks
from moesim.calibration.fit.profile import WRITER_HINT, write_profile
from moesim.errors import CalibrationError
from moesim.perf.profile import schema as S
from moesim.perf.profile.reader import read_profile_file
from moesim.specs.loader import load_hardware

TRANSFERS = "efficiencies, fixed latencies (alpha, t0, launch), tile and wave constants, measured residual ratios"
FROM_SPEC = "dense FLOP/s peaks, HBM bandwidth, SM count, NVLink and NIC bandwidth"
DROPPED = ("residuals", "measurements")  # the source GPU's own times: not the target's


def check_generation(source_hw, target_hw, force: bool = False) -> None:
    """Refuse a derivation across SM generations (or with an unknown one) unless `force`."""
    gs, gt = source_hw.sm_generation, target_hw.sm_generation
    if force or (gs == gt and gs > 0):
        return
    what = (
        "unknown SM version (hardware sm_version: 0)"
        if 0 in (gs, gt)
        else f"different SM generations (sm{source_hw.sm_version} -> sm{target_hw.sm_version})"
    )
    raise CalibrationError(
        f"derive {source_hw.name} -> {target_hw.name}: {what}; efficiencies transfer only within one SM "
        "generation; allowed: a target with the source's sm_version, or --force"
    )


def _transfer_note(src: str, tgt: str, sm: int) -> str:
    return (
        f"from {src} (same SM generation sm{sm}, same clocks): {TRANSFERS}; "
        f"from hardware/{tgt}.yaml (read live): {FROM_SPEC}"
    )


def _relative_bandwidths(p: dict, nominal: dict) -> None:
    """Absolute fitted link bandwidths -> fractions of the source's nominal link (the reader then
    scales them by the target's nominal link); per-EP knot lists are scaled at derive time."""
    for link in ("rdma", "nvlink"):
        key, frac = f"{link}_GBps", f"{link}_frac_nominal"
        v, nom = p.get(key), nominal.get(link, 0.0)
        if isinstance(v, (int, float)) and p.get(frac) is None and nom > 0:
            p[frac] = S.round_sig(min(float(v) * 1e9 / nom, 1.0))


def _scale_knots(p: dict, src_nom: dict, tgt_nom: dict) -> None:
    for link in ("rdma", "nvlink"):
        v = p.get(f"{link}_GBps")
        if isinstance(v, list) and src_nom.get(link, 0) > 0 and tgt_nom.get(link, 0) > 0:
            r = tgt_nom[link] / src_nom[link]
            p[f"{link}_GBps"] = [None if x is None else S.round_sig(float(x) * r) for x in v]


def derive_entry(e: dict, src: str, tgt: str, note: str) -> dict:
    """One entry of the source profile as the target's: status derived, provenance kept."""
    out = copy.deepcopy({k: v for k, v in e.items() if k not in DROPPED})
    out["derived_status"] = e.get("status", "fitted")
    out["status"] = "derived"
    out["derived_from"] = e.get("inherited_from") if e.get("status") == "inherited" else src
    out["gpu"] = tgt
    out["transfer"] = note
    return out


def derive_profile(source: dict, source_hw, target_hw, force: bool = False) -> dict:
    """The target GPU's profile from a profile measured on `source_hw` (see the module doc)."""
    check_generation(source_hw, target_hw, force)
    src, tgt = source_hw.name, target_hw.name
    note = _transfer_note(src, tgt, source_hw.sm_version)
    src_nom = {"rdma": source_hw.rdma_Bps(False), "nvlink": source_hw.nvlink_Bps(False)}
    tgt_nom = {"rdma": target_hw.rdma_Bps(False), "nvlink": target_hw.nvlink_Bps(False)}
    kernels = {f: derive_entry(e, src, tgt, note) for f, e in (source.get("kernels") or {}).items()}
    comm: dict = {}
    for mode, ops in (source.get("comm") or {}).items():
        for op, e in ops.items():
            d = comm.setdefault(mode, {})[op] = derive_entry(e, src, tgt, note)
            if isinstance(d.get("nominal"), dict):  # the entry names its measuring links: the reader rescales
                pass
            elif d.get("model", S.ALPHA_BETA) == S.ALPHA_BETA:  # absolute fitted GB/s -> fractions of nominal
                _relative_bandwidths(d["params"], src_nom)
            elif d.get("model") == S.ALPHA_BETA_BY_EP:  # per-EP knots: the target's nominal links
                _scale_knots(d["params"], src_nom, tgt_nom)
            # other comm models (e.g. deepep_v2) read their bandwidths against the live spec already
    collectives = {op: derive_entry(e, src, tgt, note) for op, e in (source.get("collectives") or {}).items()}
    out = {k: copy.deepcopy(v) for k, v in source.items() if k not in ("kernels", "comm", "collectives")}
    out.update(
        {
            "gpu": tgt,
            "date": _dt.date.today().isoformat(),
            "generated_by": "moesim.calibration.fit.derive",
            "derived_from": src,
            "transfer": {"from_source": TRANSFERS, "from_target_spec": FROM_SPEC, "sm_version": source_hw.sm_version},
            "device_note": f"No {tgt} was measured: every entry is derived from the {src} profile ({note}).",
            "roofline": Peaks.from_hardware(target_hw).as_yaml(),
            "measured_on_this_gpu": [],
            "inherited": {},
            "derived": list(kernels) + [f"{m} {op}" for m, ops in comm.items() for op in ops] + list(collectives),
            "kernels": kernels,
            "comm": comm,
            "collectives": collectives,
        }
    )
    if force and source_hw.sm_generation != target_hw.sm_generation:
        out.setdefault("notes", []).append(f"forced across SM generations: {src} -> {tgt}")
    return out


def derive(source_path, gpu: str, out=None, force: bool = False, hardware=None) -> dict:
    """Read a profile file, derive `gpu`'s profile from it (`derive_profile`), validate it and write
    it atomically to `out` (default: the source's folder, <gpu>[.<engine>].yaml)."""
    source_path = Path(source_path)
    source = read_profile_file(source_path)
    target_hw = hardware if hardware is not None else load_hardware(gpu)
    prof = derive_profile(source, load_hardware(source["gpu"]), target_hw, force)
    name = target_hw.name.strip().lower().replace("-", "_")
    if out is None:
        eng = source.get("engine")
        out = source_path.with_name(f"{name}.{eng}.yaml" if eng else f"{name}.yaml")
    S.validate(prof, out, hint=WRITER_HINT)
    write_profile(prof, Path(out))
    return prof
