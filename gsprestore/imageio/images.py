"""Images in and out: 8/16-bit PNG and TIFF, 8-bit JPEG and WebP, alpha and ICC profile kept,
atomic writes.

* :func:`read_image` returns an :class:`Image`: float32 ``(H, W, C)`` pixels in [0, 1], the bit
  depth *of the file* (8, 16, or 32 for float TIFF; never guessed from pixel values), alpha kept
  apart, ICC profile. The format is recognised from the file's first bytes, not its name.
* :func:`write_image` writes 8/16-bit PNG or 8/16-bit/float TIFF atomically (temp file in the same
  folder + ``os.replace``) and refuses to overwrite an existing file unless ``overwrite=True``.

Pillow truncates 16-bit RGB(A) PNGs and TIFFs to 8 bits (and imageio's Pillow plugin with it), so
16-bit PNGs are decoded by :mod:`gsprestore.imageio.png`, every PNG is encoded by it, and TIFFs that
Pillow cannot hold (16-bit with more than one sample, float) go through :mod:`gsprestore.imageio.tiff`.
8-bit files and 16-bit gray TIFFs are decoded by Pillow (fast, every compression).

JPEG and WebP (8-bit, lossy) are decoded and encoded by Pillow (CMYK converted to RGB);
``write_image(..., quality=Q)`` sets the encoder's quality (default 95).

**Orientation.** Pixels are returned *as stored* (sensor order, the order a Bayer pattern refers
to) for every format and bit depth; the file's Orientation (TIFF tag 274, the EXIF of a JPEG, a
WebP or a PNG's ``eXIf`` chunk) is in ``Image.meta["orientation"]`` and :func:`apply_orientation`
turns stored order into display order (the CLI applies it to its outputs). Pillow's own rotation of 8/16-bit TIFFs on open is undone.
A MinIsWhite TIFF is inverted at every bit depth. A multi-page TIFF is read from its first page,
an animated PNG or WebP from its first frame; ``Image.meta["pages"]`` says how many there are and
:func:`frames_note` says so in one line.

**What is written is true of the pixels.** :func:`write_image` writes an ICC profile only where its
colour space (header bytes 16-20) describes the pixels written (``RGB`` on RGB, ``GRAY`` on one
channel: never a CMYK JPEG's profile on its RGB pixels, :func:`icc_mismatch`), and says so through
``notice`` when it leaves one out, or when a JPEG output drops a transparency (JPEG has no alpha).

**Bounded work.** A header whose image would not fit in the available memory (with what the
caller will need after reading it, ``read_image(..., reserve=)``) is refused before decoding, and
compressed data never inflates to more than the declared size needs (see :mod:`gsprestore.imageio.png`,
:mod:`gsprestore.imageio.tiff`): a decompression bomb costs one line. Data that cannot cover the
declared size is an error, never a picture filled in: a TIFF's strips or tiles must cover the
image (:func:`gsprestore.imageio.tiff.check_layout`), and a JPEG needs data for every block of its
declared size (:func:`gsprestore.imageio.jpeg_header.checked_data`). Only regular files are opened (a
FIFO or ``/dev/zero`` is refused, :func:`existing_file`).

Every problem with a file is a :class:`~gsprestore.core.errors.GspError` naming the file and the reason
on one line: missing, empty, not an image, truncated, corrupt, too small, NaN/Inf samples.
"""

from __future__ import annotations

import io as _io
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import jpeg_header as jpegcheck, png as pngcodec, tiff as tiffcodec
from . import metadata as _md
from ..core.atomic import UMASK, create_exclusive, temp_name
from ..core.errors import GspError
from .openers import MAX_PIXELS, pillow  # noqa: F401 - both also part of this module's interface

if TYPE_CHECKING:  # pragma: no cover
    from .metadata import Metadata

IMAGE_SUFFIXES = (".png", ".tif", ".tiff", ".jpg", ".jpeg", ".webp")  # written, and picked out of folders
PHOTO_FORMATS = ("jpeg", "webp")  # 8-bit lossy formats, through Pillow
DEFAULT_QUALITY = 95
MIN_SIDE = 2


@dataclass
class Image:
    """Decoded image: ``array`` float32 (H, W, C) in [0, 1] (C = 1 or 3); ``alpha`` (H, W) or None;
    ``bit_depth`` of the file (8, 16, or 32 for float TIFF); ``format`` "png" or "tiff"."""

    array: np.ndarray
    bit_depth: int = 8
    alpha: np.ndarray | None = None
    icc_profile: bytes | None = None
    path: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def channels(self) -> int:
        return self.array.shape[2]

    @property
    def height(self) -> int:
        return self.array.shape[0]

    @property
    def width(self) -> int:
        return self.array.shape[1]


def is_image_name(path: str | Path) -> bool:
    """True if the file name has a PNG/TIFF suffix (used to pick files out of folders)."""
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def sniff(data: bytes) -> str | None:
    """The format of a file from its first bytes: "png", "tiff", "jpeg", "webp" or None."""
    if data.startswith(pngcodec.SIGNATURE):
        return "png"
    if data[:4] in (b"II*\0", b"MM\0*") or data[:4] in (b"II+\0", b"MM\0+"):
        return "tiff"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


_OTHER_FORMATS = ((b"GIF8", "GIF"), (b"BM", "BMP"), (b"\0\0\0\x0cjP", "JPEG 2000"),
                  (b"8BPS", "Photoshop PSD"))


def _other_format(data: bytes) -> str | None:
    """The name of a known image format gsprestore does not read, from its first bytes."""
    for magic, name in _OTHER_FORMATS:
        if data.startswith(magic) and (name != "WebP" or data[8:12] == b"WEBP"):
            return name
    if data[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1", b"ftypavif"):
        return "HEIF/AVIF"
    return None


# Orientation (TIFF tag 274 / EXIF) -> stored-to-display transform of an (H, W, ...) array
_ORIENT = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.swapaxes(0, 1),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: a[::-1, ::-1].swapaxes(0, 1),
    8: lambda a: np.rot90(a, 1),
}
_INVERSE = {6: 8, 8: 6}


def apply_orientation(array: np.ndarray, orientation: int, *, inverse: bool = False) -> np.ndarray:
    """Stored order -> display order of an ``(H, W[, C])`` array for a TIFF/EXIF Orientation value
    (1..8; anything else is taken as 1); ``inverse`` goes back. Returns a contiguous array."""
    o = orientation if orientation in _ORIENT else 1
    if inverse:
        o = _INVERSE.get(o, o)
    return np.ascontiguousarray(_ORIENT[o](array))


def _from_pillow(data: bytes, orientation: int = 1, meta: dict | None = None,
                 check: Callable[[int, int, int, int], None] | None = None) -> np.ndarray:
    """Decode with Pillow, in stored order: a TIFF that Pillow rotated on open (its Orientation
    ``orientation``) is turned back. For a JPEG / WebP, ``meta`` gets the EXIF orientation and
    the number of frames (an animated WebP), and ``check`` (width, height, channels, bytes per
    sample) sees the header before anything is decoded."""
    from PIL import Image as PILImage

    PILImage.MAX_IMAGE_PIXELS = MAX_PIXELS  # our own limit, checked on the header before this
    with PILImage.open(_io.BytesIO(data)) as im:
        if meta is not None:  # JPEG / WebP: its header is only known to Pillow
            _check_pixels(*im.size)
            if check is not None:
                check(im.size[0], im.size[1], max(3, len(im.getbands())), 1)
            meta["orientation"] = _md.orientation_value(im.getexif().get(_md.ORIENTATION))
            meta["pages"] = int(getattr(im, "n_frames", 1) or 1)
        im.load()
        undo = orientation != 1 and im.getexif().get(0x0112, 1) in (None, 1)  # Pillow applied it
        mode = im.mode
        if mode == "P" or mode == "PA":
            im = im.convert("RGBA" if ("transparency" in im.info or mode == "PA") else "RGB")
        elif mode == "1":
            im = im.convert("L")
        elif mode in ("CMYK", "YCbCr", "LAB", "HSV"):
            if mode in ("YCbCr", "CMYK"):
                im = im.convert("RGB")
            else:
                raise ValueError(f"unsupported colour space {mode}")
        elif mode not in ("L", "LA", "RGB", "RGBA", "I;16", "I;16B", "I;16L"):
            raise ValueError(f"unsupported image mode {mode}")
        arr = np.asarray(im)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if undo:
        arr = apply_orientation(arr, orientation, inverse=True)
    return arr


def _check_pixels(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise ValueError(f"unsupported image size {width}x{height} (more than {MAX_PIXELS // 2**20} megapixels)")


#: Bytes the caller needs beyond the decoded float32 image, given its (height, width, channels):
#: what it will do with the image (see :func:`gsprestore.runtime.tiling.job_bytes`).
Reserve = Callable[[int, int, int], int]


def _check_memory(width: int, height: int, channels: int, bytes_per_sample: int, extra: int = 0,
                  reserve: Reserve | None = None) -> None:
    """Refuse, before decoding, an image whose decoding (the file's bytes ``extra``, the decoded
    samples and their float32 copy) and what the caller then needs (``reserve``) would not fit in
    the available memory; the message gives both numbers."""
    from ..core.memory import available_memory, gib

    need = extra + width * height * channels * (bytes_per_sample + 4)
    job = reserve(height, width, channels) if reserve is not None else 0
    have = available_memory()
    if need + job > have:
        then = "" if reserve is None else " and work on it"
        raise GspError(f"not enough memory to read the {width}x{height} image{then} (about {gib(need + job)} "
                       f"needed, {gib(have)} available)")


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text


def _decode(data: bytes, path: Path, reserve: Reserve | None = None) -> tuple[np.ndarray, int, bytes | None, dict]:
    """Decode file bytes -> (integer or float array (H, W[, C]), file bit depth, ICC, meta); the
    header's size is checked against the available memory first (with ``reserve``)."""
    fmt = sniff(data)
    if fmt is None:
        other = _other_format(data)
        if other is not None:
            raise GspError(f"unsupported format {other} (gsprestore reads PNG, TIFF, JPEG and WebP; convert it "
                           "first)", path)
        kind = Path(path).suffix.lower().lstrip(".").upper() or "PNG or TIFF"
        kind = {"TIF": "TIFF", "JPG": "JPEG"}.get(kind, kind)
        raise GspError(f"not a {kind} image (the file content is not an image)", path)
    meta: dict = {"format": fmt, "orientation": 1, "pages": 1}

    def check(width: int, height: int, channels: int, bytes_per_sample: int) -> None:
        _check_memory(width, height, channels, bytes_per_sample, len(data), reserve)

    try:
        if fmt in PHOTO_FORMATS:
            decoded = jpegcheck.checked_data(data) if fmt == "jpeg" else data
            arr, depth, icc = _from_pillow(decoded, meta=meta, check=check), 8, _pillow_icc(data)
        elif fmt == "png":
            info = pngcodec.read_chunks(data)
            _check_pixels(info.width, info.height)
            check(info.width, info.height, info.channels, max(1, info.bit_depth // 8))
            meta["text"], meta["pages"] = info.text, info.frames
            icc = info.icc_profile
            if info.bit_depth == 16:
                arr = pngcodec.decode(info)
                depth = 16
            else:
                arr = _from_pillow(data)
                depth = 8
        else:
            info = tiffcodec.read_ifd(data)
            _check_pixels(info.width, info.height)
            check(info.width, info.height, info.samples, max(1, info.bits // 8))
            icc = info.icc_profile
            meta["orientation"], meta["pages"] = info.orientation, info.pages
            if info.sample_format == 1 and info.bits == 8:
                arr, depth = _from_pillow(data, info.orientation), 8
            elif info.sample_format == 1 and info.bits == 16 and info.samples == 1 and info.photometric == 1:
                arr, depth = _from_pillow(data, info.orientation), 16
            elif info.sample_format == 1 and info.bits == 16:
                arr, depth = tiffcodec.decode(data, info), 16
            elif info.sample_format == 3:
                arr, depth = tiffcodec.decode(data, info), 32
            else:
                kind = {1: "unsigned", 2: "signed", 3: "float"}.get(info.sample_format, "unknown")
                raise ValueError(f"unsupported TIFF samples ({info.bits}-bit {kind}); use 8/16-bit or float")
        meta["metadata"] = _md.read_metadata(data, fmt, png=info if fmt == "png" else None)
        if fmt == "png":  # its eXIf chunk's Orientation, turned like a JPEG's (Pillow never turns a PNG)
            meta["orientation"] = _md.orientation_value(meta["metadata"].ifd0.get(_md.ORIENTATION))
    except GspError as exc:
        if exc.path is None:
            raise GspError(exc.reason, path) from None
        raise
    except MemoryError:
        raise GspError("not enough memory to decode the image", path) from None
    except Exception as exc:  # codecs and Pillow raise many types for corrupt files
        reason = _reason(exc)
        if fmt == "jpeg" and reason.startswith("image file is truncated"):  # Pillow's words, about our slack
            reason = "truncated JPEG (the image data ends before the last block of the picture)"
        if not reason.startswith(("corrupt", "truncated", "unsupported", "not a")):
            kind = "truncated" if "truncated" in reason.lower() else "corrupt"
            reason = f"{kind} {fmt.upper()} ({reason})"
        raise GspError(reason, path) from None
    return arr, depth, icc, meta


def tool_tag(path: str | Path) -> str | None:
    """The ``Software`` tag of a PNG (a ``tEXt`` chunk before the image data), TIFF (tag 305) or
    JPEG / WebP (EXIF),
    read from the file's header only (cheap enough for every file of a folder); None if absent
    or unreadable. gsprestore writes ``gsprestore COMMAND`` there (:data:`TOOL_TAG`)."""
    import struct

    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if head == pngcodec.SIGNATURE:
                for _ in range(64):
                    length, ctype = struct.unpack(">I4s", fh.read(8))
                    if ctype in (b"IDAT", b"IEND") or length > 1 << 20:
                        return None
                    body = fh.read(length)
                    fh.seek(4, 1)
                    if ctype == b"tEXt":
                        key, _, value = body.partition(b"\0")
                        if key == b"Software":
                            return value.decode("latin-1")
                return None
            if head[:4] in (b"II*\0", b"MM\0*"):
                bo = "<" if head[:2] == b"II" else ">"
                (ifd,) = struct.unpack(bo + "I", head[4:8])
                fh.seek(ifd)
                (count,) = struct.unpack(bo + "H", fh.read(2))
                for _ in range(min(count, 4096)):
                    tag, typ, n, raw = struct.unpack(bo + "HHI4s", fh.read(12))
                    if tag == 305 and typ == 2:
                        if n > 4:
                            fh.seek(struct.unpack(bo + "I", raw)[0])
                            raw = fh.read(min(n, 4096))
                        return raw[:n].rstrip(b"\0").decode("latin-1")
                return None
            if head[:3] == b"\xff\xd8\xff" or (head[:4] == b"RIFF"):  # JPEG / WebP: EXIF via Pillow
                PILImage = pillow()

                with _md.quiet(), PILImage.open(path) as im:  # no Pillow warning about a damaged EXIF
                    value = im.getexif().get(0x0131)
                return value if isinstance(value, str) else None
    except (OSError, struct.error, ValueError):
        return None
    except Exception:  # noqa: BLE001 - Pillow's errors on a damaged header: no tag
        return None
    return None


TOOL_TAG = "gsprestore {command}"  # the Software tag of every output of a command


#: The colour channels of the pixels an ICC profile describes, by its data colour space (header
#: bytes 16-20); any other space (CMYK, Lab, ...) describes none that gsprestore writes.
ICC_CHANNELS = {b"GRAY": 1, b"RGB ": 3}


def icc_space(icc: bytes | None) -> str:
    """The data colour space an ICC profile's header names (``RGB``, ``GRAY``, ``CMYK``, ``Lab``...),
    or ``unknown`` for bytes too short to hold one or naming none."""
    raw = bytes(icc or b"")[16:20]
    name = raw.decode("latin-1").strip(" \0")
    return name if len(raw) == 4 and name.isascii() and name.isalnum() else "unknown"


def icc_mismatch(icc: bytes | None, channels: int) -> str | None:
    """Why the ICC profile ``icc`` cannot be written with pixels of ``channels`` colour channels
    (1 gray, 3 RGB; alpha apart), or None when it describes them (or there is none)."""
    if not icc or ICC_CHANNELS.get(bytes(icc[16:20])) == channels:
        return None
    return f"it describes {icc_space(icc)} data and the pixels written are {'gray' if channels == 1 else 'RGB'}"


def icc_name(icc: bytes | None) -> str | None:
    """An ICC profile's description ("Display P3", "sRGB IEC61966-2.1"), or None if unreadable."""
    if not icc:
        return None
    try:
        from PIL import ImageCms

        name = ImageCms.ImageCmsProfile(_io.BytesIO(icc)).profile.profile_description
    except Exception:  # noqa: BLE001 - no littlecms, or a damaged profile: no name
        return None
    name = " ".join(str(name or "").split())
    return name[:80] or None


#: Said when a JPEG output leaves out a transparency (JPEG has no alpha channel).
JPEG_ALPHA_NOTE = ("JPEG has no alpha channel: the transparency is dropped (the colours are written as they are, "
                   "not composited onto a background); write .png, .tif or .webp to keep it")


def _pillow_icc(data: bytes) -> bytes | None:
    PILImage = pillow()

    with PILImage.open(_io.BytesIO(data)) as im:
        return im.info.get("icc_profile") or None


_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def existing_file(path: str | Path, what: str = "an image") -> Path:
    """``path`` as a Path, checked, before anything opens it, to be an existing regular file (a
    link to one is fine): a folder, a FIFO (whose open would wait for a writer for ever), a device
    (``/dev/zero`` never ends) or a socket is a one-line :class:`GspError`."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise GspError("no such file", path) from None
    except OSError as exc:
        raise GspError(f"cannot read file ({exc.strerror or exc})", path) from None
    if stat.S_ISDIR(mode):
        raise GspError(f"is a folder, not {what}", path)
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
        raise GspError(f"is {kind}, not {what} (only regular files are read)", path)
    return path


def read_image(path: str | Path, *, reserve: Reserve | None = None) -> Image:
    """Read a PNG, TIFF, JPEG or WebP. Raises :class:`GspError` naming the file on any problem.
    ``reserve(height, width, channels)``: the bytes the caller will need beyond the decoded image
    (e.g. to restore and write it, :func:`gsprestore.runtime.tiling.job_bytes`); the header's size is
    refused before decoding when reading and that would not fit in the available memory."""
    path = existing_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GspError(f"cannot read file ({exc.strerror or exc})", path) from None
    if not data:
        raise GspError("empty file (0 bytes)", path)
    with _md.quiet() as caught:  # Pillow's warnings (a damaged EXIF) become notes, one line each
        arr, depth, icc, meta = _decode(data, path, reserve)
    meta["notes"] = caught
    del data
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 2, 3, 4):
        raise GspError(f"unsupported image shape {arr.shape}", path)
    h, w = arr.shape[:2]
    if h < MIN_SIDE or w < MIN_SIDE:
        raise GspError(f"image too small ({w}x{h}); at least {MIN_SIDE}x{MIN_SIDE} pixels needed", path)
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise GspError("image contains NaN or Inf samples", path)
        data_f = arr.astype(np.float32)
    elif arr.dtype == np.uint8:
        data_f = arr.astype(np.float32) / np.float32(255.0)
    elif arr.dtype == np.uint16:
        data_f = arr.astype(np.float32) / np.float32(65535.0)
    else:
        raise GspError(f"unsupported pixel type {arr.dtype}", path)
    alpha = None
    if data_f.shape[2] in (2, 4):
        alpha = np.ascontiguousarray(data_f[:, :, -1])
        data_f = data_f[:, :, :-1]
    return Image(array=np.ascontiguousarray(data_f), bit_depth=depth, alpha=alpha, icc_profile=icc,
                 path=str(path), meta=meta)


def frames_note(image: Image) -> str | None:
    """The one-line note for a file holding more than the one picture that is read (a multi-page
    TIFF, an animated PNG or WebP), or None."""
    n = int(image.meta.get("pages", 1))
    if n <= 1:
        return None
    if image.meta.get("format") == "tiff":
        return f"multi-page TIFF ({n} pages); only page one is read"
    return f"animated {str(image.meta.get('format', '')).upper()} ({n} frames); only the first frame is read"


def to_integer(array: np.ndarray, bit_depth: int) -> np.ndarray:
    """Clip float [0, 1] and round to uint8 / uint16."""
    if bit_depth == 8:
        return np.rint(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8)
    if bit_depth == 16:
        return np.rint(np.clip(array, 0.0, 1.0) * 65535.0).astype(np.uint16)
    raise ValueError(f"bit depth must be 8 or 16, got {bit_depth}")


def output_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".png":
        return "png"
    if suffix in (".tif", ".tiff"):
        return "tiff"
    if suffix in (".jpg", ".jpeg"):
        return "jpeg"
    if suffix == ".webp":
        return "webp"
    if suffix == ".dng":  # a camera RAW mosaic: written by gsprestore.imageio.dng.write_dng only
        return "dng"
    raise GspError(f"unsupported output format {suffix or '(no suffix)'!r} (use .png, .tif, .tiff, .jpg or .webp)",
                   path)


class OutputExists(GspError):
    """The output file exists and may not be replaced (it may have appeared during the run)."""

    def __init__(self, path: str | Path):
        super().__init__("output exists (pass --overwrite to replace it, or --skip-existing)", path)


def _place_exclusive(tmp: str, path: Path) -> None:
    """Rename ``tmp`` to ``path`` unless ``path`` exists, atomically: a hard link fails if the
    name is taken (where the file system has no hard links, check then rename)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise OutputExists(path) from None
    except OSError:  # no hard links here (e.g. FAT, some network shares)
        if path.exists():
            raise OutputExists(path) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def check_writable(path: str | Path, *, overwrite: bool = False) -> Path:
    """Raise :class:`GspError` unless ``path`` can be (over)written: the folder exists and is
    writable, the suffix is PNG/TIFF, and the file is absent or ``overwrite`` is set."""
    path = Path(path)
    output_format(path)
    if path.is_dir():
        raise GspError("output path is a folder", path)
    if path.exists() and not overwrite:
        raise OutputExists(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise GspError("output folder does not exist", parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise GspError("output folder is not writable", parent)
    return path


def write_image(
    path: str | Path,
    array: np.ndarray,
    bit_depth: int = 8,
    *,
    alpha: np.ndarray | None = None,
    icc_profile: bytes | None = None,
    overwrite: bool = False,
    text: dict[str, str] | None = None,
    software: str | None = None,
    quality: int | None = None,
    metadata: "Metadata | None" = None,
    notice: Callable[[str], None] | None = None,
) -> Path:
    """Write float ``array`` ((H, W) or (H, W, C), values in [0, 1]) atomically as an 8/16-bit PNG
    or TIFF (``bit_depth=32``: float32 TIFF; a PNG gets 16 bits). ``alpha`` (H, W) becomes the last
    channel. Nothing is left behind if writing fails: the temp file is removed. ``software`` goes
    into the ``Software`` tag (PNG ``tEXt``, TIFF tag 305, EXIF of a JPEG / WebP); see :func:`tool_tag`.
    JPEG and WebP are 8-bit (``bit_depth`` is ignored) with encoder ``quality`` (1-100, default 95);
    JPEG has no alpha. ``metadata`` (:func:`gsprestore.imageio.metadata.for_output`): the EXIF / XMP to
    write (PNG ``eXIf`` / ``iTXt``, TIFF tags and Exif / GPS sub-IFDs, JPEG / WebP EXIF and XMP).
    ``icc_profile`` is written only if it describes the pixels written (:func:`icc_mismatch`; a WebP
    of a gray image is RGB); ``notice`` is told, once the file is in place, of a profile left out
    and of a JPEG's dropped transparency (:data:`JPEG_ALPHA_NOTE`; a fully opaque alpha loses nothing).

    Without ``overwrite`` the finished file is put in place create-exclusively (a hard link of the
    temp file): if another process wrote ``path`` meanwhile, :class:`OutputExists` is raised and
    its file is kept."""
    path = check_writable(path, overwrite=overwrite)
    fmt = output_format(path)
    if fmt == "dng":
        raise GspError("a DNG is written from a camera RAW file (`gsprestore demosaic RAW -o OUT.dng`: a linear DNG) "
                       "or by `gsprestore mosaic`; this input is not a camera RAW file", path)
    said: list[str] = []  # told to ``notice`` once the file is written
    if fmt in PHOTO_FORMATS:
        bit_depth = 8
        if fmt == "jpeg" and alpha is not None:
            if np.any(np.asarray(alpha) < np.float32(1 - 0.5 / 255)):  # some transparency is lost
                said.append(JPEG_ALPHA_NOTE)
            alpha = None
    a = np.asarray(array)
    a = a if a.ndim == 3 else a[:, :, None]
    if a.shape[2] not in (1, 3):
        raise GspError(f"cannot write an image with {a.shape[2]} colour channels", path)
    colours = 3 if fmt == "webp" else a.shape[2]  # the colour channels written: WebP has no gray mode
    why = icc_mismatch(icc_profile, colours)
    if why is not None:
        said.append(f"ICC profile not written: {why}")
        icc_profile = None
    if bit_depth == 32 and fmt == "png":
        bit_depth = 16
    if bit_depth not in (8, 16, 32):
        raise GspError(f"bit depth must be 8 or 16, got {bit_depth}", path)
    h, w, c = a.shape
    dtype = {8: np.uint8, 16: np.uint16, 32: np.float32}[bit_depth]
    data = np.empty((h, w, c + (alpha is not None)), dtype=dtype)
    for r0 in range(0, h, 256):  # convert in row blocks: no full-size float temporaries
        planes = [(a[r0 : r0 + 256], slice(0, c))]
        if alpha is not None:
            planes.append((np.asarray(alpha)[r0 : r0 + 256, :, None], slice(c, c + 1)))
        for block, channels in planes:
            if not np.isfinite(block).all():
                raise GspError("result contains NaN or Inf values; nothing written", path)
            data[r0 : r0 + 256, :, channels] = block if bit_depth == 32 else to_integer(block, bit_depth)
    meta = _md.for_pixels(_md.with_software(metadata, software), colours, icc_left_out=why is not None)
    parent = path.parent if str(path.parent) else Path(".")
    tmp = temp_name(path, ".part")
    try:  # entered before the temporary file exists: a signal at any moment leaves nothing behind
        try:
            fd = create_exclusive(tmp)
        except PermissionError:
            raise GspError("output folder is not writable", parent) from None
        except OSError as exc:
            raise GspError(f"cannot create a file in the output folder ({exc.strerror or exc})", parent) from None
        with os.fdopen(fd, "wb") as fh:
            if fmt == "png":
                tags = dict(text or {})
                if software is not None:
                    tags.setdefault("Software", software)
                pngcodec.encode(fh, data, icc_profile=icc_profile, text=tags, exif=_md.exif_bytes(meta),
                                xmp=meta.xmp)
            elif fmt in PHOTO_FORMATS:
                _encode_photo(fh, data, fmt, quality, icc_profile, meta)
            else:
                ifd0, sub_ifds = _md.tiff_ifds(meta)
                tiffcodec.encode(fh, data, extra_alpha=alpha is not None, icc_profile=icc_profile,
                                 software=software, tags=ifd0, sub_ifds=sub_ifds, xmp=meta.xmp)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~UMASK)
        if overwrite:
            os.replace(tmp, path)
        else:
            _place_exclusive(tmp, path)
    except GspError:
        raise
    except OSError as exc:
        raise GspError(f"could not write image ({exc.strerror or exc})", path) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for message in said if notice is not None else ():
        notice(message)
    return path


def _encode_photo(fh: object, data: np.ndarray, fmt: str, quality: int | None, icc: bytes | None,
                  meta: "Metadata") -> None:
    """8-bit ``data`` (H, W, 1|2|3|4) as JPEG or WebP through Pillow (WebP has no gray mode);
    ``meta`` as its EXIF (the Software tag included) and XMP."""

    PILImage = pillow()

    c = data.shape[2]
    if fmt == "webp" and c in (1, 2):  # gray (+ alpha) -> RGB(A)
        data = np.concatenate([data[:, :, :1]] * 3 + ([data[:, :, 1:]] if c == 2 else []), axis=2)
        c = data.shape[2]
    im = PILImage.fromarray(np.ascontiguousarray(data[:, :, 0] if c == 1 else data))
    options: dict = {"quality": DEFAULT_QUALITY if quality is None else int(quality)}
    if icc:
        options["icc_profile"] = icc
    jpeg = fmt == "jpeg"
    exif = _md.exif_bytes(meta, _md.JPEG_EXIF_LIMIT if jpeg else None)
    if exif:
        options["exif"] = exif
    if meta.xmp and not (jpeg and len(meta.xmp) > _md.JPEG_EXIF_LIMIT):  # one APP1 segment (no extended XMP)
        options["xmp"] = bytes(meta.xmp)
    im.save(fh, format="JPEG" if fmt == "jpeg" else "WEBP", **options)
