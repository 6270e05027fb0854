"""Strict YAML -> frozen dataclass builder.

Each dataclass field may carry `meta(lo, hi, doc)`; the builder rejects unknown keys, wrong
types, NaN/inf and out-of-range values with one line naming the file, the dotted field and the
allowed range. Nested dataclasses are built recursively; Optional[...] nested specs may be null.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from typing import Any

from moesim.errors import SpecError

_UNION = (typing.Union, types.UnionType)  # Optional[X] and X | None


def meta(lo=None, hi=None, doc: str = "", lo_open: bool = False):
    return {"lo": lo, "hi": hi, "doc": doc, "lo_open": lo_open}


def field(default=dataclasses.MISSING, *, lo=None, hi=None, doc="", lo_open=False, default_factory=dataclasses.MISSING):
    kw = {"metadata": meta(lo, hi, doc, lo_open)}
    if default is not dataclasses.MISSING:
        kw["default"] = default
    if default_factory is not dataclasses.MISSING:
        kw["default_factory"] = default_factory
    return dataclasses.field(**kw)


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 60, 60, 6, 6, 2


def _show(value) -> str:
    """A short one-line repr of a user value (YAML aliases can nest huge structures)."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int beyond the 4300-digit str limit
        return f"<{type(value).__name__} too large to print>"


def _key(k) -> str:
    k = str(k)
    return k if k.isprintable() and len(k) <= 80 else _show(k)


def _where(file: str | None, path: str) -> str:
    return f"{file}: {path}" if file else path


def _range_text(lo, hi, lo_open=False) -> str:
    if lo is not None and hi is not None:
        return f"{'(' if lo_open else '['}{lo}, {hi}]"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"<= {hi}"
    return "any"


def _coerce_scalar(tp, value, where: str, md: dict):
    lo, hi, lo_open = md.get("lo"), md.get("hi"), md.get("lo_open", False)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise SpecError(f"{where}: expected true/false, got {_show(value)}")
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    value = float(value) if tp is float else int(value)
                except ValueError:
                    raise SpecError(
                        f"{where}: expected a number in {_range_text(lo, hi, lo_open)}, got {_show(value)}"
                    ) from None
            else:
                raise SpecError(f"{where}: expected a number in {_range_text(lo, hi, lo_open)}, got {_show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{where}: must be finite, allowed {_range_text(lo, hi, lo_open)}, got {_show(value)}")
        if tp is int:
            if isinstance(value, float):
                if not value.is_integer():
                    raise SpecError(
                        f"{where}: expected an integer in {_range_text(lo, hi, lo_open)}, got {_show(value)}"
                    )
                value = int(value)
        else:
            try:
                value = float(value)
            except OverflowError:
                raise SpecError(
                    f"{where}: must be finite, allowed {_range_text(lo, hi, lo_open)}, got {_show(value)}"
                ) from None
        bad = (lo is not None and (value <= lo if lo_open else value < lo)) or (hi is not None and value > hi)
        if bad:
            raise SpecError(f"{where}: {_show(value)} out of range, allowed {_range_text(lo, hi, lo_open)}")
        return value
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            try:
                return str(value)
            except ValueError:
                raise SpecError(f"{where}: expected text, got {_show(value)}") from None
        raise SpecError(f"{where}: expected text, got {_show(value)}")
    return value


def _reject_unknown(cls, data: dict, fields: dict, file, path: str) -> None:
    """One line for the first key `cls` does not have: a key older spec files carry (the class's
    REMOVED_KEYS) says why it went, any other lists the allowed keys."""
    unknown = sorted(set(map(str, data)) - set(fields))
    removed = [k for k in unknown if k in getattr(cls, "REMOVED_KEYS", {})]
    if removed:
        where = _where(file, (path + "." if path else "") + removed[0])
        raise SpecError(f"{where}: removed from the spec ({cls.REMOVED_KEYS[removed[0]]}); delete the key")
    if unknown:
        allowed = ", ".join(sorted(fields))
        raise SpecError(
            f"{_where(file, (path + '.' if path else '') + _key(unknown[0]))}: unknown key; allowed keys: {allowed}"
        )


def build(cls, data: Any, *, file: str | None = None, path: str = ""):
    """Build dataclass `cls` from a mapping, strictly."""
    if not isinstance(data, dict):
        raise SpecError(f"{_where(file, path or cls.__name__)}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    _reject_unknown(cls, data, fields, file, path)
    kwargs = {}
    for name, f in fields.items():
        where = _where(file, f"{path}.{name}" if path else name)
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{where}: required field is missing")
            continue
        value = data[name]
        tp = hints[name]
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        optional = origin in _UNION and type(None) in args
        if optional:
            if value is None:
                kwargs[name] = None
                continue
            tp = next(a for a in args if a is not type(None))
            origin, args = typing.get_origin(tp), typing.get_args(tp)
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, value, file=file, path=f"{path}.{name}" if path else name)
        elif origin is dict or tp is dict:
            if not isinstance(value, dict):
                raise SpecError(f"{where}: expected a mapping, got {_show(value)}")
            for k, v in value.items():
                if not isinstance(v, (str, int, float, bool, type(None))) or not isinstance(k, (str, int, float, bool)):
                    raise SpecError(f"{where}.{_key(k)}: expected text, got {_show(v)}")
            try:
                kwargs[name] = {str(k): str(v) for k, v in value.items()}
            except ValueError:
                raise SpecError(f"{where}: expected text values, got a number too large to print") from None
        elif origin in (tuple, list) or tp in (tuple, list):
            if not isinstance(value, (list, tuple)):
                raise SpecError(f"{where}: expected a list, got {_show(value)}")
            inner = args[0] if args else float
            kwargs[name] = tuple(_coerce_scalar(inner, v, f"{where}[{i}]", f.metadata) for i, v in enumerate(value))
        elif isinstance(tp, type) and issubclass(tp, str) and tp is not str and hasattr(tp, "parse"):
            if not isinstance(value, str):
                allowed = ", ".join(m.value for m in tp)
                raise SpecError(f"{where}: expected one of {{{allowed}}}, got {_show(value)}")
            kwargs[name] = tp.parse(value, where)
        else:
            kwargs[name] = _coerce_scalar(tp, value, where, f.metadata)
    obj = cls(**kwargs)
    check = getattr(obj, "_validate", None)
    if check:
        check(file=file, path=path)
    return obj


def numeric_field_paths(cls, prefix: str = ""):
    """Dotted paths of every numeric field (used for `sources` coverage and --set help)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = typing.get_args(tp)
        if typing.get_origin(tp) in _UNION:
            tp = next(a for a in args if a is not type(None))
        p = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            out += numeric_field_paths(tp, p + ".")
        elif tp in (int, float):
            out.append(p)
    return out
