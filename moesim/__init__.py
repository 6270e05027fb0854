"""moesim: analytical performance simulator and capacity planner for MoE LLM inference.

The Python API (`moesim.api`; typed, SI units, keywords checked):

    import moesim
    r = moesim.estimate("deepseek-v3", "h800", ep=144, dp=144, batch=88, context=4989, mtp=1)
    r["tpot_s"]                                  # s per output token
    df = moesim.sweep("deepseek-v3", "h800", axes={"ep": [32, 144], "batch": [32, 64]})
    front = moesim.pareto(df)
    p = moesim.plan("traffic.yaml")
    s = moesim.simulate("deepseek-v3", "h200", workload=moesim.closed_loop(16, 200, 1000, 200), tp=8, ep=8)

`import moesim` stays light: the API loads on first use.
"""

import types as _types

# the simulator package (its __init__ imports nothing): `moesim.simulate(...)` calls the front door
import moesim.simulate as _simulate_package

__version__ = "0.1.0"

_API = (
    "estimate",
    "sweep",
    "pareto",
    "plan",
    "load_model",
    "load_hardware",
    "load_profile",
    "closed_loop",
    "open_loop",
    "read_trace",
    "Pricing",
    "EstimateResult",
    "SimResult",
    "PlanResult",
    "SweepDigest",
    "Workload",
    "UnknownKeywordError",
)


class _SimulatePackage(_types.ModuleType):
    """`moesim.simulate` is the simulator's package and, called, `moesim.api.simulate`."""

    def __call__(self, *args, **keywords):
        from moesim import api  # lazy: the front door imports the whole library

        return api.simulate(*args, **keywords)

    @property
    def __signature__(self):
        import inspect  # lazy: only for help() / IDEs

        from moesim import api  # lazy: as above

        return inspect.signature(api.simulate)


_simulate_package.__class__ = _SimulatePackage
simulate = _simulate_package


def __getattr__(name):
    if name in _API:
        # lazy: the front door imports the engine and analyses; `import moesim` and `moesim --help` stay light
        from moesim import api

        return getattr(api, name)
    raise AttributeError(f"module 'moesim' has no attribute {name!r}")


def __dir__():
    """The API (the lazy names included), so `dir(moesim)` and tab completion list it."""
    return sorted(__all__)


__all__ = ["__version__", "simulate", *_API]
