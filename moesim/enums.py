"""Enumerations shared across the flow."""

from enum import Enum, IntEnum

from moesim.errors import SpecError


class StrEnum(str, Enum):
    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

    @classmethod
    def parse(cls, value, field: str = None):

        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise SpecError(f"{field or cls.__name__}: {value!r} is not one of {{{allowed}}}") from None


class Dtype(StrEnum):
    FP8 = "fp8"
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP4 = "fp4"

    @property
    def bytes(self) -> float:
        return {"fp8": 1.0, "bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp4": 0.5}[self.value]


class OpKind(StrEnum):
    GEMM = "gemm"
    GROUPED_GEMM = "grouped_gemm"
    BMM = "bmm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"  # norms, activations, router softmax
    COLLECTIVE = "collective"  # all-reduce, all-gather
    ALL_TO_ALL = "all_to_all"  # EP dispatch / combine
    P2P = "p2p"  # KV transfer


class Stream(StrEnum):
    COMPUTE = "compute"
    COMM = "comm"


class Bound(StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    NETWORK = "network"
    LATENCY = "latency"


class BoundCode(IntEnum):
    """Bound as an integer code, for arrays over a grid (np.where / bincount / argmax).
    The resources compute, memory, network come first, in the order `ideal_period` returns them."""

    COMPUTE = 0
    MEMORY = 1
    NETWORK = 2
    LATENCY = 3

    @property
    def bound(self) -> Bound:
        return Bound[self.name]


class Provenance(StrEnum):
    ROOFLINE = "roofline"
    FITTED = "fitted"
    MEASURED = "measured"


class CostMode(StrEnum):
    ROOFLINE = "roofline"
    CALIBRATED = "calibrated"
    MEASURED = "measured"


class Engine(StrEnum):
    """The serving engine whose kernels a profile was measured under (calibration/profiles/<gpu>.<engine>.yaml)."""

    SGLANG = "sglang"
    TRTLLM = "trtllm"
    VLLM = "vllm"


DEFAULT_ENGINE = Engine.SGLANG


class Phase(StrEnum):
    DECODE = "decode"
    PREFILL = "prefill"
    MIXED = "mixed"


class Overlap(StrEnum):
    SERIAL = "serial"
    IDEAL = "ideal"
    SHARED = "shared"
    TWO_BATCH = "two-batch"
    FIVE_STAGE = "five-stage"
    SBO = "sbo"
    AUTO = "auto"


class CommMode(StrEnum):
    DEEPEP_LL = "deepep-ll"
    DEEPEP_NORMAL = "deepep-normal"
    NCCL = "nccl"
    PPLX = "pplx"
    # no all-to-all kernel: tokens all-gathered over the DP ranks and outputs reduce-scattered (attention
    # DP), or all-reduced (attention TP): vLLM's allgather_reducescatter, TRT-LLM's CUTLASS MoE (issue 27)
    ALLGATHER = "allgather"


class Tag(StrEnum):
    """What an op is, for the schedule and the rank-imbalance (never match op names).

    Set by the workload constructors; MTP copies of an op keep its tags."""

    ROUTED = "routed"  # routed-expert compute (grouped GEMMs + activation): scales with the rank's expert load
    A2A = "a2a"  # EP all-to-all (dispatch, combine): volume scales with the rank's expert load
    DISPATCH = "dispatch"  # the all-to-all half that sends tokens to their experts
    COMBINE = "combine"  # the all-to-all half that returns expert outputs
    EXPERTS_DOWN = "experts_down"  # routed down projection: SBO streams the combine behind it
    CORE = "core"  # attention core: the only op whose cost depends on the context length
    ACT_QUANT = "act_quant"  # a BF16 -> FP8 pass feeding one FP8 GEMM (its own kernel; fit.act_quant)
