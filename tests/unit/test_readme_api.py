"""The README's Python API example runs and prints the figures the README shows.

Reads whatever the README's "## Python API" section holds: each ```python block is executed (in
order, one shared namespace, from the repo root) with stdout captured, and the numbers it prints
are compared (rel 1e-3), and the words around them exactly, with the output the README shows for it: the ```text (or bare ```) block
right after it, else the figures written in comments on or after its print lines. Nothing here
hard-codes a figure: edit the README and this test follows."""

from __future__ import annotations

import contextlib
import io
import math
import re

import pytest

from tests.conftest import ROOT

REL = 1e-3
FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
# a number standing alone (not a piece of a word such as float64 or h800): 2,150  24.4  -3e-5
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")


def api_section(readme: str) -> str:
    m = re.search(r"^## Python API.*?$(.*?)(?=^## |\Z)", readme, re.M | re.S)
    assert m, "README has no '## Python API' section"
    return m.group(1)


def examples(section: str) -> list[tuple[str, str | None]]:
    """(python code, expected output or None) for each ```python block of the section. The expected
    output is the text/console/bare fence that follows with only blank lines in between, else the
    comments on and after the block's print lines (None when there are none)."""
    fences = list(FENCE.finditer(section))
    out = []
    for i, f in enumerate(fences):
        if f.group(1).lower() not in ("python", "py"):
            continue
        nxt = fences[i + 1] if i + 1 < len(fences) else None
        if (
            nxt
            and nxt.group(1).lower() in ("", "text", "console", "output")
            and not section[f.end() : nxt.start()].strip()
        ):
            out.append((f.group(2), nxt.group(2)))
        else:
            out.append((f.group(2), printed_in_comments(f.group(2))))
    return out


def printed_in_comments(code: str) -> str | None:
    """Comment text on a print line, or on comment-only lines right after one."""
    got, after_print = [], False
    for line in code.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if after_print:
                got.append(stripped.lstrip("#"))
            continue
        after_print = "print(" in line
        if after_print and "#" in line.split("print(", 1)[1]:
            got.append(line.rsplit("#", 1)[1])
    return "\n".join(got) if got else None


def numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in NUMBER.findall(text)]


def words(text: str) -> list[str]:
    """The text around the numbers (labels such as the bottleneck name), whitespace-insensitive."""
    return NUMBER.sub(" ", text).split()


def mismatches(shown: list[float], printed: list[float], rel: float = REL) -> list[str]:
    if len(shown) != len(printed):
        return [f"README shows {len(shown)} numbers, the code prints {len(printed)}"]
    return [
        f"#{i}: README {a:g}, printed {b:g}"
        for i, (a, b) in enumerate(zip(shown, printed))
        if not math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
    ]


def test_helpers_can_fail():
    assert numbers("2,150 tokens/s per GPU, 24.4 per user, h800 float64\n32     2260.0") == [2150, 24.4, 32, 2260]
    assert not mismatches([2150, 24.4], [2150.9, 24.41])
    assert words("2,150 tokens/s, bottleneck network") == ["tokens/s,", "bottleneck", "network"]
    assert mismatches([2150, 24.4], [2160, 24.4]) and mismatches([1.0], [1.0, 2.0])
    sec = "x\n```python\nprint(1)\n```\n\n```text\n1\n```\n```python\nprint(2)  # 2\n```\n"
    assert examples(sec) == [("print(1)\n", "1\n"), ("print(2)  # 2\n", " 2")]


def test_readme_python_api_prints_what_the_readme_shows(monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = examples(api_section((ROOT / "README.md").read_text()))
    assert blocks, "the README's Python API section has no ```python block"
    assert any(expected is not None for _, expected in blocks), "the README shows no output for its Python API"
    namespace: dict = {"__name__": "__readme__"}
    problems = []
    for i, (code, expected) in enumerate(blocks):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, f"README.md Python API block {i}", "exec"), namespace)
        if expected is None:
            continue
        bad = mismatches(numbers(expected), numbers(buf.getvalue()))
        if words(expected) != words(buf.getvalue()):
            bad.append(f"words differ: README {words(expected)}, printed {words(buf.getvalue())}")
        if bad:
            problems.append(
                f"block {i}: " + "; ".join(bad) + f"\n--- README shows:\n{expected}--- printed:\n{buf.getvalue()}"
            )
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
