"""Registry of the evaluation data sets, where to find them, and their checksums.

Each data set (``kodak``, ``mcm``, ``urban100``) is a folder of images whose names and SHA-256
digests ship with the package (``gsprestore/data/<folder>.sha256``, ``sha256sum`` format). The
images themselves never ship: they are read from the first of

1. ``data_dir`` (the CLI's ``--data-dir``): either the data-set folder itself or a parent holding
   ``kodak24/``, ``mcm/``, ``urban100/``;
2. the folder named by the environment variable ``GSPRESTORE_DATA_DIR`` (same two layouts);
3. the per-user cache, ``platformdirs.user_cache_dir("gsprestore")/datasets``, where
   :func:`download` will put them (downloading is not implemented yet; see that function).

Only the first location that is *given* is looked at: an explicit ``--data-dir`` that does not
hold the data set is an error, never a silent fall-back to another copy.

Every problem is a one-line :class:`~gsprestore.errors.DatasetError` naming the path, what is
missing or which file differs, and what to pass instead. Checksums are verified on every lookup;
digests are cached in-process by (path, size, mtime), so hashing happens once per file.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from .errors import DatasetError, UsageError

ENV_VAR = "GSPRESTORE_DATA_DIR"


@dataclass(frozen=True)
class DatasetSpec:
    """A registered data set: ``folder`` is its directory name, ``checksum_file`` the packaged
    ``sha256sum`` list of its files (``gsprestore/data/``), ``role`` what the protocol uses it for."""

    name: str
    folder: str
    checksum_file: str
    description: str
    role: str = "test"

    @property
    def folder_names(self) -> tuple[str, ...]:
        """Directory names accepted for this data set (its folder, then its registry name)."""
        return tuple(dict.fromkeys((self.folder, self.name)))


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        DatasetSpec("kodak", "kodak24", "kodak24.sha256", "Kodak PhotoCD, 24 PNG images 768x512 / 512x768"),
        DatasetSpec("mcm", "mcm", "mcm.sha256", "McMaster (McM), 18 TIFF images 500x500"),
        DatasetSpec("urban100", "urban100", "urban100.sha256", "Urban100 HR, 100 PNG images"),
    ]
}


@dataclass(frozen=True)
class Dataset:
    """A located data set: ``files`` in natural order (``2.tif`` before ``10.tif``).
    ``verified`` says whether every file matched its registered SHA-256 (a user's custom folder,
    planned for a later release, would have ``spec=None`` and ``verified=False``)."""

    name: str
    root: Path
    files: tuple[Path, ...]
    spec: DatasetSpec | None = None
    verified: bool = False

    def __len__(self) -> int:
        return len(self.files)


def get_spec(name: str) -> DatasetSpec:
    spec = DATASETS.get(str(name).lower())
    if spec is None:
        raise UsageError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    return spec


def natural_key(name: str) -> tuple:
    """Sort key that orders embedded numbers numerically (``img_2`` < ``img_10``)."""
    return tuple(int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name))


@lru_cache(maxsize=None)
def read_checksums(spec: DatasetSpec) -> dict[str, str]:
    """Expected ``{file name: sha256 hex}`` of ``spec``, from the packaged ``sha256sum`` list."""
    text = resources.files("gsprestore").joinpath("data", spec.checksum_file).read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            out[name.lstrip("*").strip()] = digest.lower()
    return out


@lru_cache(maxsize=4096)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_file(path: str | Path) -> str:
    """SHA-256 of a file; cached by (path, size, mtime) for the life of the process."""
    st = os.stat(path)
    return _sha256_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def cache_dir() -> Path:
    """Where downloaded data sets live: ``<platformdirs user cache>/gsprestore/datasets``."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("gsprestore")) / "datasets"


def _hint(spec: DatasetSpec) -> str:
    return (f"pass --data-dir pointing at the {spec.folder} folder or its parent, "
            f"or set {ENV_VAR}")


def _short_list(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... (+{len(names) - limit} more)" if len(names) > limit else "")


def _dataset_folder(spec: DatasetSpec, root: Path, origin: str) -> Path:
    """The folder of ``spec`` under ``root`` (``root/<folder>`` or ``root`` itself)."""
    if not root.exists():
        raise DatasetError(f"no such folder (given by {origin}); {_hint(spec)}", root)
    if not root.is_dir():
        raise DatasetError(f"not a folder (given by {origin}); {_hint(spec)}", root)
    for folder in spec.folder_names:
        if (root / folder).is_dir():
            return root / folder
    expected = read_checksums(spec)
    if root.name in spec.folder_names or any((root / n).is_file() for n in expected):
        return root
    raise DatasetError(
        f"no {spec.folder}/ folder and no {spec.name} images (e.g. {next(iter(sorted(expected, key=natural_key)))}) "
        f"here (given by {origin}); {_hint(spec)}",
        root,
    )


def verify(spec: DatasetSpec, folder: Path, *, checksums: bool = True) -> tuple[Path, ...]:
    """Check that ``folder`` holds every file of ``spec`` (and, with ``checksums``, that each
    matches its SHA-256). Returns the files in natural order; raises :class:`DatasetError`."""
    expected = read_checksums(spec)
    names = sorted(expected, key=natural_key)
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DatasetError(
            f"{len(missing)} of {len(names)} {spec.name} files missing ({_short_list(missing)}); "
            f"{_hint(spec)}",
            folder,
        )
    if checksums:
        for n in names:
            got = sha256_file(folder / n)
            if got != expected[n]:
                raise DatasetError(
                    f"SHA-256 {got[:12]}... differs from the registered {expected[n][:12]}... for {spec.name}: "
                    "the file is modified or re-encoded; replace it with the original",
                    folder / n,
                )
    return tuple(folder / n for n in names)


def download(spec: DatasetSpec, dest: Path) -> Path:
    """Fetch ``spec`` into ``dest/<folder>`` with checksum verification.

    Hook for the ``--download`` option (issue 6): not implemented yet, so it says what to do."""
    raise DatasetError(
        f"downloading {spec.name} is not available in this version; get the {spec.folder} images "
        f"yourself and {_hint(spec)}",
        dest / spec.folder,
    )


def find_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    checksums: bool = True,
    download_missing: bool = False,
) -> Dataset:
    """Locate and verify the registered data set ``name`` (see the module docstring for the
    search order). ``download_missing`` fetches it into the cache when the cache is the place
    looked at and the data set is not there."""
    spec = get_spec(name)
    if data_dir is not None:
        root, origin = Path(data_dir).expanduser(), "--data-dir"
    elif os.environ.get(ENV_VAR):
        root, origin = Path(os.environ[ENV_VAR]).expanduser(), ENV_VAR
    else:
        root, origin = cache_dir(), "the default cache folder"
        if download_missing and not (root / spec.folder).is_dir():
            download(spec, root)
    folder = _dataset_folder(spec, root, origin)
    files = verify(spec, folder, checksums=checksums)
    return Dataset(name=spec.name, root=folder, files=files, spec=spec, verified=checksums)


__all__ = [
    "DATASETS",
    "ENV_VAR",
    "Dataset",
    "DatasetSpec",
    "cache_dir",
    "download",
    "find_dataset",
    "get_spec",
    "natural_key",
    "read_checksums",
    "sha256_file",
    "verify",
]
