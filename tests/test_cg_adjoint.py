"""The unrolled CG's hand-written adjoint backward (gsprestore.solvers.cg.adjoint) against plain
autograd through every step of the same recurrence, and float64 gradcheck."""

import pytest
import torch

from gsprestore.core import backend
from gsprestore.graph import operators as G
from gsprestore.solvers.cg import adjoint as cg_adjoint
from gsprestore.solvers.cg import StencilOperator, cg_unrolled


def _problem(seed=0, B=2, K=2, C=2, H=7, W=6, T=4, kw=None, keep=True, precond=True, per_head=True,
             dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g, dtype=dtype)  # noqa: E731
    kw = K if kw is None else kw
    w = r(B, kw, G.NU, H, W) + 0.1
    w = w * _valid(H, W, dtype)  # edges leaving the image are zero, as the model's are
    diag = G.degree(w.expand(B, K, G.NU, H, W)) + r(B, K, 1, H, W) + 0.5  # PD
    mask = (r(B, 1, C, H, W) > 0.5).to(dtype)
    t = {
        "w": w,
        "diag": diag,
        "keep": (1.0 - mask) if keep else None,
        "precond": diag.reciprocal() if precond else None,
        "b": r(B, K, C, H, W) - 0.5,
        "x0": r(B, 1, C, H, W),
        "alphas": 0.3 + 0.4 * r(T, K) if per_head else 0.3 + 0.4 * r(T),
        "betas": 0.5 * r(T, K) if per_head else 0.5 * r(T),
    }
    return t


def _valid(H, W, dtype):
    ones = torch.ones(1, 1, 1, H, W, dtype=dtype)
    m = torch.zeros(1, 1, G.NU, H, W, dtype=dtype)
    for k, P, _Q in G.regions(H, W):
        m[:, :, k : k + 1, P[0], P[1]] = ones[..., P[0], P[1]]
    return m


def _run(t, adjoint: bool):
    op = StencilOperator(t["w"], t["diag"], t["keep"])
    with backend.configure(cg_adjoint=int(adjoint)):
        return cg_unrolled(op, t["b"], t["x0"], t["alphas"], t["betas"], precond=t["precond"])


NAMES = ("w", "diag", "keep", "precond", "b", "x0", "alphas", "betas")


@pytest.mark.parametrize("kw", [None, 1])
@pytest.mark.parametrize("keep,precond,per_head", [(True, True, True), (False, True, False), (True, False, True),
                                                   (False, False, False)])
@pytest.mark.parametrize("native", ["native", "torch"])
@pytest.mark.parametrize("keep_grad", [True, False])
def test_adjoint_matches_plain_autograd(kw, keep, precond, per_head, native, keep_grad, monkeypatch):
    """Values and every input's gradient. On the CPU with keep needing no gradient (the models'
    case: the sampling mask) the backward is the native sweep (``cg_unrolled_backward``, counted);
    a keep that needs one takes the PyTorch adjoint."""
    if native == "native" and not G.native_available():
        pytest.skip("native kernels not built")
    if not keep and not keep_grad:
        pytest.skip("no keep")
    calls = []
    real = cg_adjoint._backward_native
    monkeypatch.setattr(cg_adjoint, "_backward_native", lambda *a: calls.append(1) or real(*a))
    t = _problem(kw=kw, keep=keep, precond=precond, per_head=per_head)
    names = [n for n in NAMES if t[n] is not None]
    out = {}
    with backend.use(native):
        for adjoint in (False, True):
            leaves = {n: t[n].clone().requires_grad_(n != "keep" or keep_grad) for n in names}
            x = _run({**t, **leaves}, adjoint)
            seed = torch.linspace(-1, 1, x.numel(), dtype=x.dtype).reshape(x.shape)
            grads = torch.autograd.grad((x * seed).sum(), [leaves[n] for n in names if leaves[n].requires_grad])
            out[adjoint] = (x.detach(), dict(zip([n for n in names if leaves[n].requires_grad], grads)))
    assert len(calls) == (1 if native == "native" and not (keep and keep_grad) else 0)
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-12, atol=1e-12)
    for n in out[True][1]:
        torch.testing.assert_close(out[True][1][n], out[False][1][n], rtol=1e-10, atol=1e-10, msg=n)


def test_adjoint_is_used_under_autograd_and_not_when_turned_off(monkeypatch):
    calls = []
    real = cg_adjoint._UnrolledCG.apply
    monkeypatch.setattr(cg_adjoint._UnrolledCG, "apply", lambda *a: calls.append(1) or real(*a))
    t = _problem()
    t["w"].requires_grad_(True)
    _run(t, adjoint=True).sum().backward()
    assert calls == [1]
    _run(t, adjoint=False).sum().backward()
    assert calls == [1]


def test_gradcheck_float64():
    t = _problem(B=1, K=2, C=2, H=5, W=6, T=3)
    names = [n for n in NAMES if t[n] is not None]
    args = [t[n].clone().requires_grad_(True) for n in names]

    def f(*xs):
        d = dict(zip(names, xs))
        return cg_adjoint.cg_unrolled_adjoint(d["w"], d["diag"], d["keep"], d["b"], d["x0"], d["alphas"],
                                              d["betas"], d["precond"])

    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("keep,precond,per_head", [(True, True, True), (False, False, False), (True, False, False)])
def test_gradcheck_float64_native_backward(keep, precond, per_head):
    """float64 gradcheck of the native adjoint sweep (keep without a gradient; odd sizes, borders,
    a plane narrower than the stencil's interior)."""
    if not G.native_available():
        pytest.skip("native kernels not built")
    for H, W in ((5, 6), (7, 3)):
        t = _problem(B=1, K=2, C=3, H=H, W=W, T=3, keep=keep, precond=precond, per_head=per_head)
        names = [n for n in NAMES if t[n] is not None and n != "keep"]
        args = [t[n].clone().requires_grad_(True) for n in names]

        def f(*xs):
            d = {**t, **dict(zip(names, xs))}  # noqa: B023 (called in this iteration)
            return cg_adjoint.cg_unrolled_adjoint(d["w"], d["diag"], d["keep"], d["b"], d["x0"], d["alphas"],
                                                  d["betas"], d["precond"])

        assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("C", [1, 3, 5])
def test_native_backward_vector_rows_match_plain_autograd(C):
    """At a size where the native sweep runs its vectorised interior (rows and columns away from
    the borders, 1-5 channels: the register form for <= 4, per channel above), float64 gradients
    equal plain autograd's."""
    if not G.native_available():
        pytest.skip("native kernels not built")
    t = _problem(B=1, K=2, C=C, H=19, W=37, T=5)
    names = [n for n in NAMES if t[n] is not None and n != "keep"]
    out = []
    for adjoint in (False, True):
        leaves = {n: t[n].clone().requires_grad_(True) for n in names}
        x = _run({**t, **leaves}, adjoint)
        seed = torch.linspace(-1, 1, x.numel(), dtype=x.dtype).reshape(x.shape)
        out.append(torch.autograd.grad((x * seed).sum(), [leaves[n] for n in names]))
    for n, a, b in zip(names, *out):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11, msg=n)


def _model_grads(model, known, mask, gt, adjoint):
    model.zero_grad()
    with backend.configure(cg_adjoint=adjoint):
        out = model(known, mask)
    (out - gt).abs().mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x"])
def test_shipped_models_gradients_equal_reference(name):
    """Every parameter's gradient of a shipped model through the adjoint CG (on the CPU: its forward
    in the fused kernel, its backward the adjoint recurrence) against plain autograd through every
    CG step. float64: equal to 1e-8 relative per parameter tensor. float32: the two paths round
    differently (another summation order; a relu of the ADMM step that flips at a rounding
    difference), and plain autograd's own float32 gradient is 2-4e-4 (relative) from the float64
    one for uGTV, so "within 1e-4 of the reference" is below what float32 resolves there. The
    check is the one that matters: the new path's float32 gradient is as close to the float64
    gradient as the reference's (over all parameters and per tensor whose gradient is at least
    1 % of the largest; a feature conv's bias gradient sums many nearly cancelling terms), within
    twice: which path rounds closer is chance (uGTV demosaic stage 10, inputs of seeds 0-5: new /
    reference 1.55, 0.85, 0.96, 0.88, 1.03, 0.97, errors 6e-4 to 5e-3 on both). Per
    tensor, "as close" allows twice the reference's error plus three times the whole gradient's
    float32 relative error (the reference's) of the tensor's norm: the head-mixing logits'
    gradient sums to zero over the heads, so its own relative error is several times the whole
    gradient's, by chance on either path (uGTV 2x stage 7: 1.2e-3 new, 4.8e-4 reference, against
    4.4e-4 / 4.3e-4 over all parameters); an unstable recurrence would be off by orders of
    magnitude, and the float64 check above proves the two paths the same recurrence."""
    from gsprestore.physics.tasks import network_input
    from gsprestore.methods.weights import load_model

    method, task = name.split("_")
    model = load_model(method, task)
    gt = torch.rand(2, 3, 16, 20, generator=torch.Generator().manual_seed(0))
    grads = {}
    for dtype in (torch.float64, torch.float32):
        model.to(dtype)
        known, mask = network_input(task, gt.to(dtype))
        (out0, g0), (out1, g1) = (_model_grads(model, known, mask, gt.to(dtype), a) for a in (0, 1))
        # the same recurrence: rounding only
        torch.testing.assert_close(out1, out0, rtol=1e-11 if dtype == torch.float64 else 1e-4,
                                   atol=1e-11 if dtype == torch.float64 else 1e-4)
        assert g0.keys() == g1.keys() and len(g0) == len(list(model.parameters()))
        grads[dtype] = ({n: g.double() for n, g in g0.items()}, {n: g.double() for n, g in g1.items()})
    (t, t1), (r32, n32) = grads[torch.float64], grads[torch.float32]
    scale = max(float(g.norm()) for g in t.values())
    for n, g in t.items():  # float64: the adjoint equals plain autograd
        if float(g.norm()) >= 1e-9 * scale:
            assert float((t1[n] - g).norm()) <= 1e-8 * float(g.norm()), n
    flat = lambda d: torch.cat([d[n].flatten() for n in sorted(t)])  # noqa: E731
    err_ref, err_new = (float((flat(d) - flat(t)).norm() / flat(t).norm()) for d in (r32, n32))
    assert err_new <= 2 * err_ref + 1e-5, (err_new, err_ref)
    for n, g in t.items():
        if float(g.norm()) >= 1e-2 * scale:
            e_ref, e_new = float((r32[n] - g).norm()), float((n32[n] - g).norm())
            assert e_new <= 2 * e_ref + max(1e-4, 3 * err_ref) * float(g.norm()), (n, e_new, e_ref, err_ref)
