"""One interface over every method: classical baselines, non-learned graph solvers and the
learned unrolled networks. The CLI, the tiling engine, the benchmark and ``compare`` all go
through :func:`get_restorer`, so a method added to :data:`METHODS` works everywhere.

A :class:`Restorer` maps a task's *observation* to its reconstruction:

* ``demosaic``: a Bayer mosaic ``(B, 1, H, W)`` (with its ``pattern``) to RGB ``(B, 3, H, W)``;
* ``upscale2x``: a low-resolution image ``(B, C, h, w)`` to ``(B, C, 2h, 2w)`` where the input
  pixels sit at the even coordinates of the output (``HR[0::2, 0::2]`` sampling, docs/protocol.md).

Graph and learned models work on the full-resolution pair ``(known, mask)`` = ``(H^T y, H^T 1)``
given by :func:`observation`; that keeps one model code path for both tasks.

This module imports torch lazily (``gsprestore --help`` must stay fast).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import Tensor

TASKS: tuple[str, ...] = ("demosaic", "upscale2x")


@dataclass(frozen=True)
class MethodSpec:
    """Static description of a method (no torch import needed to list methods)."""

    name: str
    tasks: tuple[str, ...]
    kind: str  # "classical" | "graph" (non-learned solver) | "learned"
    factory: str  # "module:function"; ``function(task, **options) -> Restorer``
    summary: str


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in [
        MethodSpec("bilinear", ("demosaic",), "classical", "gsprestore.baselines:make_restorer",
                   "bilinear demosaicking (per-channel 3x3 interpolation)"),
        MethodSpec("malvar", ("demosaic",), "classical", "gsprestore.baselines:make_restorer",
                   "Malvar, He & Cutler 2004 gradient-corrected linear demosaicking"),
        MethodSpec("menon", ("demosaic",), "classical", "gsprestore.baselines:make_restorer",
                   "Menon, Andriani & Calvagno 2007 DDFAPD with refining step"),
        MethodSpec("bicubic", ("upscale2x",), "classical", "gsprestore.baselines:make_restorer",
                   "bicubic (Keys a=-0.75, edge replication) aligned to the sampling grid: known pixels kept"),
        MethodSpec("bicubic-halfpixel", ("upscale2x",), "classical", "gsprestore.baselines:make_restorer",
                   "bicubic with OpenCV INTER_CUBIC's half-pixel convention (the paper's baseline)"),
        MethodSpec("iglr", TASKS, "graph", "gsprestore.models:make_restorer",
                   "non-learned GLR interpolation (eq. 9) solved by CG"),
        MethodSpec("igtv", TASKS, "graph", "gsprestore.models:make_restorer",
                   "non-learned GTV interpolation (LP, eqs. 19-24) solved by ADMM"),
        MethodSpec("uglr", TASKS, "learned", "gsprestore.models:make_restorer",
                   "unrolled GLR network: 5 blocks x 4 graph-learning heads + CG"),
        MethodSpec("ugtv", TASKS, "learned", "gsprestore.models:make_restorer",
                   "unrolled GTV network: 5 blocks x 4 heads x 5 ADMM x 10 CG"),
    ]
}



def default_method(task: str) -> str:
    """The method a command uses when none is named: the learned one only when its shipped weights
    beat the best classical method on McM and Kodak (recorded scores; :mod:`gsprestore.defaults`)."""
    from .defaults import default_method as _default

    return _default(check_task(task))


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_METHOD":  # the former constant, now computed from the manifest
        return {task: default_method(task) for task in TASKS}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_task(task: str) -> str:
    if task not in TASKS:
        raise UsageError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return task


def methods_for(task: str) -> list[str]:
    """Names of every method that handles ``task``, in registry order."""
    check_task(task)
    return [m.name for m in METHODS.values() if task in m.tasks]


def method_spec(name: str, task: str | None = None) -> MethodSpec:
    spec = METHODS.get(name.lower())
    if spec is None:
        raise UsageError(f"unknown method {name!r}; expected one of {', '.join(METHODS)}")
    if task is not None and task not in spec.tasks:
        raise UsageError(
            f"method {name!r} does not do {task}; methods for {task}: {', '.join(methods_for(task))}"
        )
    return spec


@dataclass
class Restorer:
    """A ready-to-run method for one task.

    ``fn(y, pattern) -> x`` does the work on a batch. ``halo`` is the context (in output pixels)
    each side of a tile needs for tiled results to match untiled ones (used by the engine to pick
    overlaps). ``module`` is the underlying ``torch.nn.Module`` for learned/graph models (None for
    pure functions), so ``.to(device)`` and parameter counts work uniformly.
    """

    name: str
    task: str
    fn: Callable[..., "Tensor"]
    halo: int = 8
    kind: str = "classical"
    module: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    def __call__(self, y: "Tensor", pattern: str = "RGGB") -> "Tensor":
        return self.fn(y, pattern)

    @property
    def num_params(self) -> int:
        if self.module is None:
            return 0
        return sum(p.numel() for p in self.module.parameters())

    def to(self, device: "torch.device | str") -> "Restorer":
        if self.module is not None:
            self.module.to(device)
        return self


def get_restorer(name: str, task: str, **options: Any) -> Restorer:
    """Build the restorer ``name`` for ``task``. ``options`` go to the method's factory
    (e.g. ``weights=PATH`` for learned models, ``cg="exact"`` for iGLR/iGTV)."""
    check_task(task)
    spec = method_spec(name, task)
    module_name, func_name = spec.factory.split(":")
    factory = getattr(importlib.import_module(module_name), func_name)
    return factory(spec.name, task, **options)


def observation(task: str, y: "Tensor", pattern: str = "RGGB") -> tuple["Tensor", "Tensor"]:
    """Full-resolution ``(known, mask)`` for a task's observation ``y``: ``known = H^T y`` and
    ``mask = H^T H 1`` (1 where a value was observed, per channel), both ``(B, C, H, W)``.
    Demosaicking gives C = 3; 2x interpolation keeps the input's channel count."""
    from . import sampling

    check_task(task)
    if task == "demosaic":
        known = sampling.mosaic_adjoint(y, pattern)
        mask = sampling.bayer_masks(y.shape[-2], y.shape[-1], pattern, device=y.device, dtype=y.dtype)
        return known, mask.expand_as(known)
    known = sampling.decimate_adjoint(y)
    mask = sampling.decimation_mask(known.shape[-2], known.shape[-1], device=y.device, dtype=y.dtype)
    return known, mask.expand_as(known)
