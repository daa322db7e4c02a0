"""Camera files (issue 24): a RAW+JPEG shoot folder gives its RAW files to ``demosaic`` (the JPEGs
named as skipped), ``compare`` and ``explain`` open camera RAW, and EXIF / XMP go from inputs (a
JPEG with a camera's EXIF, a DNG with its camera record) to PNG, TIFF, JPEG and WebP outputs."""

from __future__ import annotations

import numpy as np
import pytest
from cli_runner import cli
from PIL import Image as PILImage
from PIL.TiffImagePlugin import IFDRational

from gsprestore.imageio.images import read_image, tool_tag

XMP = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
       b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" xmlns:exif="http://ns.adobe.com/exif/1.0/" '
       b'tiff:Orientation="6" exif:PixelXDimension="20" exif:PixelYDimension="14"><dc:creator '
       b'xmlns:dc="http://purl.org/dc/elements/1.1/">Ann Example</dc:creator></rdf:Description></rdf:RDF>'
       b'</x:xmpmeta>')


def canon_jpeg(path, h=24, w=30, orientation=6):
    """A JPEG as a camera writes it: make, model, date, exposure, orientation, pixel size, XMP."""
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([x * 12 % 256, y * 18 % 256, (x + y) * 7 % 256], axis=2).astype(np.uint8)
    exif = PILImage.Exif()
    exif[0x010F], exif[0x0110], exif[0x0112] = "Canon", "Canon EOS R5", orientation
    exif[0x0132], exif[0x0131] = "2026:11:26 10:00:00", "Firmware 1.8.1"
    exif[0x8769] = {0x829A: IFDRational(1, 250), 0x829D: IFDRational(28, 10), 0x8827: 400,
                    0x9003: "2026:11:26 10:00:00", 0x920A: IFDRational(50, 1), 0xA002: w, 0xA003: h}
    PILImage.fromarray(rgb).save(path, exif=exif.tobytes(), xmp=XMP, quality=95)
    return path


def exif_of(path):
    with PILImage.open(path) as im:
        exif = im.getexif()
        xmp = im.info.get("xmp") or im.info.get("XML:com.adobe.xmp")
        if xmp is None and hasattr(im, "tag_v2"):
            xmp = im.tag_v2.get(700)
        return dict(exif), exif.get_ifd(0x8769), im.size, xmp


def _exposure_ok(sub):
    assert float(sub[0x829A]) == pytest.approx(1 / 250) and float(sub[0x829D]) == pytest.approx(2.8)
    assert sub[0x8827] == 400 and float(sub[0x920A]) == pytest.approx(50.0)
    assert sub[0x9003] == "2026:11:26 10:00:00"


@pytest.mark.parametrize("ext", ["png", "tif", "jpg", "webp"])
def test_exif_and_xmp_go_to_every_output_format(tmp_path, ext):
    src = canon_jpeg(tmp_path / "IMG_0001.JPG")
    out = tmp_path / f"big.{ext}"
    code, _, err = cli("upscale2x", src, "-o", out, "-m", "bicubic")
    assert code == 0, err
    ifd0, sub, size, xmp = exif_of(out)
    # stored 30x24 with Orientation 6: written upright (24x30), 2x -> 48x60, Orientation 1
    assert size == (48, 60)
    assert ifd0[0x010F] == "Canon" and ifd0[0x0110] == "Canon EOS R5" and ifd0[0x0132] == "2026:11:26 10:00:00"
    assert ifd0.get(0x0112, 1) == 1
    assert ifd0[0x0131] == "gsprestore upscale2x" and tool_tag(out) == "gsprestore upscale2x"
    _exposure_ok(sub)
    assert (sub[0xA002], sub[0xA003]) == (48, 60)  # the output's pixel size
    xmp = bytes(xmp)
    assert b"Ann Example" in xmp and b'tiff:Orientation="1"' in xmp
    assert b'exif:PixelXDimension="48"' in xmp and b'exif:PixelYDimension="60"' in xmp
    assert read_image(out).array.shape[:2] == (60, 48)  # and our own reader still reads it


def test_camera_record_goes_from_a_jpeg_through_a_dng_to_the_developed_output(tmp_path):
    src = canon_jpeg(tmp_path / "IMG_0001.JPG", orientation=1)
    dng = tmp_path / "IMG_0001.dng"
    code, _, err = cli("mosaic", src, "-o", dng)
    assert code == 0, err
    import tifffile

    with tifffile.TiffFile(dng) as tf:  # the DNG carries the camera record in IFD0 (TIFF/EP)
        tags = tf.pages[0].tags
        assert tags[271].value == "Canon" and tags[272].value == "Canon EOS R5" and tags[34855].value == 400
    for ext in ("png", "tif", "jpg"):
        out = tmp_path / f"dev.{ext}"
        code, _, err = cli("demosaic", dng, "-o", out, "-m", "bilinear")
        assert code == 0, err
        ifd0, sub, size, _ = exif_of(out)
        assert size == (30, 24)
        assert ifd0[0x010F] == "Canon" and ifd0[0x0110] == "Canon EOS R5" and ifd0[0x0131] == "gsprestore demosaic"
        _exposure_ok(sub)
        assert (sub[0xA002], sub[0xA003]) == (30, 24)


def test_a_file_without_metadata_gives_an_output_with_only_the_software_tag(tmp_path):
    PILImage.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "plain.png")
    code, _, err = cli("upscale2x", tmp_path / "plain.png", "-o", tmp_path / "o.jpg", "-m", "bicubic")
    assert code == 0, err
    ifd0, sub, _, xmp = exif_of(tmp_path / "o.jpg")
    assert ifd0 == {0x0131: "gsprestore upscale2x"} and sub == {} and xmp is None


def test_mosaic_refuses_a_dng_that_libraw_would_not_open(tmp_path):
    src = canon_jpeg(tmp_path / "small.jpg", h=14, w=20, orientation=1)
    code, _, err = cli("mosaic", src, "-o", tmp_path / "small.dng")
    assert code == 1 and "small.jpg: 20x14 is too small for a DNG" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.jpg"]


def _shoot(tmp_path):
    shoot = tmp_path / "shoot"
    shoot.mkdir()
    src = canon_jpeg(shoot / "IMG_0001.JPG", orientation=1)
    code, _, err = cli("mosaic", src, "-o", shoot / "IMG_0001.dng")
    assert code == 0, err
    canon_jpeg(shoot / "IMG_0002.JPG", orientation=1)
    return shoot


def test_raw_plus_jpeg_folder_gives_the_raw_files_and_names_the_rest(tmp_path):
    shoot = _shoot(tmp_path)
    code, _, err = cli("demosaic", shoot, "-o", tmp_path / "dev", "-m", "bilinear")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == ["IMG_0001.png"]
    notes = [line for line in err.splitlines() if "camera RAW" in line]
    assert len(notes) == 1 and notes[0].startswith("note: skipped 2 non-RAW (a folder holding camera RAW files")
    assert "IMG_0001.JPG" in notes[0] and "IMG_0002.JPG" in notes[0]
    # a glob over the folder does the same; a JPEG named on its own is taken (and refused for what it is)
    code, _, err = cli("demosaic", str(shoot / "*"), "-o", tmp_path / "dev2", "-m", "bilinear")
    assert code == 0 and sorted(p.name for p in (tmp_path / "dev2").iterdir()) == ["IMG_0001.png"], err
    code, _, err = cli("demosaic", shoot / "IMG_0002.JPG", "-o", tmp_path / "x.png", "-m", "bilinear")
    assert code == 1 and "IMG_0002.JPG: has 3 colour channels" in err and not (tmp_path / "x.png").exists()


def test_raw_and_jpg_sub_folders_give_the_raw_files(tmp_path):
    shoot = _shoot(tmp_path)
    (shoot / "RAW").mkdir()
    (shoot / "JPG").mkdir()
    (shoot / "IMG_0001.dng").rename(shoot / "RAW" / "IMG_0001.dng")
    for name in ("IMG_0001.JPG", "IMG_0002.JPG"):
        (shoot / name).rename(shoot / "JPG" / name)
    code, _, err = cli("demosaic", shoot, "-r", "-o", tmp_path / "dev", "-m", "bilinear")
    assert code == 0, err
    written = [p.relative_to(tmp_path / "dev").as_posix() for p in (tmp_path / "dev").rglob("*.png")]
    assert written == ["RAW/IMG_0001.png"]
    assert "skipped 2 non-RAW (a folder holding camera RAW files gives those only" in err


def test_compare_and_explain_open_camera_raw(tmp_path):
    shoot = _shoot(tmp_path)
    dng = shoot / "IMG_0001.dng"
    code, out, err = cli("compare", dng, "-m", "bilinear,menon", "-o", tmp_path / "cmp.png")
    assert code == 0, err
    assert "no ground truth" in err and "photometric" not in err
    with PILImage.open(tmp_path / "cmp.png") as im:
        assert im.size[0] > 40
    code, out, err = cli("explain", dng, "--no-reference", "-m", "igtv", "-o", tmp_path / "ex")
    assert code == 0, err
    assert (tmp_path / "ex" / "index.md").is_file()
    code, _, err = cli("compare", dng, "-t", "upscale2x", "-m", "bicubic", "-o", tmp_path / "c2.png")
    assert code == 1 and "IMG_0001.dng: a camera RAW file is a sensor mosaic: use --task demosaic" in err
    assert not (tmp_path / "c2.png").exists()
    cut = tmp_path / "cut.dng"
    cut.write_bytes(dng.read_bytes()[:300])
    for command, out in (("compare", tmp_path / "c3.png"), ("explain", tmp_path / "ex3")):
        code, _, err = cli(command, cut, "-m", "igtv", "-o", out)
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {cut}: ") and "camera RAW" in lines[0]
        assert not out.exists()


def test_metadata_never_fails_a_good_image(tmp_path):
    """A damaged EXIF block is left out; a maker note too large for a JPEG's EXIF segment is
    dropped from a JPEG output (the rest kept) and kept in a PNG."""
    rgb = np.full((12, 12, 3), 128, np.uint8)
    PILImage.fromarray(rgb).save(tmp_path / "bad.jpg", exif=b"Exif\0\0II*\0\xff\xff\xff\x7f" + b"\x13" * 40)
    code, _, err = cli("upscale2x", tmp_path / "bad.jpg", "-o", tmp_path / "bad-2x.png", "-m", "bicubic")
    assert code == 0, err
    assert exif_of(tmp_path / "bad-2x.png")[0] == {0x0131: "gsprestore upscale2x"}
    # Pillow's warning is one note naming the file, not Python's two warning lines
    notes = [line for line in err.splitlines() if "EXIF" in line]
    assert notes == [f"note: {tmp_path / 'bad.jpg'}: Corrupt EXIF data. Expecting to read 2 bytes but only got 0."]
    exif = PILImage.Exif()
    exif[0x010F] = "Canon"
    exif[0x8769] = {0x927C: bytes(range(256)) * 200, 0x8827: 800}  # a 51 KB maker note
    PILImage.fromarray(rgb).save(tmp_path / "big.png", exif=exif.tobytes())
    for ext in ("jpg", "png"):
        code, _, err = cli("upscale2x", tmp_path / "big.png", "-o", tmp_path / f"o.{ext}", "-m", "bicubic")
        assert code == 0, err
        ifd0, sub, _, _ = exif_of(tmp_path / f"o.{ext}")
        assert ifd0[0x010F] == "Canon" and sub[0x8827] == 800 and sub[0xA002] == 24


def test_metadata_survives_a_chain_of_outputs(tmp_path):
    """A TIFF output (gsprestore's own TIFF writer) read back as an input keeps the record."""
    src = canon_jpeg(tmp_path / "IMG_0001.JPG")
    code, _, err = cli("upscale2x", src, "-o", tmp_path / "a.tif", "-m", "bicubic", "--bit-depth", "16")
    assert code == 0, err
    code, _, err = cli("upscale2x", tmp_path / "a.tif", "-o", tmp_path / "b.webp", "-m", "bicubic")
    assert code == 0, err
    ifd0, sub, size, xmp = exif_of(tmp_path / "b.webp")
    assert size == (96, 120) and ifd0[0x0110] == "Canon EOS R5" and ifd0.get(0x0112, 1) == 1
    _exposure_ok(sub)
    assert (sub[0xA002], sub[0xA003]) == (96, 120) and b"Ann Example" in bytes(xmp)


def test_a_raw_container_tifffile_cannot_read_gives_its_previews_exif(tmp_path, monkeypatch):
    """CR3, RAF...: not TIFF-based; the camera's record comes from the embedded JPEG preview
    (rawpy's extract_thumb), here a stand-in for LibRaw's answer."""
    import io

    import rawpy

    from gsprestore.imageio.metadata import raw_metadata

    preview = io.BytesIO()
    PILImage.open(canon_jpeg(tmp_path / "preview.jpg")).save(preview, "JPEG", exif=PILImage.open(
        tmp_path / "preview.jpg").getexif().tobytes())

    class Raw:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def extract_thumb(self):
            return type("Thumb", (), {"format": rawpy.ThumbFormat.JPEG, "data": preview.getvalue()})()

    (tmp_path / "X.CR3").write_bytes(b"\0\0\0\x18ftypcrx " + bytes(64))  # not a TIFF
    monkeypatch.setattr(rawpy, "imread", lambda path: Raw())
    meta = raw_metadata(str(tmp_path / "X.CR3"))
    assert meta.ifd0[0x010F] == "Canon" and meta.ifd0[0x0110] == "Canon EOS R5"
    _exposure_ok(meta.exif)
    assert 0xA002 not in meta.exif  # the preview's size is not the picture's
    monkeypatch.setattr(rawpy, "imread", lambda path: (_ for _ in ()).throw(rawpy.LibRawNoThumbnailError()))
    assert not raw_metadata(str(tmp_path / "X.CR3"))


def test_a_camera_raw_given_to_a_command_that_takes_images_is_refused_in_one_line(tmp_path):
    """Issue 50: ``upscale2x`` / ``mosaic`` of a camera RAW file used to upscale its embedded
    thumbnail. Named one by one or found in a folder, it gets one line that says to develop it
    first, exit 2, and nothing is written; beside images in a folder it is skipped with that line."""
    shoot = _shoot(tmp_path)
    dng = shoot / "IMG_0001.dng"
    for command in ("upscale2x", "mosaic"):
        code, _, err = cli(command, dng, "-o", tmp_path / "out.png")
        assert code == 2 and f"develop it first with `gsprestore demosaic {dng}`" in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out.png").exists()
    only = tmp_path / "only"
    only.mkdir()
    dng.rename(only / "IMG_0001.dng")
    code, _, err = cli("upscale2x", only, "-o", tmp_path / "out")
    assert code == 2 and "a camera RAW file: `gsprestore upscale2x` takes developed images" in err
    assert not (tmp_path / "out").exists()
    (only / "IMG_0001.dng").rename(shoot / "IMG_0001.dng")
    code, _, err = cli("upscale2x", shoot, "-o", tmp_path / "out", "-m", "bicubic")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["IMG_0001.JPG", "IMG_0002.JPG"]
    assert "skipped 1 camera RAW file(s)" in err and "develop them first with `gsprestore demosaic`" in err


def test_inputs_are_recognised_by_content_not_by_a_raw_suffix(tmp_path):
    """Issue 51: a PNG mosaic named ``.CR2`` is demosaicked as the PNG it is."""
    from gsprestore.imageio.camera_raw import is_camera_raw
    from gsprestore.imageio.images import write_image

    rng = np.random.default_rng(0)
    png = tmp_path / "mosaic.png"
    write_image(png, rng.random((16, 20)).astype(np.float32), 8)
    fake = tmp_path / "IMG_0001.CR2"
    png.rename(fake)
    assert not is_camera_raw(fake) and is_camera_raw(tmp_path / "missing.nef")
    code, _, err = cli("demosaic", fake, "-o", tmp_path / "out.png", "-m", "bilinear")
    assert code == 0, err
    assert read_image(tmp_path / "out.png").array.shape == (16, 20, 3)


def test_a_raw_whose_name_is_not_utf8_text_to_python_is_read(tmp_path):
    """Issue 51: ``é😀.dng`` under ``LC_ALL=C`` (Python then holds the name with surrogate escapes,
    which rawpy cannot encode) failed with a codec error."""
    import os
    import subprocess
    import sys

    shoot = _shoot(tmp_path)
    name = "\u00e9\U0001f600.dng"
    os.rename(shoot / "IMG_0001.dng", shoot / name)
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    res = subprocess.run([sys.executable, "-m", "gsprestore", "demosaic", name, "-m", "bilinear", "-q"],
                         cwd=shoot, env=env, capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (shoot / "\u00e9\U0001f600-demosaic.png").is_file()
