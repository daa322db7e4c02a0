"""JSON from files a user can hand us (the weights manifest, ``pack.json``, a run's
``config.json`` and log, ``--model-opt`` values, an image's description): :func:`loads` is
``json.loads`` whose every failure is a ``ValueError``, a document nested deeper than Python's
recursion limit included (``json.loads`` raises ``RecursionError`` there), so that callers turn it
into their one-line error."""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; a document that does not parse, or is nested too deeply to parse,
    raises ``ValueError`` (``json.JSONDecodeError`` is one)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None
