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
