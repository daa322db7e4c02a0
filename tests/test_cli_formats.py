"""JPEG and WebP through the commands, ``-o FILE.jpg`` as a file, ``--quality``, where the summary
says outputs went, one progress line per file in logs, and shell completion."""

from __future__ import annotations

import numpy as np
from cli_runner import cli
from PIL import Image as PILImage

from gsprestore.imageio.images import read_image, write_image


def _photo(path, h=24, w=32):
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    return write_image(path, np.stack([x, y, 1 - x * y], axis=2), 8)


def test_o_jpg_with_one_input_writes_that_file(tmp_path):
    _photo(tmp_path / "a.png")
    code, _, err = cli("upscale2x", tmp_path / "a.png", "-o", tmp_path / "big.jpg", "-m", "bicubic", "--quality", "90")
    assert code == 0, err
    assert (tmp_path / "big.jpg").is_file()  # a file, not a folder named big.jpg
    with PILImage.open(tmp_path / "big.jpg") as im:
        assert im.format == "JPEG" and im.size == (64, 48)
    assert f"1 written to {tmp_path / 'big.jpg'}" in err


def test_jpeg_in_webp_out_for_a_folder_and_quality(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    _photo(src / "a.png")
    write_image(src / "b.jpg", read_image(src / "a.png").array, 8)
    code, _, err = cli("upscale2x", src, "-o", tmp_path / "out", "--ext", "webp", "-m", "bicubic", "--quality", "20")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.webp", "b.webp"]
    assert read_image(tmp_path / "out" / "b.webp").array.shape == (48, 64, 3)
    # stderr is not a terminal here: one line per finished file, then where the outputs went
    assert "[1/2]" in err and "[2/2]" in err and f"2 written to {tmp_path / 'out'}" in err


def test_format_usage_errors(tmp_path):
    _photo(tmp_path / "a.png")
    code, _, err = cli("upscale2x", tmp_path / "a.png", "--ext", "jpg", "--bit-depth", "16", "-m", "bicubic")
    assert code == 2 and "8-bit only" in err
    code, _, err = cli("upscale2x", tmp_path / "a.png", "--quality", "0", "-m", "bicubic")
    assert code == 2 and "--quality must be 1-100" in err
    code, _, err = cli("upscale2x", tmp_path / "a.png", "--ext", "bmp", "-m", "bicubic")
    assert code == 2 and "png, tiff, jpg, webp or same" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]


def test_mosaic_of_a_jpeg_and_outputs_next_to_inputs(tmp_path):
    write_image(tmp_path / "p.jpg", np.random.default_rng(0).random((16, 16, 3)), 8)
    code, _, err = cli("mosaic", tmp_path / "p.jpg", "--ext", "png")
    assert code == 0, err
    assert read_image(tmp_path / "p-mosaic.png").channels == 1
    assert "1 written to" in err


def test_shell_completion_is_offered():
    code, out, _ = cli("--help")
    assert code == 0 and "--install-completion" in out and "--show-completion" in out
