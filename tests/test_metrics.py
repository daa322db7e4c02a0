"""Metrics against independent oracles: numpy for MSE/PSNR, scikit-image for SSIM and BT.601 Y."""

import numpy as np
import pytest
import torch
from skimage.color import rgb2ycbcr
from skimage.metrics import structural_similarity

from gsprestore import metrics
from gsprestore.imageio.images import to_integer


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _pair(rng, b=2, c=3, h=40, w=36):
    """A smooth-ish image and a noisy, slightly out-of-range version of it (float64 numpy, BCHW)."""
    base = rng.random((b, c, h // 4, w // 4))
    ref = np.kron(base, np.ones((1, 1, 4, 4)))[..., :h, :w]
    ref = np.pad(ref, ((0, 0), (0, 0), (0, h - ref.shape[2]), (0, w - ref.shape[3])), mode="edge")
    out = ref + 0.08 * rng.standard_normal(ref.shape)
    return out, ref


def test_mse_and_psnr_match_numpy(rng):
    out, ref = _pair(rng)
    m = metrics.mse(torch.from_numpy(out).float(), torch.from_numpy(ref).float())
    expected = ((out.astype(np.float32) - ref.astype(np.float32)).astype(np.float64) ** 2).mean(axis=(1, 2, 3))
    np.testing.assert_allclose(m.numpy(), expected, rtol=1e-6)
    p = metrics.psnr(torch.from_numpy(out), torch.from_numpy(ref))
    np.testing.assert_allclose(p.numpy(), 10 * np.log10(1 / ((out - ref) ** 2).mean(axis=(1, 2, 3))), rtol=1e-12)
    assert metrics.psnr(torch.from_numpy(ref), torch.from_numpy(ref)).isinf().all()


def test_two_psnr_definitions(rng):
    per_image_mse = np.array([1e-3, 1e-4, 4e-4])
    assert metrics.psnr_dataset_mse(per_image_mse.tolist()) == pytest.approx(10 * np.log10(1 / per_image_mse.mean()))
    per_image_psnr = 10 * np.log10(1 / per_image_mse)
    assert metrics.psnr_mean(torch.from_numpy(per_image_psnr)) == pytest.approx(per_image_psnr.mean())
    # Jensen: the dataset-MSE PSNR never exceeds the mean of per-image PSNRs.
    assert metrics.psnr_dataset_mse(per_image_mse) < metrics.psnr_mean(per_image_psnr)
    with pytest.raises(ValueError):
        metrics.psnr_dataset_mse([])


def test_quantize_matches_io_to_integer(rng):
    x = rng.uniform(-0.2, 1.2, size=(1, 3, 9, 7)).astype(np.float32)
    x[0, 0, 0, :3] = [0.5 / 255, 1.5 / 255, 2.5 / 255]  # ties round half to even
    q = metrics.quantize(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(np.rint(q * 255).astype(np.uint8), to_integer(x, 8))
    assert q.min() >= 0 and q.max() <= 1


def test_rgb_to_y_matches_skimage(rng):
    x = rng.random((2, 3, 5, 6))
    y = metrics.rgb_to_y(torch.from_numpy(x)).numpy()
    for b in range(2):
        oracle = rgb2ycbcr(np.moveaxis(x[b], 0, -1))[..., 0] / 255.0
        np.testing.assert_allclose(y[b, 0], oracle, atol=1e-12)
    with pytest.raises(ValueError):
        metrics.rgb_to_y(torch.zeros(1, 1, 4, 4))


@pytest.mark.parametrize("c,h,w", [(3, 40, 36), (1, 23, 64), (3, 11, 11)])
def test_ssim_matches_skimage(rng, c, h, w):
    out, ref = _pair(rng, b=2, c=c, h=h, w=w)
    got = metrics.ssim(torch.from_numpy(out).float(), torch.from_numpy(ref).float()).numpy()
    for b in range(2):
        oracle = structural_similarity(
            np.moveaxis(out[b], 0, -1), np.moveaxis(ref[b], 0, -1), gaussian_weights=True, sigma=1.5,
            use_sample_covariance=False, data_range=1.0, channel_axis=-1,
        )
        assert abs(got[b] - oracle) < 1e-3
        assert abs(got[b] - oracle) < 1e-6  # float32 inputs, float64 arithmetic: far inside the bound


def test_ssim_properties(rng):
    _, ref = _pair(rng)
    r = torch.from_numpy(ref)
    np.testing.assert_allclose(metrics.ssim(r, r).numpy(), 1.0, atol=1e-12)
    assert (metrics.ssim(r, 1 - r) < 0.5).all()
    with pytest.raises(ValueError):
        metrics.ssim(torch.zeros(1, 1, 10, 20), torch.zeros(1, 1, 10, 20))
    with pytest.raises(ValueError):
        metrics.ssim(torch.zeros(1, 1, 12, 12), torch.zeros(1, 1, 12, 13))


@pytest.mark.parametrize("space", ["rgb", "y"])
def test_image_scores_follow_protocol(rng, space):
    out, ref = _pair(rng)
    ref = np.round(np.clip(ref, 0, 1) * 255) / 255  # 8-bit ground truth, as read from a PNG
    scores = metrics.image_scores(torch.from_numpy(out).float(), torch.from_numpy(ref).float(), space)

    def conv(a):  # numpy oracle of the channel space
        if space == "rgb":
            return a
        return np.stack([rgb2ycbcr(np.moveaxis(x, 0, -1))[..., :1] / 255.0 for x in a]).transpose(0, 3, 1, 2)

    o32, r32 = out.astype(np.float32).astype(np.float64), ref.astype(np.float32).astype(np.float64)
    mse = ((conv(o32) - conv(r32)) ** 2).mean(axis=(1, 2, 3))
    np.testing.assert_allclose(scores["mse"].numpy(), mse, rtol=1e-5)
    np.testing.assert_allclose(scores["psnr"].numpy(), 10 * np.log10(1 / mse), rtol=1e-5)
    q = to_integer(out.astype(np.float32), 8).astype(np.float64) / 255
    mse8 = ((conv(q) - conv(r32)) ** 2).mean(axis=(1, 2, 3))
    np.testing.assert_allclose(scores["psnr_8bit"].numpy(), 10 * np.log10(1 / mse8), rtol=1e-5)
    for b in range(out.shape[0]):
        oracle = structural_similarity(
            np.moveaxis(conv(np.clip(o32, 0, 1))[b], 0, -1), np.moveaxis(conv(r32)[b], 0, -1),
            gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0, channel_axis=-1,
        )
        assert abs(float(scores["ssim"][b]) - oracle) < 1e-6
    with pytest.raises(ValueError):
        metrics.image_scores(torch.zeros(1, 3, 12, 12), torch.zeros(1, 3, 12, 12), "lab")
