"""The two composition primitives of every schedule, evaluated on arrays."""

from __future__ import annotations

import functools

import numpy as np


def seq(*xs):
    """Things that run one after another: their times add."""
    return functools.reduce(np.add, xs, 0.0)


def par(*xs):
    """Things that run concurrently on independent resources: the slowest decides."""
    return functools.reduce(np.maximum, xs)
