"""Price one kernel alone (`moesim kernel`): its time in a cost mode and against the roofline."""

from __future__ import annotations

import numpy as np

from moesim.enums import CostMode, Stream
from moesim.grid.validity import require_dtypes
from moesim.perf.cost import CostModel
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.ops import OpWork


def price_kernel(work: OpWork, model: ModelSpec, hw: HardwareSpec, cost_mode: CostMode, profile) -> dict:
    """-> {time_s, flops, bytes, bound, efficiency, roofline_time_s, provenance} of a one-element
    OpWork; efficiency = roofline time / predicted time (1 where the predicted time is 0). The
    model's compute dtypes must run on the GPU (require_dtypes), as in every other command."""
    require_dtypes(model, hw)
    cost = CostModel(hw, model, cost_mode, profile).cost(work)
    roof = CostModel(hw, model, CostMode.ROOFLINE, None).cost(work)
    t = float(np.ravel(cost.time_s)[0])
    t_roof = float(np.ravel(roof.time_s)[0])
    return {
        "time_s": t,
        "flops": float(np.ravel(cost.flops)[0]) if work.stream == Stream.COMPUTE else 0.0,
        "bytes": float(np.ravel(cost.bytes)[0]),
        "bound": cost.bound_name(0),
        "efficiency": t_roof / t if t > 0 else 1.0,
        "roofline_time_s": t_roof,
        "provenance": cost.provenance,
    }
