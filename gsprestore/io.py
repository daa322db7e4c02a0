"""Images in and out.

* :func:`read_image` returns an :class:`Image`: float32 ``(H, W, C)`` pixels in [0, 1], the bit
  depth *of the file* (8 or 16, never guessed from pixel values), alpha kept apart, ICC profile.
* :func:`write_image` writes 8- or 16-bit PNG/TIFF atomically (temp file + rename) and refuses to
  overwrite an existing file unless ``overwrite=True``.

16-bit RGB PNGs are read and written through imageio's PNG plugin paths that keep all 16 bits
(Pillow alone truncates 16-bit RGB PNG to 8 bits).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import GspError

IMAGE_SUFFIXES = (".png", ".tif", ".tiff")


@dataclass
class Image:
    """Decoded image: ``array`` float32 (H, W, C) in [0, 1]; ``alpha`` (H, W) or None."""

    array: np.ndarray
    bit_depth: int = 8
    alpha: np.ndarray | None = None
    icc_profile: bytes | None = None
    path: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def channels(self) -> int:
        return self.array.shape[2]


def _decode(path: Path) -> tuple[np.ndarray, bytes | None]:
    import imageio.v3 as iio

    icc = None
    try:
        from PIL import Image as PILImage

        with PILImage.open(path) as im:
            icc = im.info.get("icc_profile")
    except Exception:
        pass
    try:
        arr = iio.imread(path)
    except Exception as exc:  # imageio raises many types for corrupt files
        raise GspError(f"not a readable image ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'decode failed'})", path) from None
    return np.asarray(arr), icc


def read_image(path: str | Path) -> Image:
    """Read a PNG or TIFF. Raises :class:`GspError` naming the file on any problem."""
    path = Path(path)
    if not path.exists():
        raise GspError("no such file", path)
    if path.is_dir():
        raise GspError("is a folder, not an image", path)
    if path.stat().st_size == 0:
        raise GspError("empty file (0 bytes)", path)
    arr, icc = _decode(path)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 2, 3, 4):
        raise GspError(f"unsupported image shape {arr.shape}", path)
    if arr.dtype == np.uint8:
        depth, scale = 8, 255.0
    elif arr.dtype == np.uint16:
        depth, scale = 16, 65535.0
    elif arr.dtype.kind == "f":
        depth, scale = 32, 1.0
        if not np.isfinite(arr).all():
            raise GspError("image contains NaN or Inf values", path)
    else:
        raise GspError(f"unsupported pixel type {arr.dtype}", path)
    data = arr.astype(np.float32) / np.float32(scale)
    alpha = None
    if data.shape[2] in (2, 4):
        alpha = data[:, :, -1]
        data = data[:, :, :-1]
    if data.shape[0] < 2 or data.shape[1] < 2:
        raise GspError(f"image too small ({data.shape[1]}x{data.shape[0]})", path)
    return Image(array=np.ascontiguousarray(data), bit_depth=depth, alpha=alpha, icc_profile=icc, path=str(path))


def to_integer(array: np.ndarray, bit_depth: int) -> np.ndarray:
    """Round and clip float [0, 1] to uint8 / uint16."""
    if bit_depth == 8:
        return np.clip(np.rint(array * 255.0), 0, 255).astype(np.uint8)
    if bit_depth == 16:
        return np.clip(np.rint(array * 65535.0), 0, 65535).astype(np.uint16)
    raise ValueError(f"bit depth must be 8 or 16, got {bit_depth}")


def write_image(
    path: str | Path,
    array: np.ndarray,
    bit_depth: int = 8,
    *,
    alpha: np.ndarray | None = None,
    icc_profile: bytes | None = None,
    overwrite: bool = False,
) -> Path:
    """Write float [0, 1] ``array`` ((H, W) or (H, W, C)) as an 8/16-bit PNG or TIFF, atomically."""
    import imageio.v3 as iio

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in IMAGE_SUFFIXES:
        raise GspError(f"unsupported output format {suffix!r} (use .png, .tif or .tiff)", path)
    if path.exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it)", path)
    if not np.isfinite(array).all():
        raise GspError("result contains NaN or Inf values; nothing written", path)
    a = array if array.ndim == 3 else array[:, :, None]
    if alpha is not None:
        a = np.concatenate([a, alpha[:, :, None]], axis=2)
    data = to_integer(a, bit_depth)
    if data.shape[2] == 1:
        data = data[:, :, 0]
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise GspError("output folder does not exist", parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=parent)
    os.close(fd)
    try:
        kwargs = {}
        if suffix == ".png" and icc_profile is not None and bit_depth == 8:
            kwargs["icc_profile"] = icc_profile
        iio.imwrite(tmp, data, extension=suffix, **kwargs)
        os.replace(tmp, path)
    except GspError:
        raise
    except PermissionError:
        raise GspError("permission denied", path) from None
    except Exception as exc:
        raise GspError(f"could not write image ({type(exc).__name__}: {exc})", path) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
