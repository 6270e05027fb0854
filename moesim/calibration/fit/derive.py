"""Derived sibling profiles: "calibrate one GPU, predict its siblings".

A profile measured on one GPU (e.g. calibration/profiles/h200.sglang.yaml) becomes the profile of
another GPU of the same SM generation (h100_sxm.sglang.yaml, h800.sglang.yaml): every entry is
carried over with status `derived`, `derived_from: <source gpu>` and a `transfer` note.

What transfers and why (same SM architecture, same tensor-core and TMA pipelines):
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


# waves_v1 params that are SM-pipeline rates in seconds: the k-block pipeline latency and the per-SM load
# rate (moesim.perf.models.waves_v1.waves_sides) are fixed numbers of SM cycles / bytes per cycle, so they follow
# the SM clock. Within one SM generation (the same tensor-core FLOP per cycle per SM) the clock ratio is
# the ratio of per-SM dense peaks: (P_tgt / SMs_tgt) / (P_src / SMs_src). 1 between H200, H100 and H800.
CLOCK_PARAMS = {"kb_ns": -1, "sm_GBps": 1}  # param -> exponent of the clock ratio


def clock_ratio(source_hw, target_hw) -> float:
    """Target SM clock / source SM clock from the per-SM dense BF16 peaks; 1 across SM generations (a forced
    derivation: FLOP per cycle per SM differ, so the peak ratio is no clock ratio)."""
    if source_hw.sm_generation != target_hw.sm_generation:
        return 1.0
    per_sm = lambda hw: hw.peak_flops("bf16") / max(int(hw.sms), 1)  # noqa: E731
    return per_sm(target_hw) / per_sm(source_hw)


def _scale_clock(e: dict, ratio: float) -> None:
    """Scale an entry's (and its variants') waves_v1 SM-pipeline params by the clock ratio, in place."""
    if ratio == 1.0 or e.get("model") != S.WAVES:
        return
    for v in [e] + [v for v in (e.get("variants") or []) if isinstance(v, dict)]:
        p = v.get("params") or {}
        for k, x in CLOCK_PARAMS.items():
            if isinstance(p.get(k), (int, float)):
                p[k] = S.round_sig(float(p[k]) * ratio**x)


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
    clock = clock_ratio(source_hw, target_hw)
    for e in kernels.values():
        _scale_clock(e, clock)
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
