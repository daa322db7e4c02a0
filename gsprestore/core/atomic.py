"""Atomic file writes: write a temporary file beside the target, flush + fsync, give it the usual
permissions, then ``os.replace`` it over the target. A crash or an exception leaves either the old
file or none, never a half-written one. Used by every writer in the package (images, weights,
checkpoints, reports, downloads)."""

from __future__ import annotations

import os
import re
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # temporary files are created 0600; finished outputs get the usual permissions


#: The most bytes :func:`temp_name` adds to a name (``.``, ``.``, pid, ``-``, 8 hex digits, a suffix
#: of up to 6): an output name must leave this much room under the file system's NAME_MAX.
TEMP_NAME_EXTRA = 32
_TEMP = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)-[0-9a-f]{8}(?P<suffix>\.[a-z]{1,5})")


def temp_name(path: Path, suffix: str) -> Path:
    """A fresh hidden name beside ``path`` (``.NAME.<pid>-<random>SUFFIX``), not created yet. Callers
    enter their ``try`` / ``finally`` first and then create it with :func:`create_exclusive`, so a
    signal (SIGINT / SIGTERM, raised as an exception) can never land between the file's creation
    and the clean-up that removes it. The pid says whose it is: one left by a killed process is
    recognised (:func:`temp_owner`) and swept by the next run."""
    parent = path.parent if str(path.parent) else Path(".")
    return parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{suffix}"


def temp_owner(name: str) -> tuple[str, int, str] | None:
    """``(NAME, pid, SUFFIX)`` of a :func:`temp_name` file name, or None for any other name."""
    m = _TEMP.fullmatch(name)
    return None if m is None else (m["name"], int(m["pid"]), m["suffix"])


def create_exclusive(tmp: Path) -> int:
    """Create ``tmp`` (mode 0600, must not exist) and return its descriptor, holding the file's OS
    lock (``flock``, where there is one) while it is open: the sweep of a later run
    (:func:`gsprestore.core.claims.sweep_stale`) leaves a file alone while its writer lives, and takes
    it once the writer is gone, even if its pid was reused since."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):  # no fcntl (Windows), or a file system without locks: the pid says
        pass
    return fd


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
    Raises what ``os.open`` raises (e.g. ``PermissionError``) if the folder is not writable."""
    path = Path(path)
    tmp = temp_name(path, suffix)
    try:
        with os.fdopen(create_exclusive(tmp), mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
