"""Expert-load CSVs (`eplb --load`, `--expert-skew FILE.csv`): rows = MoE layers, columns = experts.

Read: numbers only; an optional non-numeric header row; blank lines and '#' comments skipped; a
UTF-8 byte-order mark (Excel's "CSV UTF-8") is dropped, a UTF-16 one decodes the file as UTF-16; the separator is ',' or, when a line has
no ',', ';' or a tab (spreadsheets in locales with a decimal comma write ';'). Anything else is one
ConfigError line naming the file, the line, the column and the value: a decimal comma, hex
(0x10), a NaN/inf, a negative load, a ragged row, a file with a header and no numbers.
"""

from __future__ import annotations

import codecs
import csv
import re
from pathlib import Path

import numpy as np

from moesim.errors import ConfigError

SHAPE = "rows = layers, columns = experts"
MAX_LAYER_TOTAL = 1e300  # a layer's loads must sum to a finite float64 (shares are load / total)
_HEX = re.compile(r"^[+-]?0[xX][0-9a-fA-F]+$")
_DECIMAL_COMMA = re.compile(r"^[+-]?\d+,\d+$")


def _delimiter(line: str) -> str:
    """';' if the line has one (then ',' can only be a decimal comma), else ',' or, without one, a tab."""
    if ";" in line:
        return ";"
    return "\t" if "\t" in line and "," not in line else ","


def _lines(p: Path) -> list[tuple[int, list[str]]]:
    """(line number, stripped cells) of the data lines (comments and blank lines dropped)."""
    try:
        raw = p.read_bytes()
        # a byte-order mark names the encoding (Excel: "CSV UTF-8" writes EF BB BF, "Unicode text" FF FE);
        # utf-8-sig drops a UTF-8 BOM, so it is never part of the first cell
        utf16 = raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
        text = raw.decode("utf-16" if utf16 else "utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"load: cannot read {p} ({e.__class__.__name__}); expected a UTF-8 CSV of numbers ({SHAPE})"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"load: cannot read {p} (binary data: NUL bytes); expected a CSV of numbers ({SHAPE})")
    raw = [(i, ln) for i, ln in enumerate(text.splitlines(), start=1) if ln.strip() and not ln.lstrip().startswith("#")]
    if not raw:
        return []
    sep = _delimiter(raw[0][1] if len(raw) == 1 else raw[1][1])  # the first data line (line 1 may be a header)
    try:
        return [(i, [c.strip() for c in next(csv.reader([ln], delimiter=sep))]) for i, ln in raw]
    except csv.Error as e:
        raise ConfigError(f"load: cannot read {p} (CSV: {e}); expected a CSV of numbers ({SHAPE})") from None


def _number(p: Path, lineno: int, col: int, cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        pass
    where = f"load: {p} line {lineno} column {col}: {cell!r}"
    if _HEX.match(cell):
        raise ConfigError(f"{where} is hexadecimal; loads are decimal numbers: write {int(cell, 16)}") from None
    if _DECIMAL_COMMA.match(cell):
        raise ConfigError(f"{where} has a decimal comma; write {cell.replace(',', '.')} (separators: , ; or tab)")
    raise ConfigError(f"{where} is a non-numeric value; expected numbers ({SHAPE})") from None


def load_from_csv(path) -> np.ndarray:
    """[layers, experts] loads (float64, finite, >= 0) from a CSV; see the module docstring."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"load: {p} does not exist or is not a file")
    lines = _lines(p)
    if lines and not _numeric(lines[0][1]):
        header, lines = lines[0], lines[1:]  # a header row (expert names)
        if not lines:
            raise ConfigError(f"load: {p} has a header row (line {header[0]}) and no rows of numbers; expected {SHAPE}")
    if not lines:
        raise ConfigError(f"load: {p} is empty (no rows of numbers); expected {SHAPE}")
    rows = []
    for lineno, cells in lines:
        if rows and len(cells) != len(rows[0]):
            raise ConfigError(
                f"load: {p} line {lineno} has {len(cells)} columns, expected {len(rows[0])} (one column per expert)"
            )
        rows.append([_number(p, lineno, j, c) for j, c in enumerate(cells, start=1)])
    a = np.asarray(rows, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise ConfigError(f"load: {p} contains NaN/inf; loads must be finite and >= 0")
    if np.any(a < 0):
        raise ConfigError(f"load: {p} contains negative loads; loads must be >= 0")
    with np.errstate(over="ignore"):
        total = float(a.sum(axis=1).max())
    if not total <= MAX_LAYER_TOTAL:
        raise ConfigError(f"load: {p}: a layer's loads sum beyond 1e300 (float64 overflow); scale the loads down")
    return a


def _numeric(cells: list[str]) -> bool:
    """Whether a row is data (some cell reads as a number, hex or decimal-comma included; else a header)."""
    return any(_looks_numeric(c) for c in cells)


def _looks_numeric(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return bool(_HEX.match(cell) or _DECIMAL_COMMA.match(cell))
    return True


__all__ = ["load_from_csv"]
