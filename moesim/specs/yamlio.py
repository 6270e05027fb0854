"""The one YAML reader of user files (specs, --set values, studies, traffic, validate cases, loads):
yaml.safe_load semantics with YAML 1.2 core-schema numbers.

PyYAML implements YAML 1.1, where `010` is octal 8, `1_000` is 1000, `1:30` is 90 (base 60) and
`1e3` is a string. YAML 1.2 (spec 1.2.2, sec. 10.3.2 "Tag Resolution", core schema) reads integers
as `[-+]?[0-9]+` (decimal, leading zeros allowed: `010` is 10), `0o[0-7]+`, `0x[0-9a-fA-F]+`, and
floats as `[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?`, `.inf`, `.nan`; anything else
(`1_000`, `1:30`, `0b101`) is a string, which the strict spec builder then names with its field
and allowed range. Booleans, null and the rest keep yaml.safe_load's rules.
"""

from __future__ import annotations

import re

import yaml

_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_INT_RE = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser where built; the resolver is Python's


class Yaml12Loader(_BASE):
    """SafeLoader with the YAML 1.2 core schema's int and float resolution (module docstring)."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in rules if tag not in (_INT, _FLOAT)]
        for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


def _construct_int(loader, node) -> int:
    """A 1.2 core int: decimal (leading zeros are decimal), 0o octal or 0x hex."""
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct_float(loader, node) -> float:
    text = loader.construct_scalar(node).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    return float("nan") if text == ".nan" else float(text)


Yaml12Loader.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))
Yaml12Loader.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+.0123456789"))
Yaml12Loader.add_constructor(_INT, _construct_int)
Yaml12Loader.add_constructor(_FLOAT, _construct_float)


MAX_DEPTH = 200  # nesting levels; a spec has < 10. libyaml's composer recurses in C: ~50,000 levels crash it


def _check_depth(text: str) -> None:
    """RecursionError (the readers' "nested too deeply" line) beyond MAX_DEPTH, found from the parser's
    events (iterative, stops at the limit) before the composer can overflow the C stack (a segfault)."""
    depth = 0
    for e in yaml.parse(text, Loader=_BASE):
        if isinstance(e, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise RecursionError(f"YAML nested deeper than {MAX_DEPTH} levels")
        elif isinstance(e, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def load_yaml(text: str):
    """yaml.safe_load(text) with YAML 1.2 numbers (module docstring); nesting bounded (MAX_DEPTH)."""
    _check_depth(text)
    return yaml.load(text, Loader=Yaml12Loader)  # noqa: S506 - a SafeLoader subclass
