"""Every linear operator of the package against its adjoint, in one parametrised test
(``<A x, y> == <x, A^T y>`` in float64), and the graph Laplacians checked as the matrices the
paper says they are: symmetric, positive semi-definite, constant vectors in the null space
(dense matrices built column by column on a small image)."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from gsprestore.graph import operators as G
from gsprestore.physics import sampling

H, W = 7, 9


def _rand(*shape: int, seed: int, positive: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g, dtype=torch.float64)
    return t + 0.05 if positive else t - 0.5


_W12 = _rand(2, 2, 12, H, W, seed=1, positive=True)
_WBAR = _rand(2, 2, 24, H, W, seed=2, positive=True)
_DIAG = _rand(2, 2, 3, H, W, seed=3, positive=True)

#: name -> (A, A^T, shape of x, shape of y)
OPERATORS: dict[str, tuple[Callable, Callable, tuple, tuple]] = {
    **{f"mosaic-{p}": (lambda x, p=p: sampling.mosaic(x, p), lambda y, p=p: sampling.mosaic_adjoint(y, p),
                       (2, 3, H, W), (2, 1, H, W)) for p in sampling.PATTERNS},
    "decimate": (sampling.decimate, lambda y: sampling.decimate_adjoint(y, (H, W)), (2, 3, H, W),
                 (2, 3, (H + 1) // 2, (W + 1) // 2)),
    "incidence (C-bar)": (lambda x: G.incidence_apply(_WBAR, x), lambda e: G.incidence_adjoint(_WBAR, e),
                          (2, 2, 3, H, W), (2, 2, 3, 24, H, W)),
    "laplacian L = D - W": (lambda x: G.laplacian_apply(_W12, x), lambda y: G.laplacian_apply(_W12, y),
                            (2, 2, 3, H, W), (2, 2, 3, H, W)),
    "normalised laplacian": (lambda x: G.normalized_laplacian_apply(_W12, x),
                             lambda y: G.normalized_laplacian_apply(_W12, y), (2, 2, 3, H, W), (2, 2, 3, H, W)),
    "L + H^T H (diag - W)": (lambda x: G.diag_minus_adjacency_apply(_W12, x, _DIAG),
                             lambda y: G.diag_minus_adjacency_apply(_W12, y, _DIAG), (2, 2, 3, H, W),
                             (2, 2, 3, H, W)),
}


@pytest.mark.parametrize("name", list(OPERATORS))
def test_operator_matches_its_adjoint(name):
    A, At, xs, ys = OPERATORS[name]
    x, y = _rand(*xs, seed=10), _rand(*ys, seed=11)
    lhs = (A(x) * y).sum()
    rhs = (x * At(y)).sum()
    assert A(x).shape == y.shape and At(y).shape == x.shape
    torch.testing.assert_close(lhs, rhs, rtol=1e-12, atol=1e-12)


def _dense(apply: Callable[[torch.Tensor], torch.Tensor], h: int, w: int) -> torch.Tensor:
    """The N x N matrix of a node operator on one (batch, head, channel) plane, by columns."""
    n = h * w
    cols = []
    for i in range(n):
        e = torch.zeros(1, 1, 1, h, w, dtype=torch.float64)
        e.view(-1)[i] = 1.0
        cols.append(apply(e).reshape(-1))
    return torch.stack(cols, dim=1)


@pytest.mark.parametrize("kind", ["combinatorial", "normalised", "incidence C-bar^T C-bar"])
def test_laplacians_are_symmetric_psd_with_constants_in_the_null_space(kind):
    h, w = 5, 6
    w12 = _rand(1, 1, 12, h, w, seed=4, positive=True)
    wbar = _rand(1, 1, 24, h, w, seed=5, positive=True)
    apply = {
        "combinatorial": lambda x: G.laplacian_apply(w12, x),
        "normalised": lambda x: G.normalized_laplacian_apply(w12, x),
        "incidence C-bar^T C-bar": lambda x: G.incidence_adjoint(wbar, G.incidence_apply(wbar, x)),
    }[kind]
    L = _dense(apply, h, w)
    torch.testing.assert_close(L, L.T, rtol=0, atol=1e-12)
    assert torch.linalg.eigvalsh(L).min() > -1e-10
    if kind != "normalised":  # D^-1/2 L D^-1/2 has D^1/2 1 in its null space instead
        torch.testing.assert_close(L @ torch.ones(h * w, dtype=torch.float64), torch.zeros(h * w, dtype=torch.float64),
                                   rtol=0, atol=1e-12)
    else:
        d = G.degree(w12).reshape(-1).sqrt()
        torch.testing.assert_close(L @ d, torch.zeros_like(d), rtol=0, atol=1e-12)
    # off-diagonal entries are minus the edge weights: only 5x5-window neighbours are connected
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    far = ((ys.reshape(-1, 1) - ys.reshape(1, -1)).abs() > 2) | ((xs.reshape(-1, 1) - xs.reshape(1, -1)).abs() > 2)
    assert L[far].abs().max() == 0 and (L - torch.diag(torch.diag(L)))[~far].max() <= 0


def test_incidence_laplacian_weights_give_c_bar_transpose_c_bar():
    x = _rand(2, 2, 3, H, W, seed=6)
    torch.testing.assert_close(G.incidence_adjoint(_WBAR, G.incidence_apply(_WBAR, x)),
                               G.laplacian_apply(G.incidence_laplacian_weights(_WBAR), x), rtol=1e-12, atol=1e-12)
