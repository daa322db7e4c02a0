"""What a benchmark run will do, settled before its first image: which images (``--limit``: the
first N of the sorted data set), where each method's outputs go (``--save-outputs``: paths checked,
folders probed, then written atomically) and about how long it takes (recorded speeds per method,
what ``gsprestore models`` shows, times the data set's megapixels). Used by
:func:`gsprestore.evaluation.benchmark.run_benchmark` and ``gsprestore benchmark``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._version import __version__
from .datasets import Dataset
from ..core.errors import GspError, UsageError, WeightsError


def check_limit(limit: int | None) -> int | None:
    """``--limit``: None (every image) or a whole number >= 1 (:class:`UsageError` otherwise)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"--limit must be a whole number >= 1, got {limit!r}")
    return limit


def limit_dataset(ds: Dataset, limit: int | None) -> Dataset:
    """The data set's first ``limit`` images in its sorted order (all of them for None)."""
    import dataclasses

    limit = check_limit(limit)
    return ds if limit is None or limit >= len(ds) else dataclasses.replace(ds, files=tuple(ds.files[:limit]))


def _safe_name(label: str) -> str:
    """A method label as one folder name: ``ugtv@runs/ft/model.pt`` -> ``ugtv@runs_ft_model.pt``."""
    import re

    name = re.sub(r"[^A-Za-z0-9@._+-]+", "_", label).strip("._") or "method"
    return name[:120]


def output_path(folder: str | Path, task: str, label: str, sigma: float, image: Path) -> Path:
    """Where ``--save-outputs`` puts ``label``'s output of ``image`` at noise ``sigma``:
    ``folder/<task>/<method>[/sigma-<s>]/<image stem>.png``."""
    path = Path(folder) / task / _safe_name(label)
    if sigma:
        path = path / f"sigma-{sigma:g}"
    return path / f"{Path(image).stem}.png"


def check_output_paths(folder: Path, task: str, labels: list[str], sigmas: list[float], files: Iterable[Path], *,
                       overwrite: bool = False) -> list[Path]:
    """Create the output folders and refuse (:class:`GspError`, before any image runs) a target
    that exists without ``overwrite``, a folder in its place, two images with the same stem, or a
    folder that takes no file (probed with a temporary file)."""
    import tempfile

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise GspError("--save-outputs names a file, not a folder", folder)
    files = list(files)
    stems = [Path(f).stem for f in files]
    dup = next((s for s in stems if stems.count(s) > 1), None)
    if dup is not None:
        raise GspError(f"two images are named {dup}.* : their outputs would collide", folder)
    targets = [output_path(folder, task, lab, s, f) for lab in labels for s in sigmas for f in files]
    from ..core.fileid import path_key

    images = {path_key(f): f for f in files}
    for t in targets:
        if path_key(t) in images:  # by identity: never an image of the data set, --overwrite or not
            raise GspError(f"the output would replace the data set's image {images[path_key(t)]}", t)
        if t.is_dir():
            raise GspError("output path is a folder", t)
        if t.exists() and not overwrite:
            raise GspError("output exists (pass --overwrite to replace it)", t)
    for parent in dict.fromkeys(t.parent for t in targets):
        try:
            parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".probe-", suffix=".tmp"):
                pass
        except OSError as exc:
            raise GspError(f"cannot write in the output folder ({exc.strerror or exc})", parent) from None
    return targets


def save_output(out: "torch.Tensor", path: Path, overwrite: bool) -> None:  # noqa: F821
    """One output image ``(1, 3, H, W)`` as an 8-bit PNG, atomically (:func:`gsprestore.imageio.images.write_image`)."""
    from ..imageio.images import write_image

    write_image(path, out[0].detach().float().cpu().permute(1, 2, 0).numpy(), 8, overwrite=overwrite,
                software=f"gsprestore {__version__} benchmark")


def dataset_megapixels(files: Iterable[str | Path]) -> tuple[float, int]:
    """Output megapixels of scoring these ground-truth images (sizes cropped to even, read from the
    file headers without decoding) and how many headers could not be read (left out)."""
    from PIL import Image

    total, unread = 0, 0
    for f in files:
        try:
            with Image.open(f) as im:
                w, h = im.size
        except Exception:  # an unreadable header: the run itself will say why
            unread += 1
            continue
        total += (w // 2 * 2) * (h // 2 * 2)
    return total / 1e6, unread


def estimate_seconds(task: str, methods: Iterable[str], megapixels: float, device: str = "cpu", *,
                     levels: int = 1, images: int = 1, manifest: Mapping[str, Any] | None = None,
                     passes: int = 1) -> dict[str, Any]:
    """About how long scoring ``methods`` on ``megapixels`` of output takes on ``device`` (a kind,
    ``cpu`` / ``cuda``): each method's recorded speed (:func:`gsprestore.methods.defaults.recorded_speed`,
    what ``gsprestore models`` shows; a label ``ugtv@file`` takes ``ugtv``'s) times the megapixels,
    ``levels`` noise levels, plus one image's warm-up, times ``passes`` (2 for a self-ensemble).
    Returns ``{"seconds": total of the recorded ones, "per_method": {method: s or None},
    "unrecorded": [methods], "megapixels"}``."""
    from ..methods import defaults

    if manifest is None:
        try:
            manifest = defaults.shipped_manifest()
        except WeightsError:
            manifest = {}
    kind = str(device).split(":")[0]
    per_method: dict[str, float | None] = {}
    for m in methods:
        speed = defaults.recorded_speed(m.split("@", 1)[0], task, kind, dict(manifest))
        warmup = megapixels / max(images, 1)
        per_method[m] = None if not speed else passes * (megapixels * levels + warmup) / speed
    known = [v for v in per_method.values() if v is not None]
    return {"seconds": sum(known), "per_method": per_method, "megapixels": megapixels,
            "unrecorded": [m for m, v in per_method.items() if v is None], "device": kind}
