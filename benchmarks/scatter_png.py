"""Labelled scatter plots drawn with Pillow alone (matplotlib is not a dependency).

:func:`scatter_png` draws one or more panels side by side, each with axes, ticks (linear or log10
x axis), a grid, and points labelled with their names (labels are nudged so they do not overlap
each other). A point's ``style`` picks its marker: ``"ours"`` a filled disc, ``"paper"`` a
hollow square; the legend says so. Used by ``make_results.py`` for ``docs/results-*.png``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

OURS, PAPER = "ours", "paper"
COLOURS = {OURS: (31, 119, 180), PAPER: (214, 39, 40)}


@dataclass
class Point:
    x: float
    y: float
    label: str
    style: str = OURS


@dataclass
class Panel:
    title: str
    points: list[Point] = field(default_factory=list)
    xlabel: str = ""
    ylabel: str = "PSNR (dB)"
    xlog: bool = False
    zero_at: float | None = None  # log axis: draw x <= 0 at this value, ticked "0"


def _font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About ``n`` round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start, stop = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 10) for k in range(start, stop + 1)]


def _fmt_log_tick(e: int) -> str:
    v = 10 ** e
    if e >= 6:
        return f"{v // 10**6}M"
    if e >= 3:
        return f"{v // 10**3}k"
    return f"{v:g}" if e >= 0 else f"{10.0 ** e:g}"


def _overlaps(a, b) -> bool:
    return not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])


def _draw_panel(img: Image.Image, box: tuple[int, int, int, int], panel: Panel) -> None:
    d = ImageDraw.Draw(img)
    f, fs = _font(15), _font(13)
    x0, y0, x1, y1 = box
    left, right, top, bottom = x0 + 70, x1 - 20, y0 + 40, y1 - 60
    d.text(((x0 + x1) / 2, y0 + 12), panel.title, fill="black", font=_font(17), anchor="mt")

    def fx(v: float) -> float:
        if panel.xlog:
            return math.log10(panel.zero_at if (v <= 0 and panel.zero_at) else v)
        return v

    xs = [fx(p.x) for p in panel.points] or [0.0, 1.0]
    ys = [p.y for p in panel.points] or [0.0, 1.0]
    if panel.xlog:
        xlo, xhi = min(xs) - 0.35, max(xs) + 0.35
        xticks = [(float(e), ("0" if panel.zero_at and e == math.log10(panel.zero_at) else _fmt_log_tick(e)))
                  for e in range(math.ceil(xlo), math.floor(xhi) + 1)]
        if len(xticks) < 3:  # short range: add 2x and 5x ticks
            xticks += [(math.log10(m * 10.0 ** e), f"{m * 10.0 ** e:g}")
                       for e in range(math.floor(xlo), math.ceil(xhi) + 1) for m in (2, 5)
                       if xlo <= math.log10(m * 10.0 ** e) <= xhi]
    else:
        pad = (max(xs) - min(xs)) * 0.08 or 1.0
        vals = nice_ticks(min(xs) - pad, max(xs) + pad)
        xlo, xhi = vals[0], vals[-1]
        xticks = [(v, f"{v:.6g}") for v in vals]
    ypad = (max(ys) - min(ys)) * 0.1 or 1.0
    yvals = nice_ticks(min(ys) - ypad, max(ys) + ypad)
    ylo, yhi = yvals[0], yvals[-1]

    def px(v: float) -> float:
        return left + (v - xlo) / (xhi - xlo) * (right - left)

    def py(v: float) -> float:
        return bottom - (v - ylo) / (yhi - ylo) * (bottom - top)

    for v, text in xticks:
        X = px(v)
        d.line([(X, top), (X, bottom)], fill=(225, 225, 225))
        d.line([(X, bottom), (X, bottom + 5)], fill="black")
        d.text((X, bottom + 8), text, fill="black", font=fs, anchor="mt")
    for v in yvals:
        Y = py(v)
        d.line([(left, Y), (right, Y)], fill=(225, 225, 225))
        d.line([(left - 5, Y), (left, Y)], fill="black")
        d.text((left - 8, Y), f"{v:g}", fill="black", font=fs, anchor="rm")
    d.rectangle([left, top, right, bottom], outline="black")
    d.text(((left + right) / 2, bottom + 30), panel.xlabel, fill="black", font=f, anchor="mt")
    label_img = Image.new("RGBA", (260, 24), (255, 255, 255, 0))
    ImageDraw.Draw(label_img).text((130, 12), panel.ylabel, fill="black", font=f, anchor="mm")
    label_img = label_img.rotate(90, expand=True)
    img.paste(label_img, (x0 + 4, int((top + bottom) / 2 - 130)), label_img)

    taken: list[tuple[float, float, float, float]] = []
    pts = sorted(panel.points, key=lambda p: -p.y)
    for p in pts:  # markers first, so labels avoid them
        X, Y = px(fx(p.x)), py(p.y)
        r = 5
        if p.style == PAPER:
            d.rectangle([X - r, Y - r, X + r, Y + r], outline=COLOURS[PAPER], width=2)
        else:
            d.ellipse([X - r, Y - r, X + r, Y + r], fill=COLOURS[OURS])
        taken.append((X - r, Y - r, X + r, Y + r))
    for p in pts:
        X, Y = px(fx(p.x)), py(p.y)
        w = d.textlength(p.label, font=fs)
        h = 14
        candidates = [(X + 8, Y - h / 2), (X - 8 - w, Y - h / 2), (X - w / 2, Y - 8 - h), (X - w / 2, Y + 8),
                      (X + 8, Y - h - 4), (X + 8, Y + 4), (X - 8 - w, Y - h - 4), (X - 8 - w, Y + 4),
                      (X + 8, Y - 2 * h - 2), (X + 8, Y + h + 2), (X - 8 - w, Y - 2 * h - 2), (X - 8 - w, Y + h + 2)]
        chosen, far = None, False
        for k, (cx, cy) in enumerate(candidates):
            bb = (cx, cy, cx + w, cy + h)
            inside = bb[0] >= left + 2 and bb[2] <= right - 2 and bb[1] >= top + 2 and bb[3] <= bottom - 2
            if inside and not any(_overlaps(bb, t) for t in taken):
                chosen, far = bb, k >= 8
                break
        if chosen is None:
            cx, cy = candidates[0] if X + 8 + w <= right else candidates[1]
            chosen = (cx, cy, cx + w, cy + h)
        taken.append(chosen)
        if far:  # a leader line to a label pushed away from its point
            lx = chosen[0] if chosen[0] > X else chosen[2]
            d.line([(X, Y), (lx, (chosen[1] + chosen[3]) / 2)], fill=(150, 150, 150))
        d.text((chosen[0], chosen[1]), p.label, fill=COLOURS.get(p.style, (0, 0, 0)), font=fs)


def scatter_png(panels: list[Panel], path: str | Path, *, title: str = "", panel_size=(560, 440),
                columns: int | None = None) -> Path:
    """Draw ``panels`` in a grid of ``columns`` (default: one row), with a shared ``title`` and a
    legend, into the PNG ``path``."""
    pw, ph = panel_size
    cols = max(1, min(columns or len(panels), len(panels)))
    rows = -(-len(panels) // cols)
    head = 70 if title else 40
    img = Image.new("RGB", (pw * cols, ph * rows + head), "white")
    d = ImageDraw.Draw(img)
    if title:
        d.text((img.width / 2, 14), title, fill="black", font=_font(19), anchor="mt")
    styles = {p.style for pan in panels for p in pan.points}
    lx, ly = 20, head - 26
    for style, text in [(OURS, "measured here (gsprestore)"), (PAPER, "reported in the paper")]:
        if style not in styles:
            continue
        if style == PAPER:
            d.rectangle([lx, ly, lx + 10, ly + 10], outline=COLOURS[PAPER], width=2)
        else:
            d.ellipse([lx, ly, lx + 10, ly + 10], fill=COLOURS[OURS])
        d.text((lx + 16, ly + 5), text, fill="black", font=_font(14), anchor="lm")
        lx += 40 + int(d.textlength(text, font=_font(14)))
    for i, pan in enumerate(panels):
        r, c = divmod(i, cols)
        _draw_panel(img, (c * pw, head + r * ph, (c + 1) * pw, head + (r + 1) * ph), pan)
    path = Path(path)
    img.save(path, optimize=True)
    return path
