"""Is this the same file? Asked by identity, never by the path string.

Two paths name the same file when they reach the same device and inode: through a symbolic link
to a folder, a hard link, a bind mount (``-v /photos:/in -v /photos:/out``), ``..`` or a
case-insensitive file system (macOS, Windows: ``IMG.PNG`` is ``img.png``). Every place that
decides "is the output one of the inputs" asks :func:`same_file` or compares :func:`path_key`.

* :func:`file_id` -- ``(st_dev, st_ino)`` of an existing path (links followed), else None.
* :func:`file_version` -- that identity with the size and modification time: unchanged since?
* :func:`same_file` -- two paths, both existing, are one file.
* :func:`path_key` -- a key equal for two paths that are, or would be once written, one file:
  the identity of an existing file; for a file not written yet, its nearest existing folder's
  identity and the rest of its path (case-folded where that folder's file system ignores case).
* :func:`case_insensitive` -- whether a folder's file system ignores the case of names (asked of
  the folder itself, by the name it is reached by in its parent).
"""

from __future__ import annotations

import os
from pathlib import Path


def file_id(path: str | Path) -> tuple[int, int] | None:
    """``(device, inode)`` of ``path`` (symbolic links followed), or None when it does not exist
    or cannot be looked at."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def file_version(path: str | Path) -> tuple[int, int, int, int] | None:
    """``(device, inode, size, mtime in ns)`` of ``path`` (links followed), or None: equal at two
    moments when the path still names the same file and it was not rewritten in between."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when ``a`` and ``b`` both exist and are one file (same device and inode)."""
    ia = file_id(a)
    return ia is not None and ia == file_id(b)


_CASE: dict[tuple[int, int], bool] = {}


def case_insensitive(folder: str | Path) -> bool:
    """True when names in ``folder`` ignore case: the folder is reached by its own name with the
    case of its letters swapped, or so is one of its entries. False when it cannot be told (no
    letters to swap, an unreadable folder)."""
    folder = Path(os.path.abspath(folder))
    key = file_id(folder)
    if key is None:
        return False
    if key in _CASE:
        return _CASE[key]
    answer = None
    candidates = [folder]
    try:
        with os.scandir(folder) as it:
            for entry in it:
                candidates.append(folder / entry.name)
                if len(candidates) > 8:
                    break
    except OSError:
        pass
    for path in candidates:
        swapped = path.name.swapcase()
        if swapped == path.name or not path.name:
            continue
        other = path.with_name(swapped)
        try:
            answer = os.path.samestat(os.lstat(path), os.lstat(other))
        except OSError:
            answer = False  # the swapped name is not there: case matters
        break
    _CASE[key] = bool(answer)
    return bool(answer)


def path_key(path: str | Path) -> tuple:
    """A key that two paths share when they are one file, or will be once written: the file's
    :func:`file_id` when it exists; else the identity of its nearest existing folder and the rest
    of the path below it (case-folded on a case-insensitive file system)."""
    fid = file_id(path)
    if fid is not None:
        return ("file", *fid)
    path = Path(os.path.abspath(path))
    rest: list[str] = []
    folder = path
    while True:
        rest.insert(0, folder.name)
        folder = folder.parent
        fid = file_id(folder)
        if fid is not None or folder == folder.parent:
            break
    name = "/".join(rest)
    if fid is None:
        return ("path", str(path))
    return ("name", *fid, name.casefold() if case_insensitive(folder) else name)
