"""Request-level serving simulation (DESIGN.md: `simulate`): clients -> router -> replicas (or
prefill pools -> KV transfer -> decode pools) -> the engine's scheduler -> forward passes priced
from cost surfaces precomputed by the engine layer. Above engine and metrics, below analyses.

Entry: `moesim.simulate.core.simulate` (grouped settings: `moesim.simulate.options`); the package
itself, called (``moesim.simulate(...)``), is the front door `moesim.api.simulate` (flat keywords)."""
