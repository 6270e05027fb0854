"""`moesim sweep` in bounded memory: the grid is evaluated a piece at a time
(`moesim.analyses.sweep_stream`); each piece goes to the `--out` file (.csv / .parquet, one atomic
write) and into a `Digest` that keeps only what the printout needs: the running top rows (ranked as
`report.sweep.rank` ranks the whole frame), the counts, the engines, the distinct values of the
numeric axes and whether each foldable column is constant. Peak memory is one piece plus the top
rows, whatever the grid size. The file's rows are in evaluation (grid) order."""

from __future__ import annotations

from moesim.analyses import budget as B
from moesim.analyses.pareto import pareto
from moesim.analyses.sweep import UNITS, none_valid
from moesim.analyses.sweep_stream import Piece, iter_pieces, probe_frame
from moesim.errors import ConfigError
from moesim.report.frame_stream import stream_frame
from moesim.report.sweep import FOLDABLE, LATENCIES, rank

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
    """--gpus-per-node, else the NVLink domain of the swept hardware (one size for all)."""
    if gpus_per_node is not None:
        return gpus_per_node
    doms = {h.domain_gpus for _, h, *_ in plan.blocks}
    if len(doms) > 1:
        raise ConfigError("--total-gpus over several hardware with different node sizes: give --gpus-per-node")
    return next(iter(doms))


def stream_sweep(plan, model, *, top: int, out=None, budget=None, frontier=None, allowed=".csv or .parquet path"):
    """Evaluate `plan` piece by piece; write the rows to `out` (.csv / .parquet) when given ->
    (the ranked top rows with the whole sweep's counts in attrs (see `Digest.frame`), the Pareto
    frontier of `frontier`'s keywords or None)."""
    digest = Digest(top, budget, frontier)

    def pieces():
        for p in iter_pieces(plan):
            yield digest.add(p)
        digest.check(plan, model)

    rows = pieces()
    if out is None:
        for _ in rows:
            pass
    else:
        probe = probe_frame(plan)
        if budget:
            probe = B.apply_budget(probe, *budget)
        stream_frame(rows, probe, out, allowed=allowed)
    return digest.frame(plan), digest.front
