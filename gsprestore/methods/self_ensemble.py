"""Self-ensemble: the mean of a method's output on an image and on its transpose.

A restoration network is not equivariant to the image's symmetries; averaging its outputs over
transformed copies of the input (transformed back) cancels part of its error, at the cost of one
pass per copy: the "geometric self-ensemble" of Lim et al. 2017 (EDSR+). Of the eight flips and
rotations only the **transpose** gives a second, different estimate here:

* ``demosaic``: the learned and graph models flip every Bayer pattern into RGGB before they run
  (:mod:`gsprestore.models.pattern`), so a flipped or half-turned mosaic gives back the same pass;
  the transpose keeps the pattern's 2x2 block on its diagonal (RGGB and BGGR stay, GRBG and GBRG
  swap) and changes which green sample is which neighbour, so its pass differs.
* ``upscale2x``: the input pixels sit at the even output coordinates (``HR[0::2, 0::2]``); a flip
  of an even-sized input would move them to the odd ones, the transpose keeps them.

What it gains, for twice the time, was measured on the training pack's held-out crops
(``docs/training.md``, "What we tried"). The engine tiles a wrapped restorer like
any other: each tile runs both passes (the halo is the same in both directions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .interface import Restorer

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

#: The Bayer pattern of a transposed mosaic (its top-left 2x2 block transposed).
TRANSPOSED_PATTERN = {"RGGB": "RGGB", "BGGR": "BGGR", "GRBG": "GBRG", "GBRG": "GRBG"}

#: Passes a self-ensembled restorer runs per tile (its time is this many times the method's).
PASSES = 2

#: What a self-ensembled method's label ends with: benchmark rows, ``compare --methods ugtv,ugtv+se``.
SUFFIX = "+se"


def split_label(label: str) -> tuple[str, bool]:
    """``"ugtv+se"`` -> ``("ugtv", True)``; ``"ugtv"`` -> ``("ugtv", False)``."""
    if label.lower().endswith(SUFFIX):
        return label[: -len(SUFFIX)], True
    return label, False


def self_ensemble(restorer: Restorer) -> Restorer:
    """``restorer`` run on ``y`` and on ``y`` transposed, the second output transposed back, and the
    two averaged; everything else (name, task, halo, module, recorded info) is the method's own,
    with ``info["self_ensemble"] = True``. The passes run one after the other, so the working set
    grows only by the first output held (12 bytes an output pixel, inside the engine's estimate
    for every kind of method: :data:`gsprestore.runtime.tiling.DEFAULT_BYTES_PER_PIXEL`)."""
    if restorer.info.get("self_ensemble"):
        return restorer
    plain = restorer  # the method as it runs (its own __call__)

    def fn(y: "Tensor", pattern: str = "RGGB") -> "Tensor":
        first = plain(y, pattern).float()
        second = plain(y.transpose(-1, -2).contiguous(), TRANSPOSED_PATTERN.get(pattern, pattern))
        # out of place: a network's output may be an inference tensor, not writable outside it
        return (first + second.float().transpose(-1, -2)).mul_(0.5)

    info = dict(restorer.info, self_ensemble=True)
    return Restorer(name=restorer.name, task=restorer.task, fn=fn, halo=restorer.halo, kind=restorer.kind,
                    module=restorer.module, info=info)
