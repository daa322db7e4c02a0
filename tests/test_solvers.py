"""Solvers against independent oracles: dense solves (numpy), scipy linprog, hand-written recurrences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from gsprestore.core import backend
from gsprestore.graph import operators as G
from gsprestore import solvers as S
from gsprestore.solvers.gtv import admm as gtv, edge_step as admm_edge, reference as admm_reference

from dense_graphs import dense_adjacency, dense_incidence

DT = torch.float64


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def rand(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=DT)


def graph_weights(gen, B, K, h, w, F=3, scale=0.5):
    f = rand(gen, B, K, F, h, w)
    return G.edge_weights(f, torch.eye(F, dtype=DT) * scale)


def random_mask(gen, shape, frac):
    m = (torch.rand(*shape, generator=gen) < frac).to(DT)
    m.view(-1, m.shape[-2] * m.shape[-1])[:, 0] = 1  # at least one sample per channel
    return m


# ---------------------------------------------------------------- CG


def test_cg_exact_equals_dense_solve_per_system(gen):
    B, K, C, h, w = 2, 3, 2, 5, 6
    s = graph_weights(gen, B, K, h, w)
    mask = random_mask(gen, (B, K, C, h, w), 0.3)
    diag = G.degree(s) + mask
    A = lambda v: G.diag_minus_adjacency_apply(s, v, diag)  # noqa: E731
    b = rand(gen, B, K, C, h, w)
    x = S.cg_exact(A, b, iters=200)
    for bi, k, c in itertools.product(range(B), range(K), range(C)):
        Wd = dense_adjacency(s[bi, k].numpy())
        Ad = np.diag(Wd.sum(1) + mask[bi, k, c].numpy().ravel()) - Wd
        ref = np.linalg.solve(Ad, b[bi, k, c].numpy().ravel())
        np.testing.assert_allclose(x[bi, k, c].numpy().ravel(), ref, rtol=1e-6, atol=1e-8)
    # batched systems do not mix: solving one system alone gives the same iterates
    x1 = S.cg_exact(lambda v: G.diag_minus_adjacency_apply(s[1:2, 2:3], v, diag[1:2, 2:3]), b[1:2, 2:3], iters=7)
    x7 = S.cg_exact(A, b, iters=7)
    torch.testing.assert_close(x7[1:2, 2:3], x1)
    # early stop by tolerance still solves to that tolerance
    xt = S.cg_exact(A, b, iters=500, tol=1e-10)
    assert (A(xt) - b).norm() <= 1e-8 * b.norm()


def test_cg_unrolled_matches_reference_recurrence(gen):
    h, w, T = 4, 5, 6
    s = graph_weights(gen, 1, 2, h, w)
    diag = G.degree(s) + 0.5
    A = lambda v: G.diag_minus_adjacency_apply(s, v, diag)  # noqa: E731
    b = rand(gen, 1, 2, 1, h, w)
    x0 = rand(gen, 1, 2, 1, h, w)
    alphas = torch.rand(T, 2, generator=gen, dtype=DT) * 0.5
    betas = torch.rand(T, 2, generator=gen, dtype=DT) * 0.5
    x = S.cg_unrolled(A, b, x0, alphas, betas)
    for k in range(2):  # hand-written with a dense matrix, per head
        Wd = dense_adjacency(s[0, k].numpy())
        Ad = np.diag(Wd.sum(1) + 0.5) - Wd
        bb, xx = b[0, k, 0].numpy().ravel(), x0[0, k, 0].numpy().ravel()
        g = Ad @ xx - bb
        v = np.zeros_like(g)
        for t in range(T):
            a, be = alphas[t, k].item(), betas[t, k].item()
            v = g + be * v
            xx = xx - a * v
            g = g - a * Ad @ v
            np.testing.assert_allclose(g, Ad @ xx - bb, atol=1e-10)  # g stays the true gradient
        np.testing.assert_allclose(x[0, k, 0].numpy().ravel(), xx, rtol=1e-12, atol=1e-12)
    # with constant alpha, beta it is literally the appendix recurrence
    # g^t = g^{t-1} - a A v^{t-1}, v^t = g^t + b v^{t-1}, x^{t+1} = x^t - a v^t, from v^0 = g^0, x^1 = x^0 - a g^0
    a, be = 0.3, 0.4
    xc = S.cg_unrolled(A, b, x0, torch.full((T,), a, dtype=DT), torch.full((T,), be, dtype=DT))
    g = A(x0) - b
    v = g
    xx = x0 - a * v
    for _ in range(1, T):
        g = g - a * A(v)
        v = g + be * v
        xx = xx - a * v
    torch.testing.assert_close(xc, xx)
    # and it converges to the solution for a reasonable fixed step
    xs = S.cg_unrolled(A, b, x0, torch.full((300,), 0.3, dtype=DT), torch.full((300,), 0.3, dtype=DT))
    torch.testing.assert_close(xs, S.cg_exact(A, b, iters=200), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- GLR (eq. 9)


@pytest.mark.parametrize("normalized", [True, False])
def test_glr_equals_dense_solve_of_eq9(gen, normalized):
    B, K, C, h, w = 1, 2, 3, 6, 7
    wts = graph_weights(gen, B, K, h, w)
    known = rand(gen, B, C, h, w)
    mask = random_mask(gen, (B, C, h, w), 0.35)  # per-channel masks, graph shared across channels
    x = S.glr_interpolate(wts, known, mask, iters=300, normalized=normalized)
    assert x.shape == (B, K, C, h, w)
    for k, c in itertools.product(range(K), range(C)):
        Wd = dense_adjacency(wts[0, k].numpy())
        D = Wd.sum(1)
        L = np.diag(D) - Wd
        if normalized:
            L = np.diag(D**-0.5) @ L @ np.diag(D**-0.5)
        m = mask[0, c].numpy().ravel() > 0
        y = known[0, c].numpy().ravel()[m]
        U = ~m
        xu = np.linalg.solve(L[np.ix_(U, U)], -L[np.ix_(U, m)] @ y)
        xv = x[0, k, c].numpy().ravel()
        np.testing.assert_allclose(xv[U], xu, rtol=1e-6, atol=1e-8)
        assert np.array_equal(xv[m], y)  # known samples kept exactly


def test_glr_unrolled_and_broadcast(gen):
    wts = graph_weights(gen, 2, 1, 5, 5)
    known = rand(gen, 2, 1, 5, 5)
    mask = random_mask(gen, (2, 1, 5, 5), 0.4)
    T = 200
    xu = S.glr_interpolate(wts, known, mask, cg=("unrolled", torch.full((T,), 0.5, dtype=DT), torch.full((T,), 0.3, dtype=DT)))
    xe = S.glr_interpolate(wts, known, mask, iters=100)
    torch.testing.assert_close(xu, xe, rtol=1e-6, atol=1e-8)
    assert torch.equal(xu[mask.unsqueeze(1).expand_as(xu) > 0], known.unsqueeze(1).expand_as(xu)[mask.unsqueeze(1).expand_as(xu) > 0])


@pytest.mark.parametrize("laplacian", S.GLR_LAPLACIANS)
def test_glr_solves_share_one_graph_system(either_backend, gen, laplacian):
    """glr_graph computed once and handed to two solves (G, then the colour differences, as a
    uGLR block does) gives what each solve computes on its own, gradients included."""
    wts = graph_weights(gen, 1, 2, 6, 7).requires_grad_()
    cg = ("unrolled", torch.full((6,), 0.5, dtype=DT), torch.full((6,), 0.3, dtype=DT))
    obs = [(rand(gen, 1, 1, C, 6, 7), random_mask(gen, (1, 1, C, 6, 7), 0.4)) for C in (1, 2)]
    results = []
    for shared in (True, False):
        system = S.glr_graph(wts, laplacian) if shared else None
        xs = [S.glr_solve(wts, known, mask, None, cg, 6, laplacian, graph=system) for known, mask in obs]
        grad, = torch.autograd.grad(sum(x.square().sum() for x in xs), wts)
        results.append((xs, grad))
    (xs_shared, g_shared), (xs_own, g_own) = results
    for a, b in zip(xs_shared, xs_own):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_shared, g_own, rtol=1e-10, atol=1e-12)
    other = "combinatorial" if laplacian != "combinatorial" else "normalized"
    with pytest.raises(ValueError, match="built for"):
        S.glr_solve(wts, *obs[0], None, cg, 6, other, graph=S.glr_graph(wts, laplacian))


def test_gtv_solves_share_one_laplacian(either_backend, gen):
    """gtv_laplacian computed once and handed to two solves gives what each computes alone."""
    wbar, _, _ = gtv_problem(gen, K=2, h=6, w=7)
    wbar.requires_grad_()
    cg = ("unrolled", torch.full((3, 4, 2), 0.5, dtype=DT), torch.full((3, 4, 2), 0.3, dtype=DT))  # (admm, T, K)
    obs = []
    for C in (1, 2):
        mask = random_mask(gen, (1, C, 6, 7), 0.4)
        obs.append((rand(gen, 1, C, 6, 7) * mask, mask))
    results = []
    for shared in (True, False):
        lap = S.gtv_laplacian(wbar) if shared else None
        xs = [S.gtv_interpolate(wbar, known, mask, admm_iters=3, cg_iters=4, cg=cg, precondition=True, laplacian=lap)
              for known, mask in obs]
        grad, = torch.autograd.grad(sum(x.square().sum() for x in xs), wbar)
        results.append((xs, grad))
    for a, b in zip(results[0][0], results[1][0]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- GTV ADMM (eqs. 19-24)


def gtv_problem(gen, B=1, K=1, C=1, h=3, w=4, frac=0.4, F=3):
    f = rand(gen, B, K, F, h, w)
    wbar = G.random_walk_weights(G.edge_weights(f, torch.eye(F, dtype=DT) * 0.5))
    known = rand(gen, B, C, h, w)
    mask = random_mask(gen, (B, C, h, w), frac)
    return wbar, known * mask, mask


def lp_optimum(wbar2d: torch.Tensor, known2d: torch.Tensor, mask2d: torch.Tensor) -> float:
    """min ||C x||_1 s.t. x_S = y by scipy's HiGHS, variables [x; t] with -t <= C x <= t."""
    from scipy.optimize import linprog

    Cd = dense_incidence(wbar2d.numpy())
    Cd = Cd[np.abs(Cd).sum(1) > 0]
    E, N = Cd.shape
    S_ = np.nonzero(mask2d.numpy().ravel())[0]
    A_ub = np.block([[Cd, -np.eye(E)], [-Cd, -np.eye(E)]])
    A_eq = np.zeros((len(S_), N + E))
    A_eq[np.arange(len(S_)), S_] = 1
    res = linprog(np.r_[np.zeros(N), np.ones(E)], A_ub=A_ub, b_ub=np.zeros(2 * E), A_eq=A_eq,
                  b_eq=known2d.numpy().ravel()[S_], bounds=[(None, None)] * (N + E), method="highs")
    assert res.status == 0
    return float(res.fun)


def test_admm_reaches_lp_optimum(gen):
    """Three independent instances in one batch (they must not mix) against scipy linprog."""
    wbar, known, mask = gtv_problem(gen, B=3, h=3, w=4)
    x = S.gtv_interpolate(wbar, known, mask, gamma=10.0, admm_iters=400, cg_iters=12)
    gtv = G.graph_total_variation(wbar, x)
    for b in range(3):
        opt = lp_optimum(wbar[b, 0], known[b, 0], mask[b, 0])
        assert abs(gtv[b, 0].item() - opt) <= 1e-3 * opt
        assert (mask[b] * (x[b, 0] - known[b])).abs().max() < 1e-4  # H x = y


def test_compact_admm_equals_plain_form(either_backend, gen):
    """The three-tensor ADMM gives the same iterates as the nine-vector form of eqs. 19-24."""
    K = 2
    wbar, known, mask = gtv_problem(gen, B=2, K=K, C=2, h=5, w=6)
    gamma = torch.tensor([3.0, 10.0], dtype=DT)
    T = 4
    alphas = torch.rand(3, T, K, generator=gen, dtype=DT) * 0.3 + 0.2
    betas = torch.rand(3, T, K, generator=gen, dtype=DT) * 0.3
    x0 = rand(gen, 2, 2, 5, 6)
    for cg in ["exact", ("unrolled", alphas, betas), ("unrolled", alphas[0], betas[0])]:
        for iters in (1, 2, 3):
            a = S.gtv_interpolate(wbar, known, mask, gamma=gamma, admm_iters=iters, cg_iters=T, cg=cg, x0=x0,
                                  mu_init=0.25)
            b = S.gtv_admm_reference(wbar, known, mask, gamma=gamma, admm_iters=iters, cg_iters=T, cg=cg, x0=x0,
                                     mu_init=0.25)
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_admm_history_and_gradients(either_backend, gen):
    wbar, known, mask = gtv_problem(gen, B=1, K=2, C=1, h=4, w=4)
    hist: list = []
    x = S.gtv_interpolate(wbar, known, mask, gamma=2.0, admm_iters=30, cg_iters=16, history=hist)
    assert len(hist) == 30 and hist[0]["primal_residual"].shape == (1, 2)
    assert (hist[-1]["primal_residual"] < 0.1 * hist[0]["primal_residual"]).all()
    assert (hist[-1]["constraint"] < 0.1 * hist[0]["constraint"]).all()
    torch.testing.assert_close(x, S.gtv_interpolate(wbar, known, mask, gamma=2.0, admm_iters=30, cg_iters=16))
    # learnable gamma / alpha / beta and the graph all receive gradients
    wb = wbar.clone().requires_grad_()
    gamma = torch.tensor([5.0, 8.0], dtype=DT, requires_grad=True)
    alphas = torch.full((4, 2), 0.4, dtype=DT, requires_grad=True)
    betas = torch.full((4, 2), 0.2, dtype=DT, requires_grad=True)
    out = S.gtv_interpolate(wb, known, mask, gamma=gamma, admm_iters=3, cg=("unrolled", alphas, betas))
    out.square().sum().backward()
    for p in (wb, gamma, alphas, betas):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_gradcheck_solvers(either_backend, gen):
    """float64 gradcheck through whole solvers (custom ops composed with the solver algebra)."""
    wbar, known, mask = gtv_problem(gen, B=1, K=2, C=1, h=3, w=4)
    wb = wbar.clone().requires_grad_()
    gamma = torch.tensor([3.0, 5.0], dtype=DT, requires_grad=True)
    alphas = torch.full((3, 2), 0.4, dtype=DT, requires_grad=True)
    betas = torch.full((3, 2), 0.2, dtype=DT, requires_grad=True)
    fn = lambda w_, g_, a_, b_: S.gtv_interpolate(w_, known, mask, gamma=g_, admm_iters=3,  # noqa: E731
                                                  cg=("unrolled", a_, b_))
    assert torch.autograd.gradcheck(fn, (wb, gamma, alphas, betas), fast_mode=True)
    w = graph_weights(gen, 1, 2, 3, 4).requires_grad_()
    fn2 = lambda w_, a_, b_: S.glr_interpolate(w_, known, mask, cg=("unrolled", a_, b_))  # noqa: E731
    assert torch.autograd.gradcheck(fn2, (w, alphas, betas), fast_mode=True)
    fn3 = lambda w_: S.glr_interpolate(w_, known, mask, iters=5)  # noqa: E731
    assert torch.autograd.gradcheck(fn3, (w,), fast_mode=True)


@pytest.mark.parametrize("per_head", [False, True])
def test_gradcheck_admm_edge_step(either_backend, gen, per_head):
    """The fused edge step (custom backward) from a non-zero state, every input differentiable."""
    B, K, C, h, w = 1, 2, 2, 3, 4
    wbar = G.random_walk_weights(graph_weights(gen, B, K, h, w)).requires_grad_()
    x = rand(gen, B, K, C, h, w).requires_grad_()
    D, u, v = (rand(gen, B, K, C, 24, h, w).requires_grad_() for _ in range(3))
    u.data.abs_(), v.data.abs_()
    gamma = (torch.tensor([2.0, 3.0], dtype=DT) if per_head else torch.tensor(2.5, dtype=DT)).requires_grad_()
    f = lambda *a: S.admm_edge_step(*a)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x, wbar, D, u, v, gamma), fast_mode=True)
    assert torch.autograd.gradcheck(lambda a, b_, c: S.admm_edge_step(a, b_, None, None, None, c), (x, wbar, gamma),
                                    fast_mode=True)


def test_gradcheck_admm_edge_step_graph_shared_by_the_heads(either_backend, gen):
    """One graph (K = 1) for two heads of iterates and one gamma: the weights' and gamma's
    gradients sum over the heads once (the PyTorch backward used to count the weights' twice; the
    native one failed to shape gamma's)."""
    B, K, C, h, w = 1, 2, 2, 3, 4
    wbar = G.random_walk_weights(graph_weights(gen, B, 1, h, w)).requires_grad_()
    x0, x1 = (rand(gen, B, K, C, h, w).requires_grad_() for _ in range(2))
    gamma = torch.tensor([[[[[2.5]]]]], dtype=DT, requires_grad=True)

    def two_steps(x0, x1, wbar, gamma):
        D, u, v, _ = S.admm_edge_step(x0, wbar, None, None, None, gamma)
        return S.admm_edge_step(x1, wbar, D, u, v, gamma)[3]

    assert torch.autograd.gradcheck(two_steps, (x0, x1, wbar, gamma), fast_mode=True)


def test_edge_step_unused_state_gets_no_zero_tensors(either_backend, gen):
    """Only n used (the last ADMM step): the state's gradients arrive as None (no zero-filled
    edge tensors) and the inputs' gradients equal those from explicit zero state gradients."""
    B, K, C, h, w = 1, 2, 2, 4, 5
    wbar = G.random_walk_weights(graph_weights(gen, B, K, h, w)).requires_grad_()
    x = rand(gen, B, K, C, h, w).requires_grad_()
    D, u, v = (rand(gen, B, K, C, 24, h, w).abs().requires_grad_() for _ in range(3))
    gamma = torch.tensor([2.0, 3.0], dtype=DT, requires_grad=True)
    seed = rand(gen, B, K, C, h, w)
    inputs = (x, wbar, D, u, v, gamma)
    D2, u2, v2, n = S.admm_edge_step(*inputs)
    only_n = torch.autograd.grad((n * seed).sum(), inputs)
    D2, u2, v2, n = S.admm_edge_step(*inputs)
    zeros = torch.autograd.grad((D2, u2, v2, n), inputs, (torch.zeros_like(D2), torch.zeros_like(u2),
                                                          torch.zeros_like(v2), seed))
    for a, b in zip(only_n, zeros):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_compact_gradients_equal_plain_form(either_backend, gen):
    """Gradients through the fused op equal plain autograd through the nine-vector ADMM."""
    wbar, known, mask = gtv_problem(gen, B=2, K=2, C=2, h=5, w=5)
    grads = []
    for fn in (S.gtv_interpolate, S.gtv_admm_reference):
        wb = wbar.clone().requires_grad_()
        gamma = torch.tensor([4.0, 7.0], dtype=DT, requires_grad=True)
        alphas = torch.full((4, 4, 2), 0.4, dtype=DT, requires_grad=True)
        betas = torch.full((4, 4, 2), 0.2, dtype=DT, requires_grad=True)
        # 4 ADMM iterations: 3 edge steps, the last replays its state from 2 earlier iterates
        x = fn(wb, known, mask, gamma=gamma, admm_iters=4, cg_iters=4, cg=("unrolled", alphas, betas))
        (x * torch.linspace(-1, 1, x.numel(), dtype=DT).view_as(x)).sum().backward()
        grads.append([p.grad for p in (wb, gamma, alphas, betas)])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_edge_step_matches_pytorch_path(gen, dtype, monkeypatch):
    if not G.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    B, K, C, h, w = 2, 3, 2, 7, 9
    for kw, gamma in ((3, torch.tensor([2.0, 3.0, 5.0], dtype=dtype)), (1, 4.0)):
        wbar = G.random_walk_weights(graph_weights(gen, B, kw, h, w)).to(dtype)
        x = rand(gen, B, K, C, h, w).to(dtype)
        D, u, v = (rand(gen, B, K, C, 24, h, w).to(dtype) for _ in range(3))
        u, v = u.abs(), v.abs()
        with torch.no_grad():
            first_n = S.admm_edge_step(x, wbar, None, None, None, gamma)
            later_n = S.admm_edge_step(x, wbar, D.clone(), u.clone(), v.clone(), gamma)  # in place
        with backend.use("torch"):
            with torch.no_grad():
                first_p = S.admm_edge_step(x, wbar, None, None, None, gamma)
                later_p = S.admm_edge_step(x, wbar, D.clone(), u.clone(), v.clone(), gamma)
        for a, b in zip(first_n + later_n, first_p + later_p):
            torch.testing.assert_close(a, b)


def test_inference_paths_equal_autograd_paths(either_backend, gen):
    """Without autograd the solvers update buffers in place; results and inputs must not change."""
    K = 2
    wbar, known, mask = gtv_problem(gen, B=2, K=K, C=2, h=6, w=7)
    wts = graph_weights(gen, 2, K, 6, 7)
    x0 = rand(gen, 2, 2, 6, 7)
    al = torch.rand(5, K, generator=gen, dtype=DT) * 0.3 + 0.2
    be = torch.rand(5, K, generator=gen, dtype=DT) * 0.3
    runs = [
        lambda: S.gtv_interpolate(wbar, known, mask, gamma=torch.tensor([3.0, 8.0], dtype=DT), admm_iters=3,
                                  cg_iters=5, cg=("unrolled", al, be), x0=x0),
        lambda: S.gtv_interpolate(wbar, known, mask, admm_iters=3, cg_iters=5, x0=x0),
        lambda: S.glr_interpolate(wts, known, mask, cg=("unrolled", al, be), x0=x0),
        lambda: S.glr_interpolate(wts, known, mask, iters=7, x0=x0),
        lambda: S.glr_interpolate(wts, known, mask, iters=50, tol=1e-6),
    ]
    saved = [t.clone() for t in (known, mask, x0, wbar, wts)]
    for run in runs:
        ref = run()
        with torch.no_grad():
            got = run()
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(saved, (known, mask, x0, wbar, wts)):
        assert torch.equal(a, b)


def test_workspace_reuse(gen, monkeypatch):
    """Edge-state buffers kept in a caller's workspace give the same results call after call (the
    PyTorch path: the native one replays the state and keeps no edge tensors)."""
    with backend.use("torch"):
        wbar, known, mask = gtv_problem(gen, B=1, K=2, C=2, h=6, w=7)
        ref = S.gtv_interpolate(wbar, known, mask, admm_iters=4, cg_iters=5)
        ws: dict = {}
        with torch.no_grad():
            a = S.gtv_interpolate(wbar, known, mask, admm_iters=4, cg_iters=5, workspace=ws)
            buffers = ws["gtv_edge_state"]
            b = S.gtv_interpolate(wbar, known, mask, admm_iters=4, cg_iters=5, workspace=ws)
            assert all(x is y for x, y in zip(buffers, ws["gtv_edge_state"]))  # reused, not reallocated
            other = S.gtv_interpolate(wbar[:, :, :, :5, :5], known[..., :5, :5], mask[..., :5, :5], admm_iters=3,
                                      workspace=ws)  # another size simply gets new buffers
        torch.testing.assert_close(a, ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(b, ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(other, S.gtv_interpolate(wbar[:, :, :, :5, :5], known[..., :5, :5],
                                                            mask[..., :5, :5], admm_iters=3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 2, 3, 6, 7), (2, 1, 2, 9, 21), (1, 3, 1, 1, 5), (1, 1, 2, 4, 1)])
def test_replayed_edge_term_equals_the_stateful_edge_steps(gen, dtype, shape):
    """The native replay (no edge state kept) gives the edge term n of the stateful edge steps
    (:func:`admm_edge_step` chained from the zero state) after 1..8 iterates: per-head and shared
    gamma, head-shared weights, border-only images."""
    if not G.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    B, K, C, h, w = shape
    for wk in (K, 1):
        wbar = G.random_walk_weights(graph_weights(gen, B, wk, h, w)).to(dtype)
        xs = [(rand(gen, B, K, C, h, w) * 3).to(dtype) for _ in range(backend.settings.max_replayed_steps)]
        for gamma in (torch.linspace(0.5, 12.0, K, dtype=dtype), 4.0):
            D = u = v = None
            with torch.no_grad():
                for t in range(backend.settings.max_replayed_steps):
                    D, u, v, n = S.admm_edge_step(xs[t], wbar, D, u, v, gamma)
                    D, u, v = D.clone(), u.clone(), v.clone()
                    got = admm_edge.edge_term_replayed(xs[: t + 1], wbar, gamma)
                    tol = {} if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5 * (1 + n.abs().max().item()))
                    torch.testing.assert_close(got, n, **tol)
                    assert got.abs().max() > 0


def test_admm_beyond_the_replayable_steps_keeps_the_state(gen):
    """More edge steps than the replay kernel handles: the stateful path runs, same result as
    autograd's path."""
    wbar, known, mask = gtv_problem(gen, B=1, K=2, C=2, h=6, w=7)
    iters = backend.settings.max_replayed_steps + 2
    al, be = torch.full((3,), 0.4, dtype=DT), torch.full((3,), 0.2, dtype=DT)
    ref = S.gtv_interpolate(wbar.requires_grad_(), known, mask, admm_iters=iters, cg_iters=3, cg=("unrolled", al, be))
    with torch.no_grad():
        got = S.gtv_interpolate(wbar, known, mask, admm_iters=iters, cg_iters=3, cg=("unrolled", al, be))
    torch.testing.assert_close(got, ref.detach(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size,C", [((7, 9), 2), ((1, 9), 2), ((9, 1), 2), ((1, 1), 1), ((5, 6), 2), ((23, 9), 3),
                                    ((6, 21), 1), ((7, 29), 3), ((5, 20), 4), ((6, 13), 5)])
def test_fused_native_cg_unrolled_matches_pytorch_loop(gen, dtype, size, C, mode, monkeypatch):
    """Inference CG through the fused kernel (mode 0: one pass per step; mode 1: one wavefront
    sweep per plane for all steps) against the PyTorch loop: with and without the projection
    ``keep`` (GLR / GTV forms), with a diagonal preconditioner, per-head and shared step sizes,
    weights shared by the heads, 0, 1 and several steps. Widths from 1 to 29 and 1 to 5 channels
    cover the kernel's vectorised interior (whole vectors and an overlapping last one, 1-4
    channels at once), its scalar border columns and rows, and the per-channel fallback."""
    if not G.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    monkeypatch.setattr(backend.settings, "fused_cg_mode", mode)  # restored after the test
    h, w_ = size
    B, K = 2, 3
    w = graph_weights(gen, B, K, h, w_).to(dtype)
    b = rand(gen, B, K, C, h, w_).to(dtype)
    x0 = rand(gen, B, 1, C, h, w_).to(dtype)
    keep = random_mask(gen, (B, 1, C, h, w_), 0.6).to(dtype)
    ops = [S.StencilOperator(w, G.degree(w) + 1.0, keep), S.StencilOperator(w[:, :1], G.degree(w[:, :1]) + keep)]
    steps = [(torch.rand(6, K, generator=gen) * 0.3, torch.rand(6, K, generator=gen) * 0.3),
             (torch.full((1,), 0.4), torch.full((1,), 0.2)), (torch.zeros(0), torch.zeros(0))]
    pre = 0.5 + rand(gen, B, 1, C, h, w_).to(dtype)
    cases = [(op, al, be, p) for op in ops for al, be in steps for p in (None, pre)]
    with torch.no_grad():
        got = [S.cg_unrolled(op, b, x0, al, be, precond=p) for op, al, be, p in cases]
        with backend.use("torch"):
            ref = [S.cg_unrolled(op, b, x0, al, be, precond=p) for op, al, be, p in cases]
    tol = {} if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)  # float32: 6 steps of rounding
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, **tol)
    assert S.cg_unrolled(ops[0], b, x0, *steps[0]).requires_grad is False


def test_jacobi_preconditioned_x_update(gen):
    """precondition=True solves the same eq.-20 systems (exact CG: same ADMM iterates as the plain
    form), and its scaled matrix has eigenvalues in (0, 2] even for a 'hub' graph whose plain
    matrix reaches ~25, where unrolled CG with alpha = 0.5 diverges without the scaling."""
    K, C, h, w = 2, 2, 5, 6
    wbar, known, mask = gtv_problem(gen, B=1, K=K, C=C, h=h, w=w)
    gamma = torch.tensor([3.0, 10.0], dtype=DT)
    for iters in (1, 3):
        a = S.gtv_interpolate(wbar, known, mask, gamma=gamma, admm_iters=iters, cg_iters=60, cg="exact",
                              precondition=True)
        b = S.gtv_admm_reference(wbar, known, mask, gamma=gamma, admm_iters=iters, cg_iters=60, cg="exact")
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-8)
    # a hub: every neighbour of the centre pixel sends (almost) all its weight to it
    d = torch.full((1, 1, 12, 7, 7), 50.0, dtype=DT)  # undirected distances; 0 on the hub's edges
    for j, (dy, dx) in enumerate(G.OFFSETS):
        for i in range(7):
            for k in range(7):
                if (i, k) == (3, 3) or (i + dy, k + dx) == (3, 3):
                    d[0, 0, j, i, k] = 0.0
    wbar = G.random_walk_weights_from_distances(d)
    mask = torch.zeros(1, 1, 7, 7, dtype=DT)
    mask[..., ::2, ::2] = 1
    known = rand(gen, 1, 1, 7, 7) * mask
    pb = admm_reference.make_problem(wbar, known.unsqueeze(1), mask.unsqueeze(1))
    n = 49
    eye = torch.eye(n, dtype=DT).reshape(n, 1, 1, 1, 7, 7)
    A = torch.stack([pb.apply_A(eye[i]).reshape(-1) for i in range(n)])
    jac = gtv._JacobiSystem(pb, (1, 1, 1, 7, 7))
    scaled_op, _ = jac._scaled()
    An = torch.stack([scaled_op(eye[i]).reshape(-1) for i in range(n)])
    ev, evn = torch.linalg.eigvalsh(A), torch.linalg.eigvalsh(An)
    assert ev.max() > 10 and 0 < evn.min() and evn.max() <= 2 + 1e-9
    T = 10
    al, be = torch.full((T,), 0.5, dtype=DT), torch.full((T,), 0.3, dtype=DT)
    plain = S.gtv_interpolate(wbar, known, mask, admm_iters=2, cg_iters=T, cg=("unrolled", al, be))
    pre = S.gtv_interpolate(wbar, known, mask, admm_iters=2, cg_iters=T, cg=("unrolled", al, be), precondition=True)
    assert plain.abs().max() > 1e3 and pre.abs().max() < 2


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_preconditioned_unrolled_cg_is_cg_on_the_jacobi_scaled_system(either_backend, gen, dtype):
    """cg_unrolled(precond = P^-1) in x equals the plain unrolled recurrence on the scaled matrix
    P^-1/2 A P^-1/2 in z = P^1/2 x (built here from dense scaled weights), with autograd, on the
    in-place inference loop and (backend 'native') the fused kernel; per-head steps."""
    K, C, h, w, T = 3, 2, 9, 11, 7
    wbar, known, mask = gtv_problem(gen, B=2, K=K, C=C, h=h, w=w)
    pb = admm_reference.make_problem(wbar, known.unsqueeze(1), mask.unsqueeze(1))
    shape = (2, K, C, h, w)
    b = rand(gen, *shape).to(dtype)
    x0 = rand(gen, *shape).to(dtype)
    al = (0.3 + 0.4 * rand(gen, T, K)).to(dtype)
    be = (0.5 * rand(gen, T, K)).to(dtype)
    s, diag = pb.s.to(dtype), pb.diag.to(dtype)
    op = S.StencilOperator(s, diag)
    sq = diag.sqrt().expand(shape)
    scaled = S.StencilOperator(s, diag)  # A, applied to P^-1/2 z and scaled back: P^-1/2 A P^-1/2 z

    def apply_scaled(z):
        return scaled(z / sq) / sq

    ref = S.cg_unrolled(apply_scaled, b / sq, x0 * sq, al, be) / sq
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-5)
    with torch.no_grad():
        got = S.cg_unrolled(op, b, x0, al, be, precond=diag.reciprocal())
    torch.testing.assert_close(got, ref, **tol)
    with torch.enable_grad():
        got_ad = S.cg_unrolled(op, b, x0, al, be, precond=diag.reciprocal())
    torch.testing.assert_close(got_ad, ref, **tol)
    # the x-update of gtv_interpolate(precondition=True) equals unrolled CG on the folded,
    # normalized-weight scaled operator (how it ran before: one "head" per (head, channel))
    jac = gtv._JacobiSystem(pb, shape)
    sop, sqd = jac._scaled()
    with torch.no_grad():
        z = S.cg_unrolled(sop, jac._fold(b.double()) / sqd, jac._fold(x0.double()) * sqd,
                          al.double().repeat_interleave(C, -1), be.double().repeat_interleave(C, -1))
        new = jac.solve(b.double(), x0.double(), "unrolled", T, al.double(), be.double(), 0.0)
    torch.testing.assert_close(new, (z / sqd).reshape(shape), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_node_update_matches_pytorch(gen, dtype):
    """The fused multiplier / right-hand-side pass of the replay form (c += m (m x - y), returns
    y - c) against the PyTorch formula: broadcast mask and samples, a fractional mask, x in
    padded planes and x broadcast over the heads (which takes the PyTorch path)."""
    if not G.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    B, K, C, h, w = 2, 3, 2, 5, 11
    mask = random_mask(gen, (B, 1, C, h, w), 0.4).to(dtype) * (0.5 + 0.5 * rand(gen, B, 1, C, h, w).to(dtype))
    known = rand(gen, B, 1, C, h, w).to(dtype)
    pb = admm_reference.GtvProblem(wbar=None, mask=mask, y=mask * known, s=None, diag=None)
    padded = backend.padded_planes(known, B, K, C, h, w)
    padded.copy_(rand(gen, B, K, C, h, w).to(dtype))
    for x in (padded, rand(gen, B, 1, C, h, w).to(dtype)):
        c0 = rand(gen, B, K, C, h, w).to(dtype)
        c_ref = c0 + mask * (mask * x - pb.y)
        c = c0.clone()
        with torch.no_grad():
            rhs = admm_edge.node_update(c, pb, x)
        torch.testing.assert_close(c, c_ref)
        torch.testing.assert_close(rhs, pb.y - c_ref)


@pytest.mark.parametrize("grad", [False, True])
def test_cg_trace_sees_every_iterate_and_its_residual(gen, grad):
    """``trace(t, x, r)`` of both CG forms: called for t = 0..T with the iterate the solver returns
    last and ``r = b - A x`` (to rounding); tracing leaves the result unchanged (the fused native
    CG and the autograd form alike)."""
    B, K, C, h, w_ = 1, 2, 2, 6, 7
    w = graph_weights(gen, B, K, h, w_)
    op = S.StencilOperator(w, G.degree(w) + 1.0)
    b, x0 = rand(gen, B, K, C, h, w_), rand(gen, B, K, C, h, w_)
    al, be = torch.full((5, K), 0.3, dtype=DT), torch.full((5, K), 0.2, dtype=DT)
    for solve in (lambda **kw: S.cg_unrolled(op, b, x0, al, be, **kw),
                  lambda **kw: S.cg_exact(op, b, x0, iters=4, **kw)):
        seen: list = []

        def trace(t, x, r):
            seen.append((t, x.detach().clone(), r.detach().clone()))  # noqa: B023 (called in this iteration)

        with torch.set_grad_enabled(grad):
            ref = solve()
            got = solve(trace=trace)
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
        assert [t for t, _, _ in seen] == list(range(len(seen))) and len(seen) in (5, 6)
        torch.testing.assert_close(seen[-1][1], got.detach(), rtol=0, atol=0)
        for _, x, r in seen:
            torch.testing.assert_close(r, b - op(x), rtol=1e-9, atol=1e-9)


def test_admm_reference_trace_sees_every_iteration(gen):
    """``trace(t, state, residuals)`` of the reference ADMM: t = 1..admm_iters, the last state's x
    is the result, and the residual blocks give the history's primal residual."""
    wbar, known, mask = gtv_problem(gen, B=1, K=2, C=2, h=6, w=7)
    seen: list = []
    history: list = []
    x = S.gtv_admm_reference(wbar, known, mask, admm_iters=3, cg_iters=4, history=history,
                             trace=lambda t, st, res: seen.append((t, st.x, res)))
    assert [t for t, _, _ in seen] == [1, 2, 3]
    assert seen[-1][1] is x
    for (_, _, res), h in zip(seen, history):
        norm = sum(e.square().sum(dim=tuple(range(2, e.dim()))) for e in res).sqrt()
        torch.testing.assert_close(norm, h["primal_residual"])
