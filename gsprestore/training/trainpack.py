"""Training packs: the most useful training pixels that fit a size budget, as lossless crops.

GPU time comes in short windows on a machine with no network, to which the working tree travels
(64 MiB in all). The 333 training photos take 150 MB as PNG, and random 64x64 patches in
``np.savez_compressed`` 101 MiB for 10k: neither fits. Many photos have large smooth or blurred
areas that teach a demosaicker nothing. A *pack* keeps the textured parts of the photos instead:

1. **Photo-level split first.** ``val_fraction`` of each folder's photos (seeded,
   :func:`gsprestore.training.patches.split_by_image`) give only validation crops, the rest only training
   crops, so no validation pixel is ever trained on. The split is recorded in ``pack.json``.
2. **Candidate crops** are the cells of a ``crop`` x ``crop`` grid over each photo (JPEG photos
   downscaled 2x first, which restores full-resolution chroma: :func:`gsprestore.training.patches.downscale2`).
3. **Texture score** of a crop: the mean absolute horizontal + vertical difference of its luma
   (:func:`texture_score`), the energy a demosaicker or an upscaler has to get right.
4. **Texture-weighted sampling** without replacement, with probability proportional to
   ``score ** texture_power`` (seeded), so smooth crops are rare but not absent, until the next
   crop would overrun the byte budget of its split (crops are encoded as they are drawn, the
   budget counts real bytes).
5. **Lossless codec by measurement** (``lab/research/pack_codecs.py``): on the most textured
   256x256 crop of every 12th training photo, lossless WebP (method 4) takes 0.421 of the raw RGB
   bytes, optimised PNG 0.536: WebP carries 27 % more pixels in the same budget. Both decode
   bit-exactly with Pillow.

Layout of a pack folder::

    pack.json     recipe, sources, the photo split, one record per crop (source, box, score, sha256)
    train/        training crops  <folder>__<photo stem>__r<row>_c<col>.webp
    val/          validation crops (from the held-out photos only)

``gsprestore train --data PACK`` recognises a pack by its ``pack.json`` and uses its split instead
of splitting again (:func:`gsprestore.training.patches.build_patch_sets`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..core.errors import UsageError
from ..core.jsontext import loads

PACK_FORMAT = "gsprestore-train-pack/1"
PACK_FILE = "pack.json"
CODECS = {"webp": ".webp", "png": ".png"}
#: Random-number streams (``numpy.random.default_rng([seed, stream])``).
_STREAM_TRAIN, _STREAM_VAL = 201, 202


def is_pack(folder: str | Path) -> bool:
    """True if ``folder`` is a training pack (holds ``pack.json``)."""
    return (Path(folder) / PACK_FILE).is_file()


def read_pack(folder: str | Path) -> dict[str, Any]:
    """The ``pack.json`` of a pack folder (one-line error if damaged or of another format)."""
    path = Path(folder) / PACK_FILE
    try:
        info = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"unreadable training pack ({type(exc).__name__})", path) from None
    if not isinstance(info, dict) or info.get("format") != PACK_FORMAT:
        raise UsageError(f"not a gsprestore training pack (format {PACK_FORMAT})", path)
    return info


def texture_score(rgb: np.ndarray) -> float:
    """Mean absolute first difference (horizontal plus vertical) of the BT.601 luma of a ``uint8``
    ``(H, W, 3)`` crop, in 8-bit units: 0 for a flat crop, ~10-30 for fine texture."""
    y = rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    return float(np.abs(np.diff(y, axis=1)).mean() + np.abs(np.diff(y, axis=0)).mean())


def encode(rgb: np.ndarray, codec: str) -> bytes:
    """Lossless encoding of a ``uint8 (H, W, 3)`` crop."""
    from PIL import Image

    buf = io.BytesIO()
    im = Image.fromarray(np.ascontiguousarray(rgb))
    if codec == "webp":
        im.save(buf, format="WEBP", lossless=True, quality=100, method=4)
    elif codec == "png":
        im.save(buf, format="PNG", optimize=True)
    else:
        raise UsageError(f"unknown codec {codec!r}; expected one of {', '.join(CODECS)}")
    return buf.getvalue()


@dataclass(frozen=True)
class Candidate:
    """One grid cell of one photo: source index, top-left (row, col), texture score."""

    source: int
    row: int
    col: int
    score: float


#: What a crop is scored by: its luma texture, or Menon's demosaicking error on it (hard-patch
#: mining, :mod:`gsprestore.training.mining`).
SCORES = ("texture", "menon")


def _candidates(sources, crop: int, method: str, progress: Callable[[int, int], None] | None,
                skipped: list[dict[str, str]], score: str = "texture") -> tuple[list[Candidate], dict[int, np.ndarray]]:
    """Score every ``crop`` x ``crop`` grid cell of every source (decoding each photo once) by
    ``score``: :func:`texture_score`, or ``menon``, the mean squared error (8-bit units, summed
    over R, G, B) of Menon's demosaicking of the photo's RGGB mosaic over the cell.
    Returns the candidates and the decoded photos (kept to cut the chosen crops). A photo that
    does not decode (e.g. a truncated file) is skipped and recorded in ``skipped``."""
    from ..core.errors import GspError
    from .patches import load_source

    cands: list[Candidate] = []
    photos: dict[int, np.ndarray] = {}
    for i, src in enumerate(sources):
        h, w = src.size
        if h < crop or w < crop:
            if progress:
                progress(i + 1, len(sources))
            continue
        try:
            img = load_source(src, method)
        except (GspError, ValueError, OSError) as exc:
            skipped.append({"file": str(src.path), "reason": getattr(exc, "reason", None) or str(exc)})
            if progress:
                progress(i + 1, len(sources))
            continue
        photos[i] = img
        # centre the grid: the cells lose the same margin on both sides
        r0, c0 = ((h % crop) // 2) & ~1, ((w % crop) // 2) & ~1
        err = None
        if score == "menon":
            from .mining import error_map

            err = error_map(img, "demosaic")
        for r in range(r0, h - crop + 1, crop):
            for c in range(c0, w - crop + 1, crop):
                value = (texture_score(img[r:r + crop, c:c + crop]) if err is None
                         else float(err[r:r + crop, c:c + crop].mean()))
                cands.append(Candidate(i, r, c, value))
        if progress:
            progress(i + 1, len(sources))
    return cands, photos


def _draw(cands: list[Candidate], power: float, rng: np.random.Generator) -> list[Candidate]:
    """All candidates in a random order, drawn without replacement with probability proportional
    to ``score ** power`` (Efraimidis-Spirakis keys: ``u ** (1 / weight)``, largest first)."""
    if not cands:
        return []
    weight = np.array([max(c.score, 1e-3) for c in cands], dtype=np.float64) ** power
    keys = np.log(rng.random(len(cands))) / weight
    return [cands[i] for i in np.argsort(-keys, kind="stable")]


def make_pack(
    folders: list[str | Path],
    out: str | Path,
    *,
    budget_mib: float = 48.0,
    val_fraction: float = 0.1,
    val_share: float = 0.08,
    crop: int = 192,
    texture_power: float = 1.0,
    codec: str = "webp",
    seed: int = 0,
    downscale_jpeg: bool = True,
    overwrite: bool = False,
    score: str = "texture",
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Write a training pack of ``folders`` into ``out`` (see the module docstring) and return its
    ``pack.json`` record. ``budget_mib``: total size of the crops; ``val_share`` of it goes to the
    validation crops. A pure function of its arguments and the photos (seeded).

    The run holds ``out``'s lock (:func:`gsprestore.core.claims.run_lock`: a second run into it is
    refused) and removes only what it created: its own staging folder, and with ``overwrite`` an
    earlier pack that holds nothing but the pack (:func:`_not_pack_file`). An ``out`` that is a
    symbolic link to a folder means that folder (the link is never replaced)."""
    from ..core.claims import run_lock

    out = Path(out)
    if crop < 64 or crop % 4:
        raise UsageError(f"--crop must be a multiple of 4 and >= 64, got {crop}")
    if codec not in CODECS:
        raise UsageError(f"unknown codec {codec!r}; expected one of {', '.join(CODECS)}")
    if score not in SCORES:
        raise UsageError(f"unknown crop score {score!r}; expected one of {', '.join(SCORES)}")
    if not 0 < budget_mib < math.inf:
        raise UsageError(f"--budget-mib must be positive, got {budget_mib}")
    if not 0.0 < val_share < 1.0:
        raise UsageError(f"--val-share must be in (0, 1), got {val_share}")
    if not 0.0 <= val_fraction < 1.0:
        raise UsageError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    if not 0.0 <= texture_power < math.inf:
        raise UsageError(f"--texture-power must be a number >= 0, got {texture_power}")
    if not 0 <= seed < 2**63:
        raise UsageError(f"--seed must be 0 to 2**63 - 1, got {seed}")
    if out.is_symlink():  # a link to a folder names that folder: the pack goes there, the link stays the user's
        if not out.is_dir():
            raise UsageError("-o is a symbolic link that does not lead to a folder", out)
        out = out.resolve()
    if out.exists() and not out.is_dir():
        raise UsageError("-o must be a folder (a file of that name is in the way)", out)
    with run_lock(out, "train-pack run"):  # a second run into the same folder is refused
        if out.exists() and any(out.iterdir()):
            if not overwrite:
                raise UsageError("output folder is not empty (pass --overwrite to replace a pack)", out)
            foreign = _not_pack_file(out)
            if foreign is not None:
                raise UsageError(f"--overwrite replaces only a training pack ({foreign})", out)
        return _write_pack(folders, out, budget_mib=budget_mib, val_fraction=val_fraction, val_share=val_share,
                           crop=crop, texture_power=texture_power, codec=codec, seed=seed,
                           downscale_jpeg=downscale_jpeg, progress=progress, score=score)


def _not_pack_file(out: Path) -> str | None:
    """What in ``out`` is not part of the training pack there (None when all of it is): a pack
    folder holds ``pack.json``, ``train/`` and ``val/``, and those hold the crops ``pack.json``
    lists. ``--overwrite`` removes a pack only when nothing else would go with it."""
    if not is_pack(out):
        return "no pack.json here"
    try:
        listed = {str(c["file"]) for c in read_pack(out).get("crops", [])}
    except (UsageError, TypeError, KeyError):
        return "its pack.json does not read as one"
    for entry in sorted(out.iterdir()):
        if entry.name == PACK_FILE:
            continue
        if entry.name not in ("train", "val") or entry.is_symlink() or not entry.is_dir():
            return f"{entry.name} is not part of it"
        for item in sorted(entry.iterdir()):
            if f"{entry.name}/{item.name}" not in listed or item.is_symlink() or not item.is_file():
                return f"{entry.name}/{item.name} is not part of it"
    return None


def _write_pack(folders: list[str | Path], out: Path, *, budget_mib: float, val_fraction: float, val_share: float,
                crop: int, texture_power: float, codec: str, seed: int, downscale_jpeg: bool,
                progress: Callable[[str, int, int], None] | None, score: str = "texture") -> dict[str, Any]:
    """:func:`make_pack` once its options are checked and it holds the folder's lock: the crops go
    to a fresh staging folder of this run's own (``.NAME.XXXX.partial`` beside ``out``), removed
    if anything fails; the finished pack replaces ``out`` (an old pack, checked to hold nothing
    else, is removed only then)."""
    import shutil
    import tempfile

    from ..core.atomic import UMASK
    from .patches import scan_sources, split_by_image

    t0 = time.perf_counter()
    skipped: list[dict[str, str]] = []  # photos that do not decode: named, never fatal
    groups = scan_sources(folders, downscale=2 if downscale_jpeg else 1, scope="jpeg", skipped=skipped)
    try:
        train_src, val_src = split_by_image(groups, val_fraction, seed)
    except UsageError as exc:  # too few photos: name those that did not read, they may be why
        if not skipped:
            raise
        first = skipped[0]
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise UsageError(f"{exc.reason}; {len(skipped)} photo(s) could not be read, e.g. {first['file']}: "
                         f"{first['reason']}{more}", exc.path) from None
    budget = {"train": budget_mib * (1 - val_share) * 2**20, "val": budget_mib * val_share * 2**20}
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        os.chmod(staging, 0o777 & ~UMASK)  # mkdtemp's 0700 is not the finished pack's mode
        info = _fill(staging, folders, train_src, val_src, budget, skipped, budget_mib=budget_mib,
                     val_fraction=val_fraction, val_share=val_share, crop=crop, texture_power=texture_power,
                     codec=codec, seed=seed, downscale_jpeg=downscale_jpeg, progress=progress, t0=t0,
                     score=score)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            out.rename(old / "pack")  # an empty folder, or a pack checked to hold nothing else
            staging.rename(out)
            shutil.rmtree(old)
        else:
            staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # ours: made by mkdtemp above
        raise
    return info


def _fill(staging: Path, folders, train_src, val_src, budget: dict[str, float], skipped: list[dict[str, str]], *,
          budget_mib: float, val_fraction: float, val_share: float, crop: int, texture_power: float, codec: str,
          seed: int, downscale_jpeg: bool, progress, t0: float, score: str = "texture") -> dict[str, Any]:
    """Draw, encode and write the crops of both splits and ``pack.json`` into ``staging``."""
    from ..core.atomic import atomic_file

    crops: list[dict[str, Any]] = []
    totals: dict[str, dict[str, float]] = {}
    for split, sources, stream in (("train", train_src, _STREAM_TRAIN), ("val", val_src, _STREAM_VAL)):
        (staging / split).mkdir(parents=True, exist_ok=True)
        cb = (lambda done, total, s=split: progress(f"scoring {s} photos", done, total)) if progress else None
        cands, photos = _candidates(sources, crop, "lanczos", cb, skipped, score)
        order = _draw(cands, texture_power, np.random.default_rng([seed, stream]))
        used, kept, scores_all = 0, 0, [c.score for c in cands]
        for c in order:
            src = sources[c.source]
            rgb = photos[c.source][c.row:c.row + crop, c.col:c.col + crop]
            data = encode(rgb, codec)
            if used + len(data) > budget[split]:
                break  # full. (Filling the rest with cheaper crops further down the order would add
                #        flat ones, and every crop position is drawn equally often in training.)
            stem = f"{src.folder.name}__{src.path.stem}__r{c.row}_c{c.col}"
            name = f"{split}/{stem}{CODECS[codec]}"
            (staging / name).write_bytes(data)
            used += len(data)
            kept += 1
            crops.append({"file": name, "source": str(src.path), "row": c.row, "col": c.col,
                          "score": round(c.score, 3), "bytes": len(data),
                          "sha256": hashlib.sha256(data).hexdigest()})
            if progress:
                progress(f"writing {split} crops", int(used), int(budget[split]))
        kept_scores = [r["score"] for r in crops if r["file"].startswith(split + "/")]
        totals[split] = {
            "photos": len(sources), "candidates": len(cands), "crops": kept, "bytes": used,
            "megapixels": round(kept * crop * crop / 1e6, 3),
            "bytes_per_pixel": round(used / max(kept * crop * crop, 1), 4),
            "median_score_all": round(float(np.median(scores_all)), 3) if scores_all else None,
            "median_score_kept": round(float(np.median(kept_scores)), 3) if kept_scores else None,
        }
        del photos
    info = {
        "format": PACK_FORMAT,
        "recipe": {"folders": [str(Path(f)) for f in folders], "budget_mib": budget_mib,
                   "val_fraction": val_fraction, "val_share": val_share, "crop": crop,
                   "texture_power": texture_power, "codec": codec, "seed": seed,
                   "downscale_jpeg": downscale_jpeg, "score": score},
        "split": {"train_photos": sorted(str(s.path) for s in train_src),
                  "val_photos": sorted(str(s.path) for s in val_src)},
        "totals": totals,
        "skipped": skipped,
        "crops": crops,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    with atomic_file(staging / PACK_FILE, "w", encoding="utf-8") as f:
        f.write(json.dumps(info, indent=1) + "\n")
    return info


def pack_folders(folder: str | Path) -> tuple[Path, Path]:
    """The ``(train, val)`` crop folders of a pack, checked to exist."""
    folder = Path(folder)
    read_pack(folder)
    train, val = folder / "train", folder / "val"
    if not train.is_dir():
        raise UsageError("training pack without its train/ folder", folder)
    return train, val
