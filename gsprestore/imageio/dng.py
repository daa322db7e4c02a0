"""DNG files out: :func:`write_dng` writes a minimal valid DNG 1.4 (one uncompressed 16-bit CFA
image with its pattern, black and white levels, colour matrix, as-shot neutral and orientation):
what ``gsprestore mosaic photo.png -o x.dng`` makes, so users and tests have camera files with a
known truth; :func:`write_linear_dng` the demosaicked linear camera RGB of a camera RAW (a
LinearRaw DNG) for a raw editor to keep developing. Both write atomically.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import GspError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from .metadata import Metadata


#: LibRaw (dcraw's identify) takes no camera file under 22 pixels a side as RAW.
DNG_MIN_SIDE = 22


# sRGB (D65) primaries to CIE XYZ, the matrix LibRaw multiplies a camera's XYZ->camera matrix with
XYZ_FROM_SRGB = np.array([[0.412453, 0.357580, 0.180423],
                          [0.212671, 0.715160, 0.072169],
                          [0.019334, 0.119193, 0.950227]])


_CFA_CODE = {"R": 0, "G": 1, "B": 2}


# XYZ (D65) -> linear sRGB: as a DNG ColorMatrix1 it makes "camera RGB" linear sRGB itself
SRGB_FROM_XYZ = np.linalg.inv(XYZ_FROM_SRGB)


# EXIF orientation tag value -> LibRaw flip code (LibRaw's "50132467"[orientation & 7])
ORIENTATION_TO_FLIP = {1: 0, 2: 1, 3: 3, 4: 2, 5: 4, 6: 6, 7: 7, 8: 5}


def _rationals(values: np.ndarray, den: int = 1_000_000) -> list[int]:
    out: list[int] = []
    for v in np.asarray(values, dtype=np.float64).reshape(-1):
        out += [int(round(float(v) * den)), den]
    return out


def mosaic_for_dng(
    rgb_linear: np.ndarray,
    pattern: str = "RGGB",
    *,
    black: int = 512,
    white: int = 16383,
    color_matrix: np.ndarray | None = None,
    as_shot_neutral: tuple[float, float, float] = (1.0, 1.0, 1.0),
) -> np.ndarray:
    """The uint16 sensor mosaic a camera whose XYZ->camera matrix is ``color_matrix`` (default:
    :data:`SRGB_FROM_XYZ`, i.e. camera RGB = linear sRGB) would record of the linear-sRGB scene
    ``rgb_linear`` (H, W, 3) shot with white balance ``as_shot_neutral`` (camera RGB of white)."""
    from ..physics.sampling import CHANNEL, check_pattern

    pattern = check_pattern(pattern)
    cm = SRGB_FROM_XYZ if color_matrix is None else np.asarray(color_matrix, dtype=np.float64).reshape(3, 3)
    cam_rgb = cm @ XYZ_FROM_SRGB
    cam_rgb = cam_rgb / cam_rgb.sum(axis=1, keepdims=True)  # LibRaw's normalisation: white -> (1, 1, 1)
    neutral = np.asarray(as_shot_neutral, dtype=np.float64)
    cam = rgb_linear.astype(np.float64) @ cam_rgb.T * neutral  # camera RGB, as shot (unbalanced)
    h, w = cam.shape[:2]
    out = np.empty((h, w), dtype=np.float64)
    for k, colour in enumerate(pattern):
        di, dj = divmod(k, 2)
        out[di::2, dj::2] = cam[di::2, dj::2, CHANNEL[colour]]
    return np.rint(black + np.clip(out, 0.0, 1.0) * (white - black)).astype(np.uint16)


#: EXIF tags :func:`write_dng` copies from the source photo: ASCII ones, and TIFF/EP exposure
#: tags in IFD0 (code, tifffile dtype).
_DNG_ASCII = (0x010F, 0x0110, 0x0132, 0x013B, 0x8298, 0x9003)


_DNG_RATIONAL = (0x829A, 0x829D, 0x920A)  # ExposureTime, FNumber, FocalLength


_DNG_SHORT = (0x8827,)  # ISOSpeedRatings


def _dng_exif_tags(metadata: "Metadata | None") -> dict[int, tuple]:
    """tifffile ``extratags`` of the source photo's camera record (make, model, dates, exposure)."""
    if not metadata:
        return {}
    values = {**metadata.exif, **metadata.ifd0}
    out: dict[int, tuple] = {}
    for code in _DNG_ASCII:
        if isinstance(values.get(code), str) and values[code].strip("\0 "):
            out[code] = (code, "s", 0, values[code].strip("\0"), True)
    for code in _DNG_RATIONAL:
        v = values.get(code)
        if v is not None and hasattr(v, "numerator") and float(v.denominator) > 0 and float(v.numerator) >= 0:
            out[code] = (code, "2I", 1, (int(v.numerator), int(v.denominator)), True)
    for code in _DNG_SHORT:
        v = values.get(code)
        v = v[0] if isinstance(v, tuple) and v else v
        if isinstance(v, int) and 0 <= v < 65536:
            out[code] = (code, "H", 1, v, True)
    return out


def write_dng(
    path: str | Path,
    cfa: np.ndarray,
    pattern: str = "RGGB",
    *,
    black: int = 512,
    white: int = 16383,
    color_matrix: np.ndarray | None = None,
    as_shot_neutral: tuple[float, float, float] = (1.0, 1.0, 1.0),
    orientation: int = 1,
    overwrite: bool = False,
    metadata: "Metadata | None" = None,
) -> Path:
    """Write the uint16 mosaic ``cfa`` (H, W) as a minimal DNG 1.4 (uncompressed CFA, the tags a
    DNG reader needs), atomically; refuses an existing file unless ``overwrite``. ``metadata`` (the
    source photo's EXIF, :class:`gsprestore.imageio.metadata.Metadata`): its make, model, date and exposure
    go into IFD0 (as TIFF/EP and LibRaw read them), so the DNG is a camera file with that camera's
    record."""
    from ..physics.sampling import check_pattern

    pattern = check_pattern(pattern)
    path = Path(path)
    if path.exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it, or --skip-existing)", path)
    if orientation not in ORIENTATION_TO_FLIP:
        raise UsageError(f"EXIF orientation must be 1..8, got {orientation}")
    cm = SRGB_FROM_XYZ if color_matrix is None else np.asarray(color_matrix, dtype=np.float64).reshape(3, 3)
    recorded = _dng_exif_tags(metadata)
    tags = [
        recorded.pop(271, (271, "s", 0, "gsprestore", True)),  # Make
        recorded.pop(272, (272, "s", 0, "synthetic mosaic", True)),  # Model
        (274, "H", 1, int(orientation), True),  # Orientation
        (50706, "B", 4, (1, 4, 0, 0), True),  # DNGVersion
        (50707, "B", 4, (1, 1, 0, 0), True),  # DNGBackwardVersion
        (50708, "s", 0, "gsprestore synthetic mosaic", True),  # UniqueCameraModel
        (33421, "H", 2, (2, 2), True),  # CFARepeatPatternDim
        (33422, "B", 4, bytes(_CFA_CODE[c] for c in pattern), True),  # CFAPattern
        (50710, "B", 3, bytes((0, 1, 2)), True),  # CFAPlaneColor
        (50711, "H", 1, 1, True),  # CFALayout: rectangular
        (50713, "H", 2, (1, 1), True),  # BlackLevelRepeatDim
        (50714, "H", 1, int(black), True),  # BlackLevel
        (50717, "H", 1, int(white), True),  # WhiteLevel
        (50721, "2i", 9, _rationals(cm), True),  # ColorMatrix1 (XYZ -> camera)
        (50778, "H", 1, 21, True),  # CalibrationIlluminant1: D65
        (50728, "2I", 3, _rationals(as_shot_neutral), True),  # AsShotNeutral
        *recorded.values(),
    ]
    return _write_dng(path, np.ascontiguousarray(cfa, dtype=np.uint16), tags, photometric=32803)


def _write_dng(path: Path, data: np.ndarray, tags: list, **tiff: object) -> Path:
    """``data`` with the DNG ``tags`` (sorted here) as a TIFF, written atomically (temp file +
    rename); an OS error is one line naming ``path``."""
    import tifffile

    from ..core.atomic import atomic_file

    buffer = io.BytesIO()
    tifffile.imwrite(buffer, data, subfiletype=0, extratags=sorted(tags, key=lambda t: t[0]), metadata=None,
                     software="gsprestore", **tiff)
    try:
        with atomic_file(path, "wb", suffix=".part") as fh:
            fh.write(buffer.getbuffer())
    except OSError as exc:
        raise GspError(f"could not write DNG ({exc.strerror or exc})", path) from None
    return path


def write_linear_dng(
    path: str | Path,
    rgb: np.ndarray,
    *,
    rgb_cam: np.ndarray | None,
    gains: np.ndarray,
    flip: int = 0,
    overwrite: bool = False,
    metadata: "Metadata | None" = None,
    camera: str = "",
) -> Path:
    """Write demosaicked linear camera RGB (H, W, 3) in [0, 1] as a LinearRaw DNG 1.4 (16-bit, 3
    samples, PhotometricInterpretation 34892), atomically, for a raw editor to keep developing:
    ColorMatrix1 (XYZ -> camera, D65) from LibRaw's camera -> sRGB matrix ``rgb_cam`` (identity when
    None: camera RGB is sRGB), AsShotNeutral ``1 / gains``, black 0 and white 65535, the
    orientation of LibRaw's ``flip`` code, and the source's camera record (``metadata``: make,
    model, dates, exposure, ISO). Refuses an existing file unless ``overwrite``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it, or --skip-existing)", path)
    # LibRaw reads ColorMatrix1 as cam_xyz and takes rgb_cam = inverse of its rows-normalised
    # cam_xyz @ xyz_rgb: this cam_xyz gives back exactly the matrix LibRaw used for the source
    cam_rgb = np.linalg.inv(np.asarray(rgb_cam, dtype=np.float64)) if rgb_cam is not None else np.eye(3)
    cm = cam_rgb @ SRGB_FROM_XYZ
    neutral = 1.0 / np.asarray(gains, dtype=np.float64)
    neutral = neutral / neutral.max()
    orientation = {v: k for k, v in ORIENTATION_TO_FLIP.items()}.get(int(flip), 1)
    recorded = _dng_exif_tags(metadata)
    unique = " ".join(filter(None, [str(recorded.get(271, (0, 0, 0, ""))[3]).strip(),
                                    str(recorded.get(272, (0, 0, 0, ""))[3]).strip()])) or camera or "camera"
    tags = [
        recorded.pop(271, (271, "s", 0, "gsprestore", True)),  # Make
        recorded.pop(272, (272, "s", 0, camera or "linear DNG", True)),  # Model
        (274, "H", 1, int(orientation), True),  # Orientation
        (50706, "B", 4, (1, 4, 0, 0), True),  # DNGVersion
        (50707, "B", 4, (1, 1, 0, 0), True),  # DNGBackwardVersion
        (50708, "s", 0, unique, True),  # UniqueCameraModel
        (50714, "H", 1, 0, True),  # BlackLevel
        (50717, "H", 1, 65535, True),  # WhiteLevel
        (50721, "2i", 9, _rationals(cm), True),  # ColorMatrix1 (XYZ -> camera)
        (50778, "H", 1, 21, True),  # CalibrationIlluminant1: D65
        (50728, "2I", 3, _rationals(neutral), True),  # AsShotNeutral
        *recorded.values(),
    ]
    data = np.rint(np.clip(rgb, 0.0, 1.0) * 65535.0).astype(np.uint16)
    return _write_dng(path, data, tags, photometric=34892, planarconfig="contig")
