"""JSON from files a user can hand us (the weights manifest, ``pack.json``, a run's
``config.json`` and log, ``--model-opt`` values, an image's description): :func:`loads` is
``json.loads`` whose every failure is a ``ValueError``, a document nested deeper than Python's
recursion limit included (``json.loads`` raises ``RecursionError`` there), so that callers turn it
into their one-line error. :func:`dumps` is the one form the package writes JSON files in (a run's ``config.json`` and summary
through :func:`dump_atomic`, a benchmark's report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; a document that does not parse, or is nested too deeply to parse,
    raises ``ValueError`` (``json.JSONDecodeError`` is one)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def dumps(obj: Any) -> str:
    """``obj`` as the package's JSON files hold it: indented by 2, one trailing newline."""
    return json.dumps(obj, indent=2) + "\n"


def dump_atomic(obj: Any, path: str | Path) -> Path:
    """``obj`` as indented JSON (UTF-8, one trailing newline) written atomically: a temp file beside
    ``path`` renamed over it (:func:`gsprestore.core.atomic.atomic_file`), so a crash leaves the old
    file or the new one, never half of one. ``OSError`` passes to the caller, who names the file."""
    from .atomic import atomic_file

    path = Path(path)
    with atomic_file(path, "w", encoding="utf-8", newline="") as f:
        f.write(dumps(obj))
    return path
