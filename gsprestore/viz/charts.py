"""Labelled scatter plots with matplotlib (the ``plots`` extra: ``pip install gsprestore[plots]``).

:func:`scatter_png` draws one or more panels in a grid, each with axes, ticks (linear or log10 x
axis), a grid, and points labelled with their names (each label takes the first of a few places
around its point that overlaps no marker and no other label, else the first, with a leader line
when it sits away from its point). A point's ``style`` picks its marker: ``"ours"`` a filled disc,
``"paper"`` a hollow square; the legend says so. Used by ``benchmarks/make_results.py`` for
``docs/results-*.png``; matplotlib is imported only when a chart is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

OURS, PAPER = "ours", "paper"
COLOURS = {OURS: (31, 119, 180), PAPER: (214, 39, 40)}
DPI = 100
#: Label offsets (points) from the marker, in the order they are tried; from the ninth on, a leader line.
OFFSETS = [(8, 0), (-8, 0), (0, 9), (0, -9), (8, 8), (8, -8), (-8, 8), (-8, -8), (8, 20), (8, -20), (-8, 20),
           (-8, -20), (8, 32), (8, -32), (-8, 32), (-8, -32), (8, 44), (8, -44)]


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


def _rgb(style: str) -> tuple[float, float, float]:
    r, g, b = COLOURS.get(style, (0, 0, 0))
    return r / 255, g / 255, b / 255


def _draw_panel(ax, panel: Panel, renderer) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    def fx(v: float) -> float:
        return panel.zero_at if (panel.xlog and v <= 0 and panel.zero_at) else v

    ax.set_title(panel.title, fontsize=12)
    ax.set_xlabel(panel.xlabel, fontsize=10)
    ax.set_ylabel(panel.ylabel, fontsize=10)
    ax.grid(True, color=(0.88, 0.88, 0.88), linewidth=0.8)
    ax.set_axisbelow(True)
    if panel.xlog:
        ax.set_xscale("log")  # under two decades: matplotlib's own log ticks (2x, 5x, ... labelled)
        if _decades(panel, fx) >= 2:  # one tick a decade, 1k / 1M, and "0" where x <= 0 is drawn
            zero = panel.zero_at
            ax.xaxis.set_major_locator(FixedLocator(_log_ticks(panel, fx)))
            ax.xaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "0" if zero and abs(v - zero) < 1e-12 * zero
                                                       and any(p.x <= 0 for p in panel.points) else _fmt(v)))
    for p in panel.points:
        if p.style == PAPER:
            ax.scatter([fx(p.x)], [p.y], s=90, marker="s", facecolors="none", edgecolors=[_rgb(PAPER)],
                       linewidths=2, zorder=3)
        else:
            ax.scatter([fx(p.x)], [p.y], s=90, marker="o", color=[_rgb(OURS)], zorder=3)
    ax.margins(x=0.12, y=0.12)
    taken = [ax.transData.transform((fx(p.x), p.y)) for p in panel.points]
    boxes = [(x - 8, y - 8, x + 8, y + 8) for x, y in taken]  # the markers (about 7 px across), in pixels
    frame = ax.get_window_extent(renderer)
    for p in sorted(panel.points, key=lambda p: -p.y):
        chosen = None
        for k, (dx, dy) in enumerate(OFFSETS):
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            ann = ax.annotate(p.label, (fx(p.x), p.y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                              fontsize=9, color=_rgb(p.style))
            bb = ann.get_window_extent(renderer)
            box = (bb.x0 - 1, bb.y0 - 1, bb.x1 + 1, bb.y1 + 1)
            inside = bb.x0 >= frame.x0 + 2 and bb.x1 <= frame.x1 - 2 and bb.y0 >= frame.y0 + 2 and bb.y1 <= frame.y1 - 2
            if inside and not any(_overlaps(box, t) for t in boxes):
                chosen = (ann, box, k)
                break
            ann.remove()
        if chosen is None:
            ann = ax.annotate(p.label, (fx(p.x), p.y), xytext=(8, 0), textcoords="offset points", ha="left",
                              va="center", fontsize=9, color=_rgb(p.style))
            bb = ann.get_window_extent(renderer)
            chosen = (ann, (bb.x0, bb.y0, bb.x1, bb.y1), 0)
        ann, box, k = chosen
        if k >= 8:  # pushed away from its point: drawn again with a leader line
            props = dict(xytext=ann.xyann, textcoords="offset points", ha=ann.get_ha(), va=ann.get_va(), fontsize=9,
                         color=_rgb(p.style))
            ann.remove()
            ax.annotate(p.label, (fx(p.x), p.y), **props,
                        arrowprops=dict(arrowstyle="-", color=(0.6, 0.6, 0.6), linewidth=0.8, shrinkA=0, shrinkB=4))
        boxes.append(box)


def _decades(panel: Panel, fx) -> float:
    import math

    xs = [fx(p.x) for p in panel.points if fx(p.x) > 0]
    return math.log10(max(xs) / min(xs)) if xs else 0.0


def _log_ticks(panel: Panel, fx) -> list[float]:
    import math

    xs = [fx(p.x) for p in panel.points if fx(p.x) > 0]
    lo, hi = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    return [10.0 ** e for e in range(lo, hi + 1)]


def _fmt(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _overlaps(a, b) -> bool:
    return not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])


def scatter_png(panels: list[Panel], path: str | Path, *, title: str = "", panel_size=(560, 440),
                columns: int | None = None) -> Path:
    """Draw ``panels`` in a grid of ``columns`` (default: one row), with a shared ``title`` and a
    legend, into the PNG ``path``: ``panel_size`` pixels per panel, 70 (40 without a title) above."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    pw, ph = panel_size
    cols = max(1, min(columns or len(panels), len(panels)))
    rows = -(-len(panels) // cols)
    head = 70 if title else 40
    width, height = pw * cols, ph * rows + head
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, facecolor="white")
    canvas = FigureCanvasAgg(fig)
    if title:
        fig.text(0.5, 1 - 14 / height, title, ha="center", va="top", fontsize=14)
    styles = {p.style for pan in panels for p in pan.points}
    handles = [Line2D([], [], linestyle="none", marker="o", markersize=8, color=_rgb(OURS),
                      label="measured here (gsprestore)")] if OURS in styles else []
    if PAPER in styles:
        handles.append(Line2D([], [], linestyle="none", marker="s", markersize=8, markerfacecolor="none",
                              markeredgecolor=_rgb(PAPER), markeredgewidth=2, label="reported in the paper"))
    if handles:
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(10 / width, 1 - (head - 34) / height),
                   ncol=len(handles), frameon=False, fontsize=10)
    grid = fig.add_gridspec(rows, cols, left=0, right=1, bottom=0, top=1 - head / height, hspace=0, wspace=0)
    axes = []
    for i, pan in enumerate(panels):
        r, c = divmod(i, cols)
        sub = grid[r, c].get_position(fig)  # the panel's cell; the axes inside it, margins in pixels
        ax = fig.add_axes((sub.x0 + 70 / width, sub.y0 + 60 / height, sub.width - 90 / width,
                           sub.height - 100 / height))
        axes.append((ax, pan))
    renderer = canvas.get_renderer()
    for ax, pan in axes:
        _draw_panel(ax, pan, renderer)
    path = Path(path)
    fig.savefig(path, dpi=DPI, facecolor="white")
    return path
