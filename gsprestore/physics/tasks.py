"""What a task is: the one place that says how a ground truth is observed and how a result is scored.

A task (PROTOCOL, docs/protocol.md) is a sampling operator ``H`` with its adjoint, and the channel
space the protocol scores in:

* ``demosaic``: ``y = H x`` is the Bayer mosaic of the RGB image (:func:`gsprestore.physics.sampling.mosaic`,
  any of the four patterns), same size, scored in RGB;
* ``upscale2x``: ``y = H x = x[..., 0::2, 0::2]`` (plain decimation), output 2x the input, scored on
  BT.601 luma Y.

Every method, the benchmark and the trainer build observations and network inputs here:
``observe`` (``H x``) and ``observation`` (``(H^T y, H^T 1)``, the input of the graph models).
A new task is one more :class:`Task` entry (and the methods that do it). No torch import at
module level (``gsprestore --help`` stays fast).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor


@dataclass(frozen=True)
class Task:
    """``name``; ``scale``: output size / input size; ``score_space``: the channel space the
    protocol scores in (:func:`gsprestore.metrics.to_space`); ``takes_pattern``: the observation
    is a Bayer mosaic and depends on its pattern; ``suffix``: what an output's name gets by default."""

    name: str
    scale: int
    score_space: str
    takes_pattern: bool
    summary: str
    suffix: str


TASK_SPECS: dict[str, Task] = {
    t.name: t
    for t in [
        Task("demosaic", 1, "rgb", True, "Bayer mosaic (RGGB, BGGR, GRBG, GBRG) -> RGB", "-demosaic"),
        Task("upscale2x", 2, "y", False, "image -> 2x larger (the input is the even grid of the output)", "-2x"),
    ]
}
TASKS: tuple[str, ...] = tuple(TASK_SPECS)


def check_task(task: str) -> str:
    """``task`` if it is a task name, else a :class:`UsageError` listing them."""
    if task not in TASK_SPECS:
        raise UsageError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return task


def get_task(task: str) -> Task:
    return TASK_SPECS[check_task(task)]


def is_mosaic(task: str) -> bool:
    """The task observes a Bayer mosaic (one channel, a pattern, RGB out): what the callers that
    treat demosaicking apart ask, instead of comparing task names."""
    return get_task(task).takes_pattern


def task_scale(task: str) -> int:
    """Output side / input side."""
    return get_task(task).scale


def score_space(task: str) -> str:
    """The protocol's channel space: RGB for demosaicking, BT.601 luma Y for 2x."""
    return get_task(task).score_space


def observe(task: str, gt: "Tensor", pattern: str = "RGGB") -> "Tensor":
    """The observation ``y = H gt`` of a ground truth ``(..., 3, H, W)``."""
    from . import sampling

    if is_mosaic(task):
        return sampling.mosaic(gt, pattern)
    return sampling.decimate(gt)


def observation(task: str, y: "Tensor", pattern: str = "RGGB") -> tuple["Tensor", "Tensor"]:
    """Full-resolution ``(known, mask)`` for a task's observation ``y``: ``known = H^T y`` and
    ``mask = H^T H 1`` (1 where a value was observed, per channel), both ``(B, C, H, W)``.
    Demosaicking gives C = 3; 2x interpolation keeps the input's channel count."""
    from . import sampling

    if is_mosaic(task):
        known = sampling.mosaic_adjoint(y, pattern)
        mask = sampling.bayer_masks(y.shape[-2], y.shape[-1], pattern, device=y.device, dtype=y.dtype)
        return known, mask.expand_as(known)
    known = sampling.decimate_adjoint(y)
    mask = sampling.decimation_mask(known.shape[-2], known.shape[-1], device=y.device, dtype=y.dtype)
    return known, mask.expand_as(known)


def network_input(task: str, gt: "Tensor", pattern: str = "RGGB") -> tuple["Tensor", "Tensor"]:
    """``observation(observe(gt))``: what a graph model sees for a ground truth (training,
    validation)."""
    return observation(task, observe(task, gt, pattern), pattern)


def restored_psnr(restorer: Callable, task: str, image: Any, pattern: str = "RGGB") -> float:
    """PSNR (dB) of ``restorer`` on one ground-truth image under the protocol (docs/protocol.md):
    the observation of :func:`observe`, scored in the task's channel space (RGB
    for demosaicking, BT.601 Y for 2x), float output not clipped. ``image`` is ``(H, W, 3)`` in [0, 1]
    (NumPy or torch), H and W even."""
    import numpy as np
    import torch

    from ..metrics import psnr, to_space

    gt = torch.as_tensor(np.ascontiguousarray(image), dtype=torch.float32).permute(2, 0, 1).unsqueeze(0)
    with torch.no_grad():
        out = restorer(observe(task, gt, pattern), pattern)
    space = score_space(task)
    return float(psnr(to_space(out.float(), space), to_space(gt, space)))
