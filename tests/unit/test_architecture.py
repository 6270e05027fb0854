"""The package's shape, read from the source with `ast` (nothing in moesim is imported).

Rules (issue 13): one-way layers, no import cycles, a short top level, no function over 60 lines
of code, no module over 400 lines, imports at module top unless a lazy import says why in a
comment, and ruff lint + format clean. Each rule is a pure function over plain data with a
self-test that shows it CAN fail; the real test then lists every offence at once."""

from __future__ import annotations

import ast
import io
import shutil
import subprocess
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "moesim"

# Lowest first. A module may import its own layer or a lower one.
LAYERS: list[tuple[str, ...]] = [
    ("moesim.units", "moesim.enums", "moesim.errors", "moesim.fsio"),
    ("moesim.specs",),
    ("moesim.grid",),
    ("moesim.workload",),
    ("moesim.perf",),
    ("moesim.balance",),
    ("moesim.schedule",),
    ("moesim.metrics",),
    ("moesim.engine",),
    ("moesim.calibration",),
    ("moesim.simulate",),  # DESIGN.md: above engine and metrics, below analyses
    ("moesim.analyses",),
    ("moesim.report",),
    ("moesim.cli",),
    ("moesim.api", "moesim", "moesim.__main__"),
]
TOP_LEVEL_ALLOWED = {"api", "units", "enums", "errors", "fsio", "__init__", "__main__"}
MAX_FUNCTION_LINES = 60  # lines of code, signature included: no blank, comment-only or docstring lines
MAX_PARAMETERS = 10  # a function's parameters (self / cls not counted; *args and **kw count one each)
MAX_MODULE_LINES = 400  # all lines of the file


# ---------------------------------------------------------------------------------------------
# reading the package


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def package_sources() -> dict[str, tuple[str, str]]:
    """module name -> (path relative to the repo, source text)."""
    return {
        module_name(p): (str(p.relative_to(ROOT)), p.read_text())
        for p in sorted(PKG.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def imported_modules(name: str, source: str, is_package: bool, known: set[str]) -> list[tuple[str, int]]:
    """(target module, line) for every moesim import anywhere in the file, lazy ones included.
    `from a import b` points at a.b when a.b is a module, else at a."""
    out = []
    for node in ast.walk(_tree(source)):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((sub if sub in known else mod, node.lineno))
    return [(m, line) for m, line in out if m == "moesim" or m.startswith("moesim.")]


@cache
def import_edges() -> list[tuple[str, str, str]]:
    """(importer, imported, 'path:line') between moesim modules."""
    srcs = package_sources()
    known = set(srcs)
    edges = []
    for name, (rel, text) in srcs.items():
        is_pkg = rel.endswith("__init__.py")
        for target, line in imported_modules(name, text, is_pkg, known):
            while target not in known and "." in target:  # `import moesim.x.attr`-style oddities
                target = target.rsplit(".", 1)[0]
            if target != name:
                edges.append((name, target, f"{rel}:{line}"))
    return edges


# ---------------------------------------------------------------------------------------------
# the rules (pure functions, each self-tested below)


def layer_of(module: str, layers=LAYERS) -> int | None:
    best = None  # the longest matching prefix decides (moesim.cli vs moesim)
    for i, prefixes in enumerate(layers):
        for p in prefixes:
            hit = module == p or (p != "moesim" and module.startswith(p + "."))
            if hit and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def layer_violations(edges, layers=LAYERS) -> list[str]:
    bad = []
    for src, dst, where in edges:
        ls, ld = layer_of(src, layers), layer_of(dst, layers)
        if ls is None or ld is None:
            missing = src if ls is None else dst
            bad.append(f"{where}: {src} -> {dst} ({missing} is in no layer)")
        elif ld > ls:
            bad.append(f"{where}: {src} (layer {ls}) -> {dst} (layer {ld}, higher)")
    return sorted(set(bad))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself
    (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    nodes = sorted(set(graph) | {d for ds in graph.values() for d in ds})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph.get(v, ()):
                    out.append(sorted(comp))
    return sorted(out)


def extra_top_level(names, allowed=TOP_LEVEL_ALLOWED) -> list[str]:
    return sorted(set(names) - allowed)


@cache
def _tokens(source: str) -> tuple[tokenize.TokenInfo, ...]:
    return tuple(tokenize.generate_tokens(io.StringIO(source).readline))


@cache
def _tree(source: str) -> ast.Module:
    return ast.parse(source)


def _code_lines(source: str) -> set[int]:
    """Line numbers that hold code (not blank, not only a comment)."""
    lines = set()
    for tok in _tokens(source):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def long_functions(source: str, where: str = "<src>", limit: int = MAX_FUNCTION_LINES) -> list[str]:
    code = _code_lines(source)
    bad = []
    for node in ast.walk(_tree(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        lines = set(range(node.lineno, node.end_lineno + 1))  # the signature counts (issue 28)
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            lines -= set(range(first.lineno, first.end_lineno + 1))  # the docstring
        n = len(code & lines)
        if n > limit:
            bad.append(f"{where}:{node.lineno} {node.name}() has {n} lines of code (max {limit})")
    return bad


def many_parameters(source: str, where: str = "<src>", limit: int = MAX_PARAMETERS) -> list[str]:
    """Functions taking more than `limit` parameters: settings travel as one object (issue 28)."""
    bad = []
    for node in ast.walk(_tree(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        n = len(names) + (a.vararg is not None) + (a.kwarg is not None) - (names[:1] in (["self"], ["cls"]))
        if n > limit:
            bad.append(f"{where}:{node.lineno} {node.name}() takes {n} parameters (max {limit})")
    return bad


def _comment_lines(source: str) -> tuple[set[int], set[int]]:
    """(lines holding a comment, lines holding only a comment)."""
    toks = [t for t in _tokens(source) if t.type == tokenize.COMMENT]
    return {t.start[0] for t in toks}, {t.start[0] for t in toks if not t.line[: t.start[1]].strip()}


def uncommented_lazy_imports(source: str, where: str = "<src>") -> list[str]:
    """Imports inside a function or class body need a comment (why lazy) on the same line, on
    the line before, or before the run of adjacent imports they belong to."""
    comments, alone = _comment_lines(source)
    bad = []
    for scope in ast.walk(_tree(source)):
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for body in _bodies(scope):
            covered = False  # the previous statement was an explained import right above
            prev_end = None
            for st in body:
                if not isinstance(st, ast.Import | ast.ImportFrom):
                    covered = False
                    prev_end = st.end_lineno
                    continue
                own = st.lineno - 1 in alone or any(n in comments for n in range(st.lineno, st.end_lineno + 1))
                covered = own or (covered and prev_end == st.lineno - 1)
                if not covered:
                    names = ", ".join(a.name for a in st.names)
                    mod = getattr(st, "module", None)
                    what = f"from {mod} import {names}" if mod else f"import {names}"
                    bad.append(f"{where}:{st.lineno} {what} (lazy, no comment)")
                prev_end = st.end_lineno
    return sorted(set(bad), key=lambda s: (s.split(":")[0], int(s.split(":")[1].split()[0])))


def _bodies(node):
    """Statement lists directly or indirectly under a function/class, stopping at nested scopes
    (they are visited on their own by ast.walk)."""
    out = []
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(node, field, None)
        if stmts:
            out.append(stmts)
            for st in stmts:
                if not isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    out += _bodies(st)
    for h in getattr(node, "handlers", ()):
        out += _bodies(h)
    for c in getattr(node, "cases", ()):
        out += _bodies(c)
    return out


def _fail(title: str, bad: list[str]):
    if bad:
        pytest.fail(f"{title} ({len(bad)}):\n  " + "\n  ".join(bad), pytrace=False)


# ---------------------------------------------------------------------------------------------
# self-tests: each rule can fail


def test_rules_can_fail():
    assert layer_of("moesim.specs.model") == 1 and layer_of("moesim") == 14 and layer_of("moesim.cli.app") == 13
    assert layer_violations([("moesim.specs.model", "moesim.cli.app", "x:1")])
    assert layer_violations([("moesim.specs.model", "moesim.nowhere", "x:1")])
    assert not layer_violations(
        [("moesim.cli.app", "moesim.specs.model", "x:1"), ("moesim.units", "moesim.errors", "x:2")]
    )
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert not cycles({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}})
    assert extra_top_level(["api", "units", "plot"]) == ["plot"]
    long_src = "def f():\n    '''doc'''\n" + "    x = 1\n    # note\n\n" * 60
    assert long_functions(long_src) and not long_functions(long_src, limit=61)  # 60 + the signature
    wide = "def f(" + ", ".join(f"a{i}" for i in range(11)) + "):\n    pass\n"
    assert many_parameters(wide) and not many_parameters(wide, limit=11)
    assert not many_parameters("class C:\n    def m(self, " + ", ".join(f"a{i}" for i in range(10)) + "): pass\n")
    lazy = "def f():\n    y = 1  # not about the import\n    import os\n    # pandas: start-up time\n    import pandas\n    import numpy\n    x = 1\n    import json\n"
    assert [s.split(" ", 1)[1] for s in uncommented_lazy_imports(lazy)] == [
        "import os (lazy, no comment)",
        "import json (lazy, no comment)",
    ]
    assert not uncommented_lazy_imports("import os\n\ndef f():\n    import json  # start-up time\n")


def test_import_resolution():
    known = {"moesim.specs", "moesim.specs.model", "moesim.units"}
    src = "from moesim.specs import model, load\nfrom ..units import x\nimport moesim.units\n"
    got = imported_modules("moesim.specs.loader", src, False, known)
    assert got == [("moesim.specs.model", 1), ("moesim.specs", 1), ("moesim.units", 2), ("moesim.units", 3)]


# ---------------------------------------------------------------------------------------------
# the rules on the package


def test_layers_one_way():
    _fail("imports from a lower layer to a higher one", layer_violations(import_edges()))


def test_no_import_cycles():
    graph: dict[str, set[str]] = {}
    for src, dst, _ in import_edges():
        graph.setdefault(src, set()).add(dst)
    _fail("import cycles", [" -> ".join(c) for c in cycles(graph)])


def test_few_top_level_modules():
    names = [p.stem for p in PKG.glob("*.py")]
    _fail(f"top-level modules beyond {sorted(TOP_LEVEL_ALLOWED)}", extra_top_level(names))


def test_no_long_functions():
    bad = [b for rel, text in package_sources().values() for b in long_functions(text, rel)]
    _fail("functions over the limit", bad)


def test_few_parameters():
    bad = [b for rel, text in package_sources().values() for b in many_parameters(text, rel)]
    _fail("functions taking too many parameters", bad)


def test_no_long_modules():
    bad = []
    for rel, text in package_sources().values():
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            bad.append(f"{rel}: {n} lines (max {MAX_MODULE_LINES})")
    _fail("modules over the limit", bad)


def test_lazy_imports_say_why():
    bad = [b for rel, text in package_sources().values() for b in uncommented_lazy_imports(text, rel)]
    _fail("imports inside functions without a comment saying why", bad)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed")
@pytest.mark.parametrize("cmd", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_clean(cmd):
    targets = [t for t in ("moesim", "tests", "bench", "docs") if (ROOT / t).exists()]
    p = subprocess.run(["ruff", *cmd, *targets], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


# ---------------------------------------------------------------------------- kernel models (issue 28)
MODELS_DIR = PKG / "perf" / "models"
# what a measurement tool ran (collector backends, their routing conventions, per-backend tables):
# data of the calibration import, never priced by perf/ (moesim.calibration)
COLLECTOR_WORDS = (
    "sglang_fused_moe_triton",
    "rank0_clamped",
    "expert_map",
    "RANK0_CLAMPED",
    "RANK0_SEGMENTS",
    "TOKEN_BYTES",
    "GROUPED_ROUTER",
    "EXPANDED_ACT",
    "EXPERT_MAP",
    "collect_moe",
)


def model_name_definitions(sources: dict[str, str]) -> dict[str, list[str]]:
    """{model name: [module files assigning NAME = "<name>" or any module-level X = "<name>"]} over
    `sources` ({file name: text}) for the string constants that are registered model names."""
    from moesim.perf import models  # imported here: the rule helpers above need no moesim import

    out: dict[str, list[str]] = {n: [] for n in models.NAMES}
    for fname, text in sources.items():
        for node in _tree(text).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in out:
                out[node.value.value].append(fname)
    return out


def one_module_per_model(defs: dict[str, list[str]]) -> list[str]:
    return [f"{n}: defined in {files or 'no module'} (want exactly [{n}.py])" for n, files in defs.items()
            if files != [f"{n}.py"]]  # fmt: skip


def collector_words(text: str, where: str = "<src>", words=COLLECTOR_WORDS) -> list[str]:
    return [f"{where}: {w}" for w in words if w in text]


def test_every_schema_model_is_registered_in_its_own_module():
    from moesim.perf import models  # imported here: the layer rules above read sources only
    from moesim.perf.profile import schema as S

    assert set(S.PARAMS) == set(models.NAMES)
    for name, mod in models.registry().items():
        assert mod.NAME == name and Path(mod.__file__).stem == name and isinstance(mod.PARAMS, dict)
    for name in models.KERNEL:
        assert all(callable(getattr(models.model(name), f, None)) for f in ("efficiency", "time", "sides")), name
    for name, mod in models.registry().items():  # each says how it carries over to a sibling GPU
        assert callable(getattr(mod, "transfer", None)), name
    sources = {p.name: p.read_text() for p in MODELS_DIR.glob("*.py")}
    _fail("model names not defined in exactly their own module", one_module_per_model(model_name_definitions(sources)))
    # and nowhere else under moesim/ defines a model name as a constant
    elsewhere = {rel: text for rel, text in package_sources().values() if not rel.startswith("moesim/perf/models/")}
    _fail("model names defined outside moesim/perf/models", [f"{n}: {f}" for n, fs in
          model_name_definitions(elsewhere).items() for f in fs])  # fmt: skip


def test_one_module_per_model_rule_can_fail():
    twice = {"waves_v1.py": 'NAME = "waves_v1"', "other.py": 'X = "waves_v1"'}
    assert any("waves_v1" in b for b in one_module_per_model(model_name_definitions(twice)))
    assert any("peak" in b for b in one_module_per_model(model_name_definitions({})))


def test_no_collector_vocabulary_under_perf():
    bad = [b for rel, text in package_sources().values() if rel.startswith("moesim/perf/")
           for b in collector_words(text, rel)]  # fmt: skip
    _fail("collector vocabulary under moesim/perf (import it as work columns in moesim/calibration)", bad)


def test_collector_vocabulary_rule_can_fail():
    assert collector_words('if shape.get("routing") == "rank0_clamped": ...', "x.py") == ["x.py: rank0_clamped"]
    assert collector_words("pairs = shape['pairs']", "x.py") == []
