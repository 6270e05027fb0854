"""Fit measurement CSVs into a calibration profile (calibration/profiles/<gpu>.yaml): the kernel
fits (moesim.calibration.fit.kernels), the collective fits (.comm), entries inherited from parent
profiles for what the rows do not cover, and the provenance summary. The layout is declared once in
moesim.perf.profile.schema; a fitted profile is checked against it before it is written.
"""

from __future__ import annotations

import copy
import datetime as _dt
import gzip
import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from moesim.calibration.fit import residual as R
from moesim.calibration.fit.collectives import fit_nccl_entry
from moesim.calibration.fit.comm import a2a_data, fit_a2a, fit_collective
from moesim.calibration.fit.comm_bench import GLITCH_RULE
from moesim.calibration.fit.comm_deepep import fit_deepep_v2
from moesim.calibration.fit.data import load_measurements
from moesim.calibration.fit.kernels import fit_kernels
from moesim.calibration.fit.peaks import Peaks, derive_peaks
from moesim.calibration.records import COLUMNS, NUMERIC_COLUMNS, atomic_write_text
from moesim.enums import Engine
from moesim.errors import CalibrationError, SpecError
from moesim.perf.profile import residual as RS
from moesim.perf.profile import schema as S
from moesim.perf.profile.reader import read_profile_file
from moesim.perf.profile.schema import round_sig as _r
from moesim.perf.profile.variants import base_dtype
from moesim.specs.data import relative_label
from moesim.specs.loader import gpu_key, load_hardware

WRITER_HINT = "the fit produced an entry outside the profile schema (moesim.perf.profile.schema)"


def _parent_entry(parents: list[dict], section: str, key: str, sub: str | None = None):
    """Best parent entry: one measured/fitted on the parent GPU first, then inherited/derived ones."""
    found = []
    for par in parents:
        sec = par.get(section) or {}
        e = sec.get(key)
        if sub is not None:
            e = (e or {}).get(sub)
        if e:
            found.append((par, e))
    if not found:
        return None
    found.sort(key=lambda pe: 0 if pe[1].get("status") in S.OWN_STATUSES else 1)
    par, e = found[0]
    out = copy.deepcopy({k: v for k, v in e.items() if k not in ("residuals", "measurements")})
    origin = e.get("inherited_from") or e.get("gpu") or par.get("gpu")
    if par.get("engine") and not e.get("inherited_from"):  # another engine's fit of the same GPU (a donor)
        origin = f"{origin}.{par['engine']}"
    out["inherited_status"] = e.get("inherited_status", e.get("status"))
    out["status"] = "inherited"
    out["inherited_from"] = origin
    if par.get("gpu") != origin:
        out["via"] = par.get("gpu")
    return out


def _inherit(parents: list[dict], kernels: dict) -> None:
    for fam in S.KERNEL_FAMILIES:
        if fam not in kernels:
            e = _parent_entry(parents, "kernels", fam)
            if e:
                kernels[fam] = e


def borrow_variants(kernels: dict, donors: list[dict], notes: list) -> None:
    """A variant the engine's rows cannot give (its rows excluded, e.g. host-bound vLLM block-FP8
    GEMMs) is taken from a donor profile of the same GPU running the same kernel (the GPU's SGLang
    profile: DeepGEMM), named `borrowed_from`; its residual block keeps the donor's side-car file."""
    for fam, e in kernels.items():
        mine = e.get("variants")
        if e.get("status") != "fitted" or not isinstance(mine, list):
            continue
        for donor in donors:
            theirs = ((donor.get("kernels") or {}).get(fam) or {}).get("variants")
            for v in theirs if isinstance(theirs, list) else []:
                if not any(base_dtype(m.get("dtype")) == base_dtype(v.get("dtype")) for m in mine):
                    src = f"{donor['gpu']}.{donor.get('engine') or 'generic'}"
                    mine.append({**v, "borrowed_from": src})
                    notes.append(
                        f"{fam} {v.get('dtype')}: no usable rows; variant {v.get('backend')} borrowed from {src}"
                    )


def _comm_section(df, peaks: Peaks, gpu: str, folds, parents: list[dict], notes: list) -> dict:
    comm: dict = {}
    for mode in S.COMM_MODES:
        for op in S.COMM_OPS:
            ad = a2a_data(df, mode, op)
            if ad is not None and ad.glitches:  # fit.comm_bench.token_glitches (DeepEP tables)
                notes.append(f"{mode} {op}: {ad.glitches} rows of glitched collector cases dropped ({GLITCH_RULE})")
            if ad is not None and len(ad.t) >= 3:
                parent = _parent_entry(parents, "comm", mode, op)
                comm.setdefault(mode, {})[op] = _best_a2a(ad, mode, op, peaks, gpu, folds, parent)
            elif ad is not None:
                notes.append(f"{mode} {op}: {len(ad.t)} rows are too few for alpha + two bandwidths; not fitted")
            else:
                e = _parent_entry(parents, "comm", mode, op)
                if e:
                    comm.setdefault(mode, {})[op] = e
    return comm


def _best_a2a(ad, mode: str, op: str, peaks: Peaks, gpu: str, folds, parent=None) -> dict:
    """alpha-beta fit, or DeepEP's deepep_v2 where the rows carry its shape (experts, hidden) and it
    wins on held-out median error (`parent`: the inherited entry single-node rows take their RDMA
    share from)."""
    e = fit_a2a(ad, peaks, gpu, folds)
    if not mode.startswith("deepep") or not np.isfinite(ad.rows.experts.values.astype(float)).all():
        return e
    v2 = fit_deepep_v2(ad, mode, op, peaks, gpu, parent=parent)
    med = lambda x: x["cv"]["median_abs_pct"] if x["cv"]["median_abs_pct"] is not None else np.inf  # noqa: E731
    if v2 is not None and med(v2) < med(e):
        v2["alternative"] = {"model": e["model"], "params": e["params"], "cv": e["cv"]}
        return v2
    return e


def _has_backends(df) -> bool:
    """Collective rows that name their backend (imported tables): the nccl_proto fit."""
    d = df[df.kernel.astype(str).str.startswith("nccl_all")]
    return len(d) > 0 and bool((d.backend.astype(str) != "").all())


def _collectives_section(df, peaks: Peaks, gpu: str, folds, parents: list[dict]) -> dict:
    collectives: dict = {}
    for op in S.COLLECTIVE_OPS:
        e = fit_nccl_entry(df, op, peaks, gpu, folds) if _has_backends(df) else None
        e = e or fit_collective(df, op, peaks, gpu, folds) or _parent_entry(parents, "collectives", op)
        if e:
            collectives[op] = e
    return collectives


def _provenance(kernels: dict, comm: dict, collectives: dict) -> tuple[dict, list, dict]:
    """(rows used per entry, entries measured on this GPU, entry -> GPU it was inherited from)."""
    used = {fam: e.get("rows", 0) for fam, e in kernels.items() if e.get("status") in ("fitted", "peak")}
    used.update({f"{m}/{op}": e["rows"] for m, ops in comm.items() for op, e in ops.items() if e["status"] == "fitted"})
    used.update({op: e["rows"] for op, e in collectives.items() if e["status"] == "fitted"})
    measured_here = sorted(
        [f for f, e in kernels.items() if e["status"] in ("fitted", "peak")]
        + [m for m, ops in comm.items() if any(e["status"] == "fitted" for e in ops.values())]
        + [o for o, e in collectives.items() if e["status"] == "fitted"]
    )
    inherited = {f: e["inherited_from"] for f, e in kernels.items() if e["status"] == "inherited"}
    inherited.update(
        {
            m: sorted({e["inherited_from"] for e in ops.values() if e["status"] == "inherited"})[0]
            for m, ops in comm.items()
            if any(e["status"] == "inherited" for e in ops.values())
        }
    )
    inherited.update({o: e["inherited_from"] for o, e in collectives.items() if e["status"] == "inherited"})
    return used, measured_here, inherited


def build_profile(
    df: pd.DataFrame,
    gpu: str,
    peaks: Peaks,
    parents: list[dict] | None = None,
    folds: int | None = None,
    inputs: list[dict] | None = None,
    device_note: str = "",
    donors: list[dict] | None = None,
) -> dict:
    parents = parents or []
    notes: list[str] = []
    # the elementwise entry the step prices an engine's quant op with when it has no quant fit (fit.act_quant)
    kernels, launch = fit_kernels(df, peaks, gpu, folds, notes, _parent_entry(parents, "kernels", "elementwise"))
    for e in kernels.values():  # fitted on measured call times: alpha holds the launch gap (reader.launch_for)
        if e.get("model") in S.CALL_TIME_MODELS:
            e["alpha_includes_launch"] = True
    borrow_variants(kernels, donors or [], notes)
    _inherit(parents, kernels)
    # DeepEP is one library whichever engine calls it: an engine without DeepEP tables takes the
    # reference engine's fit of the same GPU (a fitted entry outranks the generic parent's inherited one)
    comm = _comm_section(df, peaks, gpu, folds, parents + list(donors or []), notes)
    collectives = _collectives_section(df, peaks, gpu, folds, parents)
    if launch is None:
        launch = {
            "us": _r(peaks.launch_s * 1e6, 4),
            "status": "hardware",
            "source": f"hardware/{gpu}.yaml kernel_launch_us (the spec marks it derived); the profile "
            "reader uses the live spec value",
        }
    used, measured_here, inherited = _provenance(kernels, comm, collectives)
    return {
        "schema_version": S.SCHEMA_VERSION,
        "gpu": gpu,
        "date": _dt.date.today().isoformat(),
        "generated_by": "moesim.calibration.fit",
        "device_note": device_note
        or (
            "measured on this GPU"
            if measured_here
            else f"no measurement of a {gpu} was available: every entry is inherited or derived"
        ),
        "roofline": peaks.as_yaml(),
        "efficiency_definition": "eta = T_roofline / T_model; kernel time = max(F/(P*eta_c), B/(W*eta_m)) + launch "
        "(see moesim/perf/efficiency.py)",
        "inputs": inputs or [],
        "rows_used": {"total": int(sum(used.values())), "excluded_rows": int((df.exclude != "").sum()), **used},
        "measured_on_this_gpu": measured_here,
        "inherited": inherited,
        "launch": launch,
        "kernels": {f: kernels[f] for f in S.KERNEL_FAMILIES if f in kernels},
        "comm": comm,
        "collectives": collectives,
        "notes": notes,
    }


def cv_table(profile: dict) -> list[dict]:
    """Rows of the cross-validation table: kernel, rows, folds, median / max abs error (%)."""
    named = [(fam, e) for fam, e in (profile.get("kernels") or {}).items() if e.get("cv", {}).get("folds")]
    named += [(f"{mode} {op}", e) for mode, ops in (profile.get("comm") or {}).items() for op, e in ops.items()]
    named += list((profile.get("collectives") or {}).items())
    return [
        {
            "kernel": name,
            "rows": e["rows"],
            "folds": e["cv"]["folds"],
            "median_abs_pct": e["cv"]["median_abs_pct"],
            "p90_abs_pct": e["cv"].get("p90_abs_pct"),
            "max_abs_pct": e["cv"]["max_abs_pct"],
        }
        for name, e in named
        if e.get("status") == "fitted"
    ]


def _file_info(p: Path) -> dict:
    data = Path(p).read_bytes()
    rel = relative_label(Path(p))
    text = gzip.decompress(data) if str(p).endswith(".gz") else data  # .csv.gz rows (calibration.records)
    return {"path": rel, "sha256": hashlib.sha256(data).hexdigest()[:16], "rows": max(text.count(b"\n") - 1, 0)}


def read_profile_dict(path: Path) -> dict:
    return read_profile_file(Path(path))


def fit(
    csv_paths: Iterable[Path],
    gpu: str | None = None,
    out: Path | None = None,
    inherit: Iterable[Path] = (),
    folds: int | None = None,
    hardware=None,
    device_note: str = "",
    engine=None,
    borrow: Iterable[Path] = (),
) -> dict:
    """Fit CSVs (and inherit what they do not cover) into a profile; write it atomically if `out`.
    `engine` (sglang, trtllm, vllm): the rows are that engine's kernels; the profile records it
    (calibration/profiles/<gpu>.<engine>.yaml, inheriting from the GPU's generic <gpu>.yaml)."""
    paths = [Path(p) for p in csv_paths]
    df = (
        load_measurements(paths)
        if paths
        else pd.DataFrame({c: pd.Series(dtype=float if c in NUMERIC_COLUMNS else str) for c in COLUMNS})
    )
    if gpu is None:
        if not paths:
            raise CalibrationError("fit: give --gpu when no CSV is given")
        gpu = paths[0].parent.name
    gpu = gpu_key(gpu)
    if hardware is None:
        try:
            hardware = load_hardware(gpu)
        except SpecError:
            hardware = None
    peaks = Peaks.from_hardware(hardware) if hardware is not None else derive_peaks(gpu, df)
    parents = [read_profile_dict(Path(p)) for p in inherit]
    donors = [read_profile_dict(Path(p)) for p in borrow]
    profile = build_profile(df, gpu, peaks, parents, folds, [_file_info(p) for p in paths], device_note, donors)
    if engine is not None:  # right after `gpu`: the pair names the profile
        eng = Engine.parse(engine, "engine").value
        items = list(profile.items())
        at = [k for k, _ in items].index("gpu") + 1
        profile = dict(items[:at] + [("engine", eng)] + items[at:])
    S.validate(profile, out if out is not None else f"fitted for {gpu}", hint=WRITER_HINT)
    if out is not None:
        write_residuals(profile, Path(out))
        write_profile(profile, Path(out))
    return profile


def residual_file(out: Path) -> Path:
    """The side-car of a profile: calibration/profiles/<gpu>[.<engine>].residuals.npz."""
    name = out.name[: -len(".yaml")] if out.name.endswith(".yaml") else out.name
    return out.with_name(name + ".residuals.npz")


def write_residuals(profile: dict, out: Path) -> None:
    """Write the in-memory residual arrays of a fitted profile next to it and point the entries'
    `residual` blocks at the file (name relative to the profile's folder, sha256 prefix)."""
    arrays = R.collect(profile)
    if arrays:
        path = residual_file(out)
        R.finalize(profile, path.name, RS.save_npz(path, arrays))


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # plain YAML, no &anchors
        return True


def _repr_list(dumper, data):
    flow = all(not isinstance(v, (dict, list)) for v in data) and len(data) <= 12
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _repr_list)


def dump_profile(profile: dict) -> str:
    head = (
        "# moesim calibration profile: fitted by `moesim calibrate fit`; see moesim/perf/efficiency.py for the\n"
        "# model and moesim/perf/profile/ for how it is read. Regenerate rather than edit by hand.\n"
    )
    return head + yaml.dump(profile, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def write_profile(profile: dict, out: Path) -> None:
    atomic_write_text(Path(out), dump_profile(profile))
