"""A small TIFF codec (numpy + zlib) for the TIFFs Pillow cannot hold without loss.

Pillow has no 16-bit-per-sample RGB(A) mode and reads float16 TIFFs not at all, so gsprestore:

* parses the first image file directory itself (:func:`read_ifd`): size, bits and sample format
  per sample, photometric interpretation, compression, predictor, strips or tiles, extra
  samples (alpha), ICC profile (tag 34675);
* decodes (:func:`decode`) 8/16/32-bit unsigned and 16/32/64-bit float samples, chunky or planar,
  in strips or tiles, uncompressed / Deflate / PackBits / LZW, with horizontal (2) or
  floating-point (3) predictor, each strip or tile inflated to no more than its declared size
  needs (a decompression bomb is refused); :mod:`gsprestore.imageio.images` sends 8-bit and 16-bit single-channel files
  to Pillow (faster, more compressions) and everything else here;
* reports the Orientation tag and the number of pages (only the first is decoded);
* encodes (:func:`encode`) little-endian baseline TIFF with Deflate compression (level 1, ISA-L's
  deflate where installed, the strips deflated in parallel), horizontal predictor for integer
  samples, unassociated alpha as an extra sample, and the ICC profile.

Why not tifffile: measured again (issue 38, ``lab/research/image_codecs.py``; docs/architecture.md,
"Libraries") on a 3000x2000 16-bit RGB Deflate TIFF, tifffile 2026.3 alone reads (0.60 s against
0.60-0.63 s) and writes (5.0 s against 5.2-5.4 s) at our speed, but cannot read or write LZW, the
most common TIFF compression, nor the floating-point predictor, and inflates a strip whole (a
256 MiB bomb: 549 MB); with the compiled ``imagecodecs`` it does all of that and is 2-3.5x faster,
but that package is 82 MB of native code (not a dependency). The tests use tifffile to make TIFFs
this codec did not write.

Errors are :class:`ValueError` with a short reason; :mod:`gsprestore.imageio.images` adds the file name.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

# TIFF field types -> (struct code, size)
_TYPES = {1: ("B", 1), 2: ("c", 1), 3: ("H", 2), 4: ("I", 4), 5: ("II", 8), 6: ("b", 1), 7: ("B", 1),
          8: ("h", 2), 9: ("i", 4), 10: ("ii", 8), 11: ("f", 4), 12: ("d", 8), 13: ("I", 4)}

_ARRAY_TYPES = {1: "u1", 3: "u2", 4: "u4", 6: "i1", 8: "i2", 9: "i4", 11: "f4", 12: "f8", 13: "u4"}

WIDTH, HEIGHT, BITS, COMPRESSION, PHOTOMETRIC = 256, 257, 258, 259, 262
STRIP_OFFSETS, SAMPLES, ROWS_PER_STRIP, STRIP_COUNTS, PLANAR = 273, 277, 278, 279, 284
PREDICTOR, TILE_WIDTH, TILE_LENGTH, TILE_OFFSETS, TILE_COUNTS = 317, 322, 323, 324, 325
EXTRA_SAMPLES, SAMPLE_FORMAT, ICC = 338, 339, 34675
ORIENTATION, SOFTWARE = 274, 305
MAX_PAGES_COUNTED = 1024  # count_pages stops here (and on a loop of directory offsets)


@dataclass
class TiffInfo:
    """The first image of a TIFF file, as described by its IFD."""

    width: int
    height: int
    samples: int
    bits: int
    sample_format: int  # 1 unsigned integer, 2 signed integer, 3 float
    photometric: int
    compression: int
    predictor: int
    planar: int
    extra_samples: tuple[int, ...]
    icc_profile: bytes | None
    tags: dict[int, tuple]
    byteorder: str
    orientation: int = 1  # tag 274: 1 = rows top to bottom, columns left to right (as stored)
    pages: int = 1  # image file directories in the file (only the first is read)

    @property
    def dtype(self) -> np.dtype:
        kind = {1: "u", 2: "i", 3: "f"}.get(self.sample_format, "?")
        return np.dtype(f"{self.byteorder}{kind}{self.bits // 8}")


def read_ifd(data: bytes) -> TiffInfo:
    """Parse the TIFF header and first IFD of ``data``."""
    if data[:4] == b"II*\0":
        bo = "<"
    elif data[:4] == b"MM\0*":
        bo = ">"
    elif data[:2] in (b"II", b"MM") and len(data) >= 4 and data[2:4] in (b"+\0", b"\0+"):
        raise ValueError("unsupported TIFF (BigTIFF)")
    else:
        raise ValueError("not a TIFF file (bad header)")
    if len(data) < 8:
        raise ValueError("truncated TIFF (header cut short)")
    (ifd,) = struct.unpack(bo + "I", data[4:8])
    if ifd + 2 > len(data) or ifd < 8:
        raise ValueError("truncated TIFF (image directory missing)")
    (count,) = struct.unpack(bo + "H", data[ifd : ifd + 2])
    if ifd + 2 + 12 * count > len(data):
        raise ValueError("truncated TIFF (image directory cut short)")
    tags: dict[int, tuple] = {}
    for k in range(count):
        tag, typ, n, raw = struct.unpack(bo + "HHI4s", data[ifd + 2 + 12 * k : ifd + 14 + 12 * k])
        if typ not in _TYPES:
            continue
        code, size = _TYPES[typ]
        total = size * n
        if total <= 4:
            blob = raw[:total]
        else:
            (off,) = struct.unpack(bo + "I", raw)
            if off + total > len(data):
                raise ValueError(f"truncated TIFF (value of tag {tag} outside the file)")
            blob = data[off : off + total]
        if typ in (2, 7):
            tags[tag] = (bytes(blob),)
        elif n > 16 and typ in _ARRAY_TYPES:  # strip / tile offsets: an array, not a tuple of Python ints
            tags[tag] = np.frombuffer(blob, dtype=np.dtype(_ARRAY_TYPES[typ]).newbyteorder(bo))
        else:
            tags[tag] = struct.unpack(bo + code * n, blob)

    def one(tag: int, default: int | None = None) -> int:
        if tag in tags:
            return int(tags[tag][0])
        if default is None:
            raise ValueError(f"corrupt TIFF (required tag {tag} missing)")
        return default

    samples = one(SAMPLES, 1)
    bits = tags.get(BITS, (1,))
    fmt = tags.get(SAMPLE_FORMAT, (1,))
    if len(set(bits)) != 1 or len(set(fmt)) != 1:
        raise ValueError("unsupported TIFF (samples of different sizes or types)")
    icc = tags.get(ICC, (None,))[0]
    info = TiffInfo(
        width=one(WIDTH), height=one(HEIGHT), samples=samples, bits=int(bits[0]), sample_format=int(fmt[0]),
        photometric=one(PHOTOMETRIC, 1), compression=one(COMPRESSION, 1), predictor=one(PREDICTOR, 1),
        planar=one(PLANAR, 1), extra_samples=tuple(int(v) for v in tags.get(EXTRA_SAMPLES, ())),
        icc_profile=icc if isinstance(icc, bytes) else None, tags=tags, byteorder=bo,
        orientation=one(ORIENTATION, 1) if one(ORIENTATION, 1) in range(1, 9) else 1,
        pages=count_pages(data, ifd, bo),
    )
    check_layout(data, info)
    return info


@dataclass(frozen=True)
class Layout:
    """How the first image's data is cut: ``count`` strips or tiles of ``rows`` x ``cols`` pixels
    (``across`` per row of tiles; strips: ``across`` = 1, ``cols`` = width) per plane."""

    tiled: bool
    rows: int
    cols: int
    across: int
    down: int
    planes: int

    @property
    def count(self) -> int:
        return self.across * self.down * self.planes


def layout(info: TiffInfo) -> Layout:
    """The strip or tile grid the header declares (computed, nothing allocated)."""
    w, h, tags = info.width, info.height, info.tags
    planes = info.samples if info.planar == 2 else 1
    if TILE_OFFSETS in tags:
        if TILE_WIDTH not in tags or TILE_LENGTH not in tags:
            raise ValueError("corrupt TIFF (tile offsets without a tile size)")
        tw, tl = int(tags[TILE_WIDTH][0]), int(tags[TILE_LENGTH][0])
        if tw <= 0 or tl <= 0 or tw % 16 or tl % 16:
            raise ValueError(f"unsupported TIFF ({tw}x{tl} tiles; TIFF tiles are multiples of 16 pixels)")
        return Layout(True, tl, tw, -(-w // tw), -(-h // tl), planes)
    if STRIP_OFFSETS in tags:
        rps = max(1, min(int(tags.get(ROWS_PER_STRIP, (h,))[0]), h))
        return Layout(False, rps, w, 1, -(-h // rps), planes)
    raise ValueError("corrupt TIFF (no strip or tile offsets)")


def check_layout(data: bytes, info: TiffInfo) -> None:
    """Refuse, before any decoder allocates the image, a TIFF whose strips or tiles do not cover
    its declared size: fewer offsets or byte counts than the grid needs, or data outside the file
    (a truncated file, or a tiny file declaring a huge image). Every reader goes through this,
    the Pillow path included (libtiff would fill what is missing with zeros)."""
    if info.width <= 0 or info.height <= 0:
        raise ValueError("corrupt TIFF (zero width or height)")
    grid = layout(info)
    offsets = info.tags[TILE_OFFSETS if grid.tiled else STRIP_OFFSETS]
    counts = info.tags.get(TILE_COUNTS if grid.tiled else STRIP_COUNTS, ())
    what = "tile" if grid.tiled else "strip"
    if len(offsets) < grid.count or len(counts) < grid.count:
        raise ValueError(f"truncated TIFF ({min(len(offsets), len(counts))} {what} offsets for the {grid.count} "
                         f"{what}s of a {info.width}x{info.height} image)")
    ends = np.asarray(offsets[: grid.count], dtype=np.int64) + np.asarray(counts[: grid.count], dtype=np.int64)
    if grid.count and int(ends.max()) > len(data):
        raise ValueError("truncated TIFF (image data cut short)")


def count_pages(data: bytes, first: int, bo: str) -> int:
    """The number of image file directories chained from the one at ``first`` (bounded, loop-safe)."""
    seen, pos = set(), first
    while 8 <= pos and pos + 2 <= len(data) and pos not in seen and len(seen) < MAX_PAGES_COUNTED:
        seen.add(pos)
        (count,) = struct.unpack(bo + "H", data[pos : pos + 2])
        nxt = pos + 2 + 12 * count
        if nxt + 4 > len(data):
            break
        (pos,) = struct.unpack(bo + "I", data[nxt : nxt + 4])
    return max(1, len(seen))


def _lzw_decode(src: bytes, limit: int | None = None) -> bytes:
    """TIFF LZW (MSB-first codes of 9-12 bits, 'early change'), pure Python; stops after ``limit``
    bytes (what the strip or tile needs)."""
    out = bytearray()
    table: list[bytes] = [bytes([i]) for i in range(256)] + [b"", b""]
    width, bitbuf, nbits, prev = 9, 0, 0, None
    for byte in src:
        bitbuf = (bitbuf << 8) | byte
        nbits += 8
        while nbits >= width:
            nbits -= width
            code = (bitbuf >> nbits) & ((1 << width) - 1)
            bitbuf &= (1 << nbits) - 1
            if code == 256:  # clear
                table = table[:258]
                width, prev = 9, None
                continue
            if code == 257:  # end of information
                return bytes(out)
            if prev is None:
                entry = table[code]
            else:
                if code < len(table):
                    entry = table[code]
                    table.append(prev + entry[:1])
                elif code == len(table):
                    entry = prev + prev[:1]
                    table.append(entry)
                else:
                    raise ValueError("corrupt TIFF (bad LZW code)")
            out += entry
            prev = entry
            if limit is not None and len(out) >= limit:
                return bytes(out[:limit])
            if len(table) + 1 >= (1 << width) and width < 12:
                width += 1
    return bytes(out)


def _packbits_decode(src: bytes, limit: int | None = None) -> bytes:
    """PackBits; stops after ``limit`` bytes (what the strip or tile needs)."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n and (limit is None or len(out) < limit):
        h = src[i]
        i += 1
        if h < 128:
            out += src[i : i + h + 1]
            i += h + 1
        elif h > 128:
            if i < n:
                out += bytes([src[i]]) * (257 - h)
            i += 1
    return bytes(out if limit is None else out[:limit])


def _decompress(chunk: bytes, compression: int, need: int) -> bytes:
    """Decompress one strip or tile, never to more than the ``need`` bytes its declared size
    holds: a strip that would inflate further (a decompression bomb) is refused."""
    if compression == 1:
        return chunk
    if compression in (8, 32946):
        from .png import inflate_module

        inflater = inflate_module()
        d = inflater.decompressobj()
        try:
            out = d.decompress(chunk, need)
            if d.unconsumed_tail and d.decompress(d.unconsumed_tail, 1):
                raise ValueError("corrupt TIFF (a strip inflates to more than its declared size needs; refused "
                                 "as a possible decompression bomb)")
        except (zlib.error, inflater.error):
            raise ValueError("corrupt TIFF (bad Deflate data)") from None
        return out
    if compression == 5:
        return _lzw_decode(chunk, need)
    if compression == 32773:
        return _packbits_decode(chunk, need)
    raise ValueError(f"unsupported TIFF compression {compression}")


def _unpredict(block: np.ndarray, info: TiffInfo, spp: int) -> np.ndarray:
    """Undo the predictor on a (rows, cols, spp) block of raw bytes -> samples of ``info.dtype``."""
    rows, cols = block.shape[:2]
    dt = info.dtype
    if info.predictor == 3:  # floating point: bytes split into planes, then byte-wise differences
        nbytes = dt.itemsize  # each byte is differenced against the byte one pixel (spp bytes) before it (fpDiff)
        b = block.reshape(rows, cols * nbytes, spp)
        b = np.cumsum(b, axis=1, dtype=np.uint8).reshape(rows, cols * spp * nbytes)
        b = b.reshape(rows, nbytes, cols * spp).transpose(0, 2, 1)  # planes are most significant first
        return np.ascontiguousarray(b).view(f">f{nbytes}").reshape(rows, cols, spp)
    samples = np.ascontiguousarray(block).view(dt).reshape(rows, cols, spp)
    if info.predictor == 2:
        if dt.kind == "f":
            raise ValueError("unsupported TIFF (horizontal predictor on float samples)")
        samples = np.cumsum(samples.astype(dt.newbyteorder("=")), axis=1, dtype=dt.newbyteorder("="))
    elif info.predictor != 1:
        raise ValueError(f"unsupported TIFF predictor {info.predictor}")
    return samples


def decode(data: bytes, info: TiffInfo) -> np.ndarray:
    """Decode the first image to a native-byte-order ``(H, W, samples)`` array of ``info.dtype``."""
    if info.bits not in (8, 16, 32, 64) or info.sample_format not in (1, 3):
        raise ValueError(f"unsupported TIFF sample type ({info.bits}-bit, format {info.sample_format})")
    if info.sample_format == 3 and info.bits == 8:
        raise ValueError("unsupported TIFF sample type (8-bit float)")
    if info.photometric not in (0, 1, 2):
        raise ValueError(f"unsupported TIFF photometric interpretation {info.photometric}")
    h, w, spp = info.height, info.width, info.samples
    if w == 0 or h == 0:
        raise ValueError("corrupt TIFF (zero width or height)")
    item = info.bits // 8
    tags = info.tags
    grid = layout(info)  # checked against the file by read_ifd
    planes = grid.planes
    pspp = 1 if info.planar == 2 else spp
    out = np.zeros((planes, h, w, pspp), dtype=info.dtype.newbyteorder("="))
    offsets = tags[TILE_OFFSETS if grid.tiled else STRIP_OFFSETS]
    counts = tags[TILE_COUNTS if grid.tiled else STRIP_COUNTS]
    for k in range(grid.count):
        p, cell = divmod(k, grid.across * grid.down)
        y0, x0 = (cell // grid.across) * grid.rows, (cell % grid.across) * grid.cols
        rows = grid.rows if grid.tiled else min(grid.rows, h - y0)
        cols = grid.cols
        off, cnt = int(offsets[k]), int(counts[k])
        if off + cnt > len(data):
            raise ValueError("truncated TIFF (image data cut short)")
        need = rows * cols * pspp * item
        raw = _decompress(data[off : off + cnt], info.compression, need)
        if len(raw) < need:
            raise ValueError("truncated TIFF (strip or tile has too little data)")
        block = np.frombuffer(raw, dtype=np.uint8, count=need).reshape(rows, cols, pspp * item)
        samples = _unpredict(block, info, pspp)
        hh, ww = min(rows, h - y0), min(cols, w - x0)
        out[p, y0 : y0 + hh, x0 : x0 + ww] = samples[:hh, :ww]
    img = out[0] if planes == 1 else np.concatenate(list(out), axis=2)
    if info.photometric == 0:  # min-is-white
        if img.dtype.kind == "u":
            img = np.iinfo(img.dtype).max - img
        else:
            img = 1.0 - img
    return img


def _entry(tag: int, typ: int, values, bo: str = "<") -> tuple[int, int, int, bytes]:
    if typ in (2, 7) or (typ == 1 and isinstance(values, (bytes, bytearray))):
        blob = bytes(values)
        n = len(blob)
    else:
        values = tuple(values)
        code = _TYPES[typ][0]
        n = len(values) // 2 if typ == 5 else len(values)
        blob = struct.pack(bo + code * len(values) if typ != 5 else bo + "I" * len(values), *values)
    return tag, typ, n, blob


def encode(
    fh: BinaryIO,
    array: np.ndarray,
    *,
    extra_alpha: bool = False,
    icc_profile: bytes | None = None,
    level: int = 1,
    strip_bytes: int = 1 << 18,
    software: str | None = None,
    tags: dict | None = None,
    sub_ifds: dict | None = None,
    xmp: bytes | None = None,
) -> None:
    """Write ``array`` ((H, W) or (H, W, C); uint8, uint16 or float32) as a little-endian TIFF.
    ``extra_alpha`` marks the last channel as unassociated alpha; ``software`` is written as tag 305.
    ``tags``: more IFD0 tags (EXIF's descriptive ones: str, int, rational or bytes values; the
    layout, resolution and software tags are this writer's own); ``sub_ifds``: tag (Exif 34665,
    GPS 34853) -> function of the offset the sub-IFD will sit at, returning its bytes
    (:func:`gsprestore.imageio.metadata.tiff_ifds`); ``xmp``: the XMP packet (tag 700)."""
    a = np.asarray(array)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 2, 3, 4) or a.dtype not in (np.uint8, np.uint16, np.float32):
        raise ValueError(f"cannot encode array of shape {a.shape} and type {a.dtype} as TIFF")
    h, w, c = a.shape
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    item = a.dtype.itemsize
    is_float = a.dtype.kind == "f"
    colour = c - int(extra_alpha)
    rps = max(1, min(h, strip_bytes // max(1, w * c * item)))

    from ..core.process import thread_map
    from .png import deflate_module, deflate_threads

    deflater = deflate_module(level)

    def strip(y0: int) -> bytes:  # strips are independent: deflated in parallel (deflate releases the GIL)
        blk = a[y0 : y0 + rps]
        if not is_float:  # horizontal differencing predictor (2)
            blk = np.diff(blk, axis=1, prepend=np.zeros_like(blk[:, :1]))
        return deflater.compress(np.ascontiguousarray(blk).tobytes(), level)

    strips = thread_map(strip, range(0, h, rps), deflate_threads())
    header = b"II*\0"
    offsets, pos = [], 8
    for s in strips:
        offsets.append(pos)
        pos += len(s)
    entries = [
        _entry(WIDTH, 4, [w]), _entry(HEIGHT, 4, [h]), _entry(BITS, 3, [item * 8] * c),
        _entry(COMPRESSION, 3, [8]), _entry(PHOTOMETRIC, 3, [2 if colour >= 3 else 1]),
        _entry(STRIP_OFFSETS, 4, offsets), _entry(SAMPLES, 3, [c]), _entry(ROWS_PER_STRIP, 4, [rps]),
        _entry(STRIP_COUNTS, 4, [len(s) for s in strips]), _entry(282, 5, [72, 1]), _entry(283, 5, [72, 1]),
        _entry(PLANAR, 3, [1]), _entry(296, 3, [2]),
    ]
    if software:
        entries.append(_entry(SOFTWARE, 2, software.encode("latin-1", "replace") + b"\0"))
    entries.append(_entry(PREDICTOR, 3, [1 if is_float else 2]))
    if extra_alpha or c > colour:
        entries.append(_entry(EXTRA_SAMPLES, 3, [2] * (c - colour)))
    entries.append(_entry(SAMPLE_FORMAT, 3, [3 if is_float else 1] * c))
    if icc_profile:
        entries.append(_entry(ICC, 7, icc_profile))
    if xmp:
        entries.append(_entry(700, 1, xmp))  # XMP: BYTE
    own = {e[0] for e in entries}
    entries += [e for e in (_metadata_entry(tag, value) for tag, value in (tags or {}).items()
                            if tag not in own and tag not in _OWN_TAGS) if e is not None]
    subs = dict(sub_ifds or {})
    if pos % 2:
        pos += 1
    ifd_at = pos

    def layout(sub_at: dict[int, int]) -> tuple[bytes, bytes]:
        rows = sorted(entries + [_entry(tag, 4, [sub_at.get(tag, 0)]) for tag in subs], key=lambda e: e[0])
        values_at = ifd_at + 2 + 12 * len(rows) + 4
        ifd = struct.pack("<H", len(rows))
        extra = b""
        for tag, typ, n, blob in rows:
            if len(blob) <= 4:
                ifd += struct.pack("<HHI", tag, typ, n) + blob.ljust(4, b"\0")
            else:
                if (values_at + len(extra)) % 2:
                    extra += b"\0"
                ifd += struct.pack("<HHII", tag, typ, n, values_at + len(extra))
                extra += blob
        return ifd + struct.pack("<I", 0), extra

    ifd, extra = layout({})
    tail, sub_at = b"", {}
    for tag, serialise in sorted(subs.items()):  # each sub-IFD after IFD0's values, word-aligned
        at = ifd_at + len(ifd) + len(extra) + len(tail)
        if at % 2:
            tail += b"\0"
            at += 1
        sub_at[tag] = at
        tail += serialise(at)
    if subs:
        ifd, extra = layout(sub_at)  # the same length: only the pointers change
    fh.write(header + struct.pack("<I", ifd_at))
    for s in strips:
        fh.write(s)
    if (8 + sum(len(s) for s in strips)) % 2:
        fh.write(b"\0")
    fh.write(ifd + extra + tail)


#: IFD0 tags :func:`encode` writes itself (layout, resolution, software): never taken from ``tags``.
_OWN_TAGS = frozenset({254, 256, 257, 258, 259, 262, 273, 277, 278, 279, 282, 283, 284, 296, 305, 317, 338, 339,
                       700, 34665, 34853, 34675})


def _metadata_entry(tag: int, value) -> tuple[int, int, int, bytes] | None:
    """An IFD entry for an EXIF value as Pillow gives it (str, int, rational, bytes, tuples of
    ints), or None for what this writer does not take."""
    if isinstance(value, str):
        return _entry(tag, 2, value.encode("utf-8", "replace") + b"\0")
    if isinstance(value, (bytes, bytearray)):
        return _entry(tag, 1 if 0x9C9B <= tag <= 0x9C9F else 7, bytes(value))  # Windows XP tags: BYTE
    if hasattr(value, "numerator") and hasattr(value, "denominator") and not isinstance(value, int):
        num, den = int(value.numerator), int(value.denominator)
        return _entry(tag, 5, [num, den]) if num >= 0 and den > 0 else None
    values = value if isinstance(value, tuple) else (value,)
    if values and all(isinstance(v, int) and 0 <= v < 1 << 32 for v in values):
        return _entry(tag, 3 if max(values) < 1 << 16 else 4, list(values))
    return None
