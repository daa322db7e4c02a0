"""The command line's edges (issues 50 / 51): Ctrl-C and SIGTERM are one line and exit 128 + signal,
with what a batch finished and how to go on, also during start-up; the parser's errors are one line
and exit 2; ``--help`` on a narrow terminal (or a pipe) keeps every option name whole."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
from PIL import Image


def test_ctrl_c_in_a_batch_says_what_was_done_and_how_to_go_on(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)).save(src / f"p{i}.png")
    code = ("import signal, sys\n"
            # as from a terminal, whoever started the tests (a background job starts with SIGINT
            # ignored, and gsprestore then leaves it ignored, rightly)
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "import gsprestore.imageio.images as images\n"
            "real, calls = images.write_image, []\n"
            "def second_is_interrupted(*a, **k):\n"
            "    calls.append(1)\n"
            "    if len(calls) == 2:\n"
            "        signal.raise_signal(signal.SIGINT)\n"
            "    return real(*a, **k)\n"
            "images.write_image = second_is_interrupted\n"
            "sys.argv = ['gsprestore'] + sys.argv[1:]\n"
            "from gsprestore.cli.entry import main\n"
            "main()\n")
    res = subprocess.run([sys.executable, "-c", code, "upscale2x", str(src), "-o", str(tmp_path / "out"),
                          "-m", "bicubic"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr
    assert "stopped with 1 of 3 file(s) done (1 written" in res.stderr
    assert "run the same command again with --skip-existing" in res.stderr
    assert res.stderr.strip().endswith("interrupted; unfinished outputs removed")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["p0.png"]  # nothing half-written
    again = subprocess.run([sys.executable, "-m", "gsprestore", "upscale2x", str(src), "-o", str(tmp_path / "out"),
                            "-m", "bicubic", "--skip-existing"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "2 written" in again.stderr and "1 skipped" in again.stderr, again.stderr


def test_a_ctrl_c_while_the_app_loads_is_one_line(monkeypatch, capsys):
    from gsprestore.cli import entry

    class Loading(types.ModuleType):
        def __getattr__(self, name):
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "gsprestore.cli.app", Loading("gsprestore.cli.app"))
    import gsprestore.cli as cli_package

    monkeypatch.delattr(cli_package, "app", raising=False)
    with pytest.raises(SystemExit) as done:
        entry.main()
    assert done.value.code == 130 and capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("args, start", [
    (["demosaic", "x.png", "--metod", "a"], "error: No such option: --metod (Possible options:"),
    (["demosaic", "x.png", "--tile", "abc"], "error: Invalid value for '--tile'"),
    (["demosaic", "x.png", "--method"], "error: Option '--method' requires an argument"),
    (["nosuch"], "error: No such command 'nosuch'"),
])
def test_parser_errors_are_one_line(args, start):
    res = subprocess.run([sys.executable, "-m", "gsprestore", *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start) and "--help`" in lines[0], res.stderr


def test_help_on_a_narrow_terminal_keeps_every_option_name(monkeypatch):
    import os

    env = {**os.environ, "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-m", "gsprestore", "train", "--help"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert res.returncode == 0 and "\u2026" not in res.stdout
    for name in ("--step-size-lr-scale", "--downscale-filter", "--no-grad-checkpoint", "--no-progress",
                 "--mine-share", "--color-jitter"):
        assert name in res.stdout, name
    assert max(len(line) for line in res.stdout.splitlines()) <= 80


def test_pillows_bomb_warning_never_leaks_before_our_answer(tmp_path):
    """Issue 51 (round 4): a 100-MP input printed Pillow's two-line DecompressionBombWarning before
    the tool's own lines. Every Pillow open goes through imageio.images.pillow(), which sets
    Pillow's limit to ours (checked on the header first); here Pillow's limit is made tiny so that
    a 64x48 image would warn if any open did not."""
    src = tmp_path / "a.png"
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(src)
    code = ("import sys, PIL.Image\n"
            "PIL.Image.MAX_IMAGE_PIXELS = 1000\n"
            "sys.argv = ['gsprestore'] + sys.argv[1:]\n"
            "from gsprestore.cli.entry import main\n"
            "main()\n")
    for args in (["upscale2x", str(src), "-o", str(tmp_path / "o.png"), "-m", "bicubic"],
                 ["mosaic", str(src), "-o", str(tmp_path / "m.png")]):
        res = subprocess.run([sys.executable, "-W", "default", "-c", code, *args], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        assert "Warning" not in res.stderr and "warnings.warn" not in res.stderr, res.stderr
