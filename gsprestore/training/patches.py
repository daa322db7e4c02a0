"""Training patches: cut at random from a folder of photos, deterministically from a seed.

The paper trains on "10K of 64 x 64 patches" sampled at random from DIV2K (Sec. 5, "We randomly
sampled patches of 64 x 64 pixels"). This module builds such a set from any folders of photos:

* **Split by image.** A held-out slice of the *photos* (``val_fraction`` of each folder) gives
  the validation patches, so no validation pixel is ever seen in training. Test sets (Kodak24,
  McM, Urban100) are refused by checksum (:func:`refuse_test_sets`).
* **Sources.** PNG/JPEG/TIFF, 8 or 16 bit, any size (odd sizes too), optionally downscaled by 2
  with an anti-aliasing filter first (:func:`downscale2`): the BSDS photos carry JPEG 4:2:0 chroma,
  i.e. half-resolution colour, and halving them restores full-resolution chroma.
* **Positions.** A patch's source image is drawn with probability proportional to its number of
  valid positions (so every position of every photo is equally likely) and its top-left corner
  lies on *even* coordinates, aligned to the 2x2 Bayer block and to the 2x decimation grid.
* **Augmentation** by the 8 symmetries of the square (flips and 90-degree rotations) is applied to
  the RGB patch *before* the observation is made (a rotated mosaic is not a mosaic of the same
  pattern). The patch side is even, so a symmetry maps 2x2 blocks onto 2x2 blocks.

Patches are kept as one ``uint8`` tensor ``(N, 3, P, P)`` (10k x 64 x 64 x 3 = 123 MB) built once
per run; :func:`patch_digest` fingerprints it so a resumed run can check it trains on the same set.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.digest import sha256_file
from ..core.errors import DatasetError, GspError, UsageError

#: File types read as training photos.
SOURCE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")
#: Formats decoded by Pillow here (JPEG photos, lossless WebP crops of training packs).
_PILLOW_SUFFIXES = (".jpg", ".jpeg", ".webp")
#: Anti-aliasing filters for the optional 2x downscale of the sources.
DOWNSCALE_FILTERS = ("lanczos", "area")
#: Which sources the downscale applies to: every photo, or only JPEG ones (4:2:0 chroma).
DOWNSCALE_SCOPES = ("all", "jpeg")
#: Random-number streams (``numpy.random.default_rng([seed, stream])``), one per use.
_STREAM_SPLIT, _STREAM_TRAIN, _STREAM_VAL, _STREAM_MINE = 101, 102, 103, 105


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Source:
    """One training photo: ``size`` = (height, width) *after* the optional downscale."""

    path: Path
    folder: Path
    size: tuple[int, int]
    downscale: int = 1

    def positions(self, patch: int) -> tuple[int, int]:
        """Number of even top-left positions (rows, cols) at which a ``patch`` x ``patch`` fits."""
        h, w = self.size
        if h < patch or w < patch:
            return 0, 0
        return (h - patch) // 2 + 1, (w - patch) // 2 + 1


def check_patch_memory(patches: int, val_patches: int, patch_size: int) -> None:
    """Refuse, before any photo is read, training and validation patches that cannot fit in the
    available memory: ``uint8`` RGB patches and their placements (about ``3 p^2 + 40`` bytes each),
    with room to spare for the network (half of what is available)."""
    from ..core.memory import available_memory, gib

    need = (patches + max(0, val_patches)) * (3 * patch_size * patch_size + 40)
    room = available_memory() // 2
    if need > room:
        raise UsageError(f"{patches:,} training and {max(0, val_patches):,} validation patches of {patch_size} px "
                         f"need {gib(need)}, more than half the {gib(2 * room)} available; use fewer --patches "
                         "or a smaller --patch-size")


def list_images(folder: str | Path) -> list[Path]:
    """Image files under ``folder`` (recursively), sorted by path; hidden files skipped."""
    folder = Path(folder)
    if not folder.exists():
        raise UsageError("no such training folder", folder)
    if not folder.is_dir():
        raise UsageError("not a folder (--data takes folders of photos)", folder)
    files = [
        p for p in folder.rglob("*")
        if p.is_file() and p.suffix.lower() in SOURCE_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]
    if not files:
        raise UsageError(f"no training photos ({'/'.join(SOURCE_SUFFIXES)}) in this folder", folder)
    return sorted(files)


def _test_set_digests() -> tuple[dict[str, str], set[str]]:
    """``({sha256: "dataset/file"}, {test-set folder names})`` from the packaged dataset registry
    (:mod:`gsprestore.evaluation.datasets`); only folder names when the registry is not available."""
    names = {"kodak24", "kodak", "mcm", "mcmaster", "urban100"}
    digests: dict[str, str] = {}
    try:
        from ..evaluation import datasets
    except ImportError:  # pragma: no cover - the registry ships with the package
        return digests, names
    for spec in datasets.DATASETS.values():
        if getattr(spec, "role", "test") != "test":
            continue
        names.update(n.lower() for n in spec.folder_names)
        for fname, digest in datasets.read_checksums(spec).items():
            digests[digest] = f"{spec.name}/{fname}"
    return digests, names


def refuse_test_sets(folders: list[Path], files: dict[Path, list[Path]] | None = None) -> None:
    """Raise :class:`UsageError` if a training folder is (or contains) a test set: its name is a
    registered test-set folder name (``kodak24``, ``mcm``, ...) or any of its files has the SHA-256
    of a registered test image. Kodak24 and McM are the paper's test sets (docs/protocol.md)."""
    digests, names = _test_set_digests()
    for folder in folders:
        if Path(folder).resolve().name.lower() in names:
            raise UsageError(
                "this looks like a test set (folder name); never train on Kodak24/McM/Urban100 - "
                "pass folders of training photos", folder)
        for f in (files or {}).get(folder, []):
            hit = digests.get(sha256_file(f, cached=True))
            if hit is not None:
                raise UsageError(
                    f"this file is the test image {hit} (SHA-256 match); never train on test sets - "
                    "remove it from the training folder", f)


def _header_size(path: Path) -> tuple[int, int]:
    """(height, width) from the file header (no full decode)."""
    try:
        from ..imageio.openers import pillow; PILImage = pillow()  # noqa: E702

        with PILImage.open(path) as im:
            w, h = im.size
            return h, w
    except Exception:
        from ..imageio.images import read_image

        a = read_image(path).array
        return a.shape[0], a.shape[1]


def use_downscale(path: Path, downscale: int, scope: str) -> int:
    """The downscale factor that applies to ``path`` (``scope`` "jpeg": JPEG files only)."""
    if downscale == 1:
        return 1
    if scope == "jpeg" and path.suffix.lower() not in (".jpg", ".jpeg"):
        return 1
    return downscale


def scan_sources(folders: list[str | Path], *, downscale: int = 1, scope: str = "all",
                 check_test_sets: bool = True, skipped: list[dict[str, str]] | None = None
                 ) -> dict[Path, list[Source]]:
    """Every photo of every folder as a :class:`Source` (sizes read from headers), grouped by
    folder in the given order. Refuses test sets unless ``check_test_sets`` is False. A photo
    whose header does not read is an error, or with a ``skipped`` list is left out and recorded
    there (``{"file", "reason"}``)."""
    if downscale not in (1, 2):
        raise UsageError(f"--downscale must be 1 or 2, got {downscale}")
    if scope not in DOWNSCALE_SCOPES:
        raise UsageError(f"unknown downscale scope {scope!r}; expected one of {', '.join(DOWNSCALE_SCOPES)}")
    paths = [Path(f) for f in folders]
    from ..core.fileid import path_key

    if len({path_key(p) for p in paths}) != len(paths):  # by identity: a link to a folder given too
        raise UsageError("the same training folder is given twice")
    files = {p: list_images(p) for p in paths}
    if check_test_sets:
        refuse_test_sets(paths, files)
    out: dict[Path, list[Source]] = {}
    for folder, fs in files.items():
        out[folder] = []
        for f in fs:
            try:
                h, w = _header_size(f)
            except GspError as exc:
                if skipped is None:
                    raise
                skipped.append({"file": str(f), "reason": exc.reason})
                continue
            d = use_downscale(f, downscale, scope)
            out[folder].append(Source(f, folder, (h // d, w // d), d))
    return out


def downscale2(rgb: np.ndarray, method: str = "lanczos") -> np.ndarray:
    """Anti-aliased 2x downscale of a float ``(H, W, C)`` image to ``(H // 2, W // 2, C)``.

    ``area``: mean of each 2x2 block (odd last row/column dropped). ``lanczos``: Pillow's
    Lanczos-3 resampling on float32 planes (its kernel is widened by the scale factor, so it
    low-pass filters before decimating). Values are not clipped."""
    h2, w2 = rgb.shape[0] // 2, rgb.shape[1] // 2
    if method == "area":
        a = rgb[: 2 * h2, : 2 * w2].astype(np.float64)
        return a.reshape(h2, 2, w2, 2, -1).mean(axis=(1, 3)).astype(np.float32)
    if method == "lanczos":
        from ..imageio.openers import pillow; PILImage = pillow()  # noqa: E702

        planes = [
            np.asarray(PILImage.fromarray(np.ascontiguousarray(rgb[:, :, c], dtype=np.float32), mode="F")
                       .resize((w2, h2), PILImage.Resampling.LANCZOS), dtype=np.float32)
            for c in range(rgb.shape[2])
        ]
        return np.stack(planes, axis=2)
    raise UsageError(f"unknown downscale filter {method!r}; expected one of {', '.join(DOWNSCALE_FILTERS)}")


def _read_with_pillow(path: Path) -> np.ndarray:
    """A JPEG or WebP photo as float32 ``(H, W, 3)`` in [0, 1] (Pillow's decoder; grey and CMYK
    made RGB)."""
    from ..imageio.openers import pillow; PILImage = pillow()  # noqa: E702

    try:
        with PILImage.open(path) as im:
            rgb = np.asarray(im.convert("RGB"))
    except Exception as exc:
        raise DatasetError(f"not a readable {path.suffix[1:].upper()} image ({type(exc).__name__}: {exc})",
                           path) from None
    return rgb.astype(np.float32) / np.float32(255.0)


def load_source(src: Source, method: str = "lanczos") -> np.ndarray:
    """The photo of ``src`` as ``uint8 (H, W, 3)``: grey replicated to RGB, alpha dropped,
    downscaled first when ``src.downscale == 2`` (in float, rounded once at the end)."""
    from ..imageio.images import read_image

    if src.path.suffix.lower() in _PILLOW_SUFFIXES:
        a = _read_with_pillow(src.path)
    else:
        a = read_image(src.path).array
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    if src.downscale == 2:
        a = downscale2(a, method)
    if a.shape[:2] != src.size:
        raise DatasetError(f"decoded size {a.shape[1]}x{a.shape[0]} differs from the header's "
                           f"{src.size[1]}x{src.size[0]}", src.path)
    return np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------- patches


def dihedral(patch: np.ndarray, k: int) -> np.ndarray:
    """Symmetry ``k`` (0..7) of the square applied to an ``(H, W, C)`` patch: rotation by
    ``k % 4`` quarter turns (counter-clockwise), then a left-right flip when ``k >= 4``."""
    out = np.rot90(patch, k % 4, axes=(0, 1))
    if k >= 4:
        out = out[:, ::-1]
    return out


@dataclass(frozen=True)
class Placement:
    """Where patch ``i`` comes from: source index, top-left (row, col) (both even), symmetry."""

    source: np.ndarray  # (N,) int64
    row: np.ndarray  # (N,) int64, even
    col: np.ndarray  # (N,) int64, even
    transform: np.ndarray  # (N,) int64 in 0..7 (all 0 without augmentation)


def place_patches(sources: list[Source], count: int, patch: int, rng: np.random.Generator,
                  *, augment: bool = True) -> Placement:
    """Draw ``count`` patch placements: source chosen with probability proportional to its number
    of valid even positions, then a uniform even position, then a uniform symmetry."""
    if patch < 2 or patch % 2:
        raise UsageError(f"--patch-size must be even and >= 2 (Bayer 2x2 block), got {patch}")
    npos = np.array([np.prod(s.positions(patch)) for s in sources], dtype=np.float64)
    if not sources or npos.sum() == 0:
        raise UsageError(f"no photo is at least {patch}x{patch} pixels; use a smaller --patch-size")
    idx = rng.choice(len(sources), size=count, p=npos / npos.sum())
    rows_avail = np.array([sources[i].positions(patch)[0] for i in range(len(sources))])[idx]
    cols_avail = np.array([sources[i].positions(patch)[1] for i in range(len(sources))])[idx]
    row = 2 * rng.integers(0, rows_avail)
    col = 2 * rng.integers(0, cols_avail)
    transform = rng.integers(0, 8, size=count) if augment else np.zeros(count, dtype=np.int64)
    return Placement(idx.astype(np.int64), row.astype(np.int64), col.astype(np.int64), transform.astype(np.int64))


def place_mined_patches(sources: list[Source], count: int, patch: int, rng: np.random.Generator, task: str,
                        *, method: str = "lanczos", augment: bool = True) -> tuple[Placement, dict]:
    """Draw ``count`` placements with probability proportional to their difficulty: the mean
    squared error of the task's reference method over the patch
    (:func:`gsprestore.training.mining.window_means` of :func:`~gsprestore.training.mining.error_map`),
    over every even position of every source (measured in the photo's own orientation), then a
    uniform symmetry. Returns the placement and its record: the scores of all positions and of
    the drawn ones."""
    from .mining import window_means, error_map

    per_source = []
    for s in sources:
        per_source.append(window_means(error_map(load_source(s, method), task), patch).ravel())
    sizes = np.array([a.size for a in per_source], dtype=np.int64)
    scores = np.concatenate(per_source) if per_source else np.zeros(0)
    if scores.size == 0 or not np.isfinite(scores).all() or scores.sum() <= 0:
        raise UsageError(f"no training photo has a {patch}x{patch} patch the reference method gets wrong to mine")
    flat = rng.choice(scores.size, size=count, p=scores / scores.sum())
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    src = np.searchsorted(starts, flat, side="right") - 1
    local = flat - starts[src]
    cols = np.array([sources[i].positions(patch)[1] for i in range(len(sources))], dtype=np.int64)[src]
    row, col = 2 * (local // cols), 2 * (local % cols)
    transform = rng.integers(0, 8, size=count) if augment else np.zeros(count, dtype=np.int64)
    record = {"scores": scores, "drawn": scores[flat]}
    return Placement(src.astype(np.int64), row.astype(np.int64), col.astype(np.int64),
                     transform.astype(np.int64)), record


def _concat(a: Placement, b: Placement) -> Placement:
    return Placement(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in ("source", "row", "col", "transform")))


def cut_patches(sources: list[Source], placement: Placement, patch: int, *, method: str = "lanczos",
                workers: int = 0):
    """Cut the patches of ``placement`` into a ``uint8`` tensor ``(N, 3, P, P)``. Each source is
    decoded once; ``workers`` > 0 decodes that many photos at a time in threads. The result does
    not depend on ``workers``."""
    import torch

    n = len(placement.source)
    out = torch.empty((n, 3, patch, patch), dtype=torch.uint8)
    needed = np.unique(placement.source)

    def fill(si: int) -> None:
        img = load_source(sources[si], method)
        for i in np.nonzero(placement.source == si)[0]:
            r, c = placement.row[i], placement.col[i]
            p = dihedral(img[r:r + patch, c:c + patch], int(placement.transform[i]))
            out[i] = torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1)))

    if workers and workers > 0:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(fill, needed.tolist()))
    else:
        for si in needed.tolist():
            fill(si)
    return out


def split_by_image(groups: dict[Path, list[Source]], fraction: float, seed: int) -> tuple[list[Source], list[Source]]:
    """Hold out ``round(fraction * n)`` photos of each folder (at random, from ``seed``) for
    validation; at least one photo in all when ``fraction > 0``. Returns ``(train, val)``."""
    if not 0.0 <= fraction < 1.0:
        raise UsageError(f"--val-fraction must be in [0, 1), got {fraction}")
    rng = np.random.default_rng([seed, _STREAM_SPLIT])
    train: list[Source] = []
    val: list[Source] = []
    perms = {folder: rng.permutation(len(srcs)) for folder, srcs in groups.items()}
    counts = {folder: int(round(fraction * len(srcs))) for folder, srcs in groups.items()}
    if fraction > 0 and sum(counts.values()) == 0:
        largest = max(groups, key=lambda f: len(groups[f]))
        counts[largest] = 1
    for folder, srcs in groups.items():
        held = set(perms[folder][: counts[folder]].tolist())
        for i, s in enumerate(srcs):
            (val if i in held else train).append(s)
    if not train:
        raise UsageError("no training photos left after holding out the validation slice; "
                         "lower --val-fraction or add photos")
    return train, val


def patch_digest(patches) -> str:
    """SHA-256 of a patch tensor's bytes and shape (a fingerprint of a run's training set)."""
    h = hashlib.sha256(str(tuple(patches.shape)).encode())
    h.update(patches.contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass
class PatchSets:
    """Training and validation patches (``uint8 (N, 3, P, P)``) and how they were made."""

    train: object
    val: object
    info: dict = field(default_factory=dict)


def build_patch_sets(
    folders: list[str | Path],
    *,
    patches: int,
    patch_size: int = 64,
    val_fraction: float = 0.1,
    val_patches: int | None = None,
    seed: int = 0,
    downscale: int = 1,
    downscale_filter: str = "lanczos",
    downscale_scope: str = "all",
    augment: bool = True,
    mine_share: float = 0.0,
    task: str = "demosaic",
    workers: int = 0,
    check_test_sets: bool = True,
    presplit: list[tuple[str | Path, str | Path | None]] = (),
) -> PatchSets:
    """The run's training and validation patches, a pure function of its arguments.

    ``presplit`` adds ``(train folder, validation folder)`` pairs whose photos are split already
    (the crops of a training pack, :mod:`gsprestore.training.trainpack`): not split again, not downscaled.

    ``val_patches`` defaults to ``round(patches * val_fraction)`` (at least one batch's worth is
    up to the caller); validation patches are not augmented.

    ``mine_share``: that share of the training patches is drawn by difficulty for ``task``
    (:func:`place_mined_patches`, hard-patch mining), the rest uniformly as without it; the
    validation patches are always drawn uniformly (they measure the photos, not the hard parts)."""
    if patches < 1:
        raise UsageError(f"--patches must be >= 1, got {patches}")
    if downscale_filter not in DOWNSCALE_FILTERS:
        raise UsageError(f"unknown downscale filter {downscale_filter!r}; expected one of {', '.join(DOWNSCALE_FILTERS)}")
    check_patch_memory(patches, int(round(patches * val_fraction)) if val_patches is None else int(val_patches),
                       patch_size)
    groups = scan_sources(folders, downscale=downscale, scope=downscale_scope,
                          check_test_sets=check_test_sets) if folders else {}
    train_src, val_src = split_by_image(groups, val_fraction, seed) if groups else ([], [])
    for train_dir, val_dir in presplit:  # split already (a training pack); never rescaled
        pre = scan_sources([train_dir] + ([val_dir] if val_dir is not None and Path(val_dir).is_dir() else []),
                           check_test_sets=check_test_sets)
        groups.update(pre)
        train_src += pre[Path(train_dir)]
        val_src += pre.get(Path(val_dir), []) if val_dir is not None else []
    if not train_src:
        raise UsageError("no training photos")
    train_src = [s for s in train_src if s.positions(patch_size)[0] > 0]
    val_src = [s for s in val_src if s.positions(patch_size)[0] > 0]
    if not 0.0 <= mine_share <= 1.0:
        raise UsageError(f"--mine-share must be in [0, 1], got {mine_share}")
    n_mined = int(round(patches * mine_share))
    place = place_patches(train_src, patches - n_mined, patch_size, np.random.default_rng([seed, _STREAM_TRAIN]),
                          augment=augment)
    mined_info: dict = {}
    if n_mined:
        mined, rec = place_mined_patches(train_src, n_mined, patch_size, np.random.default_rng([seed, _STREAM_MINE]),
                                         task, method=downscale_filter, augment=augment)
        place = _concat(place, mined)
        from .mining import hard_share

        mined_info = {"mine_share": mine_share, "mined_patches": n_mined,
                      "mean_difficulty_all_positions": round(float(rec["scores"].mean()), 3),
                      "mean_difficulty_mined": round(float(rec["drawn"].mean()), 3),
                      "hardest_tenth_share_of_mined": round(hard_share(rec["scores"], rec["drawn"]), 4)}
    train = cut_patches(train_src, place, patch_size, method=downscale_filter, workers=workers)
    n_val = int(round(patches * val_fraction)) if val_patches is None else int(val_patches)
    if presplit and val_patches is None:
        n_val = max(n_val, 1)
    if (val_fraction > 0 or presplit) and n_val > 0 and val_src:
        vplace = place_patches(val_src, n_val, patch_size, np.random.default_rng([seed, _STREAM_VAL]), augment=False)
        val = cut_patches(val_src, vplace, patch_size, method=downscale_filter, workers=workers)
    else:
        import torch

        val = torch.empty((0, 3, patch_size, patch_size), dtype=torch.uint8)
    info = {
        "folders": [str(Path(f)) for f in folders],
        "presplit": [[str(t), None if v is None else str(v)] for t, v in presplit],
        "photos": {str(f): len(s) for f, s in groups.items()},
        "train_photos": len(train_src),
        "val_photos": len(val_src),
        "train_patches": int(train.shape[0]),
        "val_patches": int(val.shape[0]),
        "patch_size": patch_size,
        "downscale": downscale,
        "downscale_filter": downscale_filter if downscale > 1 else None,
        "downscale_scope": downscale_scope if downscale > 1 else None,
        "augment": augment,
        **mined_info,
        "train_digest": patch_digest(train),
        "val_digest": patch_digest(val),
        "val_files": sorted(str(s.path) for s in val_src),
    }
    return PatchSets(train=train, val=val, info=info)
