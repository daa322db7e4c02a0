"""Domain errors. Every error a user can cause is a :class:`GspError` whose ``str`` is one line
naming the file (when there is one) and the reason; the CLI prints it and exits non-zero."""

from __future__ import annotations

from pathlib import Path


class GspError(Exception):
    """A user-facing error: ``<path>: <reason>`` (or just ``<reason>``)."""

    exit_code = 1

    def __init__(self, reason: str, path: str | Path | None = None):
        self.reason = reason
        self.path = None if path is None else str(path)
        super().__init__(f"{self.path}: {reason}" if self.path else reason)


class UsageError(GspError):
    """Bad arguments (unknown pattern, unknown method...): exit code 2."""

    exit_code = 2


class WeightsError(GspError):
    """Missing, tampered or incompatible model weights."""


class DatasetError(GspError):
    """A dataset that is missing, incomplete or fails its checksums."""
