"""The ``gsprestore`` console script's first code (and ``python -m gsprestore``'s).

Importing the app (Typer, Rich, the command modules) takes a tenth of a second, before
:func:`gsprestore.cli.app.main` installs its signal handling: a Ctrl-C in that window would print
Python's traceback. Here it is one line and exit code 130 instead, like a Ctrl-C at any later
moment (SIGTERM there ends the process silently, Python's default).

A restoring command ends with :func:`_leave_now` (issue 50): once the command has returned, its
outputs are written, renamed into place and closed, and what remains of a normal exit is the
interpreter's teardown (every module, torch's thread pools and allocator), 0.4-0.7 s after a
RAW development on a 2-core machine, time the user waits for nothing."""

from __future__ import annotations

import os
import sys

#: The commands whose process ends without the interpreter's teardown (:func:`_leave_now`): the
#: ones that load a network and write files, and start no worker processes.
LEAVE_NOW_COMMANDS = ("demosaic", "upscale2x")


def main() -> None:
    from ..core.process import configure_openmp

    configure_openmp()  # before anything imports torch
    try:
        from .app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    try:
        run()
    except SystemExit as done:
        if len(sys.argv) > 1 and sys.argv[1] in LEAVE_NOW_COMMANDS:
            _leave_now(done)
        raise


def _leave_now(done: SystemExit) -> None:
    """End the process with ``done``'s exit status without the interpreter's teardown: standard
    output and error flushed first (where that fails, e.g. a closed pipe, return and let Python's
    own exit report it). Nothing of the tool's waits for the teardown: outputs, claims and locks
    are finished in the command's own ``finally`` blocks, and no ``atexit`` hook is registered."""
    code = done.code
    if code is not None and not isinstance(code, int):
        return  # a message as the status: Python prints it
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code or 0)
