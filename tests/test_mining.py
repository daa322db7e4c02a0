"""Hard-patch mining (gsprestore/training/mining.py, patches.place_mined_patches, train-pack --score
menon) and the photometric jitter (gsprestore/training/augment.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gsprestore.core.errors import UsageError
from gsprestore.training import mining
from gsprestore.training.augment import jitter
from gsprestore.training.patches import Source, build_patch_sets, place_mined_patches
from gsprestore.training.recipe import TrainConfig


def _half_hard(rng: np.random.Generator, h: int = 96, w: int = 128) -> np.ndarray:
    """Left half a flat colour (Menon restores it exactly), right half fine saturated colour noise."""
    img = np.empty((h, w, 3), np.uint8)
    img[:, : w // 2] = (90, 140, 60)
    img[:, w // 2:] = rng.integers(0, 256, size=(h, w - w // 2, 3))
    return img


def test_window_means_match_a_loop():
    rng = np.random.default_rng(1)
    err = rng.random((21, 26)).astype(np.float32)
    got = mining.window_means(err, 6)
    assert got.shape == ((21 - 6) // 2 + 1, (26 - 6) // 2 + 1)
    for i in range(got.shape[0]):
        for j in range(got.shape[1]):
            assert got[i, j] == pytest.approx(err[2 * i:2 * i + 6, 2 * j:2 * j + 6].astype(np.float64).mean(), rel=1e-9)


def test_error_map_is_menons_error_by_the_colour_demosaicing_reference():
    colour_demosaicing = pytest.importorskip("colour_demosaicing")
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, size=(40, 48, 3)).astype(np.uint8)
    x = rgb.astype(np.float64) / 255.0
    cfa = np.zeros(x.shape[:2])
    cfa[0::2, 0::2], cfa[0::2, 1::2] = x[0::2, 0::2, 0], x[0::2, 1::2, 1]
    cfa[1::2, 0::2], cfa[1::2, 1::2] = x[1::2, 0::2, 1], x[1::2, 1::2, 2]
    ref = colour_demosaicing.demosaicing_CFA_Bayer_Menon2007(cfa, "RGGB")
    want = (((ref - x) * 255.0) ** 2).sum(-1)
    got = mining.error_map(rgb, "demosaic")
    b = mining.BORDER
    assert np.all(got[:b] == 0) and np.all(got[:, -b:] == 0)
    np.testing.assert_allclose(got[b:-b, b:-b], want[b:-b, b:-b], rtol=2e-3, atol=2e-2)


def test_error_map_of_2x_is_the_bicubic_luma_error():
    rng = np.random.default_rng(3)
    flat = np.full((32, 32, 3), 77, np.uint8)
    assert np.abs(mining.error_map(flat, "upscale2x")).max() < 1e-6  # bicubic restores a constant
    noisy = rng.integers(0, 256, size=(32, 32, 3)).astype(np.uint8)
    assert mining.error_map(noisy, "upscale2x")[8:-8, 8:-8].mean() > 100


def test_mined_patches_come_from_the_hard_half(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(4)
    folder = tmp_path / "shots"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(_half_hard(rng)).save(folder / f"p{i}.png")
    sources = [Source(p, folder, (96, 128)) for p in sorted(folder.glob("*.png"))]
    place, rec = place_mined_patches(sources, 300, 16, np.random.default_rng(0), "demosaic")
    assert np.all(place.row % 2 == 0) and np.all(place.col % 2 == 0)
    assert place.row.max() <= 96 - 16 and place.col.max() <= 128 - 16
    # every mined patch overlaps the hard right half (its left edge past 64 - 16)
    assert np.all(place.col + 16 > 64)
    assert mining.hard_share(rec["scores"], rec["drawn"]) > 0.15  # uniform would give ~0.1
    # build_patch_sets: a share of the patches mined, recorded
    sets = build_patch_sets([folder], patches=200, patch_size=16, val_fraction=0.0, mine_share=0.5,
                            check_test_sets=False)
    assert sets.info["mined_patches"] == 100
    assert sets.info["mean_difficulty_mined"] > 1.5 * sets.info["mean_difficulty_all_positions"]
    again = build_patch_sets([folder], patches=200, patch_size=16, val_fraction=0.0, mine_share=0.5,
                             check_test_sets=False)
    assert again.info["train_digest"] == sets.info["train_digest"]
    with pytest.raises(UsageError, match="mine-share"):
        build_patch_sets([folder], patches=10, patch_size=16, val_fraction=0.0, mine_share=1.5, check_test_sets=False)


def test_uniform_draw_is_not_over_represented():
    rng = np.random.default_rng(5)
    scores = rng.random(100_000)
    assert mining.hard_share(scores, rng.choice(scores, 20_000)) == pytest.approx(0.1, abs=0.01)


def test_jitter_is_seeded_bounded_and_off_at_zero():
    gt = torch.rand(8, 3, 6, 6)
    assert jitter(gt, 0.0, (0, 1)) is gt
    a, b = jitter(gt, 0.3, (0, 1)), jitter(gt, 0.3, (0, 1))
    assert torch.equal(a, b) and not torch.equal(a, jitter(gt, 0.3, (0, 2)))
    assert a.min() >= 0 and a.max() <= 1
    ratio = (a / gt)[(gt > 0.05) & (gt < 0.5)]  # unclipped pixels: a gain within exp(+-1.5 spread)
    assert ratio.min() >= np.exp(-0.45) - 1e-4 and ratio.max() <= np.exp(0.45) + 1e-4
    # one gain per patch and channel: the ratio is constant over a channel's unclipped pixels
    g = jitter(torch.full((1, 3, 4, 4), 0.25), 0.3, (9,))
    assert torch.allclose(g[0, :, 0, 0, None, None].expand(3, 4, 4), g[0])


def test_recipe_options_checked_and_written():
    cfg = TrainConfig(task="demosaic", prior="gtv", data=["d"], mine_share=0.5, color_jitter=0.2).check()
    assert "--mine-share 0.5" in cfg.command("run") and "--color-jitter 0.2" in cfg.command("run")
    with pytest.raises(UsageError, match="mine-share"):
        TrainConfig(task="demosaic", prior="gtv", data=["d"], mine_share=2.0).check()
    with pytest.raises(UsageError, match="color-jitter"):
        TrainConfig(task="demosaic", prior="gtv", data=["d"], color_jitter=float("nan")).check()
    # a run recorded before these options resumes with them off
    assert TrainConfig.from_json({"task": "demosaic", "prior": "gtv", "data": ["d"]}).mine_share == 0.0
