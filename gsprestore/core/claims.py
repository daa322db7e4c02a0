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

Claim and lock files are the tool's own and nothing else is ever taken for one: each is created
afresh (``O_CREAT | O_EXCL | O_NOFOLLOW``: never through a symbolic link, never into a file that
is there already), and an existing file at its name is removed only when it proves to be one
this tool made whose process is gone (:func:`_ours`): anything else there (a link, a folder, a
user's file) is left alone and the claim or lock is refused in one line naming it.

* :func:`claim_output` locks ``.NAME.claim`` beside an output; :func:`release_output` removes
  it. One that cannot be created (no free inodes, a read-only folder, a file of the user's in the
  way) is a one-line :class:`GspError`.
* :func:`run_lock` holds ``.NAME.lock`` beside a folder for a whole run: a second run into the
  same folder is refused in one line.
* :func:`sweep_stale` removes, from the output folders a run is about to write into, the claims
  nobody holds and the temporary ``.NAME.<pid>-XXXX.part`` files (:func:`gsprestore.core.atomic.temp_name`,
  locked by their writer, :func:`gsprestore.core.atomic.create_exclusive`) that no live writer holds:
  what ``kill -9`` during a write leaves. A live run's files are never touched, nor a file that
  only looks like a claim.
"""

from __future__ import annotations

import errno
import os
import re
import stat
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
#: What a claim or lock file holds, byte for byte: the pid of the process that made it, in
#: decimal (what :func:`_write_pid` writes; what earlier versions wrote too).
_PID_TEXT = re.compile(rb"[1-9][0-9]{0,9}")
#: An empty claim or lock file younger than this (seconds) is one being made right now (its maker
#: creates, locks, then writes its pid); an older one is not taken for ours.
_MAKING_S = 2.0
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


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


_READ = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_BINARY", 0)


def _plain(st: os.stat_result) -> bool:
    """A regular file with one name: not a symbolic link, a folder, a FIFO, a device or a hard link."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def held_by_someone(path: Path) -> bool | None:
    """Whether a live process holds the OS lock of the existing file ``path`` (None: cannot tell,
    or not a plain file, :func:`_plain`: a link is never followed, a FIFO never opened)."""
    try:
        if not _plain(os.lstat(path)):
            return None
        fd = os.open(path, _READ)
    except OSError:
        return None
    try:
        taken = try_lock(fd)
        return None if taken is None else not taken
    finally:
        os.close(fd)  # closing drops the lock this probe may have taken


def _what_is(path: Path) -> str:
    """What is at ``path``, in words, for the message that refuses to take it."""
    try:
        st = os.lstat(path)
    except OSError:
        return "a file"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if not stat.S_ISREG(st.st_mode):
        return "a special file"
    if st.st_nlink != 1:
        return f"a file with {st.st_nlink} names (hard links)"
    return "an empty file" if st.st_size == 0 else "a file"


def _ours(path: Path) -> tuple[str, int]:
    """What the existing file at a claim or lock name ``path`` is, and the pid it names:

    * ``("held", pid)``: a live process holds it (pid 0 when it has not written its pid yet);
    * ``("removed", pid)``: a claim or lock this tool made whose process is gone, removed now;
    * ``("making", 0)``: an empty file just created (its maker locks it and writes its pid next);
    * ``("gone", 0)``: nothing there any more, or it changed while looked at (look again);
    * ``("foreign", 0)``: something this tool did not make.

    The proof that a file nobody holds is this tool's own, to be removed (by a rerun that takes
    the claim over, or by :func:`sweep_stale`): its name is that of a claim or lock (the
    caller's), it is a regular file with one name, never a symbolic link (:func:`_plain`),
    and it holds exactly what :func:`_write_pid` writes, a pid in decimal and nothing else (a
    user's notes, an empty file older than :data:`_MAKING_S`, anything longer than a pid is
    left alone). It is removed while this process holds its lock, so no live run can be holding
    it then; where there are no locks, only when the process it names is gone."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone", 0
    if not _plain(st):
        return "foreign", 0
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return "gone", 0
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # became a link since: look again
            return "gone", 0
        raise
    try:
        st = os.fstat(fd)
        if not (_plain(st) and os.path.samestat(st, os.lstat(path))):
            return "gone", 0
        taken = try_lock(fd)
        data = os.read(fd, 16)
        pid = int(data) if _PID_TEXT.fullmatch(data) and len(data) == st.st_size else 0
        if taken is False:  # a live process holds it: a run of this tool (nothing else locks these names)
            return "held", pid
        if not data:
            return ("making", 0) if time.time() - st.st_mtime < _MAKING_S else ("foreign", 0)
        if not pid:
            return "foreign", 0
        if taken is None and pid != os.getpid() and _pid_alive(pid):  # no locks here: the pid decides
            return "held", pid
        if not os.path.samestat(os.fstat(fd), os.lstat(path)):
            return "gone", 0
        os.unlink(path)  # while holding its lock: nobody can take it meanwhile
        return "removed", pid
    except FileNotFoundError:
        return "gone", 0
    finally:
        os.close(fd)


def _open_locked(path: Path, role: str) -> tuple[int | None, int]:
    """Create ``path`` afresh and lock it: ``(descriptor holding the lock, 0)``, or ``(None, pid)``
    when a live process holds the claim or lock there. Never follows a symbolic link and never
    opens a file that is there already for writing: one this tool made whose process is gone is
    removed first (:func:`_ours`); anything else at the name is a :class:`GspError` naming it
    (``role``: what the file is for, e.g. ``"claim file for a.png"``). Raises ``OSError`` when
    it cannot be created."""
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | _NOFOLLOW | getattr(os, "O_BINARY", 0)
    for _ in range(400):
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            state, pid = _ours(path)
            if state == "held":
                return None, pid
            if state == "foreign":
                raise GspError(f"{_what_is(path)} is in the way of gsprestore's {role}; gsprestore did not "
                               "make it and leaves it alone: move or rename it", path) from None
            if state == "making":
                time.sleep(0.01)
            continue  # removed (a killed run's) or gone: create it afresh
        # made just now, so ours. Another run's look at it (_ours) may hold its lock for an instant
        for _ in range(200):
            taken = try_lock(fd)
            if taken is not False:
                break
            time.sleep(0.005)
        else:  # pragma: no cover - somebody keeps a lock on the file this process just made
            _drop(path, fd)
            return None, 0
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd, 0
        os.close(fd)  # pragma: no cover - removed or replaced under us: make it again
    return None, 0


def _write_pid(fd: int) -> None:
    """Write this process's pid into the lock file ``fd``, created empty by :func:`_open_locked`."""
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
    has not written its pid yet). A claim nobody holds (its run was killed) is taken over; a file
    at that name that is not a claim this tool made (a symbolic link, a user's file) is never
    followed, written or removed: a one-line :class:`GspError` naming it."""
    claim = claim_path(output)
    if str(claim) in _HELD:
        return None
    try:
        fd, owner = _open_locked(claim, f"claim file for {output.name}")
    except OSError as exc:  # no free inodes, a read-only folder...
        raise GspError(f"cannot create the claim file {claim.name} ({exc.strerror or exc})", output.parent) from None
    if fd is None:
        return owner
    _write_pid(fd)
    _HELD[str(claim)] = fd
    return None


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
    way out, as are the folders above ``folder`` that this created for it and left empty. A file
    at the lock's name that this tool did not make (a symbolic link, a user's file) is never
    followed, written or removed: a one-line :class:`GspError` naming it."""
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
        fd, pid = _open_locked(lock, f"lock file for {folder.name}")
    except OSError as exc:
        _remove_empty(made)
        raise GspError(f"cannot create the lock file {lock.name} ({exc.strerror or exc})", parent) from None
    except GspError:
        _remove_empty(made)
        raise
    if fd is None:
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
    """In each output folder, remove what killed runs left: a ``.NAME.claim`` nobody holds that
    proves to be one this tool made (a regular file with one name holding exactly a pid:
    :func:`_ours`; a user's ``.insurance.claim``, a link, an empty file are left alone) and every
    ``.NAME.<pid>-XXXX.part`` (a regular file with one name, never a link) no live writer holds.
    A live run's files are never touched. Returns how many files were removed."""
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
            if entry.endswith(".claim") and len(entry) > len("..claim"):
                try:
                    if str(path) not in _HELD and _ours(path)[0] == "removed":
                        removed += 1
                except OSError:  # unreadable (another user's, say): left alone
                    pass
                continue
            info = temp_owner(entry)
            if info is None or info[2] != ".part" or info[1] == os.getpid():
                continue
            try:
                if not _plain(os.lstat(path)):  # a link or a folder of that name is nobody's temporary file
                    continue
            except OSError:
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


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0
