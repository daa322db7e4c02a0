"""What the training loop reports while it runs (:class:`TrainProgress`, the ``progress=`` object of
:func:`gsprestore.training.train`; :class:`gsprestore.training.progress.RichProgress` draws it) and
what it returns (:class:`TrainResult`)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TrainProgress:
    """What :func:`train` reports to; this one shows nothing. ``busy(text)`` is a context manager
    around a long preparation (cutting patches); ``start(total, completed)`` / ``stop()`` bracket
    the steps; ``update(step, epoch=, epochs=, loss=, pps=)`` follows each step, ``note(text)``
    is a line per epoch and ``message(text)`` a note about the run."""

    def busy(self, text: str):  # noqa: ARG002
        return nullcontext()

    def start(self, total: int, completed: int) -> None:
        pass

    def stop(self) -> None:
        pass

    def update(self, step: int, **fields_: Any) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def message(self, text: str) -> None:  # noqa: ARG002
        """A one-line note about the run itself (e.g. which model configuration ``--init`` adopted),
        shown even where no progress is drawn."""


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
