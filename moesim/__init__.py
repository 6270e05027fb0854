"""moesim: analytical performance simulator and capacity planner for MoE LLM inference."""

__version__ = "0.1.0"

from moesim.specs import load_hardware, load_model  # noqa: E402  (light: numpy + yaml only)


def __getattr__(name):
    # Heavy entry points load lazily so `moesim --help` stays fast.
    if name == "estimate":
        from moesim.api import estimate

        return estimate
    if name == "sweep":
        from moesim.analyses.sweep import sweep

        return sweep
    if name == "pareto":
        from moesim.analyses.pareto import pareto

        return pareto
    raise AttributeError(name)


__all__ = ["estimate", "sweep", "pareto", "load_model", "load_hardware", "__version__"]
