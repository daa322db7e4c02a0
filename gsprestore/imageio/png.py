"""A small, exact PNG codec (numpy + zlib) for what Pillow cannot do losslessly.

Pillow (and imageio's Pillow plugin) reads a 16-bit RGB/RGBA PNG as 8-bit and cannot write one, so
gsprestore decodes 16-bit PNGs and encodes every PNG itself:

* :func:`read_chunks` walks the chunk list (signature, CRC of every chunk, IEND present), so a
  truncated or corrupt file is reported with its reason before any decoding.
* :func:`decode` un-filters the image data of the PNG specification (filters None, Sub, Up,
  Average, Paeth; Adam7 interlacing). Rows that only use None/Sub/Up are un-filtered row by row with
  vectorised numpy; Average and Paeth depend on the pixel to the left *and* the row above, so those
  images are un-filtered along anti-diagonals (every pixel of a diagonal is independent), each
  diagonal being a strided view of the padded output: ~H+W vectorised steps instead of H*W.
* :func:`encode` writes 8- or 16-bit gray / gray+alpha / RGB / RGBA, choosing None, Sub or Up per
  row (minimum sum of absolute differences, the libpng heuristic; Sub on every row of a 16-bit
  image), deflated at level 1 (ISA-L's deflate where installed, else zlib's) in fixed segments on
  several threads (one valid zlib stream; the file does not depend on the thread count), with
  optional ``iCCP`` (ICC profile) and ``tEXt`` chunks. Level 1 against the former 3: a 16-bit
  photo's file is within 0.3 % of the size (issue 50).
* Inflating is bounded (:func:`inflate_bounded`): the image data never inflates to more than the
  header's size needs and an ICC profile to no more than 16 MiB, so a small file declaring a small
  image cannot expand into gigabytes (a decompression bomb is refused, not decoded).

Why not a library: measured (issue 38, ``lab/research/image_codecs.py``; docs/architecture.md,
"Libraries"), the one small maintained codec for 16-bit PNG (pypng) reads 8-24x slower, carries no
ICC profile or text chunk and inflates a decompression bomb whole; the libpng-based ones (OpenCV,
imagecodecs) are 82-160 MB of native code and write no text chunk.

Errors are :class:`ValueError` with a short reason; :mod:`gsprestore.imageio.images` adds the file name.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..core.process import thread_map, usable_cpus

try:  # Intel ISA-L's deflate (python-isal): a valid deflate stream like zlib's, a 16-bit photo's
    # PNG in under a third of the time and a few per cent smaller (lab/research/codec_speed.py); zlib if absent
    from isal import isal_zlib
except ImportError:  # pragma: no cover - an install without the wheel
    isal_zlib = None  # type: ignore[assignment]

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel
_COLOUR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> colour type
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
_KNOWN_CRITICAL = {b"IHDR", b"PLTE", b"IDAT", b"IEND"}
IDAT_BYTES = 1 << 18  # the encoder writes IDAT chunks of about this size
#: The encoder deflates the image in segments of about this many bytes of filtered rows, in
#: parallel on up to MAX_DEFLATE_THREADS threads.
SEGMENT_BYTES = 1 << 22
MAX_DEFLATE_THREADS = 8
MAX_ICC_BYTES = 1 << 24  # an ICC profile inflating to more than 16 MiB is refused (a bomb, not a profile)


def inflate_bounded(data: bytes, limit: int, what: str) -> bytes:
    """Inflate a zlib stream, but never to more than ``limit`` bytes: a stream that would go on
    (a decompression bomb, or a file whose data does not match its declared size) is refused
    without inflating the rest. Raises :class:`ValueError` naming ``what``. ISA-L's inflate where
    installed (faster than zlib's), the same bounds."""
    inflater = inflate_module()
    d = inflater.decompressobj()
    try:
        out = d.decompress(data, limit)
    except (zlib.error, inflater.error):
        raise ValueError(f"corrupt PNG (bad compressed data in the {what})") from None
    if d.unconsumed_tail:
        probe = d.decompress(d.unconsumed_tail, 1)  # one more byte: is there really more data?
        if probe:
            raise ValueError(f"corrupt PNG (the {what} inflates to more than the {limit} bytes its declared "
                             "size needs; refused as a possible decompression bomb)")
    if not d.eof:
        raise ValueError(f"truncated PNG (the compressed {what} ends early)")
    return out


XMP_KEY = b"XML:com.adobe.xmp"


@dataclass
class PngInfo:
    """What :func:`read_chunks` found: header fields, the concatenated IDAT data, metadata."""

    width: int
    height: int
    bit_depth: int
    colour_type: int
    interlace: int
    idat: bytes
    icc_profile: bytes | None = None
    text: dict[str, str] = field(default_factory=dict)
    frames: int = 1  # an animated PNG's acTL frame count (only the default image is decoded)
    exif: bytes | None = None  # the eXIf chunk (a TIFF structure)
    xmp: bytes | None = None  # an uncompressed iTXt 'XML:com.adobe.xmp' chunk

    @property
    def channels(self) -> int:
        return _CHANNELS[self.colour_type]


def read_chunks(data: bytes) -> PngInfo:
    """Parse and validate the chunk structure of a PNG file held in ``data``."""
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG file (bad signature)")
    pos, n = len(SIGNATURE), len(data)
    header = None
    idat: list[bytes] = []
    icc = None
    text: dict[str, str] = {}
    frames = 1
    exif = xmp = None
    seen_iend = False
    while pos < n:
        if pos + 8 > n:
            raise ValueError("truncated PNG (incomplete chunk header)")
        length, ctype = struct.unpack(">I4s", data[pos : pos + 8])
        if length > 2**31 - 1:
            raise ValueError("corrupt PNG (chunk length out of range)")
        end = pos + 8 + length + 4
        if end > n:
            raise ValueError(f"truncated PNG (chunk {ctype.decode('latin-1', 'replace')} cut short)")
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[end - 4 : end])
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"corrupt PNG (CRC mismatch in chunk {ctype.decode('latin-1', 'replace')})")
        pos = end
        if ctype == b"IHDR":
            if length != 13:
                raise ValueError("corrupt PNG (bad IHDR)")
            header = struct.unpack(">IIBBBBB", body)
        elif header is None:
            raise ValueError("corrupt PNG (first chunk is not IHDR)")
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"iCCP":
            name_end = body.find(b"\0")
            if name_end >= 0 and name_end + 2 <= len(body):
                icc = inflate_bounded(body[name_end + 2 :], MAX_ICC_BYTES, "iCCP chunk")
        elif ctype == b"acTL" and length == 8:
            frames = max(1, struct.unpack(">I", body[:4])[0])
        elif ctype == b"tEXt":
            key, _, value = body.partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        elif ctype == b"eXIf":
            exif = body
        elif ctype == b"iTXt" and body.startswith(XMP_KEY + b"\0\0"):  # uncompressed XMP
            xmp = body[len(XMP_KEY) + 3 :].split(b"\0", 2)[-1]
        elif ctype == b"IEND":
            seen_iend = True
            break
        elif ctype[0:1].isupper() and ctype not in _KNOWN_CRITICAL:
            raise ValueError(f"unsupported PNG (unknown critical chunk {ctype.decode('latin-1', 'replace')})")
    if header is None:
        raise ValueError("truncated PNG (no IHDR chunk)")
    if not seen_iend:
        raise ValueError("truncated PNG (no IEND chunk)")
    if not idat:
        raise ValueError("corrupt PNG (no image data)")
    width, height, depth, ctype_, compression, filt, interlace = header
    if width == 0 or height == 0:
        raise ValueError("corrupt PNG (zero width or height)")
    if ctype_ not in _CHANNELS or depth not in (1, 2, 4, 8, 16) or compression or filt or interlace > 1:
        raise ValueError("corrupt PNG (invalid IHDR fields)")
    return PngInfo(width, height, depth, ctype_, interlace, b"".join(idat), icc, text, frames, exif, xmp)


def _unfilter_rows(ft: np.ndarray, data: np.ndarray, bpp: int) -> np.ndarray:
    """Un-filter rows that only use None (0), Sub (1) and Up (2): one vectorised step per row."""
    out = np.empty_like(data)
    prev = np.zeros(data.shape[1], dtype=np.uint8)
    for r in range(data.shape[0]):
        f = ft[r]
        row = data[r]
        if f == 0:
            out[r] = row
        elif f == 1:  # Sub: running sum along the row, per byte lane, modulo 256
            out[r] = np.cumsum(row.reshape(-1, bpp), axis=0, dtype=np.uint8).reshape(-1)
        else:  # Up
            out[r] = row + prev
        prev = out[r]
    return out


def _unfilter_wavefront(ft: np.ndarray, data: np.ndarray, bpp: int) -> np.ndarray:
    """Un-filter any mix of the five filters. Pixel (r, i) depends on (r, i-1), (r-1, i) and
    (r-1, i-1) only, so all pixels of an anti-diagonal r + i = d are independent. In a C-ordered
    array padded with one zero row on top and one zero column on the left (width P+1), a diagonal
    is a strided view with stride P * bpp, so each step is a handful of vectorised operations."""
    h, stride = data.shape
    p = stride // bpp
    raw = np.ascontiguousarray(data).reshape(-1)
    out = np.zeros((h + 1) * (p + 1) * bpp, dtype=np.uint8)
    ft16 = ft.astype(np.int16)
    step = p * bpp

    def view(buf: np.ndarray, start: int, n: int, st: int) -> np.ndarray:
        return as_strided(buf[start:], shape=(n, bpp), strides=(st, 1))

    for d in range(h + p - 1):
        r0, r1 = max(0, d - p + 1), min(h - 1, d)
        n = r1 - r0 + 1
        i0 = d - r0
        x = view(raw, (r0 * p + i0) * bpp, n, (p - 1) * bpp).astype(np.int16)
        row0 = r0 + 1  # padded coordinates
        col0 = i0 + 1
        a = view(out, (row0 * (p + 1) + col0 - 1) * bpp, n, step).astype(np.int16)
        b = view(out, ((row0 - 1) * (p + 1) + col0) * bpp, n, step).astype(np.int16)
        c = view(out, ((row0 - 1) * (p + 1) + col0 - 1) * bpp, n, step).astype(np.int16)
        f = ft16[r0 : r1 + 1, None]
        pa, pb, pc = np.abs(b - c), np.abs(a - c), np.abs(a + b - 2 * c)
        paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
        pred = np.where(
            f == 4, paeth, np.where(f == 3, (a + b) >> 1, np.where(f == 2, b, np.where(f == 1, a, 0)))
        )
        dest = view(out, (row0 * (p + 1) + col0) * bpp, n, step)
        dest[...] = (x + pred) & 255
    return out.reshape(h + 1, (p + 1) * bpp)[1:, bpp:]


def _unfilter(buf: np.ndarray, h: int, stride: int, bpp: int) -> np.ndarray:
    rows = buf.reshape(h, stride + 1)
    ft = rows[:, 0]
    if ft.size and ft.max() > 4:
        raise ValueError("corrupt PNG (invalid filter type)")
    data = rows[:, 1:]
    if np.isin(ft, (3, 4)).any():
        return _unfilter_wavefront(ft, data, bpp)
    return _unfilter_rows(ft, data, bpp)


def raw_size(info: PngInfo) -> int:
    """Bytes of filtered scanlines the header's size, depth, colour type and interlacing need."""
    bits = info.channels * info.bit_depth
    w, h = info.width, info.height
    if info.interlace == 0:
        return h * (1 + (w * bits + 7) // 8)
    total = 0
    for x0, y0, dx, dy in _ADAM7:
        pw, ph = (w - x0 + dx - 1) // dx, (h - y0 + dy - 1) // dy
        if pw > 0 and ph > 0:
            total += ph * (1 + (pw * bits + 7) // 8)
    return total


def decode(info: PngInfo) -> np.ndarray:
    """Decode an 8- or 16-bit PNG (not palette, not < 8 bits) to ``(H, W, C)`` uint8 / uint16."""
    if info.bit_depth not in (8, 16) or info.colour_type == 3:
        raise ValueError("only 8/16-bit non-palette PNGs are decoded here")
    c = info.channels
    bpp = c * info.bit_depth // 8
    w, h = info.width, info.height
    raw = inflate_bounded(info.idat, raw_size(info), "image data")
    buf = np.frombuffer(raw, dtype=np.uint8)
    if info.interlace == 0:
        need = h * (1 + w * bpp)
        if buf.size < need:
            raise ValueError("truncated PNG (not enough image data)")
        img = _unfilter(buf[:need], h, w * bpp, bpp).reshape(h, w, bpp)
    else:
        img = np.zeros((h, w, bpp), dtype=np.uint8)
        pos = 0
        for x0, y0, dx, dy in _ADAM7:
            pw, ph = (w - x0 + dx - 1) // dx, (h - y0 + dy - 1) // dy
            if pw <= 0 or ph <= 0:
                continue
            need = ph * (1 + pw * bpp)
            if buf.size < pos + need:
                raise ValueError("truncated PNG (not enough image data)")
            img[y0::dy, x0::dx] = _unfilter(buf[pos : pos + need], ph, pw * bpp, bpp).reshape(ph, pw, bpp)
            pos += need
    if info.bit_depth == 16:
        return img.reshape(h, w * bpp).view(">u2").astype(np.uint16).reshape(h, w, c)
    return img.reshape(h, w, c)


def _chunk(ctype: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body) & 0xFFFFFFFF)


def _filter_block(block: np.ndarray, prev: np.ndarray, bpp: int, force: int | None) -> np.ndarray:
    """Filter rows ``block`` (n, stride) uint8 given the row above ``prev``; returns (n, stride+1)."""
    up_rows = np.concatenate([prev[None], block[:-1]], axis=0)
    cands = {0: block}
    if force in (None, 1):
        left = np.zeros_like(block)
        left[:, bpp:] = block[:, :-bpp]
        cands[1] = block - left
    if force in (None, 2):
        cands[2] = block - up_rows
    if force in (3, 4):  # only used by tests, to exercise the decoder's Average/Paeth paths
        a = np.zeros(block.shape, np.int16)
        a[:, bpp:] = block[:, :-bpp]
        b = up_rows.astype(np.int16)
        c = np.zeros(block.shape, np.int16)
        c[:, bpp:] = up_rows[:, :-bpp]
        if force == 3:
            pred = (a + b) >> 1
        else:
            pa, pb, pc = np.abs(b - c), np.abs(a - c), np.abs(a + b - 2 * c)
            pred = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
        cands[force] = (block.astype(np.int16) - pred).astype(np.uint8)
    if force is not None:
        ft = np.full(block.shape[0], force, dtype=np.uint8)
        filt = cands[force]
    else:
        keys = sorted(cands)
        # libpng's heuristic: smallest sum of |filtered byte| read as signed (abs(-128) wraps, harmless)
        cost = np.stack([np.abs(cands[k].view(np.int8)).sum(axis=1, dtype=np.int64) for k in keys])
        choice = np.argmin(cost, axis=0)
        ft = np.asarray(keys, dtype=np.uint8)[choice]
        stacked = np.stack([cands[k] for k in keys])
        filt = stacked[choice, np.arange(block.shape[0])]
    return np.concatenate([ft[:, None], filt], axis=1)


def encode(
    fh: BinaryIO,
    array: np.ndarray,
    *,
    icc_profile: bytes | None = None,
    text: dict[str, str] | None = None,
    exif: bytes | None = None,
    xmp: bytes | None = None,
    level: int = 1,
    rows_per_block: int = 64,
    filter_type: int | str | None = "auto",
) -> None:
    """Write ``array`` ((H, W) or (H, W, C), C in 1..4, uint8 or uint16) as a PNG to ``fh``;
    ``filter_type`` a PNG filter for every row (0-4), None for the libpng heuristic per row, or
    ``"auto"``: the heuristic for 8-bit images, Sub for 16-bit ones (whose low bytes are noise that
    no filter predicts: the same size within 0.1 %, a fifth of the encode time saved);
    ``exif`` (a TIFF structure, an ``Exif\\0\\0`` prefix dropped) as an ``eXIf`` chunk, ``xmp`` as
    an uncompressed ``iTXt`` chunk keyed ``XML:com.adobe.xmp``."""
    a = np.asarray(array)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in _COLOUR_TYPE or a.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"cannot encode array of shape {a.shape} and type {a.dtype} as PNG")
    h, w, c = a.shape
    depth = 8 if a.dtype == np.uint8 else 16
    bpp = c * depth // 8
    force = (1 if depth == 16 else None) if filter_type == "auto" else filter_type
    if not (force is None or isinstance(force, int)):
        raise ValueError(f"unknown PNG filter {filter_type!r}")
    fh.write(SIGNATURE)
    fh.write(_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, _COLOUR_TYPE[c], 0, 0, 0)))
    if icc_profile:
        fh.write(_chunk(b"iCCP", b"ICC Profile\0\0" + zlib.compress(icc_profile)))
    for key, value in (text or {}).items():
        fh.write(_chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1")))
    if exif:
        fh.write(_chunk(b"eXIf", exif[6:] if exif.startswith(b"Exif\0\0") else exif))
    if xmp:
        fh.write(_chunk(b"iTXt", XMP_KEY + b"\0\0\0\0\0" + bytes(xmp)))
    def raw_rows(r0: int, r1: int) -> np.ndarray:
        blk = a[r0:r1]
        if depth == 16:
            blk = blk.astype(">u2")
        return np.ascontiguousarray(blk).view(np.uint8).reshape(r1 - r0, w * bpp)

    # The image in segments of a fixed number of rows (a function of the image alone, so the file
    # is the same whatever the number of threads); each segment is filtered (its row above is
    # the previous segment's last row) and deflated on its own, ending on a byte boundary
    # (Z_SYNC_FLUSH), the last one finishing the stream: their concatenation is one deflate
    # stream, pigz's construction. zlib releases the GIL, so the segments deflate in parallel.
    deflater = deflate_module(level)
    seg_rows = max(rows_per_block, (SEGMENT_BYTES // max(1, w * bpp + 1)) // rows_per_block * rows_per_block)
    starts = list(range(0, h, seg_rows))

    def segment(i: int) -> tuple[bytes, int, int]:
        r0, r1 = starts[i], min(h, starts[i] + seg_rows)
        prev = raw_rows(r0 - 1, r0)[0] if r0 else np.zeros(w * bpp, dtype=np.uint8)
        comp = deflater.compressobj(level, zlib.DEFLATED, -15)
        out, adler, n = [], 1, 0
        for b0 in range(r0, r1, rows_per_block):
            rows = raw_rows(b0, min(r1, b0 + rows_per_block))
            data = _filter_block(rows, prev, bpp, force).tobytes()
            adler, n = zlib.adler32(data, adler), n + len(data)
            out.append(comp.compress(data))
            prev = rows[-1]
        out.append(comp.flush(zlib.Z_FINISH if i == len(starts) - 1 else zlib.Z_SYNC_FLUSH))
        return b"".join(out), adler, n

    parts = thread_map(segment, range(len(starts)), deflate_threads())
    adler = 1
    for _, seg_adler, n in parts:
        adler = adler32_combine(adler, seg_adler, n)
    stream = b"\x78\x01" + b"".join(p for p, _, _ in parts) + struct.pack(">I", adler)
    for i in range(0, len(stream), IDAT_BYTES):
        fh.write(_chunk(b"IDAT", stream[i:i + IDAT_BYTES]))
    fh.write(_chunk(b"IEND", b""))


def deflate_module(level: int) -> Any:
    """The deflate to compress at ``level`` with: ISA-L's (``isal_zlib``, levels 0-3) where
    installed, else zlib's; both write standard zlib / deflate streams."""
    return isal_zlib if isal_zlib is not None and level <= isal_zlib.ISAL_BEST_COMPRESSION else zlib


def inflate_module() -> Any:
    """The inflate to read zlib / deflate streams with: ISA-L's where installed, else zlib's."""
    return isal_zlib if isal_zlib is not None else zlib


def deflate_threads() -> int:
    """Threads that deflate segments at once: the CPUs this process may use, at most
    :data:`MAX_DEFLATE_THREADS` (the output does not depend on it)."""
    return min(MAX_DEFLATE_THREADS, usable_cpus())


def adler32_combine(adler1: int, adler2: int, len2: int) -> int:
    """The Adler-32 of two byte strings one after the other, from each one's checksum and the
    second one's length (zlib's ``adler32_combine``, which Python's zlib does not expose)."""
    base = 65521
    rem = len2 % base
    sum1 = adler1 & 0xFFFF
    sum2 = (rem * sum1) % base
    sum1 += (adler2 & 0xFFFF) + base - 1
    sum2 += (adler1 >> 16) + (adler2 >> 16) + base - rem
    sum1 %= base
    sum2 %= base
    return sum1 | (sum2 << 16)
