"""Hand-written PNG / TIFF codecs or a maintained library? (issue 38; docs/architecture.md, "Libraries").

For 16-bit PNG, gsprestore.imageio.png is set against every maintained codec pip can install
here: pypng (pure Python), OpenCV (libpng), imagecodecs (libpng), and Pillow / imageio's Pillow
plugin. For TIFF, gsprestore.imageio.tiff against tifffile, with and without imagecodecs (tifffile
needs it for LZW, the floating-point predictor and other compressions; the script runs itself in
a child process where importing imagecodecs fails). What each one is asked:

* **features**, each tried on a real round trip (a ``yes`` is a bit-exact result): read and
  write 16-bit gray / gray+alpha / RGB / RGBA PNG, an ICC profile (``iCCP``) and a text chunk
  (``tEXt``); read LZW, Deflate with the horizontal predictor, the floating-point predictor, tiles
  and planar TIFFs, write an ICC profile and an extra (alpha) sample;
* **bounded inflate**: a 64x64 16-bit RGB PNG (a float TIFF) whose data inflates to 256 MiB, and a
  PNG whose ``iCCP`` does: each read in a child process, its wall time and peak resident memory
  (``VmHWM``) printed beside the same child reading a normal file;
* **speed**: read and write a 3000x2000 16-bit RGB image (smooth content plus noise in the low
  bits, as a 16-bit photograph has), Deflate level 3 for PNG (what gsprestore writes) and 6 with
  the horizontal predictor for TIFF; best of ``--repeats``; and the file size;
* **install size** of each library with the dependencies it adds (from the installed files).

Libraries that are not installed are skipped. Run with the others' load in mind (the figures in
the docs were taken under ``nice -n 10`` on a 2-core machine running other jobs)::

    .venv/bin/pip install pypng imagecodecs opencv-python-headless
    .venv/bin/python lab/research/image_codecs.py --repeats 3
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from gsprestore_lab.timing import best_of as best
from gsprestore.imageio import png as pngcodec, tiff as tiffcodec



def _srgb_profile() -> bytes:
    from PIL import ImageCms

    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


ICC = _srgb_profile()  # a real profile: libpng checks the header of what it reads and writes
TEXT = {"Software": "gsprestore research"}
BOMB = 256 << 20


def _have(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def install_size(*dists: str) -> str:
    """Megabytes of the installed files of ``dists`` (a library and what it adds)."""
    total = 0
    for name in dists:
        try:
            d = md.distribution(name)
        except md.PackageNotFoundError:
            return "not installed"
        total += sum(os.path.getsize(d.locate_file(f)) for f in d.files or [] if os.path.exists(d.locate_file(f)))
    return f"{total / 1e6:.1f} MB"


# ------------------------------------------------------------------------------------------- PNG codecs
# Each: read(bytes) -> (array (H, W, C) in R, G, B, A order, icc or None, text dict or None);
# write(array, icc, text) -> bytes (icc / text None when the library cannot carry them).


def ours_read(data):
    info = pngcodec.read_chunks(data)
    return pngcodec.decode(info), info.icc_profile, info.text


def ours_write(a, icc=None, text=None):
    buf = io.BytesIO()
    pngcodec.encode(buf, a, icc_profile=icc, text=text, level=3)
    return buf.getvalue()


def pypng_read(data):
    import png

    w, h, rows, info = png.Reader(bytes=data).asDirect()
    a = np.vstack([np.asarray(r, dtype=np.uint16 if info["bitdepth"] == 16 else np.uint8) for r in rows])
    return a.reshape(h, w, info["planes"]), None, None  # iCCP / tEXt: not parsed (raw chunks only)


def pypng_write(a, icc=None, text=None):
    import png

    h, w, c = a.shape
    if icc is not None or text is not None:
        raise NotImplementedError("png.Writer takes no iCCP / tEXt")
    buf = io.BytesIO()
    png.Writer(w, h, greyscale=c in (1, 2), alpha=c in (2, 4), bitdepth=a.dtype.itemsize * 8,
               compression=3).write(buf, a.reshape(h, w * c))
    return buf.getvalue()


def _bgr(a):
    c = a.shape[2]
    return a[:, :, [2, 1, 0, 3][:c]] if c >= 3 else a


def cv2_read(data):
    import cv2

    icc = None
    if hasattr(cv2, "imdecodeWithMetadata"):  # OpenCV 4.12+: EXIF, XMP, ICC
        a, types, meta = cv2.imdecodeWithMetadata(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        for t, m in zip(types, meta):
            if t == cv2.IMAGE_METADATA_ICCP:
                icc = np.asarray(m).tobytes()
    else:
        a = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if a is None:
        raise ValueError("not decoded")
    a = a[:, :, None] if a.ndim == 2 else a
    return np.ascontiguousarray(_bgr(a)), icc, None


def cv2_write(a, icc=None, text=None):
    import cv2

    if text is not None:
        raise NotImplementedError("no text chunks")
    params = [cv2.IMWRITE_PNG_COMPRESSION, 3]
    img = np.ascontiguousarray(_bgr(a))
    if icc is not None:
        ok, buf = cv2.imencodeWithMetadata(".png", img, [cv2.IMAGE_METADATA_ICCP],
                                           [np.frombuffer(icc, np.uint8)], params)
    else:
        ok, buf = cv2.imencode(".png", img, params)
    if not ok:
        raise ValueError("not encoded")
    return buf.tobytes()


def imagecodecs_read(data):
    import imagecodecs

    a = imagecodecs.png_decode(data)
    return (a[:, :, None] if a.ndim == 2 else a), None, None


def imagecodecs_write(a, icc=None, text=None):
    import imagecodecs

    if icc is not None or text is not None:
        raise NotImplementedError("png_encode takes no metadata")
    return bytes(imagecodecs.png_encode(a if a.shape[2] > 1 else a[:, :, 0], level=3))


def pillow_read(data):
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        a = np.asarray(im)
        icc, text = im.info.get("icc_profile"), {k: v for k, v in im.info.items() if isinstance(v, str)}
    return (a[:, :, None] if a.ndim == 2 else a), icc, text


def pillow_write(a, icc=None, text=None):
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for k, v in (text or {}).items():
        info.add_text(k, v)
    buf = io.BytesIO()
    Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a).save(buf, "PNG", pnginfo=info, icc_profile=icc,
                                                              compress_level=3)
    return buf.getvalue()


PNG_CODECS = {
    "gsprestore.imageio.png": ("", ours_read, ours_write, ()),
    "pypng": ("png", pypng_read, pypng_write, ("pypng",)),
    "opencv (cv2)": ("cv2", cv2_read, cv2_write, ("opencv-python-headless",)),
    "imagecodecs": ("imagecodecs", imagecodecs_read, imagecodecs_write, ("imagecodecs",)),
    "Pillow / imageio": ("PIL", pillow_read, pillow_write, ("pillow",)),
}


def _try(fn) -> str:
    try:
        ok = fn()
        return "no" if ok is None else "yes" if ok else "WRONG"
    except NotImplementedError:
        return "no"
    except Exception as exc:  # noqa: BLE001 - any failure of a library is a "no", with its reason
        return f"no ({type(exc).__name__}: {str(exc).splitlines()[0][:40] if str(exc) else ''})"


def png_features(name, read, write) -> dict[str, str]:
    rng = np.random.default_rng(0)
    out = {}
    for c, label in ((1, "gray"), (2, "gray+a"), (3, "RGB"), (4, "RGBA")):
        a = rng.integers(0, 65536, (37, 53, c), dtype=np.uint16)
        out[f"read {label}"] = _try(lambda a=a: np.array_equal(read(ours_write(a))[0], a))
        out[f"write {label}"] = _try(lambda a=a: np.array_equal(ours_read(write(a))[0], a))
    a = rng.integers(0, 65536, (8, 8, 3), dtype=np.uint16)
    def same(got, want):
        return None if got is None else got == want  # None: the library does not give it

    out["read iCCP"] = _try(lambda: same(read(ours_write(a, icc=ICC))[1], ICC))
    out["write iCCP"] = _try(lambda: ours_read(write(a, icc=ICC))[1] == ICC)
    out["read tEXt"] = _try(lambda: same((read(ours_write(a, text=TEXT))[2] or None), TEXT))
    out["write tEXt"] = _try(lambda: ours_read(write(a, text=TEXT))[2] == TEXT)
    return out


def test_image(h=2000, w=3000) -> np.ndarray:
    """Smooth 16-bit RGB content with noise in the low bits (a 16-bit photograph's entropy)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([0.5 + 0.4 * np.sin(x / 173 + k) * np.cos(y / 131 - k) for k in range(3)], axis=2)
    noise = np.random.default_rng(1).normal(0, 40, (h, w, 3)).astype(np.float32)
    return np.clip(base * 65535 + noise, 0, 65535).astype(np.uint16)


def png_speed(read, write, img, repeats) -> str:
    try:
        data = write(img)
        assert np.array_equal(ours_read(data)[0], img)
        ours = ours_write(img)
        assert np.array_equal(read(ours)[0], img)
    except NotImplementedError:
        return "-"
    except Exception as exc:  # noqa: BLE001
        return f"fails ({type(exc).__name__})"
    tr = best(lambda: read(ours), repeats)
    tw = best(lambda: write(img), repeats)
    return f"read {tr:6.2f} s   write {tw:6.2f} s   {len(data) / 1e6:5.1f} MB"


# ------------------------------------------------------------------------------------- bombs (child runs)


def _png_bytes(w, h, chunks) -> bytes:
    def chunk(t, b):
        return len(b).to_bytes(4, "big") + t + b + (zlib.crc32(t + b) & 0xFFFFFFFF).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([16, 2, 0, 0, 0])
    return pngcodec.SIGNATURE + chunk(b"IHDR", ihdr) + b"".join(chunk(t, b) for t, b in chunks) + chunk(b"IEND", b"")


def write_bombs(folder: Path) -> dict[str, Path]:
    zeros = zlib.compress(b"\0" * BOMB, 9)
    small = zlib.compress(b"\0" * (64 * (1 + 64 * 6)))
    icc_chunk = b"ICC Profile\0\0" + zeros
    files = {"png normal": _png_bytes(64, 64, [(b"IDAT", small)]),
             "png IDAT bomb": _png_bytes(64, 64, [(b"IDAT", zeros)]),
             "png iCCP bomb": _png_bytes(64, 64, [(b"iCCP", icc_chunk), (b"IDAT", small)])}
    for kind, strip in (("tiff normal", zlib.compress(b"\0" * 64 * 64 * 4)), ("tiff strip bomb", zeros)):
        tags = [(256, 4, 64), (257, 4, 64), (258, 3, 32), (259, 3, 8), (262, 3, 1), (273, 4, 8), (277, 3, 1),
                (278, 4, 64), (279, 4, len(strip)), (339, 3, 3)]
        ifd_at = 8 + len(strip) + len(strip) % 2
        ifd = len(tags).to_bytes(2, "little") + b"".join(
            t.to_bytes(2, "little") + typ.to_bytes(2, "little") + (1).to_bytes(4, "little") + v.to_bytes(4, "little")
            for t, typ, v in tags) + bytes(4)
        files[kind] = b"II*\0" + ifd_at.to_bytes(4, "little") + strip + b"\0" * (len(strip) % 2) + ifd
    paths = {}
    for kind, data in files.items():
        paths[kind] = folder / (kind.replace(" ", "_") + (".png" if kind.startswith("png") else ".tif"))
        paths[kind].write_bytes(data)
    return paths


def child_read(lib: str, path: str) -> None:
    """In a child process: read ``path`` with ``lib`` and print the outcome (the parent times it)."""
    if lib.endswith("-noic"):
        sys.modules["imagecodecs"] = None  # type: ignore[assignment]  # import fails: tifffile's own fallbacks
    data = Path(path).read_bytes()
    try:
        if lib.startswith("tifffile"):
            import tifffile

            a = tifffile.imread(io.BytesIO(data))
        elif lib == "tiff-ours":
            a = tiffcodec.decode(data, tiffcodec.read_ifd(data))
        else:
            name = next(k for k in PNG_CODECS if k.startswith(lib))
            a = PNG_CODECS[name][1](data)[0]
        outcome = f"decoded {a.shape}"
    except Exception as exc:  # noqa: BLE001
        outcome = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:70] if str(exc) else ''}"
    # this process's own peak (ru_maxrss would count the parent's memory at fork)
    peak = next(line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM"))
    print(f"{int(peak) / 1024:.0f}\t{outcome}")


def run_child(lib: str, path: Path) -> str:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", lib, str(path)], capture_output=True, text=True)
    secs = time.perf_counter() - t0
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else f"exit {proc.returncode}\t"
    peak, _, outcome = last.partition("\t")
    return f"{secs:5.2f} s  {peak:>5s} MB peak   {outcome[:80]}"


# ------------------------------------------------------------------------------------------------ TIFF


def tiff_report(repeats: int, folder: Path) -> None:
    """Features and speed of tifffile in this process (imagecodecs importable or not)."""
    import tifffile

    have_ic = sys.modules.get("imagecodecs") is not None and _have("imagecodecs")
    rng = np.random.default_rng(0)
    a16 = rng.integers(0, 65536, (40, 48, 3), dtype=np.uint16)
    f32 = rng.random((40, 48, 3), dtype=np.float32)
    files = json.loads((folder / "tiff_files.json").read_text())

    def read_tf(path):
        return tifffile.imread(path)

    res = {}
    for what, (path, want) in {"LZW (libtiff)": (files["lzw"], a16), "Deflate + horizontal predictor":
                               (files["deflate_pred"], a16), "float predictor (3)": (files["float_pred"], f32),
                               "tiles": (files["tiled"], a16), "planar": (files["planar"], a16),
                               "PackBits": (files["packbits"], a16)}.items():
        def rd(path=path, want=want):
            got = np.asarray(read_tf(path))
            return np.array_equal(got.transpose(1, 2, 0) if got.shape[0] == 3 else got, want)  # planar: (C, H, W)

        res[f"read {what}"] = _try(rd)

    def write_rt(**kw):
        buf = io.BytesIO()
        tifffile.imwrite(buf, a16, photometric="rgb", **kw)
        data = buf.getvalue()
        return np.array_equal(tiffcodec.decode(data, tiffcodec.read_ifd(data)), a16)

    res["write Deflate + predictor"] = _try(lambda: write_rt(compression="zlib", predictor=True))
    res["write LZW"] = _try(lambda: write_rt(compression="lzw"))
    buf = io.BytesIO()
    tifffile.imwrite(buf, np.dstack([a16, a16[:, :, :1]]), photometric="rgb", extrasamples=["unassalpha"],
                     iccprofile=ICC, software="x")
    data = buf.getvalue()
    info = tiffcodec.read_ifd(data)
    res["write alpha + ICC + software"] = "yes" if info.icc_profile == ICC and info.extra_samples == (2,) else "no"
    label = "tifffile " + tifffile.__version__ + (" + imagecodecs" if have_ic else " (no imagecodecs)")
    print(f"\n{label}")
    for k, v in res.items():
        print(f"  {k:34s} {v}")
    img = test_image()
    buf = io.BytesIO()
    tifffile.imwrite(buf, img, photometric="rgb", compression="zlib", compressionargs={"level": 6}, predictor=True)
    data = buf.getvalue()
    assert np.array_equal(tifffile.imread(io.BytesIO(data)), img)
    tr = best(lambda: tifffile.imread(io.BytesIO(data)), repeats)
    tw = best(lambda: tifffile.imwrite(io.BytesIO(), img, photometric="rgb", compression="zlib",
                                       compressionargs={"level": 6}, predictor=True), repeats)
    print(f"  3000x2000 16-bit RGB, Deflate 6 + predictor: read {tr:.2f} s, write {tw:.2f} s, {len(data) / 1e6:.1f} MB")


def make_tiff_files(folder: Path) -> None:
    """The TIFFs the features are tried on, written by tifffile + imagecodecs and OpenCV's libtiff."""
    import tifffile

    rng = np.random.default_rng(0)
    a16 = rng.integers(0, 65536, (40, 48, 3), dtype=np.uint16)
    f32 = rng.random((40, 48, 3), dtype=np.float32)
    files = {}

    def put(name, data, **kw):
        files[name] = str(folder / f"{name}.tif")
        tifffile.imwrite(files[name], data, photometric="rgb", **kw)

    put("deflate_pred", a16, compression="zlib", predictor=True)
    put("tiled", a16, tile=(16, 16))
    put("planar", a16.transpose(2, 0, 1), planarconfig="separate")
    try:
        put("float_pred", f32, compression="zlib", predictor=3)
        put("packbits", a16, compression="packbits")
    except Exception:  # noqa: BLE001 - without imagecodecs: the rows say so
        files.setdefault("float_pred", "missing")
        files.setdefault("packbits", "missing")
    files["lzw"] = str(folder / "lzw.tif")
    try:
        import cv2

        cv2.imwrite(files["lzw"], a16[:, :, ::-1])  # OpenCV's libtiff writes LZW by default
    except ImportError:
        tifffile.imwrite(files["lzw"], a16, photometric="rgb", compression="lzw")
    (folder / "tiff_files.json").write_text(json.dumps(files))


def tiff_ours(repeats: int, folder: Path) -> None:
    files = json.loads((folder / "tiff_files.json").read_text())
    rng = np.random.default_rng(0)
    a16 = rng.integers(0, 65536, (40, 48, 3), dtype=np.uint16)
    f32 = rng.random((40, 48, 3), dtype=np.float32)
    print("\ngsprestore.imageio.tiff")
    for what, key, want in (("LZW (libtiff)", "lzw", a16), ("Deflate + horizontal predictor", "deflate_pred", a16),
                            ("float predictor (3)", "float_pred", f32), ("tiles", "tiled", a16),
                            ("planar", "planar", a16), ("PackBits", "packbits", a16)):
        def rd(key=key, want=want):
            data = Path(files[key]).read_bytes()
            return np.array_equal(tiffcodec.decode(data, tiffcodec.read_ifd(data)).reshape(want.shape), want)
        print(f"  {'read ' + what:34s} {_try(rd)}")
    print(f"  {'write Deflate + predictor':34s} yes (the only layout it writes)")
    img = test_image()
    buf = io.BytesIO()
    tiffcodec.encode(buf, img)
    data = buf.getvalue()
    tr = best(lambda: tiffcodec.decode(data, tiffcodec.read_ifd(data)), repeats)
    tw = best(lambda: tiffcodec.encode(io.BytesIO(), img), repeats)
    print(f"  3000x2000 16-bit RGB, Deflate 6 + predictor: read {tr:.2f} s, write {tw:.2f} s, {len(data) / 1e6:.1f} MB")
    import tifffile

    tr = best(lambda: tifffile.imread(io.BytesIO(data)), repeats)
    print(f"  (tifffile reads this file of ours in {tr:.2f} s)")


# ------------------------------------------------------------------------------------------------ main


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_read(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--tiff-noic":
        sys.modules["imagecodecs"] = None  # type: ignore[assignment]
        tiff_report(int(sys.argv[2]), Path(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: png, tiff, bombs, speed")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    codecs = {k: v for k, v in PNG_CODECS.items() if not v[0] or _have(v[0])}
    img = test_image()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "png" not in skip:
            print("16-bit PNG: features (a 'yes' is bit-exact)")
            feats = {name: png_features(name, r, w) for name, (_, r, w, _) in codecs.items()}
            keys = list(next(iter(feats.values())))
            print(f"{'':18s}" + "".join(f"{n[:22]:>24s}" for n in feats))
            for k in keys:
                print(f"{k:18s}" + "".join(f"{feats[n][k][:22]:>24s}" for n in feats))
            print("\ninstall size (the library and what it adds to gsprestore's dependencies)")
            for name, (_, _, _, dists) in codecs.items():
                print(f"  {name:24s} {install_size(*dists) if dists else '(in the package: 348 lines)'}")
            if "speed" not in skip:
                print(f"\n3000x2000 16-bit RGB PNG, Deflate level 3, best of {args.repeats}")
                for name, (_, r, w, _) in codecs.items():
                    reps = 1 if name == "pypng" else args.repeats  # pure Python: one run says enough
                    print(f"  {name:24s} {png_speed(r, w, img, reps)}")
        if "bombs" not in skip:
            bombs = write_bombs(folder)
            print(f"\nbounded inflate: 64x64 16-bit RGB PNG / float TIFF whose data inflates to {BOMB >> 20} MiB "
                  "(wall time, the child's peak RSS, the outcome)")
            libs = [("ours", "gsprestore.imageio.png")] + [(v[0] and k.split()[0], k) for k, v in codecs.items()
                                                           if v[0]]
            for kind in ("png normal", "png IDAT bomb", "png iCCP bomb"):
                for lib, name in libs:
                    lib = "gsprestore" if lib == "ours" else lib
                    print(f"  {kind:16s} {name:24s} {run_child(lib, bombs[kind])}")
            tiff_libs = [("tiff-ours", "gsprestore.imageio.tiff")]
            if _have("tifffile"):
                tiff_libs.append(("tifffile-noic", "tifffile (no imagecodecs)"))
                if _have("imagecodecs"):
                    tiff_libs.append(("tifffile", "tifffile + imagecodecs"))
            for kind in ("tiff normal", "tiff strip bomb"):
                for lib, name in tiff_libs:
                    print(f"  {kind:16s} {name:26s} {run_child(lib, bombs[kind])}")
        if "tiff" not in skip:
            make_tiff_files(folder)
            tiff_ours(args.repeats, folder)
            if _have("imagecodecs"):
                tiff_report(args.repeats, folder)
            out = subprocess.run([sys.executable, __file__, "--tiff-noic", str(args.repeats), str(folder)],
                                 capture_output=True, text=True)
            print(out.stdout.rstrip() or out.stderr.strip().splitlines()[-1])
            print("\ninstall size: tifffile " + install_size("tifffile") + ", imagecodecs "
                  + install_size("imagecodecs"))


if __name__ == "__main__":
    main()
