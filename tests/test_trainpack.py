"""Training packs (gsprestore/training/trainpack.py): photo-level split, texture weighting, byte budget,
lossless crops, determinism, and ``gsprestore train --data PACK`` using the recorded split."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from gsprestore.training import trainpack as TP
from gsprestore.core.errors import UsageError


def _photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Left half fine random texture, right half a flat colour."""
    img = np.empty((h, w, 3), np.uint8)
    img[:, : w // 2] = rng.integers(0, 256, size=(h, w // 2, 3))
    img[:, w // 2:] = rng.integers(0, 256, size=3)
    return img


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    folder = root / "shots"
    folder.mkdir()
    for i in range(10):
        Image.fromarray(_photo(rng, 128, 256)).save(folder / f"p{i}.png")
    return folder


def _pack(photos, out, **kw):
    args = dict(budget_mib=0.25, val_fraction=0.2, val_share=0.2, crop=64, seed=0)
    args.update(kw)
    return TP.make_pack([photos], out, **args)


def test_split_budget_texture_and_lossless_crops(photos, tmp_path):
    info = _pack(photos, tmp_path / "pack")
    pack = tmp_path / "pack"
    assert TP.is_pack(pack) and TP.read_pack(pack)["format"] == TP.PACK_FORMAT
    val_photos = set(info["split"]["val_photos"])
    assert len(val_photos) == 2 and not val_photos & set(info["split"]["train_photos"])
    for split in ("train", "val"):
        recs = [c for c in info["crops"] if c["file"].startswith(split + "/")]
        assert recs, split
        # the budget counts real bytes on disk
        budget = 0.25 * 2**20 * (0.8 if split == "train" else 0.2)
        assert sum((pack / c["file"]).stat().st_size for c in recs) == info["totals"][split]["bytes"] <= budget
        # validation crops come only from held-out photos, training crops never do
        assert all((c["source"] in val_photos) == (split == "val") for c in recs)
    # texture weighting: random texture costs ~3 B/px, flat cells almost nothing, so a uniform draw
    # would fill the budget with about as many flat as textured cells; the weighted draw picks
    # textured ones first (scores ~ 100 vs 0)
    textured = [c for c in info["crops"] if c["col"] < 128]
    assert len(textured) >= 0.9 * len(info["crops"])
    # crops are lossless copies of their photo's region (independent decode with Pillow)
    for c in info["crops"][:6]:
        crop = np.asarray(Image.open(pack / c["file"]).convert("RGB"))
        src = np.asarray(Image.open(c["source"]).convert("RGB"))
        assert np.array_equal(crop, src[c["row"]:c["row"] + 64, c["col"]:c["col"] + 64])


def test_uniform_draw_takes_flat_crops_too(photos, tmp_path):
    info = _pack(photos, tmp_path / "pack", texture_power=0.0, budget_mib=1.0)
    flat = [c for c in info["crops"] if c["col"] >= 128]
    assert flat, "texture_power 0 must draw flat cells as well"


def test_pack_is_deterministic_and_refuses_to_overwrite(photos, tmp_path):
    a = _pack(photos, tmp_path / "a")
    b = _pack(photos, tmp_path / "b")
    assert [c["sha256"] for c in a["crops"]] == [c["sha256"] for c in b["crops"]]
    with pytest.raises(UsageError, match="not empty"):
        _pack(photos, tmp_path / "a")
    c = _pack(photos, tmp_path / "a", seed=1, overwrite=True)
    assert c["recipe"]["seed"] == 1 and json.loads((tmp_path / "a" / "pack.json").read_text())["recipe"]["seed"] == 1


def test_unreadable_photo_is_skipped_and_recorded(photos, tmp_path):
    folder = tmp_path / "shots"
    folder.mkdir()
    for p in sorted(photos.iterdir())[:4]:
        (folder / p.name).write_bytes(p.read_bytes())
    good = (folder / "p0.png").read_bytes()
    (folder / "broken.png").write_bytes(good[: len(good) // 2])  # header intact, IDAT cut short
    info = TP.make_pack([folder], tmp_path / "pack", budget_mib=0.1, val_fraction=0.0 + 0.25, crop=64)
    assert [s["file"] for s in info["skipped"]] == [str(folder / "broken.png")]
    assert all("broken" not in c["source"] for c in info["crops"])


def test_training_uses_the_recorded_split(photos, tmp_path):
    info = _pack(photos, tmp_path / "pack")
    from gsprestore.training import TrainConfig, build_patch_sets

    cfg = TrainConfig(task="demosaic", prior="gtv", data=[str(tmp_path / "pack")], patches=20, patch_size=16,
                      val_patches=6)
    sets = build_patch_sets(cfg)
    n_train = sum(c["file"].startswith("train/") for c in info["crops"])
    n_val = sum(c["file"].startswith("val/") for c in info["crops"])
    assert (sets.info["train_photos"], sets.info["val_photos"]) == (n_train, n_val)
    assert all("/val/" in f for f in sets.info["val_files"])
    assert tuple(sets.train.shape) == (20, 3, 16, 16) and tuple(sets.val.shape) == (6, 3, 16, 16)


def test_cli_train_pack(photos, tmp_path):
    from typer.testing import CliRunner

    from gsprestore.cli.app import _register, app

    _register()
    res = CliRunner().invoke(app, ["train-pack", str(photos), "-o", str(tmp_path / "pk"), "--budget-mib", "0.2",
                                   "--crop", "64", "--codec", "png"])
    assert res.exit_code == 0, res.output
    assert "train:" in res.stdout and any(p.suffix == ".png" for p in (tmp_path / "pk" / "train").iterdir())
    res = CliRunner().invoke(app, ["train-pack", str(photos), "-o", str(tmp_path / "pk2"), "--crop", "30"])
    assert res.exit_code != 0 and not (tmp_path / "pk2").exists()
