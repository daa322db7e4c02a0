"""What a training run returns (:class:`TrainResult`; shown by
:func:`gsprestore.runtime.progress.summary_table`). What it reports while it runs is
:class:`gsprestore.runtime.progress.TrainProgress` (drawn by :class:`gsprestore.runtime.progress.RichProgress`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainResult:
    """What a call to :func:`train` ended with. ``status``: ``finished`` (all epochs),
    ``max-steps`` (stopped by ``max_steps``) or ``stopped`` (by a signal: ``signal`` names it)."""

    run_dir: Path
    status: str
    epoch: int
    step: int
    best_psnr: float | None
    best_epoch: int | None
    last_psnr: float | None
    patches_per_s: float | None
    model_path: Path | None
    signal: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
