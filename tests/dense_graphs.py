"""Dense graph matrices built entry by entry from the edge tensors: the oracles the graph and
solver tests compare the stencil operators with (shared by tests/test_graph.py and
tests/test_solvers.py)."""

from __future__ import annotations

import itertools

import numpy as np

from gsprestore.graph import operators as G


def dense_adjacency(w2d: np.ndarray) -> np.ndarray:
    """W (N x N) from undirected weights w2d (12, h, w), entry by entry."""
    _, h, wd = w2d.shape
    N = h * wd
    A = np.zeros((N, N))
    for k, (dy, dx) in enumerate(G.OFFSETS):
        for i, j in itertools.product(range(h), range(wd)):
            ii, jj = i + dy, j + dx
            if 0 <= ii < h and 0 <= jj < wd:
                p, q = i * wd + j, ii * wd + jj
                A[p, q] += w2d[k, i, j]
                A[q, p] += w2d[k, i, j]
    return A


def dense_incidence(wbar2d: np.ndarray) -> np.ndarray:
    """C-bar (24N x N), rows ordered as the (24, h, w) edge tensor flattened."""
    _, h, wd = wbar2d.shape
    N = h * wd
    Cm = np.zeros((24 * N, N))
    for j, (dy, dx) in enumerate(G.DIRECTED_OFFSETS):
        for i, jj in itertools.product(range(h), range(wd)):
            ii, kk = i + dy, jj + dx
            if 0 <= ii < h and 0 <= kk < wd:
                r = j * N + i * wd + jj
                Cm[r, i * wd + jj] = wbar2d[j, i, jj]
                Cm[r, ii * wd + kk] = -wbar2d[j, i, jj]
    return Cm
