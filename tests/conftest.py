"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["pytorch", "native"])
def either_backend(request):
    """Run a test on the PyTorch path and on the optional native kernels (skipped if they do
    not build here)."""
    from gsprestore import backend as BK

    if request.param == "pytorch":
        with BK.use("torch"):
            yield request.param
        return
    if not BK.available():
        pytest.skip(f"native kernels unavailable: {BK.error()}")
    yield request.param


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """The wheel ``pip install .`` would install, built once from a clean copy of the sources
    (no stale build/ folder or in-place ``.so`` can leak in; setup.py compiles the kernels);
    skips where no wheel can be built."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if (root / name).exists():
            shutil.copy2(root / name, src / name)
    shutil.copytree(root / "gsprestore", src / "gsprestore",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(tmp), str(src)],
        capture_output=True, text=True, cwd=tmp,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    (wheel,) = tmp.glob("gsprestore-*.whl")
    return wheel


@pytest.fixture
def slowed(monkeypatch):
    """``slowed(module, name, seconds=0.6)``: ``module.name`` made to sleep before it runs, with
    progress lines every 0.15 s (``GSPRESTORE_PROGRESS_INTERVAL``): a long run in a short test."""
    import time

    def slow_down(module, name: str, seconds: float = 0.6) -> None:
        real = getattr(module, name)

        def slow(*args, **kwargs):
            time.sleep(seconds)
            return real(*args, **kwargs)

        monkeypatch.setenv("GSPRESTORE_PROGRESS_INTERVAL", "0.15")
        monkeypatch.setattr(module, name, slow)

    return slow_down
