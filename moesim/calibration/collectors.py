"""What the measurement tools ran, per collector backend (collector_facts.yaml beside this module,
each fact with its source there): read once at import into the tables the fit's work columns come
from (moesim.calibration.fit.moe_work, moesim.calibration.fit.moe_tables)."""

from __future__ import annotations

from pathlib import Path

import yaml

from moesim.errors import CalibrationError

FACTS = Path(__file__).with_name("collector_facts.yaml")


def _load(path: Path = FACTS) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CalibrationError(f"{path}: cannot read the collector facts: {exc}") from exc
    want = ("pass_bytes", "token_passes", "expanded_act", "grouped_router", "grouped_models", "expert_map")
    missing = [k for k in (*want, "rank0_segments", "host_timed", "layout_passes") if k not in (data or {})]
    if missing:
        raise CalibrationError(f"{path}: missing {', '.join(missing)}")
    return data


def _token_bytes(data: dict, path: Path = FACTS) -> dict[str, float]:
    """{backend: bytes per token and hidden element}: the sum of its token passes' bytes."""
    out = {}
    for backend, passes in data["token_passes"].items():
        unknown = [p for p in passes if p not in data["pass_bytes"]]
        if unknown:
            raise CalibrationError(f"{path}: token_passes.{backend}: unknown pass {', '.join(unknown)}")
        out[backend] = float(sum(float(data["pass_bytes"][p]) for p in passes))
    return out


_DATA = _load()
FINALIZE_BYTES = float(_DATA["pass_bytes"]["finalize"])  # finalizeMoeRouting: one BF16 output row per token
NOOP_COPY_BYTES = float(_DATA["pass_bytes"]["noop_copy"])  # vLLM TopKWeightAndReduceNoOP: output.copy_
TOKEN_BYTES = _token_bytes(_DATA)
EXPANDED_ACT = frozenset(_DATA["expanded_act"])
GROUPED_ROUTER = frozenset(_DATA["grouped_router"])
GROUPED_MODELS = {
    tuple(float(x) for x in g["dims"]): (float(g["n_group"]), float(g["topk_group"])) for g in _DATA["grouped_models"]
}
EXPERT_MAP = frozenset(_DATA["expert_map"])
RANK0_SEGMENTS = {
    (s["backend"], s["gpu"]): frozenset(tuple(float(x) for x in d) for d in s["dims"]) for s in _DATA["rank0_segments"]
}
HOST_TIMED = frozenset((h["backend"], h["layout"]) for h in _DATA["host_timed"])
PASSES = {
    (p["backend"], p["layout"]): {k: float(p[k]) for k in ("token_bytes", "pair_bytes", "act_bytes")}
    for p in _DATA["layout_passes"]
}
