"""How much memory a new allocation can have: read by the image and camera RAW readers (to refuse,
from the header, a file whose decoding and processing cannot fit, before decoding) and by the tiling
engine (to size tiles and refuse outputs that cannot fit)."""

from __future__ import annotations

import os


def available_memory() -> int:
    """Bytes of memory available to a new allocation on this machine (no psutil)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def gib(n: float) -> str:
    """A byte count as it appears in messages: ``1.3 GiB`` (``0.02 GiB`` for small ones)."""
    value = n / 2**30
    return f"{value:.1f} GiB" if value >= 0.95 else f"{value:.2f} GiB"


M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters


def _mallopt(*settings: tuple[int, int]) -> bool:
    """glibc ``mallopt(param, value)`` for each pair, in order; False where unavailable or refused."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return all(libc.mallopt(param, value) for param, value in settings)
    except (OSError, AttributeError):
        return False


def set_mmap_threshold(nbytes: int) -> bool:
    """glibc ``mallopt(M_MMAP_THRESHOLD, nbytes)`` (``gsprestore train --grad-checkpoint`` sets
    1 MiB): allocations of at least ``nbytes`` get their own mapping and go back to the OS when freed.
    By default the threshold adapts upwards (up to 32 MB), so the many 1-30 MB tensors of a training
    step land in the heap, which fragments and keeps the resident size well above the live tensors. Returns False where unavailable."""
    return _mallopt((M_MMAP_THRESHOLD, int(nbytes)))


def keep_freed_memory(top_pad: int = 256 << 20) -> bool:
    """glibc: keep freed memory in the heap for the next step (``M_MMAP_THRESHOLD`` 32 MiB, the
    most glibc takes, ``M_TRIM_THRESHOLD`` 2 GiB, ``M_TOP_PAD`` ``top_pad``), so that the same
    1-30 MB tensors a training step allocates and frees do not come back from the OS as fresh
    zero pages each step (tens of thousands of page faults per step; ``gsprestore train`` sets
    this unless ``--grad-checkpoint`` asks for the opposite). Returns False where unavailable."""
    return _mallopt((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, (1 << 31) - 1), (M_TOP_PAD, int(top_pad)))


_KEPT: list[bool] = []  # keep_freed_heap_memory's result, once per process


def keep_freed_heap_memory() -> bool:
    """:func:`keep_freed_memory`, once per process (its result remembered). The tiled engine calls
    it before restoring on the CPU: the learned models allocate and free the same tens-of-MB
    tensors in every layer of every tile, and on this project's CPU keeping them in the heap
    halves their time (``benchmarks/bench_tiling.py --rules``)."""
    if not _KEPT:
        _KEPT.append(keep_freed_memory())
    return _KEPT[0]
