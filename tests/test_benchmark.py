"""Benchmark protocol end to end with fake restorers registered in the one restorer registry, a
tiny fake data set, and numpy / scikit-image oracles for the expected scores."""

import hashlib
import json
import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image
from skimage.metrics import structural_similarity

from gsprestore import benchmark, datasets, restorers
from gsprestore.errors import GspError, UsageError

FILL = 0.5037  # not on the 8-bit grid, so rounding matters
GAIN = 1.1037  # pushes bright pixels above 1 (clipping matters); k * GAIN is never a rounding tie


def _fill(y, pattern):
    """Fake demosaicker: known samples * GAIN, FILL elsewhere."""
    known, mask = restorers.observation("demosaic", y, pattern)
    return GAIN * known + FILL * (1 - mask)


def _nearest(y, pattern):
    """Fake 2x: nearest neighbour, known pixels at even coordinates."""
    return y.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)


def _make(name, task, **options):
    if name == "fake-fill":
        return restorers.Restorer(name, task, _fill, module=torch.nn.Linear(3, 2))
    if name == "fake-nearest":
        return restorers.Restorer(name, task, _nearest)
    seen = options["seen"]  # fake-record: remembers its inputs, returns the mosaic adjoint

    def record(y, pattern):
        seen.append(y.clone())
        return restorers.observation(task, y, pattern)[0]

    return restorers.Restorer(name, task, record)


@pytest.fixture(autouse=True)
def fake_methods(monkeypatch):
    mod = types.ModuleType("gsp_fake_methods")
    mod.make = _make
    monkeypatch.setitem(sys.modules, "gsp_fake_methods", mod)
    for name, task in [("fake-fill", "demosaic"), ("fake-nearest", "upscale2x"), ("fake-record", "demosaic")]:
        monkeypatch.setitem(restorers.METHODS, name,
                            restorers.MethodSpec(name, (task,), "test", "gsp_fake_methods:make", "test double"))


@pytest.fixture
def tiny_kodak(tmp_path, monkeypatch):
    """Three 8-bit PNGs (one of odd size) registered as the 'kodak' files; returns (parent, arrays)."""
    folder = tmp_path / "data" / "kodak24"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    arrays, sums = {}, {}
    for name, (h, w) in [("kodim01.png", (24, 32)), ("kodim02.png", (27, 33)), ("kodim03.png", (32, 20))]:
        base = rng.integers(0, 256, (h // 3 + 1, w // 3 + 1, 3)).astype(np.uint8)
        a = np.kron(base, np.ones((3, 3, 1), dtype=np.uint8))[:h, :w]
        Image.fromarray(a).save(folder / name)
        arrays[name] = a
        sums[name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    monkeypatch.setattr(datasets, "read_checksums", lambda spec: sums)
    return folder.parent, arrays


def _ssim(a, b):
    return structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                 data_range=1.0, channel_axis=-1)


def _y(a):
    return (16 + a @ np.array([65.481, 128.553, 24.966])) / 255.0


def test_demosaic_scores_match_oracle(tiny_kodak):
    parent, arrays = tiny_kodak
    res = benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, pattern="GRBG", per_image=True)
    (row,) = res["results"]
    assert set(benchmark.ROW_KEYS) <= set(row)
    assert row["method"] == "fake-fill" and row["images"] == 3 and row["params"] == 3 * 2 + 2
    mses, p8, ss = [], [], []
    for a in arrays.values():
        gt = a[: a.shape[0] // 2 * 2, : a.shape[1] // 2 * 2].astype(np.float32).astype(np.float64) / 255
        mask = np.zeros_like(gt)
        mask[0::2, 0::2, 1] = mask[1::2, 1::2, 1] = mask[0::2, 1::2, 0] = mask[1::2, 0::2, 2] = 1  # GRBG
        out = np.where(mask == 1, GAIN * gt, FILL)
        mses.append(((out - gt) ** 2).mean())
        q = np.round(np.clip(out, 0, 1) * 255) / 255
        p8.append(10 * np.log10(1 / ((q - gt) ** 2).mean()))
        ss.append(_ssim(np.clip(out, 0, 1), gt))
    assert row["psnr_dataset_mse"] == pytest.approx(10 * np.log10(1 / np.mean(mses)), abs=1e-4)
    assert row["psnr_mean"] == pytest.approx(np.mean(p8), abs=1e-4)
    assert row["ssim_mean"] == pytest.approx(np.mean(ss), abs=1e-5)
    assert [r["file"] for r in row["per_image"]] == ["kodim01.png", "kodim02.png", "kodim03.png"]
    assert row["seconds_per_image"] > 0 and row["megapixels_per_second"] > 0
    p = res["protocol"]
    assert p["pattern"] == "GRBG" and p["channel_space"].startswith("RGB") and p["dataset"] == "kodak"
    assert p["checksums_verified"] and p["device"] == "cpu" and p["noise"]["sigma"] == 0
    assert p["gsprestore_version"] and p["torch_version"] == torch.__version__


def test_upscale_scored_on_y(tiny_kodak):
    parent, arrays = tiny_kodak
    res = benchmark.run_benchmark("upscale2x", "kodak", ["fake-nearest"], parent)
    (row,) = res["results"]
    mses, p8, ss = [], [], []
    for a in arrays.values():
        gt = a[: a.shape[0] // 2 * 2, : a.shape[1] // 2 * 2].astype(np.float64) / 255
        out = np.repeat(np.repeat(gt[0::2, 0::2], 2, axis=0), 2, axis=1)
        mses.append(((_y(out) - _y(gt)) ** 2).mean())
        p8.append(10 * np.log10(1 / ((_y(out) - _y(gt)) ** 2).mean()))  # 8-bit already: rounding is a no-op
        ss.append(_ssim(_y(out)[..., None], _y(gt)[..., None]))
    assert row["psnr_dataset_mse"] == pytest.approx(10 * np.log10(1 / np.mean(mses)), abs=1e-4)
    assert row["psnr_mean"] == pytest.approx(np.mean(p8), abs=1e-4)
    assert row["ssim_mean"] == pytest.approx(np.mean(ss), abs=1e-5)
    assert res["protocol"]["pattern"] is None and res["protocol"]["channel_space"].startswith("Y, BT.601")


def test_noise_is_seeded_and_shared(tiny_kodak):
    parent, _ = tiny_kodak
    seen_a, seen_b, clean = [], [], []
    opts = {"fake-record": {"seen": seen_a}}
    benchmark.run_benchmark("demosaic", "kodak", "fake-record", parent, noise_sigma=20, restorer_options=opts,
                            warmup=False)
    benchmark.run_benchmark("demosaic", "kodak", "fake-record", parent, noise_sigma=20,
                            restorer_options={"fake-record": {"seen": seen_b}}, warmup=False)
    benchmark.run_benchmark("demosaic", "kodak", "fake-record", parent, restorer_options={"fake-record": {"seen": clean}},
                            warmup=False)
    assert len(seen_a) == 3
    for a, b in zip(seen_a, seen_b):
        assert torch.equal(a, b)
    noise = torch.cat([(a - c).flatten() for a, c in zip(seen_a, clean)])
    assert abs(noise.std().item() * 255 - 20) < 2 and abs(noise.mean().item() * 255) < 1.5
    assert not torch.equal(seen_a[0].flatten()[:100], seen_a[1].flatten()[:100])  # a new draw per image


def test_argument_errors(tiny_kodak):
    parent, _ = tiny_kodak
    with pytest.raises(UsageError, match="unknown method"):
        benchmark.run_benchmark("demosaic", "kodak", "nope", parent)
    with pytest.raises(UsageError, match="does not do upscale2x"):
        benchmark.run_benchmark("upscale2x", "kodak", "fake-fill", parent)
    with pytest.raises(UsageError, match="Bayer pattern"):
        benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, pattern="RGBG")
    with pytest.raises(UsageError, match="unknown task"):
        benchmark.run_benchmark("denoise", "kodak", "fake-fill", parent)
    assert benchmark.parse_methods("demosaic", " fake-fill, FAKE-fill ,") == ["fake-fill"]
    assert benchmark.default_methods("demosaic") == ["bilinear", "malvar", "menon"]
    assert benchmark.default_methods("upscale2x") == ["bicubic", "bicubic-halfpixel"]


def test_bad_method_output_is_reported(tiny_kodak, monkeypatch):
    parent, _ = tiny_kodak
    monkeypatch.setattr(sys.modules["gsp_fake_methods"], "make",
                        lambda name, task: restorers.Restorer(name, task, lambda y, p: y[..., :-2, :]))
    with pytest.raises(GspError, match="returned shape"):
        benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent)


def test_write_json_atomic_and_no_overwrite(tmp_path):
    out = tmp_path / "r.json"
    benchmark.write_json({"a": 1}, out)
    assert json.loads(out.read_text()) == {"a": 1}
    with pytest.raises(GspError, match="--overwrite"):
        benchmark.write_json({"a": 2}, out)
    benchmark.write_json({"a": 2}, out, overwrite=True)
    assert json.loads(out.read_text()) == {"a": 2} and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def _cli(monkeypatch, capsys, *args):
    from gsprestore.cli.app import main

    monkeypatch.setattr(sys, "argv", ["gsprestore", "benchmark", *args])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def test_cli_table_and_json(tiny_kodak, monkeypatch, capsys, tmp_path):
    parent, _ = tiny_kodak
    out = tmp_path / "res.json"
    code, stdout, _ = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                           str(parent), "--methods", "fake-fill", "--json", str(out))
    assert code == 0 and "fake-fill" in stdout
    data = json.loads(out.read_text())
    assert data["results"][0]["method"] == "fake-fill" and data["protocol"]["task"] == "demosaic"
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                        str(parent), "--methods", "fake-fill", "--json", str(out))
    assert code == 1 and "--overwrite" in err


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["--methods", "nope"], 2, "unknown method"),
        (["--methods", "fake-fill", "--pattern", "XYZW"], 2, "Bayer pattern"),
        (["--methods", "fake-fill", "--device", "tpu"], 2, "unknown device"),
        (["--methods", "fake-fill", "--noise-sigma", "-1"], 2, "noise sigma"),
        (["--methods", "fake-fill", "--data-dir", "MISSING"], 1, "no such folder"),
    ],
)
def test_cli_errors_are_one_line(tiny_kodak, monkeypatch, capsys, tmp_path, args, code, needle):
    parent, _ = tiny_kodak
    args = [str(tmp_path / "missing") if a == "MISSING" else a for a in args]
    if "--data-dir" not in args:
        args += ["--data-dir", str(parent)]
    got, stdout, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", *args)
    assert got == code and needle in err and err.count("\n") == 1 and err.startswith("error: ")
