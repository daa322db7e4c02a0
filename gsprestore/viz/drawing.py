"""Drawing helpers for ``compare`` and ``explain``: colour maps, labelled tiles, montages, heat
maps with values and line plots, all with Pillow and numpy: image compositing rather than charts,
and matplotlib (the ``plots`` extra, 75 MB) is not a dependency of the core install for one line
plot (docs/architecture.md, "Libraries").

Arrays are float ``(H, W)`` or ``(H, W, 3)`` in [0, 1] unless a function says otherwise; images
returned are ``PIL.Image.Image`` in RGB mode. :func:`hardest_window` picks the crop ``compare``
zooms into.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from ..physics.tasks import is_mosaic

#: Viridis anchor colours (perceptually ordered, colour-blind safe), interpolated linearly.
VIRIDIS = np.array([(68, 1, 84), (72, 40, 120), (62, 74, 137), (49, 104, 142), (38, 130, 142),
                    (31, 158, 137), (53, 183, 121), (109, 205, 89), (180, 222, 44), (253, 231, 37)],
                   dtype=np.float64)
BACKGROUND = (255, 255, 255)
INK = (20, 20, 20)
#: Distinct line colours for plots (Okabe-Ito).
LINE_COLOURS = [(0, 114, 178), (213, 94, 0), (0, 158, 115), (204, 121, 167), (230, 159, 0), (86, 180, 233),
                (120, 120, 120), (240, 228, 66)]


def font(size: int = 13) -> ImageFont.ImageFont:
    """Pillow's bundled scalable font (falls back to the bitmap font without FreeType)."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - Pillow < 10.1
        return ImageFont.load_default()


def text_size(draw: ImageDraw.ImageDraw, text: str, fnt: ImageFont.ImageFont) -> tuple[int, int]:
    x0, y0, x1, y1 = draw.textbbox((0, 0), text, font=fnt)
    return x1 - x0, y1 - y0


#: Rows per block of the full-size conversions of ``compare`` (:func:`to_uint8`, the error map):
#: their float64 temporaries are a block's, not a 24-MP photo's (GBs).
ROW_BLOCK = 256


def to_uint8(a: np.ndarray) -> np.ndarray:
    """Float [0, 1] -> uint8 (clipped, rounded in float64); a single channel becomes grey RGB.
    Converted a block of rows at a time (no full-size float64 temporaries)."""
    a = np.asarray(a)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    out = np.empty(a.shape[:2] + (3,), dtype=np.uint8)
    for r0 in range(0, a.shape[0], ROW_BLOCK):
        block = np.asarray(a[r0:r0 + ROW_BLOCK], dtype=np.float64)
        block = np.rint(np.clip(block, 0.0, 1.0) * 255.0).astype(np.uint8)
        out[r0:r0 + ROW_BLOCK] = block[:, :, None] if block.ndim == 2 else block
    return out


def to_pil(a: np.ndarray) -> Image.Image:
    """A float image (or a uint8 RGB array) as an RGB ``PIL.Image``."""
    a = np.asarray(a)
    return Image.fromarray(a if a.dtype == np.uint8 and a.ndim == 3 else to_uint8(a), "RGB")


def colormap(values: np.ndarray, vmin: float = 0.0, vmax: float = 1.0) -> np.ndarray:
    """Map ``values`` (any shape) to viridis RGB uint8 (shape + (3,)), ``vmin`` -> dark purple,
    ``vmax`` -> yellow; NaN -> white."""
    v = np.asarray(values, dtype=np.float64)
    span = vmax - vmin if vmax > vmin else 1.0
    t = np.clip((v - vmin) / span, 0.0, 1.0) * (len(VIRIDIS) - 1)
    t = np.nan_to_num(t, nan=0.0)
    i = np.minimum(np.floor(t).astype(int), len(VIRIDIS) - 2)
    f = (t - i)[..., None]
    rgb = VIRIDIS[i] * (1 - f) + VIRIDIS[i + 1] * f
    rgb[np.isnan(v)] = 255.0
    return np.rint(rgb).astype(np.uint8)


def zoom(a: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour enlargement by an integer ``factor`` (pixels stay visible as blocks)."""
    factor = max(1, int(factor))
    return np.repeat(np.repeat(np.asarray(a), factor, axis=0), factor, axis=1)


def fit_width(img: Image.Image, width: int) -> Image.Image:
    """Scale ``img`` to ``width`` (nearest when enlarging by an integer, Lanczos when shrinking)."""
    if img.width == width:
        return img
    h = max(1, round(img.height * width / img.width))
    return img.resize((width, h), Image.NEAREST if width > img.width else Image.LANCZOS)


def labelled(img: Image.Image, lines: Sequence[str], size: int = 13) -> Image.Image:
    """``img`` with a white caption band of ``lines`` under it."""
    fnt = font(size)
    probe = ImageDraw.Draw(img)
    heights = [max(size, text_size(probe, s, fnt)[1]) + 4 for s in lines]
    width = max([img.width] + [text_size(probe, s, fnt)[0] + 8 for s in lines])
    out = Image.new("RGB", (width, img.height + sum(heights) + 4), BACKGROUND)
    out.paste(img, ((width - img.width) // 2, 0))
    d = ImageDraw.Draw(out)
    y = img.height + 3
    for s, h in zip(lines, heights):
        d.text((4, y), s, fill=INK, font=fnt)
        y += h
    return out


def draw_box(img: Image.Image, box: tuple[int, int, int, int], colour=(255, 0, 0), width: int = 2) -> Image.Image:
    """A copy of ``img`` with the rectangle ``box = (x, y, w, h)`` outlined."""
    out = img.copy()
    x, y, w, h = box
    ImageDraw.Draw(out).rectangle((x, y, x + w - 1, y + h - 1), outline=colour, width=width)
    return out


def grid(rows: Sequence[Sequence[Image.Image | None]], pad: int = 8, title: str | None = None) -> Image.Image:
    """Tiles laid out row by row (``None`` leaves a gap), each cell as wide as its column's
    widest tile, ``pad`` pixels apart, an optional title line on top."""
    ncols = max(len(r) for r in rows)
    colw = [max((r[c].width for r in rows if c < len(r) and r[c] is not None), default=0) for c in range(ncols)]
    rowh = [max((t.height for t in r if t is not None), default=0) for r in rows]
    top = 0
    if title:
        top = 24
    W = sum(colw) + pad * (ncols + 1)
    if title:
        probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
        W = max(W, text_size(probe, title, font(15))[0] + 2 * pad)
    H = top + sum(rowh) + pad * (len(rows) + 1)
    out = Image.new("RGB", (W, H), BACKGROUND)
    if title:
        ImageDraw.Draw(out).text((pad, 5), title, fill=INK, font=font(15))
    y = top + pad
    for r, h in zip(rows, rowh):
        x = pad
        for c in range(ncols):
            t = r[c] if c < len(r) else None
            if t is not None:
                out.paste(t, (x, y))
            x += colw[c] + pad
        y += h + pad
    return out


def colorbar(vmin: float, vmax: float, width: int = 256, label: str = "", height: int = 12) -> Image.Image:
    """A horizontal viridis scale from ``vmin`` to ``vmax`` with end values and a label."""
    ramp = colormap(np.tile(np.linspace(0.0, 1.0, width), (height, 1)), 0.0, 1.0)
    bar = Image.fromarray(ramp, "RGB")
    fnt = font(12)
    out = Image.new("RGB", (width + 2, height + 20), BACKGROUND)
    out.paste(bar, (1, 0))
    d = ImageDraw.Draw(out)
    d.text((1, height + 3), f"{vmin:.3g}", fill=INK, font=fnt)
    hi = f"{vmax:.3g}"
    d.text((width + 1 - text_size(d, hi, fnt)[0], height + 3), hi, fill=INK, font=fnt)
    if label:
        d.text(((width - text_size(d, label, fnt)[0]) // 2, height + 3), label, fill=INK, font=fnt)
    return out


def heatmap(values: np.ndarray, *, cell: int = 28, vmin: float | None = None, vmax: float | None = None,
            annotate: bool = True, fmt: str = "{:.2f}", highlight: tuple[int, int] | None = None) -> Image.Image:
    """A small matrix as a grid of viridis cells of ``cell`` pixels, each with its value written
    in it (dark text on light cells, light text on dark ones); ``highlight`` (row, col) outlines a cell."""
    v = np.asarray(values, dtype=np.float64)
    lo = float(np.nanmin(v)) if vmin is None else vmin
    hi = float(np.nanmax(v)) if vmax is None else vmax
    rgb = zoom(colormap(v, lo, hi), cell)
    img = Image.fromarray(rgb, "RGB")
    if annotate:
        d = ImageDraw.Draw(img)
        fnt = font(max(8, cell // 3))
        span = hi - lo if hi > lo else 1.0
        for (r, c), val in np.ndenumerate(v):
            s = fmt.format(val)
            tw, th = text_size(d, s, fnt)
            light = (val - lo) / span > 0.55
            d.text((c * cell + (cell - tw) // 2, r * cell + (cell - th) // 2 - 1), s,
                   fill=(0, 0, 0) if light else (255, 255, 255), font=fnt)
    if highlight is not None:
        r, c = highlight
        ImageDraw.Draw(img).rectangle((c * cell, r * cell, (c + 1) * cell - 1, (r + 1) * cell - 1),
                                      outline=(255, 0, 0), width=2)
    return img


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step + 1e-9) + 1)]


def line_plot(series: dict[str, Sequence[float]], *, title: str = "", xlabel: str = "iteration",
              ylabel: str = "", log_y: bool = True, size: tuple[int, int] = (480, 300),
              x_values: Sequence[float] | None = None) -> Image.Image:
    """A line plot of named series (same x: 1, 2, ... or ``x_values``), log10 y axis by default
    (non-positive values are dropped there), with axes, ticks, a legend and a title."""
    W, H = size
    left, right, top, bottom = 64, 12, 26 if title else 10, 40
    img = Image.new("RGB", (W, H), BACKGROUND)
    d = ImageDraw.Draw(img)
    fnt = font(12)
    pts: dict[str, list[tuple[float, float]]] = {}
    for name, ys in series.items():
        xs = list(x_values) if x_values is not None else list(range(1, len(ys) + 1))
        p = [(float(x), float(y)) for x, y in zip(xs, ys) if math.isfinite(float(y)) and (float(y) > 0 or not log_y)]
        pts[name] = [(x, math.log10(y) if log_y else y) for x, y in p]
    allp = [q for p in pts.values() for q in p]
    if not allp:
        d.text((left, H // 2), "(no finite values)", fill=INK, font=fnt)
        return img
    x0, x1 = min(q[0] for q in allp), max(q[0] for q in allp)
    y0, y1 = min(q[1] for q in allp), max(q[1] for q in allp)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.5, y1 + 0.5
    margin = 0.05 * (y1 - y0)
    y0, y1 = y0 - margin, y1 + margin
    pw, ph = W - left - right, H - top - bottom

    def px(x: float, y: float) -> tuple[float, float]:
        return left + (x - x0) / (x1 - x0) * pw, top + (1 - (y - y0) / (y1 - y0)) * ph

    d.rectangle((left, top, left + pw, top + ph), outline=INK)
    for ty in _nice_ticks(y0, y1, 5):
        _, yy = px(x0, ty)
        d.line((left - 4, yy, left + pw, yy), fill=(225, 225, 225))
        d.line((left - 4, yy, left, yy), fill=INK)
        s = f"1e{ty:g}" if log_y and float(ty).is_integer() else (f"{10 ** ty:.2g}" if log_y else f"{ty:.3g}")
        tw, th = text_size(d, s, fnt)
        d.text((left - 6 - tw, yy - th / 2 - 2), s, fill=INK, font=fnt)
    xticks = _nice_ticks(x0, x1, 8)
    if all(float(q[0]).is_integer() for q in allp):
        xticks = [t for t in xticks if float(t).is_integer()] or xticks
    for tx in xticks:
        xx, _ = px(tx, y0)
        d.line((xx, top + ph, xx, top + ph + 4), fill=INK)
        s = f"{tx:g}"
        tw, _ = text_size(d, s, fnt)
        d.text((xx - tw / 2, top + ph + 6), s, fill=INK, font=fnt)
    lab = xlabel
    d.text((left + (pw - text_size(d, lab, fnt)[0]) / 2, H - 16), lab, fill=INK, font=fnt)
    if title or ylabel:
        head = title or ylabel
        d.text((left, 4), head + (" (log scale)" if log_y else ""), fill=INK, font=font(13))
    ly = top + 6
    for k, (name, p) in enumerate(pts.items()):
        colour = LINE_COLOURS[k % len(LINE_COLOURS)]
        xy = [px(x, y) for x, y in p]
        if len(xy) > 1:
            d.line(xy, fill=colour, width=2)
        for xx, yy in xy:
            d.ellipse((xx - 2.5, yy - 2.5, xx + 2.5, yy + 2.5), fill=colour)
        tw, th = text_size(d, name, fnt)
        lx = left + pw - tw - 30
        d.line((lx, ly + 7, lx + 20, ly + 7), fill=colour, width=3)
        d.text((lx + 24, ly), name, fill=INK, font=fnt)
        ly += th + 6
    return img


def hardest_window(error: np.ndarray, size: int | tuple[int, int]) -> tuple[int, int, int, int]:
    """The ``(x, y, w, h)`` window (``size`` pixels, or (w, h)) where the mean of ``error`` ``(H, W)``
    is largest, by an integral image over every position (ties: the first in raster order)."""
    e = np.asarray(error)
    if e.ndim == 3:
        e = e.mean(axis=2)
    H, W = e.shape
    w, h = (size, size) if isinstance(size, int) else size
    w, h = max(1, min(w, W)), max(1, min(h, H))
    S = np.zeros((H + 1, W + 1))  # the integral image, float64, built in place (no temporaries)
    np.cumsum(e, axis=0, dtype=np.float64, out=S[1:, 1:])
    np.cumsum(S[1:, 1:], axis=1, out=S[1:, 1:])
    best, at = -np.inf, (0, 0)
    for y0 in range(0, H - h + 1, ROW_BLOCK):  # the window sums a block of rows at a time
        y1 = min(H - h + 1, y0 + ROW_BLOCK)
        sums = S[y0 + h:y1 + h, w:] - S[y0:y1, w:] - S[y0 + h:y1 + h, :-w] + S[y0:y1, :-w]
        k = int(np.argmax(sums))
        if sums.flat[k] > best:  # strictly: ties keep the first in raster order
            best, at = sums.flat[k], (y0 + k // sums.shape[1], k % sums.shape[1])
    y, x = at
    return int(x), int(y), int(w), int(h)


def save_png(img: Image.Image, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``img`` atomically through :func:`gsprestore.imageio.images.write_image` (8-bit PNG)."""
    from ..imageio.images import write_image

    a = np.asarray(img.convert("RGB"), dtype=np.float32) / np.float32(255.0)
    return write_image(path, a, 8, overwrite=overwrite)


__all__ = [
    "colorbar",
    "colormap",
    "compare",
    "compare_montage",
    "crop_size_for",
    "draw_box",
    "fit_width",
    "font",
    "grid",
    "hardest_window",
    "heatmap",
    "labelled",
    "line_plot",
    "save_png",
    "to_pil",
    "to_uint8",
    "zoom",
]


# ----------------------------------------------------------------------------------------------
# compare: ground truth and each method side by side
# ----------------------------------------------------------------------------------------------


def crop_size_for(height: int, width: int) -> int:
    """Side of the automatic zoom window: a quarter of the short side, between 16 and 96 pixels."""
    return int(max(16, min(96, min(height, width) // 4, min(height, width))))


def compare_montage(
    results: dict[str, np.ndarray],
    *,
    reference: np.ndarray | None = None,
    observed: np.ndarray | None = None,
    scores: dict[str, dict[str, float]] | None = None,
    crop: tuple[int, int, int, int] | None = None,
    thumb: int = 256,
    title: str = "",
    space: str = "rgb",
) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """The ``compare`` montage. ``results`` name -> ``(H, W, C)`` float output; ``reference`` the
    ground truth (None: no scores, no error maps); ``observed`` the input shown in the first column
    when there is no reference. Row 1: whole images (scaled to ``thumb`` pixels wide) with the
    zoom window outlined; row 2: that window enlarged; row 3 (with a reference): per-method absolute
    error of the window (mean over channels), one colour scale for all, with its colour bar.
    ``space`` is the channel space of the window PSNR (that of ``scores``: "rgb" or "y"). ``crop`` (x, y, w, h)
    or None: the window where the methods' mean error is largest (with a reference) or where they
    disagree most (without). Returns the montage and the window used."""
    names = list(results)
    first = next(iter(results.values()))
    H, W = first.shape[:2]
    if crop is None:
        side = crop_size_for(H, W)
        err = _window_error(results, reference)
        if not np.any(err > 0):
            crop = ((W - side) // 2, (H - side) // 2, min(side, W), min(side, H))
        else:
            crop = hardest_window(err, side)
    x, y, w, h = crop
    tw = min(thumb, W) if W >= thumb // 2 else thumb
    s = tw / W
    box = (int(round(x * s)), int(round(y * s)), max(3, int(round(w * s))), max(3, int(round(h * s))))
    zf = max(1, thumb // max(w, h))

    def full(a: np.ndarray) -> Image.Image:
        return draw_box(fit_width(to_pil(a), tw), box)

    def window(a: np.ndarray) -> np.ndarray:
        return a[y : y + h, x : x + w]

    def rgb(a: np.ndarray) -> np.ndarray:
        return np.repeat(a, 3, axis=2) if a.ndim == 3 and a.shape[2] == 1 else a

    row1: list[Image.Image | None] = []
    row2: list[Image.Image | None] = []
    row3: list[Image.Image | None] = []
    if reference is not None:
        row1.append(labelled(full(rgb(reference)), ["ground truth", f"{W}x{H}"]))
        row2.append(labelled(to_pil(zoom(rgb(window(reference)), zf)), [f"window x,y,w,h = {x},{y},{w},{h}"]))
    elif observed is not None:
        obs = rgb(observed)
        if obs.shape[:2] != (H, W):  # low-resolution input: nearest-neighbour up to the output grid
            f = max(1, round(H / obs.shape[0]))
            obs = zoom(obs, f)[:H, :W]
        row1.append(labelled(full(obs), ["input (no reference)", f"{W}x{H}"]))
        row2.append(labelled(to_pil(zoom(window(obs), zf)), [f"window x,y,w,h = {x},{y},{w},{h}"]))
    errs = {}
    if reference is not None:
        errs = {n: np.abs(window(results[n]) - window(reference)).mean(axis=2) for n in names}
        vmax = max(float(np.percentile(e, 99.5)) for e in errs.values())
        vmax = vmax if vmax > 0 else 1.0
        row3.append(colorbar(0.0, vmax, min(200, thumb), "|error|, shared scale"))
    for n in names:
        sc = (scores or {}).get(n)
        lines = [n] + ([f"PSNR {sc['psnr']:.2f} dB" + (f"  SSIM {sc['ssim']:.4f}" if "ssim" in sc else "")]
                       if sc else [])
        row1.append(labelled(full(rgb(results[n])), lines))
        wl = [n]
        if reference is not None:
            m = _window_mse(window(results[n]), window(reference), space)
            wl.append(f"window PSNR {10 * math.log10(1 / m) if m > 0 else float('inf'):.2f} dB")
        row2.append(labelled(to_pil(zoom(rgb(window(results[n])), zf)), wl))
        if reference is not None:
            e = errs[n]
            row3.append(labelled(Image.fromarray(colormap(zoom(e, zf), 0.0, vmax), "RGB"),
                                 [f"{n}: |error|", f"mean {e.mean():.4f}"]))
    rows = [row1, row2] + ([row3] if row3 else [])
    return grid(rows, title=title or None), (x, y, w, h)


def _window_error(results: dict[str, np.ndarray], reference: np.ndarray | None) -> np.ndarray:
    """The ``(H, W)`` map the zoom window is chosen on: the methods' mean absolute error (over
    channels and methods) with a reference, else their spread (standard deviation of the channel
    means; zero for one method). Built a block of rows at a time: one float32 map, no stack of
    full-size copies."""
    arrays = list(results.values())
    H, W = arrays[0].shape[:2]
    err = np.zeros((H, W), dtype=np.float32)
    if reference is None and len(arrays) < 2:
        return err
    for r0 in range(0, H, ROW_BLOCK):
        rows = slice(r0, r0 + ROW_BLOCK)
        if reference is not None:
            err[rows] = np.mean([np.abs(r[rows] - reference[rows]).mean(axis=2) for r in arrays], axis=0)
        else:
            err[rows] = np.std(np.stack([r[rows].mean(axis=2) for r in arrays]), axis=0)
    return err


def _window_mse(out: np.ndarray, ref: np.ndarray, space: str) -> float:
    """MSE of a window in the scores' channel space (``metrics.to_space``: RGB or BT.601 luma)."""
    import torch

    from ..metrics import mse, to_space

    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).permute(2, 0, 1)[None]  # noqa: E731
    return float(mse(to_space(t(out), space), to_space(t(ref), space))[0])


def compare(
    image: np.ndarray,
    task: str,
    methods: Sequence[str],
    *,
    pattern: str = "RGGB",
    reference: bool = True,
    crop: tuple[int, int, int, int] | None = None,
    weights: dict[str, str] | None = None,
    skip_unavailable: bool = False,
    notice=None,
    device: str = "auto",
    tile: int = 0,
    restorers: dict | None = None,
) -> tuple[Image.Image, dict]:
    """Run ``methods`` through the tiled engine (:func:`gsprestore.runtime.tiling.restore`) on ``image``
    ``(H, W, C)`` and build :func:`compare_montage`. ``demosaic``: an RGB ``image`` is the ground
    truth (mosaicked with ``pattern``), a 1-channel one is the mosaic (no scores); ``upscale2x``:
    the high-resolution ground truth (``HR[0::2, 0::2]`` is the input), or with
    ``reference=False`` the low-resolution input itself. Scores: :func:`gsprestore.metrics.image_scores`
    (RGB for demosaicking, BT.601 luma for 2x of a colour image). A method that cannot be built or run
    raises :class:`~gsprestore.core.errors.GspError` naming it, or with ``skip_unavailable`` is left out
    after a ``notice``. Returns the montage and a summary dict (scores, window, skipped methods)."""
    import torch

    from ..runtime.tiling import restore
    from ..core.errors import GspError, UsageError
    from ..metrics import image_scores
    from ..methods.registry import check_task, get_restorer, method_spec
    from ..physics.sampling import check_pattern, mosaic
    from ..methods.self_ensemble import split_label

    check_task(task)
    if not methods:
        raise UsageError("--methods needs at least one method")
    for m in methods:
        method_spec(split_label(m)[0], task)
    img = np.asarray(image, dtype=np.float32)
    if img.ndim == 2:
        img = img[:, :, None]
    gt = None
    if is_mosaic(task):
        pattern = check_pattern(pattern)
        if img.shape[2] == 3 and reference:
            gt = img
            y = mosaic(torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1), pattern)
        elif img.shape[2] == 1:
            y = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)
        else:
            raise UsageError(f"demosaicking compare needs an RGB reference or a 1-channel mosaic, got {img.shape[2]} channels")
    else:
        if reference:
            Hh, Ww = img.shape[0] - img.shape[0] % 2, img.shape[1] - img.shape[1] % 2
            gt = img[:Hh, :Ww]
            y = torch.from_numpy(np.ascontiguousarray(gt[0::2, 0::2])).permute(2, 0, 1)
        else:
            y = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)
    results: dict[str, np.ndarray] = {}
    scores: dict[str, dict[str, float]] = {}
    skipped: dict[str, str] = {}
    for m in methods:
        try:
            r = (restorers or {}).get(m)
            if r is None:
                base, ensembled = split_label(m)  # "ugtv+se": ugtv as its self-ensemble
                opts = {"weights": weights[base]} if weights and base in weights else {}
                r = get_restorer(base, task, self_ensemble=ensembled, **opts)
            out = restore(r, y, pattern, device=device, tile=tile).numpy()
        except GspError as exc:
            if not skip_unavailable:
                raise GspError(f"method {m}: {exc}") from None
            skipped[m] = str(exc)
            if notice is not None:
                notice(f"skipping {m}: {exc}")
            continue
        results[m] = out
        if gt is not None:
            space = "y" if not is_mosaic(task) and gt.shape[2] == 3 else "rgb"
            t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)[None]  # noqa: E731
            sc = image_scores(t(out), t(gt), space)
            scores[m] = {k: float(v[0]) for k, v in sc.items()}
    if not results:
        raise GspError("no method could run: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    H, W = next(iter(results.values())).shape[:2]
    if crop is not None:
        cx, cy, cw, ch = crop
        if cx + cw > W or cy + ch > H:
            raise UsageError(f"--crop {cx},{cy},{cw},{ch} leaves the {W}x{H} output")
    observed = y.permute(1, 2, 0).numpy() if gt is None else None
    space = "" if gt is None else (" (scores on luma Y)" if not is_mosaic(task) and gt.shape[2] == 3 else " (scores on RGB)")
    title = f"{task}" + (f", pattern {pattern}" if is_mosaic(task) else "") + space
    montage, window = compare_montage(results, reference=gt, observed=observed, scores=scores or None,
                                      crop=crop, title=title,
                                      space="y" if gt is not None and not is_mosaic(task) and gt.shape[2] == 3
                                      else "rgb")
    return montage, {"task": task, "pattern": pattern if is_mosaic(task) else None, "window": window,
                     "scores": scores, "skipped": skipped, "methods": list(results)}
