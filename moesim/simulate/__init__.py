"""Request-level serving simulation (DESIGN.md: `simulate`): clients -> router -> replicas (or
prefill pools -> KV transfer -> decode pools) -> the engine's scheduler -> forward passes priced
from cost surfaces precomputed by the engine layer. Above engine and metrics, below analyses."""
