"""Issue 22: hostile inputs, full disks and killed runs. One test per failure the third round of
probes found, each on a small (or header-only) file made here, CPU only, and never allocating what
the probes did: memory limits are patched, or set on a subprocess with ``resource``."""

from __future__ import annotations

import errno
import io
import json
import os
import struct
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from gsprestore.runtime import tiling as engine
from gsprestore.core import memory
from gsprestore.core.errors import GspError, WeightsError
from gsprestore.imageio.images import read_image

from cli_runner import GSPRESTORE, ROOT, cli, gray, lock_holder, rgb

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "GSPRESTORE_NATIVE": "0", "OMP_NUM_THREADS": "1"}


def run_cli(*args: object, cwd: Path, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """The real command line in a fresh interpreter (this checkout)."""
    return subprocess.run([*GSPRESTORE, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout, **kw)


def run_main(monkeypatch, capsys, *args: object) -> tuple[int, str, str]:
    """The console entry point (:func:`gsprestore.cli.app.main`, with its last-resort handlers)
    in this process: exit code, stdout, stderr."""
    from gsprestore.cli.app import main

    monkeypatch.setattr(sys, "argv", ["gsprestore", *map(str, args)])
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    return int(done.value.code or 0), out, err


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def in_limited_process(code: str, limit: int = 1 << 30, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose address space is capped at ``limit`` bytes: what
    the probes ran to gigabytes must end, in one line, well inside it."""
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
    return subprocess.run([sys.executable, "-c", prelude + code], env={**ENV, "OPENBLAS_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------- crafted files


def jpeg_bytes(array: np.ndarray, **kw) -> bytes:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.fromarray(array).save(buf, "JPEG", **kw)
    return buf.getvalue()


def with_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """``data`` with its frame header (SOF0) declaring ``width`` x ``height``."""
    out = bytearray(data)
    i = out.find(b"\xff\xc0")
    out[i + 5 : i + 9] = struct.pack(">HH", height, width)
    return bytes(out)


def tiff_bytes(width: int, height: int, bits: int, samples: int, chunks: list[bytes], *, tile: int | None = None,
               rows_per_strip: int | None = None) -> bytes:
    """A little-endian TIFF whose directory lists ``chunks`` (uncompressed) as its strips, or as
    its ``tile`` x ``tile`` tiles: as many as given, whatever the size needs."""
    body = b"".join(chunks)
    offsets, pos = [], 8
    for c in chunks:
        offsets.append(pos)
        pos += len(c)
    ifd_at = pos + pos % 2
    extra_at = ifd_at + 2 + 12 * 12 + 4
    entries, extra = [], b""

    def entry(tag: int, typ: int, values: list[int]) -> None:
        nonlocal extra
        code = {3: "H", 4: "I"}[typ]
        blob = struct.pack("<" + code * len(values), *values)
        if len(blob) <= 4:
            entries.append(struct.pack("<HHI", tag, typ, len(values)) + blob.ljust(4, b"\0"))
        else:
            entries.append(struct.pack("<HHII", tag, typ, len(values), extra_at + len(extra)))
            extra += blob

    entry(256, 4, [width])
    entry(257, 4, [height])
    entry(258, 3, [bits] * samples)
    entry(259, 3, [1])
    entry(262, 3, [2 if samples == 3 else 1])
    entry(277, 3, [samples])
    if tile is None:
        entry(273, 4, offsets)
        entry(278, 4, [rows_per_strip or height])
        entry(279, 4, [len(c) for c in chunks])
    else:
        entry(322, 4, [tile])
        entry(323, 4, [tile])
        entry(324, 4, offsets)
        entry(325, 4, [len(c) for c in chunks])
    entry(284, 3, [1])
    entry(339, 3, [1] * samples)
    while len(entries) < 12:
        entry(305, 3, [0])  # padding entries keep the directory size fixed (Software as a number: ignored)
    header = b"II*\0" + struct.pack("<I", ifd_at)
    return header + body + b"\0" * (ifd_at - pos) + struct.pack("<H", 12) + b"".join(entries) + b"\0" * 4 + extra


# =========================================================================== memory: header and machine


def test_jpeg_declaring_30000x30000_in_2_kb_is_refused_before_decoding(tmp_path):
    small = jpeg_bytes(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8))
    path = tmp_path / "huge.jpg"
    path.write_bytes(with_jpeg_size(small, 30000, 30000))
    assert path.stat().st_size < 4096
    proc = in_limited_process(f"from gsprestore.imageio.images import read_image\nread_image({str(path)!r})")
    assert proc.returncode == 1 and "Traceback" in proc.stderr  # the GspError, raised
    last = proc.stderr.strip().splitlines()[-1]
    assert "truncated JPEG (the header declares 30000x30000 pixels" in last, last
    assert "MemoryError" not in proc.stderr and "not enough memory" not in proc.stderr


def test_tiff_of_1x1_tiles_is_refused_before_anything_is_allocated(tmp_path):
    path = tmp_path / "tiles.tif"
    path.write_bytes(tiff_bytes(4000, 4000, 16, 3, [b"\0" * 6], tile=1))  # 16 M tiles declared, one given
    t0 = time.monotonic()
    proc = in_limited_process(f"from gsprestore.imageio.images import read_image\nread_image({str(path)!r})", limit=1 << 30)
    assert proc.returncode == 1 and time.monotonic() - t0 < 30
    last = proc.stderr.strip().splitlines()[-1]
    assert "tiles" in last and "not enough memory" not in last and "MemoryError" not in proc.stderr, last


def test_dev_zero_and_a_fifo_are_refused_before_they_are_opened(tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    for path, kind in ((Path("/dev/zero"), "a character device"), (fifo, "a FIFO")):
        t0 = time.monotonic()
        proc = run_cli("upscale2x", path, "-m", "bicubic", "-o", tmp_path / "o.png", cwd=tmp_path, timeout=60)
        assert proc.returncode == 1 and time.monotonic() - t0 < 60
        assert f"error: {path}: is {kind}" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    with pytest.raises(GspError, match="is a character device, not an image"):
        read_image("/dev/zero")


def _tiny_weights(tmp_path: Path, **config) -> Path:
    import torch

    from gsprestore.models import build_model
    from gsprestore.methods.weights import save_weights

    torch.manual_seed(0)
    path = save_weights(tmp_path / "small.pt", build_model("ugtv", "demosaic", blocks=1, heads=2, features=3,
                                                           width=6, cg_iters=2, admm_iters=1),
                        {"method": "ugtv", "task": "demosaic"}) and tmp_path / "small.pt"
    obj = torch.load(path, weights_only=True)
    obj["config"].update(config)
    torch.save(obj, path)
    return path


@pytest.mark.parametrize("config, needle", [
    (dict(width=4096, heads=4, features=1024), "features = 1024 is outside"),  # a 1.8 KB file, a 4096-wide net
    (dict(admm_iters=10**7), "admm_iters = 10000000 is outside"),
    (dict(admm_iters=3), "blocks.0.alpha is (1, 2, 2) in the file but (3, 2, 2)"),  # in bounds, not these tensors
])
def test_weights_config_is_bounded_before_the_network_is_built(tmp_path, monkeypatch, config, needle):
    from gsprestore.methods import weights as W
    from gsprestore.models import unrolled

    path = _tiny_weights(tmp_path, **config)
    assert path.stat().st_size < 64 << 10
    real = unrolled.UnrolledNet
    built = []

    def spy(*args, **kwargs):  # the only network built may be the meta-device one that allocates nothing
        import torch

        built.append(torch.empty(0).device.type)
        return real(*args, **kwargs)

    monkeypatch.setattr(unrolled, "UnrolledNet", spy)
    with pytest.raises(WeightsError, match="weights do not fit the ugtv network") as err:
        W.load_model("ugtv", "demosaic", path)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert all(device == "meta" for device in built), built


def test_job_that_cannot_fit_is_refused_from_the_header_naming_both_numbers(tmp_path, monkeypatch):
    """Decoding alone fits; decoding, the 2x output, its written copy and a tile do not: the file
    is refused before its pixels are decoded, in one line with what is needed and what there is."""
    from gsprestore.imageio import images as gio

    src = rgb(tmp_path / "a.png", 256, 256)
    decoded = []
    real = gio._from_pillow
    monkeypatch.setattr(gio, "_from_pillow", lambda *a, **k: decoded.append(1) or real(*a, **k))
    for mod in (memory, engine):
        monkeypatch.setattr(mod, "available_memory", lambda: 3 << 20)  # reading needs ~1 MiB, the job ~5
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "-o", tmp_path / "big.png")
    assert code == 1 and decoded == [] and not (tmp_path / "big.png").exists()
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert line.startswith(f"error: {src}: not enough memory to read the 256x256 image and work on it (about 0.0")
    assert line.endswith("GiB needed, 0.00 GiB available)"), line


def test_mosaic_job_is_checked_from_the_header_and_makes_no_masks(tmp_path, monkeypatch):
    """The probe's 11000x11000 PNG (345 KB) went to 4.9 GB in `mosaic`: the image, three full-size
    Bayer masks and their product. The job is now checked from the header, the mosaic picked by stride."""
    import torch

    from gsprestore.imageio import images as gio
    from gsprestore.physics.sampling import mosaic

    src = rgb(tmp_path / "a.png", 256, 256)
    code, _, err = cli("mosaic", src, "-o", tmp_path / "m.tif", "--bit-depth", "16")
    assert code == 0, err
    want = mosaic(torch.from_numpy(read_image(src).array).permute(2, 0, 1), "RGGB")[0].numpy()
    np.testing.assert_array_equal(read_image(tmp_path / "m.tif").array[:, :, 0],
                                  np.rint(want * 65535).astype(np.uint16) / np.float32(65535))
    decoded = []
    real = gio._from_pillow
    monkeypatch.setattr(gio, "_from_pillow", lambda *a, **k: decoded.append(1) or real(*a, **k))
    monkeypatch.setattr(memory, "available_memory", lambda: 2 << 20)  # reading needs ~1.2 MiB, the job 2.4
    code, _, err = cli("mosaic", src, "-o", tmp_path / "m2.png")
    assert code == 1 and decoded == [] and "not enough memory to read the 256x256 image and work on it" in err


def test_automatic_tiles_are_sized_from_what_the_output_leaves(monkeypatch):
    import torch

    from gsprestore.methods.registry import get_restorer

    r = get_restorer("bicubic", "upscale2x")
    y = torch.rand(3, 1024, 1024)
    out = engine.output_bytes(2048, 2048, 3)  # 72 MiB
    monkeypatch.setattr(engine, "available_memory", lambda: out + (32 << 20))  # 32 MiB left beside the output
    plans = []
    real = engine.make_plan
    monkeypatch.setattr(engine, "make_plan", lambda *a: plans.append(a[2]) or real(*a))
    engine.restore(r, y, tile=0, overlap=4)
    assert engine.tile_bytes(r, plans[0], 4, 1024, 1024) <= 16 << 20  # half of what the output leaves
    monkeypatch.setattr(engine, "available_memory", lambda: out + (1 << 10))  # not even the smallest tile
    with pytest.raises(GspError, match=r"the 2048x2048 output needs about 0\.0\d GiB of memory .* but only "
                                       r"0\.0\d GiB is available"):
        engine.restore(r, y, tile=0, overlap=4)


def test_reading_and_developing_make_no_full_size_temporaries(tmp_path):
    """The probes' peaks came from whole-image temporaries: a float division after the integer
    copy (read), a clip, a matrix product and five arrays of the sRGB curve (camera RAW)."""
    from gsprestore.imageio import camera_raw as cr, raw_develop

    src = rgb(tmp_path / "a.png", 1024, 256)
    floats = 1024 * 256 * 3 * 4
    frame = cr.RawFrame(mosaic=np.random.default_rng(0).random((1024, 256), dtype=np.float32), pattern="RGGB",
                        wb_camera=np.array([2.0, 1.0, 1.5]), wb_daylight=None,
                        rgb_cam=np.array([[1.6, -0.4, -0.2], [-0.2, 1.4, -0.2], [0.0, -0.5, 1.5]]), flip=0, bits=14)
    demosaic = lambda m, p: np.repeat(m[:, :, None], 3, axis=2)  # noqa: E731
    read_image(src), raw_develop.develop(frame, demosaic)  # imports done before measuring
    tracemalloc.start()
    try:
        read_image(src)
        read_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        raw_develop.develop(frame, demosaic)
        develop_peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert read_peak < 1.6 * floats, read_peak / floats  # the file, the 8-bit samples, one float32 copy
    assert develop_peak < 1.8 * floats, develop_peak / floats  # the balanced mosaic and the result


def test_camera_raw_that_cannot_fit_is_refused_from_its_header(tmp_path, monkeypatch):
    from gsprestore.imageio import camera_raw as cr
    from gsprestore.imageio import dng as dng_io

    cfa = dng_io.mosaic_for_dng(np.full((64, 96, 3), 0.5, np.float32), "RGGB")
    path = dng_io.write_dng(tmp_path / "x.dng", cfa, "RGGB")
    monkeypatch.setattr(memory, "available_memory", lambda: 512 << 10)
    with pytest.raises(GspError) as err:
        cr.read_raw(path, reserve=lambda h, w, c: h * w * 100)  # what the caller will need: 600 KB
    assert str(err.value).startswith(f"{path}: not enough memory to read the 96x64 camera RAW file and work on it "
                                     "(about 0.00 GiB needed, 0.00 GiB available)")
    monkeypatch.setattr(memory, "available_memory", lambda: 64 << 20)
    assert cr.read_raw(path, reserve=lambda h, w, c: h * w * 100).mosaic.shape == (64, 96)


# =========================================================================== truncated or partial data


def test_jpeg_with_data_for_less_than_its_header_is_an_error(tmp_path):
    rng = np.random.default_rng(1)
    small = jpeg_bytes(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    (tmp_path / "inflated.jpg").write_bytes(with_jpeg_size(small, 4000, 4000))
    code, _, err = cli("upscale2x", tmp_path / "inflated.jpg", "-m", "bicubic", "-o", tmp_path / "o.png")
    assert code == 1 and "truncated JPEG (the header declares 4000x4000 pixels" in err, err
    assert not (tmp_path / "o.png").exists()
    whole = jpeg_bytes(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8))
    (tmp_path / "half.jpg").write_bytes(whole[: len(whole) // 2] + b"\xff\xd9")  # cut, then an end marker
    with pytest.raises(GspError, match="truncated JPEG"):
        read_image(tmp_path / "half.jpg")
    # complete files of every kind still read, exactly as Pillow decodes them
    from PIL import Image as PILImage

    photo = rng.integers(0, 256, (72, 88, 3), dtype=np.uint8)
    for k, kw in enumerate([{}, {"progressive": True}, {"restart_marker_blocks": 3}, {"subsampling": 0},
                            {"optimize": True}]):
        p = tmp_path / f"ok{k}.jpg"
        p.write_bytes(jpeg_bytes(photo, **kw) + (b"trailing" if k == 4 else b""))
        with PILImage.open(p) as im:
            want = np.asarray(im.convert("RGB"))
        np.testing.assert_array_equal(np.rint(read_image(p).array * 255).astype(np.uint8), want)
    p = tmp_path / "flat.jpg"
    p.write_bytes(jpeg_bytes(np.full((40, 40), 128, np.uint8)))
    assert read_image(p).array.shape == (40, 40, 1)


def test_tiff_whose_tiles_or_strips_do_not_cover_it_is_an_error(tmp_path):
    path = tmp_path / "one_tile.tif"
    path.write_bytes(tiff_bytes(3000, 3000, 8, 1, [b"\x80"], tile=1))  # the 174-byte probe
    assert path.stat().st_size < 256
    code, _, err = cli("upscale2x", path, "-m", "bicubic", "-o", tmp_path / "o.png")
    assert code == 1 and not (tmp_path / "o.png").exists()
    assert "one_tile.tif: unsupported TIFF (1x1 tiles" in err, err
    tile = b"\x80" * (16 * 16)
    path.write_bytes(tiff_bytes(64, 64, 8, 1, [tile], tile=16))  # 16 tiles declared, one given
    with pytest.raises(GspError, match=r"truncated TIFF \(1 tile offsets for the 16 tiles of a 64x64 image\)"):
        read_image(path)
    path.write_bytes(tiff_bytes(64, 64, 8, 1, [b"\x80" * 64 * 8], rows_per_strip=8))  # 8 strips declared, one given
    with pytest.raises(GspError, match=r"truncated TIFF \(1 strip offsets for the 8 strips"):
        read_image(path)
    path.write_bytes(tiff_bytes(64, 64, 8, 1, [tile] * 16, tile=16))  # complete: reads
    assert read_image(path).array.shape == (64, 64, 1)


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_animated_png_and_webp_say_only_the_first_frame_is_read(tmp_path, fmt):
    from PIL import Image as PILImage

    rng = np.random.default_rng(2)
    frames = [PILImage.fromarray(rng.integers(0, 256, (16, 20, 3), dtype=np.uint8)) for _ in range(3)]
    path = tmp_path / f"anim.{fmt.lower()}"
    frames[0].save(path, format=fmt, save_all=True, append_images=frames[1:], lossless=True)
    img = read_image(path)
    assert img.meta["pages"] == 3
    np.testing.assert_array_equal(np.rint(img.array * 255).astype(np.uint8), np.asarray(frames[0]))
    code, _, err = cli("upscale2x", path, "-m", "bicubic", "-o", tmp_path / "o.png")
    assert code == 0, err
    assert f"anim.{fmt.lower()}: animated {fmt} (3 frames); only the first frame is read" in err


# =========================================================================== one line, always


def test_truncated_dng_is_one_line_with_libraws_words(tmp_path):
    from gsprestore.imageio import dng as dng_io

    cfa = dng_io.mosaic_for_dng(np.random.default_rng(0).random((128, 128, 3)), "RGGB")
    whole = dng_io.write_dng(tmp_path / "whole.dng", cfa, "RGGB").read_bytes()
    (tmp_path / "cut.dng").write_bytes(whole[: len(whole) * 2 // 3])
    proc = run_cli("demosaic", "cut.dng", "-m", "bilinear", "-q", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["error: cut.dng: corrupt or truncated camera RAW file (LibRaw: Unexpected end "
                                        "of file)"], proc.stderr


def test_weights_pickle_that_would_run_code_is_one_whole_line(tmp_path):
    import pickle

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch ran",))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"state_dict": Payload()}, protocol=4))
    import torch

    torch.save({"state_dict": Payload(), "config": {}, "method": "ugtv", "task": "demosaic"}, tmp_path / "evil2.pt")
    gray(tmp_path / "m.png")
    for name in ("evil.pt", "evil2.pt"):
        proc = run_cli("demosaic", "m.png", "-m", "ugtv", "--weights", name, "-o", "o.png", cwd=tmp_path)
        assert proc.returncode == 1 and not (tmp_path / "ran").exists()
        (line,) = proc.stderr.splitlines()
        assert line.startswith(f"error: {name}: not a readable weights file (refused") and line.endswith(")"), line
        assert "In PyTorch 2.6" not in line and "Warning" not in line
    assert "pickled code that would run on loading" in line and "posix.system" in line


def test_a_newline_in_a_file_name_stays_on_one_line(tmp_path):
    bad = tmp_path / "evil\nname.png"
    bad.write_bytes(b"not an image")
    code, _, err = cli("upscale2x", bad, "-m", "bicubic", "-o", tmp_path / "o.png")
    assert code == 1
    lines = err.splitlines()
    assert all(line.startswith(("error:", "upscale2x with bicubic (--method): 0 written")) for line in lines), lines
    assert any("evil\\nname.png: not a PNG image" in line for line in lines), lines


def test_no_free_inodes_for_the_claim_is_one_line(tmp_path, monkeypatch):
    from gsprestore.runtime import folders as batch

    src = gray(tmp_path / "m.png")
    real = os.open

    def full(path, *a, **k):
        if str(path).endswith(".claim"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(batch.os, "open", full)
    code, _, err = cli("demosaic", src, "-m", "bilinear", "-o", tmp_path / "out" / "o.png")
    assert code == 1
    assert f"error: {tmp_path / 'out'}: cannot create the claim file .o.png.claim (No space left on device)" in err


def test_json_to_a_full_device_is_one_line(tmp_path):
    gray(tmp_path / "m.png")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*GSPRESTORE, "demosaic", "m.png", "-m", "bilinear", "-o", "o.png", "--json", "-q"],
                              cwd=tmp_path, env=ENV, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["error: standard output: No space left on device"], proc.stderr


def test_unexpected_exceptions_are_one_line(monkeypatch, capsys, tmp_path):
    from gsprestore.runtime import file_restore

    def broken(*a, **k):
        raise RuntimeError("something inside\nwent wrong")

    monkeypatch.setattr(file_restore, "restore_file", broken)
    code, _, err = run_main(monkeypatch, capsys, "upscale2x", rgb(tmp_path / "a.png"), "-m", "bicubic", "-o",
                            tmp_path / "o.png")
    assert code == 1
    assert err.splitlines()[-1] == ("error: unexpected RuntimeError: something inside (a bug in gsprestore; "
                                    "GSPRESTORE_TRACEBACK=1 shows where)")


@pytest.mark.parametrize("args, needle", [
    (["--threads", "-1"], "--threads must be at least 1"),
    (["--threads", "0"], "--threads must be at least 1"),  # was torch's default, silently
    (["--blocks", "0"], "model option blocks = 0 is outside what the architecture supports (1..32)"),
    (["--admm-iters", "10000000"], "admm_iters = 10000000 is outside"),
])
def test_train_options_out_of_range_are_usage_errors(tmp_path, args, needle):
    rgb(tmp_path / "photos" / "p.png", 96, 96)
    code, _, err = cli("train", "--task", "demosaic", "--prior", "gtv", "--data", tmp_path / "photos",
                       "--out", tmp_path / "run", *args)
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_output_names_longer_than_name_max(tmp_path):
    from PIL import Image as PILImage

    long_stem = "x" * 240
    (tmp_path / "in").mkdir()
    src = tmp_path / "in" / f"{long_stem}.png"  # written directly: gsprestore's own writer would refuse the name
    PILImage.new("RGB", (20, 16), (10, 20, 30)).save(src)
    for _ in range(2):  # the second run finds the shortened name and skips it
        code, _, err = cli("upscale2x", src, "-m", "bicubic", "-o", tmp_path / "out", "--suffix", "-2x",
                           "--skip-existing")
        assert code == 0, err
    (name,) = os.listdir(tmp_path / "out")
    assert name.endswith("-2x.png") and name.startswith("x" * 100) and "~" in name
    assert len(name.encode()) <= 255 - 32
    assert "skipped" in err
    # two long names that differ only at the end stay two files
    PILImage.new("RGB", (20, 16), (40, 50, 60)).save(tmp_path / "in" / f"{long_stem}y.png")
    code, _, err = cli("upscale2x", tmp_path / "in", "-m", "bicubic", "-o", tmp_path / "out", "--skip-existing")
    assert code == 0 and len(os.listdir(tmp_path / "out")) == 3, err
    # a name given with -o is the user's: too long is one line, not a traceback
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "-o", tmp_path / "out" / ("y" * 250 + ".png"))
    assert code == 1 and "file name too long (254 bytes;" in err, err


def test_benchmark_and_compare_on_an_image_smaller_than_the_ssim_window(tmp_path):
    rgb(tmp_path / "data" / "tiny.png", 2, 4)
    code, _, err = cli("benchmark", "--task", "upscale2x", "--data-dir", tmp_path / "data", "--methods", "bicubic")
    assert code == 1
    assert f"error: {tmp_path / 'data' / 'tiny.png'}: image too small to score (4x2; the protocol's SSIM needs " \
           "at least 11x11 pixels)" in err
    code, out, err = cli("compare", tmp_path / "data" / "tiny.png", "--task", "upscale2x", "--methods", "bicubic",
                         "-o", tmp_path / "cmp.png")
    assert code == 0, err
    assert "bicubic  PSNR" in out and "no SSIM" in out and (tmp_path / "cmp.png").is_file()


# =========================================================================== no silent fallbacks


def test_unreadable_manifest_is_an_error_not_another_default(tmp_path, monkeypatch):
    from gsprestore.methods import weights as W

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / W.MANIFEST).write_text("{not json")
    monkeypatch.setenv(W.ENV_VAR, str(tmp_path / "w"))
    src = rgb(tmp_path / "a.png")
    code, _, err = cli("upscale2x", src, "-o", tmp_path / "o.png")
    assert code == 1 and not (tmp_path / "o.png").exists()
    assert "unreadable weights manifest" in err and "name a method (e.g. --method bicubic)" in err
    assert cli("upscale2x", src, "-m", "bicubic", "-o", tmp_path / "o.png")[0] == 0


def test_benchmark_weights_that_do_not_read_fail_like_missing_ones(tmp_path):
    rgb(tmp_path / "data" / "a.png", 16, 16)
    (tmp_path / "text.pt").write_text("not weights")
    code, _, err = cli("benchmark", "--task", "demosaic", "--data-dir", tmp_path / "data", "--methods", "ugtv",
                       "--weights", f"ugtv={tmp_path / 'text.pt'}")
    assert code == 1 and "text.pt: not a readable weights file" in err and "skipped" not in err, err


def test_overlap_of_half_the_tile_is_a_usage_error(tmp_path):
    src = rgb(tmp_path / "a.png")
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "--overlap", "1000", "--tile", "64", "-o", tmp_path / "o.png")
    assert code == 2 and "--overlap 1000 must be below half the --tile (64)" in err
    assert cli("upscale2x", src, "-m", "bicubic", "--overlap", "31", "--tile", "64", "-o", tmp_path / "o.png")[0] == 0


def test_unsupported_output_extension_is_an_error_not_a_folder(tmp_path):
    src = rgb(tmp_path / "a.png")
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "-o", tmp_path / "photo.bmp")
    assert code == 2 and "unsupported output format '.bmp'" in err
    assert tree(tmp_path) == ["a.png"]
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "-o", f"{tmp_path / 'shots.bmp'}/")  # a folder, said so
    assert code == 0 and (tmp_path / "shots.bmp" / "a.png").is_file(), err


def test_train_pack_skips_and_names_a_photo_that_does_not_decode(tmp_path):
    for k in range(3):
        rgb(tmp_path / "photos" / f"p{k}.png", 96, 96, seed=k)
    (tmp_path / "photos" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    code, out, err = cli("train-pack", tmp_path / "photos", "-o", tmp_path / "pack", "--crop", "64",
                         "--budget-mib", "1", "--val-fraction", "0.3")
    assert code == 0, err
    assert f"skipped {tmp_path / 'photos' / 'broken.jpg'}: " in err
    info = json.loads((tmp_path / "pack" / "pack.json").read_text())
    assert [s["file"] for s in info["skipped"]] == [str(tmp_path / "photos" / "broken.jpg")]


# =========================================================================== nothing escapes, hangs or stays


@pytest.mark.parametrize("with_output", [True, False])
def test_suffix_cannot_leave_the_output_folder(tmp_path, with_output):
    src = rgb(tmp_path / "top" / "in" / "a.png")
    args = ["-o", tmp_path / "top" / "out"] if with_output else []
    code, _, err = cli("upscale2x", src, "-m", "bicubic", "--suffix", "/../../escaped", *args)
    assert code == 2 and "--suffix '/../../escaped' must be part of a file name" in err
    assert tree(tmp_path) == ["top", "top/in", "top/in/a.png"]  # nothing written, no folder made


def test_killed_run_leftovers_are_swept_by_the_next_run(tmp_path):
    from gsprestore.core.atomic import temp_name

    for k in range(2):
        gray(tmp_path / "in" / f"m{k}.png", seed=k)
    assert cli("demosaic", "in", "-o", "out", "-m", "bilinear", cwd=tmp_path)[0] == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    out = tmp_path / "out"
    holder = lock_holder(out / ".m9.png.claim")  # a live run's claim: its OS lock held
    try:
        # what `kill -9` during the write of m0.png left: its claim and its temporary file
        (out / ".m0.png.claim").write_text(str(dead.pid))
        stale = out / temp_name(out / "m0.png", ".part").name.replace(f".{os.getpid()}-", f".{dead.pid}-")
        stale.write_bytes(b"\0" * 1000)
        # a live run's files are not touched (its claim, above, and its temporary file)
        running = out / temp_name(out / "m9.png", ".part").name.replace(f".{os.getpid()}-", f".{live.pid}-")
        running.write_bytes(b"\0")
        code, _, err = cli("demosaic", "in", "-o", "out", "-m", "bilinear", "--skip-existing", cwd=tmp_path)
        assert code == 0, err
        assert tree(out) == sorted([".m9.png.claim", running.name, "m0.png", "m1.png"])
    finally:
        live.kill()
        live.wait()
        holder.kill()
        holder.wait()
