"""User-facing errors: one line naming what is wrong and what is allowed."""

import math


class MoesimError(Exception):
    """Base class for errors caused by user input; the CLI prints them as one line."""


class SpecError(MoesimError):
    """A spec file, flag or combination is invalid."""


class ConfigError(MoesimError):
    """A deployment configuration is invalid (divisibility, ranges)."""


class CalibrationError(MoesimError):
    """A calibration CSV or profile is invalid or does not match."""


def key_text(k) -> str:
    """A mapping key (or any user value) for a one-line message: as is when short and printable, else
    its repr, shortened (a YAML key may hold a newline, be a number, or be too large to print)."""
    try:
        t = str(k)
        if t.isprintable() and len(t) <= 80:
            return t
        t = repr(k)
    except (ValueError, RecursionError):  # an int beyond the 4300-digit str limit; a deeply nested list
        return f"<{type(k).__name__} too large to print>"
    return t if len(t) <= 80 else t[:77] + "..."


def unknown_keys(d: dict, allowed) -> list:
    """The keys of ``d`` not in ``allowed``, in a stable order whatever their types (YAML keys may mix
    text and numbers, which ``sorted`` alone cannot compare)."""
    return sorted((k for k in d if k not in set(allowed)), key=lambda k: (type(k).__name__, key_text(k)))


def check_number(
    name: str,
    v,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    integer: bool = False,
    allow_none: bool = False,
    where: str = "",
    error: type[MoesimError] = ConfigError,
    message: str | None = None,
):
    """The one number validator: -> float (int when ``integer``), or None when allowed.

    Raises ``error`` with one line naming the field (``where`` + ``name``) and the allowed range
    (or ``message``, where a caller's wording is part of its interface). Booleans are not numbers;
    strings holding a number are read (PyYAML reads 608.0e9 as a string)."""
    if message is not None:
        try:
            return check_number(name, v, lo=lo, hi=hi, lo_open=lo_open, integer=integer, allow_none=allow_none)
        except MoesimError:
            raise error(message) from None

    rng = range_text(lo, hi, lo_open, integer)
    if v is None:
        if allow_none:
            return None
        raise error(f"{where}{name}: required (a number); allowed {rng}")
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        raise error(f"{where}{name}: {v!r} is not a number; allowed {rng}")
    if isinstance(v, str):
        try:
            v = float(v.replace("_", ""))
        except ValueError:
            raise error(f"{where}{name}: {v!r} is not a number; allowed {rng}") from None
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):  # key_text: a nested YAML list would overflow repr's recursion
        raise error(f"{where}{name}: {key_text(v)} is not a number; allowed {rng}") from None
    if not math.isfinite(x):
        raise error(f"{where}{name}: must be finite; allowed {rng}")
    if integer and x != round(x):
        raise error(f"{where}{name}: {x:g} is not an integer; allowed {rng}")
    if (lo is not None and (x < lo or (lo_open and x == lo))) or (hi is not None and x > hi):
        raise error(f"{where}{name}: {x:g} is out of range; allowed {rng}")
    return int(round(x)) if integer else x


def range_text(lo=None, hi=None, lo_open=False, integer=False) -> str:
    """'an integer >= 1 and <= 16', 'a number > 0', ... (for error messages)."""
    kind = "an integer" if integer else "a number"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        parts.append(f"<= {hi:g}")
    return f"{kind} {' and '.join(parts)}".strip()


def is_positive_number(v) -> bool:
    """A finite real number > 0 (booleans and non-numbers are not)."""
    try:
        return v is not None and not isinstance(v, bool) and math.isfinite(float(v)) and float(v) > 0
    except (TypeError, ValueError, OverflowError):
        return False
