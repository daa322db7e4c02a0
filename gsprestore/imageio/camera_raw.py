"""Camera RAW files (DNG, CR2, NEF, ARW, RAF, ...) in, read through rawpy (LibRaw). Developing
the mosaic is :mod:`.raw_develop`; writing DNG files, :mod:`.dng`.

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

:func:`is_camera_raw` says whether a file is taken as one (by its suffix and its content).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..core.errors import GspError
from .images import Reserve, existing_file


RAW_SUFFIXES: tuple[str, ...] = (
    ".dng", ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2", ".raf", ".orf", ".rw2",
    ".pef", ".srw", ".rwl", ".3fr", ".fff", ".iiq", ".erf", ".kdc", ".dcr", ".mrw", ".mos", ".x3f",
)


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
    s = raw.sizes
    h, w = int(s.height), int(s.width)
    need = int(s.raw_height) * int(s.raw_width) * 2 + h * w * (1 + 4)
    need += reserve(h, w, 1) if reserve is not None else 0
    _refuse_short_memory(need, h, w, path)


def _refuse_short_memory(need: int, h: int, w: int, path: str | Path) -> None:
    from ..core.memory import available_memory, gib

    have = available_memory()
    if need > have:
        raise GspError(f"not enough memory to read the {w}x{h} camera RAW file and work on it (about {gib(need)} "
                       f"needed, {gib(have)} available)", path)


def check_raw_reserve(frame: RawFrame, path: str | Path, reserve: Reserve | None) -> None:
    """For a frame decoded before its caller knew its needs (a prefetch): refuse it, as
    :func:`read_raw` would have from the header, when what the caller needs now (``reserve``)
    does not fit in the available memory."""
    if reserve is not None:
        h, w = frame.mosaic.shape
        _refuse_short_memory(reserve(h, w, 1), h, w, path)


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
