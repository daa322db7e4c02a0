"""Claims on output files, so that runs sharing an output folder share the work; locks on the
folders a whole run owns (``train --out``, ``train-pack -o``); and the sweep of what killed runs
leave behind.

A claim is alive exactly as long as its process: it is an OS file lock (``flock``) on a small
file, held on a descriptor kept open by the run, which the kernel drops when the process ends,
however it ends (``kill -9`` included). A claim file nobody holds is free, whatever pid it
names: a killed run's pid reused by an unrelated process never blocks a rerun. The pid written
into the file only names the holder in messages. (Where the platform has no ``fcntl``, the
claim is the file's create-exclusive existence and a process counts as gone when no process of
its pid exists on this machine.)

* :func:`claim_output` locks ``.NAME.claim`` beside an output; :func:`release_output` removes
  it. One that cannot be created (no free inodes, a read-only folder) is a one-line
  :class:`GspError`.
* :func:`run_lock` holds ``.NAME.lock`` beside a folder for a whole run: a second run into the
  same folder is refused in one line.
* :func:`sweep_stale` removes, from the output folders a run is about to write into, the claims
  nobody holds and the temporary ``.NAME.<pid>-XXXX.part`` files (:func:`gsprestore.core.atomic.temp_name`,
  locked by their writer, :func:`gsprestore.core.atomic.create_exclusive`) that no live writer holds:
  what ``kill -9`` during a write leaves. A live run's files are never touched.
"""

from __future__ import annotations

import errno
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .atomic import temp_owner
from .errors import GspError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: Claims this process holds: claim path -> the descriptor that holds its lock.
_HELD: dict[str, int] = {}
#: A temporary file is taken for a killed run's only when nobody holds its lock and, where its pid
#: names a live process (possibly a reused pid), when it is at least this old (seconds).
PART_GRACE = 60.0


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    except OSError:
        return False
    return True


def try_lock(fd: int) -> bool | None:
    """Take the exclusive OS lock of the open file ``fd`` without waiting: True when taken,
    False when another process holds it, None where the platform or file system cannot tell."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        return None
    return True


def held_by_someone(path: Path) -> bool | None:
    """Whether a live process holds the OS lock of the existing file ``path`` (None: cannot tell)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        taken = try_lock(fd)
        return None if taken is None else not taken
    finally:
        os.close(fd)  # closing drops the lock this probe may have taken


def _open_locked(path: Path) -> int | None:
    """Open (creating it if need be) and lock ``path``; the descriptor holding the lock, or None
    when a live process holds it. Raises ``OSError`` when it cannot be created."""
    if fcntl is None:  # pragma: no cover - the pid fallback
        return _open_exclusive(path)
    for _ in range(20):
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        taken = try_lock(fd)
        if taken is False:
            os.close(fd)
            return None
        # the file locked must still be the one at that name (its holder unlinks it on release)
        try:
            if taken is None or os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    return None


def _open_exclusive(path: Path) -> int | None:  # pragma: no cover - platforms without fcntl
    for _ in range(3):
        try:
            return os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        except FileExistsError:
            owner = _claim_owner(path)
            if owner and _pid_alive(owner) and owner != os.getpid():
                return None
            if not owner and time.time() - _mtime(path) < 5:  # being created right now
                time.sleep(0.05)
                continue
            try:
                path.unlink()  # stale: its process is gone
            except FileNotFoundError:
                pass
    return None


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())


def _drop(path: Path, fd: int) -> None:
    """Remove the lock file ``path`` (while still holding it, so nobody locks a removed file) and
    close ``fd``."""
    try:
        os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def claim_path(output: Path) -> Path:
    return output.parent / f".{output.name}.claim"


def claim_output(output: Path) -> int | None:
    """Claim ``output`` for this process: lock ``.NAME.claim`` (holding our pid, for messages).
    Returns None when claimed, else the pid of the live process that holds the claim (0 when it
    has not written its pid yet). A claim nobody holds (its run was killed) is taken over."""
    claim = claim_path(output)
    if str(claim) in _HELD:
        return None
    try:
        fd = _open_locked(claim)
    except OSError as exc:  # no free inodes, a read-only folder...
        raise GspError(f"cannot create the claim file {claim.name} ({exc.strerror or exc})", output.parent) from None
    if fd is None:
        return _claim_owner(claim)
    _write_pid(fd)
    _HELD[str(claim)] = fd
    return None


def _claim_owner(claim: Path) -> int:
    try:
        return int(claim.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def release_output(output: Path) -> None:
    """Remove this process's claim on ``output`` (if it holds it)."""
    claim = claim_path(output)
    fd = _HELD.pop(str(claim), None)
    if fd is not None:
        _drop(claim, fd)


@contextmanager
def run_lock(folder: str | Path, what: str) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``folder`` for the block: the run owns the folder. A second run
    (``what``: e.g. ``"training run"``) into the same folder is a one-line :class:`GspError`. The
    lock dies with its process (nothing to clean up after ``kill -9``); the file is removed on the
    way out, as are the folders above ``folder`` that this created for it and left empty."""
    folder = Path(folder)
    parent = folder.parent if str(folder.parent) else Path(".")
    made: list[Path] = []
    for p in [parent, *parent.parents]:
        if p.exists() or p == p.parent:
            break
        made.insert(0, p)
    try:
        for p in made:
            p.mkdir()
    except OSError as exc:
        _remove_empty(made)
        raise GspError(f"cannot create the folder ({exc.strerror or exc})", parent) from None
    lock = parent / f".{folder.name}.lock"
    try:
        fd = _open_locked(lock)
    except OSError as exc:
        _remove_empty(made)
        raise GspError(f"cannot create the lock file {lock.name} ({exc.strerror or exc})", parent) from None
    if fd is None:
        pid = _claim_owner(lock)
        _remove_empty(made)
        raise GspError(f"another gsprestore {what} is writing this folder" + (f" (pid {pid})" if pid else "")
                       + "; wait for it to end or choose another folder", folder)
    try:
        _write_pid(fd)
        yield
    finally:
        _drop(lock, fd)
        _remove_empty(made)


def _remove_empty(made: list[Path]) -> None:
    for p in reversed(made):
        try:
            p.rmdir()
        except OSError:
            break


def sweep_stale(folders: set[Path]) -> int:
    """In each output folder, remove what killed runs left: a ``.NAME.claim`` nobody holds and
    every ``.NAME.<pid>-XXXX.part`` no live writer holds (a live run's files are never touched).
    Returns how many files were removed."""
    removed = 0
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if not entry.startswith("."):
                continue
            path = Path(folder) / entry
            if entry.endswith(".claim"):
                if str(path) in _HELD:
                    continue
                removed += _sweep_claim(path)
                continue
            info = temp_owner(entry)
            if info is None or info[2] != ".part" or info[1] == os.getpid():
                continue
            held = held_by_someone(path)
            if held is None:  # cannot tell: the pid decides
                dead = not _pid_alive(info[1])
            else:
                dead = not held and (not _pid_alive(info[1]) or time.time() - _mtime(path) > PART_GRACE)
            if dead:
                try:
                    os.unlink(path)
                    removed += 1
                except OSError:
                    pass
    return removed


def _sweep_claim(path: Path) -> int:
    if fcntl is None:  # pragma: no cover - the pid fallback
        owner = _claim_owner(path)
        if owner > 0 and owner != os.getpid() and not _pid_alive(owner):
            try:
                os.unlink(path)
                return 1
            except OSError:
                return 0
        return 0
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return 0
    taken = try_lock(fd)
    try:
        if taken and os.path.samestat(os.fstat(fd), os.stat(path)):
            os.unlink(path)  # while holding its lock: nobody can take it meanwhile
            return 1
    except OSError:
        pass
    finally:
        os.close(fd)
    return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
