"""Run the Typer app in-process the way the console script does, or the real command line in a
fresh interpreter, and make small test images (shared by the CLI tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from gsprestore.cli.app import _register, app
from gsprestore.core.errors import GspError
from gsprestore.imageio.images import write_image

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


ROOT = Path(__file__).resolve().parents[1]
#: the console script, in a fresh interpreter running this checkout
GSPRESTORE = [sys.executable, "-c", "import sys; from gsprestore.cli.app import main; sys.argv[0] = 'gsprestore'; main()"]


def checkout_env(env: dict | None = None) -> dict:
    """The environment of a fresh interpreter running this checkout on the PyTorch path."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "GSPRESTORE_NATIVE": "0", **(env or {})}


def run_cli(*args: object, cwd: Path, timeout: float = 120, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
    """The real command line in a fresh interpreter (this checkout, PyTorch path)."""
    return subprocess.run([*GSPRESTORE, *map(str, args)], cwd=cwd, env=checkout_env(env),
                          capture_output=True, text=True, timeout=timeout, **kw)


def rgb(path: Path, h: int = 16, w: int = 20, depth: int = 8, seed: int = 0) -> Path:
    """A random ``h`` x ``w`` RGB image written to ``path`` (folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, np.random.default_rng(seed).random((h, w, 3)), depth)
    return path


def gray(path: Path, h: int = 16, w: int = 20, depth: int = 8, seed: int = 0) -> Path:
    """A random ``h`` x ``w`` one-channel image written to ``path`` (folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, np.random.default_rng(seed).random((h, w)), depth)
    return path
