"""gsprestore_lab.precision (the PSNR change of reduced precision) and gsprestore_lab.timing's synthetic mosaic,
against plain NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from gsprestore_lab.precision import load_crops, precision_psnr
from gsprestore_lab.timing import synthetic_mosaic
from gsprestore.physics.sampling import bayer_masks


class KnownOnly(torch.nn.Module):
    """A 'network' that returns the observed samples (zeros elsewhere): its PSNR is NumPy arithmetic."""

    def forward(self, known, mask):
        return known


def test_load_crops_cuts_to_even_sizes_and_refuses_an_empty_folder(tmp_path):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(rng.integers(0, 256, (6, 4), dtype=np.uint8)).save(tmp_path / "b.png")  # grey: to RGB
    (tmp_path / "notes.txt").write_text("not an image")
    crops = load_crops(tmp_path, 10)
    assert [tuple(c.shape) for c in crops] == [(3, 8, 6), (3, 6, 4)]
    assert len(load_crops(tmp_path, 1)) == 1
    with pytest.raises(ValueError, match="no images"):
        load_crops(tmp_path, 0)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="empty: no images"):
        load_crops(empty, 5)


@pytest.mark.parametrize("task", ["demosaic", "upscale2x"])
def test_precision_psnr_in_fp32_is_the_all_pixel_psnr_numpy_computes(task):
    rng = np.random.default_rng(1)
    crops = [torch.from_numpy(rng.random((3, h, w), dtype=np.float32)) for h, w in [(8, 10), (6, 6)]]
    db, secs = precision_psnr(KnownOnly(), task, crops, torch.device("cpu"), "fp32")
    sq, n = 0.0, 0
    for c in crops:
        gt = c.numpy().astype(np.float64)
        if task == "demosaic":
            est = gt * bayer_masks(gt.shape[1], gt.shape[2], "RGGB").numpy()
        else:
            est = np.zeros_like(gt)
            est[:, 0::2, 0::2] = gt[:, 0::2, 0::2]
            # scored on BT.601 luma (the protocol's 2x space)
            w = np.array([65.481, 128.553, 24.966])[:, None, None] / 255.0
            est, gt = (w * est).sum(0) + 16 / 255, (w * gt).sum(0) + 16 / 255
        sq += ((est - gt) ** 2).sum()
        n += gt.size
    assert db == pytest.approx(10 * np.log10(1 / (sq / n)), abs=1e-4)
    assert secs >= 0


def test_synthetic_mosaic_is_an_even_3_by_2_mosaic_of_the_asked_size():
    m = synthetic_mosaic(0.06)
    _, h, w = m.shape
    assert m.dtype == torch.float32 and h % 2 == 0 and w % 2 == 0
    assert abs(h * w / 0.06e6 - 1) < 0.02 and abs(w / h - 1.5) < 0.02
    assert float(m.min()) > -0.2 and float(m.max()) < 1.2
    assert torch.equal(m, synthetic_mosaic(0.06))  # seeded: the same mosaic every run
