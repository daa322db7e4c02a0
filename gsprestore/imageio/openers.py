"""Opening files with the third-party decoders, the same way everywhere: Pillow with our
decompression-bomb limit (:func:`pillow`), LibRaw with any file name (:func:`libraw_open`). Imports
nothing of the package's own image modules, so each of them can use it."""

from __future__ import annotations

import io
from pathlib import Path

#: Larger headers are refused before decoding (corrupt, or a decompression bomb).
MAX_PIXELS = 1 << 30


def pillow():
    """Pillow's ``Image`` module with its decompression-bomb limit set to ours (:data:`MAX_PIXELS`,
    checked on every header before decoding): Pillow's own lower one would print a two-line
    warning before our one-line answer."""
    from PIL import Image as PILImage

    PILImage.MAX_IMAGE_PIXELS = MAX_PIXELS
    return PILImage


def libraw_open(path: str | Path):
    """``rawpy.imread`` of ``path``, also when its name is not UTF-8 text: rawpy encodes a path as
    UTF-8, so a name Python holds with surrogate escapes (any non-ASCII name under ``LC_ALL=C``,
    or bytes that are not UTF-8) is read through a file object instead."""
    import rawpy

    name = str(path)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        with open(path, "rb") as f:
            return rawpy.imread(io.BytesIO(f.read()))
    return rawpy.imread(name)
