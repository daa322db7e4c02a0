"""Hostile inputs, round 5 (issue 51): outputs whose metadata would contradict their pixels.

* a PNG's ``eXIf`` Orientation is applied like a JPEG's or TIFF's (upscale2x, demosaic, mosaic);
* an ICC profile whose colour space (header bytes 16-20) does not describe the pixels written
  (a CMYK profile on the RGB pixels of a CMYK JPEG, a GRAY profile on RGB, an RGB profile on a
  single channel) is not written, with one note;
* ``gsprestore mosaic`` says that it does not keep the input's ICC profile;
* an RGBA image written as JPEG says that its transparency was dropped.
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

from gsprestore.imageio.images import apply_orientation, read_image, write_image
from gsprestore.imageio.metadata import ORIENTATION, Metadata

from cli_runner import cli


def notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("note:")]


def icc_blob(space: bytes) -> bytes:
    """A minimal ICC profile: a 128-byte header naming the data colour ``space``, no tags."""
    head = bytearray(128)
    struct.pack_into(">I", head, 0, 132)
    head[8:12] = bytes([4, 0x20, 0, 0])
    head[12:16] = b"prtr" if space == b"CMYK" else b"mntr"
    head[16:20] = space
    head[20:24] = b"Lab " if space == b"CMYK" else b"XYZ "
    head[36:40] = b"acsp"
    return bytes(head) + b"\0\0\0\0"


@functools.lru_cache(maxsize=None)
def srgb_icc() -> bytes:  # cached: the profile carries its creation time
    from PIL import ImageCms

    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def written_icc(path: Path) -> bytes | None:
    return read_image(path).icc_profile


def written_orientation(path: Path) -> int:
    with PILImage.open(path) as im:
        return int(im.getexif().get(ORIENTATION, 1))


def oriented_png(path: Path, ints: np.ndarray, orientation: int, depth: int = 8) -> Path:
    """``ints`` (stored order) as a PNG whose eXIf says ``orientation``: 8-bit through Pillow
    (its own eXIf writer), 16-bit through ours."""
    if depth == 8:
        exif = PILImage.Exif()
        exif[ORIENTATION] = orientation
        PILImage.fromarray(ints[:, :, 0] if ints.shape[2] == 1 else ints).save(path, exif=exif)
    else:
        write_image(path, ints / 65535.0, 16, metadata=Metadata(ifd0={ORIENTATION: orientation}))
    return path


# --------------------------------------------------------------------------- 1. PNG orientation


@pytest.mark.parametrize("depth", [8, 16])
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_png_exif_orientation_is_applied_by_upscale2x(tmp_path, depth, orientation):
    rng = np.random.default_rng(orientation)
    ints = rng.integers(0, 2**depth, (4, 6, 3)).astype(np.uint8 if depth == 8 else np.uint16)
    src = oriented_png(tmp_path / "in.png", ints, orientation, depth)
    assert read_image(src).meta["orientation"] == orientation
    upright = oriented_png(tmp_path / "upright.png", apply_orientation(ints, orientation), 1, depth)
    for name in (src, upright):
        code, _, err = cli("upscale2x", name, "-o", tmp_path / f"{name.stem}-2x.png", "-m", "bicubic")
        assert code == 0, err
    got, want = read_image(tmp_path / "in-2x.png"), read_image(tmp_path / "upright-2x.png")
    # the output is the upright picture, upscaled, written with Orientation 1
    assert got.array.shape == want.array.shape
    np.testing.assert_array_equal(got.array, want.array)
    assert written_orientation(tmp_path / "in-2x.png") == 1


def test_png_exif_orientation_demosaic_in_stored_order(tmp_path):
    rng = np.random.default_rng(5)
    ints = rng.integers(0, 256, (6, 10, 1)).astype(np.uint8)
    oriented_png(tmp_path / "m6.png", ints, 6)
    oriented_png(tmp_path / "m1.png", ints, 1)
    for name in ("m6", "m1"):
        code, _, err = cli("demosaic", tmp_path / f"{name}.png", "-o", tmp_path / f"{name}-d.png", "-m", "bilinear")
        assert code == 0, err
    stored = read_image(tmp_path / "m1-d.png").array  # demosaicked with the sensor's phase
    got = read_image(tmp_path / "m6-d.png").array
    assert got.shape == (10, 6, 3)
    np.testing.assert_array_equal(got, apply_orientation(stored, 6))
    assert written_orientation(tmp_path / "m6-d.png") == 1


def test_png_exif_orientation_mosaic_of_the_upright_picture(tmp_path):
    rng = np.random.default_rng(6)
    ints = rng.integers(0, 256, (6, 10, 3)).astype(np.uint8)
    oriented_png(tmp_path / "p6.png", ints, 6)
    oriented_png(tmp_path / "up.png", apply_orientation(ints, 6), 1)
    for name in ("p6", "up"):
        code, _, err = cli("mosaic", tmp_path / f"{name}.png", "-o", tmp_path / f"{name}-m.png")
        assert code == 0, err
    np.testing.assert_array_equal(read_image(tmp_path / "p6-m.png").array, read_image(tmp_path / "up-m.png").array)
    assert written_orientation(tmp_path / "p6-m.png") == 1


def test_odd_orientation_values_are_read_as_one(tmp_path):
    """A PNG whose Orientation is out of range reads as 1 (as a TIFF's does), never fails."""
    ints = np.zeros((4, 6, 3), np.uint8)
    for value in (0, 9, 300):
        src = oriented_png(tmp_path / f"o{value}.png", ints, value)
        assert read_image(src).meta["orientation"] == 1


# --------------------------------------------------------------------------- 2. ICC colour space


def cmyk_jpeg(path: Path) -> Path:
    rng = np.random.default_rng(7)
    PILImage.fromarray(rng.integers(0, 256, (8, 10, 4)).astype(np.uint8), "CMYK").save(
        path, quality=95, icc_profile=icc_blob(b"CMYK"))
    return path


@pytest.mark.parametrize("ext", ["png", "tif", "jpg", "webp"])
def test_cmyk_profile_not_written_on_rgb_pixels(tmp_path, ext):
    src = cmyk_jpeg(tmp_path / "cmyk.jpg")
    assert read_image(src).icc_profile[16:20] == b"CMYK"
    out = tmp_path / f"out.{ext}"
    code, _, err = cli("upscale2x", src, "-o", out, "-m", "bicubic")
    assert code == 0, err
    assert written_icc(out) is None
    said = [n for n in notes(err) if "ICC" in n]
    assert len(said) == 1 and "CMYK" in said[0] and "RGB" in said[0], err


def test_gray_profile_not_written_on_rgb_and_rgb_profile_not_on_gray(tmp_path):
    rng = np.random.default_rng(8)
    write_image(tmp_path / "rgb.png", rng.random((6, 8, 3)), 8)
    write_image(tmp_path / "gray.png", rng.random((6, 8)), 8)
    # the writer is the one place every output goes through: it refuses the mismatch itself
    said: list[str] = []
    write_image(tmp_path / "rgb-g.png", rng.random((6, 8, 3)), 8, icc_profile=icc_blob(b"GRAY"), notice=said.append)
    write_image(tmp_path / "gray-r.tif", rng.random((6, 8)), 16, icc_profile=srgb_icc(), notice=said.append)
    assert written_icc(tmp_path / "rgb-g.png") is None and written_icc(tmp_path / "gray-r.tif") is None
    assert len(said) == 2 and "GRAY" in said[0] and "RGB" in said[1], said
    # through the commands (such inputs are made with Pillow: our writer would not make them)
    for name, src, icc in (("a", "rgb", icc_blob(b"GRAY")), ("b", "gray", srgb_icc())):
        with PILImage.open(tmp_path / f"{src}.png") as im:
            im.save(tmp_path / f"{name}.png", icc_profile=icc)
    for name in ("a", "b"):
        code, _, err = cli("upscale2x", tmp_path / f"{name}.png", "-o", tmp_path / f"{name}-2x.png", "-m", "bicubic")
        assert code == 0, err
        assert written_icc(tmp_path / f"{name}-2x.png") is None
        assert len([n for n in notes(err) if "ICC" in n]) == 1, err


@pytest.mark.parametrize("ext, kept", [("png", True), ("tif", True), ("jpg", True), ("webp", False)])
def test_gray_profile_kept_on_gray_output(tmp_path, ext, kept):
    """A gray image keeps its gray profile, except as WebP, which has no gray mode (written RGB)."""
    rng = np.random.default_rng(9)
    PILImage.fromarray(rng.integers(0, 256, (6, 8)).astype(np.uint8)).save(tmp_path / "g.png",
                                                                           icc_profile=icc_blob(b"GRAY"))
    code, _, err = cli("upscale2x", tmp_path / "g.png", "-o", tmp_path / f"g2.{ext}", "-m", "bicubic")
    assert code == 0, err
    assert (written_icc(tmp_path / f"g2.{ext}") == icc_blob(b"GRAY")) is kept
    assert len([n for n in notes(err) if "ICC" in n]) == (0 if kept else 1), err


def test_rgb_profile_kept_on_rgb_output_without_a_note(tmp_path):
    rng = np.random.default_rng(10)
    PILImage.fromarray(rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)).save(tmp_path / "c.png",
                                                                              icc_profile=srgb_icc())
    code, _, err = cli("upscale2x", tmp_path / "c.png", "-o", tmp_path / "c2.jpg", "-m", "bicubic")
    assert code == 0, err
    assert written_icc(tmp_path / "c2.jpg") == srgb_icc() and not [n for n in notes(err) if "ICC" in n], err


@pytest.mark.parametrize("space, kept", [(b"GRAY", False), (b"RGB ", True)])
def test_demosaic_keeps_only_an_rgb_profile(tmp_path, space, kept):
    rng = np.random.default_rng(11)
    PILImage.fromarray(rng.integers(0, 256, (6, 8)).astype(np.uint8)).save(tmp_path / "m.png",
                                                                           icc_profile=icc_blob(space))
    code, _, err = cli("demosaic", tmp_path / "m.png", "-o", tmp_path / "d.png", "-m", "bilinear")
    assert code == 0, err
    assert (written_icc(tmp_path / "d.png") == icc_blob(space)) is kept
    said = [n for n in notes(err) if "ICC" in n]
    assert len(said) == (0 if kept else 1), err


# --------------------------------------------------------------------------- 3. mosaic and ICC


def test_mosaic_says_the_icc_profile_is_not_kept(tmp_path):
    rng = np.random.default_rng(12)
    PILImage.fromarray(rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)).save(tmp_path / "p3.jpg",
                                                                              icc_profile=srgb_icc())
    code, _, err = cli("mosaic", tmp_path / "p3.jpg", "-o", tmp_path / "m.png")
    assert code == 0, err
    assert written_icc(tmp_path / "m.png") is None
    said = [n for n in notes(err) if "ICC" in n]
    assert len(said) == 1 and "not kept" in said[0] and "sRGB" in said[0], err
    PILImage.fromarray(rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)).save(tmp_path / "plain.png")
    code, _, err = cli("mosaic", tmp_path / "plain.png", "-o", tmp_path / "m3.png")
    assert code == 0 and not [n for n in notes(err) if "ICC" in n], err


# --------------------------------------------------------------------------- 4. alpha to JPEG


@pytest.mark.parametrize("command", ["upscale2x", "demosaic"])
def test_transparency_written_as_jpeg_is_a_note(tmp_path, command):
    rng = np.random.default_rng(13)
    colour = rng.random((6, 8, 1 if command == "demosaic" else 3))
    alpha = np.ones((6, 8))
    write_image(tmp_path / "opaque.png", colour, 8, alpha=alpha)
    alpha[2:4, 2:4] = 0.25
    write_image(tmp_path / "clear.png", colour, 8, alpha=alpha)
    method = "bilinear" if command == "demosaic" else "bicubic"
    code, _, err = cli(command, tmp_path / "clear.png", "-o", tmp_path / "clear.jpg", "-m", method)
    assert code == 0, err
    said = [n for n in notes(err) if "alpha" in n]
    assert len(said) == 1 and "dropped" in said[0] and "not composited" in said[0], err
    with PILImage.open(tmp_path / "clear.jpg") as im:
        assert im.mode == "RGB"
    # a fully opaque alpha channel loses nothing: no note; WebP keeps the alpha: no note
    code, _, err = cli(command, tmp_path / "opaque.png", "-o", tmp_path / "opaque.jpg", "-m", method)
    assert code == 0 and not [n for n in notes(err) if "alpha" in n], err
    code, _, err = cli(command, tmp_path / "clear.png", "-o", tmp_path / "clear.webp", "-m", method)
    assert code == 0 and not [n for n in notes(err) if "alpha" in n], err
    assert read_image(tmp_path / "clear.webp").alpha is not None


# --------------------------------------------------------------------------- the same class: tags tied to the pixels


def exif_of(path: Path) -> tuple[dict, dict]:
    with PILImage.open(path) as im:
        exif = im.getexif()
        return dict(exif), dict(exif.get_ifd(0x8769))


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_subject_location_follows_the_pixels(tmp_path, orientation):
    """SubjectLocation / SubjectArea are pixel coordinates of the stored picture: in an output turned
    upright and upscaled they point at the same pixel of the picture; the focal plane's pixels per
    unit scale with it and swap with the axes, as X/YResolution do."""
    from PIL.TiffImagePlugin import IFDRational

    ints = np.full((6, 10, 3), 40, np.uint8)
    ints[1, 7] = 250  # the subject: stored pixel x=7, y=1
    exif = {0xA214: (7, 1), 0x9214: (7, 1, 4, 2), 0xA20E: IFDRational(3000, 1), 0xA20F: IFDRational(2000, 1)}
    meta = Metadata(ifd0={ORIENTATION: orientation, 0x011A: IFDRational(300, 1), 0x011B: IFDRational(72, 1)},
                    exif=exif)
    write_image(tmp_path / "s.png", ints / 255.0, 8, metadata=meta)
    code, _, err = cli("upscale2x", tmp_path / "s.png", "-o", tmp_path / "s2.png", "-m", "bicubic")
    assert code == 0, err
    ifd0, sub = exif_of(tmp_path / "s2.png")
    x, y = sub[0xA214]
    out = read_image(tmp_path / "s2.png").array
    assert out[y, x, 0] == pytest.approx(250 / 255) and out.max() == pytest.approx(250 / 255)
    assert tuple(sub[0x9214][:2]) == (x, y)
    turned = orientation >= 5
    assert tuple(sub[0x9214][2:]) == ((4, 8) if turned else (8, 4))
    assert (float(sub[0xA20E]), float(sub[0xA20F])) == ((4000, 6000) if turned else (6000, 4000))
    assert (float(ifd0[0x011A]), float(ifd0[0x011B])) == ((72, 300) if turned else (300, 72))
    # mosaic (the upright picture, same scale) and demosaic (stored order, then turned) agree
    code, _, err = cli("mosaic", tmp_path / "s.png", "-o", tmp_path / "m.png")
    assert code == 0, err
    assert exif_of(tmp_path / "m.png")[1][0xA214] == (x // 2, y // 2)


def test_subject_location_out_of_the_picture_is_left_out(tmp_path):
    meta = Metadata(ifd0={ORIENTATION: 6}, exif={0xA214: (70, 1), 0x9214: (1, 2, 3, 4, 5)})
    write_image(tmp_path / "s.png", np.zeros((6, 10, 3)), 8, metadata=meta)
    code, _, err = cli("upscale2x", tmp_path / "s.png", "-o", tmp_path / "s2.png", "-m", "bicubic")
    assert code == 0, err
    sub = exif_of(tmp_path / "s2.png")[1]
    assert 0xA214 not in sub and 0x9214 not in sub


def test_for_output_without_geometry_leaves_out_the_subject():
    from gsprestore.imageio.metadata import for_output

    out = for_output(Metadata(exif={0xA214: (7, 1), 0x829A: 0.5}), 20, 12, "x")
    assert 0xA214 not in out.exif and 0x829A in out.exif


def test_xmp_says_what_the_pixels_are(tmp_path):
    """A CMYK JPEG's XMP (Photoshop's colour mode 4 and the name of its CMYK profile) and its
    layout (tiff:ImageWidth) are made true of the RGB output without that profile."""
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
           b'<rdf:Description rdf:about="" xmlns:photoshop="http://ns.adobe.com/photoshop/1.0/" '
           b'xmlns:tiff="http://ns.adobe.com/tiff/1.0/" photoshop:ColorMode="4" '
           b'photoshop:ICCProfile="U.S. Web Coated (SWOP) v2" tiff:ImageWidth="10" tiff:ImageLength="8"/>'
           b'</rdf:RDF></x:xmpmeta>')
    rng = np.random.default_rng(14)
    PILImage.fromarray(rng.integers(0, 256, (8, 10, 4)).astype(np.uint8), "CMYK").save(
        tmp_path / "c.jpg", icc_profile=icc_blob(b"CMYK"), xmp=xmp)
    code, _, err = cli("upscale2x", tmp_path / "c.jpg", "-o", tmp_path / "c2.png", "-m", "bicubic")
    assert code == 0, err
    out = read_image(tmp_path / "c2.png").meta["metadata"].xmp
    assert b'photoshop:ColorMode="3"' in out and b"ICCProfile" not in out
    assert b'tiff:ImageWidth="20"' in out and b'tiff:ImageLength="16"' in out
    # an RGB profile that is written keeps its name
    PILImage.fromarray(rng.integers(0, 256, (8, 10, 3)).astype(np.uint8)).save(
        tmp_path / "r.jpg", icc_profile=srgb_icc(), xmp=xmp.replace(b'"4"', b'"3"'))
    code, _, err = cli("upscale2x", tmp_path / "r.jpg", "-o", tmp_path / "r2.png", "-m", "bicubic")
    assert code == 0, err
    assert b"ICCProfile=" in read_image(tmp_path / "r2.png").meta["metadata"].xmp
    # a mosaic is one channel: gray, as Photoshop counts modes
    code, _, err = cli("mosaic", tmp_path / "r.jpg", "-o", tmp_path / "m.png")
    assert code == 0, err
    assert b'photoshop:ColorMode="1"' in read_image(tmp_path / "m.png").meta["metadata"].xmp
