"""Claims on output files, so that runs sharing an output folder share the work, and the sweep of
what killed runs leave behind.

* :func:`claim_output` creates ``.NAME.claim`` beside an output create-exclusively, holding the
  pid of the run working on it; a claim whose process is gone (killed) is taken over, and one that
  cannot be created (no free inodes, a read-only folder) is a one-line :class:`GspError`.
* :func:`sweep_stale` removes, from the output folders a run is about to write into, the claims
  and the temporary ``.NAME.<pid>-XXXX.part`` files (:func:`gsprestore.atomic.temp_name`) whose
  process is gone: what ``kill -9`` during a write leaves. A live run's files are never touched.

A process counts as gone when no process of that pid exists on this machine (the claim holds the
pid, the temporary file's name carries it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .atomic import temp_owner
from .errors import GspError


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def claim_path(output: Path) -> Path:
    return output.parent / f".{output.name}.claim"


def claim_output(output: Path) -> int | None:
    """Claim ``output`` for this process: create ``.NAME.claim`` (holding our pid) exclusively.
    Returns None when claimed, else the pid of the live process that holds the claim (0 when it
    has not written its pid yet). A claim left by a process that is gone (killed) is taken over."""
    claim = claim_path(output)
    for _ in range(3):
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError as exc:
            if not isinstance(exc, FileExistsError):  # no free inodes, a read-only folder...
                raise GspError(f"cannot create the claim file {claim.name} ({exc.strerror or exc})",
                               output.parent) from None
            owner = _claim_owner(claim)
            if owner and _pid_alive(owner) and owner != os.getpid():
                return owner
            if not owner and time.time() - _mtime(claim) < 5:  # being created right now
                time.sleep(0.05)
                continue
            try:
                claim.unlink()  # stale: its process is gone
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return None
    return None if not claim.exists() else 0


def _claim_owner(claim: Path) -> int:
    try:
        return int(claim.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def sweep_stale(folders: set[Path]) -> int:
    """In each output folder, remove what killed runs left: a ``.NAME.claim`` whose process is
    gone and every ``.NAME.<pid>-XXXX.part`` whose process is gone (a live run's files are never
    touched). Returns how many files were removed."""
    removed = 0
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if not entry.startswith("."):
                continue
            if entry.endswith(".claim"):
                owner = _claim_owner(folder / entry)
                dead = owner > 0 and owner != os.getpid() and not _pid_alive(owner)
            else:
                info = temp_owner(entry)
                dead = (info is not None and info[2] == ".part" and info[1] != os.getpid()
                        and not _pid_alive(info[1]))
            if dead:
                try:
                    os.unlink(folder / entry)
                    removed += 1
                except OSError:
                    pass
    return removed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def release_output(output: Path) -> None:
    """Remove this process's claim on ``output`` (if it still holds it)."""
    claim = claim_path(output)
    try:
        if claim.read_text().strip() == str(os.getpid()):
            claim.unlink()
    except OSError:
        pass
