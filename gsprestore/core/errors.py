"""Domain errors. Every error a user can cause is a :class:`GspError` whose ``str`` is one line
naming the file (when there is one) and the reason; the CLI prints it and exits non-zero.

:func:`one_line` is what keeps it one line: control characters (a newline in a file name, a
terminal escape sequence) and undecodable bytes are written as escapes in every message."""

from __future__ import annotations

from pathlib import Path

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: object) -> str:
    """``text`` on one printable line: control characters (C0, DEL, C1) and line separators as
    ``\\n``, ``\\r``, ``\\t``, ``\\xNN`` or ``\\uNNNN``, and the surrogates that stand for
    undecodable file-name bytes as ``\\xNN``. Idempotent: an escaped text has nothing left to escape."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code in (0x2028, 0x2029):  # line and paragraph separators
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


class GspError(Exception):
    """A user-facing error: ``<path>: <reason>`` (or just ``<reason>``), on one line."""

    exit_code = 1

    def __init__(self, reason: str, path: str | Path | None = None):
        self.reason = reason
        self.path = None if path is None else str(path)
        super().__init__(one_line(f"{self.path}: {reason}" if self.path else reason))


class UsageError(GspError):
    """Bad arguments (unknown pattern, unknown method...): exit code 2."""

    exit_code = 2


class WeightsError(GspError):
    """Missing, tampered or incompatible model weights."""


class DatasetError(GspError):
    """A dataset that is missing, incomplete or fails its checksums."""
