"""How a profile entry carries over to a sibling GPU of its SM generation (moesim.calibration.fit.derive:
"calibrate one GPU, predict its siblings"). Every model module declares its `transfer(entry, sib)`,
applied in place to the derived copy of an entry: `as_is` (the default: efficiencies, fixed latencies,
tile constants and fractions of the live spec's peaks carry over unchanged; peaks, bandwidths and SM
counts come from the target's hardware spec, read live by the profile reader) or its own rescaling."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sibling:
    """What a transfer reads of the source and target GPUs: the SM clock ratio (target / source, from
    the per-SM dense peaks; 1 across SM generations) and the nominal link bandwidths
    {"rdma", "nvlink"} of each (B/s)."""

    clock_ratio: float = 1.0
    source_links_Bps: dict = field(default_factory=dict)
    target_links_Bps: dict = field(default_factory=dict)


def as_is(entry: dict, sib: Sibling) -> None:
    """Every param carries over unchanged (the SM architecture's efficiencies and latencies)."""


def variants_params(entry: dict) -> list[dict]:
    """The params of an entry and of each of its variants (the ones a transfer rescales)."""
    found = [entry] + [v for v in (entry.get("variants") or []) if isinstance(v, dict)]
    return [v.get("params") or {} for v in found]
