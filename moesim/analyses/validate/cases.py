"""`moesim validate`: predictions vs published figures. Cases are data (YAML); the handlers below
interpret the kinds of `expect` found in them, so adding a case needs no code; the
runner of each kind of case is in `moesim.analyses.validate.runners` (a table).

Case keys: id, source, class (kernel | layer | system | economics; inferred when absent), config
(estimate arguments; `same_as: <id>` + `set: {dotted: value}` derive from another case),
kernel (for `moesim kernel` cases: op + shape flags), kernel_rows (published rows of a measurement
CSV priced by `moesim kernel`: moesim.analyses.validate.kernel_rows), inputs (economics / capacity), expect,
expect_us (layer breakdowns), tolerance (relative) — see validation/*.yaml.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from moesim.analyses.validate.common import Check, num
from moesim.analyses.validate.runners import run_case, with_engine
from moesim.enums import Engine
from moesim.errors import MoesimError, SpecError
from moesim.specs.loader import data_root, read_mapping

__all__ = ["Check", "default_case_files", "load_cases", "run_case", "summary", "validate"]


SERVING_FILE = "simulate_cases.yaml"  # published serving runs, replayed by the simulator (~15 s): --serving


def default_case_files(serving: bool = False) -> list[Path]:
    files = sorted((data_root() / "validation").glob("*cases*.yaml"))
    return [p for p in files if serving or p.name != SERVING_FILE]


def load_cases(paths=None, serving: bool = False) -> list[dict]:
    paths = [Path(p) for p in (paths or default_case_files(serving))]
    cases = []
    for p in paths:
        if not p.exists():
            raise SpecError(f"validate: case file {p} does not exist")
        data = read_mapping(p)
        if not isinstance(data.get("cases"), list):
            raise SpecError(f"{p}: cases: expected a list of cases")
        for c in data["cases"]:
            if not isinstance(c, dict) or "id" not in c:
                raise SpecError(f"{p}: every case needs an id")
            _check_case(p, c)
            c = dict(c)
            c["_file"] = str(p)
            cases.append(c)
    _check_same_as(cases)
    return cases


def _check_same_as(cases: list[dict]) -> None:
    """Every `config.same_as` names a case, and following them never comes back (a case deriving from
    itself, directly or through others, would recurse without end)."""
    by_id: dict = {}
    for c in cases:
        if c["id"] in by_id:
            raise SpecError(f"{c['_file']}: {c['id']}: duplicate case id (also in {by_id[c['id']]['_file']})")
        by_id[c["id"]] = c
    ref_of = {c["id"]: (c.get("config") or {}).get("same_as") for c in cases}
    for c in cases:
        ref = ref_of[c["id"]]
        if ref is not None and ref not in by_id:
            raise SpecError(
                f"{c['_file']}: {c['id']}: config.same_as {ref!r} is not a case id; allowed: "
                f"{', '.join(map(str, sorted(by_id, key=str)))}"
            )
    for c in cases:
        chain, cur = [c["id"]], ref_of[c["id"]]
        while cur is not None:
            if cur in chain:
                loop = " -> ".join(map(str, chain[chain.index(cur) :] + [cur]))
                raise SpecError(
                    f"{c['_file']}: {c['id']}: config.same_as forms a cycle ({loop}); allowed: the id of a case "
                    "that does not derive, directly or through others, from this one"
                )
            chain.append(cur)
            cur = ref_of[cur]


_CONDITION = re.compile(r"(between\s+[-\d.e+]+\s+and\s+[-\d.e+]+|[<>]=?\s*[-\d.e+]+)")
_EXPECT_ALLOWED = (
    "a finite nonzero number, a [lo, hi] range, true/false, a text, or a condition ('> x', 'between a and b')"
)


def _check_expect(p, cid, key: str, metric, v) -> None:
    """One expectation: a relative error needs a finite nonzero figure; ranges and conditions must read."""
    where = f"{p}: {cid}: {key}.{metric}: {v!r}"
    x = num(v)
    if isinstance(x, bool):
        return
    if isinstance(x, float):
        if not math.isfinite(x) or x == 0:
            raise SpecError(f"{where} has no relative error (pred / expected - 1); allowed: {_EXPECT_ALLOWED}")
        return
    if isinstance(x, str):  # a condition, or a text the prediction must equal (bottleneck: network)
        t = x.strip()
        if t.startswith(("<", ">", "between")) and not _CONDITION.fullmatch(t):
            raise SpecError(f"{where} is not a condition; allowed: {_EXPECT_ALLOWED}")
        return
    if isinstance(x, list) and len(x) == 2:
        lo, hi = num(x[0]), num(x[1])
        if all(isinstance(b, float) and math.isfinite(b) for b in (lo, hi)) and lo <= hi:
            return
    raise SpecError(f"{where}; allowed: {_EXPECT_ALLOWED}")


def _check_case(p, c):
    """Shape of one case (mappings where mappings go, a positive tolerance), one line on error."""
    cid = c["id"]
    if not isinstance(cid, (str, int)) or isinstance(cid, bool):
        raise SpecError(f"{p}: id: {cid!r}; allowed a text or integer id")
    for key in ("config", "inputs", "expect", "expect_us", "kernel", "kernel_rows", "deployment", "client"):
        if c.get(key) is not None and not isinstance(c[key], dict):
            raise SpecError(f"{p}: {cid}: {key}: expected a mapping, got {type(c[key]).__name__}")
    ref = (c.get("config") or {}).get("same_as")
    if ref is not None and (not isinstance(ref, (str, int)) or isinstance(ref, bool)):
        raise SpecError(f"{p}: {cid}: config.same_as: {ref!r}; allowed: the id of another case")
    for key in ("expect", "expect_us"):
        for metric, v in (c.get(key) or {}).items():
            _check_expect(p, cid, key, metric, v)
    if "tolerance" in c:
        tol = num(c["tolerance"])
        if isinstance(tol, bool) or not isinstance(tol, float) or not math.isfinite(tol) or tol <= 0:
            raise SpecError(
                f"{p}: {cid}: tolerance: {c['tolerance']!r}; allowed a finite number > 0 (relative error, 0.2 = 20%)"
            )


def validate(paths=None, ids=None, engine=None, serving: bool = False) -> list[Check]:
    """Run the cases (all, or `ids`); `engine` (sglang, trtllm, vllm): the profile every case without
    its own `engine:` key is priced with (default: each runner's, sglang); `serving`: the default
    files include the published serving runs (validation/simulate_cases.yaml, simulated)."""
    if engine is not None:
        engine = Engine.parse(engine, "engine").value
    cases = [with_engine(c, engine) for c in load_cases(paths, serving)]
    by_id = {c["id"]: c for c in cases}
    unknown = sorted(set(ids or ()) - set(map(str, by_id)) - set(by_id), key=str)
    if unknown:
        raise SpecError(f"--case: unknown case id {unknown[0]!r}; allowed: {', '.join(map(str, by_id))}")
    out = []
    for c in cases:
        if ids and c["id"] not in ids:
            continue
        try:
            out += run_case(c, by_id)
        except (MoesimError, ImportError) as e:
            out.append(Check(c["id"], c.get("class", "system"), "error", None, None, math.nan, "-", False, str(e)))
        except (KeyError, TypeError, ValueError) as e:  # a case missing a key or with a wrong type
            out.append(
                Check(
                    c["id"],
                    c.get("class", "system"),
                    "error",
                    None,
                    None,
                    math.nan,
                    "-",
                    False,
                    f"{c['_file']}: malformed case ({e.__class__.__name__}: {e})",
                )
            )
    return out


def summary(checks: list[Check]) -> dict:
    res = {}
    for cls in sorted({c.cls for c in checks}):
        errs = [abs(c.rel_error) for c in checks if c.cls == cls and not math.isnan(c.rel_error)]
        res[cls] = {
            "checks": sum(c.cls == cls for c in checks),
            "passed": sum(c.passed for c in checks if c.cls == cls),
            "median_abs_error": float(np.median(errs)) if errs else None,
            "max_abs_error": float(np.max(errs)) if errs else None,
        }
    return res
