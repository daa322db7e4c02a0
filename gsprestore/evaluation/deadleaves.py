"""Dead-leaves test images: a generated stand-in for natural photographs.

The dead-leaves model (Matheron 1968; Lee, Mumford & Huang, "Occlusion models for natural images",
IJCV 2001) stacks opaque discs of random position and colour, front to back, until the plane is
covered. With disc radii drawn from a density proportional to r^-3 the image is scale invariant and
has the 1/f^2 power spectrum, sharp occlusion edges and flat regions of natural photographs, which
is why camera test charts (ISO 19567-2 texture, DxO "dead leaves") use it to measure detail and
interpolation artefacts.

Colours here are drawn like those of natural scenes: a luminance level uniform in
``[0.1, 0.9]`` plus a small independent offset per channel (``chroma``), so the three channels are
strongly but not perfectly correlated, the statistic every demosaicker relies on. Each image is
drawn analytically at ``supersample`` x the resolution and box-filtered down (anti-aliased, like a
camera with an optical low-pass filter). The same seed gives the same image on every machine
(NumPy's PCG64 generator), so tests can make their own images instead of shipping photographs.
"""

from __future__ import annotations

import numpy as np


def disc_radius(u, r_min: float, r_max: float):
    """Inverse CDF of the radius density ``p(r) ~ r^-3`` on ``[r_min, r_max]`` at ``u`` in [0, 1):
    ``P(R <= r) = (r_min^-2 - r^-2) / (r_min^-2 - r_max^-2)``."""
    a, b = r_min ** -2.0, r_max ** -2.0
    return (a - np.asarray(u) * (a - b)) ** -0.5


def dead_leaves(size: int = 128, *, seed: int = 0, supersample: int = 4, r_min: float = 2.0,
                r_max: float = 40.0, chroma: float = 0.15, max_discs: int = 5000) -> np.ndarray:
    """A dead-leaves image, float32 ``(size, size, 3)`` in [0, 1].

    Discs (radii in pixels, density ~ r^-3 on ``[r_min, r_max]``) are placed uniformly with their
    centre in the image and drawn front to back: each paints only the samples no earlier disc
    covers. Drawing stops when every sample is covered or after ``max_discs`` discs (the rest of
    the background stays mid grey). ``chroma`` is the half-range of the per-channel colour offset
    (0: grey discs)."""
    if size < 2 or supersample < 1 or not 0 < r_min <= r_max:
        raise ValueError("dead_leaves needs size >= 2, supersample >= 1 and 0 < r_min <= r_max")
    rng = np.random.default_rng(seed)
    n = size * supersample
    img = np.full((n, n, 3), 0.5)
    free = np.ones((n, n), dtype=bool)
    coords = (np.arange(n) + 0.5) / supersample
    for _ in range(max_discs):
        r = float(disc_radius(rng.random(), r_min, r_max))
        cy, cx = rng.random(2) * size
        colour = np.clip(0.1 + 0.8 * rng.random() + chroma * (2.0 * rng.random(3) - 1.0), 0.0, 1.0)
        lo_y, hi_y = np.searchsorted(coords, [cy - r, cy + r])
        lo_x, hi_x = np.searchsorted(coords, [cx - r, cx + r])
        yy = coords[lo_y:hi_y, None] - cy
        xx = coords[None, lo_x:hi_x] - cx
        hit = (yy * yy + xx * xx < r * r) & free[lo_y:hi_y, lo_x:hi_x]
        img[lo_y:hi_y, lo_x:hi_x][hit] = colour
        free[lo_y:hi_y, lo_x:hi_x][hit] = False
        if not free.any():
            break
    out = img.reshape(size, supersample, size, supersample, 3).mean(axis=(1, 3))
    return out.astype(np.float32)
