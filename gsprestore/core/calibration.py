"""How fast this CPU is compared with the machine a recorded CPU speed was measured on, so that the
default rule (:mod:`gsprestore.methods.defaults`) judges a learned network's speed for the user's machine:
a speed recorded on the project's 2-core machine undersells a 16-core workstation, and oversells
a loaded laptop.

The probe (:func:`probe_gflops`) is the work that dominates the networks on a CPU: fp32 3x3
convolutions (:data:`PROBE`), timed on the threads torch will use, best of a few runs, ~0.1 s.
Its figure is cached per machine (CPU model, logical CPUs, threads, torch version) in the user's
cache folder (``$XDG_CACHE_HOME/gsprestore`` or ``~/.cache/gsprestore``), so only the first run
pays it. A speed record that carries the probe's figure on its own machine (``probe_gflops``,
written by ``tools/ship_weights.py --speed``) is scaled by ``here / there``
(:func:`speed_factor`, clamped to :data:`FACTOR_RANGE`; a ratio inside :data:`SAME_MACHINE`, the
probe's own spread on one machine, counts as 1); a record without one is taken as it is.
``GSPRESTORE_CPU_CALIBRATION=0`` turns the scaling off (factor 1).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

#: What the probe times.
PROBE = "fp32 3x3 convolution 32 -> 32 channels on a 256x256 image, channels-last, best of 5"
#: The factor is clamped to this range: a probe disturbed by a burst of other work must not
#: swing the default by more than that.
FACTOR_RANGE: tuple[float, float] = (0.25, 16.0)
#: A ratio strictly inside this band is the probe's own noise, not a different machine: it counts as
#: 1, so that a speed recorded at the bar is not judged below it on the machine it was measured on.
#: Measured on the project's 2-core machine (2026-11-28, quiet, 2 threads): 12 probes half a second apart read
#: 124-142 GFLOP/s (one 82), the two probes of back-to-back speed runs 136 and 148: about +-10 %.
SAME_MACHINE: tuple[float, float] = (0.8, 1.25)
ENV = "GSPRESTORE_CPU_CALIBRATION"


def probe_gflops(threads: int | None = None, repeats: int = 5) -> float:
    """GFLOP/s (a multiply-add counts 2) of :data:`PROBE` on ``threads`` torch threads (default:
    torch's current setting)."""
    import torch
    import torch.nn.functional as F

    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        x = torch.rand(1, 32, 256, 256, generator=gen).contiguous(memory_format=torch.channels_last)
        w = torch.rand(32, 32, 3, 3, generator=gen)
        best = float("inf")
        with torch.inference_mode():
            F.conv2d(x, w, padding=1)
            for _ in range(repeats):
                t0 = time.perf_counter()
                F.conv2d(x, w, padding=1)
                best = min(best, time.perf_counter() - t0)
        return 2 * 32 * 32 * 9 * 256 * 256 / best / 1e9
    finally:
        torch.set_num_threads(saved)


def machine_key() -> str:
    """What the cached probe figure belongs to: CPU model, logical CPUs, torch threads, torch version."""
    import torch

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}|{os.cpu_count()}|{torch.get_num_threads()}|{torch.__version__}"


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gsprestore" / "cpu-calibration.json"


def cached_probe_gflops() -> float:
    """:func:`probe_gflops` of this machine, from the cache when it holds this :func:`machine_key`
    (measured and stored otherwise; an unwritable cache only means measuring again next time)."""
    key, path = machine_key(), cache_file()
    try:
        cached = json.loads(path.read_text())
        value = cached.get(key) if isinstance(cached, dict) else None
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    except (OSError, ValueError):
        cached = {}
    value = probe_gflops()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        table = cached if isinstance(cached, dict) else {}
        table[key] = value
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
    return value


def speed_factor(record: dict[str, Any] | None) -> float:
    """How many times faster this machine should run what ``record`` (a CPU speed record with
    ``probe_gflops``) measured: ``here / there`` clamped to :data:`FACTOR_RANGE`, 1 inside
    :data:`SAME_MACHINE`; 1 without a
    figure to compare with or with ``GSPRESTORE_CPU_CALIBRATION=0``."""
    if os.environ.get(ENV, "1") == "0" or not isinstance(record, dict):
        return 1.0
    there = record.get("probe_gflops")
    if not isinstance(there, (int, float)) or there <= 0:
        return 1.0
    ratio = cached_probe_gflops() / float(there)
    if SAME_MACHINE[0] < ratio < SAME_MACHINE[1]:
        return 1.0
    lo, hi = FACTOR_RANGE
    return min(hi, max(lo, ratio))
