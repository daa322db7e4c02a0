"""The two in-house codecs, byte level: pngcodec (8/16-bit gray, gray+alpha, RGB, RGBA, ICC and
text chunks, every filter, corruption refused) and tiffcodec (8/16-bit and float32, alpha as an
extra sample, ICC, software tag, many strips), each round-tripped exactly and cross-checked against
an independent reader (Pillow / tifffile)."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest

from gsprestore.imageio import png as pngcodec, tiff as tiffcodec

ICC = b"\0\0\0\x10fake" + b"RGB " + bytes(range(40))


def _png(a: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    pngcodec.encode(buf, a, **kw)
    return buf.getvalue()


def _tiff(a: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    tiffcodec.encode(buf, a, **kw)
    return buf.getvalue()


def _random(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.random(shape) * 3 - 1).astype(dtype)  # outside [0, 1] too: floats are not clipped
    return rng.integers(0, np.iinfo(dtype).max + 1, size=shape, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_png_round_trip_exact(dtype, channels):
    a = _random((13, 7, channels), dtype)
    data = _png(a, rows_per_block=4)
    info = pngcodec.read_chunks(data)
    assert (info.width, info.height, info.channels) == (7, 13, channels)
    assert info.bit_depth == np.dtype(dtype).itemsize * 8
    out = pngcodec.decode(info)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.reshape(a.shape), a)


@pytest.mark.parametrize("filter_type", [0, 1, 2, 3, 4])
def test_png_every_filter_decodes_exactly_and_pillow_agrees(filter_type):
    from PIL import Image

    a = _random((9, 11, 4), np.uint8, seed=filter_type)
    data = _png(a, filter_type=filter_type, rows_per_block=2)
    np.testing.assert_array_equal(pngcodec.decode(pngcodec.read_chunks(data)), a)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(data))), a)


def test_png_16_bit_is_big_endian_on_disk():
    a = np.array([[0x0102, 0xFFFE]], dtype=np.uint16)
    info = pngcodec.read_chunks(_png(a, filter_type=0))
    assert zlib.decompress(info.idat) == b"\0" + b"\x01\x02\xff\xfe"


def test_png_icc_and_text_chunks():
    a = _random((4, 4, 3), np.uint8)
    info = pngcodec.read_chunks(_png(a, icc_profile=ICC, text={"Software": "gsprestore demo"}))
    assert info.icc_profile == ICC and info.text == {"Software": "gsprestore demo"}
    assert pngcodec.read_chunks(_png(a)).icc_profile is None


def test_png_corruption_and_bad_arrays_are_refused():
    data = bytearray(_png(_random((8, 8, 3), np.uint8)))
    with pytest.raises(ValueError):
        pngcodec.read_chunks(bytes(data[:-20]))  # truncated: no IEND
    data[40] ^= 0xFF  # a byte inside the first chunks: its CRC no longer matches
    with pytest.raises(ValueError):
        pngcodec.read_chunks(bytes(data))
    with pytest.raises(ValueError, match="cannot encode"):
        _png(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match="cannot encode"):
        _png(np.zeros((4, 4, 5), np.uint8))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
@pytest.mark.parametrize("channels", [1, 3])
def test_tiff_round_trip_exact_and_tifffile_agrees(dtype, channels):
    import tifffile

    a = _random((21, 10, channels), dtype)
    data = _tiff(a, strip_bytes=64)  # many strips
    info = tiffcodec.read_ifd(data)
    assert (info.width, info.height, info.samples, info.bits) == (10, 21, channels, np.dtype(dtype).itemsize * 8)
    assert info.sample_format == (3 if np.dtype(dtype).kind == "f" else 1)
    out = tiffcodec.decode(data, info)
    np.testing.assert_array_equal(out.reshape(a.shape), a)
    np.testing.assert_array_equal(tifffile.imread(io.BytesIO(data)).reshape(a.shape), a)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_tiff_alpha_icc_and_software(dtype):
    a = _random((6, 5, 4), dtype)
    data = _tiff(a, extra_alpha=True, icc_profile=ICC, software="gsprestore upscale2x")
    info = tiffcodec.read_ifd(data)
    assert info.samples == 4 and info.extra_samples == (2,)  # unassociated alpha
    assert info.photometric == 2 and info.icc_profile == ICC
    assert b"gsprestore upscale2x\0" in data
    np.testing.assert_array_equal(tiffcodec.decode(data, info), a)
    gray_alpha = _tiff(_random((3, 3, 2), dtype), extra_alpha=True)
    info = tiffcodec.read_ifd(gray_alpha)
    assert info.photometric == 1 and info.extra_samples == (2,)


def test_tiff_reads_what_tifffile_writes_with_another_layout():
    import tifffile

    a = _random((8, 6, 3), np.uint16)
    buf = io.BytesIO()
    tifffile.imwrite(buf, a.transpose(2, 0, 1), photometric="rgb", planarconfig="separate", byteorder=">")
    data = buf.getvalue()
    info = tiffcodec.read_ifd(data)
    assert info.planar == 2 and info.byteorder == ">"
    np.testing.assert_array_equal(tiffcodec.decode(data, info), a)


def test_tiff_bad_input_is_refused():
    with pytest.raises(ValueError, match="cannot encode"):
        _tiff(np.zeros((4, 4, 3), np.float64))
    with pytest.raises(ValueError):
        tiffcodec.read_ifd(b"not a tiff at all")
    data = _tiff(_random((16, 16, 3), np.uint8))
    info = tiffcodec.read_ifd(data)
    with pytest.raises(ValueError):
        tiffcodec.decode(data[: len(data) // 4] + bytes(len(data) - len(data) // 4), info)  # strips zeroed
