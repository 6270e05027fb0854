"""SI constants and conversions. Everything inside moesim is SI (s, B, FLOP, B/s, FLOP/s);
human units appear only in YAML key names and at output edges."""

import math
import re
from enum import Enum
from pathlib import PurePath

import numpy as np

from moesim.errors import ConfigError

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 1024.0
MiB = 1024.0**2
GiB = 1024.0**3

US = 1e-6  # microsecond in seconds
MS = 1e-3

TFLOPS = 1e12  # FLOP/s
GBPS = 1e9  # GB/s -> B/s
GBIT = 1e9 / 8  # Gb/s -> B/s

HOUR_S = 3600.0
DAY_S = 86400.0


NA = "n/a"  # what a human table prints for a quantity that does not exist here (never `inf` / `nan`)


def fmt_time(t_s: float) -> str:
    t = float(t_s)
    if not math.isfinite(t):  # a scheme that cannot run, an unstable queue: callers add the reason
        return NA
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} µs"


def fmt_num(x: float, spec: str = "g") -> str:
    """``format(x, spec)``, or "n/a" for NaN/inf (human output is finite: issue 17)."""
    x = float(x)
    return format(x, spec) if math.isfinite(x) else NA


# ---------------------------------------------------------------- durations typed by people
# unit -> (multiplier, divisor) to seconds: a division by an exact power of ten rounds once, so
# 50ms and 50000us both give the float 0.05 (a multiplication by 1e-3 would not)
TIME_UNITS_S = {
    "ns": (1.0, 1e9),
    "us": (1.0, 1e6),
    "µs": (1.0, 1e6),
    "μs": (1.0, 1e6),
    "ms": (1.0, 1e3),
    "s": (1.0, 1.0),
    "sec": (1.0, 1.0),
    "min": (60.0, 1.0),
}
_QUANTITY = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)\s*([^\d\s.+-][^\s]*)?")


# A bare time above these is milliseconds typed without the unit (TPOT 50, TTFT 2000): refused with
# the fix. TPOT > 1 s is < 1 token/s per user; a TTFT target > 60 s is no interactive SLO.
TPOT_MAX_BARE_S = 1.0
TTFT_MAX_BARE_S = 60.0


def parse_time_s(text, *, flag: str, what: str, max_bare_s: float | None = None) -> float:
    """A duration typed on the command line -> seconds: ``50ms``, ``2s``, ``500us``, ``0.05``.
    A bare number is in seconds (the flag's documented unit); one above ``max_bare_s`` (TPOT 50,
    TTFT 2000) is almost surely milliseconds typed without the unit, so it is refused with the fix.
    Non-positive and non-finite values pass through (the consumer's range check names them)."""
    if isinstance(text, (int, float)):
        text = repr(float(text))
    raw = str(text).strip()
    m = _QUANTITY.fullmatch(raw.replace(" ", ""))
    unit = m.group(2) if m else None
    if m is None or (unit is not None and unit.lower() not in TIME_UNITS_S and unit not in TIME_UNITS_S):
        raise ConfigError(
            f"{flag}: {raw!r} is not a duration; write a number with a unit, e.g. 50ms, 2s, 500us "
            f"(a bare number is in seconds)"
        )
    value = float(m.group(1))
    if unit is not None:
        mult, div = TIME_UNITS_S.get(unit, TIME_UNITS_S.get(unit.lower()))
        return value * mult / div
    if max_bare_s is not None and math.isfinite(value) and value > max_bare_s:
        raise ConfigError(
            f"{flag}: {value:g} s is implausible for a {what} (a bare number is in seconds); "
            f"did you mean {value:g}ms? Write the unit: {value:g}ms, {value / 1e3:g}s"
        )
    return value


def fmt_bytes(b: float) -> str:
    b = float(b)
    for unit, f in (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB)):
        if abs(b) >= f:
            return f"{b / f:.2f} {unit}"
    return f"{b:.0f} B"


def jsonable(o, *, squeeze: bool = False):
    """The one JSON cleaner: numpy scalars/arrays -> Python numbers/lists, non-finite floats -> None
    (strict JSON has no NaN/Infinity), booleans stay booleans, dict keys -> str, paths/enums -> str.
    ``squeeze``: a one-element array becomes its scalar (per-configuration values of one estimate)."""

    if o is None or isinstance(o, (bool, str)):
        return o
    if isinstance(o, dict):
        return {str(k): jsonable(v, squeeze=squeeze) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v, squeeze=squeeze) for v in o]
    if isinstance(o, np.ndarray):
        if squeeze and o.size == 1:
            return jsonable(o.reshape(-1)[0])
        return [jsonable(v) for v in o.reshape(-1).tolist()] if squeeze else jsonable(o.tolist())
    if isinstance(o, np.generic):
        o = o.item()
        if isinstance(o, (bool, str)):
            return o
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, int):
        return o
    if isinstance(o, Enum):
        return o.value
    if isinstance(o, PurePath):
        return str(o)
    return o
