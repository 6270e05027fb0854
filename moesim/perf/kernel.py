"""Price one kernel alone (`moesim kernel`): its time in a cost mode and against the roofline."""

from __future__ import annotations

import numpy as np

from moesim.enums import CostMode, OpKind, Stream
from moesim.grid.validity import require_dtypes
from moesim.perf.cost import CostModel
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.workload.ops import OpWork, quant_pass

LINEAR_OP_NOTE = (
    "GEMM alone; the engine's linear op adds its input quant ({us:.2f} us, priced as the step's own quant op; "
    "the GEMM fit subtracted {src})"
)


def price_kernel(work: OpWork, model: ModelSpec, hw: HardwareSpec, cost_mode: CostMode, profile) -> dict:
    """-> {time_s, flops, bytes, bound, efficiency, roofline_time_s, provenance} of a one-element
    OpWork; efficiency = roofline time / predicted time (1 where the predicted time is 0). The
    model's compute dtypes must run on the GPU (require_dtypes), as in every other command."""
    require_dtypes(model, hw)
    cost_model = CostModel(hw, model, cost_mode, profile)
    cost = cost_model.cost(work)
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
    } | _input_quant(work, model, cost_model)


def _input_quant(work: OpWork, model: ModelSpec, cost_model: CostModel) -> dict:
    """{input_quant_s, note} of a GEMM whose profile variant was fitted on linear-op rows less their input
    quant (moesim.calibration.fit.act_quant): the quant pass of its [m, k] input, priced as the step
    prices it (Tag.ACT_QUANT ops, moesim.workload.ffn); {} for any other kernel or profile."""
    prof = cost_model.profile
    aq = prof.gemm_act_quant(work.dtype.value) if work.kind == OpKind.GEMM and hasattr(prof, "gemm_act_quant") else None
    if not aq:
        return {}
    p = model.precision
    q = quant_pass(
        "input_quant", work.shape["m"], work.shape["k"], a_bytes=p.activation_dtype.bytes, block=p.weight_block, stage=1
    )
    t = float(np.ravel(cost_model.cost(q).time_s)[0])
    src = aq.get("source", "a quant model").split(";")[0]
    return {"input_quant_s": t, "note": LINEAR_OP_NOTE.format(us=t * 1e6, src=src)}
