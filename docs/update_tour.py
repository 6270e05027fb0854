#!/usr/bin/env python
"""Regenerate the captured outputs of README.md's command examples (the Five-minute tour).

Every ```bash block that is followed directly (blank lines only in between) by a ```text block is a
pair: the bash block's `moesim ...` lines are run in order and their stdout replaces the text block.
The commands run as `python -m moesim` (PYTHONPATH = a scratch copy of the repository, which is also
the working directory, so `--out docs/img/x.png` and the like never touch the checkout), with
COLUMNS=100 and TERM=dumb (the width the README's rich tables were captured at), 120 s each.

A block cut with a `⋮` line keeps its cut: as many leading lines as the old block had before the
`⋮` line, then that line (its "(N more ...)" count recomputed), then the tail — as many trailing lines
as it had after, or, when the old tail starts at a table's bottom border, everything from the fresh
output's next bottom border on (so a footer that grew a line does not shift the cut into the table).
Timings ("in 0.42 s") do not count as a difference.

    python docs/update_tour.py            # rewrite README.md (atomically)
    python docs/update_tour.py --check    # exit 1 and name the blocks that differ; write nothing
    python docs/update_tour.py --check --diff    # ... and show how they differ

A command that fails (non-zero exit, timeout) stops the script with a one-line error; nothing is
written.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120
ENV = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
CUT = "⋮"
FENCE_RE = re.compile(r"^(\s*)```(\w*)\s*$")
MORE_RE = re.compile(r"\(\d+ more\b")
VOLATILE_RE = re.compile(r"\bin \d+(?:\.\d+)? s\b")  # wall-clock timings in sweep / pareto footers
COPY_IGNORE = shutil.ignore_patterns(".git", ".hypothesis", "__pycache__", ".*_cache", "*.egg-info", ".venv")

Runner = Callable[[str], str]


class Pair(NamedTuple):
    """A ```bash block and the ```text block after it; `start`/`end` index the text block's body lines."""

    line: int  # 1-based line of the ```bash fence
    commands: list[str]
    start: int
    end: int
    old: list[str]


def fenced_blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(language, index of the opening fence, index of the closing fence) of every fenced block."""
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if m:
            j = next((k for k in range(i + 1, len(lines)) if lines[k].strip() == "```"), None)
            if j is None:
                raise SystemExit(f"update_tour: unclosed ``` fence at README line {i + 1}")
            blocks.append((m.group(2), i, j))
            i = j
        i += 1
    return blocks


def commands_of(body: list[str]) -> list[str]:
    """Command lines of a bash block body (backslash continuations joined, comments dropped)."""
    text = re.sub(r"\s*\\\n\s*", " ", "\n".join(body))
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def find_pairs(readme: str) -> list[Pair]:
    """Every ```bash block followed directly (only blank lines between) by a ```text block."""
    lines = readme.split("\n")
    blocks, pairs = fenced_blocks(lines), []
    for (lang, b0, b1), (lang2, t0, t1) in zip(blocks, blocks[1:]):
        if lang == "bash" and lang2 == "text" and all(not ln.strip() for ln in lines[b1 + 1 : t0]):
            commands = commands_of(lines[b0 + 1 : b1])
            if commands:
                pairs.append(Pair(b0 + 1, commands, t0 + 1, t1, lines[t0 + 1 : t1]))
    return pairs


def apply_cut(old: list[str], new: list[str]) -> list[str]:
    """`new` cut the way `old` is: same head length, the `⋮` line (count recomputed), same tail."""
    new = [ln.rstrip() for ln in new]  # rich pads lines to the console width
    while new and not new[-1]:
        new = new[:-1]
    marks = [i for i, ln in enumerate(old) if ln.strip().startswith(CUT)]
    if not marks:
        return new
    k = marks[0]
    head, n_tail = k, len(old) - k - 1
    tail_at = len(new) - n_tail
    if n_tail and old[k + 1].lstrip().startswith("└"):  # the tail starts at the table's bottom border
        tail_at = next((i for i in range(head, len(new)) if new[i].lstrip().startswith("└")), tail_at)
    omitted = tail_at - head
    if omitted <= 0:
        return new
    return new[:head] + [MORE_RE.sub(f"({omitted} more", old[k])] + new[tail_at:]


def same(old: list[str], new: list[str]) -> bool:
    """Equal but for wall-clock timings."""
    return [VOLATILE_RE.sub("in … s", ln) for ln in old] == [VOLATILE_RE.sub("in … s", ln) for ln in new]


def update(readme: str, run: Runner) -> tuple[str, list[tuple[Pair, list[str]]]]:
    """(README with every pair's text block regenerated by `run`, [(pair, its new body)] where it changed).
    Every command runs, top to bottom, before anything is replaced: a failing one (SystemExit) stops it."""
    fresh = [(p, "".join(run(c) for c in p.commands)) for p in find_pairs(readme)]
    changed = [(p, new) for p, out in fresh if not same(p.old, new := apply_cut(p.old, out.split("\n")))]
    lines = readme.split("\n")
    for p, new in reversed(changed):  # bottom up: the indices of earlier blocks stay valid
        lines[p.start : p.end] = new
    return "\n".join(lines), changed


def moesim_runner(workdir: Path, timeout: float = TIMEOUT_S) -> Runner:
    """A runner: `moesim ARGS` as `python -m moesim ARGS` in `workdir` (a scratch copy of the repo)."""
    env = {**os.environ, **ENV, "PYTHONPATH": str(workdir)}

    def run(command: str) -> str:
        args = shlex.split(command)
        if not args or args[0] != "moesim":
            raise SystemExit(f"update_tour: not a moesim command: `{command}`")
        argv = [sys.executable, "-m", "moesim", *args[1:]]
        try:
            p = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"update_tour: `{command}` timed out after {timeout:g} s") from None
        if p.returncode != 0:
            why = (p.stderr.strip() or p.stdout.strip() or "no output").splitlines()[-1]
            raise SystemExit(f"update_tour: `{command}` failed (exit {p.returncode}): {why}")
        return p.stdout

    return run


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def describe(name: str, changed: list[tuple[Pair, list[str]]], diff: bool) -> None:
    """One line per out-of-date block; with `diff`, how it differs."""
    for p, fresh in changed:
        print(f"{name}:{p.line}: output of `{p.commands[0]}` differs")
        if diff:
            old, new = ([f"{x}\n" for x in v] for v in (p.old, fresh))
            sys.stdout.writelines(difflib.unified_diff(old, new, name, "fresh output", n=1))


def main(argv: list[str] | None = None, run: Runner | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if an output is out of date; write nothing")
    ap.add_argument("--diff", action="store_true", help="with --check: show how each block differs")
    a = ap.parse_args(argv)
    readme = a.readme.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="update_tour.") as tmp:
        if run is None:
            work = Path(tmp) / "repo"
            shutil.copytree(ROOT, work, symlinks=True, ignore=COPY_IGNORE)
            run = moesim_runner(work)
        new, changed = update(readme, run)
    n = len(find_pairs(readme))
    if a.check:
        describe(a.readme.name, changed, a.diff)
        print(
            f"{len(changed)} of {n} command outputs out of date" if changed else f"all {n} command outputs up to date"
        )
        return 1 if changed else 0
    if changed:
        write_atomic(a.readme, new)
    print(f"updated {len(changed)} of {n} command outputs in {a.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
