"""Every example of the documentation runs as written, on small generated inputs of the names the
examples use (issues 24 and 52).

- Command examples: every ``gsprestore ...`` line in the fenced code blocks of :data:`DOCS` (the
  README, docs/cli.md, the tutorial, the how-to guides; ``\\`` continuations joined, ``# comments``
  dropped, ``~`` expanded to a fake home holding the data folders), each run once (an example
  several documents share runs once) in a fresh copy of one workspace, in-process, like the
  console script.
- Python examples: every ````` ```python ````` block of the README, DEVELOP.md and docs/ (each on
  its own, in a fresh copy of the workspace), and every ``python -c "..."`` line (in code blocks
  and inline code; in an empty folder). A block preceded by the line ``<!-- no-test -->`` is
  illustration only and is not run (:data:`NO_TEST`; use it sparingly).

Only :data:`SKIPS` and :data:`PY_SKIPS` are left out (data sets, the network, long training runs),
each with its reason; a new example that needs something else makes this test fail until it runs
or is listed there. Also: no command's ``--help`` shows a Python type tag (``<str>``, ``<bool>``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli

ROOT = Path(__file__).resolve().parents[1]
#: The documents whose ``gsprestore`` command examples run.
DOCS = (ROOT / "docs" / "cli.md", ROOT / "README.md", ROOT / "docs" / "tutorial.md",
        *sorted((ROOT / "docs" / "howto").glob("*.md")))
#: The documents whose Python blocks and ``python -c`` lines run.
PY_DOCS = (ROOT / "README.md", ROOT / "DEVELOP.md", *sorted((ROOT / "docs").rglob("*.md")))
#: The line that marks the next fenced block as illustration only (not run).
NO_TEST = "<!-- no-test -->"

#: Examples not run: (regular expression matched at the start of the command line, reason). Keep
#: it short and explicit; every rule must match an example.
SKIPS = [
    (r"gsprestore benchmark .*--dataset (kodak|mcm|urban100)\b",
     "needs the Kodak / McM / Urban100 data set (or --download: the network)"),
    (r"gsprestore train (?!.*(--max-steps|--print-recipe))", "a training run (a 10-minute fine-tuning budget to 30 epochs on CUDA), "
     "a run to resume, or elided '...'"),
]
#: ``python -c`` lines and Python blocks not run: (regular expression searched in the code, reason).
PY_SKIPS = [
    (r"find_dataset\('kodak'", "needs the Kodak data set"),
]
NEEDS_CUDA = ("--device cuda",)  # run only where a CUDA device is present (`models --device cuda` needs none)


def _name(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


def doc_commands() -> list[tuple[str, str]]:
    """``(document names, command line)`` of every ``gsprestore`` line in the documents' code
    blocks, each command once (the documents that show it joined by ``+``)."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for body in re.findall(r"```[a-z]*\n(.*?)```", doc.read_text(), re.S):
            for line in body.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()  # a '#' after a blank starts a comment
                if line.startswith("gsprestore "):
                    found.setdefault(" ".join(line.split()), []).append(doc.name)
    return [("+".join(dict.fromkeys(docs)), command) for command, docs in found.items()]


def python_blocks() -> list[tuple[str, str]]:
    """``(document:line, code)`` of every ``python`` fenced block of :data:`PY_DOCS` not marked
    :data:`NO_TEST`."""
    found = []
    for doc in PY_DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"^([ \t]*)```python[ \t]*\n(.*?)^[ \t]*```", text, re.S | re.M):
            before = text[:m.start()].rstrip().splitlines()[-1:] or [""]
            if before[0].strip() == NO_TEST:
                continue
            indent = m.group(1)
            code = "\n".join(line[len(indent):] if line.startswith(indent) else line
                             for line in m.group(2).splitlines())
            found.append((f"{_name(doc)}:{text[:m.start()].count(chr(10)) + 1}", code))
    return found


def python_c_lines() -> list[tuple[str, str]]:
    """``(document:line, code)`` of every ``python -c "CODE"`` of :data:`PY_DOCS`: each line of a
    code block, and each inline code span (which may wrap over lines: joined with blanks)."""
    found = []
    for doc in PY_DOCS:
        text = doc.read_text(encoding="utf-8")
        pieces = []  # (offset, one line of text)
        for m in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
            offset = m.start(1)
            for line in m.group(1).splitlines(keepends=True):
                pieces.append((offset, line))
                offset += len(line)
        outside = re.sub(r"```[a-z]*\n.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        pieces += [(m.start(), " ".join(m.group(1).split())) for m in re.finditer(r"`([^`]*\bpython -c [^`]*)`", outside)]
        for offset, piece in pieces:
            for m in re.finditer(r"\bpython -c (\"[^\"]*\"|'[^']*')", piece):
                found.append((f"{_name(doc)}:{text[:offset].count(chr(10)) + 1}", shlex.split(m.group(1))[0]))
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
    shoot with a sub-folder of TIFF mosaics, a test DNG (the tutorial's), copies of the shipped uGTV
    weights (also as a training run's ``model.pt``), data folders under a fake home."""
    from gsprestore.imageio.raw_develop import srgb_decode
    from gsprestore.imageio.dng import mosaic_for_dng, write_dng
    from gsprestore.imageio.images import write_image
    from gsprestore.physics.sampling import mosaic_array

    ws = tmp_path_factory.mktemp("docs") / "ws"
    ws.mkdir()
    rgb = _photo()
    write_image(ws / "photo.png", _photo(48, 64), 8)  # explain's --pixel 40,24 lies inside
    write_image(ws / "photo.jpg", rgb, 8)
    write_image(ws / "raw_bayer.png", mosaic_array(rgb, "RGGB"), 8)
    write_image(ws / "raw.png", mosaic_array(rgb, "RGGB"), 16)
    for name in ("IMG_0042.dng", "IMG_0042.NEF", "IMG_0042.CR2", "test.dng"):
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
    (ws / "runs" / "ugtv-demosaic").mkdir(parents=True)
    shutil.copy(ROOT / "gsprestore" / "weights" / "ugtv_demosaic.pt", ws / "runs" / "ugtv-demosaic" / "model.pt")
    for folder in ("photos", "bsds432"):
        data = ws / "home" / "datasets" / "train" / folder
        data.mkdir(parents=True)
        for k in range(3):
            write_image(data / f"{folder}{k}.png", _photo(144, 160, seed=10 + k), 8)
    return ws


COMMANDS = doc_commands()
PYTHON_BLOCKS = python_blocks()
PYTHON_C = python_c_lines()


def test_the_documents_have_examples_and_every_skip_is_used():
    assert len(COMMANDS) >= 30
    for rule, _ in SKIPS:
        assert any(re.match(rule, c) for _, c in COMMANDS), f"skip rule matching no example: {rule}"
    # the skips leave most examples running
    assert sum(_skip_reason(c) is None for _, c in COMMANDS) >= 30
    for rule, _ in PY_SKIPS:
        assert any(re.search(rule, c) for _, c in PYTHON_C + PYTHON_BLOCKS), f"skip rule matching no example: {rule}"
    docs = {where.split(":")[0] for where, _ in PYTHON_BLOCKS}
    assert {"README.md", "docs/reference/python.md", "docs/cli.md"} <= docs
    assert len(PYTHON_BLOCKS) >= 10 and len(PYTHON_C) >= 3
    # the marker is for illustration only, and used sparingly
    marked = sum(doc.read_text(encoding="utf-8").count(NO_TEST) for doc in PY_DOCS)
    assert marked <= 3, f"{marked} Python blocks marked {NO_TEST}: make them run instead"


@pytest.mark.parametrize("doc,command", COMMANDS, ids=[f"{d.split('+')[0]}:{c[11:60]}" for d, c in COMMANDS])
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


def _run_python(code: str, where: str, cwd: Path) -> str:
    """Run ``code`` as its own program would run (a fresh namespace, ``__name__ == "__main__"``),
    in-process, in ``cwd``; what it printed."""
    out = io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, where, "exec"), {"__name__": "__main__"})
    finally:
        os.chdir(old)
    return out.getvalue()


def _py_skip_reason(code: str) -> str | None:
    return next((reason for rule, reason in PY_SKIPS if re.search(rule, code)), None)


@pytest.mark.parametrize("where,code", PYTHON_BLOCKS, ids=[w for w, _ in PYTHON_BLOCKS])
def test_doc_python_block_runs(workspace, tmp_path, where, code):
    """Each block on its own, in a fresh copy of the workspace (the files the examples name)."""
    reason = _py_skip_reason(code)
    if reason is not None:
        pytest.skip(reason)
    ws = tmp_path / "ws"
    shutil.copytree(workspace, ws)
    _run_python(code, where, ws)


@pytest.mark.parametrize("where,code", PYTHON_C, ids=[w for w, _ in PYTHON_C])
def test_doc_python_c_line_runs(tmp_path, where, code):
    """A ``python -c`` one-liner, in an empty folder (it needs no input: a line that writes a file
    of a name the workspace holds must not find it there)."""
    reason = _py_skip_reason(code)
    if reason is not None:
        pytest.skip(reason)
    _run_python(code, where, tmp_path)


def test_help_shows_no_python_type_tags():
    from gsprestore.cli.command_table import COMMANDS as REGISTERED

    names = [name or fn.__name__ for name, fn, _ in REGISTERED]
    assert {"demosaic", "train", "benchmark", "compare"} <= set(names)
    for name in names:
        code, out, _ = cli(name, "--help")
        assert code == 0
        tags = re.findall(r"<(?:bool|str|int|float|path|list\[[^\]]*\])[^>]*>", out)
        assert not tags, f"`gsprestore {name} --help` shows {tags}"
    code, out, _ = cli("demosaic", "--help")
    # Rich's panels on a wide terminal ("--output -o PATH"), Click's listing on a narrow one
    assert re.search(r"--tile\s+N\b", out) and re.search(r"(--output\s+-o|-o, --output)\s+PATH\b", out)
