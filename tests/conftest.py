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
