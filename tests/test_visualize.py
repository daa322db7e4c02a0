"""`gsprestore compare` / `explain` and their libraries (visualize.py, explain.py): montage layout
and labels, the hardest-window search, the explain files, the 5x5 attention (checked against an
independent numpy softmax of eq. 28), CG residual traces (checked against the solvers), errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gsprestore.viz import drawing as V
from gsprestore.core.errors import GspError, UsageError, WeightsError
from gsprestore.viz.explain import cg_trace, crop_pattern, explain, glr_residuals, window_attention, write_explanation
from gsprestore.imageio.images import read_image, write_image
from gsprestore.physics.sampling import PATTERNS, mosaic

from cli_runner import cli



def scene(h: int = 48, w: int = 48, seed: int = 0) -> np.ndarray:
    """Smooth colour ramps plus a sharp-edged square: a small, deterministic RGB test image."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([0.2 + 0.6 * xx, 0.3 + 0.4 * yy, 0.5 + 0.3 * (xx - yy)], axis=2)
    img[h // 4 : h // 2, w // 4 : w // 2] = rng.uniform(0.1, 0.9, 3)
    return np.clip(img, 0, 1).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# drawing helpers
# ----------------------------------------------------------------------------------------------


def test_hardest_window_finds_planted_region():
    rng = np.random.default_rng(1)
    err = rng.uniform(0, 0.01, (80, 100))
    err[37:53, 61:77] += 0.5  # the planted hard region, 16x16 at x=61, y=37
    assert V.hardest_window(err, 16) == (61, 37, 16, 16)
    assert V.hardest_window(err[:, :, None].repeat(3, axis=2), (16, 16)) == (61, 37, 16, 16)
    # a window larger than the image is clipped to it
    assert V.hardest_window(err, 500) == (0, 0, 100, 80)


def test_colormap_ends_and_nan():
    c = V.colormap(np.array([0.0, 1.0, np.nan, 5.0]), 0.0, 1.0)
    assert tuple(c[0]) == tuple(V.VIRIDIS[0].astype(np.uint8))
    assert tuple(c[1]) == tuple(V.VIRIDIS[-1].astype(np.uint8))
    assert tuple(c[2]) == (255, 255, 255)
    assert tuple(c[3]) == tuple(c[1])  # clipped


def test_heatmap_and_plot_sizes():
    assert V.heatmap(np.eye(5), cell=20).size == (100, 100)
    img = V.line_plot({"a": [1.0, 0.1, 0.01], "b": [0.5, 0.2, -1.0]}, title="t", size=(300, 200))
    assert img.size == (300, 200)
    a = np.asarray(img)
    assert (a != 255).any()  # something was drawn


def test_compare_montage_layout_and_labels(monkeypatch):
    captions: list[list[str]] = []
    real = V.labelled

    def spy(img, lines, size=13):
        captions.append(list(lines))
        return real(img, lines, size)

    monkeypatch.setattr(V, "labelled", spy)
    gt = scene(40, 60)
    results = {"one": gt + 0.01, "two": np.clip(gt + 0.05, 0, 1)}
    scores = {"one": {"psnr": 40.0, "ssim": 0.99}, "two": {"psnr": 26.02, "ssim": 0.9}}
    montage, window = V.compare_montage(results, reference=gt, scores=scores, crop=(10, 5, 20, 20), thumb=120)
    assert window == (10, 5, 20, 20)
    flat = [s for c in captions for s in c]
    assert "ground truth" in flat
    assert "PSNR 40.00 dB  SSIM 0.9900" in flat and "PSNR 26.02 dB  SSIM 0.9000" in flat
    assert "one: |error|" in flat and "two: |error|" in flat
    # three columns (reference + 2 methods) of 120-px-wide thumbnails, three rows
    assert montage.width >= 3 * 120 + 4 * 8
    assert montage.height > 3 * 120
    captions.clear()
    montage2, _ = V.compare_montage(results, observed=gt[:, :, :1], crop=(10, 5, 20, 20), thumb=120)
    flat = [s for c in captions for s in c]
    assert not any("PSNR" in s for s in flat) and not any("error" in s for s in flat)
    assert montage2.height < montage.height  # no error-map row


def test_compare_picks_the_hardest_window_automatically():
    gt = scene(64, 64)
    bad = gt.copy()
    bad[40:56, 8:24] = 1 - bad[40:56, 8:24]  # every method fails here
    results = {"a": bad, "b": np.clip(bad + 0.001, 0, 1)}
    _, (x, y, w, h) = V.compare_montage(results, reference=gt, thumb=64)
    assert w == h == V.crop_size_for(64, 64)
    assert x <= 8 and x + w >= 24 and y <= 40 and y + h >= 56


# ----------------------------------------------------------------------------------------------
# compare command
# ----------------------------------------------------------------------------------------------


@pytest.fixture()
def rgb_file(tmp_path: Path) -> Path:
    p = tmp_path / "scene.png"
    write_image(p, scene(48, 48), 8)
    return p


def test_compare_cli_writes_montage_and_refuses_overwrite(rgb_file: Path, tmp_path: Path):
    out = tmp_path / "cmp.png"
    code, stdout, err = cli("compare", rgb_file, "--methods", "bilinear,malvar", "-o", out, "--device", "cpu")
    assert code == 0, err
    assert "bilinear" in stdout and "PSNR" in stdout
    img = read_image(out)
    assert img.array.shape[2] == 3 and img.width > 3 * 48
    code, _, err = cli("compare", rgb_file, "--methods", "bilinear", "-o", out)
    assert code == 1 and "output exists" in err
    code, _, err = cli("compare", rgb_file, "--methods", "bilinear", "-o", out, "--overwrite", "--crop", "4,4,16,16")
    assert code == 0, err


def test_compare_cli_errors(rgb_file: Path, tmp_path: Path):
    out = tmp_path / "c.png"
    code, _, err = cli("compare", tmp_path / "missing.png", "--methods", "bilinear", "-o", out)
    assert code == 1 and "missing.png: no such file" in err
    code, _, err = cli("compare", rgb_file, "--methods", "bilinear,nosuch", "-o", out)
    assert code == 2 and "nosuch" in err
    code, _, err = cli("compare", rgb_file, "--methods", "bilinear", "--crop", "40,40,20,20", "-o", out)
    assert code == 2 and "--crop" in err
    assert not out.exists()


def test_compare_learned_without_weights_names_the_method(rgb_file: Path, tmp_path: Path, monkeypatch):
    import gsprestore.methods.weights as W

    monkeypatch.setattr(W, "manifest_entry", lambda *a, **k: None)
    out = tmp_path / "c.png"
    code, _, err = cli("compare", rgb_file, "--methods", "bilinear,ugtv", "-o", out)
    assert code == 1 and "method ugtv:" in err and "weights" in err
    assert not out.exists()
    code, stdout, err = cli("compare", rgb_file, "--methods", "bilinear,ugtv", "-o", out, "--skip-unavailable",
                            "--json")
    assert code == 0, err
    assert "skipping ugtv" in err
    assert '"skipped"' in stdout and out.exists()


def test_compare_mosaic_input_has_no_scores(tmp_path: Path):
    raw = mosaic(torch.from_numpy(scene(32, 32)).permute(2, 0, 1), "RGGB")[0].numpy()
    p = tmp_path / "raw.png"
    write_image(p, raw, 8)
    montage, info = V.compare(read_image(p).array, "demosaic", ["bilinear"], device="cpu")
    assert info["scores"] == {} and info["methods"] == ["bilinear"]
    lr = scene(16, 16)
    _, info = V.compare(lr, "upscale2x", ["bicubic"], reference=False, device="cpu")
    assert info["scores"] == {}
    _, info = V.compare(scene(32, 32), "upscale2x", ["bicubic"], device="cpu")
    assert set(info["scores"]["bicubic"]) >= {"psnr", "ssim"}


# ----------------------------------------------------------------------------------------------
# explain
# ----------------------------------------------------------------------------------------------


def test_crop_pattern_matches_mosaic_of_the_crop():
    rgb = torch.from_numpy(scene(8, 8)).permute(2, 0, 1)
    for p in PATTERNS:
        for x in (0, 1):
            for y in (0, 1):
                whole = mosaic(rgb, p)[..., y:, x:]
                part = mosaic(rgb[:, y:, x:], crop_pattern(p, x, y))
                assert torch.equal(whole, part)


def _numpy_attention(features: np.ndarray, metric: np.ndarray, y: int, x: int) -> np.ndarray:
    """Eq. 28 by hand: wbar(p -> q) = exp(-d_pq) / sum over in-image q' of exp(-d_pq')."""
    F, H, W = features.shape
    a = np.full((5, 5), np.nan)
    ws = {}
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            if (dy, dx) == (0, 0):
                continue
            yy, xx = y + dy, x + dx
            if 0 <= yy < H and 0 <= xx < W:
                d = features[:, y, x] - features[:, yy, xx]
                ws[(dy, dx)] = np.exp(-(d @ metric @ d))
            else:
                ws[(dy, dx)] = 0.0
    total = sum(ws.values())
    for (dy, dx), v in ws.items():
        a[dy + 2, dx + 2] = v / total
    return a


def test_explain_igtv_32x32_writes_files_and_attention_sums_to_one(tmp_path: Path):
    from gsprestore.models import build_interpolator, initial_estimate
    from gsprestore.methods.registry import observation

    img = scene(32, 32)
    ex = explain(img, "igtv", "demosaic", crop=(0, 0, 32, 32), pixel=(1, 30))
    assert len(ex.heads) == 1
    v = ex.heads[0]
    assert v.attention.shape == (5, 5) and np.isnan(v.attention[2, 2])
    assert np.nansum(v.attention) == pytest.approx(1.0, abs=1e-5)
    assert np.all(v.attention[:, 0] == 0)  # pixel x=1: the column two to the left is outside
    assert np.all(v.attention[4, :] == 0)  # pixel y=30 of 32: the row two below is outside
    # independent oracle: features (colour of x0, row, col) and M = 1.5 I
    y = mosaic(torch.from_numpy(img).permute(2, 0, 1)[None], "RGGB")
    known, mask = observation("demosaic", y, "RGGB")
    x0 = initial_estimate(known, mask.expand_as(known))
    f = build_interpolator("igtv").features(x0)[0, 0].double().numpy()
    np.testing.assert_allclose(np.nan_to_num(v.attention), np.nan_to_num(_numpy_attention(f, 1.5 * np.eye(5), 30, 1)),
                               atol=1e-5)
    np.testing.assert_allclose(v.metric, 1.5 * np.eye(5))
    assert len(v.residuals["ADMM primal residual"]) == 5
    out = tmp_path / "ex"
    files = write_explanation(ex, out)
    names = {p.name for p in files}
    assert names == {"overview.png", "block1_edges.png", "block1_attention.png", "block1_metric.png",
                     "block1_residuals.png", "index.md"}
    md = (out / "index.md").read_text()
    for n in names - {"index.md"}:
        assert f"({n})" in md
        assert Image.open(out / n).size[0] > 50
    with pytest.raises(GspError, match="not empty"):
        write_explanation(ex, out)


def test_window_attention_is_a_random_walk_row():
    from gsprestore.graph.operators import random_walk_weights_from_distances

    d = torch.rand(1, 1, 12, 9, 9, dtype=torch.float64) * 3
    wbar = random_walk_weights_from_distances(d)[0, 0]
    for y, x in [(0, 0), (4, 4), (8, 3)]:
        assert np.nansum(window_attention(wbar, y, x)) == pytest.approx(1.0, abs=1e-12)


def test_cg_trace_matches_the_solvers():
    from gsprestore.solvers import cg_exact, cg_unrolled

    torch.manual_seed(0)
    n = 6
    Q = torch.randn(2, 3, n, n, dtype=torch.float64)
    A = Q @ Q.transpose(-1, -2) + n * torch.eye(n, dtype=torch.float64)  # (B, K, n, n) SPD

    def apply_A(v):  # v (B, K, 1, n, 1)
        return (A @ v[:, :, 0]).unsqueeze(2)

    b = torch.randn(2, 3, 1, n, 1, dtype=torch.float64)
    x0 = torch.zeros_like(b)
    alphas, betas = torch.full((8,), 0.05, dtype=torch.float64), torch.full((8,), 0.3, dtype=torch.float64)
    with torch.no_grad():
        xt, res = cg_trace(apply_A, b, x0, ("unrolled", alphas, betas), 8)
        ref = cg_unrolled(apply_A, b, x0, alphas, betas)
    torch.testing.assert_close(xt, ref)
    assert res.shape == (9, 2, 3)
    xe, rese = cg_trace(apply_A, b, x0, "exact", n)
    torch.testing.assert_close(xe, cg_exact(apply_A, b, x0, iters=n))
    exact = torch.linalg.solve(A, b[:, :, 0]).unsqueeze(2)
    torch.testing.assert_close(xe, exact)
    assert float(rese[-1].max()) < 1e-8 and float(rese[0].min()) == pytest.approx(1.0)


def test_glr_residuals_end_at_the_iglr_solution():
    """Exact CG on the iGLR system: the traced residual falls to the tolerance."""
    from gsprestore.models import build_interpolator, initial_estimate
    from gsprestore.methods.registry import observation

    img = scene(16, 16)
    y = mosaic(torch.from_numpy(img).permute(2, 0, 1)[None].double(), "RGGB")
    known, mask = observation("demosaic", y, "RGGB")
    mask = mask.expand_as(known)
    model = build_interpolator("iglr", cg="exact")
    x0 = initial_estimate(known, mask)
    res = glr_residuals(model.graph_weights(x0), known, mask, x0, "exact", 300, "normalized", 1e-10)
    assert float(res[-1].max()) <= 1e-10 < float(res[0].max())


def test_explain_learned_with_and_without_weights(tmp_path: Path, monkeypatch):
    import gsprestore.methods.weights as W
    from gsprestore.models import build_model
    from gsprestore.methods.weights import save_weights

    monkeypatch.setattr(W, "manifest_entry", lambda *a, **k: None)
    img = scene(24, 24)
    with pytest.raises(WeightsError, match="no pretrained weights for ugtv"):
        explain(img, "ugtv", "demosaic")
    torch.manual_seed(0)
    path = tmp_path / "tiny.pt"
    save_weights(path, build_model("ugtv", "demosaic", blocks=1, heads=2, features=4, width=8, cnn_layers=1,
                                   admm_iters=2, cg_iters=3))
    ex = explain(img, "ugtv", "demosaic", pattern="GRBG", weights=str(path))
    assert len(ex.heads) == 2 and ex.heads[0].metric.shape == (4, 4)
    assert ex.solver == "GTV (eqs. 19-24), 2 ADMM iterations x 3 steps of learned unrolled CG"
    assert crop_pattern("GRBG", ex.crop[0], ex.crop[1]) == "RGGB"  # learned demosaickers see RGGB
    for v in ex.heads:
        assert np.nansum(v.attention) == pytest.approx(1.0, abs=1e-5)
        assert np.all(np.linalg.eigvalsh(v.metric) > -1e-6)  # M = A A^T is PSD
    code, stdout, err = cli("explain", tmp_path / "missing.png", "-m", "igtv", "-o", tmp_path / "e")
    assert code == 1 and "no such file" in err
    # compare takes the same file for its learned method
    src = tmp_path / "s.png"
    write_image(src, img, 8)
    code, stdout, err = cli("compare", src, "--methods", "bilinear,ugtv", "--weights", path, "-o",
                            tmp_path / "c.png", "--device", "cpu")
    assert code == 0, err
    assert "ugtv" in stdout and "PSNR" in stdout


def test_explain_cli_errors(rgb_file: Path, tmp_path: Path):
    out = tmp_path / "e"
    code, _, err = cli("explain", rgb_file, "-m", "menon", "-o", out)
    assert code == 2 and "menon" in err
    code, stdout, err = cli("explain", rgb_file, "-m", "igtv", "-o", out, "--crop", "0,0,32,32")
    assert code == 0, err
    assert (out / "index.md").exists()
    code, _, err = cli("explain", rgb_file, "-m", "igtv", "-o", out)
    assert code == 1 and "not empty" in err
    code, _, err = cli("explain", rgb_file, "-m", "igtv", "-o", tmp_path / "f", "--pixel", "47,47",
                       "--crop", "0,0,16,16")
    assert code == 2 and "outside the crop" in err
    with pytest.raises(UsageError):
        explain(scene(16, 16), "iglr", "demosaic", crop=(0, 0, 40, 40))


def test_gtv_trace_matches_the_reference_admm():
    from gsprestore.viz.explain import gtv_trace
    from gsprestore.graph.operators import random_walk_weights_from_distances
    from gsprestore.solvers import gtv_admm_reference

    torch.manual_seed(0)
    H = W = 8
    wbar = random_walk_weights_from_distances(torch.rand(1, 2, 12, H, W, dtype=torch.float64) * 2)
    known = torch.rand(1, 3, H, W, dtype=torch.float64)
    mask = (torch.rand(1, 3, H, W) < 0.4).double()
    alphas = torch.full((3, 4, 2), 0.4, dtype=torch.float64)
    betas = torch.full((3, 4, 2), 0.2, dtype=torch.float64)
    gamma = torch.tensor([5.0, 10.0], dtype=torch.float64)
    for cg in ("exact", ("unrolled", alphas, betas)):
        ref_hist: list = []
        ref = gtv_admm_reference(wbar, known, mask, gamma=gamma, admm_iters=3, cg_iters=4, cg=cg, history=ref_hist)
        x, hist, res = gtv_trace(wbar, known, mask, gamma=gamma, admm_iters=3, cg_iters=4, cg=cg)
        torch.testing.assert_close(x, ref)
        assert res.shape == (3, 5, 1, 2)
        for a, b in zip(hist, ref_hist):
            for key in ("primal_residual", "constraint", "objective"):
                torch.testing.assert_close(a[key], b[key])


@pytest.mark.parametrize("method", ["ugtv", "uglr"])
def test_explain_follows_the_model_green_difference_and_jacobi(tmp_path: Path, monkeypatch, method):
    """explain's estimates are the model's own iterates (its green-difference x^0 included), and the
    residual traces follow its solver (Jacobi-scaled for uGTV): finite, and CG lowers them."""
    from gsprestore.models import build_model
    from gsprestore.methods.registry import observation
    from gsprestore.physics.sampling import mosaic
    from gsprestore.methods.weights import save_weights

    torch.manual_seed(0)
    extra = dict(admm_iters=2) if method == "ugtv" else {}
    model = build_model(method, "demosaic", blocks=2, heads=2, features=4, width=8, cnn_layers=1, cg_iters=4,
                        signal="green-difference", **extra)
    path = tmp_path / "m.pt"
    save_weights(path, model)
    img = scene(24, 24)
    ex = explain(img, method, "demosaic", weights=str(path), crop=(0, 0, 24, 24))
    gt = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None]
    with torch.no_grad():
        xs = model(*observation("demosaic", mosaic(gt)), return_all=True)
    assert len(ex.estimates) == len(xs)
    for got, want in zip(ex.estimates, xs):
        np.testing.assert_allclose(got, want[0].permute(1, 2, 0).numpy(), atol=1e-5)
    for v in ex.heads:
        name = "CG relative residual" if method == "uglr" else "CG relative residual of each x-update"
        trace = np.asarray(v.residuals[name], dtype=float)
        assert np.isfinite(trace).all() and trace[-1] < trace[0]


def test_a_long_explain_prints_progress_lines_when_stderr_is_not_a_terminal(rgb_file: Path, tmp_path: Path,
                                                                             slowed):
    from gsprestore.viz import explain as explain_module

    slowed(explain_module, "explain")
    code, _, err = cli("explain", rgb_file, "-m", "igtv", "-o", tmp_path / "e", "--crop", "0,0,16,16")
    assert code == 0, err
    beats = [line for line in err.splitlines() if line.startswith("explain: running igtv on ")]
    assert len(beats) >= 2 and all(line.endswith(" elapsed)") for line in beats), err


def test_no_reference_help_names_both_tasks():
    from typer.testing import CliRunner

    from gsprestore.cli.app import _register, app

    _register()
    for command in ("compare", "explain"):
        out = CliRunner().invoke(app, [command, "--help"]).output
        flat = " ".join(out.replace("│", " ").split())
        assert "the 1-channel mosaic (demosaic) or the low-resolution input (upscale2x)" in flat, command
