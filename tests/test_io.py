"""Image I/O: exact round trips (8/16-bit, gray/gray+alpha/RGB/RGBA, PNG/TIFF), depth from the file,
alpha and ICC kept, our codecs against independent readers/writers (OpenCV/libpng, tifffile, Pillow),
and every bad file a one-line error naming the file and the reason."""

from __future__ import annotations

import functools
import io
import struct
import zlib

import numpy as np
import pytest

from gsprestore.imageio import png as pngcodec, tiff as tiffcodec
from gsprestore.core.errors import GspError
from gsprestore.imageio.images import read_image, write_image

cv2 = pytest.importorskip("cv2")
tifffile = pytest.importorskip("tifffile")
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _ints(rng, shape, depth):
    return rng.integers(0, 2**depth, size=shape, dtype=np.uint8 if depth == 8 else np.uint16)


@functools.lru_cache(maxsize=None)
def _icc() -> bytes:  # cached: the profile carries its creation time
    try:
        from PIL import ImageCms

        return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    except Exception:  # Pillow built without littlecms: any bytes naming RGB exercise the same path
        return b"\0\0\2\0fake icc\0\0\0\0RGB " + b"profile" * 20


def _icc_for(channels: int) -> bytes:
    """A profile whose colour space (header bytes 16-20) fits ``channels`` (gray (+alpha) or RGB(A)):
    a profile of another space is not written (issue 51)."""
    return _icc() if channels >= 3 else _icc()[:16] + b"GRAY" + _icc()[20:]


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("suffix", [".png", ".tif"])
@pytest.mark.parametrize("depth", [8, 16])
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_round_trip_exact(tmp_path, rng, suffix, depth, channels):
    ints = _ints(rng, (13, 17, channels), depth)
    scale = 2**depth - 1
    colour = ints[:, :, : 1 if channels <= 2 else 3].astype(np.float32) / scale
    alpha = ints[:, :, -1].astype(np.float32) / scale if channels in (2, 4) else None
    path = write_image(tmp_path / f"x{suffix}", colour, depth, alpha=alpha, icc_profile=_icc_for(channels))
    img = read_image(path)
    assert img.bit_depth == depth
    assert img.array.dtype == np.float32 and img.array.shape == colour.shape
    np.testing.assert_array_equal(np.rint(img.array * scale), ints[:, :, : colour.shape[2]])
    if alpha is None:
        assert img.alpha is None
    else:
        np.testing.assert_array_equal(np.rint(img.alpha * scale), ints[:, :, -1])
    assert img.icc_profile == _icc_for(channels)


def test_depth_comes_from_the_file_not_the_values(tmp_path):
    # a 16-bit file whose values all look like 8-bit ones (multiples of 257) stays 16-bit ...
    v = (np.arange(12, dtype=np.uint16).reshape(3, 4) * 257)
    write_image(tmp_path / "a.png", v / 65535.0, 16)
    assert read_image(tmp_path / "a.png").bit_depth == 16
    # ... and an 8-bit file of dark values stays 8-bit
    write_image(tmp_path / "b.tif", np.zeros((4, 4)), 8)
    assert read_image(tmp_path / "b.tif").bit_depth == 8


def test_16bit_rgb_png_written_by_libpng_reads_exactly(tmp_path, rng):
    """OpenCV (libpng, adaptive filters incl. Paeth) writes it; Pillow would truncate it to 8 bits."""
    y, x = np.mgrid[0:40, 0:57]
    smooth = np.stack([np.sin(x / 5 + k) * np.cos(y / 7) for k in range(3)], -1) * 30000 + 32768
    ints = (smooth + rng.normal(0, 50, smooth.shape)).clip(0, 65535).astype(np.uint16)
    cv2.imwrite(str(tmp_path / "cv.png"), ints[:, :, ::-1])
    img = read_image(tmp_path / "cv.png")
    assert img.bit_depth == 16
    np.testing.assert_array_equal(np.rint(img.array * 65535), ints)
    # and ours is readable by libpng, bit-exact
    write_image(tmp_path / "ours.png", img.array, 16)
    np.testing.assert_array_equal(cv2.imread(str(tmp_path / "ours.png"), cv2.IMREAD_UNCHANGED)[:, :, ::-1], ints)


@pytest.mark.parametrize("filter_type", [0, 1, 2, 3, 4, None])
@pytest.mark.parametrize("shape", [(1, 1, 3), (6, 1, 4), (1, 9, 2), (11, 23, 3)])
def test_png_filters(rng, filter_type, shape):
    """Every PNG filter (the decoder's row path and its anti-diagonal path) and a random mix."""
    ints = _ints(rng, shape, 16)
    buf = io.BytesIO()
    pngcodec.encode(buf, ints, filter_type=filter_type, rows_per_block=3)
    np.testing.assert_array_equal(pngcodec.decode(pngcodec.read_chunks(buf.getvalue())), ints)


def _adam7_png(ints: np.ndarray) -> bytes:
    """Independent interlaced PNG writer (filter 0 in every pass), 16-bit RGB."""
    h, w, _ = ints.shape
    raw = b""
    for x0, y0, dx, dy in pngcodec._ADAM7:
        sub = ints[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub.astype(">u2"):
            raw += b"\0" + row.tobytes()

    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))

    return (pngcodec.SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 1))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_png_adam7_interlaced(tmp_path, rng):
    ints = _ints(rng, (19, 13, 3), 16)
    (tmp_path / "i.png").write_bytes(_adam7_png(ints))
    np.testing.assert_array_equal(np.rint(read_image(tmp_path / "i.png").array * 65535), ints)
    # Pillow decodes the same file (as 8 bits): the high bytes agree, so the file is valid
    np.testing.assert_array_equal(np.asarray(PIL.open(tmp_path / "i.png")), (ints >> 8).astype(np.uint8))


@pytest.mark.parametrize("dtype", [np.uint16, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("kwargs", [{}, {"compression": "zlib"}, {"tile": (16, 16)}, {"planarconfig": "separate"},
                                    {"compression": "zlib", "predictor": True}, {"byteorder": ">"},
                                    {"rowsperstrip": 3}])
def test_tiff_decoder_against_tifffile(tmp_path, rng, dtype, kwargs):
    if dtype != np.uint16 and kwargs.get("predictor"):
        pytest.importorskip("imagecodecs", reason="tifffile needs imagecodecs for the float predictor")
    a = (_ints(rng, (21, 35, 3), 16) if dtype == np.uint16 else rng.random((21, 35, 3))).astype(dtype)
    data = a.transpose(2, 0, 1) if "planarconfig" in kwargs else a
    tifffile.imwrite(tmp_path / "t.tif", data, photometric="rgb", **kwargs)
    img = read_image(tmp_path / "t.tif")
    assert img.bit_depth == (16 if dtype == np.uint16 else 32)
    scale = 65535.0 if dtype == np.uint16 else 1.0
    np.testing.assert_array_equal(img.array * np.float32(scale), a.astype(np.float32))


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_tiff_lzw_written_by_libtiff(tmp_path, rng, channels):
    a = _ints(rng, (30, 41, channels), 16)
    a[5:20] = 7  # long runs exercise LZW's table growth
    cv2.imwrite(str(tmp_path / "l.tif"), a if channels == 1 else a[:, :, [2, 1, 0, 3][:channels]])
    img = read_image(tmp_path / "l.tif")
    got = img.array if img.alpha is None else np.concatenate([img.array, img.alpha[:, :, None]], 2)
    np.testing.assert_array_equal(np.rint(got * 65535), a)


def test_packbits_and_float_predictor_by_the_spec():
    # TIFF 6.0 spec, section 9 example
    packed = bytes([0xFE, 0xAA, 0x02, 0x80, 0x00, 0x2A, 0xFD, 0xAA, 0x03, 0x80, 0x00, 0x2A, 0x22, 0xF7, 0xAA])
    unpacked = bytes([0xAA] * 3 + [0x80, 0x00, 0x2A] + [0xAA] * 4 + [0x80, 0x00, 0x2A, 0x22] + [0xAA] * 10)
    assert tiffcodec._packbits_decode(packed) == unpacked
    # Adobe floating-point predictor (tech note 3): bytes of a row split into big-endian planes, then
    # byte-wise horizontal differences
    row = np.array([[0.25, -1.5, 3.0e-3, 7.0]], dtype=">f4")
    planes = row.view(np.uint8).reshape(1, 4, 4).transpose(0, 2, 1).reshape(1, 16)
    diffs = np.diff(planes, axis=1, prepend=np.zeros((1, 1), np.uint8))
    info = tiffcodec.TiffInfo(4, 1, 1, 32, 3, 1, 1, 3, 1, (), None, {}, "<")
    got = tiffcodec._unpredict(diffs.reshape(1, 4, 4), info, 1)
    np.testing.assert_array_equal(got.reshape(-1), row.reshape(-1))
    # with several samples per pixel, each byte is differenced against the byte one pixel (spp bytes)
    # before it, as libtiff's fpDiff does (2 RGB pixels: 6 samples, 4 planes of 6 bytes)
    rgb = np.array([[0.25, -1.5, 3.0e-3, 7.0, 0.5, 1.0e5]], dtype=">f4")
    planes = rgb.view(np.uint8).reshape(1, 6, 4).transpose(0, 2, 1).reshape(1, 24)
    diffs = planes.copy()
    diffs[:, 3:] = planes[:, 3:] - planes[:, :-3]
    info = tiffcodec.TiffInfo(2, 1, 3, 32, 3, 2, 1, 3, 1, (), None, {}, "<")
    got = tiffcodec._unpredict(diffs.reshape(1, 2, 12), info, 3)
    np.testing.assert_array_equal(got.reshape(-1), rgb.reshape(-1))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_our_tiff_reads_in_tifffile_and_pillow(tmp_path, rng, dtype, channels):
    a = rng.random((9, 13, channels)).astype(np.float32)
    depth = {np.uint8: 8, np.uint16: 16, np.float32: 32}[dtype]
    alpha = a[:, :, -1] if channels in (2, 4) else None
    colour = a[:, :, :-1] if alpha is not None else a
    write_image(tmp_path / "o.tif", colour, depth, alpha=alpha)
    want = a if depth == 32 else np.rint(a * (2**depth - 1)).astype(dtype)
    got = tifffile.imread(tmp_path / "o.tif")
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    if depth == 8 or (depth == 16 and channels == 1):
        np.testing.assert_array_equal(np.asarray(PIL.open(tmp_path / "o.tif")).reshape(want.shape), want)


def test_8bit_png_readable_by_pillow_and_icc_from_pillow(tmp_path, rng):
    ints = _ints(rng, (7, 9, 3), 8)
    PIL.fromarray(ints).save(tmp_path / "p.png", icc_profile=_icc())
    img = read_image(tmp_path / "p.png")
    assert img.icc_profile == _icc() and img.bit_depth == 8
    write_image(tmp_path / "q.png", img.array, 8, icc_profile=img.icc_profile)
    with PIL.open(tmp_path / "q.png") as im:
        assert im.info.get("icc_profile") == _icc()
        np.testing.assert_array_equal(np.asarray(im), ints)


def test_palette_png_reads_as_rgb(tmp_path):
    im = PIL.new("P", (4, 3))
    im.putpalette([255, 0, 0, 0, 255, 0] + [0] * 762)
    im.putpixel((1, 1), 1)
    im.save(tmp_path / "pal.png")
    img = read_image(tmp_path / "pal.png")
    assert img.channels == 3 and img.bit_depth == 8
    np.testing.assert_array_equal(img.array[1, 1], [0, 1, 0])


# --------------------------------------------------------------------------- bad files


def _one_line_error(path, fragment):
    with pytest.raises(GspError) as info:
        read_image(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg and fragment in msg, msg
    return msg


def _good_png(tmp_path, depth=16, name="good.png"):
    return write_image(tmp_path / name, np.random.default_rng(0).random((20, 30, 3)), depth)


@pytest.mark.parametrize("depth", [8, 16])
def test_truncated_png(tmp_path, depth):
    data = _good_png(tmp_path, depth).read_bytes()
    for cut in (len(data) // 2, len(data) - 5, 20):
        (tmp_path / "cut.png").write_bytes(data[:cut])
        _one_line_error(tmp_path / "cut.png", "truncated")


def test_corrupt_png_crc(tmp_path):
    data = bytearray(_good_png(tmp_path).read_bytes())
    data[60] ^= 0xFF
    (tmp_path / "bad.png").write_bytes(bytes(data))
    _one_line_error(tmp_path / "bad.png", "corrupt PNG")


def test_text_file_named_png(tmp_path):
    (tmp_path / "notes.png").write_text("this is not an image\n")
    _one_line_error(tmp_path / "notes.png", "not a PNG image")


def test_zero_byte_and_one_pixel(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    _one_line_error(tmp_path / "empty.png", "empty file")
    buf = io.BytesIO()
    pngcodec.encode(buf, np.zeros((1, 1, 3), np.uint8))
    (tmp_path / "px.png").write_bytes(buf.getvalue())
    _one_line_error(tmp_path / "px.png", "too small (1x1)")


def test_missing_file_and_folder(tmp_path):
    _one_line_error(tmp_path / "nope.png", "no such file")
    _one_line_error(tmp_path, "is a folder")


def test_truncated_and_corrupt_tiff(tmp_path, rng):
    a = _ints(rng, (40, 50, 3), 16)
    tifffile.imwrite(tmp_path / "t.tif", a, photometric="rgb", compression="zlib")
    data = (tmp_path / "t.tif").read_bytes()
    (tmp_path / "cut.tif").write_bytes(data[: len(data) // 2])
    _one_line_error(tmp_path / "cut.tif", "TIFF")
    (tmp_path / "junk.tif").write_bytes(b"II*\0" + b"\xff" * 30)
    _one_line_error(tmp_path / "junk.tif", "TIFF")
    bad = bytearray(data)
    bad[8 + 10 : 8 + 40] = b"\0" * 30  # inside the compressed strip
    (tmp_path / "bad.tif").write_bytes(bytes(bad))
    _one_line_error(tmp_path / "bad.tif", "corrupt TIFF")


def test_8bit_truncated_tiff_through_pillow(tmp_path, rng):
    a = _ints(rng, (64, 64, 3), 8)
    tifffile.imwrite(tmp_path / "t.tif", a, photometric="rgb")
    data = (tmp_path / "t.tif").read_bytes()
    (tmp_path / "cut.tif").write_bytes(data[: len(data) // 2])
    _one_line_error(tmp_path / "cut.tif", "TIFF")


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_float_tiff_with_nan(tmp_path, dtype):
    a = np.full((8, 8), 0.5, dtype=dtype)
    a[3, 3] = np.nan
    tifffile.imwrite(tmp_path / "nan.tif", a)
    _one_line_error(tmp_path / "nan.tif", "NaN")


# --------------------------------------------------------------------------- writing


def test_refuses_to_overwrite_and_overwrites_when_asked(tmp_path):
    p = _good_png(tmp_path)
    before = p.read_bytes()
    with pytest.raises(GspError, match="output exists"):
        write_image(p, np.zeros((4, 4, 3)), 8)
    assert p.read_bytes() == before
    write_image(p, np.zeros((4, 4, 3)), 8, overwrite=True)
    assert read_image(p).array.shape == (4, 4, 3)


def test_nan_result_writes_nothing(tmp_path):
    a = np.zeros((4, 4, 3))
    a[0, 0, 0] = np.nan
    with pytest.raises(GspError, match="NaN"):
        write_image(tmp_path / "x.png", a, 8)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pngcodec, "encode", boom)
    with pytest.raises(GspError, match="No space left"):
        write_image(tmp_path / "x.png", np.zeros((4, 4, 3)), 8)
    assert list(tmp_path.iterdir()) == []


def test_missing_output_folder_and_bad_suffix(tmp_path):
    with pytest.raises(GspError, match="output folder does not exist"):
        write_image(tmp_path / "no" / "x.png", np.zeros((4, 4)), 8)
    with pytest.raises(GspError, match="unsupported output format"):
        write_image(tmp_path / "x.bmp", np.zeros((4, 4)), 8)


@pytest.mark.parametrize("suffix", [".jpg", ".webp"])
def test_jpeg_and_webp_round_trip_with_quality(tmp_path, suffix):
    """8-bit lossy formats through Pillow: close to the original at high quality, smaller at low
    quality; WebP keeps alpha, JPEG drops it; a gray image stays gray."""
    from PIL import Image as PILImage

    y, x = np.mgrid[0:32, 0:48] / 48.0
    colour = np.stack([x, y, 1 - x * y], axis=2)
    alpha = np.full((32, 48), 0.5)
    hi = write_image(tmp_path / f"hi{suffix}", colour, 16, alpha=alpha, quality=98)
    lo = write_image(tmp_path / f"lo{suffix}", colour, 8, quality=10)
    assert lo.stat().st_size < hi.stat().st_size
    with PILImage.open(hi) as im:
        assert im.format == ("JPEG" if suffix == ".jpg" else "WEBP")
    img = read_image(hi)
    assert img.bit_depth == 8 and img.array.shape == (32, 48, 3)
    assert np.abs(img.array - colour).mean() < 0.02
    assert (img.alpha is None) == (suffix == ".jpg")
    gray = read_image(write_image(tmp_path / f"g{suffix}", colour[:, :, 0], 8))
    assert np.allclose(gray.array[:, :, 0], gray.array[:, :, -1], atol=2 / 255)


def test_jpeg_exif_orientation_is_read_and_applied_on_request(tmp_path):
    from gsprestore.imageio.images import apply_orientation

    from PIL import Image as PILImage

    a = np.zeros((20, 30, 3), np.uint8)
    a[:5, :5] = 255  # a white top-left corner
    im = PILImage.fromarray(a)
    exif = im.getexif()
    exif[274] = 6  # rotate 90 degrees clockwise to display
    im.save(tmp_path / "o.jpg", exif=exif, quality=100)
    img = read_image(tmp_path / "o.jpg")  # stored order, like every format; the orientation in meta
    assert img.array.shape == (20, 30, 3) and img.meta["orientation"] == 6
    upright = apply_orientation(img.array, img.meta["orientation"])
    assert upright.shape == (30, 20, 3)
    assert upright[:5, -5:].mean() > 0.9 and upright[:5, :5].mean() < 0.1


def test_truncated_jpeg_is_a_one_line_error(tmp_path):
    p = write_image(tmp_path / "x.jpg", np.random.default_rng(0).random((64, 64, 3)), 8)
    (tmp_path / "cut.jpg").write_bytes(p.read_bytes()[:300])
    with pytest.raises(GspError, match=r"cut.jpg: (truncated|corrupt)") as exc:
        read_image(tmp_path / "cut.jpg")
    assert "\n" not in str(exc.value)


def test_huge_header_is_refused_before_decoding(tmp_path):
    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))

    data = (pngcodec.SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b""))
    (tmp_path / "bomb.png").write_bytes(data)
    _one_line_error(tmp_path / "bomb.png", "unsupported image size 100000x100000")
