"""Training pipeline: patches (alignment, augmentation, split, downscale), the loop (determinism,
exact resume, signals, best checkpoint, log), and ``gsprestore train`` (errors, smoke run).

Everything runs on the CPU on tiny synthetic photos written to ``tmp_path``. The loop tests use
a tiny stand-in network with the models' interface (``forward(known, mask)``, ``.config``) so they
test the pipeline, not the model; the smoke tests use a tiny configuration of the real uGTV."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from torch import nn
from typer.testing import CliRunner

from gsprestore.training import patches as P
from gsprestore import training as T
from gsprestore.physics.tasks import network_input
from gsprestore.core.digest import sha256_file
from gsprestore.core.errors import GspError, UsageError

# --------------------------------------------------------------------------- fixtures


def _coord_image(h: int, w: int, photo_id: int) -> np.ndarray:
    """uint8 RGB whose pixels encode where they are: R = row, G = column, B = photo id."""
    r, c = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    return np.stack([r % 256, c % 256, np.full_like(r, photo_id)], axis=2).astype(np.uint8)


def _smooth_photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A photo-like uint8 image: a few colour gradients and an edge."""
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    a = rng.uniform(0.2, 0.8, size=(3, 3))
    img = a[:, 0, None, None] + 0.3 * a[:, 1, None, None] * np.sin(6 * x + 3 * a[:, 2, None, None]) * y
    img = img + 0.2 * (x + 0.3 * y > 0.5)
    return np.clip(np.rint(img.transpose(1, 2, 0) * 255), 0, 255).astype(np.uint8)


def _write_photos(root):
    """Two training folders: 6 PNGs (some odd sizes) and 4 JPEGs."""
    rng = np.random.default_rng(0)
    a, b = root / "photos_a", root / "photos_b"
    a.mkdir()
    b.mkdir()
    for i, (h, w) in enumerate([(41, 37), (40, 48), (33, 45), (50, 39), (36, 36), (45, 51)]):
        PILImage.fromarray(_smooth_photo(rng, h, w)).save(a / f"p{i}.png")
    for i, (h, w) in enumerate([(48, 64), (63, 41), (40, 40), (57, 49)]):
        PILImage.fromarray(_smooth_photo(rng, h, w)).save(b / f"j{i}.jpg", quality=95)
    return [a, b]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return _write_photos(tmp_path_factory.mktemp("photos"))


class Stand(nn.Module):
    """Stand-in network with the interface of :func:`gsprestore.models.build_model`: keeps the
    known samples and fills the rest with a 3x3 convolution of (known, mask)."""

    calls = 0
    hook = None

    def __init__(self, method: str, task: str, width: int = 4, **_):
        super().__init__()
        self.config = {"method": method, "task": task, "width": width}
        self.conv1 = nn.Conv2d(6, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 3, 3, padding=1)

    def forward(self, known, mask):
        Stand.calls += 1
        if Stand.hook is not None:
            Stand.hook(Stand.calls)
        fill = self.conv2(torch.relu(self.conv1(torch.cat([known, mask], 1))))
        return known + (1 - mask) * fill


@pytest.fixture
def stand(monkeypatch):
    Stand.calls, Stand.hook = 0, None
    monkeypatch.setattr(T, "model_factory", lambda: Stand)
    yield Stand
    Stand.hook = None


@pytest.fixture(scope="module")
def reference(photos, tmp_path_factory):
    """One uninterrupted 2-epoch run of the default test recipe (5 steps per epoch)."""
    run = tmp_path_factory.mktemp("reference") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(T, "model_factory", lambda: Stand)
        result = _run(_cfg(photos), run)
    return result


def _cfg(photos, **kw) -> T.TrainConfig:
    base = dict(task="demosaic", prior="gtv", data=[str(p) for p in photos], patch_size=16, patches=40,
                val_fraction=0.25, val_patches=12, epochs=2, batch_size=8, lr=3e-3, log_every=2, seed=3)
    base.update(kw)
    return T.TrainConfig(**base)


def _run(cfg, run_dir, **kw):
    return T.train(cfg, run_dir, progress=False, device="cpu", **kw)


def _weights(path, key):
    return torch.load(path, map_location="cpu", weights_only=True)[key]


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- patches


def test_dihedral_is_the_group_of_the_square():
    p = np.arange(4 * 4 * 1).reshape(4, 4, 1)
    outs = [P.dihedral(p, k) for k in range(8)]
    # independent oracle: torch's rot90 / flip
    t = torch.from_numpy(p)
    oracle = [torch.rot90(t, k, dims=(0, 1)) for k in range(4)]
    oracle += [torch.flip(o, dims=(1,)) for o in oracle]
    for o, e in zip(outs, oracle):
        np.testing.assert_array_equal(o, e.numpy())
    assert len({o.tobytes() for o in outs}) == 8  # all distinct


@pytest.mark.parametrize("augment", [False, True])
def test_patches_are_block_aligned_crops_of_their_photo(tmp_path, augment):
    folder = tmp_path / "coords"
    folder.mkdir()
    sizes = [(37, 45), (50, 31), (24, 24)]
    for i, (h, w) in enumerate(sizes):
        PILImage.fromarray(_coord_image(h, w, i)).save(folder / f"{i}.png")
    sources = P.scan_sources([folder])[folder]
    place = P.place_patches(sources, 300, 8, np.random.default_rng(1), augment=augment)
    cut = P.cut_patches(sources, place, 8, workers=2)
    assert cut.dtype == torch.uint8 and cut.shape == (300, 3, 8, 8)
    assert (place.row % 2 == 0).all() and (place.col % 2 == 0).all()
    if augment:
        assert set(place.transform.tolist()) == set(range(8))
    for i in range(300):
        src = sources[place.source[i]]
        r, c = int(place.row[i]), int(place.col[i])
        assert r + 8 <= src.size[0] and c + 8 <= src.size[1]
        patch = cut[i].permute(1, 2, 0).numpy()
        assert (patch[..., 2] == place.source[i]).all()
        rows, cols = patch[..., 0].astype(int), patch[..., 1].astype(int)
        # every 2x2 block of the (augmented) patch is one aligned 2x2 block of the photo
        for bi in range(0, 8, 2):
            for bj in range(0, 8, 2):
                assert {(a // 2, b // 2) for a, b in zip(rows[bi:bi + 2, bj:bj + 2].ravel(),
                                                        cols[bi:bi + 2, bj:bj + 2].ravel())} \
                    == {((rows[bi, bj]) // 2, (cols[bi, bj]) // 2)}
        assert rows.min() == r and cols.min() == c and rows.max() == r + 7 and cols.max() == c + 7
    # every valid even position can be drawn: positions are spread over each photo
    assert len({(int(s), int(r), int(c)) for s, r, c in zip(place.source, place.row, place.col)}) > 100


def test_odd_and_small_photos(tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    PILImage.fromarray(_coord_image(9, 9, 0)).save(folder / "a.png")
    PILImage.fromarray(_coord_image(11, 13, 1)).save(folder / "b.png")
    src = {s.path.name: s for s in P.scan_sources([folder])[folder]}
    assert src["a.png"].positions(8) == (1, 1)  # 9x9: only the even corner (0, 0)
    assert src["b.png"].positions(8) == (2, 3)
    assert src["a.png"].positions(10) == (0, 0)
    with pytest.raises(UsageError, match="at least 16x16"):
        P.place_patches(list(src.values()), 4, 16, np.random.default_rng(0))
    with pytest.raises(UsageError, match="even"):
        P.place_patches(list(src.values()), 4, 7, np.random.default_rng(0))


def test_split_is_by_photo_and_deterministic(tmp_path):
    folders = []
    for f, n in (("x", 10), ("y", 3)):
        d = tmp_path / f
        d.mkdir()
        for i in range(n):
            PILImage.fromarray(_coord_image(20, 20, 10 * len(folders) + i)).save(d / f"{i}.png")
        folders.append(d)
    sets = P.build_patch_sets(folders, patches=60, patch_size=8, val_fraction=0.3, val_patches=30, seed=5)
    again = P.build_patch_sets(folders, patches=60, patch_size=8, val_fraction=0.3, val_patches=30, seed=5)
    assert torch.equal(sets.train, again.train) and torch.equal(sets.val, again.val)
    assert sets.info["train_digest"] == again.info["train_digest"]
    assert sets.info["val_photos"] == 3 + 1  # round(0.3 * 10) + round(0.3 * 3)
    train_ids = set(sets.train[:, 2].unique().tolist())
    val_ids = set(sets.val[:, 2].unique().tolist())
    assert train_ids and val_ids and not (train_ids & val_ids)
    other = P.build_patch_sets(folders, patches=60, patch_size=8, val_fraction=0.3, val_patches=30, seed=6)
    assert not torch.equal(sets.train, other.train)


def test_downscale_filters():
    rng = np.random.default_rng(0)
    img = rng.uniform(size=(9, 12, 3)).astype(np.float32)
    area = P.downscale2(img, "area")
    oracle = img[:8].reshape(4, 2, 6, 2, 3).mean(axis=(1, 3))
    np.testing.assert_allclose(area, oracle, atol=1e-6)
    const = np.full((10, 14, 3), 0.3, np.float32)
    np.testing.assert_allclose(P.downscale2(const, "lanczos"), 0.3, atol=1e-5)
    # anti-aliasing: a Nyquist checkerboard must not alias into a pattern
    checker = (np.indices((32, 32)).sum(axis=0) % 2).astype(np.float32)[..., None].repeat(3, 2)
    lz = P.downscale2(checker, "lanczos")
    assert lz.shape == (16, 16, 3) and np.abs(lz[3:-3, 3:-3] - 0.5).max() < 0.02


def test_downscale_scope_jpeg_only(photos):
    groups = P.scan_sources(photos, downscale=2, scope="jpeg")
    for srcs in groups.values():
        for s in srcs:
            assert s.downscale == (2 if s.path.suffix == ".jpg" else 1)
    png = groups[photos[0]][0]
    with PILImage.open(png.path) as im:
        assert png.size == (im.size[1], im.size[0])
    jpg = groups[photos[1]][1]
    assert jpg.size == (63 // 2, 41 // 2)
    assert P.load_source(jpg).shape == (31, 20, 3)


def test_test_sets_are_refused(tmp_path, monkeypatch):
    kodak = tmp_path / "kodak24"
    kodak.mkdir()
    PILImage.fromarray(_coord_image(20, 20, 0)).save(kodak / "kodim01.png")
    with pytest.raises(UsageError, match="test set"):
        P.scan_sources([kodak])
    # a test image hidden in a training folder is found by its SHA-256
    hidden = tmp_path / "mine"
    hidden.mkdir()
    (hidden / "x.png").write_bytes((kodak / "kodim01.png").read_bytes())
    PILImage.fromarray(_coord_image(20, 20, 1)).save(hidden / "y.png")

    digest = sha256_file(kodak / "kodim01.png", cached=True)
    real = P._test_set_digests
    monkeypatch.setattr(P, "_test_set_digests", lambda: ({**real()[0], digest: "kodak/kodim01.png"}, real()[1]))
    with pytest.raises(UsageError, match=r"x\.png.*kodak/kodim01\.png"):
        P.scan_sources([hidden])


def test_registered_test_digests_are_used():
    digests, names = P._test_set_digests()
    assert {"kodak24", "mcm"} <= names
    assert sum(v.startswith("kodak/") for v in digests.values()) == 24
    assert sum(v.startswith("mcm/") for v in digests.values()) == 18


# --------------------------------------------------------------------------- schedule, loss


def test_lr_schedule():
    cos = T.LRSchedule("cosine", 1e-3, total_steps=100, steps_per_epoch=10, min_lr_ratio=0.1)
    assert cos(0) == pytest.approx(1e-3) and cos(100) == pytest.approx(1e-4)
    assert cos(50) == pytest.approx(0.55e-3)
    assert all(cos(i) >= cos(i + 1) for i in range(100))
    step = T.LRSchedule("step", 1e-3, 100, 10, step_epochs=3, gamma=0.5)
    assert [step(s) for s in (0, 29, 30, 59, 60)] == pytest.approx([1e-3, 1e-3, 5e-4, 5e-4, 2.5e-4])
    warm = T.LRSchedule("none", 1e-3, 100, 10, warmup_steps=4)
    assert [warm(s) for s in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])


def test_losses():
    a, b = torch.zeros(2, 3, 4, 4), torch.full((2, 3, 4, 4), 0.5)
    assert float(T.make_loss("l1")(a, b)) == pytest.approx(0.5)
    assert float(T.make_loss("l2")(a, b)) == pytest.approx(0.25)
    assert float(T.make_loss("charbonnier", 1e-3)(a, b)) == pytest.approx(np.sqrt(0.25 + 1e-6))


def test_evaluate_is_dataset_mse_psnr(stand):
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    net = Stand("ugtv", "demosaic")
    res = T.evaluate(net, "demosaic", x, batch_size=4)
    gt = x.float() / 255
    with torch.no_grad():
        out = net(*network_input("demosaic", gt))
    mse = ((out.double() - gt.double()) ** 2).mean(dim=(1, 2, 3)).mean()
    assert res["psnr"] == pytest.approx(float(10 * torch.log10(1 / mse)))
    up = T.evaluate(net, "upscale2x", x, batch_size=4)
    assert up["space"] == "y" and up["psnr"] != up["psnr_rgb"]


# --------------------------------------------------------------------------- the loop


def test_two_runs_give_identical_weights(photos, stand, reference, tmp_path):
    r1 = reference
    r2 = _run(_cfg(photos), tmp_path / "r2")
    assert r1.status == r2.status == "finished" and r1.step == 2 * 5
    w1, w2 = _weights(r1.run_dir / "model.pt", "state_dict"), _weights(tmp_path / "r2/model.pt", "state_dict")
    assert _same_state(w1, w2)
    assert _same_state(_weights(r1.run_dir / "last.pt", "model"), _weights(tmp_path / "r2/last.pt", "model"))
    _run(_cfg(photos, seed=4, epochs=1), tmp_path / "r3")
    assert not _same_state(_weights(r1.run_dir / "model.pt", "state_dict"),
                           _weights(tmp_path / "r3/model.pt", "state_dict"))


@pytest.mark.parametrize("stop_step", [5, 7])  # at the end of epoch 1 (5 steps/epoch), and mid-epoch 2
def test_resume_equals_uninterrupted(photos, stand, reference, tmp_path, stop_step):
    full = reference
    part = _run(_cfg(photos), tmp_path / "part", max_steps=stop_step)
    assert part.status == "max-steps" and part.step == stop_step
    ck = T.load_checkpoint(tmp_path / "part/last.pt")
    assert (ck["epoch"], ck["batch"]) == divmod(stop_step, 5)
    done = T.train(None, tmp_path / "part", resume=True, progress=False, device="cpu")
    assert done.status == "finished" and done.step == full.step
    assert done.last_psnr == full.last_psnr and done.best_psnr == full.best_psnr
    a, b = T.load_checkpoint(full.run_dir / "last.pt"), T.load_checkpoint(tmp_path / "part/last.pt")
    assert _same_state(a["model"], b["model"])
    assert all(torch.equal(x, y) for x, y in zip(a["optimizer"]["state"][0].values(),
                                                 b["optimizer"]["state"][0].values()))
    events = [r["event"] for r in T.read_log(tmp_path / "part/log.jsonl")]
    assert events[0] == "start" and "resume" in events and events[-1] == "end"
    assert events.count("end") == 2  # max-steps exports weights too


def test_signal_finishes_the_step_and_checkpoints(photos, stand, reference, tmp_path):
    Stand.calls = 0
    Stand.hook = lambda n: signal.raise_signal(signal.SIGTERM) if n == 3 else None  # in the 3rd step
    res = _run(_cfg(photos), tmp_path / "sig")
    Stand.hook = None
    assert res.status == "stopped" and res.signal == "SIGTERM" and res.step == 3 and res.model_path is None
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    ck = T.load_checkpoint(tmp_path / "sig/last.pt")
    assert (ck["epoch"], ck["batch"], ck["step"]) == (0, 3, 3)
    assert T.read_log(tmp_path / "sig/log.jsonl")[-1] == {**T.read_log(tmp_path / "sig/log.jsonl")[-1],
                                                         "event": "stop", "reason": "SIGTERM", "step": 3}
    T.train(None, tmp_path / "sig", resume=True, progress=False, device="cpu")
    assert _same_state(_weights(reference.run_dir / "model.pt", "state_dict"),
                       _weights(tmp_path / "sig/model.pt", "state_dict"))


def test_best_checkpoint_is_never_lost(photos, stand, tmp_path, monkeypatch):
    scores = iter([30.0, 25.0, 28.0, 27.0])
    real = T.evaluate

    def fake(*a, **k):
        out = real(*a, **k)
        out["psnr"] = next(scores)
        return out

    monkeypatch.setattr(T, "evaluate", fake)
    res = _run(_cfg(photos, epochs=3), tmp_path / "r", max_steps=10)
    assert (res.best_psnr, res.best_epoch) == (30.0, 1)
    best = T.load_checkpoint(tmp_path / "r/best.pt")
    last = T.load_checkpoint(tmp_path / "r/last.pt")
    assert best["best"]["epoch"] == 1 and not _same_state(best["model"], last["model"])
    assert _same_state(best["model"], _weights(tmp_path / "r/model.pt", "state_dict"))
    # a crash between writing best.pt and last.pt: last.pt knows an older best; best.pt wins
    ck = T.load_checkpoint(tmp_path / "r/last.pt")
    ck["best"] = {"psnr": 20.0, "epoch": 0, "step": 0}
    torch.save(ck, tmp_path / "r/last.pt")
    res = T.train(None, tmp_path / "r", resume=True, progress=False, device="cpu")  # epoch 3 scores 28
    assert (res.best_psnr, res.best_epoch) == (30.0, 1)
    assert _same_state(best["model"], T.load_checkpoint(tmp_path / "r/best.pt")["model"])


def test_log_records(photos, stand, tmp_path):
    _run(_cfg(photos, log_every=3), tmp_path / "r")
    recs = T.read_log(tmp_path / "r/log.jsonl")
    assert [r["event"] for r in recs] == ["start", "step", "epoch", "step", "step", "epoch", "end"]
    for r in recs:
        assert isinstance(r["time"], float)
    steps = [r for r in recs if r["event"] == "step"]
    assert [r["step"] for r in steps] == [3, 6, 9]
    for r in steps:
        assert r["loss"] > 0 and r["lr"] > 0 and r["patches_per_s"] > 0
    epochs = [r for r in recs if r["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    for e in epochs:
        assert np.isfinite(e["val_psnr"]) and e["val_space"] == "rgb" and e["patches_per_s"] > 0
    assert recs[-1]["best_val_psnr"] == max(e["val_psnr"] for e in epochs)
    cfg = json.loads((tmp_path / "r/config.json").read_text())
    assert cfg["recipe"]["seed"] == 3 and cfg["command"].startswith("gsprestore train --task demosaic")
    assert cfg["patches"]["train_patches"] == 40 and cfg["patches"]["val_patches"] == 12
    meta = torch.load(tmp_path / "r/model.pt", weights_only=True)["meta"]
    for key in ("command", "data", "patches", "epochs_done", "val_psnr", "patches_per_s", "recipe"):
        assert key in meta
    assert meta["patches"]["train_patches"] == 40 and meta["recipe"]["seed"] == 3


def test_new_run_refuses_an_existing_run(photos, stand, tmp_path):
    _run(_cfg(photos, epochs=1), tmp_path / "r")
    with pytest.raises(UsageError, match="already holds a training run"):
        _run(_cfg(photos, epochs=1), tmp_path / "r")


def test_resume_refuses_changed_photos(stand, tmp_path):
    photos = _write_photos(tmp_path)
    _run(_cfg(photos), tmp_path / "r", max_steps=2)
    PILImage.fromarray(_coord_image(60, 60, 9)).save(photos[0] / "new.png")
    with pytest.raises(Exception, match="photos changed"):
        T.train(None, tmp_path / "r", resume=True, progress=False, device="cpu")


def test_init_from_previous_weights(stand, tmp_path):
    a = Stand("ugtv", "demosaic", width=4)
    torch.save({"state_dict": a.state_dict()}, tmp_path / "a.pt")
    b = Stand("ugtv", "demosaic", width=4)
    assert T.init_from(b, tmp_path / "a.pt") == [] and _same_state(a.state_dict(), b.state_dict())
    c = Stand("ugtv", "demosaic", width=5)  # other shapes: those tensors keep their initial values
    fresh = {k: v.clone() for k, v in c.state_dict().items()}
    kept = T.init_from(c, tmp_path / "a.pt")
    assert kept == ["conv1.bias", "conv1.weight", "conv2.weight"]
    assert torch.equal(c.conv2.bias, a.conv2.bias) and torch.equal(c.conv1.weight, fresh["conv1.weight"])
    torch.save({"state_dict": {"other.weight": torch.zeros(1)}}, tmp_path / "bad.pt")
    with pytest.raises(GspError, match="no tensor of these weights fits"):
        T.init_from(b, tmp_path / "bad.pt")
    # a file with a tensor the network lacks, and without one it has: the rest is copied
    part = {k: v for k, v in a.state_dict().items() if k != "conv1.weight"}
    torch.save({"state_dict": {**part, "blocks.9.extra": torch.zeros(2)}}, tmp_path / "part.pt")
    d = Stand("ugtv", "demosaic", width=4)
    assert T.init_from(d, tmp_path / "part.pt") == ["conv1.weight"]
    assert torch.equal(d.conv2.weight, a.conv2.weight)


def test_init_from_shipped_lite_weights_and_fewer_blocks(tmp_path):
    """Issue 51: --init with a shipped lite file builds the lite network (its method differs from
    the plain prior's only by a configuration key), and --blocks 1 from two-block weights copies the
    block both have."""
    from gsprestore.methods.weights import weights_dir
    from gsprestore.training.build import adopt_init_config, build_network

    cfg = T.TrainConfig(task="demosaic", prior="gtv", data=["d"], init=str(weights_dir() / "ugtv-lite_demosaic.pt"))
    info = adopt_init_config(cfg)
    assert cfg.model["feature_trunk"] == "packed" and cfg.method == "ugtv-lite" and info["adopted"]
    net = build_network(cfg)
    assert net.init_report == []
    two = T.TrainConfig(task="demosaic", prior="gtv", data=["d"], init=str(weights_dir() / "ugtv_demosaic.pt"),
                        model={"blocks": 1})
    adopt_init_config(two)
    one = build_network(two)
    assert one.init_report == [] and len(one.blocks) == 1


def _small_ugtv(seed: int = 5):
    """A tiny uGTV demosaicker whose configuration is far from the paper-size default."""
    from gsprestore.models import build_model

    torch.manual_seed(seed)
    return build_model("ugtv", "demosaic", blocks=1, heads=1, width=8, features=8, admm_iters=1, cg_iters=2,
                       signal="green-difference").eval()


def test_init_adopts_the_weights_own_configuration(photos, tmp_path):
    """--init W builds W's network (not the default one), says so in one line, and starts from W's
    validation PSNR exactly; options override single keys."""
    from cli_runner import cli
    from gsprestore.methods.weights import save_weights

    src = _small_ugtv()
    save_weights(tmp_path / "src.pt", src)
    base = ["train", "--task", "demosaic", "--prior", "gtv", "--data", *photos, "--patch-size", "16",
            "--patches", "8", "--val-patches", "4", "--batch-size", "4", "--max-steps", "1", "--device", "cpu",
            "--init", tmp_path / "src.pt", "--no-progress"]
    code, out, err = cli(*base, "--out", tmp_path / "run")
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("--init")]
    assert notes == ["--init src.pt: its own model configuration (admm_iters=1, blocks=1, cg_iters=2, "
                     "features=8, heads=1, signal=green-difference, width=8, rest default)"], err
    stored = json.loads((tmp_path / "run/config.json").read_text())
    assert stored["model_config"] == src.config
    assert "--model-opt admm_iters=1" in stored["command"]
    start = T.read_log(tmp_path / "run/log.jsonl")[0]
    assert start["init_config"]["note"] == notes[0] and start["init_kept"] == []
    assert start["params"] == src.num_params()
    # the starting validation is the source model's own on the run's validation patches
    sets = T.build_patch_sets(T.load_run_config(tmp_path / "run"))
    expected = T.evaluate(src, "demosaic", sets.val, batch_size=32)["psnr"]
    init_val = [r for r in T.read_log(tmp_path / "run/log.jsonl") if r["event"] == "init-val"][0]["val_psnr"]
    assert init_val == pytest.approx(expected, rel=1e-9, abs=1e-9)
    # the export (and a resume) rebuild the adopted network
    assert torch.load(tmp_path / "run/model.pt", weights_only=True)["config"] == src.config

    # an option overrides one key; the rest is still adopted
    code, out, err = cli(*base, "--out", tmp_path / "run2", "--cg-iters", "3")
    assert code == 0, err
    assert "; from the options: cg_iters=3; the added iterations' CG step sizes start at 0" in err
    cfg2 = json.loads((tmp_path / "run2/config.json").read_text())["model_config"]
    assert cfg2 == {**src.config, "cg_iters": 3}
    start2 = T.read_log(tmp_path / "run2/log.jsonl")[0]
    assert start2["init_kept"] == [] and start2["init_regrown"] == ["blocks.0.alpha", "blocks.0.beta"]
    # the deeper network starts where its weights were: the same validation PSNR
    init_val2 = [r for r in T.read_log(tmp_path / "run2/log.jsonl") if r["event"] == "init-val"][0]["val_psnr"]
    assert init_val2 == pytest.approx(init_val, abs=1e-6)


def _small(method: str, **config):
    from gsprestore.models import build_model

    torch.manual_seed(3)
    net = build_model(method, "demosaic", blocks=2, heads=2, width=8, features=4, **config)
    with torch.no_grad():  # learned-looking step sizes, not the uniform initial ones
        for block in net.blocks:
            block.alpha.uniform_(0.2, 0.9)
            block.beta.uniform_(0.05, 0.5)
    return net.eval()


@pytest.mark.parametrize("method, shallow, deep", [
    ("ugtv", dict(admm_iters=1, cg_iters=2), dict(admm_iters=3, cg_iters=4)),
    ("ugtv", dict(admm_iters=2, cg_iters=2), dict(admm_iters=2, cg_iters=5)),
    ("uglr", dict(cg_iters=3), dict(cg_iters=7)),
])
def test_init_into_a_deeper_unrolling_starts_as_the_shallow_network(tmp_path, method, shallow, deep):
    """--init into more ADMM iterations / CG steps: the shared steps keep their learned sizes, the
    added ones are no-ops (alpha 0), so the deeper network returns the shallow one's output (to
    float rounding, through the training path and the no-grad one) and still has a gradient for
    the added alphas; fewer iterations keep the leading steps."""
    from gsprestore.physics.tasks import observation, observe
    from gsprestore.methods.weights import save_weights

    a = _small(method, **shallow)
    save_weights(tmp_path / "a.pt", a)
    b = _small(method, **deep)
    regrown: list = []
    assert T.init_from(b, tmp_path / "a.pt", regrown) == []
    assert regrown == ["blocks.0.alpha", "blocks.0.beta", "blocks.1.alpha", "blocks.1.beta"]
    for blk_a, blk_b in zip(a.blocks, b.blocks):
        lead = tuple(slice(0, n) for n in blk_a.alpha.shape)
        assert torch.equal(blk_b.alpha[lead], blk_a.alpha) and torch.equal(blk_b.beta[lead], blk_a.beta)
        added = torch.ones_like(blk_b.alpha, dtype=torch.bool)
        added[lead] = False
        assert added.any() and torch.all(blk_b.alpha[added] == 0)
    gt = torch.rand(2, 3, 20, 24, generator=torch.Generator().manual_seed(0))
    known, mask = observation("demosaic", observe("demosaic", gt))
    with torch.no_grad():
        torch.testing.assert_close(b(known, mask), a(known, mask), rtol=0, atol=1e-6)
    out = b(known, mask)
    torch.testing.assert_close(out, a(known, mask).detach(), rtol=0, atol=1e-6)
    (out - gt).abs().mean().backward()
    grad = b.blocks[-1].alpha.grad
    assert grad is not None and grad[added].abs().max() > 0  # training can grow them
    # and back: the deep weights into the shallow network keep its leading steps
    save_weights(tmp_path / "b.pt", b)
    c = _small(method, **shallow)
    assert T.init_from(c, tmp_path / "b.pt") == []
    assert all(torch.equal(x.alpha, y.alpha) and torch.equal(x.beta, y.beta) for x, y in zip(c.blocks, a.blocks))


def test_step_size_lr_scale_moves_the_cg_step_sizes_faster(photos, tmp_path):
    """--step-size-lr-scale S: the CG step sizes (alpha, beta) take S times the scheduled rate,
    every other parameter the rate itself (Adam's first step moves each by its rate times the
    sign of its gradient); the scale is part of the recipe (config.json's command) and a resume
    keeps it."""
    model = dict(blocks=1, heads=1, width=8, features=8, admm_iters=1, cg_iters=2)
    cfg = _cfg(photos, model=model, lr=1e-3, epochs=1, step_size_lr_scale=10.0)
    _run(cfg, tmp_path / "run", max_steps=1)
    ck = torch.load(tmp_path / "run/last.pt", map_location="cpu", weights_only=True)
    assert [g["lr_scale"] for g in ck["optimizer"]["param_groups"]] == [1.0, 10.0]
    assert [g["lr"] for g in ck["optimizer"]["param_groups"]] == pytest.approx([1e-3, 1e-2])
    w = ck["model"]
    alpha_moved = (w["blocks.0.alpha"] - 0.5).abs()
    assert alpha_moved.max() == pytest.approx(1e-2, rel=1e-3)
    metric_moved = (w["blocks.0.metric_factor"] - 0.5 * torch.eye(8)).abs()
    assert metric_moved.max() == pytest.approx(1e-3, rel=1e-3)
    stored = json.loads((tmp_path / "run/config.json").read_text())
    assert "--step-size-lr-scale 10.0" in stored["command"]
    result = T.train(None, tmp_path / "run", resume=True, progress=False, device="cpu", max_steps=2)
    ck = torch.load(result.run_dir / "last.pt", map_location="cpu", weights_only=True)
    assert ck["step"] == 2 and [g["lr_scale"] for g in ck["optimizer"]["param_groups"]] == [1.0, 10.0]
    with pytest.raises(UsageError, match="step-size-lr-scale"):
        _cfg(photos, step_size_lr_scale=0.0).check()
    # the default keeps one group (and so the checkpoints of earlier runs resume unchanged)
    assert len(T.optimizer_groups(T.build_network(_cfg(photos, model=model)))) == 1


def test_step_sizes_are_regrown_only_where_they_correspond():
    from gsprestore.models.unrolled import regrown_step_sizes

    stored = torch.arange(6.0).view(3, 2) + 1  # (T=3 CG steps, K=2 heads)
    grown = regrown_step_sizes("blocks.0.alpha", stored, (5, 2))
    assert torch.equal(grown, torch.tensor([[1.0, 2], [3, 4], [5, 6], [0, 0], [0, 0]]))
    beta = regrown_step_sizes("blocks.0.beta", stored, (5, 2))
    assert torch.equal(beta, torch.tensor([[1.0, 2], [3, 4], [5, 6], [5, 6], [5, 6]]))
    assert regrown_step_sizes("blocks.0.alpha", stored, (5, 3)) is None  # another head count
    assert regrown_step_sizes("blocks.0.alpha", stored, (2, 5, 2)) is None  # another layout
    assert regrown_step_sizes("blocks.0.mix_logits", stored, (5, 2)) is None


def test_init_from_the_shipped_ugtv_builds_its_2x5_network(photos):
    from gsprestore.methods.weights import weights_dir

    cfg = _cfg(photos, init=str(weights_dir() / "ugtv_demosaic.pt"))
    info = T.adopt_init_config(cfg)
    assert (cfg.model["admm_iters"], cfg.model["cg_iters"], cfg.model["signal"]) == (2, 5, "green-difference")
    assert info["note"] == ("--init ugtv_demosaic.pt: its own model configuration (admm_iters=2, cg_iters=5, "
                            "signal=green-difference, rest default)")


def test_init_of_another_prior_adopts_nothing(photos, tmp_path):
    from gsprestore.methods.weights import save_weights

    save_weights(tmp_path / "src.pt", _small_ugtv())
    cfg = _cfg(photos, prior="glr", init=str(tmp_path / "src.pt"), model={"blocks": 1})
    info = T.adopt_init_config(cfg)
    assert info["adopted"] == {} and cfg.model == {"blocks": 1}
    assert info["note"] == ("--init src.pt holds ugtv demosaic weights, not uglr demosaic: building the "
                            "configured network; tensors that fit are copied")
    assert T.adopt_init_config(_cfg(photos)) is None


# --------------------------------------------------------------------------- CLI


def _cli(args):
    from gsprestore.cli.app import _register, app

    _register()
    return CliRunner().invoke(app, args)


def _cli_main(args, capsys, monkeypatch):
    """Run through app.main() (GspError -> one line and its exit code)."""
    from gsprestore.cli.app import main

    monkeypatch.setattr("sys.argv", ["gsprestore", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, capsys.readouterr().err


def test_cli_errors(photos, tmp_path, capsys, monkeypatch):
    code, err = _cli_main(["train", "--task", "demosaic", "--prior", "gtv", "--data", str(tmp_path / "nope"),
                           "--out", str(tmp_path / "run")], capsys, monkeypatch)
    assert code == 2 and "nope: no such training folder" in err
    kodak = tmp_path / "kodak24"
    kodak.mkdir()
    PILImage.fromarray(_coord_image(20, 20, 0)).save(kodak / "kodim01.png")
    code, err = _cli_main(["train", "--task", "demosaic", "--prior", "gtv", "--data", str(photos[0]), str(kodak),
                           "--out", str(tmp_path / "run")], capsys, monkeypatch)
    assert code == 2 and "kodak24: this looks like a test set" in err
    code, err = _cli_main(["train", "--task", "demosaic", "--data", str(photos[0])], capsys, monkeypatch)
    assert code == 2 and "missing --prior, --out" in err
    code, err = _cli_main(["train", "--task", "demosaic", "--prior", "gtv", "--loss", "l3", "--data",
                           str(photos[0]), "--out", str(tmp_path / "run")], capsys, monkeypatch)
    assert code == 2 and "unknown loss 'l3'" in err
    code, err = _cli_main(["train", "--resume", str(tmp_path / "nothing")], capsys, monkeypatch)
    assert code == 2 and "not a training run folder" in err
    assert not (tmp_path / "run").exists()


def test_cli_resume_refuses_recipe_changes(photos, stand, tmp_path, capsys, monkeypatch):
    _run(_cfg(photos), tmp_path / "r", max_steps=2)
    code, err = _cli_main(["train", "--resume", str(tmp_path / "r"), "--lr", "0.1", "--seed", "2"], capsys, monkeypatch)
    assert code == 2 and "--lr, --seed: cannot change a run's recipe on --resume" in err


def test_cli_smoke_run_with_the_real_model(photos, tmp_path):
    pytest.importorskip("gsprestore.models")
    run = tmp_path / "run"
    res = _cli(["train", "--task", "demosaic", "--prior", "gtv", "--data", str(photos[0]), str(photos[1]),
                "--out", str(run), "--patch-size", "16", "--patches", "8", "--val-patches", "4",
                "--batch-size", "4", "--epochs", "2", "--max-steps", "3", "--device", "cpu", "--blocks", "1",
                "--heads", "1", "--width", "8", "--model-opt", "features=8", "--admm-iters", "1", "--cg-iters", "2", "--downscale-bsds",
                "--log-every", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "max-steps" in res.output and "best val PSNR" in res.output
    from gsprestore.methods import weights

    model = weights.load_model("ugtv", "demosaic", run / "model.pt", verify=False)
    assert model.config["blocks"] == 1 and model.config["admm_iters"] == 1
    meta = torch.load(run / "model.pt", weights_only=True)["meta"]
    assert meta["recipe"]["downscale"] == 2 and meta["recipe"]["downscale_scope"] == "jpeg"
    assert "--blocks" not in meta["command"] and '--model-opt blocks=1' in meta["command"]
    # resume the smoke run to the end of its 2 epochs
    res = _cli(["train", "--resume", str(run), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert json.loads((run / "summary.json").read_text())["epochs_done"] == 2


def test_max_steps_cuts_only_the_patches_a_smoke_run_uses(photos, stand, tmp_path):
    """--max-steps N without --patches / --val-patches cuts N x batch training patches and a
    validation set to match (not 10,000 / 1,000), and says so in one line."""
    from cli_runner import cli

    base = ["train", "--task", "demosaic", "--prior", "gtv", "--data", *photos, "--patch-size", "16",
            "--batch-size", "4", "--device", "cpu", "--no-progress"]
    code, out, err = cli(*base, "--out", tmp_path / "r", "--max-steps", "3")
    assert code == 0, err
    assert ("--max-steps 3: cutting 12 training patches (3 steps x batch 4) and 8 validation patches, not "
            "10,000 / 1,000 (--patches / --val-patches choose)") in err
    info = json.loads((tmp_path / "r/config.json").read_text())
    assert info["patches"]["train_patches"] == 12 and info["patches"]["val_patches"] == 8
    assert info["recipe"]["patches"] == 12 and "--patches 12" in info["command"]
    # what the options give is kept, and a run without --max-steps is the full recipe
    code, out, err = cli(*base, "--out", tmp_path / "r2", "--max-steps", "3", "--patches", "40", "--val-patches", "6")
    assert code == 0 and "--max-steps" not in err
    info = json.loads((tmp_path / "r2/config.json").read_text())
    assert info["patches"]["train_patches"] == 40 and info["patches"]["val_patches"] == 6
    from gsprestore.training.train_options import smoke_sets

    assert smoke_sets(20, 16, 10000, None, 0.1, set())[:2] == (320, 32)
    assert smoke_sets(20, 16, 10000, None, 0.1, {"patches"}) == (10000, None, None)
    assert smoke_sets(1000, 16, 10000, None, 0.1, set()) == (10000, None, None)  # the run uses them all


def test_real_uglr_upscale2x_trains_and_exports(photos, tmp_path):
    pytest.importorskip("gsprestore.models")
    cfg = _cfg(photos, task="upscale2x", prior="glr", patches=8, val_patches=4, batch_size=4, epochs=1,
               model={"blocks": 1, "heads": 1, "width": 8, "features": 8, "cg_iters": 2})
    res = _run(cfg, tmp_path / "run")
    assert res.status == "finished" and res.step == 2 and np.isfinite(res.best_psnr)
    from gsprestore.methods import weights

    model = weights.load_model("uglr", "upscale2x", tmp_path / "run/model.pt", verify=False)
    assert model.config["cg_iters"] == 2
    epoch = [r for r in T.read_log(tmp_path / "run/log.jsonl") if r["event"] == "epoch"][0]
    assert epoch["val_space"] == "y" and epoch["val_psnr"] == pytest.approx(res.best_psnr)


def test_non_finite_steps_are_skipped_then_stop_the_run(photos, stand, tmp_path, monkeypatch):
    nan_calls: set[int] = {2}

    class NanStand(Stand):
        def forward(self, known, mask):
            out = super().forward(known, mask)
            return out * float("nan") if Stand.calls in nan_calls else out

    monkeypatch.setattr(T, "model_factory", lambda: NanStand)
    res = _run(_cfg(photos, epochs=1), tmp_path / "r")  # call 2 is the second training step
    skips = [r for r in T.read_log(tmp_path / "r/log.jsonl") if r["event"] == "skip"]
    assert len(skips) == 1 and skips[0]["step"] == 1
    state = _weights(tmp_path / "r/model.pt", "state_dict")
    assert all(torch.isfinite(v).all() for v in state.values())
    assert res.best_psnr is not None and math.isfinite(res.best_psnr)
    # a run that keeps diverging stops with a one-line error after MAX_BAD_STEPS skipped steps
    nan_calls.update(range(1, 1000))
    Stand.calls = 0
    monkeypatch.setattr(T, "MAX_BAD_STEPS", 3)
    with pytest.raises(GspError, match="not finite 3 steps in a row"):
        _run(_cfg(photos, epochs=1), tmp_path / "r2")


_MALLOC_PROBE = """
import ctypes, sys
from gsprestore.training import set_mmap_threshold
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "set":
    set_mmap_threshold(1 << 20)
p = libc.malloc(8 << 20); libc.free(p)  # glibc's default raises its threshold to 8 MB here
before = libc.mallinfo2().hblks  # live blocks that have their own mapping
p = libc.malloc(8 << 20)
print(libc.mallinfo2().hblks - before)
libc.free(p)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
@pytest.mark.parametrize("mode,mapped", [("default", "0"), ("set", "1")])
def test_set_mmap_threshold_gives_large_blocks_their_own_mapping(mode, mapped):
    """`train --grad-checkpoint` fixes glibc's mmap threshold at 1 MiB (docs/architecture.md: the
    step's peak RSS 3.98 -> 1.45 GB): a freed 8 MB block then no longer moves the threshold up,
    so the next one is mapped (and returned to the OS when freed) instead of living in the heap.
    Own process, so the test session keeps the default allocator."""
    out = subprocess.run([sys.executable, "-c", _MALLOC_PROBE, mode], capture_output=True, text=True, timeout=120)
    if "mallinfo2" in out.stderr:
        pytest.skip("glibc without mallinfo2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [mapped]


_FAULT_PROBE = """
import ctypes, resource, sys
from gsprestore.training import keep_freed_memory
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "set":
    assert keep_freed_memory()
sizes = [(s << 20) + 4096 * i for i, s in enumerate((12, 3, 6, 1, 12, 2))]  # a step's tensors, MiB
def step():
    ps = []
    for n in sizes:
        p = libc.malloc(n); ctypes.memset(p, 1, n); ps.append(p)
    for p in ps[::2] + ps[1::2]:
        libc.free(p)
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, sum(sizes) // 4096)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_keep_freed_memory_reuses_pages_instead_of_faulting_them_in():
    """`gsprestore train` (without --grad-checkpoint) keeps freed memory in the heap: the same
    1-12 MB tensors allocated, filled and freed again each step cost no fresh page faults
    (glibc's default maps or trims them anew each step: one fault per 4 KiB page). Own processes."""
    faults = {}
    for mode in ("default", "set"):
        out = subprocess.run([sys.executable, "-c", _FAULT_PROBE, mode], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        faults[mode], pages = map(int, out.stdout.split())
    assert faults["default"] > pages // 2, faults
    assert faults["set"] < pages // 20, faults


# --------------------------------------------------------------------------- time budget, starting weights


def test_time_budget_validates_and_exports_before_the_deadline(photos, stand, tmp_path):
    import time

    _run(_cfg(photos), tmp_path / "warm", max_steps=1)  # first-use imports (optimizer, clipping) out of the timing
    Stand.hook = lambda calls: time.sleep(0.05)  # ~0.05 s a step: 1000 epochs would take minutes
    t0 = time.monotonic()
    result = _run(_cfg(photos, epochs=1000), tmp_path / "run", time_budget=6.0)
    wall = time.monotonic() - t0
    assert result.status == "time-budget" and result.model_path is not None and result.model_path.is_file()
    assert 2 < result.step < 1000 * 5
    assert wall < 6.0 + 2.0, wall  # validation and export fit inside the budget (plus process noise)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "time-budget" and summary["time_budget_s"] == 6.0
    last = T.read_log(tmp_path / "run" / "log.jsonl")[-2]
    assert last["event"] == "epoch" and last["val_psnr"] is not None


class SlowStand(Stand):
    """Stand-in whose inference forward takes ``PER_PATCH`` s a patch and whose training forward 3x
    that (a step: forward with autograd + backward), like the real networks."""

    PER_PATCH = 0.2

    def forward(self, known, mask):
        import time

        time.sleep(self.PER_PATCH * known.shape[0] * (3 if torch.is_grad_enabled() else 1))
        return super().forward(known, mask)


def test_time_budget_budgets_the_first_step_too(photos, tmp_path, monkeypatch):
    """A step longer than what is left of the budget is never started, the first one included (its
    time is estimated from the timed validation forward): the run still ends inside its budget."""
    import time

    monkeypatch.setattr(T, "model_factory", lambda: SlowStand)
    _run(_cfg(photos, epochs=1), tmp_path / "warm", max_steps=1)  # first-use imports out of the timing
    t0 = time.monotonic()
    # validation 12 patches x 0.2 s = 2.4 s; a step 8 x 0.6 = 4.8 s: timing + step + validation > 6 s
    result = _run(_cfg(photos, epochs=1000), tmp_path / "run", time_budget=6.0)
    wall = time.monotonic() - t0
    assert result.status == "time-budget" and result.step == 0 and result.model_path.is_file()
    assert wall < 6.0 + 0.5, wall
    # with room for steps, each one's measured time is budgeted before it starts
    t0 = time.monotonic()
    result = _run(_cfg(photos, epochs=1000), tmp_path / "run2", time_budget=16.0)
    wall = time.monotonic() - t0
    assert result.status == "time-budget" and result.step >= 1 and wall < 16.0 + 0.5, (result.step, wall)
    start = T.read_log(tmp_path / "run2" / "log.jsonl")[0]
    assert start["event"] == "start"


def test_log_has_a_record_at_least_every_interval(photos, tmp_path, monkeypatch):
    """log.jsonl gets a step record at least every LOG_INTERVAL_S (not only every --log-every steps)
    and an "alive" record when a single step (or validation) is longer than that."""
    from gsprestore.core import heartbeat

    monkeypatch.setattr(heartbeat, "LOG_INTERVAL_S", 0.5)
    monkeypatch.setattr(T, "model_factory", lambda: SlowStand)
    monkeypatch.setattr(SlowStand, "PER_PATCH", 0.03)  # a step 0.72 s, a validation 0.36 s
    _run(_cfg(photos, epochs=1, log_every=1000), tmp_path / "r")
    recs = T.read_log(tmp_path / "r" / "log.jsonl")
    events = [r["event"] for r in recs]
    assert events.count("step") >= 3 and "alive" in events, events
    alive = [r for r in recs if r["event"] == "alive"]
    assert all(r["phase"].startswith(("step", "validation", "timing", "checkpoint", "export")) for r in alive)
    gaps = [b["time"] - a["time"] for a, b in zip(recs, recs[1:])]
    assert max(gaps) < 0.5 + 0.4, gaps  # the interval plus the heartbeat's own latency and noise


def test_progress_lines_by_the_clock_when_stderr_is_not_a_terminal(photos, tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from gsprestore.core import heartbeat

    monkeypatch.setattr(heartbeat, "PROGRESS_INTERVAL_S", 0.3)
    monkeypatch.setattr(T, "model_factory", lambda: SlowStand)
    monkeypatch.setattr(SlowStand, "PER_PATCH", 0.02)
    buf = io.StringIO()
    progress = T.RichProgress(Console(file=buf, force_terminal=False, width=200))
    T.train(_cfg(photos, epochs=1), tmp_path / "r", progress=progress, device="cpu")
    lines = buf.getvalue().splitlines()
    assert lines[0] == "cutting training patches..."
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) >= 2 and "/5 (epoch 1/1)" in steps[-1] and "elapsed" in steps[-1], lines
    assert any(" ETA " in line for line in steps) and any(line.startswith("epoch 1/1: loss") for line in lines)


def test_starting_weights_are_validated_first_and_kept_if_training_is_worse(photos, stand, reference, tmp_path,
                                                                           monkeypatch):
    import torch.nn.functional as F

    init = reference.model_path
    with monkeypatch.context() as mp:  # gradient ascent: every update makes the model worse
        mp.setattr(T, "make_loss", lambda *a: (lambda out, gt: -F.l1_loss(out, gt)))
        result = _run(_cfg(photos, init=str(init), epochs=1), tmp_path / "run")
    summary = result.summary
    assert summary["init_val_psnr"] is not None and result.last_psnr < summary["init_val_psnr"]
    assert summary["best_is_init"] and summary["best_val_psnr"] == summary["init_val_psnr"]
    assert _same_state(_weights(result.model_path, "state_dict"), _weights(init, "state_dict"))
    events = [r["event"] for r in T.read_log(tmp_path / "run" / "log.jsonl")]
    assert events.index("init-val") < events.index("epoch")
    # an ordinary run from the same weights beats them and exports its own
    better = _run(_cfg(photos, init=str(init), epochs=2), tmp_path / "run2")
    assert not better.summary["best_is_init"]
    assert better.summary["best_val_psnr"] > better.summary["init_val_psnr"]
    assert not _same_state(_weights(better.model_path, "state_dict"), _weights(init, "state_dict"))


def test_cli_time_budget_is_a_usage_error_below_one_second(photos, tmp_path):
    res = _cli(["train", "--task", "demosaic", "--prior", "gtv", "--data", str(photos[0]), "--out",
                str(tmp_path / "r"), "--time-budget", "0"])
    assert res.exit_code == 2 and not (tmp_path / "r").exists()


def test_python_dash_m_runs_the_cli():
    for module in ("gsprestore", "gsprestore.cli.app"):
        res = subprocess.run([sys.executable, "-m", module, "train", "--help"], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0 and "--time-budget" in res.stdout, (module, res.stderr[-500:])


def test_cuda_graph_needs_a_cuda_device(photos, stand, tmp_path):
    from gsprestore.training.graphed_step import capture_training_step

    with pytest.raises(UsageError, match="needs a CUDA device"):
        _run(_cfg(photos), tmp_path / "run", cuda_graph=True)
    step, info = capture_training_step(Stand("ugtv", "demosaic"), "demosaic", T.make_loss("l1"),
                                       torch.rand(2, 3, 8, 8), network_input)
    assert step is None and info["reason"] == "not a CUDA device"


def test_replayed_step_tolerates_the_eager_steps_own_noise_only():
    from gsprestore.training.graphed_step import MAX_RTOL, replay_matches

    assert replay_matches(0.02, 0.02, 1e-3, 0.0)
    # the H100 case: identical losses, gradients 2.2e-3 apart, two eager steps 1e-3 apart (atomics)
    assert not replay_matches(0.02, 0.02, 2.2e-3, 0.0)
    assert replay_matches(0.02, 0.02, 2.2e-3, 1e-3)
    assert not replay_matches(0.02, 0.02, 5e-3, 1e-3)  # more than 4x the noise
    assert not replay_matches(0.02, 0.02, MAX_RTOL * 1.01, 1.0)  # noisy eager steps: capped
    assert not replay_matches(0.021, 0.02, 0.0, 1.0)  # the loss must still agree


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_step_matches_eager_and_trains(photos, tmp_path):
    from gsprestore.training.graphed_step import capture_training_step
    from gsprestore.models import build_model

    model = build_model("ugtv", "demosaic", blocks=1, heads=1, width=8, cg_iters=2, admm_iters=2).cuda()
    gt = torch.rand(4, 3, 16, 16, device="cuda")
    step, info = capture_training_step(model, "demosaic", T.make_loss("l1"), gt, network_input)
    assert step is not None, info
    assert info["max_rel_grad_diff"] < 2e-3
    result = _run(_cfg(photos, model={"blocks": 1, "heads": 1, "width": 8, "cg_iters": 2, "admm_iters": 2}),
                  tmp_path / "run", device="cuda", cuda_graph=True)
    assert result.status == "finished"
    assert any(r["event"] == "cuda-graph" and r["used"] for r in T.read_log(tmp_path / "run" / "log.jsonl"))


def test_cosine_time_schedule_anneals_over_the_budget(photos, stand, tmp_path):
    s = T.LRSchedule("cosine-time", 1.0, total_steps=10, steps_per_epoch=5, min_lr_ratio=0.1, warmup_steps=2)
    assert s(0, 0.9) == pytest.approx(0.5) and s(1, 0.9) == pytest.approx(1.0)  # warm-up is by steps
    assert s(5, 0.0) == pytest.approx(1.0) and s(5, 0.5) == pytest.approx(0.55) and s(5, 1.0) == pytest.approx(0.1)
    assert s(500, 2.0) == pytest.approx(0.1)  # past the deadline: the floor
    with pytest.raises(UsageError, match="pass --time-budget"):
        _run(_cfg(photos, schedule="cosine-time"), tmp_path / "run")
    result = _run(_cfg(photos, schedule="cosine-time", epochs=1000), tmp_path / "run2", time_budget=5.0)
    lrs = [r["lr"] for r in T.read_log(tmp_path / "run2" / "log.jsonl") if r["event"] == "step"]
    assert result.status == "time-budget" and len(lrs) >= 3
    assert lrs[-1] < lrs[0] and lrs == sorted(lrs, reverse=True)  # annealed as the time ran out


def test_the_loop_reports_to_a_progress_object_and_draws_nothing_itself(photos, stand, tmp_path):
    """train() takes a progress= object (gsprestore.runtime.progress.RichProgress in the CLI); the
    loop's modules never import Rich."""
    import ast

    calls = []

    class Recorder(T.TrainProgress):
        def busy(self, text):
            calls.append(("busy", text))
            return super().busy(text)

        def start(self, total, completed):
            calls.append(("start", total, completed))

        def update(self, step, **fields):
            calls.append(("update", step, fields["epoch"]))

        def note(self, text):
            calls.append(("note", text))

        def stop(self):
            calls.append(("stop",))

    res = T.train(_cfg(photos, epochs=1), tmp_path / "r", progress=Recorder(), device="cpu")
    assert res.status == "finished" and res.step == 5
    assert calls[0] == ("busy", "cutting training patches...") and calls[1] == ("start", 5, 0)
    assert [c[1] for c in calls if c[0] == "update"] == [1, 2, 3, 4, 5]
    assert calls[-2][0] == "note" and calls[-2][1].startswith("epoch 1/1: loss") and calls[-1] == ("stop",)
    from pathlib import Path

    package = Path(T.__file__).parent
    for name in ("loop", "report", "recipe", "checkpoints", "build", "evaluation", "stopping"):
        tree = ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m and m.split(".")[0] == "rich" for m in imported), name


def test_train_help_shows_every_default_it_names():
    """Rich markup ate '[default: ...]' inside help texts ('Epochs .'): they are written with
    parentheses, and no help text ends in a dangling ' .'."""
    import re

    from gsprestore.cli.app import _register, app

    _register()
    res = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    flat = " ".join(res.output.split())
    for text in ("Validation patches (default: patches x val-fraction).", "Epochs (default: 30).",
                 "epochs per decay (default: epochs / 3).", "CPU threads for torch (default: torch's;"):
        assert "".join(text.split()) in "".join(flat.split()), text  # lines may wrap anywhere, after a hyphen too
    assert not re.search(r"[A-Za-z] \.(\s|$)", flat)  # a word, then a lost "[...]", then the full stop


def test_resume_of_an_ended_run_says_what_is_left_or_refuses(photos, stand, tmp_path, capsys, monkeypatch):
    """train --resume of a run that ended (a --max-steps smoke run) without --epochs / --max-steps:
    what is left and about how long at its recorded pace; refused when that is long (it used to
    train on silently toward the recipe's epochs); a complete run needs --epochs."""
    from gsprestore.training.train_options import RESUME_QUIET_S, resume_plan
    from gsprestore.core.errors import UsageError

    run = tmp_path / "r"
    _run(_cfg(photos, epochs=30), run, max_steps=2)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "max-steps" and summary["steps"] == 2
    summary["patches_per_s"] = 8 * 148 / (2 * RESUME_QUIET_S)  # 148 steps left: twice the quiet limit
    (run / "summary.json").write_text(json.dumps(summary))
    code, err = _cli_main(["train", "--resume", str(run), "--no-progress"], capsys, monkeypatch)
    assert code == 2 and "ended (max-steps) at step 2, epoch 0 of 30" in err and "148 steps" in err, err
    assert "about 20:00" in err and "pass --epochs N or --max-steps N" in err
    assert "resuming as --epochs" in resume_plan(run, epochs_given=False, steps_given=True)
    summary["patches_per_s"] = 1e6  # a fast run: it says what it does and goes on
    (run / "summary.json").write_text(json.dumps(summary))
    assert "training on: 148 steps (30 epoch(s)) left of its 30 epochs" in resume_plan(run, epochs_given=False, steps_given=False)
    summary.update(epochs_done=30, steps=150)
    (run / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(UsageError, match="it is complete; pass --epochs N"):
        resume_plan(run, epochs_given=False, steps_given=False)
