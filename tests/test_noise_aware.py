"""The noise-aware graph network (gsprestore/models/noise_aware.py, issue 49): noisy pairs from the
raw noise model, the noise map, the graph denoiser against a dense solve and a float64
gradcheck, the clean network as its special case, and the RAW path's choice to denoise."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gsprestore.models.noise_aware import GraphDenoiser, damped_cg, load_clean_weights
from gsprestore.models.unrolled import build_model
from gsprestore.physics import noise as N
from gsprestore.physics.tasks import network_input, observation


def _clean_and_aware(seed: int = 0):
    """A random clean ugtv-lite and the noise-aware network made from it (zero weights from the
    noise channels: :func:`load_clean_weights`, as lab/research/add_noise_input.py does)."""
    torch.manual_seed(seed)
    clean = build_model("ugtv-lite", "demosaic", width=8, cnn_layers=2).eval()
    aware = build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2).eval()
    load_clean_weights(aware, clean.state_dict())
    return clean, aware


def test_srgb_curve_round_trip_and_slope():
    x = torch.linspace(-0.2, 1.2, 301, dtype=torch.float64)
    assert torch.allclose(N.decode_srgb(N.encode_srgb(x)), x, atol=1e-12)
    inner = torch.linspace(0.01, 0.9, 50, dtype=torch.float64)
    h = 1e-6
    numeric = (N.encode_srgb(inner + h) - N.encode_srgb(inner - h)) / (2 * h)
    assert torch.allclose(N.srgb_slope(inner), numeric, rtol=1e-5)


def test_levels_drawn_are_seeded_and_partly_clean():
    a = N.draw_levels(400, (1, 2))
    assert torch.equal(a, N.draw_levels(400, (1, 2))) and not torch.equal(a, N.draw_levels(400, (1, 3)))
    clean = (a == 0).all(dim=(1, 2))
    assert 0.15 < clean.float().mean() < 0.35
    shot_g = a[~clean][:, 1, 0]  # green gain is 1: the drawn a itself
    assert shot_g.min() >= N.LEVELS["low"][0] / 4 * 0.999 and shot_g.max() <= N.LEVELS["high"][0] * 1.001
    # white balance: R and B carry (g a, g^2 b) with gains in WB_RANGE
    g_r = a[~clean][:, 0, 0] / shot_g
    assert torch.allclose(a[~clean][:, 0, 1], g_r**2 * a[~clean][:, 1, 1], rtol=1e-4)
    assert g_r.min() >= N.WB_RANGE["R"][0] - 1e-4 and g_r.max() <= N.WB_RANGE["R"][1] + 1e-4


def test_noisy_mosaic_has_the_model_variance_in_linear_values():
    level = 0.4
    gt = N.encode_srgb(torch.full((1, 3, 256, 256), level, dtype=torch.float64)).float()
    noise = N.level_params("medium", gains=(2.0, 1.0, 1.5))
    y = N.noisy_mosaic(gt, noise, seed=3)
    assert torch.equal(y, N.noisy_mosaic(gt, noise, seed=3))
    lin = N.decode_srgb(y.double())[0, 0]
    a, b = N.LEVELS["medium"]
    for (i, j), g in (((0, 0), 2.0), ((0, 1), 1.0), ((1, 1), 1.5)):
        measured = lin[i::2, j::2].std().item()
        assert measured == pytest.approx(math.sqrt(g * a * level + g * g * b), rel=0.05)


def test_noise_map_is_the_deviation_through_the_curve():
    level = 0.2
    gt = N.encode_srgb(torch.full((2, 3, 32, 32), level))
    known, mask = network_input("demosaic", gt)
    noise = N.level_params("high").expand(2, 3, 2)
    sd = N.std_map(known, mask, noise)
    a, b = N.LEVELS["high"]
    expected = N.srgb_slope(torch.tensor(level)) * math.sqrt(a * level + b)
    assert torch.allclose(sd, torch.full_like(sd, float(expected)), rtol=1e-4)
    assert torch.equal(N.std_map(known, mask, None), torch.zeros_like(sd))


def test_a_clean_network_is_the_noise_aware_one_without_noise():
    clean, aware = _clean_and_aware()
    gt = torch.rand(2, 3, 30, 34)
    known, mask = network_input("demosaic", gt)
    with torch.no_grad():
        ref = clean(known, mask)
        assert torch.equal(aware(known, mask), ref)
        assert torch.allclose(aware(known, mask, noise=torch.zeros(2, 3, 2)), ref, atol=1e-6)
    with pytest.raises(ValueError, match="not noise-aware"):
        clean(known, mask, noise=torch.zeros(2, 3, 2))


def _denoiser_problem(dtype=torch.float64, seed=0, size=(5, 6)):
    """A denoiser, its trunk features, an observation and its packed noise map (``size``: h, w)."""
    torch.manual_seed(seed)
    h, w = size
    den = GraphDenoiser(6, features=3, iters=200).to(dtype)
    trunk = torch.randn(1, 6, h, w, dtype=dtype)
    gt = torch.rand(1, 3, 2 * h, 2 * w, dtype=dtype)
    known, mask = network_input("demosaic", gt)
    sigma = 0.05 + 0.1 * torch.rand(1, 4, h, w, dtype=dtype)
    return den, trunk, known, mask, sigma


@pytest.mark.parametrize("backend_name", ["native", "torch"])
@pytest.mark.parametrize("size", [(5, 6), (9, 14)])
def test_the_denoiser_solves_its_system_as_a_dense_solve_does(backend_name, size):
    """Oracle: the (I + S L_n S) matrix built column by column from the graph's dense Laplacian
    (edge weights to a dense W, independent of the stencil operator), solved by LAPACK; both the
    native CG (inference) and the tensor one (training), on a size with interior rows."""
    from gsprestore.core import backend
    from gsprestore.graph import operators as graph

    if backend_name == "native" and not backend.native_available():
        pytest.skip("no native kernels in this install")
    den, trunk, known, mask, sigma = _denoiser_problem(size=size)
    with backend.use(backend_name), torch.no_grad():
        out = den(trunk, known, mask, sigma)
    with torch.no_grad():
        f = den.project(trunk).unsqueeze(1)
        A = den.metric_factor
        w = graph.edge_weights(f, A @ A.transpose(-1, -2))[0, 0]  # (12, h, w)
        h, wd = w.shape[-2:]
        n = h * wd
        W = torch.zeros(n, n, dtype=w.dtype)
        from gsprestore.graph.window import OFFSETS

        for k, (di, dj) in enumerate(OFFSETS):
            for i in range(h):
                for j in range(wd):
                    ii, jj = i + di, j + dj
                    if 0 <= ii < h and 0 <= jj < wd:
                        W[i * wd + j, ii * wd + jj] += w[k, i, j]
                        W[ii * wd + jj, i * wd + j] += w[k, i, j]
        d = W.sum(1)
        Ln = torch.eye(n, dtype=w.dtype) - W / torch.sqrt(d[:, None] * d[None, :])
        y = torch.nn.functional.pixel_unshuffle(known.sum(1, keepdim=True), 2)[0]  # (4, h, w)
        s = sigma[0] * torch.exp(0.5 * den.log_strength)
        z = torch.stack([torch.linalg.solve(torch.eye(n, dtype=w.dtype) + torch.diag(s[c].reshape(-1)) @ Ln
                                            @ torch.diag(s[c].reshape(-1)), y[c].reshape(-1)).view(h, wd)
                         for c in range(4)])
        expected = mask * torch.nn.functional.pixel_shuffle(z[None], 2)
    assert torch.allclose(out, expected, atol=1e-9)


def test_the_denoiser_gradients_pass_gradcheck():
    den, trunk, known, mask, sigma = _denoiser_problem()
    den.iters = 6
    trunk.requires_grad_(True)
    known = known.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t, k: den(t, k, mask, sigma), (trunk, known), eps=1e-6, atol=1e-6)
    # and through the parameters (the metric and the strength)
    params = [den.metric_factor, den.log_strength]
    loss = den(trunk, known, mask, sigma).pow(2).sum()
    grads = torch.autograd.grad(loss, params)
    for p, g in zip(params, grads):
        with torch.no_grad():
            step = 1e-6 * torch.randn_like(p)
            p.add_(step)
            up = den(trunk, known, mask, sigma).pow(2).sum()
            p.sub_(2 * step)
            down = den(trunk, known, mask, sigma).pow(2).sum()
            p.add_(step)
        assert float((up - down) / 2) == pytest.approx(float((g * step).sum()), rel=1e-4, abs=1e-12)


def test_damped_cg_stays_finite_when_the_system_is_the_identity():
    b = torch.rand(2, 1, 4, 6, 6, requires_grad=True)
    s = torch.zeros(2, 1, 4, 6, 6, requires_grad=True)
    x = damped_cg(lambda v: v + s * v, b, b, 8)
    x.sum().backward()
    assert torch.equal(x, b) and torch.isfinite(b.grad).all() and torch.isfinite(s.grad).all()


def test_training_on_noisy_pairs_lowers_the_noisy_loss():
    _, aware = _clean_and_aware(seed=1)
    aware.train()
    opt = torch.optim.Adam(aware.parameters(), lr=3e-3)
    gt = torch.nn.functional.interpolate(torch.rand(8, 3, 8, 8), size=(32, 32), mode="bilinear")
    noise = N.level_params("high").expand(8, 3, 2)
    y = N.noisy_mosaic(gt, noise, seed=0)
    known, mask = observation("demosaic", y)
    losses = []
    for _ in range(15):
        loss = (aware(known, mask, noise=noise) - gt).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in aware.parameters() if p.grad is not None)
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.8 * losses[0]


# -- the RAW path: when and how it denoises -------------------------------------------------------

def _frame(a: float, b: float, seed: int = 0):
    """A 512x512 RAW frame: a horizontal ramp of linear levels 0.03..0.6 with noise (a, b)."""
    from gsprestore.imageio.camera_raw import RawFrame

    clean = np.tile(np.linspace(0.03, 0.6, 512, dtype=np.float32), (512, 1))
    return RawFrame(mosaic=np.clip(N.add_noise(clean, a, b, seed=seed), 0, None), pattern="RGGB",
                    wb_camera=np.array([2.0, 1.0, 1.5]), wb_daylight=None, rgb_cam=None, flip=0, bits=14)


@pytest.fixture
def calls(monkeypatch):
    """Record the restorers raw_denoiser asks the registry for (no shipped weights needed)."""
    import gsprestore.methods.registry as registry
    from gsprestore.methods.interface import Restorer

    made: list[tuple[str, dict]] = []

    def fake(name, task, **options):
        made.append((name, options))
        return Restorer(name=name, task=task, fn=lambda y, p="RGGB": y)

    monkeypatch.setattr(registry, "get_restorer", fake)
    return made


def _default():
    from gsprestore.methods.interface import Restorer

    return Restorer(name="ugtv-lite", task="demosaic", fn=lambda y, p="RGGB": y, kind="learned")


def test_a_clean_frame_keeps_its_restorer(calls):
    from gsprestore.runtime.file_restore import raw_denoiser

    notes: list[str] = []
    r = _default()
    assert raw_denoiser(r, _frame(1e-5, 1e-7), "camera", "auto", notes.append) is r
    assert calls == [] and notes == []


def test_a_noisy_frame_is_denoised_at_its_measured_level(calls):
    from gsprestore.runtime.file_restore import DENOISER, raw_denoiser

    a, b = N.LEVELS["high"]
    notes: list[str] = []
    r = raw_denoiser(_default(), _frame(a, b), "camera", "auto", notes.append)
    assert r.name == DENOISER and len(calls) == 1 and "denoised by" in notes[0]
    noise = np.array(calls[0][1]["noise"])
    gains = np.array([2.0, 1.0, 1.5])
    # per channel (g a, g^2 b): the variance the white-balanced values have, here at x = 0.3 raw
    variance = noise[:, 0] * 0.3 / gains + noise[:, 1] / gains**2
    assert variance == pytest.approx(np.full(3, a * 0.3 + b), rel=0.2)
    assert noise[:, 1] / noise[:, 0] == pytest.approx(gains * noise[1, 1] / noise[1, 0])
    assert calls[0][1]["linear"] is True and calls[0][1]["exposure"] >= 1.0
    # a factor scales the measured variance; off keeps the restorer
    raw_denoiser(_default(), _frame(a, b), "camera", 0.5, notes.append)
    assert np.array(calls[1][1]["noise"]) == pytest.approx(0.5 * noise)
    r0 = _default()
    assert raw_denoiser(r0, _frame(a, b), "camera", "off", notes.append) is r0


def test_auto_keeps_a_classical_method_the_user_chose_and_says_so(calls):
    from gsprestore.methods.interface import Restorer
    from gsprestore.runtime.file_restore import raw_denoiser

    notes: list[str] = []
    menon = Restorer(name="menon", task="demosaic", fn=lambda y, p="RGGB": y)
    a, b = N.LEVELS["medium"]
    assert raw_denoiser(menon, _frame(a, b), "camera", "auto", notes.append) is menon
    assert calls == [] and "--denoise on" in notes[0]
    assert raw_denoiser(menon, _frame(a, b), "camera", "on", notes.append).name == "ugtv-lite-denoise"


@pytest.mark.parametrize("bad", ["loud", "-1", "0", "nan"])
def test_bad_denoise_values_are_usage_errors(bad):
    from gsprestore.core.errors import UsageError
    from gsprestore.imageio.raw_develop import parse_denoise

    with pytest.raises(UsageError, match="--denoise"):
        parse_denoise(bad)
    assert parse_denoise("AUTO") == "auto" and parse_denoise("2") == 2.0


def test_the_default_rule_knows_the_noise_aware_suffix():
    from gsprestore.methods.defaults import NOISE_AWARE_SUFFIX
    from gsprestore.models.unrolled import DENOISE_SUFFIX, METHOD_PRIOR

    assert NOISE_AWARE_SUFFIX == DENOISE_SUFFIX
    assert [m for m in METHOD_PRIOR if m.endswith(DENOISE_SUFFIX)] == ["ugtv-lite-denoise"]


def test_a_second_denoising_pass_is_one_more_glr_solve_and_passes_gradcheck():
    """denoise_stages=2: the second pass solves (I + S L2 S) z2 = z1 on a graph from the trunk and
    from z1 (checked against glr_denoise called by hand), and its gradients pass gradcheck."""
    from gsprestore.models.noise_aware import glr_denoise

    torch.manual_seed(3)
    den = GraphDenoiser(6, features=3, iters=6, stages=2).double()
    with torch.no_grad():
        den.stages[0].log_strength.fill_(math.log(20.0))
    trunk = torch.randn(1, 6, 5, 6, dtype=torch.float64, requires_grad=True)
    gt = torch.rand(1, 3, 10, 12, dtype=torch.float64)
    known, mask = network_input("demosaic", gt)
    sigma = 0.05 + 0.1 * torch.rand(1, 4, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        y = torch.nn.functional.pixel_unshuffle(known.sum(1, keepdim=True), 2).unsqueeze(1)
        sd = sigma.unsqueeze(1)
        def projected(f, factor):  # g_c = sum_e A[e, c] f_e: |g_p - g_q|^2 is eq. 27's distance under A A^T
            return torch.einsum("ec,behw->bchw", factor[0], f)

        z1 = glr_denoise(y, projected(den.project(trunk), den.metric_factor),
                         sd * torch.exp(0.5 * den.log_strength), 6)
        st = den.stages[0]
        f2 = st.project(trunk) + st.refine(torch.nn.functional.pad(z1.squeeze(1), (1, 1, 1, 1), mode="replicate"))
        z2 = glr_denoise(z1, projected(f2, st.metric_factor), sd * torch.exp(0.5 * st.log_strength), 6)
        expected = mask * torch.nn.functional.pixel_shuffle(z2.squeeze(1), 2)
        assert torch.allclose(den(trunk, known, mask, sigma), expected, atol=1e-12)
        assert not torch.allclose(z2, z1, atol=1e-4)  # the pass does something
    assert torch.autograd.gradcheck(lambda t: den(t, known, mask, sigma), (trunk,), eps=1e-6, atol=1e-6)


def test_denoise_iters_sets_the_passes_cg_steps_and_is_kept_only_when_given():
    """``denoise_iters`` (the CG steps of each denoising pass; 8 when absent, what the passes were
    trained with) is stored with the network only where set, is bounded like every size key, and
    fewer steps give a different, finite output; a clean network has no such key."""
    torch.manual_seed(0)
    default = build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2).eval()
    assert default.denoiser.iters == 8 and "denoise_iters" not in default.config
    four = build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2, denoise_iters=4).eval()
    assert four.denoiser.iters == 4 and four.config["denoise_iters"] == 4
    four.load_state_dict(default.state_dict())
    noise = N.level_params("high")
    known, mask = observation("demosaic", N.noisy_mosaic(torch.rand(1, 3, 16, 16), noise, seed=0))
    with torch.inference_mode():
        a, b = default(known, mask, noise=noise), four(known, mask, noise=noise)
    assert torch.isfinite(b).all() and not torch.equal(a, b)
    with pytest.raises(ValueError, match="denoise_iters"):
        build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2, denoise_iters=1000)
    assert "denoise_iters" not in build_model("ugtv-lite", "demosaic", width=8, cnn_layers=2, denoise_iters=4).config


def _anchored(seed: int = 0):
    """A noise-aware network trained away from its clean start (random weights here) with the
    clean network as its anchor (``clean_anchor``, as lab/research/add_clean_anchor.py makes it)."""
    clean, _ = _clean_and_aware(seed)
    torch.manual_seed(seed + 1)
    plain = build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2).eval()
    anchored = build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2, clean_anchor=True).eval()
    anchored.load_state_dict(plain.state_dict(), strict=False)
    anchored.clean_anchor.set_clean(clean.state_dict(), anchored)
    return clean, plain, anchored


def _level(std: float) -> torch.Tensor:
    """A (1, 3, 2) level whose deviation at mid-grey is ``std`` (read noise only)."""
    return torch.tensor([[[0.0, std * std]] * 3])


def test_the_anchor_blend_is_a_ramp_in_the_mid_grey_deviation():
    from gsprestore.models.noise_aware import ANCHOR_RAMP, MID_GREY, anchor_blend

    lo, hi = ANCHOR_RAMP
    assert anchor_blend(None, 3).tolist() == [0.0, 0.0, 0.0]
    got = anchor_blend(torch.cat([_level(s) for s in (0.0, lo, (lo + hi) / 2, hi, 2 * hi)]), 5)
    assert torch.allclose(got, torch.tensor([0.0, 0.0, 0.5, 1.0, 1.0]), atol=1e-5)
    a = torch.tensor([[[1e-3, 0.0], [3e-3, 0.0], [2e-3, 0.0]]])  # shot noise: sqrt(mean a x) at x = MID_GREY
    std = math.sqrt(2e-3 * MID_GREY)
    assert math.isclose(float(anchor_blend(a, 1)), min(1.0, max(0.0, (std - lo) / (hi - lo))), rel_tol=1e-5)
    assert N.LEVELS["medium"][0] * MID_GREY + N.LEVELS["medium"][1] > hi * hi  # medium and high: the own weights


def test_the_clean_anchor_is_the_clean_network_without_noise_and_the_own_weights_above_the_ramp():
    """Deep network interpolation by noise level (models.noise_aware.CleanAnchor): clean input
    restores exactly as the clean network; a level above the ramp exactly as the network without
    the anchor; in between, as a network whose weights are the blend (built by hand here)."""
    from gsprestore.models.noise_aware import ANCHOR_RAMP, load_clean_weights

    clean, plain, anchored = _anchored()
    lo, hi = ANCHOR_RAMP
    gt = torch.rand(2, 3, 20, 24)
    known, mask = network_input("demosaic", gt)
    with torch.no_grad():
        assert torch.equal(anchored(known, mask), clean(known, mask))
        loud = _level(2 * hi).expand(2, 3, 2)
        assert torch.equal(anchored(known, mask, noise=loud), plain(known, mask, noise=loud))
        mid = _level(lo + 0.25 * (hi - lo)).expand(2, 3, 2)
        by_hand = build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2).eval()
        load_clean_weights(by_hand, clean.state_dict())
        start = by_hand.state_dict()
        by_hand.load_state_dict({k: v if k.startswith("denoiser.") else start[k] + 0.25 * (v - start[k])
                                 for k, v in plain.state_dict().items()})
        assert torch.allclose(anchored(known, mask, noise=mid), by_hand(known, mask, noise=mid), atol=1e-5)
        # a batch of two levels is each element at its own level
        both = torch.cat([_level(0.0), _level(2 * hi)])
        out = anchored(known, mask, noise=both)
        assert torch.allclose(out[:1], anchored(known[:1], mask[:1], noise=_level(0.0)), atol=1e-6)
        assert torch.allclose(out[1:], plain(known[1:], mask[1:], noise=_level(2 * hi)), atol=1e-6)
        assert len(anchored(known, mask, noise=both, return_all=True)) == 2
    assert anchored.num_params() == plain.num_params()  # the anchor is stored, never trained


def test_the_clean_anchor_travels_in_the_weights_file_and_needs_the_noise_input(tmp_path):
    from gsprestore.methods.weights import load_model, save_weights

    clean, _, anchored = _anchored(3)
    save_weights(tmp_path / "a.pt", anchored, {"steps": 1})
    back = load_model("ugtv-lite-denoise", "demosaic", path=tmp_path / "a.pt")
    assert back.config["clean_anchor"] is True
    known, mask = network_input("demosaic", torch.rand(1, 3, 16, 16))
    with torch.no_grad():
        assert torch.equal(back(known, mask), clean(known, mask))
    with pytest.raises(ValueError, match="clean_anchor is for noise-aware"):
        build_model("ugtv-lite", "demosaic", width=8, cnn_layers=2, clean_anchor=True)
    assert "clean_anchor" not in build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2).config


def test_training_through_the_clean_anchor_moves_the_own_weights_by_the_share():
    """The blended weights ``W_clean + g (W - W_clean)`` pass ``g`` times the blended network's
    gradient to ``W`` (the anchor gets none), with gradient checkpointing asked for or not."""
    from gsprestore.models.noise_aware import ANCHOR_RAMP, load_clean_weights

    clean, plain, anchored = _anchored(5)
    lo, hi = ANCHOR_RAMP
    share = 0.25
    level = _level(lo + share * (hi - lo))
    gt = torch.rand(1, 3, 16, 16)
    known, mask = observation("demosaic", N.noisy_mosaic(gt, level, seed=1))
    by_hand = build_model("ugtv-lite-denoise", "demosaic", width=8, cnn_layers=2)
    load_clean_weights(by_hand, clean.state_dict())
    start = by_hand.state_dict()
    by_hand.load_state_dict({k: v if k.startswith("denoiser.") else start[k] + share * (v - start[k])
                             for k, v in plain.state_dict().items()})
    ((by_hand(known, mask, noise=level) - gt) ** 2).mean().backward()
    expected = {n: p.grad if n.startswith("denoiser.") else share * p.grad for n, p in by_hand.named_parameters()}
    for mode in (False, "block"):
        anchored.zero_grad()
        anchored.train().checkpoint = mode
        ((anchored(known, mask, noise=level) - gt) ** 2).mean().backward()
        for n, p in anchored.named_parameters():
            assert torch.allclose(p.grad, expected[n], atol=1e-6, rtol=1e-4), (mode, n)
        assert all(b.grad is None for b in anchored.clean_anchor.buffers())
