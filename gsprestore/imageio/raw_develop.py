"""Developing a camera RAW frame (:class:`gsprestore.imageio.camera_raw.RawFrame`) with any of our
demosaickers, and the development options' values (``--wb``, ``--output-space``, ``--bright``,
``--denoise``) checked.

:func:`develop` is the pipeline, in LibRaw's order so that its output can serve as the oracle:
white-balance gains on the mosaic (normalised so the smallest is 1, then clipped at 1, as LibRaw's
``scale_colors`` does: demosaicking white-balanced data keeps colour-difference methods and the
learned models, trained on balanced images, in their element), then the demosaicker, then the
camera-to-sRGB matrix (``--output-space srgb`` or ``linear``; ``camera`` keeps the white-balanced
camera RGB), then the brightness (``bright``: LibRaw's auto-brightness by default, the 99th
percentile of the brightest channel to white; highlights clipped, LibRaw's default ``-H 0``), then
the sRGB transfer curve (``srgb`` only), then the orientation. :func:`linear_camera_rgb` stops
after the demosaicker, for a linear DNG (:func:`gsprestore.imageio.dng.write_linear_dng`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..core.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from .camera_raw import RawFrame


WHITE_BALANCES: tuple[str, ...] = ("camera", "daylight", "none")


OUTPUT_SPACES: tuple[str, ...] = ("srgb", "linear", "camera")


#: ``--bright``: ``auto`` (LibRaw's and dcraw's default auto-brightness), ``none`` (the sensor's
#: white level is white) or a FACTOR multiplying the linear values.
DEFAULT_BRIGHT = "auto"


#: LibRaw's ``auto_bright_thr``: auto-brightness scales so that this fraction of the pixels, in the
#: brightest channel, clips.
AUTO_BRIGHT_THR = 0.01


def check_choice(value: str, choices: tuple[str, ...], option: str) -> str:
    """``value`` lower-cased if it is one of ``choices``, else a :class:`UsageError` (exit 2)."""
    v = str(value).lower()
    if v not in choices:
        raise UsageError(f"unknown {option} {value!r}; expected {', '.join(choices)}")
    return v


#: Pixels of the frame's edge that auto-brightness does not count: there each demosaicker
#: extrapolates in its own way (our bilinear mixes colours in the outermost pixel, as
#: colour-demosaicing does; LibRaw's LINEAR averages neighbours), and a few wrong pixels there
#: must not set the brightness of the picture.
_EDGE = 2


def _word_or_factor(value: str | float, words: tuple[str, ...], option: str, example: str) -> str | float:
    """``value`` lower-cased if it is one of ``words``, else a positive finite FACTOR (float); else a
    :class:`UsageError` naming ``option`` (``--bright``, ``--denoise``)."""
    v = str(value).strip().lower()
    if v in words:
        return v
    try:
        factor = float(v)
    except ValueError:
        factor = float("nan")
    if not (np.isfinite(factor) and factor > 0):
        raise UsageError(f"unknown {option} {value!r}; expected {', '.join(words)} or a factor > 0 (e.g. {example})")
    return factor


def parse_bright(value: str | float) -> str | float:
    """``--bright``: ``"auto"``, ``"none"`` or a positive FACTOR (float); else a :class:`UsageError`."""
    return _word_or_factor(value, ("auto", "none"), "--bright", "1.5")


#: ``--denoise``: ``auto`` (denoise a camera RAW file the noise estimate finds noisy, with the
#: noise-aware network), ``off``, ``on`` (always, at the measured level) or a FACTOR on the
#: measured noise variance (a stronger or gentler denoising).
DENOISE_CHOICES: tuple[str, ...] = ("auto", "off", "on")


def parse_denoise(value: str | float) -> str | float:
    """``--denoise``: ``"auto"``, ``"off"``, ``"on"`` or a positive FACTOR (float); else a
    :class:`UsageError`."""
    return _word_or_factor(value, DENOISE_CHOICES, "--denoise", "0.5")


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


#: :func:`develop` works on the image this many rows at a time.
ROWS_PER_BLOCK = 64


def _blocks(fn: Callable[[int], None], height: int) -> None:
    """``fn(r0)`` for every row block's first row, on up to two of the process's CPUs (the blocks
    are memory-bound)."""
    from ..core.process import thread_map, usable_cpus

    thread_map(fn, range(0, height, ROWS_PER_BLOCK), min(2, usable_cpus()))


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
    height = rgb.shape[0]
    to_srgb = None if matrix is None else matrix.T.astype(np.float32)

    histogram = np.zeros((3, 8192), dtype=np.int64)
    counting = threading.Lock()

    def first(r0: int) -> None:  # clip, colour matrix, LibRaw's histogram (16-bit >> 3) less the edge
        block = rgb[r0 : r0 + ROWS_PER_BLOCK]
        np.clip(block, 0.0, 1.0, out=block)
        if to_srgb is not None:
            np.clip(block @ to_srgb, 0.0, 1.0, out=block)
        if bright == "auto":
            inner = block[max(0, _EDGE - r0) : max(0, height - _EDGE - r0), _EDGE : rgb.shape[1] - _EDGE]
            bins = np.rint(inner.reshape(-1, 3) * 65535).astype(np.int64) >> 3
            counts = [np.bincount(bins[:, c], minlength=8192) for c in range(3)]
            with counting:  # integer counts: the sum is the same in any order
                for c in range(3):
                    histogram[c] += counts[c]

    # in place, a row block at a time (no full-size temporaries), the blocks on the process's CPUs
    # (numpy releases the GIL; every block's result is the same whatever the thread count)
    _blocks(first, height)
    gain = (auto_bright_gain(histogram, int(histogram[0].sum())) if bright == "auto"
            else 1.0 if bright == "none" else float(bright))

    def second(r0: int) -> None:
        block = rgb[r0 : r0 + ROWS_PER_BLOCK]
        if gain != 1.0:
            np.clip(block * np.float32(gain), 0.0, 1.0, out=block)  # highlights clip at white
        if output_space == "srgb":
            block[...] = srgb_encode(block)

    _blocks(second, height)
    return orient(rgb, frame.flip)


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
