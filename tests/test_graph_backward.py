"""The hand-written backwards of the graph set-up (degree, normalised weights, L-bar weights):
float64 gradcheck, and equality with plain autograd of the same slice formulas."""

import pytest
import torch

from gsprestore.graph import operators as G


def _w(B=2, K=2, H=6, W=5, n=G.NU, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(B, K, n, H, W, generator=g, dtype=torch.float64) + 0.2).requires_grad_(True)


def _plain_degree(w):
    B, K, _, H, W = w.shape
    deg = w.new_zeros(B, K, 1, H, W)
    for k, P, Q in G.regions(H, W):
        deg[..., P[0], P[1]] = deg[..., P[0], P[1]] + w[:, :, k : k + 1, P[0], P[1]]
        deg[..., Q[0], Q[1]] = deg[..., Q[0], Q[1]] + w[:, :, k : k + 1, P[0], P[1]]
    return deg


def _plain_normalized(w):
    dis = _plain_degree(w).clamp_min(1e-30).rsqrt()
    wn = torch.zeros_like(w)
    for k, P, Q in G.regions(*w.shape[-2:]):
        wn[:, :, k : k + 1, P[0], P[1]] = w[:, :, k : k + 1, P[0], P[1]] * dis[..., P[0], P[1]] * dis[..., Q[0], Q[1]]
    return wn


def _plain_lbar(wbar):
    B, K, _, H, W = wbar.shape
    s = wbar.new_zeros(B, K, G.NU, H, W)
    for k, P, Q in G.regions(H, W):
        s[:, :, k, P[0], P[1]] = wbar[:, :, k, P[0], P[1]].square() + wbar[:, :, G.NU + k, Q[0], Q[1]].square()
    return s


CASES = [
    ("degree", G.degree, _plain_degree, G.NU),
    ("normalized", lambda w: G.normalized_weights(w)[0], _plain_normalized, G.NU),
    ("lbar", G.incidence_laplacian_weights, _plain_lbar, 2 * G.NU),
]


@pytest.mark.parametrize("name,fn,plain,n", CASES, ids=[c[0] for c in CASES])
def test_gradcheck(name, fn, plain, n):
    w = _w(B=1, K=2, H=5, W=4, n=n)
    assert torch.autograd.gradcheck(fn, (w,), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("name,fn,plain,n", CASES, ids=[c[0] for c in CASES])
def test_equals_plain_autograd(name, fn, plain, n):
    w = _w(n=n)
    out, ref = fn(w), plain(w)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    seed = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
    (g1,) = torch.autograd.grad((out * seed).sum(), w)
    (g2,) = torch.autograd.grad((ref * seed).sum(), w)
    torch.testing.assert_close(g1, g2, rtol=1e-12, atol=1e-12)


def test_normalized_weights_broadcast_heads():
    """Weights shared by the heads (K = 1) with per-head degrees: gradients to both."""
    w = _w(K=1)
    deg = (G.degree(w.detach()).expand(2, 3, 1, *w.shape[-2:]) + torch.rand(2, 3, 1, *w.shape[-2:],
           dtype=torch.float64)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: G.normalized_weights(a, b)[0], (w, deg), eps=1e-6, atol=1e-8)
