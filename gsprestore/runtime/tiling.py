"""One tiled engine for every method: whole images of any size, bounded memory, no seams.

:func:`restore` runs a :class:`~gsprestore.methods.registry.Restorer` over an image tile by tile:

* **Tiles** are cut in *input* coordinates (the mosaic for ``demosaic``, the low-resolution image for
  ``upscale2x``; outputs map to ``scale`` x those coordinates). Core tiles are spread evenly over
  each axis with boundaries on even coordinates, and each is extended by ``overlap`` context pixels
  (even too), so every tile starts on a 2x2 Bayer block and keeps the image's CFA ``pattern``.
* **Blending**: neighbouring outputs overlap by ``2 * blend`` pixels around each core boundary and
  are mixed with a raised-cosine (cos^2 / sin^2) partition of unity; elsewhere a tile's output is
  cropped to its core. ``blend = min(overlap // 2, overlap - halo)``, so every output pixel kept from
  a tile is at least ``restorer.halo`` pixels from the tile's cut edges: for a method whose output
  depends on at most ``halo`` pixels around it (the graphs of the paper use a 5x5 window per layer,
  Sec. 3.2, so the dependency is bounded by layers x 2 plus the CNN's receptive field), tiled and
  untiled results agree to float rounding.
* **Memory**: the image stays on the CPU; one tile at a time is moved to the device and its output
  is accumulated into a CPU buffer (the whole image is never on the GPU). ``tile=0`` picks the tile
  size from available memory (CPU: ``/proc/meminfo`` or ``os.sysconf``; CUDA: a probe tile and
  ``torch.cuda.mem_get_info``): the whole image in one tile when it fits, else the tiles that
  compute the fewest pixels (cores plus overlaps) within the budget (:func:`choose_tile`); on
  out-of-memory in that automatic mode the tile size is halved and the image restarted.
* **Allocator**: on the CPU the engine asks glibc to keep freed memory in the heap
  (:func:`gsprestore.core.memory.keep_freed_heap_memory`, once per process; ``GSPRESTORE_KEEP_FREED_MEMORY=0``
  leaves the allocator alone): the learned models free and allocate the same large tensors in
  every layer, which otherwise come back from the OS as fresh zero pages each time.
* **Output size**: the result is assembled in one CPU buffer; an output that cannot fit in the
  available memory with one tile beside it is refused before the first tile
  (:func:`check_output_memory`), and automatic tiles are sized from what the output leaves.
  :func:`job_bytes` is the same estimate for a whole job, which the file reader checks from the
  header before decoding.
* **Sizes**: a demosaicking input with an odd side is extended by one mirrored row/column (whole-
  sample symmetric extension keeps the Bayer phase) and the output cropped back; inputs smaller than
  the method's ``restorer.info["min_side"]`` (if it sets one) are extended the same way.
* **Devices**: ``auto`` (CUDA if present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; a requested
  device that is missing is an error. ``precision`` fp32 | bf16 | fp16 (the last two through
  ``torch.autocast``, CUDA only). Every tile's output is checked for NaN/Inf.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..physics.tasks import is_mosaic
from ..core.errors import GspError, UsageError
from ..core.memory import available_memory  # noqa: F401 - used here, and part of this module's API

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..methods.interface import Restorer

SCALE = {"demosaic": 1, "upscale2x": 2}
PRECISIONS = ("fp32", "bf16", "fp16")
MIN_TILE = 32  # automatic tiling never goes below this (input pixels)
MIN_MANUAL_TILE = 8  # the smallest --tile accepted
DEFAULT_OVERLAP = 32
#: Working-set estimate per *output* pixel when a method does not say (``restorer.info["bytes_per_pixel"]``);
#: measured CPU peaks: menon ~40 B, iGLR ~0.5 KB, iGTV ~3-4 KB per pixel.
DEFAULT_BYTES_PER_PIXEL = {"classical": 512, "graph": 8192, "learned": 8192, "ensemble": 8192}
#: The automatic CPU tile plans for at most this share of the available memory (and half of what
#: the output leaves, :func:`check_output_memory`) ...
CPU_MEMORY_FRACTION = 0.25
#: ... and never for more than this working set, however much memory the machine has.
CPU_BUDGET_CAP = 8 << 30
#: The cap before issue 24 (kept for ``benchmarks/bench_tiling.py --rules``, which times the old
#: rule beside the new): 1 GiB gave the learned 2x models ~112-pixel cores with 32-pixel overlaps,
#: computing each output pixel about 2.3 times.
LEGACY_CPU_BUDGET_CAP = 1 << 30
#: Keep freed memory in the heap while restoring on the CPU (:func:`gsprestore.core.memory.keep_freed_heap_memory`).
CPU_KEEP_FREED_MEMORY = os.environ.get("GSPRESTORE_KEEP_FREED_MEMORY", "1") != "0"

ProgressFn = Callable[[int, int], None]


# ----------------------------------------------------------------------------------------------
# Devices and precision
# ----------------------------------------------------------------------------------------------


def device_kind(device: str = "auto") -> str:
    """The kind (``cpu`` / ``cuda``) a ``--device`` value names: ``auto`` is this machine's
    (:func:`resolve_device`), ``cuda:N`` is ``cuda``; anything else a :class:`UsageError`."""
    name = str(device).strip().lower()
    if name == "auto":
        return resolve_device("auto").type
    kind = name.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}; expected auto, cpu or cuda")
    return kind


def resolve_device(device: "str | torch.device | None" = "auto") -> "torch.device":
    """``auto`` -> CUDA if available, else CPU; ``cpu``; ``cuda`` / ``cuda:N`` only if present."""
    import torch

    if isinstance(device, torch.device):
        device = str(device)
    name = (device or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        if not torch.cuda.is_available():
            raise GspError(f"device {name!r} requested but no CUDA device is available (use --device cpu or auto)")
        index = int(name[5:]) if ":" in name else torch.cuda.current_device()
        count = torch.cuda.device_count()
        if index >= count:
            raise GspError(f"device {name!r} requested but only {count} CUDA device(s) found (cuda:0..cuda:{count - 1})")
        return torch.device("cuda", index)
    raise UsageError(f"unknown device {device!r}; expected auto, cpu, cuda or cuda:N")


def check_precision(precision: str, device: "torch.device") -> "torch.dtype | None":
    """The autocast dtype for ``precision`` (None for fp32); reduced precision is CUDA only."""
    import torch

    p = (precision or "fp32").lower()
    if p not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    if p == "fp32":
        return None
    if device.type != "cuda":
        raise UsageError(f"precision {p} needs a CUDA device (got {device.type}); use --precision fp32")
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[p]


def check_tiling(tile: int, overlap: int | None, *, tile_name: str = "tile size",
                 overlap_name: str = "overlap", strict: bool = False) -> None:
    """``tile`` 0 (automatic) or at least :data:`MIN_MANUAL_TILE`; ``overlap`` None or >= 0; with
    ``strict`` (the command line's options) also below half a given ``tile``, since tiles that are
    mostly context compute every pixel many times (the Python API allows it). The names are how
    the caller spells the options (the CLI: ``--tile``, ``--overlap``)."""
    if tile < 0 or 0 < tile < MIN_MANUAL_TILE:
        raise UsageError(f"{tile_name} must be 0 (automatic) or at least {MIN_MANUAL_TILE}, got {tile}")
    if overlap is not None and overlap < 0:
        raise UsageError(f"{overlap_name} must be >= 0, got {overlap}")
    if strict and overlap is not None and tile > 0 and 2 * overlap >= tile:
        raise UsageError(f"{overlap_name} {overlap} must be below half the {tile_name} ({tile}): each tile would be "
                         f"mostly context, computed again and again; use a larger {tile_name} or a smaller "
                         f"{overlap_name}")


def check_channels(task: str, channels: int) -> None:
    """Demosaicking takes a single-channel Bayer mosaic (upscaling takes any number of channels)."""
    if is_mosaic(task) and channels != 1:
        raise UsageError(f"has {channels} colour channels but demosaic needs a single-channel Bayer mosaic "
                         "(use `gsprestore mosaic` first or give a single-channel mosaic)")


# ----------------------------------------------------------------------------------------------
# Tile plan
# ----------------------------------------------------------------------------------------------


def _even_up(n: int) -> int:
    return n + (n % 2)


@dataclass(frozen=True)
class AxisTile:
    """One tile along one axis. Input window ``[lo, hi)`` (core plus context); the output pixels
    ``[out_lo, out_hi)`` it contributes to, with ``weight`` (blend ramp, 1 in the core)."""

    lo: int
    hi: int
    core_lo: int
    core_hi: int
    out_lo: int
    out_hi: int
    weight: np.ndarray


def split_axis(n: int, tile: int) -> list[tuple[int, int]]:
    """Cores covering ``[0, n)``: ``ceil(n / tile)`` of them, evenly spread, boundaries even."""
    if tile <= 0 or tile >= n:
        return [(0, n)]
    k = math.ceil(n / tile)
    bounds = [0] + [2 * round(i * n / k / 2) for i in range(1, k)] + [n]
    bounds = sorted(set(bounds))
    return list(zip(bounds[:-1], bounds[1:]))


def plan_axis(n: int, tile: int, overlap: int, blend: int, scale: int = 1) -> list[AxisTile]:
    """Tiles along an axis of ``n`` input pixels: cores of about ``tile`` pixels, ``overlap``
    pixels of context each side (clipped to the image), outputs blended over ``2 * blend`` input
    pixels around each interior core boundary (raised cosine, weights summing to one)."""
    cores = split_axis(n, tile)
    if len(cores) > 1:
        blend = min(blend, min(b - a for a, b in cores) // 2)
    else:
        blend = 0
    tiles = []
    for j, (c0, c1) in enumerate(cores):
        first, last = j == 0, j == len(cores) - 1
        lo, hi = max(0, c0 - overlap), min(n, c1 + overlap)
        b_lo = 0 if first else blend
        b_hi = 0 if last else blend
        out_lo, out_hi = scale * (c0 - b_lo), scale * (c1 + b_hi)
        x = np.arange(out_lo, out_hi, dtype=np.float64) + 0.5
        w = np.ones(out_hi - out_lo, dtype=np.float64)
        if b_lo:  # rising ramp across [c0 - blend, c0 + blend)
            t = np.clip((x - scale * (c0 - blend)) / (2 * scale * blend), 0, 1)
            w *= np.where(x < scale * (c0 + blend), np.sin(0.5 * np.pi * t) ** 2, 1.0)
        if b_hi:  # falling ramp across [c1 - blend, c1 + blend)
            t = np.clip((x - scale * (c1 - blend)) / (2 * scale * blend), 0, 1)
            w *= np.where(x >= scale * (c1 - blend), np.cos(0.5 * np.pi * t) ** 2, 1.0)
        tiles.append(AxisTile(lo, hi, c0, c1, out_lo, out_hi, w.astype(np.float32)))
    return tiles


@dataclass(frozen=True)
class TilePlan:
    rows: list[AxisTile]
    cols: list[AxisTile]
    tile: int
    overlap: int
    blend: int

    def __len__(self) -> int:
        return len(self.rows) * len(self.cols)


def halo_in(restorer: "Restorer") -> int:
    """The restorer's halo (given in output pixels) in input pixels."""
    return math.ceil(max(0, int(restorer.halo)) / SCALE[restorer.task])


def default_overlap(restorer: "Restorer") -> int:
    return _even_up(max(DEFAULT_OVERLAP, halo_in(restorer)))


def make_plan(height: int, width: int, tile: int, overlap: int, halo: int, scale: int) -> TilePlan:
    """Plan the tiles of an ``height x width`` input; ``tile`` and ``overlap`` even, ``halo`` in input pixels."""
    blend = max(0, min(overlap // 2, overlap - halo)) if overlap >= halo else overlap // 2
    return TilePlan(plan_axis(height, tile, overlap, blend, scale), plan_axis(width, tile, overlap, blend, scale),
                    tile, overlap, blend)


# ----------------------------------------------------------------------------------------------
# Memory
# ----------------------------------------------------------------------------------------------


OUTPUT_BYTES_PER_SAMPLE = 4 + 2  # the float32 result, and its 16-bit copy when it is written


def output_bytes(height: int, width: int, channels: int) -> int:
    """The full-size ``height x width x channels`` result and the copy the writer makes of it."""
    return height * width * channels * OUTPUT_BYTES_PER_SAMPLE


def tile_bytes(restorer: "Restorer", tile: int, overlap: int, height: int, width: int,
               device: "str | torch.device" = "cpu") -> int:
    """CPU memory one tile of an ``height x width`` input needs: its input window (core ``tile``,
    ``overlap`` context each side, clipped to the image) at the method's working set per output
    pixel (:func:`bytes_per_pixel`); on a GPU only the window and its result pass through the CPU."""
    scale = SCALE[restorer.task]
    side = tile + 2 * overlap
    pixels = min(height, side) * min(width, side) * scale * scale
    per_pixel = bytes_per_pixel(restorer) if str(device).startswith("cpu") else 4 * (1 + 3)
    return pixels * per_pixel


def job_bytes(restorer: "Restorer", height: int, width: int, channels: int, *, tile: int = 0,
              overlap: int | None = None, device: "str | torch.device" = "cpu") -> int:
    """Memory restoring an ``height x width x channels`` input needs beyond the input itself: the
    output and its written copy, and one tile (``tile`` 0: the smallest automatic tile). What
    :func:`gsprestore.imageio.images.read_image` checks from the file's header (``reserve=``), so a job that
    cannot fit is refused before decoding."""
    scale = SCALE[restorer.task]
    ov = _even_up(int(default_overlap(restorer) if overlap is None else overlap))
    return (output_bytes(scale * height, scale * width, _out_channels(restorer, channels))
            + tile_bytes(restorer, _even_up(tile) or MIN_TILE, ov, height, width, device))


def _out_channels(restorer: "Restorer", channels: int) -> int:
    return 3 if is_mosaic(restorer.task) else channels


def check_output_memory(restorer: "Restorer", height: int, width: int, channels: int, tile: int, overlap: int,
                        device: "str | torch.device" = "cpu") -> int:
    """Refuse up front (before any tile runs) an ``height x width x channels`` input whose
    full-size output, with the copy the writer makes, and one tile (``tile`` 0: the smallest
    automatic one) would not fit in the available memory: tiling bounds the working set, not the
    result, so halving tiles could never help. Returns the bytes left for tiles once the output
    is counted."""
    from ..core.memory import gib

    scale = SCALE[restorer.task]
    out = output_bytes(scale * height, scale * width, _out_channels(restorer, channels))
    floor = tile_bytes(restorer, tile or MIN_TILE, overlap, height, width, device)
    have = available_memory()
    if out + floor > have:
        what = f"{tile}-pixel tiles" if tile else "the smallest tiles"
        hint = " (a smaller --tile, or --tile 0)" if tile > MIN_TILE and out + tile_bytes(
            restorer, MIN_TILE, overlap, height, width, device) <= have else ""
        raise GspError(f"the {scale * width}x{scale * height} output needs about {gib(out + floor)} of memory "
                       f"({gib(out)} for the result and its written copy, {gib(floor)} for {what}) but only "
                       f"{gib(have)} is available{hint}; nothing written")
    return have - out


def bytes_per_pixel(restorer: "Restorer") -> int:
    """Working set per output pixel: the method's own estimate, or a default for its kind."""
    value = restorer.info.get("bytes_per_pixel") if isinstance(restorer.info, dict) else None
    return int(value) if value else DEFAULT_BYTES_PER_PIXEL.get(restorer.kind, 8192)


def tile_for_budget(budget: float, bpp: float, overlap: int, scale: int) -> int:
    """Largest even core size whose square tile (core + 2 overlap, in output pixels) fits
    ``budget``, whatever the image: the rule before issue 24 (still the floor :func:`job_bytes`
    plans for through :data:`MIN_TILE`); :func:`choose_tile` is the automatic rule now."""
    side = math.isqrt(max(1, int(budget / max(bpp, 1.0)))) // scale
    core = side - 2 * overlap
    return max(MIN_TILE, core - core % 16)


def axis_windows(n: int, tile: int, overlap: int) -> list[int]:
    """The input-window lengths (core plus the context each side, clipped to the image) of the
    tiles :func:`plan_axis` cuts along an axis of ``n`` pixels with ``tile`` and ``overlap``."""
    return [min(n, c1 + overlap) - max(0, c0 - overlap) for c0, c1 in split_axis(n, tile)]


def choose_tile(height: int, width: int, budget: float, bpp: float, overlap: int, scale: int) -> int:
    """The automatic tile size of an ``height x width`` input: the whole image (one tile, no
    context computed twice) when its working set (``bpp`` bytes per output pixel) fits ``budget``;
    otherwise, of the tile sizes whose largest window fits, the one that computes the fewest pixels
    in all (cores plus their ``overlap`` context, clipped to the image), the larger on a tie. Never
    below :data:`MIN_TILE` nor twice ``overlap`` (the floor is returned when nothing fits: the
    out-of-memory retry halves from there)."""
    floor = max(MIN_TILE, _even_up(2 * overlap + 2))
    limit = budget / max(float(bpp), 1.0) / (scale * scale)  # input pixels one window may hold
    if height * width <= limit:
        return max(floor, _even_up(max(height, width)))
    candidates = set()
    for side in (height, width):  # every tile size that gives k cores on an axis, k = 1, 2, ...
        for k in range(1, side // floor + 2):
            t = _even_up(math.ceil(side / k))
            if t >= floor:
                candidates.add(t)
    best: tuple[int, int] | None = None
    for t in sorted(candidates, reverse=True):
        rows, cols = axis_windows(height, t, overlap), axis_windows(width, t, overlap)
        if max(rows) * max(cols) > limit:
            continue
        cost = sum(rows) * sum(cols)
        if best is None or cost < best[0]:
            best = (cost, t)
    return floor if best is None else best[1]


def cpu_tile_budget(room: float | None = None) -> float:
    """Bytes one automatic CPU tile may plan for: :data:`CPU_MEMORY_FRACTION` of the available
    memory, at most :data:`CPU_BUDGET_CAP`, and at most half the ``room`` the output leaves."""
    budget = min(CPU_MEMORY_FRACTION * available_memory(), CPU_BUDGET_CAP)
    if room is not None:
        budget = min(budget, 0.5 * room)
    return budget


def _measure_cuda_bpp(restorer: "Restorer", y: "torch.Tensor", pattern: str, device: "torch.device",
                      autocast: "torch.dtype | None", overlap: int) -> float:
    """Peak CUDA memory per output pixel of one probe tile (also warms the kernels up)."""
    import torch

    side = min(128 + 2 * overlap, y.shape[-2], y.shape[-1])
    side -= side % 2
    probe = y[:, :side, :side].unsqueeze(0).to(device)
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = _run(restorer, probe, pattern, device, autocast)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    pixels = out.shape[-2] * out.shape[-1]
    del out, probe
    return max(peak, 1) / pixels * 1.25


def auto_tile(restorer: "Restorer", y: "torch.Tensor", pattern: str, device: "torch.device",
              autocast: "torch.dtype | None", overlap: int, room: float | None = None) -> int:
    """Tile size for ``tile=0`` (:func:`choose_tile`): the whole image when it fits the device's
    memory budget, else the tiles that compute the fewest pixels within it. CPU: the method's
    working set per pixel (:func:`bytes_per_pixel`) against :func:`cpu_tile_budget` (a share of the
    available memory, capped, and half the ``room`` the output leaves); CUDA: a probe tile's
    measured peak against 60 % of the free device memory."""
    import torch

    scale = SCALE[restorer.task]
    if device.type == "cuda":
        try:
            bpp = _measure_cuda_bpp(restorer, y, pattern, device, autocast, overlap)
        except Exception as exc:  # the probe itself ran out of memory: fall back to the estimate
            if not _is_oom(exc):
                raise
            torch.cuda.empty_cache()
            bpp = bytes_per_pixel(restorer)
        free, _total = torch.cuda.mem_get_info(device)
        budget = 0.6 * (free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    else:
        bpp = bytes_per_pixel(restorer)
        budget = cpu_tile_budget(room)
    return choose_tile(y.shape[-2], y.shape[-1], budget, bpp, overlap, scale)


def _is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, getattr(torch, "OutOfMemoryError", ())) or isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and (
        "out of memory" in str(exc).lower() or "can't allocate memory" in str(exc).lower()
    )


# ----------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------


def _run(restorer: "Restorer", y: "torch.Tensor", pattern: str, device: "torch.device",
         autocast: "torch.dtype | None") -> "torch.Tensor":
    import torch

    if autocast is not None:
        with torch.autocast(device_type=device.type, dtype=autocast):
            out = restorer(y, pattern)
    else:
        out = restorer(y, pattern)
    return out.float()


def _mirror_index(n: int, size: int) -> np.ndarray:
    """Indices extending ``[0, n)`` to ``size`` by whole-sample symmetric reflection (keeps parity)."""
    i = np.arange(size)
    if n == 1:
        return np.zeros(size, dtype=np.int64)
    period = 2 * (n - 1)
    i = i % period
    return np.where(i >= n, period - i, i)


def _extend(y: "torch.Tensor", height: int, width: int) -> "torch.Tensor":
    """Extend a (C, H, W) tensor at the bottom/right to (C, height, width) by mirroring."""
    import torch

    H, W = y.shape[-2:]
    if (height, width) == (H, W):
        return y
    rows = torch.from_numpy(_mirror_index(H, height))
    cols = torch.from_numpy(_mirror_index(W, width))
    return y.index_select(-2, rows).index_select(-1, cols)


def restore(
    restorer: "Restorer",
    y: "torch.Tensor",
    pattern: str = "RGGB",
    *,
    tile: int = 0,
    overlap: int | None = None,
    device: "str | torch.device" = "auto",
    precision: str = "fp32",
    progress: ProgressFn | None = None,
    notice: Callable[[str], None] | None = None,
) -> "torch.Tensor":
    """Run ``restorer`` over a CPU ``(C, H, W)`` float tensor tile by tile.

    Returns the ``(H_out, W_out, C_out)`` float32 CPU tensor (``H_out = scale * H``), assembled on the
    CPU. ``tile`` 0 = automatic; ``overlap`` None = ``max(32, halo)`` rounded up to even. ``progress``
    is called with ``(tiles done, tiles total)``; ``notice`` with one-line messages (tile size
    halved after out-of-memory, overlap below the method's halo). Raises :class:`GspError` on
    non-finite output or when memory runs out even with the smallest tile."""
    import torch

    from ..physics.sampling import check_pattern

    task = restorer.task
    scale = SCALE[task]
    pattern = check_pattern(pattern) if is_mosaic(task) else pattern
    dev = resolve_device(device)
    autocast = check_precision(precision, dev)
    if y.dim() != 3:
        raise UsageError(f"restore needs a (C, H, W) tensor, got shape {tuple(y.shape)}")
    check_channels(task, y.shape[0])
    check_tiling(tile, overlap)
    tile = _even_up(tile)
    halo = halo_in(restorer)
    overlap = _even_up(int(default_overlap(restorer) if overlap is None else overlap))
    if overlap < halo and notice is not None:
        notice(f"overlap {overlap} is below the {restorer.name} halo of {halo} px: tiles may differ slightly from one pass")

    H, W = y.shape[-2:]
    min_side = int(restorer.info.get("min_side", 1)) if isinstance(restorer.info, dict) else 1
    Hp, Wp = max(H, min_side), max(W, min_side)
    if is_mosaic(task):
        Hp, Wp = _even_up(Hp), _even_up(Wp)
    room = check_output_memory(restorer, Hp, Wp, y.shape[0], tile, overlap, dev)
    y = _extend(y.float().cpu(), Hp, Wp)

    if dev.type == "cpu" and CPU_KEEP_FREED_MEMORY:
        from ..core.memory import keep_freed_heap_memory

        keep_freed_heap_memory()
    restorer.to(dev)
    if restorer.module is not None and hasattr(restorer.module, "eval"):
        restorer.module.eval()

    automatic = tile == 0
    try:
        with torch.inference_mode():
            if automatic:
                tile = auto_tile(restorer, y, pattern, dev, autocast, overlap, room)
            while True:
                try:
                    out = _tiles(restorer, y, pattern, dev, autocast, make_plan(Hp, Wp, tile, overlap, halo, scale),
                                 progress)
                    break
                except Exception as exc:
                    if not _is_oom(exc):
                        raise
                    _release_buffers(restorer)
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
                    if not automatic:
                        raise GspError(f"out of memory on {dev} with --tile {tile}; use a smaller --tile or --tile 0") from None
                    if tile <= MIN_TILE:
                        raise GspError(f"out of memory on {dev} even with {tile}-pixel tiles") from None
                    tile = max(MIN_TILE, (tile // 2) - (tile // 2) % 2)
                    if notice is not None:
                        notice(f"out of memory on {dev}: retrying with {tile}-pixel tiles")
    finally:
        _release_buffers(restorer)
    return out[: scale * H, : scale * W]


def _release_buffers(restorer: "Restorer") -> None:
    """Free the buffers the restorer's networks keep from one forward to the next
    (``UnrolledNet.release_workspace``): they serve the tiles of one job, and a job that ends (or
    retries with smaller tiles) hands their memory back."""
    module = restorer.module
    for m in (module.modules() if hasattr(module, "modules") else ()):
        release = getattr(m, "release_workspace", None)
        if callable(release):
            release()


def _tiles(restorer: "Restorer", y: "torch.Tensor", pattern: str, dev: "torch.device",
           autocast: "torch.dtype | None", plan: TilePlan, progress: ProgressFn | None) -> "torch.Tensor":
    import torch

    scale = SCALE[restorer.task]
    H, W = y.shape[-2:]
    out = None
    total, done = len(plan), 0
    if progress is not None:
        progress(0, total)
    for ty in plan.rows:
        wy = torch.from_numpy(ty.weight)[:, None, None]
        for tx in plan.cols:
            window = y[:, ty.lo : ty.hi, tx.lo : tx.hi].unsqueeze(0).contiguous().to(dev)
            res = _run(restorer, window, pattern, dev, autocast)
            del window
            if not bool(torch.isfinite(res).all()):
                raise GspError(f"{restorer.name} produced NaN or Inf values"
                               + (" (try --precision fp32)" if autocast is not None else ""))
            r0, c0 = ty.out_lo - scale * ty.lo, tx.out_lo - scale * tx.lo
            part = res[0, :, r0 : r0 + ty.out_hi - ty.out_lo, c0 : c0 + tx.out_hi - tx.out_lo]
            part = part.permute(1, 2, 0).cpu()
            del res
            if out is None:
                out = torch.zeros(scale * H, scale * W, part.shape[-1], dtype=torch.float32)
            wx = torch.from_numpy(tx.weight)[None, :, None]
            out[ty.out_lo : ty.out_hi, tx.out_lo : tx.out_hi].addcmul_(part, wy * wx)
            done += 1
            if progress is not None:
                progress(done, total)
    # normalise by the (separable) sum of weights: exactly one wherever a single tile contributes
    sy = torch.zeros(scale * H)
    sx = torch.zeros(scale * W)
    for ty in plan.rows:
        sy[ty.out_lo : ty.out_hi] += torch.from_numpy(ty.weight)
    for tx in plan.cols:
        sx[tx.out_lo : tx.out_hi] += torch.from_numpy(tx.weight)
    if len(plan.rows) > 1:
        out.div_(sy[:, None, None])
    if len(plan.cols) > 1:
        out.div_(sx[None, :, None])
    return out


def restore_array(
    restorer: "Restorer",
    y: Any,
    pattern: str = "RGGB",
    **kwargs: Any,
) -> Any:
    """:func:`restore` for numpy arrays ((H, W) or (H, W, C) -> (H', W', C') float32) and tensors
    ((C, H, W) -> (C', H', W'), (B, C, H, W) -> (B, C', H', W'), on the input's device)."""
    import torch

    if isinstance(y, torch.Tensor):
        if y.dim() == 2:
            y = y[None]
        if y.dim() == 3:
            return restore(restorer, y.detach().cpu(), pattern, **kwargs).permute(2, 0, 1).to(y.device)
        if y.dim() == 4:
            outs = [restore(restorer, b.detach().cpu(), pattern, **kwargs).permute(2, 0, 1) for b in y]
            return torch.stack(outs).to(y.device)
        raise UsageError(f"expected a (C, H, W) or (B, C, H, W) tensor, got shape {tuple(y.shape)}")
    a = np.asarray(y)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3:
        raise UsageError(f"expected an (H, W) or (H, W, C) array, got shape {a.shape}")
    t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).permute(2, 0, 1)
    return restore(restorer, t, pattern, **kwargs).numpy()
