"""The graph models: initial estimate, iGLR / iGTV, uGLR / uGTV, Bayer alignment, restorer factory.

Oracles: the paper's parameter counts, exact reproduction of linear ramps by linear interpolation,
the sampling operator H (``H x == y``), the plain-RGGB run of the same scene, the initial estimate
as the baseline the graph solvers must beat. Tiny configurations keep each test under a second or
two on a CPU.
"""

from __future__ import annotations

import math

import pytest
import torch

from gsprestore.physics import sampling
from gsprestore.core.errors import UsageError, WeightsError
from gsprestore.methods.graph_methods import make_restorer
from gsprestore.models import PAPER_PARAMS, UnrolledNet, build_interpolator, build_model, initial_estimate, to_rggb
from gsprestore.methods.registry import get_restorer, observation

TINY = dict(blocks=1, heads=2, features=3, width=6, cg_iters=3)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def smooth_image(h: int, w: int, c: int = 3, *, edge: bool = True) -> torch.Tensor:
    """A smooth colour image (low-frequency sinusoids), optionally with one straight edge."""
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                            indexing="ij")
    chans = []
    for k in range(c):
        v = 0.5 + 0.25 * torch.sin(xx / (5.0 + k) + 0.3 * k) * torch.cos(yy / (6.0 + k))
        if edge:
            v = v + 0.3 * (xx + 0.5 * yy > 0.6 * w).float() * (1 if k % 2 == 0 else -1)
        chans.append(v)
    return torch.stack(chans).unsqueeze(0)


def mse(a, b):
    return float(((a - b) ** 2).mean())


# ------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize("method,task", list(PAPER_PARAMS))
def test_parameter_count_within_one_percent_of_paper(method, task):
    n = build_model(method, task).num_params()
    paper = PAPER_PARAMS[(method, task)]
    assert abs(n - paper) / paper < 0.01, (n, paper)


def test_parameter_count_breakdown():
    """5 CNNs of 4 layers (C_in = 3 or 1), 5 x 4 full 12x12 metric factors, the rest scalars."""
    cnn = lambda cin: 9 * 48 * cin + 48 + 3 * (9 * 48 * 48 + 48)  # noqa: E731
    for task, cin in (("demosaic", 3), ("upscale2x", 1)):
        glr, gtv = build_model("uglr", task), build_model("ugtv", task)
        assert sum(p.numel() for p in glr.blocks[0].cnn.parameters()) == cnn(cin)
        assert sum(b.metric_factor.numel() for b in glr.blocks) == 5 * 4 * 144
        scalars_glr = glr.num_params() - 5 * cnn(cin) - 2880
        assert scalars_glr == 5 * (2 * 4 * 50 + 4)  # alpha, beta per head per CG step; 4 mix logits
        assert gtv.num_params() - glr.num_params() == 5 * 4  # one gamma per head


# ------------------------------------------------------------------------- initial estimate


def test_initial_estimate_keeps_samples_and_reproduces_ramps():
    h, w = 12, 14
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                            indexing="ij")
    ramp = (0.1 + 0.03 * xx - 0.02 * yy).expand(1, 3, h, w)
    for task in ("demosaic", "upscale2x"):
        y = sampling.mosaic(ramp) if task == "demosaic" else sampling.decimate(ramp)
        known, mask = observation(task, y)
        x0 = initial_estimate(known, mask)
        assert torch.equal(x0[mask > 0], known[mask > 0])
        # linear interpolation is exact on a linear ramp away from the borders
        inner = (slice(None), slice(None), slice(2, h - 2), slice(2, w - 2))
        torch.testing.assert_close(x0[inner], ramp[inner], atol=1e-12, rtol=0)


def test_initial_estimate_is_bilinear_on_the_2x_grid(gen):
    lr = torch.rand(1, 1, 5, 6, generator=gen, dtype=torch.float64)
    known, mask = observation("upscale2x", lr)
    x0 = initial_estimate(known, mask)
    # (odd, even): mean of the vertical neighbours; (odd, odd): mean of the four diagonal ones
    torch.testing.assert_close(x0[..., 1, 2], (lr[..., 0, 1] + lr[..., 1, 1]) / 2)
    torch.testing.assert_close(x0[..., 3, 5], lr[..., 1:3, 2:4].mean(dim=(-2, -1)))


@pytest.mark.parametrize("pattern", sampling.PATTERNS)
def test_initial_estimate_is_bilinear_demosaicking(pattern, gen):
    """Oracle: the classical bilinear demosaicker (baselines, checked against colour-demosaicing)
    away from the one-pixel rim where its reflected border differs from our in-image average."""
    from gsprestore.methods.classical_methods import demosaic_bilinear

    raw = torch.rand(1, 1, 9, 12, generator=gen, dtype=torch.float64)
    x0 = initial_estimate(*observation("demosaic", raw, pattern))
    ref = demosaic_bilinear(raw, pattern)
    torch.testing.assert_close(x0[..., 1:-1, 1:-1], ref[..., 1:-1, 1:-1])


def test_initial_estimate_uses_the_5x5_window_for_sparse_masks():
    known = torch.zeros(1, 1, 7, 7, dtype=torch.float64)
    mask = torch.zeros_like(known)
    known[..., 1, 1], known[..., 5, 5] = 2.0, 4.0
    mask[..., 1, 1] = mask[..., 5, 5] = 1
    x0 = initial_estimate(known, mask)
    assert float(x0[..., 3, 3]) == pytest.approx(3.0)  # 2 px from both samples: 5x5 fallback
    assert float(x0[..., 2, 2]) == pytest.approx(2.0)  # 3x3 sees only the (1, 1) sample


# ------------------------------------------------------------------------- unrolled networks


LEARNED = ["uglr", "ugtv", "uglr-lite", "ugtv-lite"]


@pytest.mark.parametrize("method", LEARNED)
@pytest.mark.parametrize("task", ["demosaic", "upscale2x"])
def test_every_parameter_gets_a_gradient(method, task, gen):
    extra = dict(admm_iters=2) if method.startswith("ugtv") else {}
    model = build_model(method, task, **TINY, **extra)
    gt = torch.rand(2, 3, 8, 8, generator=gen)
    y = sampling.mosaic(gt) if task == "demosaic" else sampling.decimate(gt)
    known, mask = observation(task, y)
    out = model(known, mask)
    assert out.shape == gt.shape
    ((out - gt) ** 2).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("method", LEARNED)
def test_known_samples_reproduced_exactly(method, gen):
    model = build_model(method, "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=4)
    gt = torch.rand(1, 3, 10, 12, generator=gen)
    y = sampling.mosaic(gt)
    known, mask = observation("demosaic", y)
    with torch.no_grad():
        xs = model(known, mask, return_all=True)
    assert len(xs) == 3
    for x in xs:
        assert x.shape == gt.shape
        assert torch.equal(sampling.mosaic(x), y)  # H x = y after every block


@pytest.mark.parametrize("method", ["ugtv", "ugtv-lite"])
def test_upscale_model_takes_any_channel_count(method, gen):
    model = build_model(method, "upscale2x", **TINY, admm_iters=1)
    for c in (1, 3, 4):
        lr = torch.rand(1, c, 5, 6, generator=gen)
        known, mask = observation("upscale2x", lr)
        with torch.no_grad():
            out = model(known, mask)
        assert out.shape == (1, c, 10, 12)
        assert torch.equal(sampling.decimate(out), lr)


@pytest.mark.parametrize("method", ["ugtv", "ugtv-lite"])
def test_config_rebuilds_the_same_network(method):
    model = build_model(method, "demosaic", blocks=2, cg_iters=3, cnn_input="luma")
    clone = UnrolledNet(**model.config)
    assert clone.config == model.config
    clone.load_state_dict(model.state_dict(), strict=True)
    import json

    json.dumps(model.config)  # JSON-able
    with pytest.raises(TypeError):
        build_model("ugtv", "demosaic", nonsense=1)


@pytest.mark.parametrize("method", ["ugtv", "ugtv-lite"])
def test_checkpointing_gives_the_same_gradients(method, gen):
    torch.manual_seed(0)
    model = build_model(method, "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=2, admm_iters=1)
    gt = torch.rand(1, 3, 8, 8, generator=gen)
    known, mask = observation("demosaic", sampling.mosaic(gt))
    grads = []
    for ck in (False, True, "block", "block+head"):
        model.zero_grad()
        model.checkpoint = ck
        ((model(known, mask) - gt) ** 2).mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            torch.testing.assert_close(a, b)


def test_untrained_network_is_a_sane_interpolator():
    """With the initial values (CG steps as iGLR/iGTV, gamma 10, M = 0.25 I, equal heads) the
    untrained network is a finite, plausible interpolator (within 3x the MSE of the bilinear
    estimate on a smooth image; the learned graph starts without iGLR's location features)."""
    torch.manual_seed(0)
    gt = smooth_image(24, 24)
    known, mask = observation("demosaic", sampling.mosaic(gt))
    base = mse(initial_estimate(known, mask), gt)
    for method in ("uglr", "ugtv"):
        model = build_model(method, "demosaic", blocks=2)
        with torch.no_grad():
            out = model(known, mask)
        assert torch.isfinite(out).all()
        assert mse(out, gt) < 3 * base, method
        # the solver ran: the output left the initial estimate (measured: 0.92x the estimate's own
        # error), and the observed samples are kept exactly (H x = y)
        assert mse(out, initial_estimate(known, mask)) > 0.3 * base, method
        assert torch.equal(out * mask, known * mask), method


# ------------------------------------------------------------------------- iGLR / iGTV


def _dense_laplacian(w2d):
    """Dense combinatorial Laplacian (N x N) of undirected weights (12, h, w), entry by entry."""
    import itertools

    import numpy as np

    from gsprestore.graph.operators import OFFSETS

    _, h, wd = w2d.shape
    A = np.zeros((h * wd, h * wd))
    for k, (dy, dx) in enumerate(OFFSETS):
        for i, j in itertools.product(range(h), range(wd)):
            if 0 <= i + dy < h and 0 <= j + dx < wd:
                p, q = i * wd + j, (i + dy) * wd + j + dx
                A[p, q] += w2d[k, i, j]
                A[q, p] += w2d[k, i, j]
    return np.diag(A.sum(1)) - A


@pytest.mark.parametrize("laplacian", ["normalized", "preconditioned"])
@pytest.mark.parametrize("task", ["demosaic", "upscale2x"])
def test_iglr_solves_eq9_on_its_graph(laplacian, task):
    """Oracle: a dense solve of L_{S'S'} x = -L_{S'S} y (eq. 9) on the graph iGLR builds from the
    initial estimate (RGB + location features, M = 1.5 I), per channel; L = D^-1/2 L D^-1/2
    ("normalized", the paper) or D - W ("preconditioned": same minimiser as combinatorial GLR).
    Exact CG matches it to 1e-6 and the paper's unrolled CG (alpha 0.5, beta 0.3, 50 steps) to 1e-3."""
    import numpy as np

    gt = smooth_image(10, 12).double()
    y = sampling.mosaic(gt) if task == "demosaic" else sampling.decimate(gt)
    known, mask = observation(task, y)
    m = build_interpolator("iglr", glr_laplacian=laplacian)
    w = m.graph_weights(initial_estimate(known, mask))[0, 0].numpy()
    L = _dense_laplacian(w)
    if laplacian == "normalized":
        dis = 1 / np.sqrt(np.diag(L))
        L = dis[:, None] * L * dis[None, :]
    ref = known[0].reshape(3, -1).numpy().copy()
    for c in range(ref.shape[0]):
        S = mask[0, c].reshape(-1).numpy() > 0
        U = ~S
        ref[c, U] = np.linalg.solve(L[np.ix_(U, U)], -L[np.ix_(U, S)] @ ref[c, S])
    ref = torch.from_numpy(ref).reshape(gt.shape)
    exact = build_interpolator("iglr", cg="exact", glr_laplacian=laplacian, tol=1e-12)(known, mask)
    torch.testing.assert_close(exact, ref, atol=1e-6, rtol=0)
    unrolled = build_interpolator("iglr", glr_laplacian=laplacian)(known, mask)
    torch.testing.assert_close(unrolled, ref, atol=1e-3, rtol=0)


def test_preconditioned_glr_reproduces_constants_normalized_does_not():
    """Why uGLR defaults to the preconditioned form: x^T L x has the constants in its null space,
    x^T L_n x does not (its minimiser leans towards sqrt(degree) where degrees vary)."""
    gt = torch.full((1, 3, 12, 12), 0.5)
    gt[..., :, 6:] = 0.9  # a colour edge makes the degrees vary
    known, mask = observation("demosaic", sampling.mosaic(gt))
    flat = torch.full_like(gt, 0.5)
    kf, mf = observation("demosaic", sampling.mosaic(flat))
    pre = build_interpolator("iglr", cg="exact", glr_laplacian="preconditioned", tol=1e-10)
    nrm = build_interpolator("iglr", cg="exact", glr_laplacian="normalized", tol=1e-10)
    torch.testing.assert_close(pre(kf, mf), flat, atol=1e-5, rtol=0)
    assert (nrm(kf, mf) - flat).abs().max() > 1e-3  # border degrees differ: bias
    assert mse(pre(known, mask), gt) < mse(nrm(known, mask), gt)


@pytest.mark.parametrize("cg", ["unrolled", "exact"])
@pytest.mark.parametrize("task", ["demosaic", "upscale2x"])
def test_graph_interpolators_lower_their_objective(cg, task):
    """iGLR lowers the GLR of its graph below the initial estimate's (it minimises it subject to
    H x = y, which the estimate satisfies); iGTV's ADMM lowers the GTV ||C-bar x||_1 once it runs
    long enough (20 iterations; the paper's 5 stop early, see docs/architecture.md). Both keep
    H x = y exactly, have no parameters, and stay close to the estimate in MSE (sane; on this
    smooth image neither beats bilinear, like the paper's iGLR on McM and Kodak)."""
    from gsprestore.graph import operators as graph

    gt = smooth_image(16, 16)
    y = sampling.mosaic(gt) if task == "demosaic" else sampling.decimate(gt)
    known, mask = observation(task, y)
    x0 = initial_estimate(known, mask)
    H = sampling.mosaic if task == "demosaic" else sampling.decimate
    r = get_restorer("iglr", task, cg=cg)
    w = r.module.graph_weights(x0)
    energy = lambda x: float((x.unsqueeze(1) * graph.normalized_laplacian_apply(w, x.unsqueeze(1))).sum())  # noqa
    out = r(y)
    assert r.num_params == 0 and torch.equal(H(out), y)
    assert energy(out) < 0.8 * energy(x0)
    r = get_restorer("igtv", task, cg=cg, admm_iters=20)
    wbar = r.module.graph_weights(x0)
    gtv = lambda x: float(graph.graph_total_variation(wbar, x.unsqueeze(1)).sum())  # noqa: E731
    out = r(y)
    assert torch.equal(H(out), y)
    assert gtv(out) < 0.97 * gtv(x0)
    paper = get_restorer("igtv", task, cg=cg)(y)  # 5 x 10
    assert torch.equal(H(paper), y) and mse(paper, gt) < 1.25 * mse(x0, gt)


def test_graph_interpolator_options_and_errors():
    m = build_interpolator("iglr", passes=2, glr_iters=5)
    assert m.config["passes"] == 2 and m.receptive_field() == 2 + 2 * (4 + 10)
    assert build_interpolator("igtv", cg="exact").receptive_field() is None
    with pytest.raises(UsageError):
        get_restorer("iglr", "demosaic", cg="fastest")
    with pytest.raises(UsageError):
        get_restorer("igtv", "demosaic", weights="x.pt")


# ------------------------------------------------------------------------- Bayer alignment


@pytest.mark.parametrize("pattern", sampling.PATTERNS)
@pytest.mark.parametrize("size", [(8, 10), (7, 9), (8, 9), (7, 10)])
def test_pattern_alignment_is_exact(pattern, size, gen):
    """The aligned mosaic is exactly the RGGB mosaic of the same transform of the scene, and
    ``undo`` inverts the transform (flip for even sizes, mirrored line for odd ones)."""
    rgb = torch.rand(1, 3, *size, generator=gen)
    y = sampling.mosaic(rgb, pattern)
    y_rggb, undo = to_rggb(y, pattern)
    rgb_t, undo_rgb = to_rggb(rgb, pattern)
    assert torch.equal(y_rggb, sampling.mosaic(rgb_t, "RGGB"))
    assert torch.equal(undo(rgb_t), rgb)
    assert torch.equal(undo_rgb(rgb_t), rgb)
    if pattern == "RGGB":
        assert torch.equal(y_rggb, y)


def _save_tiny(tmp_path, method, task, **cfg):
    from gsprestore.methods.weights import save_weights

    torch.manual_seed(3)
    model = build_model(method, task, **cfg)
    path = tmp_path / f"{method}_{task}.pt"
    save_weights(path, model, {"method": method, "task": task})
    return model, path


@pytest.mark.parametrize("pattern", sampling.PATTERNS)
@pytest.mark.parametrize("size", [(8, 10), (7, 9)])
def test_learned_restorer_any_pattern(pattern, size, tmp_path, gen):
    """A learned demosaicker on any pattern = the same model on the RGGB-aligned scene, mapped
    back; the observed samples are kept in the caller's pattern."""
    model, path = _save_tiny(tmp_path, "uglr", "demosaic", **TINY)
    r = make_restorer("uglr", "demosaic", weights=path)
    rgb = torch.rand(1, 3, *size, generator=gen)
    y = sampling.mosaic(rgb, pattern)
    out = r(y, pattern)
    assert out.shape == rgb.shape
    assert torch.equal(sampling.mosaic(out, pattern), y)
    rgb_t, undo = to_rggb(rgb, pattern)
    with torch.no_grad():
        ref = undo(model(*observation("demosaic", sampling.mosaic(rgb_t, "RGGB"))))
    torch.testing.assert_close(out, ref)
    assert r.halo > 0 and r.info["receptive_field"] >= r.halo


# ------------------------------------------------------------------------- no random weights


@pytest.mark.parametrize("method", ["uglr", "ugtv"])
@pytest.mark.parametrize("task", ["demosaic", "upscale2x"])
def test_learned_methods_refuse_to_run_without_weights(method, task, tmp_path, monkeypatch):
    (tmp_path / "manifest.json").write_text('{"models": []}')
    monkeypatch.setenv("GSPRESTORE_WEIGHTS", str(tmp_path))
    with pytest.raises(WeightsError) as exc:
        get_restorer(method, task)
    msg = str(exc.value)
    assert msg == (f"no pretrained weights for {method} ({task}): {tmp_path / 'manifest.json'} has none; "
                   "train with `gsprestore train` or pass --weights PATH")
    assert "\n" not in msg


def test_learned_restorer_rejects_cg_override(tmp_path):
    _, path = _save_tiny(tmp_path, "ugtv", "upscale2x", **TINY, admm_iters=1)
    with pytest.raises(UsageError):
        make_restorer("ugtv", "upscale2x", weights=path, cg="exact")
    r = make_restorer("ugtv", "upscale2x", weights=path)
    lr = torch.rand(1, 3, 4, 5)
    out = r(lr)
    assert out.shape == (1, 3, 8, 10) and torch.equal(out[..., 0::2, 0::2], lr)
    assert not math.isnan(float(out.sum()))


# ------------------------------------------------------------------------- green-difference signal


def test_green_difference_estimate_is_bilinear_on_colour_differences(gen):
    from gsprestore.models.unrolled import green_difference_estimate

    gt = smooth_image(16, 20)
    known, mask = observation("demosaic", sampling.mosaic(gt))
    est = green_difference_estimate(known, mask)
    assert torch.equal(sampling.mosaic(est), sampling.mosaic(gt))
    # oracle: G by bilinear; R - G and B - G by bilinear of the differences at the R / B sites
    g = initial_estimate(known[:, 1:2], mask[:, 1:2])
    for c in (0, 2):
        d = initial_estimate((known[:, c : c + 1] - g) * mask[:, c : c + 1], mask[:, c : c + 1])
        ref = torch.where(mask[:, c : c + 1] > 0, known[:, c : c + 1], d + g)
        torch.testing.assert_close(est[:, c : c + 1], ref)
    # a grey-plus-offset image (R - G, B - G constant) is reproduced exactly away from the borders
    grey = gt[:, 1:2]
    img = torch.cat([grey + 0.1, grey, grey - 0.05], dim=1)
    k2, m2 = observation("demosaic", sampling.mosaic(img))
    e2 = green_difference_estimate(k2, m2)
    assert mse(e2[..., 2:-2, 2:-2], img[..., 2:-2, 2:-2]) < mse(initial_estimate(k2, m2)[..., 2:-2, 2:-2],
                                                                 img[..., 2:-2, 2:-2])


@pytest.mark.parametrize("method", LEARNED)
def test_green_difference_network_keeps_samples_and_trains(method, gen):
    model = build_model(method, "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=3,
                        signal="green-difference", **(dict(admm_iters=2) if method.startswith("ugtv") else {}))
    gt = torch.rand(2, 3, 10, 12, generator=gen)
    y = sampling.mosaic(gt)
    known, mask = observation("demosaic", y)
    out = model(known, mask)
    assert torch.equal(sampling.mosaic(out), y)
    ((out - gt) ** 2).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    with torch.no_grad():  # the inference path (solver buffers reused across blocks) gives the same
        torch.testing.assert_close(model(known, mask), out.detach())
    rebuilt = UnrolledNet(**model.config)
    assert rebuilt.config["signal"] == "green-difference"


def test_green_difference_is_for_colour_demosaicking_only():
    with pytest.raises(ValueError, match="demosaicking only"):
        build_model("ugtv", "upscale2x", signal="green-difference")
    with pytest.raises(ValueError, match="unknown signal"):
        build_model("uglr", "demosaic", signal="lab")


@pytest.mark.parametrize("method,signal", [("ugtv", "rgb"), ("ugtv", "green-difference"), ("uglr", "rgb"),
                                           ("ugtv-lite", "green-difference"), ("uglr-lite", "rgb")])
def test_inference_forward_native_kernels_match_pytorch_path(method, signal, gen, monkeypatch):
    """A whole network forward without autograd (fused CG and the other forward-only kernels)
    equals the PyTorch path, and the autograd forward; odd size, float64 and float32."""
    from gsprestore.core import backend

    if not backend.native_available():
        pytest.skip(f"native kernels unavailable: {backend.error()}")
    model = build_model(method, "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=4, signal=signal,
                        **(dict(admm_iters=2) if method.startswith("ugtv") else {}))
    gt = torch.rand(1, 3, 9, 11, generator=gen)
    known, mask = observation("demosaic", sampling.mosaic(gt))
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        m = model.to(dtype)
        k, msk = known.to(dtype), mask.to(dtype)
        with torch.no_grad():
            fast = m(k, msk)
        with_grad = m(k, msk).detach()
        with backend.use("torch"):
            with torch.no_grad():
                slow = m(k, msk)
        torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
        torch.testing.assert_close(fast, with_grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("task", ["demosaic", "upscale2x"])
def test_uglr_gradients_stay_finite_with_a_sharp_metric(task, gen):
    """A sharp learned metric makes exp(-d) underflow for every neighbour of some pixels; the
    GLR_MIN_WEIGHT floor keeps the normalised Laplacian's gradient finite (it was NaN in training)."""
    gt = torch.rand(2, 3, 24, 24, generator=gen)
    y = sampling.mosaic(gt) if task == "demosaic" else sampling.decimate(gt)
    known, mask = observation(task, y)
    for scale in (50.0, 300.0):
        torch.manual_seed(0)
        model = build_model("uglr", task, blocks=2, cg_iters=8)
        with torch.no_grad():
            for b in model.blocks:
                b.metric_factor.mul_(scale)
        out = model(known, mask)
        assert torch.isfinite(out).all()
        ((out - gt) ** 2).mean().backward()
        bad = [n for n, p in model.named_parameters() if not torch.isfinite(p.grad).all()]
        assert not bad, (scale, bad)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("cin,h,w", [(3, 7, 5), (48, 2, 9), (1, 33, 20), (3, 2, 2)])
def test_feature_cnn_inference_path_equals_replicate_padded_convs(cin, h, w, dtype):
    """Without autograd FeatureCNN skips the padded copies (zero-padded conv + border strips) and
    runs channels-last; the values must be those of nn.Conv2d(padding_mode="replicate"), returned
    as a contiguous NCHW tensor (float32: oneDNN's channels-last kernels round differently)."""
    from gsprestore.models.feature_cnn import FeatureCNN

    torch.manual_seed(0)
    m = FeatureCNN(cin).to(dtype)
    x = torch.rand(2, cin, h, w, dtype=dtype)
    ref = m(x)
    with torch.no_grad():
        got = m(x)
    assert got.is_contiguous()
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, ref.detach(), **tol)


def test_feature_cnn_falls_back_to_two_ops_where_the_fused_relu_is_refused(monkeypatch):
    """Where oneDNN's convolution with the ReLU post-op raises (a build without it), the inference
    path runs the convolution and the ReLU as two ops, with the same values, and stops asking."""
    from gsprestore.models import feature_cnn
    from gsprestore.models.feature_cnn import FeatureCNN

    torch.manual_seed(0)
    m = FeatureCNN(4, width=8, layers=3)
    x = torch.rand(1, 4, 12, 10)
    with torch.no_grad():
        want = m(x)
    calls = []

    def refuse(*args):
        calls.append(args)
        raise RuntimeError("no pointwise convolution in this build")

    monkeypatch.setattr(feature_cnn, "_POINTWISE", refuse)
    with torch.no_grad():
        got = m(x)
        again = m(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(again, got) and len(calls) == 1 and feature_cnn._POINTWISE is None


@pytest.mark.parametrize("shape,chunk", [((2, 5, 7, 9), 10), ((1, 48, 3, 4), 4096), ((1, 1, 1, 1), 1)])
def test_chunked_channels_last_to_contiguous(shape, chunk):
    """The chunked transpose that brings the feature CNN's channels-last output back to NCHW."""
    from gsprestore.models.feature_cnn import to_contiguous

    h = torch.rand(*shape).contiguous(memory_format=torch.channels_last)
    got = to_contiguous(h, chunk=chunk)
    assert got.is_contiguous() and torch.equal(got, h)
    plain = torch.rand(*shape)
    assert to_contiguous(plain) is plain


@pytest.mark.parametrize("method", ["ugtv", "uglr"])
def test_reduced_precision_runs_only_the_cnn_in_it(method, gen):
    """Under autocast (bf16 here on the CPU; bf16 / fp16 on a GPU) the feature CNN runs in reduced
    precision but the graphs and solvers in the estimate's float32: the output is float32, finite
    and close to the float32 forward."""
    model = build_model(method, "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=3,
                        signal="green-difference", **(dict(admm_iters=2) if method == "ugtv" else {})).eval()
    gt = torch.rand(1, 3, 16, 18, generator=gen)
    known, mask = observation("demosaic", sampling.mosaic(gt))
    with torch.no_grad():
        ref = model(known, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(known, mask)
    assert low.dtype == torch.float32 and torch.isfinite(low).all()
    assert (low - ref).abs().max() < 0.05 and (low - ref).abs().mean() < 5e-3
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # the graph the solvers get
        w = model.blocks[0].graph_weights(ref, workspace={})
    assert w.dtype == torch.float32


def test_cached_constants_made_in_inference_mode_serve_training():
    """The first use of a cached constant (here the luma weights of a 2x model) inside
    torch.inference_mode() must not poison later training forwards (it raised "Inference
    tensors cannot be saved for backward")."""
    from gsprestore.models.constants import constant

    constant.cache_clear()
    model = build_model("uglr", "upscale2x", blocks=2, heads=1, features=3, width=3, cg_iters=2)
    known, mask = observation("upscale2x", torch.rand(1, 3, 6, 6))
    with torch.inference_mode():
        model(known, mask)
    model(known, mask).square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())


# ------------------------------------------------------------------------- CPU-size networks (issue 39)


def test_packed_observation_is_the_mosaic_phases_and_the_low_resolution_luma(gen):
    """The trunk's input: demosaicking, the RGGB mosaic's four phases (R, G1, G2, B) as channels;
    2x, the luma of the low-resolution image (the 2x grid's phase (0, 0))."""
    from gsprestore.models.feature_cnn import luma
    from gsprestore.models.packed_trunk import packed_observation

    gt = torch.rand(2, 3, 6, 8, generator=gen)
    y = sampling.mosaic(gt)[:, 0]
    known, _ = observation("demosaic", sampling.mosaic(gt))
    packed = packed_observation(known, "estimate")
    want = torch.stack([y[:, 0::2, 0::2], y[:, 0::2, 1::2], y[:, 1::2, 0::2], y[:, 1::2, 1::2]], dim=1)
    assert torch.equal(packed, want)
    lr = torch.rand(2, 3, 4, 5, generator=gen)
    known, _ = observation("upscale2x", lr)
    torch.testing.assert_close(packed_observation(known, "luma"), luma(lr))


def test_block_feature_head_unpacks_each_cell_pixel_by_its_own_weights(gen):
    """Pixel (2i + a, 2j + b) of the head's output is W_(a,b) t_(i,j) + b_(a,b) + V x_(2i+a, 2j+b):
    the pixel shuffle's channel order, checked against an explicit loop (float64)."""
    from gsprestore.models.packed_trunk import BlockFeatureHead

    head = BlockFeatureHead(5, 3, 2).double()
    trunk = torch.rand(1, 5, 3, 4, generator=gen, dtype=torch.float64)
    x = torch.rand(1, 3, 6, 8, generator=gen, dtype=torch.float64)
    out = head(trunk, x)
    W, bias = head.unpack.weight[:, :, 0, 0], head.unpack.bias
    V = head.estimate.weight[:, :, 0, 0]
    for i in range(3):
        for j in range(4):
            for a in range(2):
                for b in range(2):
                    rows = torch.arange(2) * 4 + 2 * a + b  # pixel_shuffle: channel c * 4 + 2 a + b
                    want = W[rows] @ trunk[0, :, i, j] + bias[rows] + V @ x[0, :, 2 * i + a, 2 * j + b]
                    torch.testing.assert_close(out[0, :, 2 * i + a, 2 * j + b], want)


@pytest.mark.parametrize("method", ["uglr-lite", "ugtv-lite"])
def test_lite_network_gradcheck(method, gen):
    """float64 gradcheck of a whole CPU-size network (trunk, heads, graph, unrolled solver) with
    respect to the trunk's first convolution and a head's weights, on an odd-sized mosaic."""
    torch.manual_seed(0)
    model = build_model(method, "demosaic", blocks=1, heads=1, features=2, width=3, cnn_layers=1, cg_iters=2,
                        **(dict(admm_iters=1) if method == "ugtv-lite" else {})).double()
    gt = torch.rand(1, 3, 5, 7, generator=gen, dtype=torch.float64)
    known, mask = observation("demosaic", sampling.mosaic(gt))
    params = [model.trunk.cnn.convs[0].weight, model.blocks[0].head.unpack.weight]

    def f(w_trunk, w_head):
        return torch.func.functional_call(model, {"trunk.cnn.convs.0.weight": w_trunk,
                                                  "blocks.0.head.unpack.weight": w_head}, (known, mask))

    inputs = tuple(p.detach().clone().requires_grad_() for p in params)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_lite_config_is_the_cpu_size_network():
    from gsprestore.models.unrolled import DENOISE_SUFFIX, METHOD_PRIOR, method_name, method_trunk

    for method, prior in METHOD_PRIOR.items():
        m = build_model(method, "demosaic")
        assert m.method == method == method_name(prior, method_trunk(method), method.endswith(DENOISE_SUFFIX))
        assert m.config.get("feature_trunk", "per-block") == method_trunk(method)
    paper, lite = build_model("ugtv", "demosaic"), build_model("ugtv-lite", "demosaic")
    assert not hasattr(paper, "trunk") and hasattr(lite, "trunk")
    assert lite.num_params() < paper.num_params()
    # the trunk's receptive field counts once, at half resolution
    assert lite.receptive_field() > 0


def test_lite_weights_round_trip_and_refuse_the_paper_size_method(tmp_path):
    from gsprestore.methods.weights import load_model, save_weights

    model = build_model("ugtv-lite", "demosaic", **TINY, admm_iters=1)
    path = tmp_path / "lite.pt"
    save_weights(path, model)
    loaded = load_model("ugtv-lite", "demosaic", path=path)
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k
    with pytest.raises(WeightsError):
        load_model("ugtv", "demosaic", path=path)


def test_menon_initial_estimate_is_menons_demosaicking_with_the_samples_kept(gen):
    from gsprestore.methods.classical_methods import demosaic_menon

    model = build_model("ugtv-lite", "demosaic", **TINY, admm_iters=1, initial_estimate="menon")
    gt = torch.rand(1, 3, 12, 14, generator=gen)
    y = sampling.mosaic(gt)
    known, mask = observation("demosaic", y)
    x0 = model(known, mask, return_all=True)[0]
    torch.testing.assert_close(x0, torch.where(mask > 0, known, demosaic_menon(y)))
    assert torch.equal(sampling.mosaic(x0), y)
    out = model(known, mask)
    ((out - gt) ** 2).mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    with pytest.raises(ValueError, match="demosaicking only"):
        build_model("uglr-lite", "upscale2x", initial_estimate="menon")


def test_bicubic_initial_estimate_is_the_aligned_bicubic(gen):
    from gsprestore.classical.upscale import upscale_bicubic

    model = build_model("uglr-lite", "upscale2x", **TINY, initial_estimate="bicubic")
    lr = torch.rand(1, 3, 6, 7, generator=gen)
    known, mask = observation("upscale2x", lr)
    x0 = model(known, mask, return_all=True)[0]
    torch.testing.assert_close(x0, upscale_bicubic(lr))
    assert torch.equal(sampling.decimate(model(known, mask)), lr)
    with pytest.raises(ValueError, match="2x interpolation only"):
        build_model("ugtv-lite", "demosaic", initial_estimate="bicubic")
