"""The bundled sample image: a generated, redistributable 256x256 test chart.

Four quadrants, each drawn analytically at 4x and box-filtered down (anti-aliased, like a camera
with an optical low-pass filter): the 24 ColorChecker patches (sRGB values from the published
chart), a coloured circular zone plate (frequencies up to ~0.3 cycles/pixel: the aliasing test
for demosaicking), a two-colour Siemens star, and slanted edges over smooth colour ramps; then a mild Gaussian blur
(the lens).
``gsprestore/data/chart.png`` is :func:`make_chart` written as 8-bit PNG (the test suite checks
that they agree), so the demo needs no generation step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHART_FILE = "chart.png"
SIZE = 256

# ColorChecker Classic, 8-bit sRGB (X-Rite/BabelColor averages), row by row
COLORCHECKER = np.array([
    (115, 82, 68), (194, 150, 130), (98, 122, 157), (87, 108, 67), (133, 128, 177), (103, 189, 170),
    (214, 126, 44), (80, 91, 166), (193, 90, 99), (94, 60, 108), (157, 188, 64), (224, 163, 46),
    (56, 61, 150), (70, 148, 73), (175, 54, 60), (231, 199, 31), (187, 86, 149), (8, 133, 161),
    (243, 243, 242), (200, 200, 200), (160, 160, 160), (122, 122, 121), (85, 85, 85), (52, 52, 52),
], dtype=np.float64) / 255.0


def _grid(n: int, ss: int) -> tuple[np.ndarray, np.ndarray]:
    """Supersampled pixel-centre coordinates of an n x n quadrant, in pixels."""
    c = (np.arange(n * ss) + 0.5) / ss
    return np.meshgrid(c, c, indexing="ij")


def _down(a: np.ndarray, ss: int) -> np.ndarray:
    n = a.shape[0] // ss
    return a.reshape(n, ss, n, ss, -1).mean(axis=(1, 3))


def _patches(n: int, ss: int) -> np.ndarray:
    y, x = _grid(n, ss)
    out = np.full(y.shape + (3,), 0.2)
    pw, ph, gap, top = n / 6, (n - 16) / 4, 2.0, 8.0
    col = np.floor(x / pw).astype(int)
    row = np.floor((y - top) / ph).astype(int)
    inside = (row >= 0) & (row < 4) & ((x % pw) >= gap) & (((y - top) % ph) >= gap)
    idx = np.clip(row, 0, 3) * 6 + np.clip(col, 0, 5)
    out[inside] = COLORCHECKER[idx[inside]]
    return out


def _zone_plate(n: int, ss: int) -> np.ndarray:
    y, x = _grid(n, ss)
    r2 = (x - n / 2) ** 2 + (y - n / 2) ** 2
    k = 0.3 / n  # local frequency r * 2k reaches 0.3 cycles/pixel at the corners' inscribed circle
    phase = np.pi * k * r2
    base = 0.5 + 0.4 * np.cos(phase)
    tint = np.stack([0.85 + 0.15 * np.cos(phase / 3), np.ones_like(phase), 0.8 + 0.2 * np.sin(phase / 5)], -1)
    return np.clip(base[..., None] * tint, 0, 1)


def _star(n: int, ss: int) -> np.ndarray:
    y, x = _grid(n, ss)
    theta = np.arctan2(y - n / 2, x - n / 2)
    r = np.hypot(y - n / 2, x - n / 2)
    spokes = (np.sin(12 * theta) > 0)[..., None]
    a, b = np.array([0.85, 0.15, 0.1]), np.array([0.1, 0.35, 0.85])
    out = np.where(spokes, a, b)
    out[r > n / 2 - 4] = (0.75, 0.75, 0.7)
    out[r < 16] = (0.5, 0.5, 0.5)
    return out


def _edges(n: int, ss: int) -> np.ndarray:
    y, x = _grid(n, ss)
    ramp = np.stack([x / n, 0.3 + 0.4 * y / n, 1 - x / n], -1)
    out = 0.15 + 0.7 * ramp
    slant = np.tan(np.deg2rad(5.0))
    left = x - n / 2 < (y - n / 2) * slant
    upper = y < n / 2
    out[upper & left] = (0.9, 0.9, 0.88)
    out[upper & ~left] = (0.08, 0.08, 0.1)
    # thin lines (1 to 3 px) of saturated colours in the lower half
    for k, (w, colour) in enumerate([(1, (0.9, 0.1, 0.1)), (2, (0.1, 0.8, 0.2)), (3, (0.1, 0.2, 0.9))]):
        x0 = 20 + 36 * k
        line = (~upper) & (x - (y - n) * slant >= x0) & (x - (y - n) * slant < x0 + w)
        out[line] = colour
    return out


def _blur(a: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur (edge-replicated): the lens of the simulated camera."""
    r = int(np.ceil(3 * sigma))
    k = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    k /= k.sum()
    for axis in (0, 1):
        pad = [(r, r) if d == axis else (0, 0) for d in range(a.ndim)]
        p = np.pad(a, pad, mode="edge")
        a = sum(w * np.take(p, np.arange(i, i + a.shape[axis]), axis=axis) for i, w in enumerate(k))
    return a


def make_chart(size: int = SIZE, supersample: int = 4, blur: float = 0.7) -> np.ndarray:
    """The test chart, float32 ``(size, size, 3)`` in [0, 1] (size a multiple of 2), with a
    Gaussian optical blur of ``blur`` pixels (0 for none)."""
    if size % 2:
        raise ValueError("chart size must be even")
    n = size // 2
    quads = [_patches(n, supersample), _zone_plate(n, supersample), _star(n, supersample), _edges(n, supersample)]
    q = [_down(a, supersample) for a in quads]
    top = np.concatenate([q[0], q[1]], axis=1)
    bottom = np.concatenate([q[2], q[3]], axis=1)
    img = np.concatenate([top, bottom], axis=0)
    if blur > 0:
        img = _blur(img, blur)
    return np.clip(img, 0, 1).astype(np.float32)


def chart_path() -> Path:
    """Path of the bundled chart PNG (inside the installed package)."""
    return Path(__file__).resolve().parents[1] / "data" / CHART_FILE


def load_chart() -> np.ndarray:
    """The bundled chart as float32 ``(H, W, 3)``; generated on the fly if the file is missing."""
    from .images import read_image

    path = chart_path()
    if path.exists():
        return read_image(path).array
    return np.rint(make_chart() * 255.0).astype(np.float32) / 255.0


def write_chart(path: str | Path | None = None, *, overwrite: bool = True) -> Path:
    """Write :func:`make_chart` as an 8-bit PNG (default: the bundled location)."""
    from .images import write_image

    return write_image(path or chart_path(), make_chart(), 8, overwrite=overwrite,
                       text={"Software": "gsprestore chart", "Description": "generated test chart"})


#: The classical method the learned models of each task are compared with on the chart.
CHART_BASELINE = {"demosaic": "malvar", "upscale2x": "bicubic"}


def chart_psnr(restorer, task: str) -> float:
    """PSNR (dB) of ``restorer`` on the bundled chart, with the paper's observation and channel
    space: RGB for demosaicking (RGGB mosaic of the chart), BT.601 Y for 2x interpolation
    (``chart[0::2, 0::2]`` upscaled). Float output, not clipped (dataset-MSE PSNR of one image)."""
    from ..physics.tasks import restored_psnr

    return restored_psnr(restorer, task, load_chart())
