"""A camera RAW demosaicked to a linear DNG (issue 49): LibRaw renders it as gsprestore renders the
RAW itself, with the camera's record kept; only a camera RAW makes one."""

from __future__ import annotations

import numpy as np
import pytest
from cli_runner import cli

from gsprestore.imageio.images import read_image


def _camera_dng(tmp_path):
    from test_camera_files import canon_jpeg

    src = canon_jpeg(tmp_path / "shot.jpg", h=48, w=64, orientation=6)
    code, _, err = cli("mosaic", src, "-o", tmp_path / "cam.dng")
    assert code == 0, err
    return tmp_path / "cam.dng"


def test_libraw_renders_the_linear_dng_as_gsprestore_renders_the_raw(tmp_path):
    rawpy = pytest.importorskip("rawpy")
    tifffile = pytest.importorskip("tifffile")
    cam = _camera_dng(tmp_path)
    code, _, err = cli("demosaic", cam, "-o", tmp_path / "lin.dng", "-m", "bilinear")
    assert code == 0, err
    code, _, err = cli("demosaic", cam, "-o", tmp_path / "ours.png", "-m", "bilinear", "--bright", "none")
    assert code == 0, err
    ours = read_image(tmp_path / "ours.png").array.astype(np.float64)
    with rawpy.imread(str(tmp_path / "lin.dng")) as raw:
        lib = raw.postprocess(output_bps=16, use_camera_wb=True, gamma=(2.4, 12.92), no_auto_bright=True)
    lib = lib.astype(np.float64) / 65535
    assert lib.shape == ours.shape  # the orientation is the DNG's tag, applied by LibRaw
    psnr = 10 * np.log10(1 / np.mean((ours - lib) ** 2))
    assert psnr >= 40, psnr
    with tifffile.TiffFile(tmp_path / "lin.dng") as tf:
        tags = {t.code: t.value for t in tf.pages[0].tags.values()}
    assert tags[262] == 34892 and tags[277] == 3 and tuple(tags[50706]) == (1, 4, 0, 0)  # LinearRaw, RGB, DNG 1.4
    with tifffile.TiffFile(cam) as tf:
        cam_orientation = int(tf.pages[0].tags[274].value)
    assert tags[271] == "Canon" and int(tags[274]) == cam_orientation  # the camera's record and orientation
    assert 50721 in tags and 50728 in tags and 50778 in tags  # ColorMatrix1, AsShotNeutral, illuminant


def test_only_a_camera_raw_makes_a_linear_dng(tmp_path):
    from gsprestore.imageio.images import write_image

    write_image(tmp_path / "m.png", np.random.default_rng(0).random((16, 16)), 8)
    code, _, err = cli("demosaic", tmp_path / "m.png", "-o", tmp_path / "x.dng", "-m", "bilinear")
    assert code != 0 and "x.dng" not in [p.name for p in tmp_path.iterdir()]
    assert len([line for line in err.splitlines() if line.startswith("error")]) == 1
    code, _, err = cli("upscale2x", tmp_path / "m.png", "-o", tmp_path / "y.dng")
    assert code == 2 and "DNG is written by" in err


def test_the_raw_orientation_goes_into_the_linear_dng(tmp_path):
    rawpy = pytest.importorskip("rawpy")
    from gsprestore.imageio import dng as dng_io

    rng = np.random.default_rng(1)
    scene = rng.uniform(0.1, 0.8, size=(8, 10, 3)).repeat(4, 0).repeat(4, 1)  # 32 x 40, blocks
    dng_io.write_dng(tmp_path / "turned.dng", dng_io.mosaic_for_dng(scene, "GRBG"), "GRBG", orientation=6)
    code, _, err = cli("demosaic", tmp_path / "turned.dng", "-o", tmp_path / "lin.dng", "-m", "bilinear")
    assert code == 0, err
    with rawpy.imread(str(tmp_path / "lin.dng")) as raw:
        assert raw.sizes.flip == dng_io.ORIENTATION_TO_FLIP[6]
        out = raw.postprocess(output_bps=16, no_auto_bright=True, gamma=(2.4, 12.92), use_camera_wb=True)
    assert out.shape[:2] == (40, 32)  # shown upright: turned a quarter
