"""moesim: analytical performance simulator and capacity planner for MoE LLM inference."""

__version__ = "0.1.0"

from moesim.specs import load_hardware, load_model  # noqa: E402  (light: numpy + yaml only)

_API = ("estimate", "sweep", "pareto", "plan")


def __getattr__(name):
    # lazy: the front door imports pandas (sweep); `moesim --help` and spec loading stay fast
    if name in _API:
        # lazy: the front door imports pandas (sweep); `import moesim` and `moesim --help` stay light
        from moesim import api

        return getattr(api, name)
    raise AttributeError(name)


__all__ = ["estimate", "sweep", "pareto", "plan", "load_model", "load_hardware", "__version__"]
