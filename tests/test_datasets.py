"""Data-set registry: packaged checksums, lookup order, and one-line errors (tiny fake folders)."""

import hashlib
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from gsprestore.core.digest import sha256_file
from PIL import Image

from gsprestore.evaluation import datasets
from gsprestore.core.errors import DatasetError, UsageError

ROOT = Path(__file__).resolve().parents[1]


def make_fake(monkeypatch, parent: Path, name: str = "kodak", files=("kodim01.png", "kodim02.png", "kodim10.png")):
    """Write tiny PNGs into ``parent/<folder>`` and make them the registered files of ``name``."""
    spec = datasets.get_spec(name)
    folder = parent / spec.folder
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    sums = {}
    for f in files:
        Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(folder / f)
        sums[f] = hashlib.sha256((folder / f).read_bytes()).hexdigest()
    real = datasets.read_checksums
    monkeypatch.setattr(datasets, "read_checksums", lambda s: sums if s.name == name else real(s))
    return folder


@pytest.fixture(autouse=True)
def _no_env(monkeypatch, tmp_path):
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)
    monkeypatch.setattr(datasets, "cache_dir", lambda: tmp_path / "cache" / "datasets")


@pytest.mark.parametrize(
    "name,count,first,last",
    [("kodak", 24, "kodim01.png", "kodim24.png"), ("mcm", 18, "1.tif", "18.tif"),
     ("urban100", 100, "img_001.png", "img_100.png")],
)
def test_packaged_checksums(name, count, first, last):
    sums = datasets.read_checksums(datasets.get_spec(name))
    names = sorted(sums, key=datasets.natural_key)
    assert len(sums) == count and names[0] == first and names[-1] == last
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in sums.values())


def test_checksums_are_package_data():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "data/*.sha256" in cfg["tool"]["setuptools"]["package-data"]["gsprestore"]
    for spec in datasets.DATASETS.values():
        assert (ROOT / "gsprestore" / "data" / spec.checksum_file).is_file()


def test_natural_order():
    assert sorted(["10.tif", "2.tif", "1.tif"], key=datasets.natural_key) == ["1.tif", "2.tif", "10.tif"]


@pytest.mark.parametrize("given", ["parent", "folder"])
def test_find_under_data_dir(monkeypatch, tmp_path, given):
    folder = make_fake(monkeypatch, tmp_path / "data")
    ds = datasets.find_dataset("kodak", folder.parent if given == "parent" else folder)
    assert ds.root == folder and ds.verified and len(ds) == 3
    assert [p.name for p in ds.files] == ["kodim01.png", "kodim02.png", "kodim10.png"]


def test_env_var_then_cache(monkeypatch, tmp_path):
    folder = make_fake(monkeypatch, tmp_path / "env")
    monkeypatch.setenv(datasets.ENV_VAR, str(folder.parent))
    assert datasets.find_dataset("kodak").root == folder
    monkeypatch.delenv(datasets.ENV_VAR)
    with pytest.raises(DatasetError, match="default cache folder"):
        datasets.find_dataset("kodak")
    cached = tmp_path / "cache" / "datasets"
    cached.mkdir(parents=True)
    folder.rename(cached / "kodak24")
    assert datasets.find_dataset("kodak").root == cached / "kodak24"


def test_explicit_dir_wins_over_env(monkeypatch, tmp_path):
    folder = make_fake(monkeypatch, tmp_path / "env")
    monkeypatch.setenv(datasets.ENV_VAR, str(folder.parent))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError) as e:
        datasets.find_dataset("kodak", tmp_path / "empty")
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "empty") in msg and "kodak24" in msg and "--data-dir" in msg


def test_missing_folder_and_files(monkeypatch, tmp_path):
    with pytest.raises(DatasetError, match="no such folder"):
        datasets.find_dataset("mcm", tmp_path / "nope")
    folder = make_fake(monkeypatch, tmp_path, "mcm", files=("1.tif", "2.tif", "3.tif"))
    (folder / "2.tif").unlink()
    with pytest.raises(DatasetError) as e:
        datasets.find_dataset("mcm", tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{folder}: 1 of 3 mcm files missing (2.tif)") and "\n" not in msg


def test_checksum_mismatch_names_the_file(monkeypatch, tmp_path):
    folder = make_fake(monkeypatch, tmp_path)
    assert datasets.find_dataset("kodak", tmp_path).verified
    with open(folder / "kodim02.png", "ab") as f:
        f.write(b"x")  # size changes: the digest cache must not hide it
    with pytest.raises(DatasetError) as e:
        datasets.find_dataset("kodak", tmp_path)
    assert str(e.value).startswith(f"{folder / 'kodim02.png'}: SHA-256")
    ds = datasets.find_dataset("kodak", tmp_path, checksums=False)
    assert not ds.verified and len(ds) == 3


def test_unknown_dataset(tmp_path):
    with pytest.raises(UsageError, match="unknown dataset"):
        datasets.find_dataset("set14", tmp_path)


@pytest.fixture
def mirror(monkeypatch, tmp_path):
    """A local HTTP server on 127.0.0.1 (ephemeral port, own thread) serving a generated fixture
    data set at ``<base>/kodak24/<file>``; the registered kodak checksums become the fixture's.
    Yields (base_url, {name: bytes}, request log)."""
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    src = make_fake(monkeypatch, served)
    blobs = {p.name: p.read_bytes() for p in src.iterdir()}
    log = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            log.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", blobs, log
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_download_into_cache_and_reuse(mirror, monkeypatch, tmp_path):
    base, blobs, log = mirror
    monkeypatch.setenv(datasets.URL_ENV_VAR, base + "/")
    ds = datasets.find_dataset("kodak", download_missing=True)
    cached = tmp_path / "cache" / "datasets" / "kodak24"
    assert ds.root == cached and ds.verified and [p.name for p in ds.files] == ["kodim01.png", "kodim02.png",
                                                                                "kodim10.png"]
    assert {p.name: p.read_bytes() for p in cached.iterdir()} == blobs  # no temp files left
    n = len(log)
    datasets.find_dataset("kodak", download_missing=True)
    assert len(log) == n  # complete and verified: nothing fetched again
    (cached / "kodim02.png").write_bytes(b"damaged")
    datasets.find_dataset("kodak", download_missing=True)
    assert len(log) == n + 1 and (cached / "kodim02.png").read_bytes() == blobs["kodim02.png"]


def test_download_into_data_dir_with_base_url(mirror, tmp_path):
    base, blobs, _ = mirror
    progress = []
    folder = datasets.download(datasets.get_spec("kodak"), tmp_path / "mine", base_url=base,
                               progress=lambda d, t, n: progress.append((d, t, n)))
    assert folder == tmp_path / "mine" / "kodak24" and progress[-1] == (3, 3, "kodim10.png")
    ds = datasets.find_dataset("kodak", tmp_path / "mine2", download_missing=True, base_url=base)
    assert ds.root == tmp_path / "mine2" / "kodak24" and len(ds) == 3


def test_download_checksum_mismatch_names_the_file(mirror, monkeypatch, tmp_path):
    base, _, _ = mirror
    sums = dict(datasets.read_checksums(datasets.get_spec("kodak")))
    sums["kodim02.png"] = "0" * 64
    monkeypatch.setattr(datasets, "read_checksums", lambda s: sums)
    with pytest.raises(DatasetError) as e:
        datasets.find_dataset("kodak", tmp_path / "d", download_missing=True, base_url=base)
    msg = str(e.value)
    target = tmp_path / "d" / "kodak24" / "kodim02.png"
    assert msg.startswith(f"{target}: checksum mismatch") and "\n" not in msg
    assert sorted(p.name for p in target.parent.iterdir()) == ["kodim01.png"]  # nothing partial kept


def test_download_network_errors(mirror, tmp_path):
    base, _, _ = mirror
    spec = datasets.get_spec("mcm")  # not served: HTTP 404
    with pytest.raises(DatasetError, match=r"1\.tif: download failed: HTTP 404") as e:
        datasets.download(spec, tmp_path / "d", base_url=base)
    assert "\n" not in str(e.value) and list((tmp_path / "d" / "mcm").iterdir()) == []
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DatasetError, match="download failed: .*refused"):
        datasets.download(spec, tmp_path / "d", base_url=f"http://127.0.0.1:{port}", timeout=5)


def test_registered_sources():
    for spec in datasets.DATASETS.values():
        first = sorted(datasets.read_checksums(spec), key=datasets.natural_key)[0]
        url = datasets.file_url(spec, first, base_url="")
        assert url.startswith("https://") and url.endswith("/" + first)
    assert datasets.file_url(datasets.get_spec("mcm"), "1.tif", "http://h/x/") == "http://h/x/mcm/1.tif"


def test_custom_folder(tmp_path):
    d = tmp_path / "shots"
    d.mkdir()
    for name in ["b10.png", "b2.TIF", "a.tiff", "notes.txt", ".hidden.png"]:
        (d / name).write_bytes(b"x")
    (d / "sub.png").mkdir()
    for ds in (datasets.find_dataset("custom", d), datasets.find_dataset(None, d)):
        assert [p.name for p in ds.files] == ["a.tiff", "b2.TIF", "b10.png"]
        assert ds.custom and not ds.verified and ds.name == "shots"
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no images"):
        datasets.find_dataset("custom", tmp_path / "empty")
    with pytest.raises(UsageError, match="needs --data-dir"):
        datasets.find_dataset("custom")
    with pytest.raises(DatasetError, match="no such folder"):
        datasets.find_dataset("custom", tmp_path / "nope")


def test_sha256_file(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc" * 1000)
    assert sha256_file(p, cached=True) == hashlib.sha256(b"abc" * 1000).hexdigest()
