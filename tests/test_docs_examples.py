"""Every command example of docs/cli.md (and of the README's usage block) runs as written, on small
generated inputs of the names the examples use (issue 24).

The examples are parsed from the documents' fenced code blocks (``\\`` continuations joined,
``# comments`` dropped, ``~`` expanded to a fake home holding the data folders), each run in a
fresh copy of one workspace, in-process, like the console script. Only :data:`SKIPS` are left out
(data sets, the network, training runs), each with its reason; a new example that needs
something else makes this test fail until it runs or is listed there. Also: no command's
``--help`` shows a Python type tag (``<str>``, ``<bool>``).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "docs" / "cli.md", ROOT / "README.md")

#: Examples not run: (regular expression matched at the start of the command line, reason). Keep
#: it short and explicit; every rule must match an example.
SKIPS = [
    (r"gsprestore benchmark .*--dataset (kodak|mcm|urban100)\b",
     "needs the Kodak / McM / Urban100 data set (or --download: the network)"),
    (r"gsprestore train ", "a training run (a 10-minute fine-tuning budget to 30 epochs on CUDA), or elided '...'"),
]
NEEDS_CUDA = ("--device cuda",)  # run only where a CUDA device is present (`models --device cuda` needs none)


def doc_commands() -> list[tuple[str, str]]:
    """``(document name, command line)`` of every ``gsprestore`` line in the documents' code blocks."""
    found = []
    for doc in DOCS:
        for body in re.findall(r"```[a-z]*\n(.*?)```", doc.read_text(), re.S):
            for line in body.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()  # a '#' after a blank starts a comment
                if line.startswith("gsprestore "):
                    found.append((doc.name, " ".join(line.split())))
    return found


def _skip_reason(command: str) -> str | None:
    return next((reason for rule, reason in SKIPS if re.match(rule, command)), None)


def _photo(h: int = 32, w: int = 40, seed: int = 0) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    noise = np.random.default_rng(seed).random((h, w, 3)) * 0.1
    return np.clip(np.stack([x, y, 1 - x * y], axis=2) * 0.9 + noise, 0, 1)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """One folder with every input the examples name, small: photos (PNG, JPEG), mosaics, camera
    RAW files (DNGs, also under .NEF / .CR2 names: LibRaw goes by content), folders, a RAW+JPEG
    shoot with a sub-folder of TIFF mosaics, a copy of the shipped uGTV weights, data folders
    under a fake home."""
    from gsprestore.imageio.camera_raw import mosaic_for_dng, srgb_decode, write_dng
    from gsprestore.imageio.images import write_image
    from gsprestore.physics.sampling import mosaic_array

    ws = tmp_path_factory.mktemp("docs") / "ws"
    ws.mkdir()
    rgb = _photo()
    write_image(ws / "photo.png", _photo(88, 128), 8)  # explain's --pixel 120,80 lies inside
    write_image(ws / "photo.jpg", rgb, 8)
    write_image(ws / "raw_bayer.png", mosaic_array(rgb, "RGGB"), 8)
    write_image(ws / "raw.png", mosaic_array(rgb, "RGGB"), 16)
    for name in ("IMG_0042.dng", "IMG_0042.NEF", "IMG_0042.CR2"):
        write_dng(ws / name, mosaic_for_dng(srgb_decode(rgb), "RGGB"), "RGGB")
    for folder in ("photos", "folder", "my_photos"):
        (ws / folder).mkdir()
        for k in range(2):
            write_image(ws / folder / f"p{k}.png", _photo(seed=k + 1), 8)
    shoot = ws / "shoot"
    (shoot / "day2").mkdir(parents=True)
    write_dng(shoot / "IMG_0001.dng", mosaic_for_dng(srgb_decode(rgb), "GRBG"), "GRBG")
    write_image(shoot / "IMG_0001.JPG", rgb, 8)
    write_image(shoot / "day2" / "m.tif", mosaic_array(_photo(seed=3), "RGGB"), 16)
    shutil.copy(ROOT / "gsprestore" / "weights" / "ugtv_demosaic.pt", ws / "my_ugtv.pt")
    for folder in ("photos", "bsds432"):
        data = ws / "home" / "datasets" / "train" / folder
        data.mkdir(parents=True)
        for k in range(3):
            write_image(data / f"{folder}{k}.png", _photo(144, 160, seed=10 + k), 8)
    return ws


COMMANDS = doc_commands()


def test_the_documents_have_examples_and_every_skip_is_used():
    assert len(COMMANDS) >= 30
    for rule, _ in SKIPS:
        assert any(re.match(rule, c) for _, c in COMMANDS), f"skip rule matching no example: {rule}"
    # the skips leave most examples running
    assert sum(_skip_reason(c) is None for _, c in COMMANDS) >= 30


@pytest.mark.parametrize("doc,command", COMMANDS, ids=[f"{d}:{c[11:60]}" for d, c in COMMANDS])
def test_doc_example_runs(workspace, tmp_path, doc, command):
    reason = _skip_reason(command)
    if reason is not None:
        pytest.skip(reason)
    if any(flag in command for flag in NEEDS_CUDA) and not command.startswith("gsprestore models"):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
    ws = tmp_path / "ws"
    shutil.copytree(workspace, ws)
    home = ws / "home"
    args = [a.replace("~", str(home), 1) if a.startswith("~") else a for a in shlex.split(command)[1:]]
    for flag, value in zip(args, args[1:]):  # what an example writes is not there before it (raw_bayer.png)
        if flag in ("-o", "--output") and (ws / value).is_file():
            (ws / value).unlink()
    before = {p for p in ws.rglob("*")}
    code, out, err = cli(*args, cwd=ws)
    assert code == 0, f"{doc}: `{command}` exited {code}:\n{err}"
    assert "error:" not in err, err
    written = {p for p in ws.rglob("*")} - before
    assert written or out.strip(), f"`{command}` wrote nothing and printed nothing"


def test_help_shows_no_python_type_tags():
    from gsprestore.cli.registry import COMMANDS as REGISTERED

    names = [name or fn.__name__ for name, fn, _ in REGISTERED]
    assert {"demosaic", "train", "benchmark", "compare"} <= set(names)
    for name in names:
        code, out, _ = cli(name, "--help")
        assert code == 0
        tags = re.findall(r"<(?:bool|str|int|float|path|list\[[^\]]*\])[^>]*>", out)
        assert not tags, f"`gsprestore {name} --help` shows {tags}"
    code, out, _ = cli("demosaic", "--help")
    assert re.search(r"--tile\s+N\b", out) and re.search(r"--output\s+-o\s+PATH\b", out)
