"""Self-ensemble (gsprestore.methods.self_ensemble): the transposed pass sees the same observation, the
average is exactly the two passes' mean, and it reaches the commands, the API and the benchmark."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gsprestore import api  # noqa: E402
from gsprestore.evaluation import benchmark  # noqa: E402
from gsprestore.methods.interface import Restorer  # noqa: E402
from gsprestore.methods.registry import get_restorer  # noqa: E402
from gsprestore.physics.sampling import mosaic  # noqa: E402
from gsprestore.methods.self_ensemble import PASSES, TRANSPOSED_PATTERN, self_ensemble  # noqa: E402

PATTERNS = ("RGGB", "BGGR", "GRBG", "GBRG")


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_transposed_mosaic_is_the_mosaic_of_the_transposed_image(pattern):
    """The pattern the second pass is told is the one the transposed samples really have."""
    rgb = torch.rand(1, 3, 6, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(mosaic(rgb, pattern).transpose(-1, -2),
                       mosaic(rgb.transpose(-1, -2).contiguous(), TRANSPOSED_PATTERN[pattern]))


def _position_dependent(task: str) -> Restorer:
    """A method that is not transpose-equivariant: it adds a ramp along the width and records what
    it was called with."""
    calls = []

    def fn(y, pattern="RGGB"):
        calls.append((tuple(y.shape), pattern))
        out = y.repeat(1, 3, 1, 1) if task == "demosaic" else y
        ramp = torch.arange(out.shape[-1], dtype=out.dtype) / 100
        return out + ramp
    r = Restorer(name="ramp", task=task, fn=fn, halo=0, info={"min_side": 2})
    r.calls = calls  # type: ignore[attr-defined]
    return r


def test_the_ensemble_is_the_mean_of_the_pass_and_the_transposed_pass():
    plain = _position_dependent("demosaic")
    wrapped = self_ensemble(plain)
    y = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1))
    out = wrapped(y, "GRBG")
    ramp_w = torch.arange(6.0) / 100  # the first pass's ramp runs along the width
    ramp_h = (torch.arange(4.0) / 100)[:, None]  # the transposed pass's, back along the height
    assert torch.allclose(out, y.repeat(1, 3, 1, 1) + (ramp_w + ramp_h) / 2, atol=1e-6)
    assert plain.calls == [((2, 1, 4, 6), "GRBG"), ((2, 1, 6, 4), "GBRG")]
    assert wrapped.info["self_ensemble"] and not plain.info.get("self_ensemble")
    assert self_ensemble(wrapped) is wrapped  # never twice
    assert PASSES == 2


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_transpose_equivariant_method_is_unchanged(pattern):
    """Bilinear demosaicking and bicubic upscaling treat rows and columns alike, so their ensemble
    is themselves: a wrong pattern for the transposed pass would show here as a colour error."""
    rgb = torch.rand(1, 3, 12, 16, generator=torch.Generator().manual_seed(2))
    y = mosaic(rgb, pattern)
    plain = get_restorer("bilinear", "demosaic")
    assert torch.allclose(get_restorer("bilinear", "demosaic", self_ensemble=True)(y, pattern), plain(y, pattern),
                          atol=1e-6)
    bicubic = get_restorer("bicubic", "upscale2x")
    assert torch.allclose(get_restorer("bicubic", "upscale2x", self_ensemble=True)(rgb), bicubic(rgb), atol=1e-6)


@pytest.fixture(scope="module")
def small_network(tmp_path_factory):
    from gsprestore.models import build_model
    from gsprestore.methods.weights import save_weights

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / "ugtv.pt"
    save_weights(path, build_model("ugtv", "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=2,
                                   admm_iters=1))
    return path


def test_a_learned_network_ensembled_through_the_tiled_engine(small_network):
    """A learned network's ensemble differs from its single pass, is the mean of the pass and the
    transposed pass, and tiles like the plain network (the halo holds in both directions)."""
    rng = np.random.default_rng(3)
    raw = rng.random((40, 36)).astype(np.float32)
    plain = api.demosaic(raw, "ugtv", "GBRG", weights=str(small_network), device="cpu")
    ens = api.demosaic(raw, "ugtv", "GBRG", weights=str(small_network), device="cpu", self_ensemble=True)
    other = api.demosaic(np.ascontiguousarray(raw.T), "ugtv", TRANSPOSED_PATTERN["GBRG"], weights=str(small_network),
                         device="cpu").transpose(1, 0, 2)
    assert np.abs(ens - plain).max() > 1e-4
    np.testing.assert_allclose(ens, (plain + other) / 2, atol=2e-5)
    tiled = api.demosaic(raw, "ugtv", "GBRG", weights=str(small_network), device="cpu", self_ensemble=True,
                         tile=16)
    np.testing.assert_allclose(tiled, ens, atol=2e-5)


def test_the_benchmark_scores_a_learned_network_ensembled(small_network, tmp_path):
    """The benchmark runs methods under no_grad, where a network's (inference-mode) output must not
    be written in place: the ensembled row scores, and better than a shuffled ensemble would."""
    from gsprestore.imageio.images import write_image

    rng = np.random.default_rng(5)
    for i in range(2):
        write_image(tmp_path / f"p{i}.png", rng.random((20, 24, 3)), 8)
    options = {"ugtv": {"weights": str(small_network)}}
    se = benchmark.run_benchmark("demosaic", "custom", "ugtv", tmp_path, restorer_options=options,
                                 self_ensemble=True, per_image=True)
    plain = benchmark.run_benchmark("demosaic", "custom", "ugtv", tmp_path, restorer_options=options, per_image=True)
    assert se["results"][0]["method"].endswith("+se") and np.isfinite(se["results"][0]["psnr_dataset_mse"])
    assert se["results"][0]["psnr_dataset_mse"] != plain["results"][0]["psnr_dataset_mse"]


def test_the_command_runs_a_learned_network_ensembled(small_network, tmp_path):
    from cli_runner import cli

    from gsprestore.imageio.images import read_image, write_image

    write_image(tmp_path / "m.png", np.random.default_rng(6).random((20, 18)), 16)
    for flag, name in (("--self-ensemble", "se.png"), ("--quiet", "plain.png")):
        code, out, err = cli("demosaic", tmp_path / "m.png", "--weights", small_network, flag, "--device", "cpu",
                             "-q", "-o", tmp_path / name)
        assert code == 0, err
    se, plain = (read_image(tmp_path / n).array for n in ("se.png", "plain.png"))
    assert se.shape == plain.shape == (20, 18, 3) and np.abs(se - plain).max() > 0


def test_commands_and_benchmark_say_when_they_ensemble(tmp_path):
    from cli_runner import cli

    from gsprestore.imageio.images import read_image, write_image

    rng = np.random.default_rng(4)
    write_image(tmp_path / "m.png", rng.random((24, 20)), 8)
    code, out, err = cli("demosaic", tmp_path / "m.png", "-m", "malvar", "--self-ensemble", "--json", "-q",
                         "--device", "cpu", "-o", tmp_path / "se.png")
    assert code == 0, err
    assert json.loads(out)["self_ensemble"] is True
    code, out, err = cli("demosaic", tmp_path / "m.png", "-m", "malvar", "--json", "-q", "--device", "cpu",
                         "-o", tmp_path / "plain.png")
    assert code == 0 and json.loads(out)["self_ensemble"] is False, err
    assert read_image(tmp_path / "se.png").array.shape == read_image(tmp_path / "plain.png").array.shape

    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(2):
        write_image(photos / f"p{i}.png", rng.random((16, 16, 3)), 8)
    res = benchmark.run_benchmark("demosaic", "custom", "bilinear,malvar", photos, self_ensemble=True)
    assert [r["method"] for r in res["results"]] == ["bilinear+se", "malvar+se"]
    assert "transposed" in res["protocol"]["self_ensemble"]
    plain = benchmark.run_benchmark("demosaic", "custom", "bilinear", photos)
    assert plain["protocol"]["self_ensemble"] is None
    assert res["results"][0]["psnr_dataset_mse"] == pytest.approx(plain["results"][0]["psnr_dataset_mse"], abs=1e-4)
    code, out, err = cli("benchmark", "--task", "upscale2x", "--data-dir", photos, "--methods", "bicubic",
                         "--self-ensemble", "--json", tmp_path / "b.json")
    assert code == 0, err
    assert json.loads((tmp_path / "b.json").read_text())["results"][0]["method"] == "bicubic+se"


def test_compare_shows_a_method_beside_its_self_ensemble(small_network, tmp_path):
    """``compare --methods ugtv,ugtv+se``: both panels, one weights file, the ensemble's scores its own."""
    from cli_runner import cli

    from gsprestore.imageio.images import write_image

    write_image(tmp_path / "photo.png", np.random.default_rng(7).random((24, 24, 3)), 8)
    code, out, err = cli("compare", tmp_path / "photo.png", "--methods", "ugtv,ugtv+se,bilinear+se", "--weights",
                         small_network, "--device", "cpu", "--json", "-o", tmp_path / "c.png")
    assert code == 0, err
    info = json.loads(out)
    assert info["methods"] == ["ugtv", "ugtv+se", "bilinear+se"]
    assert info["scores"]["ugtv"]["psnr"] != info["scores"]["ugtv+se"]["psnr"]
    code, out, err = cli("compare", tmp_path / "photo.png", "--methods", "nope+se", "-o", tmp_path / "d.png")
    assert code == 2 and "unknown method 'nope'" in err
