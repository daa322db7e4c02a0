"""core.shapes against NumPy's broadcasting (the oracle) and torch.broadcast_shapes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from gsprestore.core.shapes import broadcast_shape, broadcasts_to

SHAPES = [(), (1,), (3,), (2, 1), (2, 3), (1, 3), (4, 1, 3), (4, 2, 3), (5, 4, 1, 1), (2, 2), (0,), (1, 0)]


@pytest.mark.parametrize("a,b", list(itertools.product(SHAPES, repeat=2)))
def test_broadcast_shape_agrees_with_numpy_and_torch(a, b):
    try:
        want = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(RuntimeError, match="do not broadcast"):
            broadcast_shape(a, b)
        return
    got = broadcast_shape(torch.Size(a), b)
    assert tuple(got) == want == tuple(torch.broadcast_shapes(a, b))
    assert broadcasts_to(a, b) == (want == b)


def test_three_shapes_at_once():
    assert broadcast_shape((2, 1, 3), (4, 1), (1, 1, 1, 3)) == torch.Size([1, 2, 4, 3])
    with pytest.raises(RuntimeError):
        broadcast_shape((2, 1), (1, 3), (3, 3))
