"""SHA-256 of a file: the one function every check by content uses (shipped weights against their
manifest, data sets against their registered checksums, training photos' fingerprints).

``cached=True`` remembers a digest by (resolved path, size, mtime) for the life of the process: a
data set verified once per command is not hashed again by every later step. The weights check
hashes afresh every time (a file rewritten with the same size and time must not pass on a stale
digest)."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path


def _hash(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=4096)
def _hash_cached(path: str, size: int, mtime_ns: int) -> str:
    return _hash(path)


def sha256_file(path: str | Path, *, cached: bool = False) -> str:
    """The hex SHA-256 of the file at ``path`` (``cached``: see the module docstring)."""
    if not cached:
        return _hash(path)
    st = os.stat(path)
    return _hash_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
