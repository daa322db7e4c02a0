"""A build lock that a killed build cannot leave behind: who builds the native kernels, and when a
lock is stale.

``torch.utils.cpp_extension`` guards a build folder with a bare ``lock`` file (created
exclusively, removed when the build ends) and waits *for ever*, silently, while it exists; a build
killed with ``kill -9`` leaves it, and every later run hangs. gsprestore therefore takes its own
lock first (:func:`acquire`): ``gsprestore-build.lock`` in the same folder, created exclusively,
holding ``pid host start-time``. With it:

* a lock whose process is gone (same host, pid not running) or that is older than
  :data:`STALE_AFTER_S` (a build takes about a minute) is stale: it is removed, with torch's
  ``lock`` beside it, and the build goes on, with a one-line note. The compilers the killed build
  had started (ninja and the C++ compiler run with the build folder as their working folder) are
  orphans that would keep running and writing there: :func:`stop_orphans` stops them first
  (Linux; elsewhere they are left to finish);
* a lock held by a live process is waited on for at most ``wait_s`` seconds (a one-line note says
  who holds it); after that the caller is told to use the PyTorch path for this run instead of
  waiting;
* holding our lock, a torch ``lock`` beside it can only be a left-over (every gsprestore build
  takes our lock first), so it is removed before the build.

Messages go to ``notice`` (one line each); nothing here raises for a lock problem.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

LOCK_NAME = "gsprestore-build.lock"
TORCH_LOCK_NAME = "lock"
STALE_AFTER_S = 30 * 60  # no build runs this long: older locks are left-overs, whoever holds them
DEFAULT_WAIT_S = 180.0  # how long a run waits for another process's build before going without it
POLL_S = 0.2
ANNOUNCE_AFTER_S = 2.0  # loading an already-built extension holds the lock for milliseconds: no note


@dataclass(frozen=True)
class Owner:
    """What a lock file says about its holder."""

    pid: int
    host: str
    started: float


def read_owner(path: Path) -> Owner | None:
    """The holder written in a lock file, or None if the file is missing, empty or unreadable."""
    try:
        pid, host, started = path.read_text().split()
        return Owner(int(pid), host, float(started))
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (someone else's counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_reason(path: Path, now: float | None = None) -> str | None:
    """Why the lock at ``path`` is a left-over (its process is gone, or it is too old), or None
    while it may still belong to a running build."""
    now = time.time() if now is None else now
    owner = read_owner(path)
    try:
        age = now - path.stat().st_mtime
    except FileNotFoundError:
        return None
    if age > STALE_AFTER_S:
        return f"{age / 60:.0f} minutes old"
    if owner is None:
        return "unreadable" if age > 10 else None  # a lock being written right now has no text yet
    if owner.host == socket.gethostname() and not pid_alive(owner.pid):
        return f"its process {owner.pid} is gone"
    return None


def stop_orphans(folder: str | Path) -> list[int]:
    """Stop (SIGTERM) this user's processes whose working folder is ``folder``: what remains of a
    killed build (torch runs ninja there, ninja the compilers). Returns their pids. Only called
    once the build's own process is known to be gone. Linux only (reads ``/proc``)."""
    import signal

    target = os.path.realpath(folder)
    stopped = []
    proc = Path("/proc")
    if not proc.is_dir():
        return stopped
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid() or os.readlink(entry / "cwd") != target:
                continue
            os.kill(int(entry.name), signal.SIGTERM)
            stopped.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return stopped


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class BuildLock:
    """Held by :func:`acquire`; :meth:`release` (or leaving the ``with`` block) removes it."""

    def __init__(self, path: Path):
        self.path = path

    def release(self) -> None:
        owner = read_owner(self.path)
        if owner is not None and owner.pid == os.getpid():
            _remove(self.path)

    def __enter__(self) -> "BuildLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(build_dir: str | Path, *, wait_s: float = DEFAULT_WAIT_S,
            notice: Callable[[str], None] | None = None) -> BuildLock | None:
    """Take the build lock of ``build_dir`` (see the module docstring). Returns the held
    :class:`BuildLock`, or None when another live process keeps building past ``wait_s`` seconds
    (the caller should then go without the native kernels for this run)."""
    say = notice or (lambda message: None)
    folder = Path(build_dir)
    path = folder / LOCK_NAME
    deadline = time.monotonic() + max(0.0, wait_s)
    announced = False
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            reason = stale_reason(path)
            if reason is not None:
                orphans = stop_orphans(folder)
                extra = f"; stopped {len(orphans)} compiler process(es) it left running" if orphans else ""
                say(f"removed a stale native-build lock in {folder} ({reason}){extra}")
                _remove(path)
                _remove(folder / TORCH_LOCK_NAME)
                continue
            owner = read_owner(path)
            who = f"process {owner.pid}" if owner else "another process"
            if time.monotonic() >= deadline:
                say(f"the native kernels are still being built by {who} in {folder}; "
                    "using the PyTorch path for this run")
                return None
            if not announced and time.monotonic() > deadline - wait_s + ANNOUNCE_AFTER_S:
                say(f"waiting up to {wait_s:.0f} s for {who} building the native kernels in {folder}")
                announced = True
            time.sleep(POLL_S)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()} {socket.gethostname()} {time.time():.3f}\n")
        torch_lock = folder / TORCH_LOCK_NAME
        if torch_lock.exists():  # nobody builds here without our lock: a killed build's left-over
            say(f"removed a stale native-build lock {torch_lock} (left by an interrupted build)")
            _remove(torch_lock)
        return BuildLock(path)
