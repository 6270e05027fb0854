"""Grid: struct-of-arrays of deployment axes, broadcast to one 1-D shape.

Every cost function takes a Grid and returns arrays shaped like it; invalid combinations are a
boolean mask with a reason, never an exception in the middle of a sweep.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

AXES = ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "acceptance", "redundant")
INT_AXES = {"tp", "dp", "ep", "moe_tp", "mtp", "redundant"}


@dataclass(frozen=True)
class Grid:
    tp: np.ndarray  # attention tensor parallel degree
    dp: np.ndarray  # attention data-parallel groups
    ep: np.ndarray  # expert-parallel ranks
    moe_tp: np.ndarray  # tensor parallel inside each expert
    batch: np.ndarray  # decode: requests per DP group; prefill: tokens per DP group
    context: np.ndarray  # decode: mean KV length per request; prefill: prompt length
    mtp: np.ndarray  # draft tokens per step
    acceptance: np.ndarray  # per-draft acceptance probability
    redundant: np.ndarray  # redundant expert slots (EPLB replicas), whole EP group

    def __post_init__(self):
        arrays = [np.asarray(getattr(self, a), dtype=float) for a in AXES]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        for a, arr in zip(AXES, arrays):
            object.__setattr__(self, a, np.ascontiguousarray(np.broadcast_to(arr, shape).reshape(-1)))

    @property
    def size(self) -> int:
        return int(self.tp.size)

    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.dp

    @property
    def q_len(self) -> np.ndarray:
        return 1.0 + self.mtp

    @property
    def tokens_per_step(self) -> np.ndarray:
        """Accepted tokens per request per step: 1 + sum of acceptance^i (chained drafts)."""
        i = np.arange(1, int(np.max(self.mtp, initial=0)) + 1)
        if i.size == 0:
            return np.ones(self.size)
        pw = self.acceptance[:, None] ** i[None, :]
        return 1.0 + np.sum(np.where(i[None, :] <= self.mtp[:, None], pw, 0.0), axis=1)

    def take(self, idx) -> Grid:
        return Grid(**{a: getattr(self, a)[idx] for a in AXES})

    def to_dict(self) -> dict:
        return {a: getattr(self, a) for a in AXES}

    @classmethod
    def single(cls, **kw) -> Grid:
        return cls(**{a: np.asarray([kw[a]], dtype=float) for a in AXES})

    @classmethod
    def product(cls, **axes) -> Grid:
        """Cartesian product of the given axis values (lists or scalars)."""
        missing = [a for a in AXES if a not in axes]
        if missing:
            raise TypeError(f"Grid.product missing axes: {missing}")
        lists = [np.atleast_1d(np.asarray(axes[a], dtype=float)) for a in AXES]
        mesh = np.meshgrid(*lists, indexing="ij")
        return cls(**{a: m.reshape(-1) for a, m in zip(AXES, mesh)})


def replace(grid: Grid, **kw) -> Grid:
    return dataclasses.replace(grid, **kw)


def distinct_rows(grid: Grid, axes, max_share: float = 1.0, min_size: int = 0):
    """(first index of each distinct row over `axes`, inverse) — or None when the grid is smaller
    than `min_size` or more than `max_share` of its rows are distinct (sharing would not pay).
    Exact: each axis is coded by its distinct values, a row by the mixed-radix number of its codes."""
    n = grid.size
    if n < min_size:
        return None
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for a in axes:
        values, codes = np.unique(getattr(grid, a), return_inverse=True)
        if radix * len(values) >= 2**62:
            return None
        key = key * len(values) + codes.reshape(-1)
        radix *= len(values)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if first.size > max_share * n:
        return None
    return first, inverse.reshape(-1)


def unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, axis=0, return_inverse=True)`` of a 2-D float array, ~10x faster: each
    column is coded by its sorted distinct values and a row by the mixed-radix number of its codes,
    whose sorted order is the rows' lexicographic order, so the distinct rows come out in the same
    order as numpy's (which sorts the rows as opaque byte strings; slow). -> (distinct rows, inverse)."""
    key = np.asarray(key)
    if key.ndim != 2 or key.shape[0] == 0 or not np.isfinite(key).all():
        u, inv = np.unique(key, axis=0, return_inverse=True)
        return u, inv.reshape(-1)
    code = np.zeros(key.shape[0], dtype=np.int64)
    radix = 1
    for j in range(key.shape[1]):
        values, c = np.unique(key[:, j], return_inverse=True)
        radix *= len(values)
        if radix >= 2**62:  # too many combinations for one int64: numpy's way
            u, inv = np.unique(key, axis=0, return_inverse=True)
            return u, inv.reshape(-1)
        code = code * len(values) + c.reshape(-1)
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    return key[first], inv.reshape(-1)
