"""Graph operators against dense oracles built entry by entry on tiny images (float64)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from gsprestore.core import backend
from gsprestore.graph import operators as G

from dense_graphs import dense_adjacency, dense_incidence

DT = torch.float64
H, W = 6, 7


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def rand(gen, *shape, positive=False):
    t = torch.rand(*shape, generator=gen, dtype=DT) if positive else torch.randn(*shape, generator=gen, dtype=DT)
    return t


def valid_weights(gen, B, K, n, h=H, w=W):
    """Random positive weights with zeros on the edges that leave the image."""
    wt = rand(gen, B, K, n, h, w, positive=True) + 0.05
    offs = G.OFFSETS if n == 12 else G.DIRECTED_OFFSETS
    for k, (dy, dx) in enumerate(offs):
        for i, j in itertools.product(range(h), range(w)):
            if not (0 <= i + dy < h and 0 <= j + dx < w):
                wt[:, :, k, i, j] = 0
    return wt


# ---------------------------------------------------------------- dense constructions (oracles)


def dense_features_weights(f: np.ndarray, M: np.ndarray) -> np.ndarray:
    """W (N x N) with W_pq = exp(-(f_p - f_q)^T M (f_p - f_q)) for 5x5-window neighbours."""
    F, h, wd = f.shape
    N = h * wd
    A = np.zeros((N, N))
    for i, j, ii, jj in itertools.product(range(h), range(wd), range(h), range(wd)):
        if (i, j) != (ii, jj) and abs(i - ii) <= 2 and abs(j - jj) <= 2:
            d = f[:, i, j] - f[:, ii, jj]
            A[i * wd + j, ii * wd + jj] = np.exp(-d @ M @ d)
    return A


# ---------------------------------------------------------------- tests


def test_offsets():
    assert len(G.OFFSETS) == 12 and len(set(G.OFFSETS)) == 12
    assert all(dy > 0 or (dy == 0 and dx > 0) for dy, dx in G.OFFSETS)
    assert all(max(abs(dy), abs(dx)) <= 2 for dy, dx in G.OFFSETS)
    assert G.DIRECTED_OFFSETS == G.OFFSETS + tuple((-a, -b) for a, b in G.OFFSETS)
    assert set(G.DIRECTED_OFFSETS) == {(a, b) for a in range(-2, 3) for b in range(-2, 3)} - {(0, 0)}


def test_edge_weights_dense(either_backend, gen):
    B, K, F = 2, 3, 4
    f = rand(gen, B, K, F, H, W)
    A = rand(gen, K, F, F)
    M = A @ A.transpose(-1, -2) * 0.3
    w = G.edge_weights(f, M)
    for b, k in itertools.product(range(B), range(K)):
        Wd = dense_features_weights(f[b, k].numpy(), M[k].numpy())
        np.testing.assert_allclose(dense_adjacency(w[b, k].numpy()), Wd, rtol=1e-12, atol=1e-14)
    d = G.edge_distances(f, M)
    valid = w > 0
    torch.testing.assert_close(torch.exp(-d)[valid], w[valid])
    # a single (F, F) metric broadcasts over heads
    torch.testing.assert_close(G.edge_weights(f, M[0]), G.edge_weights(f, M[0].expand(K, F, F)))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_projected_features_give_the_metric_distances(either_backend, gen, dtype, layout):
    """Inference applies M_k = A_k A_k^T as its factor: g = A_k^T f (read from either memory
    layout, W = 71 leaves a partial 64-pixel chunk), then Euclidean distances of g, equal to
    the Mahalanobis distances of f (dense per-pixel oracle: A_k^T f by einsum)."""
    B, K, F, h, w = 2, 3, 4, 5, 71
    f = rand(gen, B, K * F, h, w).to(dtype).contiguous(memory_format=layout)
    A = rand(gen, K, F, F).to(dtype)
    with torch.no_grad():
        g = G.project_features(f, A, workspace={})
        assert g.shape == (B, K, F, h, w) and g.is_contiguous()
        oracle = torch.einsum("kec,bkehw->bkchw", A, f.reshape(B, K, F, h, w))
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(g, oracle, rtol=tol, atol=tol)
        M = A @ A.transpose(-1, -2)
        for exp in (False, True):
            fn = G.edge_weights if exp else G.edge_distances
            torch.testing.assert_close(fn(g, None, workspace={}), fn(f.reshape(B, K, F, h, w).contiguous(), M),
                                       rtol=10 * tol, atol=10 * tol)
    with pytest.raises(ValueError, match="channels"):
        G.project_features(f, A[:, :-1, :-1])


def test_laplacian_dense(either_backend, gen):
    B, K, C = 2, 3, 2
    w = valid_weights(gen, B, K, 12)
    x = rand(gen, B, K, C, H, W)
    Lx = G.laplacian_apply(w, x)
    Lnx = G.normalized_laplacian_apply(w, x)
    deg = G.degree(w)
    for b, k in itertools.product(range(B), range(K)):
        Wd = dense_adjacency(w[b, k].numpy())
        D = Wd.sum(1)
        np.testing.assert_allclose(deg[b, k, 0].numpy().ravel(), D, rtol=1e-12)
        L = np.diag(D) - Wd
        Ln = np.diag(D**-0.5) @ L @ np.diag(D**-0.5)
        for c in range(C):
            xv = x[b, k, c].numpy().ravel()
            np.testing.assert_allclose(Lx[b, k, c].numpy().ravel(), L @ xv, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(Lnx[b, k, c].numpy().ravel(), Ln @ xv, rtol=1e-10, atol=1e-12)
            # GLR x^T L x
            np.testing.assert_allclose(
                G.graph_laplacian_regularizer(w[b : b + 1, k : k + 1], x[b : b + 1, k : k + 1, c : c + 1]).item(),
                xv @ L @ xv, rtol=1e-10)


def test_laplacian_broadcasts_over_heads(either_backend, gen):
    w = valid_weights(gen, 1, 1, 12)
    x = rand(gen, 1, 4, 3, H, W)
    torch.testing.assert_close(G.laplacian_apply(w, x), G.laplacian_apply(w.expand(1, 4, 12, H, W), x))
    diag = rand(gen, 1, 4, 3, H, W)
    torch.testing.assert_close(
        G.diag_minus_adjacency_apply(w, x, diag),
        diag * x + (G.laplacian_apply(w, x) - G.degree(w) * x))


def test_random_walk_weights_sum_to_one(either_backend, gen):
    w = valid_weights(gen, 2, 3, 12)
    wbar = G.random_walk_weights(w)
    torch.testing.assert_close(wbar.sum(2), torch.ones(2, 3, H, W, dtype=DT))
    for b, k in itertools.product(range(2), range(3)):  # eq. 28 entry by entry
        Wd = dense_adjacency(w[b, k].numpy())
        P = Wd / Wd.sum(1, keepdims=True)
        Cd = dense_incidence(wbar[b, k].numpy())
        # each directed edge row p -> q of C-bar has +P[p, q] at p
        for r in np.nonzero(np.abs(Cd).sum(1))[0]:
            p = int(np.argmax(Cd[r] > 0)) if (Cd[r] > 0).any() else None
            q = int(np.argmax(Cd[r] < 0))
            assert p is not None and abs(Cd[r, p] - P[p, q]) < 1e-12
    # the stable softmax form agrees (and survives weights that underflow)
    f = rand(gen, 2, 3, 5, H, W)
    M = torch.eye(5, dtype=DT) * 2.0
    torch.testing.assert_close(G.random_walk_weights(G.edge_weights(f, M)),
                               G.random_walk_weights_from_distances(G.edge_distances(f, M)))
    big = G.random_walk_weights_from_distances(G.edge_distances(f * 100, M))
    assert torch.isfinite(big).all()
    torch.testing.assert_close(big.sum(2), torch.ones(2, 3, H, W, dtype=DT))


def test_incidence_dense_and_adjoint(gen):
    B, K, C = 2, 3, 2
    wbar = valid_weights(gen, B, K, 24)
    x = rand(gen, B, K, C, H, W)
    e = rand(gen, B, K, C, 24, H, W)
    Cx = G.incidence_apply(wbar, x)
    Cte = G.incidence_adjoint(wbar, e)
    for b, k, c in itertools.product(range(B), range(K), range(C)):
        Cd = dense_incidence(wbar[b, k].numpy())
        np.testing.assert_allclose(Cx[b, k, c].numpy().ravel(), Cd @ x[b, k, c].numpy().ravel(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(Cte[b, k, c].numpy().ravel(), Cd.T @ e[b, k, c].numpy().ravel(), rtol=1e-10, atol=1e-12)
    # adjointness <C x, e> == <x, C^T e>, including the border entries
    lhs = (Cx * e).sum()
    rhs = (x * Cte).sum()
    assert abs(lhs - rhs) <= 1e-12 * abs(lhs)
    # edges leaving the image carry nothing
    e_out = G.incidence_apply(wbar, x)
    for j, (dy, dx) in enumerate(G.DIRECTED_OFFSETS):
        for i, jj in itertools.product(range(H), range(W)):
            if not (0 <= i + dy < H and 0 <= jj + dx < W):
                assert (e_out[:, :, :, j, i, jj] == 0).all()


def test_incidence_laplacian_weights(gen):
    wbar = G.random_walk_weights(valid_weights(gen, 2, 2, 12))
    s = G.incidence_laplacian_weights(wbar)
    x = rand(gen, 2, 2, 3, H, W)
    torch.testing.assert_close(G.incidence_adjoint(wbar, G.incidence_apply(wbar, x)), G.laplacian_apply(s, x))
    Cd = dense_incidence(wbar[0, 0].numpy())
    Ld = np.diag(dense_adjacency(s[0, 0].numpy()).sum(1)) - dense_adjacency(s[0, 0].numpy())
    np.testing.assert_allclose(Cd.T @ Cd, Ld, atol=1e-12)


def test_paper_three_node_example():
    """Fig. 3 of the appendix: w12 = w13 = 1/2, w23 = 1/3 gives C-bar rows 1/2, 3/5, 2/5, 1/2, 3/5."""
    # a 1x3 image has the edges (0,1) twice at offset dx = 1 and (0,2) at dx = 2
    w = torch.zeros(1, 1, 12, 1, 3, dtype=DT)
    w[0, 0, G.OFFSETS.index((0, 1)), 0, 0] = 0.5  # 1-2
    w[0, 0, G.OFFSETS.index((0, 1)), 0, 1] = 1 / 3  # 2-3
    w[0, 0, G.OFFSETS.index((0, 2)), 0, 0] = 0.5  # 1-3
    wbar = G.random_walk_weights(w)
    j = G.DIRECTED_OFFSETS.index
    assert abs(wbar[0, 0, j((0, 1)), 0, 0] - 1 / 2) < 1e-12
    assert abs(wbar[0, 0, j((0, -1)), 0, 1] - 3 / 5) < 1e-12
    assert abs(wbar[0, 0, j((0, 1)), 0, 1] - 2 / 5) < 1e-12
    assert abs(wbar[0, 0, j((0, -1)), 0, 2] - 2 / 5) < 1e-12
    assert abs(wbar[0, 0, j((0, 2)), 0, 0] - 1 / 2) < 1e-12
    assert abs(wbar[0, 0, j((0, -2)), 0, 2] - 3 / 5) < 1e-12
    # C-bar as printed in the paper; L-bar = C-bar^T C-bar from it. (The printed L-bar of the figure
    # has 1/4 + s^2/9 in the (1,3) entries, i.e. uses wbar(3->1) = 2/5, contradicting its own C-bar
    # row (-3/5, 0, 3/5); we test against C-bar, which eq. 28 determines.)
    Cpaper = np.array([[1 / 2, -1 / 2, 0], [-3 / 5, 3 / 5, 0], [0, 2 / 5, -2 / 5],
                       [0, -2 / 5, 2 / 5], [1 / 2, 0, -1 / 2], [-3 / 5, 0, 3 / 5]])
    sw = G.incidence_laplacian_weights(wbar)
    Ld = np.diag(dense_adjacency(sw[0, 0].numpy()).sum(1)) - dense_adjacency(sw[0, 0].numpy())
    np.testing.assert_allclose(Ld, Cpaper.T @ Cpaper, atol=1e-12)
    x = torch.tensor([0.3, -1.0, 2.0], dtype=DT).view(1, 1, 1, 1, 3)
    e = G.incidence_apply(wbar, x)
    np.testing.assert_allclose(np.sort(e[e != 0].numpy()), np.sort(Cpaper @ x.view(3).numpy()), atol=1e-12)


def test_gtv_of_constant_is_zero(gen):
    f = rand(gen, 1, 2, 4, H, W)
    wbar = G.random_walk_weights(G.edge_weights(f, torch.eye(4, dtype=DT)))
    x = torch.full((1, 2, 3, H, W), 0.7, dtype=DT)
    assert G.incidence_apply(wbar, x).abs().max() < 1e-15
    assert G.graph_total_variation(wbar, x).abs().max() < 1e-15
    y = rand(gen, 1, 2, 3, H, W)
    torch.testing.assert_close(G.graph_total_variation(wbar, y), G.incidence_apply(wbar, y).abs().sum((2, 3, 4, 5)))


def test_restricted_laplacian_is_positive_definite(gen):
    """L_{S'S'} (combinatorial and normalised) is PD on a connected graph with one sample (App. A.2)."""
    w = valid_weights(gen, 1, 1, 12)
    Wd = dense_adjacency(w[0, 0].numpy())
    D = Wd.sum(1)
    L = np.diag(D) - Wd
    Ln = np.diag(D**-0.5) @ L @ np.diag(D**-0.5)
    rng = np.random.default_rng(0)
    for frac in (0.02, 0.3, 0.7):
        known = rng.random(H * W) < frac
        known[rng.integers(H * W)] = True
        U = ~known
        for M in (L, Ln):
            ev = np.linalg.eigvalsh(M[np.ix_(U, U)])
            assert ev.min() > 1e-8
    assert np.linalg.eigvalsh(L).min() > -1e-12 and abs(np.linalg.eigvalsh(L).min()) < 1e-10  # L itself only PSD


# ---------------------------------------------------------------- gradcheck of the custom ops


def _gc(fn, *inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)


@pytest.mark.parametrize("kw", [1, 2])
def test_gradcheck_laplacian(either_backend, gen, kw):
    h, w_ = 4, 5
    w = valid_weights(gen, 1, kw, 12, h, w_).requires_grad_()
    x = rand(gen, 1, 2, 2, h, w_).requires_grad_()
    _gc(lambda a, b: G.laplacian_apply(a, b), w, x)
    _gc(lambda a, b: G.normalized_laplacian_apply(a, b), w, x)
    diag = rand(gen, 1, 2, 2, h, w_).requires_grad_()
    _gc(lambda a, b, c: G.diag_minus_adjacency_apply(a, b, c), w, x, diag)


@pytest.mark.parametrize("kw", [1, 2])
def test_gradcheck_incidence(gen, kw):
    h, w_ = 4, 5
    wbar = valid_weights(gen, 1, kw, 24, h, w_).requires_grad_()
    x = rand(gen, 1, 2, 2, h, w_).requires_grad_()
    e = rand(gen, 1, 2, 2, 24, h, w_).requires_grad_()
    _gc(lambda a, b: G.incidence_apply(a, b), wbar, x)
    _gc(lambda a, b: G.incidence_adjoint(a, b), wbar, e)


def test_gradcheck_edge_weights(either_backend, gen):
    h, w_ = 4, 5
    f = (0.5 * rand(gen, 2, 2, 3, h, w_)).requires_grad_()
    A = rand(gen, 2, 3, 3)
    M = (A @ A.transpose(-1, -2) * 0.3).requires_grad_()
    _gc(lambda a, b: G.edge_weights(a, b), f, M)
    _gc(lambda a, b: G.edge_distances(a, b), f, M)
    M1 = M[0].detach().clone().requires_grad_()
    _gc(lambda a, b: G.edge_weights(a, b), f, M1)
    # eq. 28 from distances (custom softmax backward)
    _gc(lambda a, b: G.random_walk_weights_from_distances(G.edge_distances(a, b)), f, M)
    # a whole graph-learning chain: features -> w -> wbar -> s -> L x
    x = rand(gen, 2, 2, 2, h, w_)
    _gc(lambda a, b: G.laplacian_apply(G.incidence_laplacian_weights(G.random_walk_weights(G.edge_weights(a, b))), x),
        f, M)


@pytest.mark.parametrize("hw", [(4, 5), (7, 9), (2, 3)])
def test_gradcheck_edge_weights_projected(either_backend, gen, hw):
    """metric=None (features already projected, g = A^T f): the backward is the features'
    gradient alone (a native gather kernel on the CPU), at sizes where offsets leave the image."""
    g = (0.5 * rand(gen, 2, 2, 3, *hw)).requires_grad_()
    _gc(lambda a: G.edge_weights(a, None), g)
    _gc(lambda a: G.edge_distances(a, None), g)
    _gc(lambda a: G.random_walk_weights_from_distances(G.edge_distances(a, None)), g)


def test_projected_edge_weights_equal_metric_form_and_backends(gen):
    """d(A^T f) with metric None == d(f) with M = A A^T, values and gradients of f and A, and the
    native backward equals the PyTorch one."""
    from gsprestore.core import backend as BK

    f = (0.5 * rand(gen, 2, 2, 3, 6, 7)).requires_grad_()
    A = rand(gen, 2, 3, 3).requires_grad_()
    seed = rand(gen, 2, 2, G.NU, 6, 7)
    results = []
    for mode in ("native", "torch"):
        if mode == "native" and not BK.native_available():
            pytest.skip(f"native kernels unavailable: {BK.error()}")
        with BK.use(mode):
            for exp in (True, False):
                fn = G.edge_weights if exp else G.edge_distances
                proj = torch.matmul(A.transpose(-1, -2), f.flatten(3)).view_as(f)
                out_p = fn(proj, None)
                out_m = fn(f, A @ A.transpose(-1, -2))
                torch.testing.assert_close(out_p, out_m, rtol=1e-12, atol=1e-12)
                gp = torch.autograd.grad((out_p * seed).sum(), (f, A))
                gm = torch.autograd.grad((out_m * seed).sum(), (f, A))
                for a, b in zip(gp, gm):
                    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
                results.append(gp)
    for a, b in zip(results[0] + results[1], results[2] + results[3]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_gradcheck_full_jacobian_tiny(gen):
    """Full (not random-projection) Jacobian check of the bilinear ops on a 3x3 image."""
    wbar = valid_weights(gen, 1, 1, 24, 3, 3).requires_grad_()
    w = valid_weights(gen, 1, 1, 12, 3, 3).requires_grad_()
    x = rand(gen, 1, 1, 1, 3, 3).requires_grad_()
    e = rand(gen, 1, 1, 1, 24, 3, 3).requires_grad_()
    assert torch.autograd.gradcheck(G.incidence_apply, (wbar, x))
    assert torch.autograd.gradcheck(G.incidence_adjoint, (wbar, e))
    assert torch.autograd.gradcheck(G.laplacian_apply, (w, x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_kernels_match_pytorch_path(gen, dtype, monkeypatch):
    """The optional C++ kernels (when they build here) give the PyTorch path's values."""
    if not G.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    h, w_ = 9, 11
    w = valid_weights(gen, 2, 3, 12, h, w_).to(dtype)
    x = rand(gen, 2, 3, 2, h, w_).to(dtype)
    cases = [(w, None, x), (w, G.degree(w), x), (w[:, :1], rand(gen, 2, 3, 2, h, w_).to(dtype), x),
             (w, rand(gen, 2, 1, 2, h, w_).to(dtype), x[:, :1]), (w[:1], None, x[:1])]
    got = [G._diag_minus_adjacency(*c) for c in cases]
    with backend.use("torch"):
        for c, g in zip(cases, got):
            torch.testing.assert_close(g, G._diag_minus_adjacency(*c))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", [(7, 9), (1, 9), (9, 1), (1, 1), (2, 3), (4, 30)])
def test_native_stencil_degree_and_incidence_laplacian_match_pytorch(gen, dtype, size, monkeypatch):
    """The forward-only kernels (a x - W x row by row, degrees, weights of C-bar^T C-bar) on odd
    sizes, 1-row/1-column images and borders; weights stay arbitrary (nonzero) where an edge
    leaves the image, which both paths must ignore."""
    if not G.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    h, w_ = size
    w = rand(gen, 2, 3, 12, h, w_, positive=True).to(dtype)
    wbar = rand(gen, 2, 3, 24, h, w_, positive=True).to(dtype)
    x = rand(gen, 2, 3, 2, h, w_).to(dtype)
    a = rand(gen, 2, 3, 2, h, w_).to(dtype)
    fns = [lambda: G._diag_minus_adjacency(w, a, x), lambda: G._diag_minus_adjacency(w[:, :1], None, x),
           lambda: G.degree(w), lambda: G.incidence_laplacian_weights(wbar)]
    with torch.no_grad():
        got = [f() for f in fns]
        with backend.use("torch"):
            for f, g in zip(fns, got):
                torch.testing.assert_close(g, f())


def test_padded_planes_layout():
    """The padded-plane tensors of the native kernels: rows contiguous, planes contiguous over
    the leading dims but not a multiple of 4 KiB apart; backend.plane_stride recognises that layout and
    the contiguous one, and rejects broadcast or sliced tensors."""
    like = torch.zeros(1)
    t = backend.padded_planes(like, 2, 3, 4, 512, 768)
    ps = t.stride(2)
    assert t.shape == (2, 3, 4, 512, 768) and t.stride()[-2:] == (768, 1)
    assert t.stride()[:3] == (3 * 4 * ps, 4 * ps, ps) and ps >= 512 * 768 and (ps * 4) % 4096 != 0
    t.copy_(torch.arange(t.numel(), dtype=torch.float32).view(t.shape))
    assert torch.equal(t.contiguous().view(-1), torch.arange(t.numel(), dtype=torch.float32))
    assert backend.plane_stride(t) == ps
    c = torch.zeros(2, 3, 5, 7)
    assert backend.plane_stride(c) == 35
    assert backend.plane_stride(torch.zeros(1, 1, 5, 7).expand(2, 3, 5, 7)) is None
    assert backend.plane_stride(c[:, :2]) is None and backend.plane_stride(c[..., :6]) is None
    assert backend.plane_stride(backend.padded_planes(torch.zeros(1, dtype=torch.float64), 1, 1, 1, 1)) is not None


@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0])
def test_native_float32_exp_kernels_match_pytorch(gen, scale, monkeypatch):
    """float32 edge weights exp(-d) and the random-walk softmax run a vectorised exp in the
    native kernels (rows of 8 and more); they agree with torch.exp to float32 rounding, also
    where the weights underflow."""
    if not G.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    f = (rand(gen, 2, 3, 5, 6, 37) * scale).float()
    A = rand(gen, 3, 5, 5).float()
    M = A @ A.transpose(-1, -2)
    with torch.no_grad():
        w, d = G.edge_weights(f, M), G.edge_distances(f, M)
        wbar = G.random_walk_weights_from_distances(d)
        with backend.use("torch"):
            w_ref, wbar_ref = G.edge_weights(f, M), G.random_walk_weights_from_distances(d)
    inside = d > 0  # edges leaving the image have weight 0 and distance 0
    torch.testing.assert_close(w[inside], torch.exp(-d)[inside], rtol=1e-6, atol=1e-37)  # the exp itself
    torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-30)  # d's summation order differs a little
    torch.testing.assert_close(wbar, wbar_ref, rtol=2e-6, atol=1e-30)
    assert (w_ref[inside] < 1e-20).any() or scale < 1  # the large scales do reach underflow


def test_graph_outputs_reused_from_a_workspace(gen):
    """Inference outputs kept in a workspace (reused, not reallocated) give the same values as
    fresh tensors call after call, including the zeros of edges that leave the image."""
    ws: dict = {}
    A = rand(gen, 3, 4, 4)
    M = A @ A.transpose(-1, -2)
    with torch.no_grad():
        for scale in (1.0, 0.2, 3.0):
            f = rand(gen, 2, 3, 4, 7, 13) * scale
            d, w = G.edge_distances(f, M, workspace=ws), G.edge_weights(f, M, workspace=ws)
            wbar = G.random_walk_weights_from_distances(d, workspace=ws)
            torch.testing.assert_close(d, G.edge_distances(f, M))
            torch.testing.assert_close(w, G.edge_weights(f, M))
            torch.testing.assert_close(wbar, G.random_walk_weights_from_distances(G.edge_distances(f, M)))
            if G.native_available():  # the native path keeps them
                assert ws["edge_distances"] is d and ws["random_walk_weights"] is wbar
