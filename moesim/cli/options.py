"""Every shared command-line option, defined once.

Each option is a typer ``Annotated`` alias (flag names and help); a block declares
``model: O.Model = "deepseek-v3"`` and keeps its own default there. Two spellings exist where the
value's type differs: the scalar of one configuration (``--tp 8``: `estimate`, `roofline`,
`timeline`) and the axis of a grid (``--tp 1,2,4``: `sweep`, `pareto`, `disagg`); their help comes
from the one ``HELP`` table. Option blocks are data: frozen dataclasses (`OptionBlock`) whose fields
carry the option types and defaults (``ConfigOptions``, ``GridOptions`` here; a command's own
block in its module). typer needs every option in the command's signature, so ``shared`` writes a
block's fields into it and hands the values to the command as one block instance."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from moesim import units as U
from moesim.engine.settings import Pricing, split_pricing

AXIS_HELP = "comma list, A:B (doubling from A to B) or A:B:STEP (linear)"
HELP = {
    "model": "catalog name, YAML spec or HF config.json",
    "hardware": "catalog name or YAML spec",
    "set": "what-if override, e.g. hardware.rdma_bw_GBps=100 (repeatable)",
    "phase": "decode | prefill | mixed (needs --isl, --osl)",
    "tp": "attention tensor parallel degree",
    "dp": "attention data-parallel groups (default: ep x moe_tp / tp)",
    "ep": "expert-parallel ranks (default: tp x dp / moe_tp)",
    "moe_tp": "tensor parallel inside experts",
    "batch": "decode: requests per DP group; prefill: tokens per DP group",
    "context": "decode: mean KV length; prefill: prompt length (tokens)",
    "mtp": "draft tokens per step (MTP)",
    "acceptance": "acceptance probability per draft token",
    "redundant": "EPLB redundant expert slots",
    "overlap": "serial | ideal | shared | sbo | two-batch | five-stage | auto",
    "cost_mode": "roofline | calibrated | measured",
    "engine": "sglang | trtllm | vllm: the serving engine whose kernel profile prices the run",
    "comm": "deepep-ll | deepep-normal | nccl | pplx",
    "comm_sms": "SMs given to DeepEP's normal kernels (default: DeepEP's Buffer.num_sms = 20, what SGLang "
    "runs): fewer -> slower dispatch/combine, more -> slower overlapped compute",
    "expert_skew": "auto (prefill: published where known, else uniform) | none | uniform | published | zipf:<s> | load.csv",
    "context_dist": "fixed | exp | lognormal:<cv>",
    "isl": "phase mixed: input (prompt) tokens per request",
    "osl": "phase mixed: output tokens per request",
    "chunk_tokens": "phase mixed: prefill tokens per forward pass per DP group: SGLang's --chunked-prefill-size "
    "(default 8192 below 160 GiB of GPU memory, 16384 above, split over DP-attention ranks) or vLLM / TRT-LLM's "
    "--max-batched-tokens token budget (default 8192 on H100/H200)",
    "request_rate": "phase mixed: requests/s to the deployment (open loop, Poisson); default: closed loop with "
    "--batch concurrent requests per DP group",
    "max_tpot": "keep rows with TPOT at most this: 50ms, 0.05s (a bare number is seconds)",
    "max_ttft": "keep rows with TTFT at most this (prefill, mixed): 2s, 500ms (a bare number is seconds)",
    "total_gpus": "GPU budget: keep deployments of whole instances using at most this many GPUs (replicas of "
    "an instance; x prefill + y decode instances for disagg)",
    "gpus_per_node": "GPUs per node for --total-gpus: an instance spanning nodes takes whole nodes (default: "
    "the hardware's NVLink domain)",
    "min_tpu": "keep rows with at least this many tokens/s per user (decode)",
}


TPOT_MAX_BARE_S = U.TPOT_MAX_BARE_S  # bare numbers above: milliseconds typed without the unit
TTFT_MAX_BARE_S = U.TTFT_MAX_BARE_S


def time_option(*flags: str, what: str, max_bare_s: float, help: str):
    """A duration flag (seconds inside): ``50ms``, ``2s``, ``500us`` or a bare number of seconds."""
    parse = functools.partial(U.parse_time_s, flag=flags[0], what=what, max_bare_s=max_bare_s)
    return typer.Option(*flags, parser=parse, metavar="TIME", help=help)


def _axis(help_key: str, extra: str = "") -> str:
    return f"{HELP[help_key]}{extra}; {AXIS_HELP}"


# ---------------------------------------------------------------- specs, what-if, model switches
Model = Annotated[str | None, typer.Option("--model", "-m", help=HELP["model"])]
Hardware = Annotated[str | None, typer.Option("--hardware", "-g", help=HELP["hardware"])]
Hardwares = Annotated[str | None, typer.Option("--hardware", "-g", help=HELP["hardware"] + "; comma list")]
Set = Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help=HELP["set"])]
CostMode = Annotated[str | None, typer.Option("--cost-mode", help=HELP["cost_mode"])]
Engine = Annotated[str, typer.Option("--engine", help=HELP["engine"])]
ExpertSkew = Annotated[str | None, typer.Option("--expert-skew", help=HELP["expert_skew"])]
ContextDist = Annotated[str | None, typer.Option("--context-dist", help=HELP["context_dist"])]
Isl = Annotated[float | None, typer.Option("--isl", help=HELP["isl"])]
Osl = Annotated[float | None, typer.Option("--osl", help=HELP["osl"])]
ChunkTokens = Annotated[
    float | None, typer.Option("--chunked-prefill-size", "--max-batched-tokens", help=HELP["chunk_tokens"])
]
RequestRate = Annotated[float | None, typer.Option("--request-rate", help=HELP["request_rate"])]
MaxTpot = Annotated[
    float | None, time_option("--max-tpot", what="TPOT", max_bare_s=TPOT_MAX_BARE_S, help=HELP["max_tpot"])
]
MaxTtft = Annotated[
    float | None, time_option("--max-ttft", what="TTFT", max_bare_s=TTFT_MAX_BARE_S, help=HELP["max_ttft"])
]
TotalGpus = Annotated[int | None, typer.Option("--total-gpus", help=HELP["total_gpus"])]
GpusPerNode = Annotated[int | None, typer.Option("--gpus-per-node", help=HELP["gpus_per_node"])]
MinTpu = Annotated[float | None, typer.Option("--min-tokens-per-s-per-user", help=HELP["min_tpu"])]

# ---------------------------------------------------------------- one configuration (scalars)
Phase = Annotated[str, typer.Option("--phase", help=HELP["phase"])]
Tp = Annotated[int, typer.Option("--tp", help=HELP["tp"])]
Dp = Annotated[int | None, typer.Option("--dp", help=HELP["dp"])]
Ep = Annotated[int | None, typer.Option("--ep", help=HELP["ep"])]
MoeTp = Annotated[int, typer.Option("--moe-tp", help=HELP["moe_tp"])]
Batch = Annotated[float | None, typer.Option("--batch", help=HELP["batch"])]
Context = Annotated[float | None, typer.Option("--context", help=HELP["context"])]
Mtp = Annotated[int, typer.Option("--mtp", help=HELP["mtp"])]
Acceptance = Annotated[float, typer.Option("--acceptance", help=HELP["acceptance"])]
Redundant = Annotated[int, typer.Option("--redundant-experts", help=HELP["redundant"])]
Overlap = Annotated[str | None, typer.Option("--overlap", help=HELP["overlap"])]
Comm = Annotated[str | None, typer.Option("--comm", help=HELP["comm"])]
CommSms = Annotated[int | None, typer.Option("--comm-sms", help=HELP["comm_sms"])]

# ---------------------------------------------------------------- grid axes (strings parsed by the sweep)
PhaseAxis = Annotated[str | None, typer.Option("--phase", help=HELP["phase"] + "; comma list")]
TpAxis = Annotated[str | None, typer.Option("--tp", help=_axis("tp"))]
DpAxis = Annotated[str | None, typer.Option("--dp", help=_axis("dp"))]
EpAxis = Annotated[str | None, typer.Option("--ep", help=_axis("ep", ", e.g. 8,16,32,64,128,144,256"))]
MoeTpAxis = Annotated[str | None, typer.Option("--moe-tp", help=_axis("moe_tp"))]
BatchAxis = Annotated[str | None, typer.Option("--batch", help=_axis("batch", ", e.g. 1:256"))]
ContextAxis = Annotated[str | None, typer.Option("--context", help=_axis("context"))]
MtpAxis = Annotated[str | None, typer.Option("--mtp", help=_axis("mtp"))]
AcceptanceAxis = Annotated[str | None, typer.Option("--acceptance", help=_axis("acceptance"))]
RedundantAxis = Annotated[str | None, typer.Option("--redundant-experts", "--redundant", help=_axis("redundant"))]
OverlapAxis = Annotated[str | None, typer.Option("--overlap", help=HELP["overlap"] + " (comma list)")]
CommAxis = Annotated[str | None, typer.Option("--comm", help=HELP["comm"] + " (comma list)")]

# ---------------------------------------------------------------- output
Json = Annotated[bool, typer.Option("--json", help="print one JSON object")]
JsonRows = Annotated[bool, typer.Option("--json", help="print the rows as JSON")]
Out = Annotated[Path | None, typer.Option("--out", help="write the result JSON to a file")]
OutRows = Annotated[
    Path | None, typer.Option("--out", help="write rows to .csv, .parquet (sweep: streamed, grid order) or .json")
]
EmitLaunch = Annotated[
    bool,
    typer.Option(
        "--emit-launch", help="print the SGLang / vLLM / TRT-LLM launch commands of the chosen configuration(s)"
    ),
]
Plot = Annotated[Path | None, typer.Option("--plot", help="draw to this image (.png, .svg or .pdf)")]
Verify = Annotated[
    bool,
    typer.Option(
        "--verify/--no-verify",
        help="simulate the chosen deployment(s) at their load with the request-level "
        "simulator: p90 TTFT / TPOT, and where the closed forms disagree (> 10 %) or miss a target",
    ),
]


# ---------------------------------------------------------------- option blocks
class OptionBlock(Mapping):
    """Base of an option block: a frozen dataclass whose fields are command-line options (the
    annotation: the value's type with its typer flags and help; the default: the option's). Read
    by attribute (``cfg.tp``); the lines that hand a block's values to a library call read it as
    a mapping of field name -> value (``cfg["tp"]``, ``dict(cfg)``, ``**cfg``)."""

    def __getitem__(self, name: str):
        if name not in self._names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def pricing(self, **extra) -> Pricing:
        """The block's pricing options (its fields named as `Pricing`'s: cost_mode, engine,
        comm, ...) and `extra` ones (e.g. cuda_graphs) as one `Pricing`; unset: the defaults."""
        given, _ = split_pricing({**self, **extra})
        return Pricing.of(**given)


@dataclass(frozen=True)
class ConfigOptions(OptionBlock):
    """One deployment configuration (`estimate`, `roofline`)."""

    model: Model = "deepseek-v3"
    hardware: Hardware = "h800"
    phase: Phase = "decode"
    tp: Tp = 1
    dp: Dp = None
    ep: Ep = None
    moe_tp: MoeTp = 1
    batch: Batch = None
    context: Context = None
    mtp: Mtp = 0
    acceptance: Acceptance = 0.8
    redundant_experts: Redundant = 0
    overlap: Overlap = None
    cost_mode: CostMode = "calibrated"
    engine: Engine = "sglang"
    comm: Comm = None
    comm_sms: CommSms = None
    expert_skew: ExpertSkew = "auto"
    context_dist: ContextDist = "fixed"
    set_: Set = None
    isl: Isl = None
    osl: Osl = None
    chunk_tokens: ChunkTokens = None
    request_rate: RequestRate = None


@dataclass(frozen=True)
class GridOptions(OptionBlock):
    """A grid of configurations with its filters (`sweep`, `pareto`); unset: the sweep's defaults."""

    model: Model = None
    hardware: Hardwares = None
    set_: Set = None
    phase: PhaseAxis = None
    tp: TpAxis = None
    dp: DpAxis = None
    ep: EpAxis = None
    moe_tp: MoeTpAxis = None
    batch: BatchAxis = None
    context: ContextAxis = None
    mtp: MtpAxis = None
    acceptance: AcceptanceAxis = None
    redundant: RedundantAxis = None
    overlap: OverlapAxis = None
    comm: CommAxis = None
    cost_mode: CostMode = None
    engine: Engine = "sglang"
    expert_skew: ExpertSkew = None
    context_dist: ContextDist = None
    isl: Isl = None
    osl: Osl = None
    chunk_tokens: ChunkTokens = None
    request_rate: RequestRate = None
    study: Annotated[
        Path | None,
        typer.Option("--study", help="study YAML (axes:, model, hardware, phase, filters:); flags override"),
    ] = None
    min_tokens_per_s_per_user: MinTpu = None
    max_tpot: MaxTpot = None
    max_ttft: MaxTtft = None
    total_gpus: TotalGpus = None
    gpus_per_node: GpusPerNode = None


def pricing_of(values, **extra) -> Pricing:
    """The one `Pricing` of a command: its parsed option values (a dict or dataclass; the keys
    named as `Pricing`'s fields, others ignored) and `extra` options; None: the default."""
    if dataclasses.is_dataclass(values):
        values = {f.name: getattr(values, f.name) for f in dataclasses.fields(values)}
    given, _ = split_pricing({**values, **extra})
    return Pricing.of(**given)


def estimate_kwargs(cfg, **extra) -> dict:
    """A block's values (and `extra` pricing options, e.g. cuda_graphs) -> keyword arguments of the
    library call (`estimate`, `roofline`, `layer_timeline`; ``--set`` is its ``set``; the pricing
    options as one ``pricing``)."""
    if dataclasses.is_dataclass(cfg):
        cfg = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    _, rest = split_pricing(cfg)
    return {**{("set" if k == "set_" else k): v for k, v in rest.items()}, "pricing": pricing_of(cfg, **extra)}


def block_parameters(block: type[OptionBlock]) -> list[inspect.Parameter]:
    """An option block's fields as keyword-only parameters (annotations resolved; a field without
    a default is a required option)."""
    hints = typing.get_type_hints(block, include_extras=True)
    return [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            annotation=hints[f.name],
        )
        for f in dataclasses.fields(block)
    ]


def shared(name: str, block: type[OptionBlock]) -> Callable:
    """Decorator: add ``block``'s fields to a command as its first options; the command receives
    their values as one ``block`` instance, the argument ``name`` (its own options stay as they are)."""
    block_params = block_parameters(block)
    names = [p.name for p in block_params]

    def mount(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for n, p in sig.parameters.items() if n != name]

        @functools.wraps(fn)
        def command(**kw):
            values = block(**{n: kw.pop(n) for n in names})
            return fn(**kw, **{name: values})

        params = block_params + own
        command.__signature__ = sig.replace(parameters=params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return mount
