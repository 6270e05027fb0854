"""Load specs from the catalog (models/, hardware/) or from a path; apply --set overrides.

Only yaml.safe_load / json.load are used on user files. Overrides are applied to the raw mapping
*before* validation, so `--set hardware.rdma_bw_GBps=100` is checked exactly like the YAML.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from moesim.errors import SpecError
from moesim.specs.data import data_root, data_roots
from moesim.specs.hardware import MIN_RATE, HardwareSpec
from moesim.specs.hf_import import default_name, mapping_from_hf_config
from moesim.specs.model import ModelSpec
from moesim.specs.schema import build
from moesim.specs.yamlio import load_yaml


def gpu_key(name) -> str:
    """A GPU name as the calibration files spell it (their stems): 'H100-SXM ' -> 'h100_sxm'. The one
    normalisation of GPU names for profiles, measurements and fits (the catalog's `_resolve` takes
    either spelling)."""
    return str(name or "").strip().lower().replace("-", "_")


def catalog(kind: str) -> dict[str, Path]:
    """name -> YAML file of `kind` (models, hardware): the shipped catalog, then the user root's
    (`$MOESIM_DATA/<kind>/*.yaml`), a user entry replacing a shipped one of the same name."""
    out: dict[str, Path] = {}
    for root in reversed(data_roots()):
        folder = root / kind
        if folder.is_dir():
            out.update({p.stem.replace("_", "-"): p for p in sorted(folder.glob("*.yaml"))})
    return out


def _resolve(kind: str, name_or_path: str) -> Path:
    text = str(name_or_path)
    p = Path(text)
    if p.suffix in (".yaml", ".yml", ".json") or os.sep in text:
        if not p.exists():
            raise SpecError(f"{kind}: file {text!r} does not exist")
        if not p.is_file():
            raise SpecError(f"{kind}: {text!r} is not a file")
        return p
    key = text.strip().lower().replace("_", "-")
    folder = kind + ("s" if kind == "model" else "")
    cat = catalog(folder)
    if key in cat:
        return cat[key]
    allowed = ", ".join(cat) or f"(catalog empty: no {data_root() / folder} folder)"
    raise SpecError(f"{kind}: unknown {kind} {text!r}; available: {allowed} (or a path to a YAML file)")


def read_text(path: Path, error: type[Exception] = SpecError, label: str = "") -> str:
    """The UTF-8 text of a file; an unreadable or undecodable file is one `error` line."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{label}{path}: cannot read ({e.__class__.__name__}: {e})") from None


def yaml_problem(e: yaml.YAMLError) -> str:
    """Where and what a YAML parse error is: ' at line L, column C: problem' (1-based)."""
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{where}: {getattr(e, 'problem', None) or str(e).splitlines()[0]}"


def read_mapping(path: Path) -> dict:
    """Read a YAML/JSON file into a mapping, failing with one line on any problem."""
    text = read_text(path)
    if not text.replace("\ufeff", "").strip():  # a byte-order mark alone is still an empty file
        raise SpecError(f"{path}: file is empty")
    try:
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: malformed YAML{yaml_problem(e)}") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise SpecError(
            f"{path}: nested too deeply to read; allowed: a flat {'JSON' if path.suffix == '.json' else 'YAML'} "
            f"mapping of spec keys"
        ) from None
    except ValueError as e:  # e.g. an integer literal beyond Python's 4300-digit limit
        raise SpecError(f"{path}: unreadable value ({str(e).split(';')[0]}); allowed: numbers of normal size") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at top level, got {type(data).__name__}")
    return data


def parse_overrides(items: Iterable[str] | None) -> dict[str, dict[str, object]]:
    """['hardware.rdma_bw_GBps=100', 'model.moe.num_experts=384'] -> {'hardware': {...}, 'model': {...}}."""
    out: dict[str, dict[str, object]] = {"model": {}, "hardware": {}}
    for item in items or ():
        if "=" not in item:
            raise SpecError(f"--set: {item!r} must look like hardware.rdma_bw_GBps=100 or model.moe.top_k=8")
        key, _, raw = item.partition("=")
        key = key.strip()
        head, _, rest = key.partition(".")
        if head not in out or not rest:
            raise SpecError(f"--set: {key!r} must start with 'model.' or 'hardware.' and name a field")
        try:
            value = load_yaml(raw) if raw.strip() else None
        except (yaml.YAMLError, RecursionError):  # not YAML (or nested past yamlio.MAX_DEPTH): the text itself
            value = raw
        out[head][rest] = value
    return out


def _apply(data: dict, overrides: Mapping[str, object], label: str, path: Path) -> dict:
    data = copy.deepcopy(data)
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part) if isinstance(node, dict) else None
            if not isinstance(nxt, dict):
                raise SpecError(f"--set {label}.{dotted}: {'.'.join(parts[: i + 1])!r} is not a section of {path.name}")
            node = nxt
        node[parts[-1]] = value  # unknown leaf keys are rejected by the strict builder
        srcs = data.setdefault("sources", {}) if isinstance(data.get("sources", {}), dict) else None
        if srcs is not None:
            srcs[dotted] = "--set override"
    return data


def load_model(name_or_path="deepseek-v3", overrides: Mapping[str, object] | None = None) -> ModelSpec:
    path = _resolve("model", name_or_path)
    if path.suffix == ".json":
        data = mapping_from_hf_config(read_mapping(path), name=path.parent.name or path.stem, file=str(path))
    else:
        data = read_mapping(path)
    if overrides:
        data = _apply(data, overrides, "model", path)
    return build(ModelSpec, data, file=str(path))


# nominal link bandwidth -> its achievable twin (HardwareSpec.nvlink_Bps / rdma_Bps(achievable=True))
_ACHIEVABLE_TWIN = {"nvlink_bw_GBps": "nvlink_eff_bw_GBps", "rdma_bw_GBps": "rdma_eff_bw_GBps"}
# tensor / vector peaks: SMs x per-SM throughput x clock (NVIDIA architecture whitepapers give the
# peaks as that product), so a what-if on the SM count alone keeps the per-SM rate and scales them
_SM_PEAKS = ("fp8_tflops", "bf16_tflops", "fp4_tflops", "fp32_tflops")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _carry_achievable(data: dict, overrides: Mapping[str, object]) -> dict:
    """What-ifs that carry their dependents: a --set of a nominal link bandwidth alone keeps the
    spec's achievable fraction (achievable = nominal x the file's eff / nominal), so a what-if on the
    link moves calibrated/achievable times too (issue 14); a --set of `sms` alone scales every peak
    by new / file SMs (_SM_PEAKS), so compute scales with the SM count (issue 17)."""
    out = dict(overrides)
    for nom, eff in _ACHIEVABLE_TWIN.items():
        if nom not in overrides or eff in overrides:
            continue
        old_nom, old_eff, new_nom = data.get(nom), data.get(eff), overrides[nom]
        if all(_number(v) for v in (old_nom, old_eff, new_nom)) and old_nom > 0:
            # at the smallest nominal the spec allows, the achievable one is that too (<= nominal)
            out[eff] = max(float(new_nom) * float(old_eff) / float(old_nom), min(float(new_nom), MIN_RATE))
    old_sms, new_sms = data.get("sms"), overrides.get("sms")
    if "sms" in overrides and not any(k in overrides for k in _SM_PEAKS):
        if _number(old_sms) and _number(new_sms) and old_sms > 0 and new_sms > 0:
            for k in _SM_PEAKS:
                if _number(data.get(k)):
                    out[k] = float(data[k]) * float(new_sms) / float(old_sms)
    return out


def load_hardware(name_or_path="h800", overrides: Mapping[str, object] | None = None) -> HardwareSpec:
    path = _resolve("hardware", name_or_path)
    data = read_mapping(path)
    if overrides:
        data = _apply(data, _carry_achievable(data, overrides), "hardware", path)
    return build(HardwareSpec, data, file=str(path))


def import_hf_config(path, name: str | None = None) -> dict:
    """Read a Hugging Face config.json -> the ModelSpec mapping, validated with the strict builder
    (an invalid config never yields a mapping). `moesim model import --out` writes it as YAML."""
    path = Path(path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise SpecError(f"model import: {str(path)!r} {what}; allowed: a Hugging Face config.json file")
    mapping = mapping_from_hf_config(read_mapping(path), name=name or default_name(path), file=str(path))
    build(ModelSpec, mapping, file=str(path))
    return mapping
