"""Integrity checks on an aiconfigurator table before it is imported (issue 27): a table that is not a
measurement of the system it is filed under is refused, never imported.

Two checks, each naming what it found:

* device: every row's `device` column (the GPU the collector ran on, e.g. "NVIDIA H200") must name
  the system's GPU model (the system folder's first word: h200_sxm -> H200, gb200 -> GB200). One row
  naming another model ("NVIDIA H100" in an h200_sxm table) refuses the whole file: a table that is
  mislabelled in part cannot be trusted in the rest. aiconfigurator-core 0.12.0's
  h200_sxm/comm/sglang/0.5.6.post2/wideep_deepep_normal_perf.parquet has 46 such rows.
* copy: the same-named table of ANOTHER system folder (any family, engine or version) holds the same
  bytes: the whole file (sha256), or every measured column (latency, *_us, *_ms, *_gbps, power) of
  this table as a verbatim byte run (parquet stores each column of a row group as one compressed
  chunk; this table's chunks are located from its own footer and searched for in the other file's
  raw bytes). The other systems' files are compared as bytes only: never parsed, so no value of
  another system's table (e.g. the h100_sxm validation set) is read into anything. The same 0.5.6.post2
  table's measured chunks (every column but `device`) occur verbatim in h100_sxm's 0.5.6.post2 table:
  a relabelled copy whose file hash differs only through the device column.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# a GPU model in a device name: one or two letters then 2-4 digits, e.g. "NVIDIA H200" -> H200,
# "NVIDIA GB200" -> GB200, "NVIDIA H100 80GB HBM3" -> H100 ("80GB", "HBM3" do not match)
GPU_MODEL = re.compile(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b")
# columns that hold what the collector timed (aiconfigurator tables: latency in ms, DeepEP *_us,
# bandwidths *_gbps, power); shape columns (num_tokens, hidden_size, ...) legitimately repeat across systems
MEASURED = re.compile(r"^(latency|power)$|_(us|ms|gbps)$")
SHOW_ROWS = 5  # row numbers named in a refusal


def system_model(system: str) -> str:
    """The GPU model of an aiconfigurator system folder: h200_sxm -> H200, gb200 -> GB200, l40s -> L40S."""
    return system.split("_")[0].upper()


def models_in(device: str) -> list[str]:
    return GPU_MODEL.findall(str(device).upper())


def device_problem(f: Path, system: str) -> str:
    """'' when every row's device names the system's GPU model (or names none: empty / unknown);
    else what is wrong: the foreign names, their row count and the first row numbers (1-based)."""
    import pyarrow.parquet as pq  # lazy: pyarrow is the optional extra's

    if "device" not in pq.ParquetFile(f).schema_arrow.names:
        return ""
    devices = pq.read_table(f, columns=["device"]).column("device").to_pylist()
    want = system_model(system)
    bad = [(i + 1, d) for i, d in enumerate(devices) if models_in(d) and want not in models_in(d)]
    if not bad:
        return ""
    names = sorted({str(d) for _, d in bad})
    rows = ", ".join(str(i) for i, _ in bad[:SHOW_ROWS]) + (", ..." if len(bad) > SHOW_ROWS else "")
    return (
        f"{len(bad)} of {len(devices)} rows name the device {' / '.join(repr(n) for n in names)}, not the "
        f"{system} system's {want} (rows {rows})"
    )


def measured_chunks(f: Path, raw: bytes) -> list[tuple[str, bytes]]:
    """(column, raw bytes of its compressed column chunk) of this table's measured columns, every row
    group; columns whose footer statistics say constant (min == max) are left out (no fingerprint)."""
    import pyarrow.parquet as pq  # lazy: pyarrow is the optional extra's

    md = pq.ParquetFile(f).metadata
    out = []
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(g).column(c)
            if not MEASURED.search(col.path_in_schema):
                continue
            st = col.statistics
            if st is not None and st.has_min_max and st.min == st.max:
                continue
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            out.append((col.path_in_schema, raw[start : start + col.total_compressed_size]))
    return out


def others(f: Path, systems: Path, system: str) -> list[Path]:
    """Same-named tables of the other system folders (any family / engine / version), sorted."""
    data = Path(systems) / "data"
    return sorted(p for p in data.glob(f"*/**/{f.name}") if p.relative_to(data).parts[0] != system)


def copy_problem(f: Path, systems: Path, system: str) -> str:
    """'' unless another system's same-named table holds this file's bytes (whole, or every measured
    column chunk); the other files are read as bytes only (module docstring)."""
    raw = Path(f).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    chunks = measured_chunks(f, raw)
    data = Path(systems) / "data"
    for o in others(f, systems, system):
        theirs = o.read_bytes()
        where = "/".join(o.relative_to(data).parts)
        if hashlib.sha256(theirs).hexdigest() == digest:
            return f"byte-identical to {where} (sha256 {digest[:16]})"
        if chunks and all(b in theirs for _, b in chunks):
            cols = ", ".join(sorted({c for c, _ in chunks}))
            return f"its measured columns ({cols}) are byte-for-byte those of {where}: a copy of another system's table"
    return ""


def integrity_problem(f: Path, systems: Path, system: str) -> str:
    """Why `f` (a table of `system`) must not be imported, '' when both checks pass."""
    found = [p for p in (device_problem(f, system), copy_problem(f, systems, system)) if p]
    return "; ".join(found)
