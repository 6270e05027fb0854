"""Fuzz the other input files (issue 17 §6): study YAML (`sweep --study`), traffic YAML (`plan
--traffic`), validate case files and expert-load CSVs (`eplb --load`, `--expert-skew FILE.csv`).

Hypothesis draws a document (a valid base, random YAML of odd values, or text damage of the base)
and the encodings users produce: a UTF-8 byte-order mark, ';' or tab separators, hex numbers, CRLF.
Every case must end in a value or a clean error (a MoesimError of one short line); never another
exception. Specific properties pin what is read correctly: a BOM or CRLF changes nothing, ';' and tab
CSV separators read like ',', and hex in a CSV or in a study's text axis is named ("hexadecimal")
with the decimal to write, never reported as "empty".
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.analyses.validate.cases import load_cases
from moesim.balance.eplb import load_from_csv
from moesim.errors import MoesimError
from moesim.specs.study import load_study
from moesim.specs.traffic import load_traffic
from tests.property.test_fuzz import check_error, mutate, mutate_text, weird_value

ROOT = Path(__file__).resolve().parents[2]
TRAFFIC = (ROOT / "examples" / "traffic_deepseek_day.yaml").read_text()
STUDY = """name: fuzz
model: deepseek-v3
hardware: h800
phase: decode
axes:
  tp: [1]
  ep: [8, 16]
  batch: "8,16:64"
  context: [4096]
filters: {max_tpot_s: 0.1, only_fits: false}
set: {hardware.rdma_bw_GBps: 50}
"""
CASES = """cases:
- id: a
  config: {batch: 8, ep: 16, dp: 16}
  expect: {tokens_per_s_per_gpu: 1000, bottleneck: memory, fits: true}
  tolerance: 0.5
- id: b
  config: {same_as: a, set: {hardware.rdma_bw_GBps: 100}}
  expect: {tpot_s: "< 1.0", max_batch: [1, 100000]}
"""
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
DEEP = settings(FAST, max_examples=int(os.environ.get("MOESIM_FUZZ_EXAMPLES", "400")))  # slow suite; env: deep run


_TMP = tempfile.TemporaryDirectory(prefix="moesim_fuzz_")  # removed at exit; one file per suffix, rewritten


def _write(text_or_bytes, suffix: str) -> Path:
    p = Path(_TMP.name) / f"input{suffix}"
    if isinstance(text_or_bytes, bytes):
        p.write_bytes(text_or_bytes)
    else:
        p.write_text(text_or_bytes, encoding="utf-8", newline="")
    return p


def _outcome(fn, path: Path, ctx: str):
    """fn(path) -> ('ok', value) or ('error', message); any other exception fails the test."""
    try:
        return "ok", fn(path)
    except MoesimError as e:
        check_error(e, ctx)
        return "error", str(e)


def _encode(text: str, bom: bool, crlf: bool) -> bytes:
    if crlf:
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8", "surrogatepass")


@st.composite
def yaml_documents(draw, base: str):
    """The base, a structured mutation of it, text damage of it, or a random mapping of odd values."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["base", "mutate", "text", "random", "extreme"]))
    if kind == "base":
        return base
    if kind == "extreme":  # what a YAML reader chokes on: 5000-digit ints, NULs, aliases (depth: the bad-input table)
        lines = base.splitlines(keepends=True)
        i = rng.randrange(len(lines) + 1)
        bad = rng.choice(["k: " + "9" * 5000 + "\n", "k: \x00\n", "\ufeff", "a: &x [*x]\n"])
        return "".join(lines[:i] + [bad] + lines[i:])
    if kind == "mutate":
        data = mutate(rng, yaml.safe_load(base), draw(st.integers(1, 4)))
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000)
    if kind == "text":
        return mutate_text(rng, base)
    return yaml.safe_dump({f"k{i}": weird_value(rng) for i in range(rng.randint(0, 5))}, allow_unicode=True)


def _fuzz_yaml(loader, base, doc, bom, crlf, suffix=".yaml"):
    p = _write(_encode(doc, bom, crlf), suffix)
    return _outcome(loader, p, f"{loader.__name__} on {doc[:200]!r} (bom={bom}, crlf={crlf})")


def _fuzz_study(doc, bom, crlf):
    _fuzz_yaml(load_study, STUDY, doc, bom, crlf)


def _fuzz_traffic(doc, bom, crlf):
    _fuzz_yaml(load_traffic, TRAFFIC, doc, bom, crlf)


def _fuzz_cases(doc, bom, crlf):
    _fuzz_yaml(lambda p: load_cases([p]), CASES, doc, bom, crlf)


@pytest.mark.parametrize(
    "loader, base", [(load_study, STUDY), (load_traffic, TRAFFIC), (lambda p: load_cases([p]), CASES)]
)
def test_bom_and_crlf_read_like_plain_utf8(loader, base):
    plain = _fuzz_yaml(loader, base, base, False, False)
    assert plain[0] == "ok", plain
    for bom, crlf in ((True, False), (False, True), (True, True)):
        got = _fuzz_yaml(loader, base, base, bom, crlf)
        assert got[0] == "ok" and repr(got[1]) == repr(plain[1]).replace(str(_last_path(plain)), str(_last_path(got)))


def _last_path(outcome):
    """The file a loaded value names (validate cases carry `_file`); '' when none."""
    v = outcome[1]
    return v[0].get("_file", "") if isinstance(v, list) and v and isinstance(v[0], dict) else ""


def test_study_hex_and_semicolons():
    """YAML reads a bare 0x10 as 16 (read correctly); in a text axis a hex value is named; ';'
    separates text axis values like ','."""
    ok = load_study(_write(STUDY.replace("ep: [8, 16]", "ep: [0x10]").replace('"8,16:64"', '"8;16"'), ".yaml"))
    assert ok["axes"]["ep"] == [16.0] and ok["axes"]["batch"] == [8.0, 16.0]
    with pytest.raises(MoesimError, match=r"hexadecimal.*write 16"):
        load_study(_write(STUDY.replace('"8,16:64"', '"8,0x10"'), ".yaml"))


# ------------------------------------------------------------------------------ load CSVs
@st.composite
def load_tables(draw):
    layers, experts = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    values = draw(
        st.lists(
            st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)),
            min_size=layers * experts,
            max_size=layers * experts,
        )
    )
    return np.array(values, dtype=float).reshape(layers, experts)


def _csv_text(a: np.ndarray, sep: str, header: bool) -> str:
    rows = ([sep.join(f"e{j}" for j in range(a.shape[1]))] if header else []) + [
        sep.join(repr(float(x)) for x in r) for r in a
    ]
    return "\n".join(rows) + "\n"


def _csv_separators(a, sep, header, bom):
    """BOM, ';' and tab separators, a header row: read exactly as the plain comma table."""
    got = load_from_csv(_write(_encode(_csv_text(a, sep, header), bom, False), ".csv"))
    np.testing.assert_array_equal(got, a)


def _csv_hex(a, sep, bom):
    """A hex value is named with the decimal to write, never 'empty'."""
    text = _csv_text(a, sep, False)
    first, rest = text.split(sep, 1) if sep in text else (text.rstrip("\n"), None)
    bad = hex(int(a[0, 0]) + 1)
    damaged = bad + (sep + rest if rest is not None else "\n")
    kind, msg = _outcome(load_from_csv, _write(_encode(damaged, bom, False), ".csv"), damaged)
    assert kind == "error" and "hexadecimal" in msg and bad in msg and str(int(a[0, 0]) + 1) in msg, msg
    assert "empty" not in msg


def _csv_damage(a, seed, bom, crlf):
    """Text damage of a valid table: a table of numbers >= 0 or one clean error line."""
    rng = random.Random(seed)
    text = mutate_text(rng, _csv_text(a, rng.choice([",", ";", "\t"]), rng.random() < 0.3))
    kind, v = _outcome(load_from_csv, _write(_encode(text, bom, crlf), ".csv"), repr(text))
    if kind == "ok":
        assert v.ndim == 2 and v.size and np.all(np.isfinite(v)) and np.all(v >= 0)


# name -> (property, its strategies); each runs FAST in the fast suite and DEEP in the slow one
FUZZERS = {
    "study": (_fuzz_study, dict(doc=yaml_documents(STUDY), bom=st.booleans(), crlf=st.booleans())),
    "traffic": (_fuzz_traffic, dict(doc=yaml_documents(TRAFFIC), bom=st.booleans(), crlf=st.booleans())),
    "cases": (_fuzz_cases, dict(doc=yaml_documents(CASES), bom=st.booleans(), crlf=st.booleans())),
    "csv-separators": (
        _csv_separators,
        dict(a=load_tables(), sep=st.sampled_from([",", ";", "\t"]), header=st.booleans(), bom=st.booleans()),
    ),
    "csv-hex": (_csv_hex, dict(a=load_tables(), sep=st.sampled_from([",", ";"]), bom=st.booleans())),
    "csv-damage": (
        _csv_damage,
        dict(a=load_tables(), seed=st.integers(0, 2**32 - 1), bom=st.booleans(), crlf=st.booleans()),
    ),
}


@pytest.mark.parametrize("name", FUZZERS)
def test_fuzz(name):
    fn, strategies = FUZZERS[name]
    FAST(given(**strategies)(fn))()


@pytest.mark.slow
@pytest.mark.parametrize("name", FUZZERS)
def test_fuzz_many(name):
    fn, strategies = FUZZERS[name]
    DEEP(given(**strategies)(fn))()


def test_load_csv_named_problems(tmp_path):
    """What used to read as 'empty' or 'non-numeric' is named: decimal commas, hex, header only, UTF-16."""
    cases = {
        "1,5;2,5\n": "decimal comma",
        "0x10,2\n": "hexadecimal",
        "e0,e1\n": "header row",
        "\ufeffe0;e1\n": "header row",
        "1e308,1e308\n": "overflow",
    }
    for i, (text, needle) in enumerate(cases.items()):
        p = tmp_path / f"c{i}.csv"
        p.write_text(text, encoding="utf-8")
        with pytest.raises(MoesimError, match=needle):
            load_from_csv(p)
    p = tmp_path / "u16.csv"
    p.write_bytes("1,2\n".encode("utf-16"))
    np.testing.assert_array_equal(load_from_csv(p), [[1.0, 2.0]])
    _csv_separators(np.array([[1.0, 2.0]]), ";", False, True)
