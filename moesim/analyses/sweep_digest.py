"""A sweep's digest: what its printout needs from the whole frame, gathered a piece at a time
(`Digest`): the running top rows (ranked as `rank` ranks the whole frame), the running Pareto
frontier (optional), the GPU budget's bookkeeping, the counts, the engines, the distinct values of
the numeric axes and whether each foldable column is constant. A streamed sweep returns it as a
`SweepDigest` (`moesim.analyses.sweep.sweep(..., out=PATH)`) instead of its rows, which went to the
file. Peak memory: one piece plus the top rows and the frontier, whatever the grid size."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from moesim.analyses import budget as B
from moesim.analyses.pareto import pareto
from moesim.analyses.sweep_plan import UNITS, SweepPlan, none_valid
from moesim.analyses.sweep_stream import Piece, iter_pieces, probe_frame
from moesim.errors import ConfigError
from moesim.fsio.frames import stream_frame, write_frame

# columns a printout moves to its title when one value fills them (latencies only when all missing)
FOLDABLE = (
    "hardware",
    "phase",
    "context",
    "mtp",
    "overlap",
    "ttft_s",
    "tpot_s",
    "tokens_per_s_per_user",
    "fits",
    "reason",
)
LATENCIES = ("ttft_s", "tpot_s", "tokens_per_s_per_user")
DIGEST_FIELDS = ("top", "total_gpus", "gpus_per_node", "frontier")


def rank(df, by="tokens_per_s_per_gpu", head=None):
    """Valid, fitting rows first, each part best `by` first (only the first `head` rows when given)."""
    # one stable lexsort and one take (was assign + sort_values + drop: three copies of a 344k-row frame);
    # numpy sorts NaN last, and -NaN is NaN, so a missing `by` stays last within its part
    ok = np.asarray(df["valid"] & df["fits"], dtype=np.int8)
    key = np.asarray(df[by], dtype=float)
    return df.take(np.lexsort((-key, -ok))[:head])


@dataclasses.dataclass(frozen=True)
class DigestOptions:
    """How a sweep is digested: the `top` best rows kept (>= 1; best `total_tokens_per_s` first under
    a budget, else `tokens_per_s_per_gpu`), a GPU budget (`total_gpus`: whole instances in at most
    that many GPUs; `gpus_per_node`: the node size they are allocated in, default the hardware's
    NVLink domain) and the Pareto `frontier` to keep (None: none; True: `pareto`'s defaults; a
    mapping: its x, y, group_by keywords)."""

    top: int = 20
    total_gpus: int | None = None
    gpus_per_node: int | None = None
    frontier: Mapping[str, Any] | bool | None = None

    def __post_init__(self):
        if isinstance(self.top, bool) or not isinstance(self.top, (int, np.integer)) or self.top < 0:
            raise ConfigError(f"top: must be a whole number >= 0 (rows kept); got {self.top!r}")
        if not (self.frontier is None or isinstance(self.frontier, (bool, Mapping))):
            raise ConfigError(f"frontier: must be True or a mapping of pareto's x, y, group_by; got {self.frontier!r}")

    @classmethod
    def pop(cls, keywords: dict) -> DigestOptions:
        """The digest's keywords (`DIGEST_FIELDS`) taken out of `keywords` -> DigestOptions."""
        return cls(**{k: keywords.pop(k) for k in DIGEST_FIELDS if k in keywords})

    @property
    def pareto_keywords(self) -> dict | None:
        if self.frontier is None or self.frontier is False:
            return None
        return {} if self.frontier is True else dict(self.frontier)

    def budget(self, plan: SweepPlan) -> tuple[int, int] | None:
        """(total GPUs, GPUs per node) of the budget (None without one); the node: `budget_node`."""
        if self.total_gpus is None:
            return None
        total, gpn = B.check_budget(self.total_gpus, self.gpus_per_node)
        return total, budget_node(plan, gpn)


@dataclasses.dataclass(frozen=True)
class SweepDigest:
    """What `sweep(..., out=PATH)` returns instead of the rows (those are in `out`):

    top: DataFrame, the best `DigestOptions.top` rows, valid and fitting first, best `by` first,
    with the whole sweep's counts in attrs (what `moesim.report.sweep` prints from); front: the
    Pareto frontier (a DataFrame) when asked, else None; rows: counts of the rows written (after
    the filters and the budget): configurations, valid, fit; evaluated: the same before the filters;
    budget: total_gpus, gpus_per_node, dropped (rows needing more GPUs), or None; notes: the sweep's
    notes (e.g. calibration fallbacks); engines: the engines whose profiles priced the rows."""

    top: Any
    front: Any
    out: Path | None
    by: str
    rows: dict
    evaluated: dict
    budget: dict | None
    notes: tuple
    engines: tuple

    @property
    def best(self) -> dict | None:
        """The best valid row that fits (a dict of its columns), or None."""
        ok = self.top["valid"] & self.top["fits"]
        return self.top.loc[ok].iloc[0].to_dict() if ok.any() else None


MULTI = object()  # a foldable column with more than one value


class Digest:
    """What the sweep printout needs from the whole frame, gathered piece by piece."""

    def __init__(self, keep: int, budget=None, frontier: dict | None = None):
        self.keep = max(1, int(keep))
        self.budget = budget  # (total GPUs, GPUs per node) or None
        self.frontier = frontier  # `pareto` keywords (x, y, group_by): keep the running frontier
        self.top = self.front = None
        self.rows = {"configurations": 0, "valid": 0, "fit": 0}
        self.evaluated = {"configurations": 0, "valid": 0, "fit": 0}
        self.engines, self.notes, self.first, self.dropped = set(), [], None, 0
        self.axis_values = {k: set() for k in B.NUMERIC_AXES}
        self.const: dict = {}  # foldable column -> [value or MULTI, all missing]

    @property
    def by(self) -> str:
        return "total_tokens_per_s" if self.budget else "tokens_per_s_per_gpu"

    def add(self, piece: Piece):
        """Count a piece and keep its best rows -> the piece's rows (after the GPU budget)."""
        ev = self.evaluated
        ev["configurations"] += piece.configurations
        ev["valid"] += piece.valid
        ev["fit"] += piece.fit
        self.notes += [n for n in piece.notes if n not in self.notes]
        if self.first is None and piece.first is not None:
            self.first = piece.first
        df = piece.frame
        if self.budget:
            d = B.apply_budget(df, *self.budget)
            self.dropped += d.attrs["budget"]["dropped"]
            df = d
        if self.frontier is not None:  # the frontier of the union = that of (frontier so far + piece)
            f = pareto(df, **self.frontier)
            self.front = f if self.front is None else pareto(_concat(self.front, f), **self.frontier)
        if len(df):
            self._count(df)
            best = rank(df, self.by, self.keep)
            self.top = best if self.top is None else rank(_concat(self.top, best), self.by, self.keep)
        return df

    def _count(self, df) -> None:
        valid = df["valid"].to_numpy(bool)
        self.rows["configurations"] += len(df)
        self.rows["valid"] += int(valid.sum())
        self.rows["fit"] += int((valid & df["fits"].to_numpy(bool)).sum())
        self.engines.update(df["engine"].unique().tolist())
        for k, seen in self.axis_values.items():
            if k in df.columns:
                seen.update(df[k].unique().tolist())
        for name in FOLDABLE:
            if name in df.columns:
                self._fold(name, df[name])

    def _fold(self, name, col) -> None:
        """Keep a column's one value while it has one (missing values compare equal)."""
        st = self.const.setdefault(name, [None, True, False])  # value, all missing, seen
        if st[0] is MULTI:
            return
        if name in LATENCIES:
            st[1] = st[1] and bool(col.isna().all())
        if col.nunique(dropna=False) > 1:
            st[0] = MULTI
            return
        v = col.iloc[0]
        if not st[2]:
            st[0], st[2] = v, True
        elif not _same(v, st[0]):
            st[0] = MULTI

    def check(self, plan, model) -> None:
        """require_valid: no configuration valid -> `none_valid`'s error (raised before the
        atomic write completes, so the old --out file stays)."""
        if plan.require_valid and self.evaluated["configurations"] and not self.evaluated["valid"]:
            raise none_valid(model, self.evaluated["configurations"], self.first)

    def frame(self, plan):
        """The top rows, ranked, with the attrs `summary` / `print_table` / `searched_lines` read."""
        top = self.top if self.top is not None else self._empty(plan)
        top = top.reset_index(drop=True)
        top.attrs["evaluated"] = dict(self.evaluated)
        top.attrs["notes"] = list(self.notes)
        top.attrs["filters"] = {k: v for k, v in plan.flt.items() if v is not None and v is not False}
        top.attrs["units"] = dict(UNITS)
        top.attrs["defaulted_axes"] = list(plan.defaulted)
        top.attrs["rows"] = {**self.rows, "engines": sorted(map(str, self.engines))}
        top.attrs["constants"] = {k: (v[0] is not MULTI, v[0], v[1]) for k, v in self.const.items()}
        top.attrs["axis_values"] = {k: sorted(v) for k, v in self.axis_values.items() if v}
        if self.budget:
            total, gpn = self.budget
            top.attrs["budget"] = {"total_gpus": total, "gpus_per_node": gpn, "dropped": self.dropped}
        return top

    def result(self, plan, out=None) -> SweepDigest:
        """The digest as returned to the caller (see `SweepDigest`)."""
        top = self.frame(plan)
        rows = top.attrs["rows"]
        return SweepDigest(
            top, self.front, None if out is None else Path(out), self.by,
            {k: rows[k] for k in ("configurations", "valid", "fit")}, dict(self.evaluated),
            top.attrs.get("budget"), tuple(self.notes), tuple(rows["engines"]),
        )  # fmt: skip

    def _empty(self, plan):
        df = probe_frame(plan).head(0)
        return B.apply_budget(df, *self.budget) if self.budget else df


def _same(a, b) -> bool:
    """Two cell values equal, missing values (None, NaN) equal to each other."""
    import pandas as pd  # lazy

    na, nb = bool(pd.isna(a)), bool(pd.isna(b))
    return na and nb if (na or nb) else bool(a == b)


def _concat(a, b):
    import pandas as pd  # lazy

    return pd.concat([a, b], ignore_index=True, sort=False)


def budget_node(plan, gpus_per_node):
    """The budget's node size: `gpus_per_node`, else the NVLink domain of the swept hardware (one
    size for all)."""
    if gpus_per_node is not None:
        return gpus_per_node
    doms = {h.domain_gpus for _, h, *_ in plan.blocks}
    if len(doms) > 1:
        raise ConfigError("--total-gpus over several hardware with different node sizes: give --gpus-per-node")
    return next(iter(doms))


def stream_plan(plan: SweepPlan, opts: DigestOptions, out=None) -> SweepDigest:
    """Evaluate `plan` piece by piece (`iter_pieces`), each piece through the digest and, when `out`
    is given, into `out` (.csv / .parquet, rows in grid order, one atomic write: an error leaves the
    old file) -> the digest."""
    budget = opts.budget(plan)
    digest = Digest(opts.top, budget, opts.pareto_keywords)

    def pieces():
        for p in iter_pieces(plan):
            yield digest.add(p)
        digest.check(plan, plan.blocks[0][0])

    rows = pieces()
    if out is None:
        for _ in rows:
            pass
    else:
        probe = probe_frame(plan)
        if budget:
            probe = B.apply_budget(probe, *budget)
        stream_frame(rows, probe, out, allowed=".csv or .parquet path")
    return digest.result(plan, out)


def digest_frame(df, plan: SweepPlan, opts: DigestOptions, out=None) -> SweepDigest:
    """An evaluated in-memory frame (`evaluate_plan`) as one piece through the digest; when `out` is
    given, its rows (within the budget), ranked, written to `out` (`write_frame`: .csv / .parquet /
    .json) -> the digest."""
    digest = Digest(opts.top, opts.budget(plan), opts.pareto_keywords)
    ev = df.attrs["evaluated"]
    rows = digest.add(Piece(df, ev["configurations"], ev["valid"], ev["fit"], None, list(df.attrs["notes"])))
    if out is not None:
        write_frame(rank(rows, digest.by), out, allowed=".csv, .parquet or .json path")
    return digest.result(plan, out)
