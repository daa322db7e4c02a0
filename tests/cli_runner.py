"""Run the Typer app in-process the way the console script does (shared by the CLI tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gsprestore.cli.app import _register, app
from gsprestore.errors import GspError

_register()


def cli(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run the app like the console script does (`app.main`): a GspError becomes one
    `error: ...` line on stderr and its exit code."""
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(old)
    exc = result.exception
    if isinstance(exc, GspError):
        return exc.exit_code, result.stdout, result.stderr + f"error: {exc}\n"
    if exc is not None and not isinstance(exc, SystemExit):
        raise exc
    return result.exit_code, result.stdout, result.stderr


def lock_holder(path: Path) -> subprocess.Popen:
    """A process that holds ``path``'s OS lock (a claim, as a live run holds it) until killed."""
    code = ("import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.write(fd, str(os.getpid()).encode())\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc
