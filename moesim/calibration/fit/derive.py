"""Derived sibling profiles: "calibrate one GPU, predict its siblings".

A profile measured on one GPU (e.g. calibration/profiles/h200.sglang.yaml) becomes the profile of
another GPU of the same SM generation (h100_sxm.sglang.yaml, h800.sglang.yaml): every entry is
carried over with status `derived`, `derived_from: <source gpu>` and a `transfer` note.

What transfers and why (same SM architecture, same tensor-core and TMA pipelines; each entry by its
model's `transfer`, moesim.perf.models.<model>):
    efficiencies (eta_c, eta_m: fractions of a peak), fixed per-call latencies (alpha, t0, launch),
    tile / wave constants, the fits' shape parameters. The waves_v1 k-block latency and per-SM load
    rate (kb_ns, sm_GBps) are SM cycles, so they follow the SM clock: scaled by the per-SM peak
    ratio (clock_ratio; 1 between H200, H100 and H800; GB200 / B200 1.11 by the datasheets, measured
    GEMMs 4-9 % faster on GB200: DeepGEMM GEMM transfer bias +3.1 -> +0.6 %, docs/calibration.md).
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
without the residuals, 2-5 % with them. Not transferable by this rule: a host-paced alpha (vLLM's
eager DeepEP normal loop; the host CPU is no GPU spec) and terms fitted at one EP only. Deriving across
SM generations (Hopper sm90 -> Blackwell sm100) is refused unless forced: the efficiencies of another
micro-architecture are not these.
"""

from __future__ import annotations

import copy
import datetime as _dt
from pathlib import Path

from moesim.calibration.fit.peaks import Peaks
from moesim.calibration.fit.profile import WRITER_HINT, write_profile
from moesim.errors import CalibrationError
from moesim.perf import models as M
from moesim.perf.models import waves_v1
from moesim.perf.models.sibling import Sibling
from moesim.perf.profile import schema as S
from moesim.perf.profile.reader import read_profile_file
from moesim.specs.loader import gpu_key, load_hardware

TRANSFERS = (
    "efficiencies, fixed latencies (alpha, t0, launch), tile and wave constants (the k-block latency and per-SM "
    "load rate in SM cycles: times the SM clock ratio), measured residual ratios"
)
FROM_SPEC = (
    "dense FLOP/s peaks (and the SM clock ratio: per-SM peaks), HBM bandwidth, SM count, NVLink and NIC bandwidth"
)
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


# what each model rescales is its module's `transfer` (moesim.perf.models.<model>; the shared default
# moesim.perf.models.sibling.as_is): waves_v1 its SM-pipeline params by the SM clock ratio (CLOCK_PARAMS),
# alpha_beta_max its absolute bandwidths to fractions of the nominal links, alpha_beta_by_ep its knots
CLOCK_PARAMS = waves_v1.CLOCK_PARAMS


def clock_ratio(source_hw, target_hw) -> float:
    """Target SM clock / source SM clock from the per-SM dense BF16 peaks; 1 across SM generations (a forced
    derivation: FLOP per cycle per SM differ, so the peak ratio is no clock ratio)."""
    if source_hw.sm_generation != target_hw.sm_generation:
        return 1.0
    per_sm = lambda hw: hw.peak_flops("bf16") / max(int(hw.sms), 1)  # noqa: E731
    return per_sm(target_hw) / per_sm(source_hw)


def derive_entry(e: dict, src: str, tgt: str, note: str, sib: Sibling | None = None, model=None) -> dict:
    """One entry of the source profile as the target's: status derived, provenance kept, carried over by
    its model's transfer (moesim.perf.models.<model>.transfer; model: the entry's, else this default)."""
    out = copy.deepcopy({k: v for k, v in e.items() if k not in DROPPED})
    out["derived_status"] = e.get("status", "fitted")
    out["status"] = "derived"
    out["derived_from"] = e.get("inherited_from") if e.get("status") == "inherited" else src
    out["gpu"] = tgt
    out["transfer"] = note
    M.transfer(out, sib or Sibling(), e.get("model", model))
    return out


def derive_profile(source: dict, source_hw, target_hw, force: bool = False) -> dict:
    """The target GPU's profile from a profile measured on `source_hw` (see the module doc)."""
    check_generation(source_hw, target_hw, force)
    src, tgt = source_hw.name, target_hw.name
    note = _transfer_note(src, tgt, source_hw.sm_version)
    src_nom = {"rdma": source_hw.rdma_Bps(False), "nvlink": source_hw.nvlink_Bps(False)}
    tgt_nom = {"rdma": target_hw.rdma_Bps(False), "nvlink": target_hw.nvlink_Bps(False)}
    clock = clock_ratio(source_hw, target_hw)
    sib = Sibling(clock, src_nom, tgt_nom)
    kernels = {f: derive_entry(e, src, tgt, note, sib) for f, e in (source.get("kernels") or {}).items()}
    comm: dict = {}
    for mode, ops in (source.get("comm") or {}).items():
        for op, e in ops.items():  # a comm entry without a model is an alpha_beta_max (schema)
            comm.setdefault(mode, {})[op] = derive_entry(e, src, tgt, note, sib, S.ALPHA_BETA)
    collectives = {op: derive_entry(e, src, tgt, note, sib) for op, e in (source.get("collectives") or {}).items()}
    out = {k: copy.deepcopy(v) for k, v in source.items() if k not in ("kernels", "comm", "collectives")}
    out.update(
        {
            "gpu": tgt,
            "date": _dt.date.today().isoformat(),
            "generated_by": "moesim.calibration.fit.derive",
            "derived_from": src,
            "transfer": {
                "from_source": TRANSFERS,
                "from_target_spec": FROM_SPEC,
                "sm_version": source_hw.sm_version,
                "sm_clock_ratio": S.round_sig(clock),
            },
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


def derive_file(source_path, gpu: str, out=None, force: bool = False, hardware=None) -> dict:
    """Read a profile file, derive `gpu`'s profile from it (`derive_profile`), validate it and write
    it atomically to `out` (default: the source's folder, <gpu>[.<engine>].yaml)."""
    source_path = Path(source_path)
    source = read_profile_file(source_path)
    target_hw = hardware if hardware is not None else load_hardware(gpu)
    prof = derive_profile(source, load_hardware(source["gpu"]), target_hw, force)
    name = gpu_key(target_hw.name)
    if out is None:
        eng = source.get("engine")
        out = source_path.with_name(f"{name}.{eng}.yaml" if eng else f"{name}.yaml")
    S.validate(prof, out, hint=WRITER_HINT)
    write_profile(prof, Path(out))
    return prof
