"""A sweep in pieces: the same rows as `moesim.analyses.sweep.sweep`, in the same order, but
evaluated and handed out a piece of the grid at a time, so memory is bounded by the piece size
(not the grid's): the grid rows of a piece are generated from their indices (`grid_piece`),
evaluated (`evaluate_block`) and filtered, then dropped by the consumer (a file writer, a running
top-k). `probe_frame` gives, before any piece, a few rows with exactly the columns and dtypes the
in-memory frame would have, so a writer can fix its schema up front."""

from __future__ import annotations

import dataclasses

import numpy as np

from moesim.analyses.sweep_block import INT_COLUMNS, evaluate_block
from moesim.analyses.sweep_grid import derived_grid, grid_piece, grid_size
from moesim.analyses.sweep_plan import STREAM_PIECE_ROWS as PIECE_ROWS
from moesim.analyses.sweep_plan import SweepPlan, apply_filters
from moesim.enums import Phase
from moesim.grid.core import Grid
from moesim.grid.validity import check_grid


@dataclasses.dataclass
class Piece:
    """One evaluated piece: its rows after the filters, and the counts before them."""

    frame: object  # pandas.DataFrame
    configurations: int
    valid: int
    fit: int
    first: dict | None  # reason, ep, redundant of the piece's first row (require_valid's message)
    notes: list


def iter_pieces(plan: SweepPlan, rows: int = PIECE_ROWS):
    """Yield a `Piece` per `rows` grid rows of each block, in `sweep`'s row order."""
    import pandas as pd  # lazy: start-up time

    rows = max(1, int(rows))
    for m, h, ph, ov, cm in plan.blocks:
        vals, derive = plan.grids[ph]
        n = grid_size(vals)
        for s in range(0, n, rows):
            g, reason = grid_piece(vals, derive, s, min(n, s + rows))
            cols, notes = evaluate_block((m, h, ph, ov, cm), g, reason, plan)
            df = pd.DataFrame(cols)
            valid = df["valid"].to_numpy(bool)
            fit = int((valid & df["fits"].to_numpy(bool)).sum())
            first = {k: df[k].iloc[0] for k in ("reason", "ep", "redundant")} if len(df) else None
            df = apply_filters(df, plan.flt, plan.keep_invalid)
            yield Piece(df, int(valid.size), int(valid.sum()), fit, first, notes)


def int_columns(plan: SweepPlan) -> set:
    """The integer axes (`INT_COLUMNS`) that are whole numbers on every row of every block, as the
    in-memory frame types them (int64; float64 where one row is not). Derived dp / ep depend on
    the layout axes only, so their small product decides."""
    out = set(INT_COLUMNS)
    for vals, derive in plan.grids.values():
        lay = {a: vals[a] for a in ("tp", "dp", "ep", "moe_tp")}
        g, _ = derived_grid(
            Grid.product(**lay, batch=[1.0], context=[1.0], mtp=[0.0], acceptance=[0.0], redundant=[0.0]), derive
        )
        cols = {"tp": g.tp, "dp": g.dp, "ep": g.ep, "moe_tp": g.moe_tp, "gpus": g.tp * g.dp,
                "mtp": np.asarray(vals["mtp"], float), "redundant": np.asarray(vals["redundant"], float)}  # fmt: skip
        for k, v in cols.items():
            if not (np.all(np.isfinite(v)) and np.all(v == np.round(v))):
                out.discard(k)
    return out


def probe_frame(plan: SweepPlan, rows: int = PIECE_ROWS):
    """One row per block (its first valid row, else its first row), evaluated, concatenated as
    `sweep` concatenates blocks: the in-memory frame's columns, in its order, with its dtypes."""
    import pandas as pd  # lazy: start-up time

    quiet = dataclasses.replace(plan, state={"done": 0, "total": 1, "cb": None})
    frames = []
    for m, h, ph, ov, cm in plan.blocks:
        vals, derive = plan.grids[ph]
        i = _first_valid(m, h, ph, vals, derive, rows)
        g, reason = grid_piece(vals, derive, i, i + 1)
        frames.append(pd.DataFrame(evaluate_block((m, h, ph, ov, cm), g, reason, quiet)[0]))
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    ints = int_columns(plan)
    for k in INT_COLUMNS:
        df[k] = df[k].astype(np.int64 if k in ints else float)
    return df


def _first_valid(m, h, phase, vals, derive, rows) -> int:
    """Index of the first row `check_grid` accepts (0 when none does)."""
    n = grid_size(vals)
    check_phase = Phase.DECODE if phase == Phase.MIXED else phase
    for s in range(0, n, rows):
        g, reason = grid_piece(vals, derive, s, min(n, s + rows))
        ok, _ = check_grid(m, h, g, check_phase)
        if reason is not None:
            ok = ok & (reason == "")
        hit = np.flatnonzero(ok)
        if hit.size:
            return s + int(hit[0])
    return 0
