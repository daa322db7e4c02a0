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

from gsprestore.io import read_image, write_image

from cli_runner import cli

ROOT = Path(__file__).resolve().parents[1]
GSPRESTORE = [sys.executable, "-c", "import sys; from gsprestore.cli.app import main; sys.argv[0] = 'gsprestore'; main()"]


def run_cli(*args: str, cwd: Path, timeout: float = 120, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The real command line in a fresh interpreter (this checkout, PyTorch path)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "GSPRESTORE_NATIVE": "0", **(env or {})}
    return subprocess.run([*GSPRESTORE, *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, **kw)


def rgb(path: Path, h: int = 16, w: int = 20, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, np.random.default_rng(seed).random((h, w, 3)), 8)
    return path


def gray(path: Path, h: int = 16, w: int = 20, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, np.random.default_rng(seed).random((h, w)), 8)
    return path


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
    from gsprestore import fileid

    rgb(tmp_path / "in" / "A" / "x.png")
    rgb(tmp_path / "in" / "a" / "X.png", seed=1)
    monkeypatch.setattr(fileid, "case_insensitive", lambda folder: True)
    code, _, err = cli("upscale2x", "in/A/x.png", "in/a/X.png", "-o", "out/", "-m", "bicubic", cwd=tmp_path)
    assert code == 2 and "would both be written to" in err, err
    assert not (tmp_path / "out").exists()


def test_case_insensitive_detection(tmp_path):
    from gsprestore.fileid import case_insensitive, path_key

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
