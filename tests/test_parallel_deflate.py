"""The PNG and TIFF encoders deflate on several threads (issue 50): the files are valid for other
readers (OpenCV's libpng, tifffile), exact, and the same bytes whatever the thread count."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest

from gsprestore.imageio import png, tiff


def test_adler32_combine_matches_zlib():
    rng = np.random.default_rng(0)
    for n1, n2 in [(0, 0), (1, 0), (0, 5), (100, 70000), (65521, 65521), (200000, 3)]:
        a, b = rng.integers(0, 256, n1, dtype=np.uint8).tobytes(), rng.integers(0, 256, n2, dtype=np.uint8).tobytes()
        assert png.adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(a + b)


def _image(h, w, c, dtype, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    top = 255 if dtype == np.uint8 else 65535
    base = (x * 7 + y * 3)[..., None] * np.arange(1, c + 1)
    return ((base + rng.integers(0, 40, (h, w, c))) % top).astype(dtype)


@pytest.mark.parametrize("deflate", ["isal", "zlib"])
@pytest.mark.parametrize("dtype, c", [(np.uint16, 3), (np.uint8, 4), (np.uint8, 1)])
def test_png_segments_make_one_valid_stream(monkeypatch, dtype, c, deflate):
    cv2 = pytest.importorskip("cv2")
    if deflate == "isal":  # ISA-L's deflate (the install's), else zlib's: both make valid streams
        assert png.isal_zlib is not None, "python-isal is a dependency: its deflate is the one used"
    else:
        monkeypatch.setattr(png, "isal_zlib", None)
    monkeypatch.setattr(png, "SEGMENT_BYTES", 4096)  # many segments on a small image
    a = _image(70, 53, c, dtype)
    files = []
    for threads in (1, 3):
        monkeypatch.setattr(png, "deflate_threads", lambda t=threads: t)
        buf = io.BytesIO()
        png.encode(buf, a, rows_per_block=4)
        files.append(buf.getvalue())
    assert files[0] == files[1]  # the thread count changes nothing
    got = cv2.imdecode(np.frombuffer(files[0], np.uint8), cv2.IMREAD_UNCHANGED)
    want = a[..., 0] if c == 1 else a[..., [2, 1, 0, 3][:c]] if c == 4 else a[..., ::-1]
    np.testing.assert_array_equal(got, want)
    ours = png.decode(png.read_chunks(files[0]))
    np.testing.assert_array_equal(ours.reshape(a.shape), a)
    zlib.decompress(b"".join(_idat(files[0])))  # Python's own zlib reads the stream whole (checksum included)


def _idat(data: bytes) -> list[bytes]:
    out, pos = [], 8
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"IDAT":
            out.append(data[pos + 8:pos + 8 + n])
        pos += 12 + n
    return out


def test_tiff_strips_in_parallel_read_back_exactly(monkeypatch):
    tifffile = pytest.importorskip("tifffile")
    a = _image(90, 61, 3, np.uint16, seed=2)
    files = []
    for threads in (1, 4):
        monkeypatch.setattr(png, "deflate_threads", lambda t=threads: t)
        buf = io.BytesIO()
        tiff.encode(buf, a, strip_bytes=2048)
        files.append(buf.getvalue())
    assert files[0] == files[1]
    np.testing.assert_array_equal(tifffile.imread(io.BytesIO(files[0])), a)
