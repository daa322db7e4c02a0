"""Images in and out: 8/16-bit PNG and TIFF, 8-bit JPEG and WebP, alpha and ICC profile kept,
atomic writes.

* :func:`read_image` returns an :class:`Image`: float32 ``(H, W, C)`` pixels in [0, 1], the bit
  depth *of the file* (8, 16, or 32 for float TIFF; never guessed from pixel values), alpha kept
  apart, ICC profile. The format is recognised from the file's first bytes, not its name.
* :func:`write_image` writes 8/16-bit PNG or 8/16-bit/float TIFF atomically (temp file in the same
  folder + ``os.replace``) and refuses to overwrite an existing file unless ``overwrite=True``.

Pillow truncates 16-bit RGB(A) PNGs and TIFFs to 8 bits (and imageio's Pillow plugin with it), so
16-bit PNGs are decoded by :mod:`gsprestore.pngcodec`, every PNG is encoded by it, and TIFFs that
Pillow cannot hold (16-bit with more than one sample, float) go through :mod:`gsprestore.tiffcodec`.
8-bit files and 16-bit gray TIFFs are decoded by Pillow (fast, every compression).

JPEG and WebP (8-bit, lossy) are decoded and encoded by Pillow; a JPEG/WebP's EXIF orientation is
applied on reading, and ``write_image(..., quality=Q)`` sets the encoder's quality (default 95).

Every problem with a file is a :class:`~gsprestore.errors.GspError` naming the file and the reason
on one line: missing, empty, not an image, truncated, corrupt, too small, NaN/Inf samples.
"""

from __future__ import annotations

import io as _io
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import pngcodec, tiffcodec
from .errors import GspError

IMAGE_SUFFIXES = (".png", ".tif", ".tiff", ".jpg", ".jpeg", ".webp")
PHOTO_FORMATS = ("jpeg", "webp")  # 8-bit lossy formats, through Pillow
DEFAULT_QUALITY = 95
MIN_SIDE = 2
MAX_PIXELS = 1 << 30  # larger headers are refused before decoding (corrupt, or a decompression bomb)


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
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] in (b"II*\0", b"MM\0*") or data[:4] in (b"II+\0", b"MM\0+"):
        return "tiff"
    return None


def _from_pillow(data: bytes) -> np.ndarray:
    from PIL import Image as PILImage

    PILImage.MAX_IMAGE_PIXELS = MAX_PIXELS  # our own limit, checked on the header before this
    with PILImage.open(_io.BytesIO(data)) as im:
        im.load()
        mode = im.mode
        if mode == "P" or mode == "PA":
            im = im.convert("RGBA" if ("transparency" in im.info or mode == "PA") else "RGB")
        elif mode == "1":
            im = im.convert("L")
        elif mode in ("CMYK", "YCbCr", "LAB", "HSV"):
            if mode == "YCbCr":
                im = im.convert("RGB")
            else:
                raise ValueError(f"unsupported colour space {mode}")
        elif mode not in ("L", "LA", "RGB", "RGBA", "I;16", "I;16B", "I;16L"):
            raise ValueError(f"unsupported image mode {mode}")
        arr = np.asarray(im)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _decode_photo(data: bytes) -> tuple[np.ndarray, bytes | None]:
    """A JPEG or WebP: 8-bit pixels with the EXIF orientation applied, and its ICC profile."""
    from PIL import Image as PILImage
    from PIL import ImageOps

    with PILImage.open(_io.BytesIO(data)) as im:
        _check_pixels(*im.size)
        icc = im.info.get("icc_profile")
        buffer = _io.BytesIO()
        oriented = ImageOps.exif_transpose(im)
        oriented.save(buffer, format="PNG", compress_level=0)  # re-enter the PNG/TIFF path's mode logic
    return _from_pillow(buffer.getvalue()), icc


def _check_pixels(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise ValueError(f"unsupported image size {width}x{height} (more than {MAX_PIXELS // 2**20} megapixels)")


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text


def _decode(data: bytes, path: Path) -> tuple[np.ndarray, int, bytes | None, dict]:
    """Decode file bytes -> (integer or float array (H, W[, C]), file bit depth, ICC, meta)."""
    fmt = sniff(data)
    if fmt is None:
        kind = Path(path).suffix.lower().lstrip(".").upper() or "PNG or TIFF"
        if kind == "TIF":
            kind = "TIFF"
        raise GspError(f"not a {kind} image (the file content is not an image)", path)
    meta: dict = {"format": fmt}
    try:
        if fmt == "png":
            info = pngcodec.read_chunks(data)
            _check_pixels(info.width, info.height)
            meta["text"] = info.text
            icc = info.icc_profile
            if info.bit_depth == 16:
                arr = pngcodec.decode(info)
                depth = 16
            else:
                arr = _from_pillow(data)
                depth = 8
        elif fmt in PHOTO_FORMATS:
            arr, icc = _decode_photo(data)
            depth = 8
        else:
            info = tiffcodec.read_ifd(data)
            _check_pixels(info.width, info.height)
            icc = info.icc_profile
            if info.sample_format == 1 and info.bits == 8:
                arr, depth = _from_pillow(data), 8
            elif info.sample_format == 1 and info.bits == 16 and info.samples == 1 and info.photometric in (0, 1):
                arr, depth = _from_pillow(data), 16
            elif info.sample_format == 1 and info.bits == 16:
                arr, depth = tiffcodec.decode(data, info), 16
            elif info.sample_format == 3:
                arr, depth = tiffcodec.decode(data, info), 32
            else:
                kind = {1: "unsigned", 2: "signed", 3: "float"}.get(info.sample_format, "unknown")
                raise ValueError(f"unsupported TIFF samples ({info.bits}-bit {kind}); use 8/16-bit or float")
    except GspError:
        raise
    except MemoryError:
        raise GspError("not enough memory to decode the image", path) from None
    except Exception as exc:  # codecs and Pillow raise many types for corrupt files
        reason = _reason(exc)
        if not reason.startswith(("corrupt", "truncated", "unsupported", "not a")):
            kind = "truncated" if "truncated" in reason.lower() else "corrupt"
            reason = f"{kind} {fmt.upper()} ({reason})"
        raise GspError(reason, path) from None
    return arr, depth, icc, meta


def read_image(path: str | Path) -> Image:
    """Read a PNG or TIFF. Raises :class:`GspError` naming the file on any problem."""
    path = Path(path)
    if not path.exists():
        raise GspError("no such file", path)
    if path.is_dir():
        raise GspError("is a folder, not an image", path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GspError(f"cannot read file ({exc.strerror or exc})", path) from None
    if not data:
        raise GspError("empty file (0 bytes)", path)
    arr, depth, icc, meta = _decode(data, path)
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
    if suffix == ".dng":  # a camera RAW mosaic: written by gsprestore.camera_raw.write_dng only
        return "dng"
    raise GspError(f"unsupported output format {suffix or '(no suffix)'!r} (use .png, .tif, .tiff, .jpg or .webp)",
                   path)


def check_writable(path: str | Path, *, overwrite: bool = False) -> Path:
    """Raise :class:`GspError` unless ``path`` can be (over)written: the folder exists and is
    writable, the suffix is PNG/TIFF, and the file is absent or ``overwrite`` is set."""
    path = Path(path)
    output_format(path)
    if path.is_dir():
        raise GspError("output path is a folder", path)
    if path.exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it, or --skip-existing)", path)
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
    quality: int | None = None,
) -> Path:
    """Write float ``array`` ((H, W) or (H, W, C), values in [0, 1]) atomically as an 8/16-bit PNG
    or TIFF (``bit_depth=32``: float32 TIFF; a PNG gets 16 bits). ``alpha`` (H, W) becomes the last
    channel. JPEG and WebP are 8-bit (``bit_depth`` is ignored) with encoder ``quality`` (1-100,
    default 95); JPEG has no alpha. Nothing is left behind if writing fails: the temp file is removed."""
    path = check_writable(path, overwrite=overwrite)
    fmt = output_format(path)
    if fmt == "dng":
        raise GspError("a DNG holds a camera mosaic, not an image (only `gsprestore mosaic` writes DNG)", path)
    if fmt in PHOTO_FORMATS:
        bit_depth = 8
        if fmt == "jpeg":
            alpha = None
    a = np.asarray(array)
    a = a if a.ndim == 3 else a[:, :, None]
    if a.shape[2] not in (1, 3):
        raise GspError(f"cannot write an image with {a.shape[2]} colour channels", path)
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
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=parent)
    except PermissionError:
        raise GspError("output folder is not writable", parent) from None
    except OSError as exc:
        raise GspError(f"cannot create a file in the output folder ({exc.strerror or exc})", parent) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            if fmt == "png":
                pngcodec.encode(fh, data, icc_profile=icc_profile, text=text)
            elif fmt in PHOTO_FORMATS:
                _encode_photo(fh, data, fmt, quality, icc_profile)
            else:
                tiffcodec.encode(fh, data, extra_alpha=alpha is not None, icc_profile=icc_profile)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        if path.exists() and not overwrite:  # appeared while we were writing
            raise GspError("output exists (pass --overwrite to replace it, or --skip-existing)", path)
        os.replace(tmp, path)
    except GspError:
        raise
    except OSError as exc:
        raise GspError(f"could not write image ({exc.strerror or exc})", path) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _encode_photo(fh: object, data: np.ndarray, fmt: str, quality: int | None, icc: bytes | None) -> None:
    """8-bit ``data`` (H, W, 1|2|3|4) as JPEG or WebP through Pillow (WebP has no gray mode)."""
    from PIL import Image as PILImage

    c = data.shape[2]
    if fmt == "webp" and c in (1, 2):  # gray (+ alpha) -> RGB(A)
        data = np.concatenate([data[:, :, :1]] * 3 + ([data[:, :, 1:]] if c == 2 else []), axis=2)
        c = data.shape[2]
    im = PILImage.fromarray(np.ascontiguousarray(data[:, :, 0] if c == 1 else data))
    options: dict = {"quality": DEFAULT_QUALITY if quality is None else int(quality)}
    if icc:
        options["icc_profile"] = icc
    im.save(fh, format="JPEG" if fmt == "jpeg" else "WEBP", **options)


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # mkstemp creates 0600 files; finished outputs get the usual permissions
