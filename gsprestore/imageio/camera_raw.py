"""Camera RAW files (DNG, CR2, NEF, ARW, RAF, ...) in: read through rawpy (LibRaw), develop with
any of our demosaickers.

:func:`read_raw` takes from the file, through LibRaw, what a raw developer needs and nothing else:

* the visible area of the sensor (margins cut) as a single-channel mosaic, each site's black level
  (per CFA channel) subtracted and divided by ``white - black``, so 0 is black and 1 is the
  sensor's clipping point;
* the Bayer phase of the visible area's top-left 2x2 block (RGGB, BGGR, GRBG or GBRG). X-Trans
  (6x6) and other non-Bayer sensors (CYGM, Foveon, linear DNGs) are refused with one line;
* the as-shot (camera) and daylight white-balance multipliers, the camera-to-sRGB matrix LibRaw
  itself applies (``rgb_cam``, rows summing to 1: :func:`libraw_rgb_cam` measures it from LibRaw,
  because rawpy's ``color_matrix`` and ``rgb_xyz_matrix`` read zeros for many cameras whose
  matrix LibRaw takes from its own tables) and the EXIF orientation (LibRaw's ``flip`` code).

:func:`develop` is the pipeline, in LibRaw's order so that its output can serve as the oracle:
white-balance gains on the mosaic (normalised so the smallest is 1, then clipped at 1, as LibRaw's
``scale_colors`` does: demosaicking white-balanced data keeps colour-difference methods and the
learned models, trained on balanced images, in their element), then the demosaicker, then the
camera-to-sRGB matrix (``--output-space srgb`` or ``linear``; ``camera`` keeps the white-balanced
camera RGB), then the brightness (``bright``: LibRaw's auto-brightness by default, the 99th
percentile of the brightest channel to white; highlights clipped, LibRaw's default ``-H 0``), then
the sRGB transfer curve (``srgb`` only), then the orientation.

:func:`write_dng` writes a minimal valid DNG 1.4 (one uncompressed 16-bit CFA image with its
pattern, black and white levels, colour matrix, as-shot neutral and orientation): what ``gsprestore
mosaic photo.png -o x.dng`` makes, so users and tests have camera files with a known truth.
"""

from __future__ import annotations

import io
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from ..core.errors import GspError, UsageError
from .images import Reserve, existing_file

if TYPE_CHECKING:  # pragma: no cover
    from .metadata import Metadata

RAW_SUFFIXES: tuple[str, ...] = (
    ".dng", ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2", ".raf", ".orf", ".rw2",
    ".pef", ".srw", ".rwl", ".3fr", ".fff", ".iiq", ".erf", ".kdc", ".dcr", ".mrw", ".mos", ".x3f",
)
WHITE_BALANCES: tuple[str, ...] = ("camera", "daylight", "none")
#: LibRaw (dcraw's identify) takes no camera file under 22 pixels a side as RAW.
DNG_MIN_SIDE = 22
OUTPUT_SPACES: tuple[str, ...] = ("srgb", "linear", "camera")
#: ``--bright``: ``auto`` (LibRaw's and dcraw's default auto-brightness), ``none`` (the sensor's
#: white level is white) or a FACTOR multiplying the linear values.
DEFAULT_BRIGHT = "auto"
#: LibRaw's ``auto_bright_thr``: auto-brightness scales so that this fraction of the pixels, in the
#: brightest channel, clips.
AUTO_BRIGHT_THR = 0.01

# sRGB (D65) primaries to CIE XYZ, the matrix LibRaw multiplies a camera's XYZ->camera matrix with
XYZ_FROM_SRGB = np.array([[0.412453, 0.357580, 0.180423],
                          [0.212671, 0.715160, 0.072169],
                          [0.019334, 0.119193, 0.950227]])


def is_raw_name(path: str | Path) -> bool:
    """True if the file name has a camera RAW suffix (DNG, CR2, NEF, ARW, RAF, ...)."""
    return Path(path).suffix.lower() in RAW_SUFFIXES


#: Signatures of the image formats that are never camera RAW files, whatever their name.
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")


def is_camera_raw(path: str | Path) -> bool:
    """True if ``path`` is taken as a camera RAW file: a RAW suffix (:func:`is_raw_name`) on a file
    whose content is not a PNG, JPEG, WebP, GIF or BMP image (inputs are recognised by content: a
    PNG mosaic named ``.CR2`` is a PNG). TIFF-based content (DNG, CR2, NEF, ARW...) under a RAW
    suffix is RAW; a file that cannot be read counts by its name (reading it then says why)."""
    if not is_raw_name(path):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return True
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return False
    return not any(head.startswith(m) for m in _IMAGE_MAGIC)


def check_choice(value: str, choices: tuple[str, ...], option: str) -> str:
    """``value`` lower-cased if it is one of ``choices``, else a :class:`UsageError` (exit 2)."""
    v = str(value).lower()
    if v not in choices:
        raise UsageError(f"unknown {option} {value!r}; expected {', '.join(choices)}")
    return v


@dataclass
class RawFrame:
    """A camera RAW file, read: ``mosaic`` float32 (H, W), 0 = black level, 1 = white level (not
    white-balanced); ``pattern`` the visible area's Bayer phase; ``wb_camera`` / ``wb_daylight``
    R, G, B multipliers (G = 1); ``rgb_cam`` the 3x3 camera-to-linear-sRGB matrix or None when
    the file has no colour data; ``flip`` LibRaw's orientation code; ``bits`` the sensor's depth."""

    mosaic: np.ndarray
    pattern: str
    wb_camera: np.ndarray | None
    wb_daylight: np.ndarray | None
    rgb_cam: np.ndarray | None
    flip: int
    bits: int
    camera: str = ""


def _wb3(values: object) -> np.ndarray | None:
    """LibRaw's 4 multipliers (R, G, B, G2) -> R, G, B with G = 1; None when unusable."""
    try:
        v = np.asarray(values, dtype=np.float64).reshape(-1)[:3]
    except (TypeError, ValueError):
        return None
    if v.size != 3 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        return None
    return v / v[1]


#: What LibRaw's own data-error handler prints on stderr (``FILE: Unexpected end of file``,
#: ``FILE: data corrupted at OFFSET``): a file whose data ran out or is damaged.
_LIBRAW_COMPLAINTS = ("Unexpected end of file", "data corrupted", "corrupted data")


@contextmanager
def _libraw_stderr(messages: list[str]) -> Iterator[None]:
    """Run the block with the process's stderr (file descriptor 2, where LibRaw's C code prints)
    sent to a temporary file; afterwards LibRaw's complaints go to ``messages`` and anything else
    printed meanwhile (a progress display) is written back, so no line is lost or added."""
    import sys
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to redirect
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            other = []
            for line in sink.read().decode("utf-8", "replace").splitlines():
                found = [c for c in _LIBRAW_COMPLAINTS if c in line]
                (messages.append(found[0]) if found else other.append(line))
            if other:
                os.write(2, ("\n".join(other) + "\n").encode())


def _check_sizes(raw: object, path: Path, reserve: Reserve | None) -> None:
    """Refuse, from the header and before LibRaw unpacks anything, a file whose unpacked sensor
    data (16 bits a site, margins included), its float32 mosaic and what the caller then needs
    (``reserve``) would not fit in the available memory."""
    from ..core.memory import available_memory, gib

    s = raw.sizes
    h, w = int(s.height), int(s.width)
    need = int(s.raw_height) * int(s.raw_width) * 2 + h * w * (1 + 4)
    need += reserve(h, w, 1) if reserve is not None else 0
    have = available_memory()
    if need > have:
        raise GspError(f"not enough memory to read the {w}x{h} camera RAW file and work on it (about {gib(need)} "
                       f"needed, {gib(have)} available)", path)


def read_raw(path: str | Path, *, reserve: Reserve | None = None) -> RawFrame:
    """Read a camera RAW file (see the module docstring). Every problem is a one-line
    :class:`GspError` naming the file; what LibRaw prints about it on stderr is part of that line
    (a truncated file is an error, never a picture with missing rows). ``reserve(height, width,
    channels)``: what the caller will need once the mosaic is read (see
    :func:`gsprestore.imageio.images.read_image`), checked from the header before unpacking."""
    path = existing_file(path, "a camera RAW file")
    try:
        import rawpy  # noqa: F401 - here only to say what is missing, in one line
    except ImportError:  # pragma: no cover - rawpy is a dependency
        raise GspError("camera RAW files need rawpy (pip install rawpy)", path) from None
    complaints: list[str] = []
    with _libraw_stderr(complaints):
        try:
            from .openers import libraw_open

            raw = libraw_open(path)
        except Exception as exc:
            raw, error = None, GspError(f"not a camera RAW file LibRaw can read ({_first_line(exc)})", path)
        if raw is not None:
            with raw:
                try:
                    _check_sizes(raw, path, reserve)
                    frame, error = _frame(raw, path), None
                except GspError as exc:
                    frame, error = None, exc
                except MemoryError:
                    frame, error = None, GspError("not enough memory to decode the RAW file", path)
                except Exception as exc:  # LibRaw raises its own types for truncated or corrupt data
                    frame, error = None, GspError(f"corrupt or unsupported camera RAW file ({type(exc).__name__}: "
                                                  f"{_first_line(exc)})", path)
    if complaints:  # LibRaw found the data short or damaged, whether it went on or not
        raise GspError(f"corrupt or truncated camera RAW file (LibRaw: {complaints[0]})", path)
    if error is not None:
        raise error
    return frame


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _frame(raw: object, path: Path) -> RawFrame:
    import rawpy

    desc = raw.color_desc.decode("ascii", "replace")
    pattern_shape = np.asarray(raw.raw_pattern).shape if raw.raw_pattern is not None else None
    if raw.raw_type != rawpy.RawType.Flat or pattern_shape is None:
        raise GspError("not a colour-filter mosaic (Foveon or already demosaicked linear DNG); only Bayer "
                       "sensors can be demosaicked", path)
    if pattern_shape == (6, 6):
        raise GspError("X-Trans sensor (6x6 colour filter): only 2x2 Bayer sensors are supported", path)
    if pattern_shape != (2, 2) or set(desc) - set("RGB"):
        raise GspError(f"non-Bayer colour filter ({desc}, {pattern_shape[0]}x{pattern_shape[1]}): only 2x2 RGB "
                       "Bayer sensors are supported", path)
    data = np.asarray(raw.raw_image_visible)
    h, w = data.shape
    # the visible area's colour indices, from the whole sensor's (rawpy's raw_colors_visible builds
    # a new full-size array, 0.4 s for 9 MP; only the first 2x2 block is needed)
    top, left = int(raw.sizes.top_margin), int(raw.sizes.left_margin)
    colors = np.asarray(raw.raw_colors)[top:top + 2, left:left + 2]
    if h < 2 or w < 2:
        raise GspError(f"visible area too small ({w}x{h})", path)
    pattern = "".join(desc[int(c)] for c in colors[:2, :2].reshape(-1))
    if sorted(pattern) != ["B", "G", "G", "R"]:
        raise GspError(f"non-Bayer colour filter ({pattern}): only RGGB, BGGR, GRBG and GBRG are supported", path)
    black = np.asarray(raw.black_level_per_channel, dtype=np.float32)
    cw = raw.camera_white_level_per_channel
    white = (np.asarray(cw, dtype=np.float32) if cw is not None and min(cw) > 0
             else np.full(4, float(raw.white_level), dtype=np.float32))
    if np.any(white <= black):
        raise GspError(f"white level {white.tolist()} not above black level {black.tolist()}", path)
    # per-site levels from the site's colour index (R, G, B, G2): a 2x2 Bayer pattern, so one
    # strided pass per phase (not a gather of four levels per pixel)
    mosaic = np.empty((h, w), dtype=np.float32)
    for i in range(2):
        for j in range(2):
            c = int(colors[i, j])
            out = mosaic[i::2, j::2]
            np.subtract(data[i::2, j::2], black[c], out=out, dtype=np.float32)
            out *= np.float32(1.0) / (white[c] - black[c])
    np.clip(mosaic, 0.0, None, out=mosaic)
    flip = int(raw.sizes.flip)
    rgb_cam = libraw_rgb_cam(raw)  # overwrites LibRaw's copy of the sensor data: after the mosaic is read
    if np.allclose(rgb_cam, np.eye(3), atol=1e-3):
        rgb_cam = None  # LibRaw knows no matrix for this camera: its camera RGB is its sRGB
    bits = int(np.ceil(np.log2(float(white.max()) + 1.0)))
    return RawFrame(mosaic=mosaic, pattern=pattern, wb_camera=_wb3(raw.camera_whitebalance),
                    wb_daylight=_wb3(raw.daylight_whitebalance), rgb_cam=rgb_cam,
                    flip=flip, bits=bits)


#: The probe :func:`libraw_rgb_cam` writes: every site at ``_PROBE_BASE`` of the white level, its
#: colour raised by ``_PROBE_STEP`` in one band of rows per colour (R, G, B). Camera RGB
#: (0.6, 0.5, 0.5) and so on keeps ``0.5 + 0.1 * rgb_cam[:, k]`` in [0, 1] for entries within +-5.
_PROBE_BASE, _PROBE_STEP = 0.5, 0.1


def libraw_rgb_cam(raw: object) -> np.ndarray:
    """The 3x3 camera-to-linear-sRGB matrix LibRaw's ``postprocess`` applies to the open rawpy
    file ``raw`` (its ``rgb_cam``, which rawpy does not expose: from the DNG's ColorMatrix, or
    LibRaw's tables by make and model, or identity when it knows none), measured on LibRaw
    itself: the sensor data is overwritten with three flat colour patches and developed twice at
    half size, linear, without white balance or brightness, in camera RGB and in sRGB; the
    matrix maps the three patches' colours in the one to the other (exact to 16-bit rounding).
    The file's data is gone afterwards: call it once the mosaic has been copied."""
    import rawpy

    data = raw.raw_image
    colors = np.asarray(raw.raw_colors)
    desc = raw.color_desc.decode("ascii", "replace")
    black = np.asarray(raw.black_level_per_channel, dtype=np.float64)
    white = float(raw.white_level)
    channel = np.array(["RGB".index(desc[c]) if desc[c] in "RGB" else 1 for c in range(4)])
    h = data.shape[0]
    for band in range(3):  # row band `band` raises colour `band`
        r0, r1 = band * h // 3, (band + 1) * h // 3
        level = _PROBE_BASE + _PROBE_STEP * (channel == band)  # by LibRaw colour index
        table = np.rint(black + level * (white - black)).astype(data.dtype)
        data[r0:r1] = table[colors[r0:r1]]
    opts = dict(half_size=True, use_camera_wb=False, use_auto_wb=False, user_wb=[1.0, 1.0, 1.0, 1.0],
                no_auto_bright=True, gamma=(1, 1), output_bps=16, adjust_maximum_thr=0.0)
    cam = raw.postprocess(output_color=rawpy.ColorSpace.raw, **opts)
    srgb = raw.postprocess(output_color=rawpy.ColorSpace.sRGB, **opts)
    # each band is one flat colour: its middle half's mean (away from the bands' borders, where
    # demosaicking mixes them) is that colour, and three colours fix the 3x3 matrix
    rows = cam.shape[0]
    picks = [slice((4 * band + 1) * rows // 12, (4 * band + 3) * rows // 12) for band in range(3)]
    cam_means = np.array([cam[p].reshape(-1, 3).mean(0, dtype=np.float64) for p in picks])
    srgb_means = np.array([srgb[p].reshape(-1, 3).mean(0, dtype=np.float64) for p in picks])
    if min(p.stop - p.start for p in picks) >= 2 and np.linalg.cond(cam_means) < 1e6:
        return np.linalg.solve(cam_means, srgb_means).T
    # a frame too small for clean bands: least squares over every pixel
    return np.linalg.lstsq(cam.reshape(-1, 3).astype(np.float64), srgb.reshape(-1, 3).astype(np.float64),
                           rcond=None)[0].T


#: Pixels of the frame's edge that auto-brightness does not count: there each demosaicker
#: extrapolates in its own way (our bilinear mixes colours in the outermost pixel, as
#: colour-demosaicing does; LibRaw's LINEAR averages neighbours), and a few wrong pixels there
#: must not set the brightness of the picture.
_EDGE = 2


def parse_bright(value: str | float) -> str | float:
    """``--bright``: ``"auto"``, ``"none"`` or a positive FACTOR (float); else a :class:`UsageError`."""
    v = str(value).strip().lower()
    if v in ("auto", "none"):
        return v
    try:
        factor = float(v)
    except ValueError:
        factor = float("nan")
    if not (np.isfinite(factor) and factor > 0):
        raise UsageError(f"unknown --bright {value!r}; expected auto, none or a factor > 0 (e.g. 1.5)")
    return factor


#: ``--denoise``: ``auto`` (denoise a camera RAW file the noise estimate finds noisy, with the
#: noise-aware network), ``off``, ``on`` (always, at the measured level) or a FACTOR on the
#: measured noise variance (a stronger or gentler denoising).
DENOISE_CHOICES: tuple[str, ...] = ("auto", "off", "on")


def parse_denoise(value: str | float) -> str | float:
    """``--denoise``: ``"auto"``, ``"off"``, ``"on"`` or a positive FACTOR (float); else a
    :class:`UsageError`."""
    v = str(value).strip().lower()
    if v in DENOISE_CHOICES:
        return v
    try:
        factor = float(v)
    except ValueError:
        factor = float("nan")
    if not (np.isfinite(factor) and factor > 0):
        raise UsageError(f"unknown --denoise {value!r}; expected auto, off, on or a factor > 0 (e.g. 0.5)")
    return factor


def auto_bright_gain(histogram: np.ndarray, pixels: int, thr: float = AUTO_BRIGHT_THR) -> float:
    """LibRaw's auto-brightness gain from the (3, 8192) histogram of the 16-bit linear output
    (value >> 3, per channel) of ``pixels`` pixels: the highest bin, over the channels, below
    which all but ``thr`` of the pixels lie (at least 32) is taken to white."""
    perc = pixels * thr
    t_white = 0
    for c in range(histogram.shape[0]):
        above = np.cumsum(histogram[c, ::-1])  # above[k]: pixels in bins >= 8191 - k
        val = 32
        for k in np.flatnonzero(above[: 8192 - 33] > perc)[:1]:
            val = 8191 - int(k)
        t_white = max(t_white, val)
    return 65536.0 / (8 * t_white)


def wb_gains(frame: RawFrame, wb: str, notice: Callable[[str], None] | None = None) -> np.ndarray:
    """R, G, B gains of white balance ``wb`` (camera / daylight / none), scaled so the smallest is 1
    (LibRaw's normalisation: the least amplified channel clips at the sensor's white)."""
    gains = {"camera": frame.wb_camera, "daylight": frame.wb_daylight, "none": np.ones(3)}[wb]
    if gains is None:
        fallback = frame.wb_daylight if wb == "camera" and frame.wb_daylight is not None else np.ones(3)
        if notice is not None:
            notice(f"the file has no {wb} white balance; using {'daylight' if fallback is frame.wb_daylight else 'none'}")
        gains = fallback
    return np.asarray(gains, dtype=np.float64) / float(np.min(gains))


def srgb_encode(linear: np.ndarray) -> np.ndarray:
    """The sRGB transfer curve (IEC 61966-2-1) on values in [0, 1]."""
    x = np.clip(linear, 0.0, 1.0)
    return np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1.0 / 2.4) - 0.055).astype(np.float32)


def srgb_decode(encoded: np.ndarray) -> np.ndarray:
    """Inverse of :func:`srgb_encode`."""
    x = np.clip(encoded, 0.0, 1.0)
    return np.where(x <= 0.04045, x / 12.92, np.power((x + 0.055) / 1.055, 2.4)).astype(np.float32)


def orient(image: np.ndarray, flip: int) -> np.ndarray:
    """Apply LibRaw's orientation code (bit 1: mirror columns, bit 2: mirror rows, bit 4: transpose,
    in that order, as dcraw's ``flip_index``) to an (H, W, C) image."""
    out = image
    if flip & 2:
        out = out[::-1]
    if flip & 1:
        out = out[:, ::-1]
    if flip & 4:
        out = out.transpose(1, 0, 2)
    return np.ascontiguousarray(out)


def balanced_mosaic(frame: RawFrame, wb: str = "camera", notice: Callable[[str], None] | None = None) -> np.ndarray:
    """The (H, W) float32 mosaic of ``frame`` with the white-balance gains of ``wb`` applied per
    site and clipped to [0, 1]: what :func:`develop` demosaicks, and the observation ``compare``
    and ``explain`` use for a camera RAW file (in camera RGB, stored order)."""
    from ..physics.sampling import CHANNEL

    gains = wb_gains(frame, check_choice(wb, WHITE_BALANCES, "--wb"), notice).astype(np.float32)
    balanced = frame.mosaic.copy()
    for k, colour in enumerate(frame.pattern):
        di, dj = divmod(k, 2)
        balanced[di::2, dj::2] *= gains[CHANNEL[colour]]
    np.clip(balanced, 0.0, 1.0, out=balanced)
    return balanced


def develop(
    frame: RawFrame,
    demosaic: Callable[[np.ndarray, str], np.ndarray],
    *,
    wb: str = "camera",
    output_space: str = "srgb",
    bright: str | float = DEFAULT_BRIGHT,
    notice: Callable[[str], None] | None = None,
) -> np.ndarray:
    """The developed (H', W', 3) float32 image in [0, 1] (oriented). ``demosaic(mosaic, pattern)``
    maps the (H, W) white-balanced mosaic to (H, W, 3) camera RGB (any of our methods).
    ``bright``: ``"auto"`` (LibRaw's default auto-brightness, :func:`auto_bright_gain`, over the
    picture less its 2-pixel edge), ``"none"`` or a linear factor; values above white are clipped
    (LibRaw's default highlight mode)."""
    wb = check_choice(wb, WHITE_BALANCES, "--wb")
    output_space = check_choice(output_space, OUTPUT_SPACES, "--output-space")
    bright = parse_bright(bright)
    balanced = balanced_mosaic(frame, wb, notice)
    rgb = np.asarray(demosaic(balanced, frame.pattern), dtype=np.float32)
    del balanced
    matrix = frame.rgb_cam if output_space != "camera" else None
    if output_space != "camera" and matrix is None and notice is not None:
        notice("LibRaw knows no colour matrix for this camera; its camera RGB is taken as sRGB, as LibRaw does")
    if not (rgb.flags.writeable and rgb.flags.c_contiguous):
        rgb = np.array(rgb, order="C")
    histogram = np.zeros((3, 8192), dtype=np.int64)
    for r0 in range(0, rgb.shape[0], 64):  # in place, a row block at a time: no full-size temporaries
        block = rgb[r0 : r0 + 64]
        np.clip(block, 0.0, 1.0, out=block)
        if matrix is not None:
            np.clip(block @ matrix.T.astype(np.float32), 0.0, 1.0, out=block)
        if bright == "auto":  # LibRaw's histogram (16-bit values >> 3), without the frame's edge
            inner = block[max(0, _EDGE - r0) : max(0, rgb.shape[0] - _EDGE - r0), _EDGE : rgb.shape[1] - _EDGE]
            bins = np.rint(inner.reshape(-1, 3) * 65535).astype(np.int64) >> 3
            for c in range(3):
                histogram[c] += np.bincount(bins[:, c], minlength=8192)
    gain = (auto_bright_gain(histogram, int(histogram[0].sum())) if bright == "auto"
            else 1.0 if bright == "none" else float(bright))
    for r0 in range(0, rgb.shape[0], 64):
        block = rgb[r0 : r0 + 64]
        if gain != 1.0:
            np.clip(block * np.float32(gain), 0.0, 1.0, out=block)  # highlights clip at white
        if output_space == "srgb":
            block[...] = srgb_encode(block)
    return orient(rgb, frame.flip)


# ----------------------------------------------------------------------------------------------
# DNG writer
# ----------------------------------------------------------------------------------------------

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


def linear_camera_rgb(frame: RawFrame, demosaic: Callable[[np.ndarray, str], np.ndarray], wb: str = "camera",
                      notice: Callable[[str], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The demosaicked linear camera RGB of ``frame`` *as shot* (H, W, 3) float32 in [0, 1], stored
    order, and the white-balance gains of ``wb``: the mosaic is demosaicked white-balanced (as
    :func:`develop` does: colour-difference methods need it) and the gains divided out again, so
    that a raw editor applies them itself from the DNG's AsShotNeutral."""
    rgb = np.asarray(demosaic(balanced_mosaic(frame, wb, notice), frame.pattern), dtype=np.float32)
    gains = wb_gains(frame, check_choice(wb, WHITE_BALANCES, "--wb"))  # balanced_mosaic said any fallback
    if not (rgb.flags.writeable and rgb.flags.c_contiguous):
        rgb = np.array(rgb, order="C")
    np.clip(rgb, 0.0, 1.0, out=rgb)
    rgb /= gains.astype(np.float32)
    return rgb, gains


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
