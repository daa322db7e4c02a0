"""`gsprestore mosaic | demosaic | upscale2x | demo`: files and folders, depth/alpha/ICC kept,
skip-existing / overwrite / atomic writes, exit codes, and every bad input of issue 5 as a one-line
message naming the file and the reason with nothing lost."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gsprestore.imageio import png as pngcodec
from gsprestore.imageio.images import read_image, write_image
from gsprestore.methods.registry import get_restorer
from gsprestore.physics.sampling import mosaic

from cli_runner import cli



def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def rgb(path: Path, h: int = 24, w: int = 32, depth: int = 8, seed: int = 0, alpha: bool = False, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    a = rng.random((h, w, 3)).astype(np.float32)
    write_image(path, a, depth, alpha=rng.random((h, w)).astype(np.float32) if alpha else None, **kw)
    return path


def raw(path: Path, h: int = 24, w: int = 32, depth: int = 8, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, np.random.default_rng(seed).random((h, w)), depth)
    return path


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --------------------------------------------------------------------------- start-up


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["demosaic", "--help"], ["train", "--help"]])
def test_help_and_version_do_not_import_torch(args):
    """Issue 52: help answers at once. No torch or numpy, and neither Rich's help layout nor the
    pydantic Typer coerces an unset flag with (most of a command's --help time when they were)."""
    code = ("import sys; from gsprestore.cli.app import main; sys.argv = ['gsprestore'] + %r\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "heavy = [m for m in ('torch', 'numpy', 'pydantic', 'rich.table', 'rich.markdown') if m in sys.modules]\n"
            "assert not heavy, heavy" % (args,))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "gsprestore" in proc.stdout


def test_a_command_named_first_is_the_only_one_built(monkeypatch):
    """``gsprestore demosaic ...`` builds only demosaic's parser (Typer builds every registered
    command's before it runs one); no command, an option first, a misspelt one or shell completion
    get them all, in --help order."""
    from gsprestore.cli import app as cli

    monkeypatch.setattr(cli.app, "registered_commands", [])
    cli._register(["gsprestore", "demosaic", "--help"])
    assert [c.name for c in cli.app.registered_commands] == ["demosaic"]
    every = ["mosaic", "demosaic", "upscale2x", "models", "benchmark", "train", "train-pack", "compare", "explain",
             "demo"]
    for argv in (["gsprestore"], ["gsprestore", "--version"], ["gsprestore", "demosiac"], ["gsprestore", "-q", "demo"]):
        cli._register(argv)
        names = [c.name or c.callback.__name__.replace("_", "-") for c in cli.app.registered_commands]
        assert names == every, argv
    cli._register(["gsprestore", "demosaic", "--help"])  # what one process added stays (tests share the app)
    assert len(cli.app.registered_commands) == len(every)
    monkeypatch.setattr(cli.app, "registered_commands", [])
    monkeypatch.setenv("_GSPRESTORE_COMPLETE", "complete_bash")
    cli._register(["gsprestore", "demosaic"])
    assert len(cli.app.registered_commands) == len(every)


def test_console_script_error_is_one_line(tmp_path):
    (tmp_path / "notes.png").write_text("hello")
    exe = Path(sys.executable).with_name("gsprestore")
    proc = subprocess.run([str(exe), "demosaic", "notes.png", "-m", "bilinear", "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["error: notes.png: not a PNG image (the file content is not an image)"]


# --------------------------------------------------------------------------- mosaic / demosaic / upscale2x


@pytest.mark.parametrize("depth", [8, 16])
def test_mosaic_then_demosaic_keeps_depth(tmp_path, depth):
    src = rgb(tmp_path / "photo.png", depth=depth)
    code, _, err = cli("mosaic", src, "-o", tmp_path / "raw.png", "--pattern", "GRBG")
    assert code == 0, err
    m = read_image(tmp_path / "raw.png")
    assert m.channels == 1 and m.bit_depth == depth
    want = mosaic(torch.from_numpy(read_image(src).array).permute(2, 0, 1), "GRBG")[0].numpy()
    np.testing.assert_allclose(m.array[:, :, 0], want, atol=0.5 / (2**depth - 1))
    code, _, err = cli("demosaic", tmp_path / "raw.png", "-o", tmp_path / "out.tif", "-m", "bilinear",
                       "-p", "GRBG", "--tile", "16", "--overlap", "4")
    assert code == 0, err
    out = read_image(tmp_path / "out.tif")
    assert out.channels == 3 and out.bit_depth == depth
    ref = get_restorer("bilinear", "demosaic")(torch.from_numpy(m.array).permute(2, 0, 1)[None], "GRBG")
    np.testing.assert_allclose(out.array, ref[0].permute(1, 2, 0).clamp(0, 1).numpy(), atol=0.51 / (2**depth - 1))


def test_demosaic_odd_size_is_mirrored_and_cropped_back(tmp_path):
    raw(tmp_path / "odd.png", h=25, w=31)
    code, _, err = cli("demosaic", tmp_path / "odd.png", "-m", "malvar")
    assert code == 0, err
    assert "odd size 31x25" in err
    assert read_image(tmp_path / "odd-demosaic.png").array.shape == (25, 31, 3)


def test_upscale2x_keeps_alpha_icc_and_depth(tmp_path):
    icc = b"\0\0\1\0" + b"x" * 12 + b"RGB " + b"y" * 100
    src = rgb(tmp_path / "a.png", h=10, w=14, depth=16, alpha=True, icc_profile=icc)
    code, _, err = cli("upscale2x", src, "-o", tmp_path / "big.png", "-m", "bicubic")
    assert code == 0, err
    big, small = read_image(tmp_path / "big.png"), read_image(src)
    assert big.array.shape == (20, 28, 3) and big.bit_depth == 16 and big.icc_profile == icc
    alpha = get_restorer("bicubic", "upscale2x")(torch.from_numpy(small.alpha)[None, None])[0, 0]
    np.testing.assert_allclose(big.alpha, alpha.clamp(0, 1).numpy(), atol=0.6 / 65535)
    np.testing.assert_array_equal(big.array[::2, ::2], small.array)  # known pixels stay where they are


def test_bit_depth_and_ext_overrides(tmp_path):
    raw(tmp_path / "r.png", depth=16)
    code, _, err = cli("demosaic", tmp_path / "r.png", "-o", tmp_path / "out", "-m", "bilinear",
                       "--ext", "tiff", "--bit-depth", "8")
    assert code == 0, err
    img = read_image(tmp_path / "out" / "r.tif")
    assert img.bit_depth == 8 and img.channels == 3


# --------------------------------------------------------------------------- folders


def _tree(root: Path) -> None:
    raw(root / "a.png")
    raw(root / "b.tif", seed=1)
    raw(root / "sub" / "deep" / "c.png", seed=2)
    raw(root / ".hidden.png", seed=3)
    raw(root / ".cache" / "d.png", seed=4)
    (root / "notes.txt").write_text("not an image")


def test_folder_mirroring_recursive(tmp_path):
    _tree(tmp_path / "in")
    code, out, err = cli("demosaic", tmp_path / "in", "-o", tmp_path / "out", "-r", "-m", "bilinear", "--json")
    assert code == 0, err
    assert listing(tmp_path / "out") == ["a.png", "b.tif", "sub", "sub/deep", "sub/deep/c.png"]
    assert "skipped 2 hidden file(s)" in err and "skipped 1 non-image file(s): notes.txt" in err
    summary = json.loads(out)
    assert summary["written"] == 3 and summary["failed"] == 0 and summary["method"] == "bilinear"
    assert {Path(f["output"]).name for f in summary["files"]} == {"a.png", "b.tif", "c.png"}


def test_folder_without_recursive_skips_subfolders(tmp_path):
    _tree(tmp_path / "in")
    code, _, err = cli("demosaic", tmp_path / "in", "-o", tmp_path / "out", "-m", "bilinear")
    assert code == 0, err
    assert listing(tmp_path / "out") == ["a.png", "b.tif"]
    assert "skipped 1 sub-folder(s) (use --recursive)" in err


def test_glob_and_suffix(tmp_path):
    _tree(tmp_path / "in")
    code, _, err = cli("demosaic", str(tmp_path / "in" / "*.png"), "-o", tmp_path / "out", "--suffix", "_rgb",
                       "-m", "bilinear", "-q")
    assert code == 0 and err == ""
    assert listing(tmp_path / "out") == ["a_rgb.png"]


def test_quiet_and_json(tmp_path):
    raw(tmp_path / "r.png")
    code, out, err = cli("demosaic", tmp_path / "r.png", "-m", "bilinear", "-q", "--json")
    assert code == 0 and err == ""
    assert json.loads(out)["files"][0]["status"] == "written"


# --------------------------------------------------------------------------- overwrite / skip / atomic


def test_refuses_to_overwrite_then_overwrite_and_skip(tmp_path):
    raw(tmp_path / "r.png")
    assert cli("demosaic", tmp_path / "r.png", "-m", "bilinear")[0] == 0
    out = tmp_path / "r-demosaic.png"
    before = out.read_bytes()
    code, _, err = cli("demosaic", tmp_path / "r.png", "-m", "malvar")
    assert code == 1 and errors(err) == [f"error: {out}: output exists (pass --overwrite to replace it, "
                                         "or --skip-existing)"]
    assert out.read_bytes() == before
    code, out_json, _ = cli("demosaic", tmp_path / "r.png", "-m", "malvar", "--skip-existing", "--json")
    assert code == 0 and json.loads(out_json)["skipped"] == 1 and out.read_bytes() == before
    assert cli("demosaic", tmp_path / "r.png", "-m", "malvar", "--overwrite")[0] == 0
    assert out.read_bytes() != before
    assert cli("demosaic", tmp_path / "r.png", "--overwrite", "--skip-existing")[0] == 2


def test_interrupted_batch_rerun_with_skip_existing(tmp_path, monkeypatch):
    for k in range(3):
        raw(tmp_path / "in" / f"{k}.png", seed=k)
    real_encode = pngcodec.encode
    calls = []

    def dying_encode(fh, array, **kw):
        calls.append(1)
        if len(calls) == 2:  # the second output dies half-way through being written
            fh.write(b"\x89PNG half a file")
            raise KeyboardInterrupt
        return real_encode(fh, array, **kw)

    monkeypatch.setattr(pngcodec, "encode", dying_encode)
    code, _, _ = cli("demosaic", tmp_path / "in", "-o", tmp_path / "out", "-m", "bilinear")  # Ctrl-C: "Aborted!"
    assert code != 0
    assert listing(tmp_path / "out") == ["0.png"]  # no half-written file under any name
    monkeypatch.setattr(pngcodec, "encode", real_encode)
    code, out, err = cli("demosaic", tmp_path / "in", "-o", tmp_path / "out", "-m", "bilinear", "--skip-existing",
                         "--json")
    assert code == 0, err
    s = json.loads(out)
    assert (s["skipped"], s["written"]) == (1, 2)
    for k in range(3):
        assert read_image(tmp_path / "out" / f"{k}.png").channels == 3


# --------------------------------------------------------------------------- bad input (issue 5 list)


def _bad_files(folder: Path) -> dict[str, str]:
    """name -> expected reason fragment."""
    folder.mkdir(parents=True, exist_ok=True)
    good = raw(folder / "good_source.png").read_bytes()
    (folder / "truncated.png").write_bytes(good[: len(good) // 2])
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF  # inside the compressed data: the chunk's CRC no longer matches
    (folder / "corrupt.png").write_bytes(bytes(bad))
    (folder / "text.png").write_text("just text")
    (folder / "empty.png").write_bytes(b"")
    tiny = folder / "tiny.png"
    with open(tiny, "wb") as fh:
        pngcodec.encode(fh, np.zeros((1, 1), np.uint8))
    tifffile = pytest.importorskip("tifffile")
    nan = np.full((8, 8), 0.5, np.float16)
    nan[2, 2] = np.nan
    tifffile.imwrite(folder / "nan16.tif", nan)
    (folder / "truncated.tif").write_bytes(b"II*\0" + b"\0" * 3)
    rgb(folder / "colour.png")
    (folder / "good_source.png").unlink()
    return {"truncated.png": "truncated", "corrupt.png": "corrupt PNG", "text.png": "not a PNG image",
            "empty.png": "empty file", "tiny.png": "too small", "nan16.tif": "NaN",
            "truncated.tif": "TIFF", "colour.png": "use `gsprestore mosaic` first or give a single-channel mosaic"}


def test_each_bad_input_is_one_line_naming_the_file(tmp_path):
    expected = _bad_files(tmp_path / "bad")
    for name, fragment in expected.items():
        path = tmp_path / "bad" / name
        code, _, err = cli("demosaic", path, "-o", tmp_path / "out.png", "-m", "bilinear")
        lines = errors(err)
        assert code == 1, (name, err)
        assert len(lines) == 1 and str(path) in lines[0] and fragment in lines[0], (name, lines)
        assert not (tmp_path / "out.png").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad"]  # nothing partial anywhere


def test_batch_with_bad_files_writes_every_good_one(tmp_path):
    bad = _bad_files(tmp_path / "in")
    for k in range(3):
        raw(tmp_path / "in" / f"good{k}.png", seed=k)
    code, out, err = cli("demosaic", tmp_path / "in", "-o", tmp_path / "out", "-m", "bilinear",
                         "--continue-on-error", "--json")
    assert code == 3
    s = json.loads(out)
    assert (s["written"], s["failed"]) == (3, len(bad))
    assert listing(tmp_path / "out") == ["good0.png", "good1.png", "good2.png"]
    assert len(errors(err)) == len(bad)


def test_batch_stops_at_first_failure_and_keeps_earlier_outputs(tmp_path):
    raw(tmp_path / "in" / "a.png")
    (tmp_path / "in" / "b.png").write_text("oops")
    raw(tmp_path / "in" / "c.png")
    code, out, err = cli("demosaic", tmp_path / "in", "-o", tmp_path / "out", "-m", "bilinear", "--json")
    assert code == 1
    assert listing(tmp_path / "out") == ["a.png"]
    assert read_image(tmp_path / "out" / "a.png").channels == 3
    assert json.loads(out)["failed"] == 1 and "stopped at the first failure" in err


def test_output_equal_to_input_is_refused(tmp_path):
    r = raw(tmp_path / "r.png")
    before = r.read_bytes()
    code, _, err = cli("demosaic", r, "-o", r, "-m", "bilinear", "--overwrite")
    assert code == 2 and "overwrite the input" in err and str(r) in err
    code, _, err = cli("demosaic", tmp_path, "-o", tmp_path, "-m", "bilinear")
    assert code == 2 and "overwrite the input" in err
    assert r.read_bytes() == before


def test_unwritable_output_folder(tmp_path):
    raw(tmp_path / "r.png")
    (tmp_path / "file").write_text("in the way")
    code, _, err = cli("demosaic", tmp_path / "r.png", "-o", tmp_path / "file" / "out", "-m", "bilinear")
    assert code == 1 and len(errors(err)) == 1 and "cannot create the output folder" in err
    if os.geteuid() != 0:  # root ignores permission bits
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            code, _, err = cli("demosaic", tmp_path / "r.png", "-o", ro / "x.png", "-m", "bilinear")
            assert code == 1 and "not writable" in err and str(ro) in err
        finally:
            ro.chmod(0o700)


def test_missing_input(tmp_path):
    raw(tmp_path / "r.png")
    code, _, err = cli("demosaic", tmp_path / "nope.png", tmp_path / "r.png", "-o", tmp_path / "o", "-m", "bilinear")
    assert code == 1 and "no such file or folder" in err and not (tmp_path / "o").exists()
    code, _, err = cli("demosaic", tmp_path / "nope.png", tmp_path / "r.png", "-o", tmp_path / "o", "-m", "bilinear",
                       "--continue-on-error")
    assert code == 3 and (tmp_path / "o" / "r.png").exists()


@pytest.mark.parametrize("args", [
    ["--pattern", "RGBG"], ["--bit-depth", "12"], ["--ext", "bmp"], ["--precision", "bf16", "--device", "cpu"],
    ["-m", "nosuch"], ["-m", "bicubic"], ["--device", "gpu"], ["--tile", "-1"], ["-m", "menon", "--weights", "w.pt"],
])
def test_usage_errors_exit_2(tmp_path, args):
    raw(tmp_path / "r.png")
    code, _, err = cli("demosaic", tmp_path / "r.png", *args)
    assert code == 2, err
    assert not (tmp_path / "r-demosaic.png").exists()


def test_several_inputs_to_one_file_is_usage(tmp_path):
    raw(tmp_path / "a.png")
    raw(tmp_path / "b.png")
    code, _, err = cli("demosaic", tmp_path / "a.png", tmp_path / "b.png", "-o", tmp_path / "x.png", "-m", "bilinear")
    assert code == 2 and "several inputs" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_missing_cuda_is_an_error_not_a_fallback(tmp_path):
    raw(tmp_path / "r.png")
    code, _, err = cli("demosaic", tmp_path / "r.png", "-m", "bilinear", "--device", "cuda")
    assert code == 1 and "no CUDA device" in err and not (tmp_path / "r-demosaic.png").exists()


@pytest.mark.parametrize("content", [None, b"not a torch file at all"])
def test_missing_or_tampered_weights(tmp_path, content):
    raw(tmp_path / "r.png")
    w = tmp_path / "w.pt"
    if content is not None:
        w.write_bytes(content)
    code, _, err = cli("demosaic", tmp_path / "r.png", "-m", "ugtv", "--weights", w)
    assert code == 1
    assert len(errors(err)) == 1 and str(w) in errors(err)[0], err
    assert not (tmp_path / "r-demosaic.png").exists()


def test_default_method_without_weights_suggests_another(tmp_path, monkeypatch):
    from gsprestore.methods import defaults, registry as restorers
    from gsprestore.core.errors import WeightsError

    monkeypatch.setattr(defaults, "default_method", lambda task, *a, **k: "ugtv")  # as if its scores made it the default

    def no_weights(name, task, **options):
        raise WeightsError(f"no pretrained weights for {name}")

    monkeypatch.setattr(restorers, "get_restorer", no_weights)
    raw(tmp_path / "r.png")
    code, _, err = cli("demosaic", tmp_path / "r.png")
    assert code == 1 and errors(err) == ["error: no pretrained weights for ugtv (or choose another method, "
                                         "e.g. --method menon)"]
    assert not (tmp_path / "r-demosaic.png").exists()


def test_prior_shorthand(tmp_path):
    rgb(tmp_path / "a.png")
    code, _, err = cli("upscale2x", tmp_path / "a.png", "--prior", "glr", "-m", "bicubic")
    assert code == 2 and "--prior glr means --method uglr" in err
    code, _, err = cli("upscale2x", tmp_path / "a.png", "--prior", "xyz")
    assert code == 2


# --------------------------------------------------------------------------- demo


def test_demo_writes_its_png_and_prints_psnr(tmp_path):
    code, out, err = cli("demo", "-m", "malvar", cwd=tmp_path)
    assert code == 0, err
    assert "PSNR" in out and "malvar" in out
    psnr = float(out.split("PSNR ")[1].split(" dB")[0])
    assert 20 < psnr < 60
    ref = float(out.split("menon on the same mosaic: PSNR ")[1].split(" dB")[0])  # the reference line
    assert 20 < ref < 60 and ref != psnr
    img = read_image(tmp_path / "gsprestore-demo.png")
    assert img.array.shape == (256, 256, 3)
    assert cli("demo", "-m", "bilinear", cwd=tmp_path)[0] == 0  # replaces its own output
    (tmp_path / "gsprestore-demo.png").unlink()
    rgb(tmp_path / "gsprestore-demo.png")  # someone else's file
    code, _, err = cli("demo", "-m", "bilinear", cwd=tmp_path)
    assert code == 1 and "not an earlier demo output" in err


def test_demo_falls_back_to_menon_without_weights(tmp_path, monkeypatch):
    from gsprestore.methods import defaults, registry as restorers
    from gsprestore.core.errors import WeightsError

    best = defaults.best_by_quality("demosaic")
    best.method = "ugtv"
    monkeypatch.setattr(defaults, "best_by_quality", lambda task, *a, **k: best)  # as if its scores made it the best

    real = restorers.get_restorer

    def no_weights(name, task, **options):
        if name == "ugtv":
            raise WeightsError("no pretrained weights for ugtv")
        return real(name, task, **options)

    monkeypatch.setattr(restorers, "get_restorer", no_weights)
    code, out, err = cli("demo", cwd=tmp_path)
    assert code == 0, err
    assert "using menon instead" in err and "with menon" in out
    assert "for reference" not in out  # menon is not compared with itself


def test_demo_shows_the_best_method_beside_the_classical_one(tmp_path, monkeypatch):
    """Without -m the demo runs the best method by recorded quality (the manifest's: a learned one
    when its weights beat the classical ones) and prints the classical method's score and time on
    the same mosaic beside it."""
    from gsprestore.methods import defaults

    best = defaults.best_by_quality("demosaic")
    best.method = "malvar"  # what the manifest would rank first (a fast stand-in for a network)
    monkeypatch.setattr(defaults, "best_by_quality", lambda task, *a, **k: best)
    code, out, err = cli("demo", cwd=tmp_path)
    assert code == 0, err
    assert "with malvar on cpu: PSNR" in out and " s -> " in out
    assert "for reference, menon on the same mosaic: PSNR" in out and "dB for malvar)" in out


def test_bundled_chart_is_the_generated_one():
    from gsprestore.imageio.sample_chart import chart_path, make_chart

    np.testing.assert_array_equal(np.rint(read_image(chart_path()).array * 255), np.rint(make_chart() * 255))


def test_a_missing_single_input_is_named(tmp_path):
    """A typo in the only input names that file, not the -o/inputs mismatch."""
    missing = tmp_path / "nope.png"
    out = tmp_path / "out.png"
    code, _, err = cli("mosaic", missing, "-o", out)
    assert code == 1
    assert err.strip().splitlines()[-1] == f"error: {missing}: no such file or folder"
    assert not out.exists()


def test_a_long_file_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path, slowed):
    """Without a terminal (a log, a pipe) a file that takes long still says, by the clock, that it is
    going: '[1/1] demosaic FILE: 0:01 elapsed' every interval (30 s; shortened here)."""
    from gsprestore.runtime import file_restore

    slowed(file_restore, "restore_file")
    raw(tmp_path / "r.png")
    code, _, err = cli("demosaic", tmp_path / "r.png", "-m", "bilinear", "-o", tmp_path / "o.png")
    assert code == 0, err
    beats = [line for line in err.splitlines()
             if line.startswith(f"[1/1] demosaic {tmp_path / 'r.png'} with bilinear: ")]
    assert len(beats) >= 2 and all(" elapsed" in line for line in beats), err
    code, _, err = cli("demosaic", tmp_path / "r.png", "-m", "bilinear", "-o", tmp_path / "q.png", "-q")
    assert code == 0 and err == ""  # --quiet: nothing


@pytest.mark.parametrize("name", ["x.bmp", "x.AVIF", "x.heic", "x.exr"])
def test_an_unsupported_output_extension_is_an_error_not_a_folder(tmp_path, name):
    rgb(tmp_path / "a.png")
    code, _, err = cli("upscale2x", tmp_path / "a.png", "-m", "bicubic", "-o", tmp_path / name)
    suffix = name.split(".")[1].upper()
    assert code == 2 and f"gsprestore does not write {suffix} files; use .png, .tif, .jpg or .webp" in err, err
    assert not (tmp_path / name).exists()
    code, _, err = cli("mosaic", tmp_path / "a.png", "-o", tmp_path / name)
    assert code == 2 and not (tmp_path / name).exists()


def test_no_silent_loss_of_bits_or_mosaic_samples(tmp_path):
    """-o x.jpg --bit-depth 16 is refused (JPEG is 8-bit); --ext same + --bit-depth 16 on a JPEG says
    so; a mosaic is never written lossy: -o x.jpg is refused, a JPEG input gives a PNG mosaic."""
    from PIL import Image

    rgb(tmp_path / "a.png", depth=16)
    code, _, err = cli("upscale2x", tmp_path / "a.png", "-m", "bicubic", "-o", tmp_path / "x.jpg", "--bit-depth", "16")
    assert code == 2 and "JPEG and WebP are 8-bit; use .png or .tif for --bit-depth 16" in err
    Image.fromarray((np.random.default_rng(0).random((24, 32, 3)) * 255).astype(np.uint8)).save(tmp_path / "p.jpg")
    code, _, err = cli("upscale2x", tmp_path / "p.jpg", "-m", "bicubic", "--bit-depth", "16")
    assert code == 0 and "JPG is 8-bit; --bit-depth 16 needs --ext png or tiff" in err, err
    code, _, err = cli("mosaic", tmp_path / "p.jpg", "-o", tmp_path / "m.jpg")
    assert code == 2 and "a Bayer mosaic must be lossless" in err and not (tmp_path / "m.jpg").exists()
    code, _, err = cli("mosaic", tmp_path / "p.jpg", "--ext", "webp")
    assert code == 2 and "a Bayer mosaic must be lossless" in err
    code, _, err = cli("mosaic", tmp_path / "p.jpg")
    assert code == 0 and (tmp_path / "p-mosaic.png").is_file() and not (tmp_path / "p-mosaic.jpg").exists()
    assert "1 JPEG / WebP input(s) give PNG mosaics (a Bayer mosaic must be lossless)" in err


def test_the_whole_job_eta_exists_before_a_long_first_step_ends():
    """Rich's own ETA needs a step within its 30-s speed window (`eta -:--:--` while one image or
    tile takes longer); ours is the whole job's by pixels: from the recorded speed before anything
    is done, then from elapsed / done with the current file's tiles."""
    from rich.console import Console
    from rich.progress import Progress

    from gsprestore.runtime.progress import JobClock, Reporter

    clock = JobClock([1_000_000, 3_000_000], expected=400.0)
    clock.t0 -= 100  # 100 s into the first file, nothing done: the recorded speed's figure
    assert abs(clock.left() - 300) < 1
    clock.part(1, 2)  # half the first file's tiles: 0.5 of 4 MP done in 100 s
    assert abs(clock.fraction() - 0.125) < 1e-9 and abs(clock.left() - 700) < 1
    clock.finish(0)
    clock.start(1)
    assert abs(clock.fraction() - 0.25) < 1e-9
    assert JobClock([None, None]).left() is None  # nothing to go by yet
    late = JobClock([10], expected=5.0)
    late.t0 -= 10
    assert late.left() is None  # past the expected time with nothing done: no made-up figure
    reporter = Reporter(True, 2, "demosaic", method="ugtv")
    reporter.clock = JobClock([1_000_000, 1_000_000], expected=3725.0)
    from gsprestore.runtime.progress import _eta_column

    progress = Progress(_eta_column(reporter), console=Console(file=io.StringIO(), width=80))
    reporter._files_task = progress.add_task("files", total=2)
    console = Console(file=io.StringIO(), width=80)
    console.print(progress)
    assert "eta 1:02:0" in console.file.getvalue()


def test_the_eta_column_of_benchmark_and_train_survives_steps_longer_than_30_s():
    """Benchmark images and training steps: the ETA is the task's average pace since it started
    (Rich's own needs steps within its 30-s window); a resumed run's earlier steps do not count."""
    from rich.console import Console
    from rich.progress import Progress

    from gsprestore.core.heartbeat import eta_column

    progress = Progress(eta_column(), console=Console(file=io.StringIO(), width=80))
    task = progress.add_task("x", total=24, completed=0)
    progress.start_task(task)
    t = progress.tasks[0]
    t.start_time -= 360  # 6 images in 6 minutes, each longer than Rich's 30-s window
    progress.update(task, completed=6)
    assert str(eta_column().render(progress.tasks[0])).startswith("eta 18:0")
    resumed = progress.add_task("y", total=100, completed=50, first=50)
    progress.tasks[1].start_time -= 100
    progress.update(resumed, completed=60)  # 10 steps in 100 s, 40 to go
    assert str(eta_column().render(progress.tasks[1])).startswith("eta 6:4")


def test_one_option_vocabulary_across_commands(tmp_path):
    """-o/--output, -m/--method (--methods where a list is taken), -q/--quiet (--no-progress) on
    every command; old spellings still work; --prior on demosaic; a mistyped method gets the
    closest of the task's methods; -o x.jpeg2 is an error, not a folder; --suffix help per command."""
    from gsprestore.cli.app import _register, app
    import typer.main

    _register()
    cmd = typer.main.get_command(app)
    names = {name: {o for p in c.params for o in p.opts} for name, c in cmd.commands.items()}
    for name in ("mosaic", "demosaic", "upscale2x", "demo", "compare", "explain", "train", "train-pack"):
        assert {"-o", "--output"} <= names[name], name
    assert "--out" in names["train"] and "--out" in names["train-pack"]  # the old spellings
    for name in ("compare", "benchmark"):
        assert {"-m", "--method", "--methods"} <= names[name], name
    for name in ("mosaic", "demosaic", "upscale2x", "train"):
        assert {"-q", "--quiet", "--no-progress"} <= names[name], name
    assert "--prior" in names["demosaic"]
    raw(tmp_path / "r.png")
    code, _, err = cli("demosaic", tmp_path / "r.png", "-m", "menno")
    assert code == 2 and "did you mean 'menon'?" in err and "bicubic" not in err, err
    code, _, err = cli("demosaic", tmp_path / "r.png", "--prior", "gtv", "--fast")
    assert code == 2 and "--fast chooses the method" in err
    code, _, err = cli("demosaic", tmp_path / "r.png", "--prior", "sparse")
    assert code == 2 and "unknown --prior 'sparse'; expected glr or gtv" in err
    code, _, err = cli("demosaic", tmp_path / "r.png", "-m", "bilinear", "-o", tmp_path / "x.jpeg2")
    assert code == 2 and "unknown output extension '.jpeg2'" in err and not (tmp_path / "x.jpeg2").exists()
    assert cli("demosaic", tmp_path / "r.png", "-m", "bilinear", "-o", tmp_path / "v1.2", "--no-progress")[0] == 0
    assert (tmp_path / "v1.2" / "r.png").is_file()
    helps = {c: cli(c, "--help")[1] for c in ("mosaic", "demosaic", "upscale2x")}
    assert "-mosaic next" in " ".join(helps["mosaic"].split()) and "-2x" not in helps["mosaic"]
    assert "-2x next" in " ".join(helps["upscale2x"].split()) and "-demosaic" not in helps["upscale2x"]
    assert "SIDE" in cli("train-pack", "--help")[1]
