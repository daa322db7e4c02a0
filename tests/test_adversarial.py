"""Issue 13: nothing hangs, nothing explodes, nothing eats its own output. One test (or a few) per
failure found by adversarial input, each with a real file on disk, and a real subprocess and
signal where the failure needs one (a hang, a signal, two processes at once)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from gsprestore.runtime import tiling as engine
from gsprestore.core import memory
from gsprestore.imageio import png as pngcodec
from gsprestore.core.errors import GspError
from gsprestore.imageio.images import read_image

from cli_runner import GSPRESTORE, ROOT, cli, gray, lock_holder, rgb, run_cli

def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --------------------------------------------------------------------------- 1. symbolic-link loops


def test_recursive_discovery_visits_each_real_folder_once(tmp_path):
    src = tmp_path / "in"
    rgb(src / "a.png")
    rgb(src / "loop" / "x.png")
    rgb(src / "sub" / "y.png")
    os.symlink(".", src / "loop" / "a")
    os.symlink(".", src / "loop" / "b")
    os.symlink("..", src / "sub" / "up")
    t0 = time.monotonic()
    proc = run_cli("mosaic", "in", "-r", "-o", "out", "--ext", "png", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 60
    outs = tree(tmp_path / "out")
    assert outs == ["a.png", "loop", "loop/x.png", "sub", "sub/y.png"], outs
    for link in ("loop/a", "loop/b", "sub/up"):
        assert f"skipped in/{link} -> " in proc.stderr, proc.stderr


def test_recursive_glob_through_link_loops_ends(tmp_path):
    gray(tmp_path / "loop" / "x.png")
    os.symlink(".", tmp_path / "loop" / "a")
    os.symlink(".", tmp_path / "loop" / "b")
    code = ("from gsprestore.runtime.folders import discover\n"
            "f = discover(['loop/**/*.png'], recursive=True)\n"
            "print([str(s.path) for s in f.sources], len(f.skipped_links))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["['loop/x.png']", "2"]


# --------------------------------------------------------------------------- 2. native build lock


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_killed_build_cannot_hang_a_later_run(tmp_path):
    """The kernels are compiled when the package is installed (setup.py), never at run time: a
    torch extension lock left by a build killed under an older version is never waited on, and
    a run in a fresh cache starts no compiler (CC / CXX that fail, a cache with a stale lock)."""
    from PIL import Image as PILImage

    cache = tmp_path / "cache"
    stale = cache / "torch_extensions" / "py311_cpu" / "gsprestore_graph_avx2_0123456789"
    stale.mkdir(parents=True)
    (stale / "lock").write_text("")  # what `kill -9` during torch's build leaves
    rgb = (np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)
    PILImage.fromarray(rgb).save(tmp_path / "in.png")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "HOME": str(tmp_path), "CC": "false", "CXX": "false",
           "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"), "PYTHONPATH": str(ROOT)}
    code = ("from gsprestore.core import backend; from gsprestore.graph import operators as graph; backend.native(); import sys; "
            "print(graph.native_available(), backend.error())")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (stale / "lock").exists() and sorted(p.name for p in stale.iterdir()) == ["lock"]  # nothing built
    proc = subprocess.run([sys.executable, "-m", "gsprestore", "mosaic", str(tmp_path / "in.png"), "-o",
                           str(tmp_path / "m.png")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gsprestore", "demosaic", str(tmp_path / "m.png"), "-m", "igtv",
                           "-o", str(tmp_path / "out.png")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.png").is_file()


# --------------------------------------------------------------------------- 3. decompression bombs, memory


def _png(width: int, height: int, depth: int, colour: int, raw: bytes) -> bytes:
    def chunk(t: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + t + body + struct.pack(">I", zlib.crc32(t + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return pngcodec.SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


BOMB = 96 << 20  # inflates to 96 MiB; a 64x64 image needs 24 KiB


@pytest.fixture(scope="module")
def bomb_stream() -> bytes:
    return zlib.compress(b"\0" * BOMB, 9)


def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_png_bomb_is_refused_without_inflating(tmp_path, bomb_stream):
    path = tmp_path / "bomb.png"
    path.write_bytes(_png(64, 64, 16, 2, bomb_stream))
    assert path.stat().st_size < BOMB // 500

    def read():
        with pytest.raises(GspError, match="decompression bomb") as err:
            read_image(path)
        assert str(err.value).startswith(str(path))

    assert _peak_while(read) < 8 << 20
    # an 8-bit PNG goes through Pillow, which stops inflating once the image is full
    path.write_bytes(_png(64, 64, 8, 2, bomb_stream))
    t0 = time.perf_counter()
    assert read_image(path).array.shape == (64, 64, 3)
    assert time.perf_counter() - t0 < 0.5 * BOMB / (96 << 20) + 0.5


def test_float_tiff_bomb_is_refused_without_inflating(tmp_path, bomb_stream):
    h = w = 64
    strip = bomb_stream
    tags = [(256, 4, w), (257, 4, h), (258, 3, 32), (259, 3, 8), (262, 3, 1), (273, 4, 8), (277, 3, 1),
            (278, 4, h), (279, 4, len(strip)), (339, 3, 3)]
    ifd_at = 8 + len(strip) + len(strip) % 2
    ifd = struct.pack("<H", len(tags)) + b"".join(
        struct.pack("<HHI", t, typ, 1) + (struct.pack("<I", v) if typ == 4 else struct.pack("<HH", v, 0))
        for t, typ, v in tags) + struct.pack("<I", 0)
    path = tmp_path / "bomb.tif"
    path.write_bytes(b"II*\0" + struct.pack("<I", ifd_at) + strip + b"\0" * (len(strip) % 2) + ifd)

    def read():
        with pytest.raises(GspError, match="decompression bomb"):
            read_image(path)

    assert _peak_while(read) < 8 << 20


def test_output_larger_than_memory_is_refused_before_any_tile(tmp_path, monkeypatch):
    src = rgb(tmp_path / "a.png", 64, 64)
    # the input fits (64*64*3*5 B = 60 KiB), the 2x output (128*128*3*6 B = 288 KiB) does not
    monkeypatch.setattr(engine, "available_memory", lambda: 150 << 10)
    calls = []
    monkeypatch.setattr(engine, "_tiles", lambda *a, **k: calls.append(1))
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "-o", tmp_path / "big.png")
    assert code == 1 and "output needs about" in err and "a.png" in err
    assert calls == [] and not (tmp_path / "big.png").exists()
    monkeypatch.setattr(engine, "available_memory", lambda: 10 << 10)
    monkeypatch.setattr(memory, "available_memory", lambda: 10 << 10)  # what the reader asks
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "-o", tmp_path / "big.png")
    assert code == 1 and "not enough memory to read the 64x64 image" in err


# --------------------------------------------------------------------------- 4. TIFF orientation, MinIsWhite


def _tiff(path: Path, array: np.ndarray, **kw) -> Path:
    import tifffile

    tifffile.imwrite(path, array, **kw)
    return path


@pytest.mark.parametrize("orientation", range(1, 9))
def test_apply_orientation_matches_pillow_display(tmp_path, orientation):
    from PIL import Image as PILImage
    from PIL import ImageOps

    from gsprestore.imageio.images import apply_orientation

    stored = np.random.default_rng(orientation).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    path = _tiff(tmp_path / "o.tif", stored, photometric="rgb", extratags=[(274, 3, 1, orientation, True)])
    with PILImage.open(path) as im:
        shown = np.asarray(ImageOps.exif_transpose(im))
    assert np.array_equal(apply_orientation(stored, orientation), shown)
    img = read_image(path)  # pixels as stored, orientation reported
    assert np.array_equal(np.rint(img.array * 255).astype(np.uint8), stored)
    assert img.meta["orientation"] == orientation


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_oriented_mosaic_is_demosaicked_in_sensor_order(tmp_path, dtype):
    rng = np.random.default_rng(5)
    mosaic = rng.random((24, 32)).astype(np.float32)
    stored = mosaic if dtype == np.float32 else np.rint(mosaic * np.iinfo(dtype).max).astype(dtype)
    _tiff(tmp_path / "plain.tif", stored)
    _tiff(tmp_path / "rot.tif", stored, extratags=[(274, 3, 1, 6, True)])
    for name in ("plain", "rot"):
        code, _, err = cli("demosaic", tmp_path / f"{name}.tif", "-m", "bilinear", "-o", tmp_path / f"{name}-out.tif")
        assert code == 0, err
    plain = read_image(tmp_path / "plain-out.tif").array
    rot = read_image(tmp_path / "rot-out.tif").array
    assert rot.shape == (32, 24, 3)
    np.testing.assert_array_equal(rot, np.rot90(plain, -1))


def test_min_is_white_is_inverted_at_every_bit_depth(tmp_path):
    stored = np.random.default_rng(2).random((8, 10)).astype(np.float32)
    for dtype in (np.uint8, np.uint16):
        top = np.iinfo(dtype).max
        path = _tiff(tmp_path / f"w{top}.tif", np.rint(stored * top).astype(dtype), photometric="miniswhite")
        got = read_image(path).array[:, :, 0]
        np.testing.assert_allclose(got, 1 - np.rint(stored * top) / top, atol=1e-6)


# --------------------------------------------------------------------------- 5. reruns never eat their outputs


def test_demosaic_folder_twice(tmp_path):
    gray(tmp_path / "res" / "a.png")
    assert cli("demosaic", "res", "-m", "bilinear", cwd=tmp_path)[0] == 0
    code, _, err = cli("demosaic", "res", "-m", "bilinear", "--skip-existing", cwd=tmp_path)
    assert code == 0 and "error" not in err, err
    assert tree(tmp_path / "res") == ["a-demosaic.png", "a.png"]


def test_upscale2x_folder_three_times(tmp_path):
    rgb(tmp_path / "dir" / "a.png")
    for _ in range(3):
        code, _, err = cli("upscale2x", "dir", "-m", "bicubic", "--skip-existing", cwd=tmp_path)
        assert code == 0, err
    assert tree(tmp_path / "dir") == ["a-2x.png", "a.png"]
    # the design card's plain command, run twice: the second run takes nothing of its own
    before = (tmp_path / "dir" / "a-2x.png").read_bytes()
    code, _, err = cli("upscale2x", "dir", "-m", "bicubic", cwd=tmp_path)
    assert code == 1 and "a-2x.png: output exists" in err
    assert tree(tmp_path / "dir") == ["a-2x.png", "a.png"]
    assert (tmp_path / "dir" / "a-2x.png").read_bytes() == before


def test_renamed_output_is_known_by_its_tag(tmp_path):
    from gsprestore.imageio.images import tool_tag

    rgb(tmp_path / "dir" / "a.png")
    assert cli("upscale2x", "dir", "-m", "bicubic", cwd=tmp_path)[0] == 0
    assert tool_tag(tmp_path / "dir" / "a-2x.png") == "gsprestore upscale2x"
    os.rename(tmp_path / "dir" / "a-2x.png", tmp_path / "dir" / "holiday.png")
    code, _, err = cli("upscale2x", "dir", "-m", "bicubic", "--skip-existing", cwd=tmp_path)
    assert code == 0 and "skipped 1 `gsprestore upscale2x` output file(s): dir/holiday.png" in err, err
    assert not (tmp_path / "dir" / "holiday-2x.png").exists()
    # another command's output is an input: a mosaic is what demosaic is for
    assert cli("mosaic", "dir/a.png", "-o", "raw/a.tif", cwd=tmp_path)[0] == 0
    assert tool_tag(tmp_path / "raw" / "a.tif") == "gsprestore mosaic"
    assert cli("demosaic", "raw", "-m", "bilinear", cwd=tmp_path)[0] == 0
    assert (tmp_path / "raw" / "a-demosaic.tif").is_file()


def test_output_folder_inside_the_input_is_not_walked(tmp_path):
    rgb(tmp_path / "in" / "a.png")
    for _ in range(2):
        code, _, err = cli("upscale2x", "in", "-o", "in/out", "-r", "-m", "bicubic", "--skip-existing", cwd=tmp_path)
        assert code == 0, err
    assert tree(tmp_path / "in") == ["a.png", "out", "out/a.png"]


# --------------------------------------------------------------------------- 6. benchmark reports


def _bench_data(tmp_path: Path) -> Path:
    for k in range(2):
        rgb(tmp_path / "data" / f"i{k}.png", 16, 16, seed=k)
    return tmp_path / "data"


def test_benchmark_report_path_checked_before_the_first_image(tmp_path, monkeypatch):
    from gsprestore.evaluation import benchmark

    data = _bench_data(tmp_path)
    ran = []
    monkeypatch.setattr(benchmark, "load_ground_truth", lambda *a, **k: ran.append(1))
    for args, needle in [(["--json", tmp_path / "missing" / "r.json"], "output folder does not exist"),
                         (["--csv", data], "output path is a folder")]:
        code, out, err = cli("benchmark", "--task", "demosaic", "--data-dir", data, "--methods", "bilinear", *args)
        assert code == 1 and needle in err, err

    def read_only(*a, **k):  # what a read-only mount answers (root ignores permission bits)
        raise OSError(30, "Read-only file system")

    with monkeypatch.context() as m:
        m.setattr("tempfile.NamedTemporaryFile", read_only)
        code, _, err = cli("benchmark", "--task", "demosaic", "--data-dir", data, "--methods", "bilinear",
                           "--markdown", tmp_path / "r.md")
    assert code == 1 and "Read-only file system" in err and str(tmp_path) in err
    assert ran == []


def test_benchmark_rows_survive_a_failed_report_write(tmp_path, monkeypatch):
    from gsprestore.evaluation import benchmark

    data = _bench_data(tmp_path)

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(benchmark, "atomic_file", disk_full)
    code, out, err = cli("benchmark", "--task", "demosaic", "--data-dir", data, "--methods", "bilinear",
                         "--json", tmp_path / "r.json")
    assert code == 1
    assert errors(err) == [f"error: {tmp_path / 'r.json'}: could not write the report (No space left on device); "
                           "the results are printed on stdout"]
    rows = json.loads(out[out.index("{"):])["results"]
    assert [r["method"] for r in rows] == ["bilinear"] and rows[0]["psnr_mean"] > 0
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob(".r.json*"))


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# --------------------------------------------------------------------------- 7. concurrent runs


def test_output_claimed_by_a_live_run_is_skipped_or_refused(tmp_path):
    for k in range(3):
        gray(tmp_path / "in" / f"m{k}.png", seed=k)
    (tmp_path / "out").mkdir()
    holder = lock_holder(tmp_path / "out" / ".m1.png.claim")  # a live run's claim: its OS lock held
    try:
        (tmp_path / "out" / ".m2.png.claim").write_text(str(_dead_pid()))  # left by a killed run
        code, out, err = cli("demosaic", "in", "-o", "out", "-m", "bilinear", "--skip-existing", "--json",
                             cwd=tmp_path)
        assert code == 0, err
        files = {Path(f["input"]).name: f for f in json.loads(out)["files"]}
        assert files["m1.png"]["status"] == "skipped"
        assert f"pid {holder.pid}" in files["m1.png"]["info"]["reason"]
        assert files["m0.png"]["status"] == files["m2.png"]["status"] == "written"
        code, _, err = cli("demosaic", "in/m1.png", "-o", "out/m1.png", "-m", "bilinear", cwd=tmp_path)
        assert code == 1 and f"being written by another gsprestore run (pid {holder.pid})" in err
        assert not (tmp_path / "out" / "m1.png").exists()
    finally:
        holder.kill()
        holder.wait()
    assert tree(tmp_path / "out") == [".m1.png.claim", "m0.png", "m2.png"]


def test_two_runs_on_one_output_folder_share_the_work(tmp_path):
    for k in range(24):
        gray(tmp_path / "in" / f"m{k:02d}.png", 96, 96, seed=k)
    args = [*GSPRESTORE, "demosaic", "in", "-o", "out", "-m", "menon",
            "--skip-existing", "--json", "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GSPRESTORE_NATIVE": "0"}
    procs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=180) for p in procs]
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert errors(err) == []
    written = sum(json.loads(out)["written"] for out, _ in results)
    assert written == 24  # each output made once, by one of the two runs
    assert tree(tmp_path / "out") == [f"m{k:02d}.png" for k in range(24)]
    for k in range(24):
        assert read_image(tmp_path / "out" / f"m{k:02d}.png").channels == 3


# --------------------------------------------------------------------------- 8. SIGTERM during a write


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_a_write_leaves_no_part_file(tmp_path, sig):
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GSPRESTORE_NATIVE": "0"}
    for side in (2400, 3400, 4800):  # a write that ends before the signal lands is tried again, larger
        for p in tmp_path.iterdir():
            p.unlink()
        PILImage.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(tmp_path / "big.png",
                                                                                      compress_level=0)
        # the child gets the default SIGINT disposition: a test run in the background of a
        # non-interactive shell (nohup, `cmd &`) inherits SIGINT ignored, and Python then keeps it so
        proc = subprocess.Popen([*GSPRESTORE, "mosaic", "big.png", "-o", "raw.tif",
                                 "--bit-depth", "16"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 90
        while not list(tmp_path.glob(".raw.tif.*.part")) and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        if proc.poll() is None:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        if proc.returncode == 0:  # the write finished first: nothing to interrupt
            assert not list(tmp_path.glob(".*.part"))
            continue
        assert proc.returncode in ((128 + sig), 1, 130), (proc.returncode, err)
        if sig == signal.SIGTERM:
            assert proc.returncode == 143 and "terminated (SIGTERM)" in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["big.png"]
        return
    pytest.fail("every write finished before the signal could land")


def test_in_process_main_restores_the_signal_handlers(monkeypatch):
    from gsprestore.cli.app import main

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "argv", ["gsprestore", "--version"])
    with pytest.raises(SystemExit):
        main()
    assert signal.getsignal(signal.SIGTERM) is before


# --------------------------------------------------------------------------- 9. bad option values


@pytest.mark.parametrize("tile", ["4", "2", "6", "-1"])
def test_tile_below_the_minimum_is_a_usage_error(tmp_path, tile):
    src = gray(tmp_path / "m.png")
    code, _, err = cli("demosaic", src, "-m", "bilinear", "--tile", tile, "-o", tmp_path / "o.png")
    assert code == 2 and "--tile must be 0 (automatic) or at least 8" in err
    assert not (tmp_path / "o.png").exists()
    assert cli("demosaic", src, "-m", "bilinear", "--tile", "8", "-o", tmp_path / "o.png")[0] == 0


# --------------------------------------------------------------------------- 10. JPEG, multi-page TIFF


def test_cmyk_and_exif_jpegs_are_read(tmp_path):
    from PIL import Image as PILImage

    a = np.random.default_rng(1).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    PILImage.fromarray(a).convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    code, _, err = cli("upscale2x", tmp_path / "cmyk.jpg", "-m", "bicubic", "-o", tmp_path / "cmyk.png")
    assert code == 0, err
    assert read_image(tmp_path / "cmyk.png").array.shape == (32, 48, 3)

    exif = PILImage.Exif()
    exif[0x0112] = 6
    PILImage.fromarray(a).save(tmp_path / "phone.jpg", quality=95, exif=exif)
    img = read_image(tmp_path / "phone.jpg")
    assert img.array.shape == (16, 24, 3) and img.meta["orientation"] == 6
    code, _, err = cli("upscale2x", tmp_path / "phone.jpg", "-m", "bicubic", "-o", tmp_path / "phone.png")
    assert code == 0, err
    assert read_image(tmp_path / "phone.png").array.shape == (48, 32, 3)  # upright, like a viewer shows it


def test_other_formats_are_named(tmp_path):
    from PIL import Image as PILImage

    PILImage.new("RGB", (8, 8)).save(tmp_path / "a.png", format="GIF")
    code, _, err = cli("upscale2x", tmp_path / "a.png", "-m", "bicubic", "-o", tmp_path / "o.png")
    assert code == 1 and "unsupported format GIF (gsprestore reads PNG, TIFF, JPEG and WebP" in err


def test_multi_page_tiff_says_only_page_one_is_read(tmp_path):
    import tifffile

    pages = np.random.default_rng(3).integers(0, 256, (3, 16, 20), dtype=np.uint8)
    tifffile.imwrite(tmp_path / "stack.tif", pages, photometric="minisblack")
    assert read_image(tmp_path / "stack.tif").meta["pages"] == 3
    code, _, err = cli("demosaic", tmp_path / "stack.tif", "-m", "bilinear", "-o", tmp_path / "o.png")
    assert code == 0, err
    assert "stack.tif: multi-page TIFF (3 pages); only page one is read" in err
