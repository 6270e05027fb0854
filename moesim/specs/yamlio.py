"""The one YAML reader of user files (specs, --set values, studies, traffic, validate cases, loads):
yaml.safe_load semantics with YAML 1.2 core-schema numbers.

PyYAML implements YAML 1.1, where `010` is octal 8, `1_000` is 1000, `1:30` is 90 (base 60) and
`1e3` is a string. YAML 1.2 (spec 1.2.2, sec. 10.3.2 "Tag Resolution", core schema) reads integers
as `[-+]?[0-9]+` (decimal, leading zeros allowed: `010` is 10), `0o[0-7]+`, `0x[0-9a-fA-F]+`, and
floats as `[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?`, `.inf`, `.nan`; anything else
(`1_000`, `1:30`, `0b101`) is a string, which the strict spec builder then names with its field
and allowed range. Booleans, null and the rest keep yaml.safe_load's rules.

Hazards are moesim's own checks, so the error is the same on every PyYAML / libyaml version:
nesting deeper than MAX_DEPTH is a RecursionError (the readers' "nested too deeply" line) and an
integer literal longer than MAX_INT_DIGITS a ValueError (their "unreadable value" line). The
libyaml of PyYAML 6.0.4's wheels stops nesting past 1000 levels with its own error in its own words; whenever libyaml refuses a text, the pure-Python parser (the same grammar, no limits of its
own, events streamed) gives the verdict: too deep, its own YAML error, or the text is read with it.
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


MAX_INT_DIGITS = 4300  # Python's default int-from-text limit (sys.set_int_max_str_digits), fixed here


def _construct_int(loader, node) -> int:
    """A 1.2 core int: decimal (leading zeros are decimal), 0o octal or 0x hex; at most MAX_INT_DIGITS digits."""
    text = loader.construct_scalar(node)
    digits = len(text.lstrip("+-")) - (2 if text.startswith(("0o", "0x")) else 0)
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits, more than {MAX_INT_DIGITS}")
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct_float(loader, node) -> float:
    text = loader.construct_scalar(node).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    return float("nan") if text == ".nan" else float(text)


def _yaml12(base: type) -> type:
    """``base`` (a safe loader) with the YAML 1.2 core schema's int and float resolution (module docstring)."""
    loader = type(
        f"Yaml12{base.__name__}",
        (base,),
        {
            "yaml_implicit_resolvers": {
                first: [(tag, rx) for tag, rx in rules if tag not in (_INT, _FLOAT)]
                for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
            },
            "__doc__": f"{base.__name__} with the YAML 1.2 core schema's int and float resolution.",
        },
    )
    loader.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))
    loader.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+.0123456789"))
    loader.add_constructor(_INT, _construct_int)
    loader.add_constructor(_FLOAT, _construct_float)
    return loader


Yaml12Loader = _yaml12(_BASE)  # the C parser where PyYAML was built with libyaml
_Yaml12PyLoader = Yaml12Loader if _BASE is yaml.SafeLoader else _yaml12(yaml.SafeLoader)


MAX_DEPTH = 200  # nesting levels; a spec has < 10. libyaml's composer recurses in C: ~50,000 levels crash it


def _check_depth(text: str, loader: type = _BASE) -> None:
    """RecursionError (the readers' "nested too deeply" line) beyond MAX_DEPTH, found from the parser's
    events (iterative, stops at the limit) before the composer can overflow the C stack (a segfault)."""
    depth = 0
    for e in yaml.parse(text, Loader=loader):
        if isinstance(e, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise RecursionError(f"YAML nested deeper than {MAX_DEPTH} levels")
        elif isinstance(e, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def load_yaml(text: str):
    """yaml.safe_load(text) with YAML 1.2 numbers; nesting bounded (MAX_DEPTH) and integer literals
    too (MAX_INT_DIGITS) by moesim's own checks (module docstring)."""
    loader = Yaml12Loader
    try:
        _check_depth(text)
    except yaml.YAMLError:
        if _BASE is yaml.SafeLoader:
            raise
        # libyaml refused it (its nesting limit among others, in its own words): the pure-Python
        # parser decides, and reads the text if it finds nothing wrong within MAX_DEPTH
        _check_depth(text, yaml.SafeLoader)
        loader = _Yaml12PyLoader
    return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
