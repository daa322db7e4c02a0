"""Atomic file writes: write a temporary file beside the target, flush + fsync, give it the usual
permissions, then ``os.replace`` it over the target. A crash or an exception leaves either the old
file or none, never a half-written one. Used by every writer in the package (images, weights,
checkpoints, reports, downloads)."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # mkstemp creates 0600 files; finished outputs get the usual permissions


@contextmanager
def atomic_file(
    path: str | Path,
    mode: str = "wb",
    *,
    suffix: str = ".tmp",
    encoding: str | None = None,
    newline: str | None = None,
) -> Iterator[IO]:
    """Context manager yielding a file object; on a clean exit the data replace ``path``.
    Raises what ``tempfile.mkstemp`` raises (e.g. ``PermissionError``) if the folder is not writable."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
