"""Registry of the evaluation data sets, where to find them, and their checksums.

Each data set (``kodak``, ``mcm``, ``urban100``) is a folder of images whose names and SHA-256
digests ship with the package (``gsprestore/data/<folder>.sha256``, ``sha256sum`` format). The
images themselves never ship: they are read from the first of

1. ``data_dir`` (the CLI's ``--data-dir``): either the data-set folder itself or a parent holding
   ``kodak24/``, ``mcm/``, ``urban100/``;
2. the folder named by the environment variable ``GSPRESTORE_DATA_DIR`` (same two layouts);
3. the per-user cache, ``platformdirs.user_cache_dir("gsprestore")/datasets``, where
   :func:`download` puts them (``--download``): each file is fetched from the data set's public
   source (``DatasetSpec.url_template``; a mirror with the same ``<folder>/<file>`` layout can be
   named by ``GSPRESTORE_DATASET_URL`` or the ``base_url`` argument) by pooch, which writes it to
   a temporary file, checks it against its SHA-256 and only then moves it into place.

Any other folder of PNG / TIFF images is a *custom* data set (:func:`custom_dataset`): no
checksums, natural file order.

Only the first location that is *given* is looked at: an explicit ``--data-dir`` that does not
hold the data set is an error, never a silent fall-back to another copy.

Every problem is a one-line :class:`~gsprestore.core.errors.DatasetError` naming the path, what is
missing or which file differs, and what to pass instead. Checksums are verified on every lookup;
digests are cached in-process by (path, size, mtime), so hashing happens once per file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..core.digest import sha256_file
from ..core.errors import DatasetError, UsageError

ENV_VAR = "GSPRESTORE_DATA_DIR"
URL_ENV_VAR = "GSPRESTORE_DATASET_URL"
IMAGE_SUFFIXES = (".png", ".tif", ".tiff", ".jpg", ".jpeg", ".webp")  # a custom data set may be JPEG/WebP


@dataclass(frozen=True)
class DatasetSpec:
    """A registered data set: ``folder`` is its directory name, ``checksum_file`` the packaged
    ``sha256sum`` list of its files (``gsprestore/data/``), ``role`` what the protocol uses it for."""

    name: str
    folder: str
    checksum_file: str
    description: str
    url_template: str = ""
    role: str = "test"

    @property
    def folder_names(self) -> tuple[str, ...]:
        """Directory names accepted for this data set (its folder, then its registry name)."""
        return tuple(dict.fromkeys((self.folder, self.name)))


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        # Sources: the public copies the registered checksums were taken from (shared/datasets/README.md).
        DatasetSpec("kodak", "kodak24", "kodak24.sha256", "Kodak PhotoCD, 24 PNG images 768x512 / 512x768",
                    "https://raw.githubusercontent.com/EccHui/Kodak_compression_performance/HEAD/Kodak/{name}"),
        DatasetSpec("mcm", "mcm", "mcm.sha256", "McMaster (McM), 18 TIFF images 500x500",
                    "https://raw.githubusercontent.com/cszn/FFDNet/HEAD/testsets/McMaster/{name}"),
        DatasetSpec("urban100", "urban100", "urban100.sha256", "Urban100 HR, 100 PNG images",
                    "https://raw.githubusercontent.com/majedelhelou/denoising_datasets/HEAD/CUrban100/{name}"),
    ]
}


@dataclass(frozen=True)
class Dataset:
    """A located data set: ``files`` in natural order (``2.tif`` before ``10.tif``).
    ``verified`` says whether every file matched its registered SHA-256 (a user's custom folder
    has ``spec=None`` and ``verified=False``)."""

    name: str
    root: Path
    files: tuple[Path, ...]
    spec: DatasetSpec | None = None
    verified: bool = False

    @property
    def custom(self) -> bool:
        return self.spec is None

    def __len__(self) -> int:
        return len(self.files)


def get_spec(name: str) -> DatasetSpec:
    """The registered data set ``name`` (case-insensitive); :class:`UsageError` if unknown."""
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


def cache_dir() -> Path:
    """Where downloaded data sets live: ``<platformdirs user cache>/gsprestore/datasets``."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("gsprestore")) / "datasets"


def _hint(spec: DatasetSpec) -> str:
    return (f"pass --download to fetch it there, or --data-dir pointing at the {spec.folder} folder or its "
            f"parent, or set {ENV_VAR}")


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
            got = sha256_file(folder / n, cached=True)
            if got != expected[n]:
                raise DatasetError(
                    f"SHA-256 {got[:12]}... differs from the registered {expected[n][:12]}... for {spec.name}: "
                    "the file is modified or re-encoded; replace it with the original",
                    folder / n,
                )
    return tuple(folder / n for n in names)


def file_url(spec: DatasetSpec, name: str, base_url: str | None = None) -> str:
    """Where file ``name`` of ``spec`` is downloaded from: ``<base_url>/<folder>/<name>`` when a
    mirror is given (argument, else ``$GSPRESTORE_DATASET_URL``), else the registered public source."""
    base = base_url if base_url is not None else os.environ.get(URL_ENV_VAR) or None
    if base:
        return f"{base.rstrip('/')}/{spec.folder}/{name}"
    return spec.url_template.format(name=name)


def _fetch(url: str, target: Path, expected: str, *, timeout: float) -> None:
    """Download ``url`` to ``target`` through pooch, which streams it into a temporary file beside
    ``target``, checks its SHA-256 against ``expected`` and only then moves it into place (so
    ``target`` is either absent or complete; the temporary file is removed on any failure). A
    network failure or a checksum mismatch becomes a one-line :class:`DatasetError` naming ``target``."""
    import logging

    import pooch
    import requests

    log = pooch.get_logger()
    level = log.level
    log.setLevel(logging.WARNING)  # pooch says "Downloading file ..." on stderr at INFO: our caller reports progress
    try:
        pooch.retrieve(url, known_hash=f"sha256:{expected}", fname=target.name, path=target.parent,
                       downloader=pooch.HTTPDownloader(progressbar=False, timeout=timeout))
    except requests.HTTPError as exc:
        resp = exc.response
        status = f"HTTP {resp.status_code} {resp.reason}" if resp is not None else str(exc)
        raise DatasetError(f"download failed: {status} from {url}", target) from None
    except requests.RequestException as exc:
        reason = exc.args[0] if exc.args else exc
        reason = getattr(reason, "reason", None) or reason  # urllib3's wrapped error: its own reason
        raise DatasetError(f"download failed: {_one_line(reason)} ({url})", target) from None
    except ValueError as exc:
        if "does not match the known hash" not in str(exc):
            raise DatasetError(f"download failed: {_one_line(exc)} ({url})", target) from None
        got = re.search(r"but got ([0-9a-f]{64})", str(exc))
        what = f"downloaded SHA-256 {got.group(1)[:12]}..." if got else "the downloaded file's SHA-256"
        raise DatasetError(f"checksum mismatch: {what} differs from the registered {expected[:12]}... ({url}); "
                           "file not saved", target) from None
    except OSError as exc:
        raise DatasetError(f"download failed: {exc.strerror or exc} ({url})", target) from None
    finally:
        log.setLevel(level)


def _one_line(reason: object) -> str:
    """The first line of an error, without urllib3's ``HTTPConnection(host=..., port=...): `` prefix."""
    text = str(reason).splitlines()[0] if str(reason) else type(reason).__name__
    return re.sub(r"^\w*Connection(Pool)?\([^)]*\): ", "", text)


def download(
    spec: DatasetSpec,
    dest: Path | None = None,
    *,
    base_url: str | None = None,
    timeout: float = 60.0,
    progress=None,
) -> Path:
    """Fetch every file of ``spec`` into ``dest/<folder>`` (default: :func:`cache_dir`), verifying
    each against its registered SHA-256. Files already present with the right digest are kept;
    a present file with the wrong digest is fetched again. ``progress(done, total, name)`` is
    called after each file. Returns the data-set folder; raises a one-line :class:`DatasetError`
    naming the file on a network error or a checksum mismatch (nothing partial is left behind)."""
    dest = Path(dest) if dest is not None else cache_dir()
    return _download_into(spec, dest / spec.folder, base_url=base_url, timeout=timeout, progress=progress)


def _download_into(spec: DatasetSpec, folder: Path, *, base_url: str | None = None, timeout: float = 60.0,
                   progress=None) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"cannot create the download folder: {exc.strerror}", folder) from None
    expected = read_checksums(spec)
    names = sorted(expected, key=natural_key)
    for i, name in enumerate(names):
        target = folder / name
        if not (target.is_file() and sha256_file(target, cached=True) == expected[name]):
            _fetch(file_url(spec, name, base_url), target, expected[name], timeout=timeout)
        if progress is not None:
            progress(i + 1, len(names), name)
    return folder


def custom_dataset(folder: str | Path) -> Dataset:
    """Any folder of PNG / TIFF / JPEG / WebP images as an unverified data set named after the folder
    (natural file order, sub-folders and other files ignored)."""
    root = Path(folder).expanduser()
    if not root.exists():
        raise DatasetError("no such folder (given by --data-dir)", root)
    if not root.is_dir():
        raise DatasetError("not a folder (given by --data-dir)", root)
    files = sorted((p for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
                    and not p.name.startswith(".")), key=lambda p: natural_key(p.name))
    if not files:
        raise DatasetError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in this folder", root)
    return Dataset(name=root.resolve().name or "custom", root=root, files=tuple(files), spec=None, verified=False)


def find_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    checksums: bool = True,
    download_missing: bool = False,
    base_url: str | None = None,
) -> Dataset:
    """Locate and verify the data set ``name`` (see the module docstring for the search order).
    ``name`` ``"custom"`` (or ``None``) takes ``data_dir`` as a folder of images
    (:func:`custom_dataset`). With ``download_missing`` the data set is downloaded (into
    ``data_dir`` when given, else the cache) unless it is already there and complete."""
    if name is None or str(name).lower() == "custom":
        if data_dir is None:
            raise UsageError("a custom data set needs --data-dir pointing at a folder of images")
        return custom_dataset(data_dir)
    spec = get_spec(name)
    if data_dir is not None:
        root, origin = Path(data_dir).expanduser(), "--data-dir"
    elif os.environ.get(ENV_VAR):
        root, origin = Path(os.environ[ENV_VAR]).expanduser(), ENV_VAR
    else:
        root, origin = cache_dir(), "the default cache folder"
    if download_missing:
        target = next((root / f for f in spec.folder_names if (root / f).is_dir()), None)
        if target is None:
            target = root if root.name in spec.folder_names else root / spec.folder
        _download_into(spec, target, base_url=base_url)
    folder = _dataset_folder(spec, root, origin)
    files = verify(spec, folder, checksums=checksums)
    return Dataset(name=spec.name, root=folder, files=files, spec=spec, verified=checksums)


__all__ = [
    "DATASETS",
    "ENV_VAR",
    "Dataset",
    "DatasetSpec",
    "IMAGE_SUFFIXES",
    "URL_ENV_VAR",
    "cache_dir",
    "custom_dataset",
    "download",
    "file_url",
    "find_dataset",
    "get_spec",
    "natural_key",
    "read_checksums",
    "verify",
]
