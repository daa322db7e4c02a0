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


_KEPT: list[bool] = []  # keep_freed_heap_memory's result, once per process


def keep_freed_heap_memory() -> bool:
    """glibc, once per process: keep freed memory in the heap for the next allocation
    (``M_MMAP_THRESHOLD`` 32 MiB, ``M_TRIM_THRESHOLD`` 2 GiB, ``M_TOP_PAD`` 256 MiB) instead of
    handing every large buffer back to the OS and faulting it in again as fresh zero pages. The
    tiled engine sets it before restoring on the CPU: the learned models allocate and free the same
    tens-of-MB tensors in every layer of every tile, and on this project's CPU this halves their time
    (``benchmarks/bench_tiling.py --rules``). The same settings as ``gsprestore train``'s
    (``training.build.keep_freed_memory``). False where unavailable (not glibc)."""
    if not _KEPT:
        import ctypes
        import ctypes.util

        trim, top_pad, mmap = -1, -2, -3  # glibc's M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _KEPT.append(bool(libc.mallopt(mmap, 32 << 20) and libc.mallopt(trim, (1 << 31) - 1)
                              and libc.mallopt(top_pad, 256 << 20)))
        except (OSError, AttributeError):
            _KEPT.append(False)
    return _KEPT[0]
