"""One interface over every method: classical baselines, non-learned graph solvers and the
learned unrolled networks. The CLI, the tiling engine, the benchmark and ``compare`` all go
through :func:`get_restorer`, so a method added to :data:`METHODS` works everywhere.

A :class:`Restorer` maps a task's *observation* to its reconstruction:

* ``demosaic``: a Bayer mosaic ``(B, 1, H, W)`` (with its ``pattern``) to RGB ``(B, 3, H, W)``;
* ``upscale2x``: a low-resolution image ``(B, C, h, w)`` to ``(B, C, 2h, 2w)`` where the input
  pixels sit at the even coordinates of the output (``HR[0::2, 0::2]`` sampling, docs/protocol.md).

Graph and learned models work on the full-resolution pair ``(known, mask)`` = ``(H^T y, H^T 1)``
given by :func:`gsprestore.physics.tasks.observation`; that keeps one model code path for both tasks.
What a task is lives in :mod:`gsprestore.physics.tasks`, what a method is in :mod:`gsprestore.methods.interface`;
this module is the registry above both: each spec names its factory as a function here
(:func:`_classical`, :func:`_graph`, :func:`_ensemble`) that imports the factory's module when it
is first called, so "go to definition" leads from a spec to the code that builds its restorer,
listing the methods imports no torch, and the methods never import the registry.

This module imports torch lazily (``gsprestore --help`` must stay fast).
"""

from __future__ import annotations

from typing import Any

from ..core.errors import UsageError
from .interface import MethodSpec, Restorer
from ..physics.tasks import TASKS, check_task, observation

__all__ = ["METHODS", "MethodSpec", "Restorer", "TASKS", "check_task", "get_restorer",
           "method_spec", "methods_for", "observation"]


def _classical(name: str, task: str, **options: Any) -> Restorer:
    """The classical methods' restorers: :func:`gsprestore.methods.classical_methods.make_restorer`."""
    from .classical_methods import make_restorer

    return make_restorer(name, task, **options)


def _graph(name: str, task: str, **options: Any) -> Restorer:
    """The graph solvers' and learned networks' restorers: :func:`gsprestore.methods.graph_methods.make_restorer`."""
    from .graph_methods import make_restorer

    return make_restorer(name, task, **options)


def _ensemble(name: str, task: str, **options: Any) -> Restorer:
    """The ensemble's restorer: :func:`gsprestore.methods.ensemble.make_restorer`."""
    from .ensemble import make_restorer

    return make_restorer(name, task, **options)


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in [
        MethodSpec("bilinear", ("demosaic",), "classical", _classical,
                   "bilinear demosaicking (per-channel 3x3 interpolation)"),
        MethodSpec("malvar", ("demosaic",), "classical", _classical,
                   "Malvar, He & Cutler 2004 gradient-corrected linear demosaicking"),
        MethodSpec("menon", ("demosaic",), "classical", _classical,
                   "Menon, Andriani & Calvagno 2007 DDFAPD with refining step"),
        MethodSpec("bicubic", ("upscale2x",), "classical", _classical,
                   "bicubic (Keys a=-0.75, edge replication) aligned to the sampling grid: known pixels kept"),
        MethodSpec("bicubic-halfpixel", ("upscale2x",), "classical", _classical,
                   "bicubic with OpenCV INTER_CUBIC's half-pixel convention (the paper's baseline)"),
        MethodSpec("iglr", TASKS, "graph", _graph,
                   "non-learned GLR interpolation (eq. 9) solved by CG"),
        MethodSpec("igtv", TASKS, "graph", _graph,
                   "non-learned GTV interpolation (LP, eqs. 19-24) solved by ADMM"),
        MethodSpec("uglr", TASKS, "learned", _graph,
                   "unrolled GLR network: blocks of graph-learning heads + CG (size: `gsprestore models`)"),
        MethodSpec("ugtv", TASKS, "learned", _graph,
                   "unrolled GTV network: blocks of graph-learning heads + ADMM x CG (size: `gsprestore models`)"),
        # the CPU-size networks, for the task each is trained for (docs/cpu-networks.md)
        MethodSpec("uglr-lite", ("upscale2x",), "learned", _graph,
                   "CPU-size unrolled GLR network: one half-resolution feature trunk shared by 3 blocks"),
        MethodSpec("ugtv-lite", ("demosaic",), "learned", _graph,
                   "CPU-size unrolled GTV network: one half-resolution feature trunk shared by 3 blocks"),
        MethodSpec("ugtv-lite-denoise", ("demosaic",), "learned", _graph,
                   "noise-aware ugtv-lite: the sensor noise level in, GLR denoising of the samples on a learned graph, then GTV"),
        MethodSpec("ensemble", TASKS, "ensemble", _ensemble,
                   "the mean of the uGTV and uGLR networks' outputs (both passes: their two times together)"),
    ]
}



def __getattr__(name: str) -> Any:
    if name == "DEFAULT_METHOD":  # the former constant, now computed from the manifest
        from .defaults import default_method

        return {task: default_method(task) for task in TASKS}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def methods_for(task: str) -> list[str]:
    """Names of every method that handles ``task``, in registry order."""
    check_task(task)
    return [m.name for m in METHODS.values() if task in m.tasks]


def method_spec(name: str, task: str | None = None) -> MethodSpec:
    """The registry's entry for ``name``; an unknown name is a :class:`UsageError` with the closest
    name of the task's methods ("did you mean 'menon'?") and those methods only."""
    spec = METHODS.get(name.lower())
    if spec is None:
        import difflib

        choices = methods_for(task) if task is not None else list(METHODS)
        close = difflib.get_close_matches(name.lower(), choices, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        what = f"methods for {task}:" if task is not None else "expected one of"
        raise UsageError(f"unknown method {name!r}; {hint}{what} {', '.join(choices)}")
    if task is not None and task not in spec.tasks:
        raise UsageError(
            f"method {name!r} does not do {task}; methods for {task}: {', '.join(methods_for(task))}"
        )
    return spec


def get_restorer(name: str, task: str, *, self_ensemble: bool = False, **options: Any) -> Restorer:
    """Build the restorer ``name`` for ``task``. ``options`` go to the method's factory
    (e.g. ``weights=PATH`` for learned models, ``cg="exact"`` for iGLR/iGTV). ``self_ensemble``:
    average the method's output with its output on the transposed input
    (:func:`gsprestore.methods.self_ensemble.self_ensemble`; twice the time)."""
    check_task(task)
    spec = method_spec(name, task)
    restorer = spec.factory(spec.name, task, **options)
    if self_ensemble:
        from .self_ensemble import self_ensemble as wrap

        restorer = wrap(restorer)
    return restorer
