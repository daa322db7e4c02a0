"""Issue 41: never touch the user's files. An output that is an input by another path (a link, a
bind mount, a case-insensitive name), a folder this run did not create, a claim whose process is
gone, two runs into one folder; and the wrong outputs, memory limits and error lines of the same
round. Each test makes its own small images in ``tmp_path`` and runs on the CPU in seconds."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gsprestore.imageio.images import read_image

from cli_runner import GSPRESTORE, ROOT, checkout_env, cli, gray, rgb, run_cli

def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


# --------------------------------------------------------------------------- 1. the same file by another path


def test_folder_output_through_a_symlinked_folder_is_refused(tmp_path):
    src = rgb(tmp_path / "in" / "a.png")
    os.symlink("in", tmp_path / "view")
    before = digest(src)
    code, _, err = cli("upscale2x", "in/", "-o", "view/", "--suffix", "", "-m", "bicubic", cwd=tmp_path)
    assert code == 2 and len(errors(err)) == 1 and "in/a.png" in err, err
    assert digest(src) == before
    assert sorted(os.listdir(tmp_path / "in")) == ["a.png"]


def test_output_that_is_a_hard_link_to_the_input_is_refused_even_with_overwrite(tmp_path):
    src = gray(tmp_path / "in" / "m.png")
    (tmp_path / "view").mkdir()
    os.link(src, tmp_path / "view" / "m.png")  # a bind mount of in/ as view/ is the same question
    before = digest(src)
    code, _, err = cli("demosaic", "in/m.png", "-o", "view/m.png", "--overwrite", "-m", "bilinear", cwd=tmp_path)
    assert code == 2 and len(errors(err)) == 1, err
    assert "in/m.png" in err and "the same file as view/m.png" in err, err
    assert digest(src) == before
    # folders -> folders, by a hard-linked name
    code, _, err = cli("demosaic", "in/", "-o", "view/", "--overwrite", "-m", "bilinear", cwd=tmp_path)
    assert code == 2 and "in/m.png" in err, err
    assert digest(src) == before and sorted(os.listdir(tmp_path / "view")) == ["m.png"]


def test_a_file_named_as_an_input_is_never_another_inputs_output(tmp_path):
    rgb(tmp_path / "a.png")
    mine = rgb(tmp_path / "a-2x.png", seed=1)  # the user's photo, not a gsprestore output
    before = digest(mine)
    for extra in ([], ["--overwrite"]):
        code, _, err = cli("upscale2x", "a.png", "a-2x.png", "-m", "bicubic", *extra, cwd=tmp_path)
        assert code == 2 and len(errors(err)) == 1, err
        assert "a-2x.png is named as an input and would be overwritten as the output of a.png" in err, err
        assert digest(mine) == before
    assert sorted(os.listdir(tmp_path)) == ["a-2x.png", "a.png"]


def test_case_insensitive_names_are_one_file(tmp_path, monkeypatch):
    """On a case-insensitive file system (macOS, Windows) ``IMG.png`` and ``img.png`` are one
    file: two inputs that would write them are refused (asked of the output folder)."""
    from gsprestore.core import fileid

    rgb(tmp_path / "in" / "A" / "x.png")
    rgb(tmp_path / "in" / "a" / "X.png", seed=1)
    monkeypatch.setattr(fileid, "case_insensitive", lambda folder: True)
    code, _, err = cli("upscale2x", "in/A/x.png", "in/a/X.png", "-o", "out/", "-m", "bicubic", cwd=tmp_path)
    assert code == 2 and "would both be written to" in err, err
    assert not (tmp_path / "out").exists()


def test_case_insensitive_detection(tmp_path):
    from gsprestore.core.fileid import case_insensitive, path_key

    (tmp_path / "Folder").mkdir()
    assert case_insensitive(tmp_path / "Folder") is os.path.exists(tmp_path / "fOLDER")
    assert path_key(tmp_path / "Folder" / "x.png") == path_key(tmp_path / "Folder" / ".." / "Folder" / "x.png")


def test_compare_output_that_is_its_input_is_refused(tmp_path):
    src = rgb(tmp_path / "in" / "a.png", 32, 32)
    os.symlink("in", tmp_path / "view")
    before = digest(src)
    code, _, err = cli("compare", "in/a.png", "-o", "view/a.png", "--overwrite", "-m", "bilinear", cwd=tmp_path)
    assert code == 2 and len(errors(err)) == 1 and "is the input" in err, err
    assert digest(src) == before


# --------------------------------------------------------------------------- 2. folders this run did not create


def _photos(folder: Path, n: int = 6) -> Path:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, size=(96, 128, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    return folder


PACK_ARGS = ["--budget-mib", "0.1", "--crop", "64", "--val-fraction", "0.2", "--val-share", "0.2"]


def test_train_pack_never_deletes_a_staging_folder_it_did_not_create(tmp_path):
    _photos(tmp_path / "photos")
    notes = tmp_path / "pack.partial" / "notes.txt"  # the user's, named like the old staging folder
    notes.parent.mkdir()
    notes.write_text("mine")
    code, out, err = cli("train-pack", "photos", "-o", "pack", *PACK_ARGS, cwd=tmp_path)
    assert code == 0, err
    assert notes.read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["pack", "pack.partial", "photos"]  # no staging left behind


def test_train_pack_overwrite_replaces_only_a_pack(tmp_path):
    _photos(tmp_path / "photos")
    assert cli("train-pack", "photos", "-o", "pack", *PACK_ARGS, cwd=tmp_path)[0] == 0
    notes = tmp_path / "pack" / "notes.txt"
    notes.write_text("mine")
    code, _, err = cli("train-pack", "photos", "-o", "pack", *PACK_ARGS, "--overwrite", cwd=tmp_path)
    assert code == 2 and "--overwrite replaces only a training pack (notes.txt is not part of it)" in err, err
    assert notes.read_text() == "mine"
    notes.unlink()
    code, _, err = cli("train-pack", "photos", "-o", "pack", *PACK_ARGS, "--overwrite", "--seed", "1", cwd=tmp_path)
    assert code == 0, err
    assert json.loads((tmp_path / "pack" / "pack.json").read_text())["recipe"]["seed"] == 1
    assert sorted(os.listdir(tmp_path)) == ["pack", "photos"]


def test_a_failed_train_pack_removes_only_its_own_staging(tmp_path, monkeypatch):
    from gsprestore.training import trainpack

    _photos(tmp_path / "photos")

    def broken(rgb, codec):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trainpack, "encode", broken)
    with pytest.raises(OSError):
        trainpack.make_pack([tmp_path / "photos"], tmp_path / "pack", budget_mib=0.1, crop=64)
    assert sorted(os.listdir(tmp_path)) == ["photos"]


# --------------------------------------------------------------------------- 3. claims die with their process


def test_a_claim_whose_pid_was_reused_does_not_block(tmp_path):
    """A killed run's claim names a pid that an unrelated live process has now: nobody holds its
    lock, so the rerun writes the output (with and without --skip-existing)."""
    for k in range(2):
        gray(tmp_path / "in" / f"m{k}.png", seed=k)
    (tmp_path / "out").mkdir()
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "out" / ".m0.png.claim").write_text(str(unrelated.pid))
        (tmp_path / "out" / ".m1.png.claim").write_text(str(unrelated.pid))
        code, out, err = cli("demosaic", "in/m0.png", "-o", "out/m0.png", "-m", "bilinear", cwd=tmp_path)
        assert code == 0, err
        code, out, err = cli("demosaic", "in", "-o", "out", "-m", "bilinear", "--skip-existing", "--json",
                             cwd=tmp_path)
        assert code == 0, err
        assert [f["status"] for f in json.loads(out)["files"]] == ["skipped", "written"]
    finally:
        unrelated.kill()
        unrelated.wait()
    assert sorted(os.listdir(tmp_path / "out")) == ["m0.png", "m1.png"]


def test_a_killed_runs_claim_is_free_at_once(tmp_path):
    from gsprestore.core.claims import claim_output, release_output

    out = tmp_path / "o.png"
    code = ("import sys, time; from pathlib import Path; from gsprestore.core.claims import claim_output\n"
            "assert claim_output(Path(sys.argv[1])) is None; print('held', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "held"
        assert claim_output(out) == proc.pid  # alive: taken, and named
    finally:
        proc.kill()  # kill -9: no clean-up ran
        proc.wait()
    assert (tmp_path / ".o.png.claim").exists()
    assert claim_output(out) is None  # its process is gone: free at once, whatever the pid
    release_output(out)
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- 4. one run per folder


def test_a_second_train_pack_into_one_folder_is_refused(tmp_path):
    from cli_runner import lock_holder

    _photos(tmp_path / "photos")
    holder = lock_holder(tmp_path / ".pack.lock")  # a live train-pack run into pack/
    try:
        code, _, err = cli("train-pack", "photos", "-o", "pack", *PACK_ARGS, cwd=tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert code == 1 and len(errors(err)) == 1, err
    assert f"pack: another gsprestore train-pack run is writing this folder (pid {holder.pid})" in err
    assert not (tmp_path / "pack").exists()
    assert cli("train-pack", "photos", "-o", "pack", *PACK_ARGS, cwd=tmp_path)[0] == 0  # free once it is gone


def test_a_second_train_into_one_out_is_refused(tmp_path):
    from cli_runner import lock_holder

    _photos(tmp_path / "photos")
    holder = lock_holder(tmp_path / ".run.lock")  # a live training run into run/
    try:
        proc = run_cli("train", "--task", "demosaic", "--prior", "gtv", "--data", "photos", "--out", "run",
                       "--max-steps", "1", "--device", "cpu", cwd=tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stderr
    assert errors(proc.stderr) == [
        f"error: run: another gsprestore training run is writing this folder (pid {holder.pid}); wait for it to "
        "end or choose another folder"], proc.stderr
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- 5. orientation and the 2x grid


@pytest.mark.parametrize("orientation", range(1, 9))
def test_upscale2x_keeps_the_known_pixels_on_the_even_grid_of_the_oriented_output(tmp_path, orientation):
    from PIL import Image

    from gsprestore.imageio.images import apply_orientation

    rng = np.random.default_rng(orientation)
    stored = rng.integers(0, 256, size=(12, 18, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(stored).save(tmp_path / "a.jpg", quality=95, exif=exif.tobytes())
    decoded = read_image(tmp_path / "a.jpg")  # stored order, as decoded
    assert decoded.meta["orientation"] == orientation
    upright = apply_orientation(decoded.array, orientation)
    code, _, err = cli("upscale2x", "a.jpg", "-o", "b.png", "-m", "bicubic", cwd=tmp_path)
    assert code == 0, err
    out = read_image(tmp_path / "b.png").array
    assert out.shape[:2] == (2 * upright.shape[0], 2 * upright.shape[1])
    np.testing.assert_allclose(out[0::2, 0::2], upright, atol=0.5 / 255)


# --------------------------------------------------------------------------- 6. TIFF ImageDescription


def test_tiff_output_drops_an_image_description_of_the_inputs_shape(tmp_path):
    from PIL import Image

    data = np.random.default_rng(0).integers(0, 256, size=(64, 80, 3), dtype=np.uint8)
    Image.fromarray(data).save(tmp_path / "a.tif", tiffinfo={270: '{"shape": [64, 80, 3]}', 315: "Me"})
    Image.fromarray(data).save(tmp_path / "c.tif", tiffinfo={270: "Sunset over the bay"})
    for name in ("a", "c"):
        code, _, err = cli("upscale2x", f"{name}.tif", "-o", f"{name}2.tif", "-m", "bicubic", cwd=tmp_path)
        assert code == 0, err
    with Image.open(tmp_path / "a2.tif") as im:
        assert im.size == (160, 128)
        assert 270 not in im.tag_v2, im.tag_v2.get(270)  # it described the 64x80 input
        assert im.tag_v2.get(315) == "Me"  # the rest is kept
    with Image.open(tmp_path / "c2.tif") as im:
        assert im.tag_v2.get(270) == "Sunset over the bay"  # a caption is kept


def test_describes_layout():
    from gsprestore.imageio.metadata import describes_layout

    assert describes_layout('{"shape": [64, 80, 3]}') and describes_layout(b'{"shape": [1, 2]}')
    assert describes_layout("ImageJ=1.11a\nimages=3\nchannels=3\n")
    assert not describes_layout("Sunset {over} the bay") and not describes_layout('{"title": "x"}')


# --------------------------------------------------------------------------- 7. train --init that copies nothing


TINY = ["--blocks", "1", "--heads", "1", "--width", "8", "--model-opt", "features=8", "--admm-iters", "1",
        "--cg-iters", "2"]


def _tiny_weights(path: Path, grow: set[str] | None) -> int:
    """Weights named like the tiny uGTV demosaicker's, every tensor (``grow`` None) or those in
    ``grow`` one larger in every dimension. Returns the number of tensors."""
    import torch

    from gsprestore import training

    model = training.model_factory()("ugtv", "demosaic", blocks=1, heads=1, width=8, features=8, admm_iters=1,
                                     cg_iters=2)
    state = {k: (torch.zeros(tuple(n + 1 for n in v.shape)) if grow is None or k in grow else v)
             for k, v in model.state_dict().items()}
    torch.save({"state_dict": state}, path)
    return len(state)


def test_train_init_that_copies_nothing_fails_in_one_line(tmp_path):
    _photos(tmp_path / "photos")
    _tiny_weights(tmp_path / "W.pt", None)
    code, out, err = cli("train", "--task", "demosaic", "--prior", "gtv", "--data", "photos", "--out", "run",
                         "--init", "W.pt", *TINY, "--max-steps", "1", "--device", "cpu", "--no-progress",
                         cwd=tmp_path)
    assert code == 2, err
    assert len(errors(err)) == 1 and "W.pt: --init: no tensor of these weights fits this network" in err, err
    assert not (tmp_path / "run").exists()


def test_train_init_that_copies_part_says_how_much(tmp_path):
    import torch

    from gsprestore import training

    _photos(tmp_path / "photos")
    model = training.model_factory()("ugtv", "demosaic", blocks=1, heads=1, width=8, features=8, admm_iters=1,
                                     cg_iters=2)
    name = next(k for k, v in model.state_dict().items() if v.ndim == 4)  # a convolution's weights
    n = _tiny_weights(tmp_path / "W.pt", {name})
    code, out, err = cli("train", "--task", "demosaic", "--prior", "gtv", "--data", "photos", "--out", "run",
                         "--init", "W.pt", *TINY, "--patch-size", "16", "--patches", "8", "--val-patches", "4",
                         "--batch-size", "4", "--max-steps", "1", "--device", "cpu", "--no-progress", cwd=tmp_path)
    assert code == 0, err
    assert f"--init W.pt: copied {n - 1} of {n} tensors (" in err and f"start fresh (e.g. {name})" in err, err
    assert torch.load(tmp_path / "run" / "model.pt", weights_only=True)


# --------------------------------------------------------------------------- 8. compare / benchmark memory


def _scores_whole(out, gt, space):
    """The scores as computed before issue 41: whole-image float64 temporaries."""
    import torch.nn.functional as F

    from gsprestore.metrics import gaussian_window, quantize, to_space

    def mse(a, b):
        d = a.double() - b.double()
        return (d * d).mean(dim=(1, 2, 3))

    def ssim(x, y):
        a, b = x.double(), y.double()
        g = gaussian_window(11, 1.5)
        c = a.shape[1]

        def blur(t):
            t = F.conv2d(t, g.view(1, 1, 11, 1).expand(c, 1, 11, 1), groups=c)
            return F.conv2d(t, g.view(1, 1, 1, 11).expand(c, 1, 1, 11), groups=c)

        mu_a, mu_b = blur(a), blur(b)
        va, vb, cov = blur(a * a) - mu_a ** 2, blur(b * b) - mu_b ** 2, blur(a * b) - mu_a * mu_b
        c1, c2 = 0.01 ** 2, 0.03 ** 2
        return (((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1) * (va + vb + c2))).mean(
            dim=(1, 2, 3))

    ref = to_space(gt, space)
    return {"mse": mse(to_space(out, space), ref), "psnr_8bit_mse": mse(to_space(quantize(out), space), ref),
            "ssim": ssim(to_space(out.clamp(0, 1), space), ref)}


@pytest.mark.parametrize("space", ["rgb", "y"])
def test_scores_over_row_strips_equal_the_whole_image_formulas(monkeypatch, space):
    import torch

    from gsprestore import metrics

    g = torch.Generator().manual_seed(0)
    gt = torch.rand(1, 3, 70, 90, generator=g)
    out = (gt + 0.1 * torch.randn(1, 3, 70, 90, generator=g)).float()  # some values outside [0, 1]
    monkeypatch.setattr(metrics, "STRIP_PIXELS", 500)  # many strips of a few rows
    got = metrics.image_scores(out, gt, space)
    want = _scores_whole(out, gt, space)
    torch.testing.assert_close(got["mse"], want["mse"], rtol=1e-12, atol=0)
    torch.testing.assert_close(got["psnr_8bit"], metrics.psnr_from_mse(want["psnr_8bit_mse"]), rtol=1e-12, atol=0)
    torch.testing.assert_close(got["ssim"], want["ssim"], rtol=1e-12, atol=0)


def test_compare_window_over_row_blocks_is_the_same_window(monkeypatch):
    from gsprestore.viz import drawing as visualize

    rng = np.random.default_rng(0)
    err = rng.random((90, 70)).astype(np.float32)
    err[40:60, 10:30] += 1.0
    whole = visualize.hardest_window(err, 16)
    monkeypatch.setattr(visualize, "ROW_BLOCK", 7)
    assert visualize.hardest_window(err, 16) == whole
    a = rng.random((30, 20, 3)) * 1.2 - 0.1
    assert np.array_equal(visualize.to_uint8(a), np.rint(np.clip(a, 0, 1) * 255).astype(np.uint8))


def test_scoring_a_large_image_needs_strips_not_whole_image_copies(tmp_path):
    """Scores of a 2-MP image: the float64 temporaries of a whole-image SSIM took ~0.5 GB more
    than the images themselves; over row strips, tens of MB."""
    code = ("import resource, torch\n"
            "from gsprestore.metrics import image_scores\n"
            "gt = torch.rand(1, 3, 1000, 2000); out = (gt + 0.01).clamp(0, 1)\n"
            "image_scores(out[..., :64, :64], gt[..., :64, :64], 'rgb')\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "image_scores(out, gt, 'rgb'); image_scores(out, gt, 'y')\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) < 120, proc.stdout  # MiB above the images


# --------------------------------------------------------------------------- 9. format size limits


@pytest.mark.parametrize("width,ext,limit", [(8200, "webp", "16,383"), (32760, "jpg", "65,500")])
def test_an_output_larger_than_its_format_holds_is_refused_up_front(tmp_path, width, ext, limit):
    rgb(tmp_path / "wide.png", 4, width)
    code, _, err = cli("upscale2x", "wide.png", "-o", f"out.{ext}", "-m", "bicubic", cwd=tmp_path)
    assert code == 1 and len(errors(err)) == 1, err
    assert f"out.{ext}: the output would be {2 * width}x8 pixels" in err and f"at most {limit} pixels" in err, err
    assert "unexpected" not in err
    assert sorted(os.listdir(tmp_path)) == ["wide.png"]


# --------------------------------------------------------------------------- 10. numbers checked at the edge


@pytest.mark.parametrize("args, needle", [
    (["--min-lr-ratio", "-1"], "--min-lr-ratio must be a number in [0, 1], got -1.0"),
    (["--min-lr-ratio", "nan"], "--min-lr-ratio must be a number in [0, 1], got nan"),
    (["--step-gamma", "nan"], "--step-gamma must be a number in (0, 1], got nan"),
    (["--step-gamma", "0"], "--step-gamma must be a number in (0, 1], got 0.0"),
    (["--weight-decay", "-1"], "--weight-decay must be a number >= 0, got -1.0"),
    (["--weight-decay", "nan"], "--weight-decay must be a number >= 0, got nan"),
    (["--grad-clip", "-1"], "--grad-clip must be a number >= 0 (0: off), got -1.0"),
    (["--seed", "-1"], "--seed must be >= 0, got -1"),
    (["--seed", "99999999999999999999"], "--seed must be below 2**63"),
    (["--warmup-steps", "-1"], "--warmup-steps must be >= 0, got -1"),
    (["--step-epochs", "0"], "--step-epochs must be >= 1, got 0"),
    (["--val-patches", "-1"], "--val-patches must be >= 0, got -1"),
    (["--patches", "99999999999999999999"], "--patches must be at most 2,147,483,647"),
    (["--val-patches", "99999999999999999999"], "--val-patches must be at most 2,147,483,647"),
    (["--workers", "-1"], "--workers must be 0 to 256, got -1"),
    (["--threads", "99999999999999999999"], "--threads must be at most 4096"),
    (["--max-steps", "99999999999999999999"], "--max-steps must be at most 2,147,483,647"),
    (["--time-budget", "inf"], "--time-budget must be a finite number of seconds"),
])
def test_every_numeric_train_option_is_checked_at_the_edge(tmp_path, args, needle):
    rgb(tmp_path / "photos" / "p.png", 96, 96)
    code, _, err = cli("train", "--task", "demosaic", "--prior", "gtv", "--data", tmp_path / "photos",
                       "--out", tmp_path / "run", *args)
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, needle", [
    (["--texture-power", "-1"], "--texture-power must be a number >= 0, got -1.0"),
    (["--texture-power", "nan"], "--texture-power must be a number >= 0, got nan"),
    (["--seed", "-1"], "--seed must be 0 to 2**63 - 1, got -1"),
    (["--budget-mib", "inf"], "--budget-mib must be positive, got inf"),
])
def test_every_numeric_train_pack_option_is_checked_at_the_edge(tmp_path, args, needle):
    rgb(tmp_path / "photos" / "p.png", 96, 96)
    code, _, err = cli("train-pack", tmp_path / "photos", "-o", tmp_path / "pack", *args)
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == ["photos"]


def test_compare_and_benchmark_numbers_are_usage_errors(tmp_path):
    rgb(tmp_path / "photos" / "a.png", 32, 32)
    code, _, err = cli("compare", "photos/a.png", "-m", "bilinear", "--tile", "-1", cwd=tmp_path)
    assert code == 2 and "--tile must be 0 (automatic) or at least" in err, err
    code, _, err = cli("benchmark", "--task", "demosaic", "--data-dir", "photos", "--methods", "bilinear",
                       "--seed", "-1", cwd=tmp_path)
    assert code == 2 and "--seed must be 0 to 2**63 - 1, got -1" in err, err
    before = digest(tmp_path / "photos" / "a.png")
    code, _, err = cli("benchmark", "--task", "demosaic", "--data-dir", "photos", "--methods", "bilinear",
                       "--csv", "photos/a.png", "--overwrite", cwd=tmp_path)
    assert code == 2 and "photos/a.png is an image of the data set" in err, err
    assert digest(tmp_path / "photos" / "a.png") == before


# --------------------------------------------------------------------------- 11. errors that read as bugs


def _closed_stdout(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command line run with its standard output closed (``gsprestore ... >&-``)."""
    return subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *GSPRESTORE, *map(str, args)], cwd=cwd,
                          env=checkout_env(env),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)


def test_closed_standard_output(tmp_path):
    proc = _closed_stdout("models", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        "error: standard output is closed: cannot write the output"], proc.stderr
    rgb(tmp_path / "a.png")
    proc = _closed_stdout("upscale2x", "a.png", "-o", "b.png", "-m", "bicubic", cwd=tmp_path)
    assert proc.returncode == 0 and "unexpected" not in proc.stderr, proc.stderr
    assert read_image(tmp_path / "b.png").array.shape == (32, 40, 3)


def test_a_broken_torch_install_says_so_and_how_to_repair(tmp_path):
    fake = tmp_path / "site-packages" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    rgb(tmp_path / "a.png")
    proc = run_cli("upscale2x", "a.png", "-o", "b.png", "-m", "bicubic", cwd=tmp_path,
                   env={"PYTHONPATH": f"{tmp_path / 'site-packages'}{os.pathsep}{ROOT}"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: the installation is broken: importing torch failed (ImportError: libtorch_cpu.so: cannot open "
        "shared object file); reinstall it with: pip install --force-reinstall torch"), proc.stderr
    assert "unexpected" not in proc.stderr and not (tmp_path / "b.png").exists()


def test_json_nested_too_deeply_is_one_line(tmp_path, monkeypatch):
    deep = "[" * 10000 + "]" * 10000
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "manifest.json").write_text('{"models": ' + deep + "}")
    monkeypatch.setenv("GSPRESTORE_WEIGHTS", str(weights))
    code, out, err = cli("models")  # it says so, and lists the methods without recorded scores
    assert "unreadable weights manifest (nested too deeply to read)" in out + err, (code, out, err)
    assert "Recursion" not in out + err and "unexpected" not in err
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "pack.json").write_text(deep)
    code, _, err = cli("train", "--task", "demosaic", "--prior", "gtv", "--data", pack, "--out", tmp_path / "run")
    assert code == 2 and "unreadable training pack" in err and "Recursion" not in err, err
    run = tmp_path / "old"
    run.mkdir()
    (run / "config.json").write_text(deep)
    code, _, err = cli("train", "--resume", run)
    assert code == 1 and "damaged config.json (nested too deeply to read)" in err, err


# --------------------------------------------------------------------------- 12. last round's two leftovers


def test_train_on_an_empty_folder_prints_only_its_error(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_cli("train", "--task", "demosaic", "--prior", "gtv", "--data", "empty", "--out", "run", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: empty: no training photos (.png/.jpg/.jpeg/.tif/.tiff/.webp) in this folder"], proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["empty"]


def test_train_pack_on_a_folder_of_non_images_names_the_file(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "broken.png").write_bytes(b"garbage")
    (tmp_path / "junk" / "notes.txt").write_text("hello")
    code, _, err = cli("train-pack", "junk", "-o", "pk", cwd=tmp_path)
    assert code == 2 and len(errors(err)) == 1, err
    assert "1 photo(s) could not be read, e.g. junk/broken.png: " in err, err
    assert sorted(os.listdir(tmp_path)) == ["junk"]


def test_explain_overwrite_never_writes_into_the_inputs_folder(tmp_path):
    src = rgb(tmp_path / "shots" / "overview.png", 32, 32)  # named like one of explain's own files
    os.symlink("shots", tmp_path / "view")
    before = digest(src)
    code, _, err = cli("explain", "view/overview.png", "-o", "shots", "--overwrite", "-m", "igtv", cwd=tmp_path)
    assert code == 2 and "is the folder of the input" in err, err
    assert digest(src) == before and os.listdir(tmp_path / "shots") == ["overview.png"]


def test_train_patches_that_cannot_fit_in_memory_are_refused_up_front(tmp_path):
    rgb(tmp_path / "photos" / "p.png", 96, 96)
    code, _, err = cli("train", "--task", "demosaic", "--prior", "gtv", "--data", tmp_path / "photos",
                       "--out", tmp_path / "run", "--patches", "2000000000", "--patch-size", "64")
    assert code == 2 and "validation patches of 64 px need" in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_benchmark_outputs_and_demo_never_replace_their_inputs(tmp_path):
    from gsprestore.imageio.sample_chart import chart_path

    ds = tmp_path / "save" / "demosaic" / "bilinear"  # the data set lies where --save-outputs writes
    src = rgb(ds / "a.png", 32, 32)
    before = digest(src)
    code, _, err = cli("benchmark", "--task", "demosaic", "--data-dir", ds, "--methods", "bilinear",
                       "--save-outputs", tmp_path / "save", "--overwrite")
    assert code == 1 and "would replace the data set's image" in err, err
    assert digest(src) == before
    chart = chart_path()
    os.symlink(chart.parent, tmp_path / "data")
    before = digest(chart)
    code, _, err = cli("demo", "-o", tmp_path / "data" / chart.name, "--overwrite")
    assert code == 2 and "is the bundled test chart itself" in err, err
    assert digest(chart) == before


def test_a_broken_module_of_our_own_is_not_blamed_on_the_package_that_imported_it():
    """An import of gsprestore's own module that fails inside a dependency's frames (typer calling a
    command) names gsprestore, not the dependency."""
    from gsprestore.core.process import broken_install

    code = compile("raise ImportError(\"cannot import name 'x' from 'gsprestore.y'\", name='gsprestore.y')",
                   "/venv/lib/python3.11/site-packages/typer/main.py", "exec")
    try:
        exec(code, {})
    except ImportError as exc:
        line = broken_install(exc)
    assert line is not None and "typer" not in line and "reinstall gsprestore" in line, line
