"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["pytorch", "native"])
def backend(request, monkeypatch):
    """Run a test on the PyTorch path and on the optional native kernels (skipped if they do
    not build here)."""
    from gsprestore import graph as G

    if request.param == "pytorch":
        monkeypatch.setitem(G._native_state, "mod", None)
    elif not G.native_available():
        pytest.skip(f"native kernels unavailable: {G._native_state.get('error')}")
    return request.param
