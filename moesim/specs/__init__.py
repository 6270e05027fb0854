from moesim.specs.hardware import HardwareSpec
from moesim.specs.loader import catalog, load_hardware, load_model, parse_overrides
from moesim.specs.model import AttentionKind, ModelSpec, MoESpec

__all__ = [
    "HardwareSpec",
    "ModelSpec",
    "MoESpec",
    "AttentionKind",
    "load_model",
    "load_hardware",
    "catalog",
    "parse_overrides",
]
