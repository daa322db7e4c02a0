"""Which implementation runs the graph operators and solvers, and how they lay out their buffers.

The one home of the package's process-wide settings:

* the backend: the optional native CPU kernels (C++, compiled when the package is built, loaded by
  :mod:`gsprestore.native`) or the PyTorch formulas. :func:`use` chooses ``"auto"`` (the kernels
  where they are built and not disabled by the environment), ``"torch"`` or ``"native"`` (or a
  given kernels object); it also works as a context manager that restores the previous choice
  (tests). ``GSPRESTORE_NATIVE=0`` is read here and nowhere else, once, when ``"auto"`` first
  needs the kernels. :func:`native` returns the kernels in use or None; :func:`error` says why none.
  Native kernels never see CUDA tensors or other dtypes than float32/float64 (:func:`usable`).
* the fused GPU kernels (Triton, :mod:`gsprestore.solvers.cg.triton_kernels`): :func:`gpu_fused_usable`
  says whether they may run on given tensors (CUDA float32, Triton installed, not turned off by
  ``GSPRESTORE_TRITON=0``, ``use("torch")`` or ``configure(gpu_fused=0)``). Under Triton's
  interpreter (``TRITON_INTERPRET=1``) CPU tensors qualify too: that is how the tests run them.
* the tunables (:data:`settings`, :func:`configure`): the row-band size of the PyTorch stencil
  loops, the schedule of the fused native CG, the most ADMM steps the native replay handles.
* the plane layout helpers the native kernels rely on (:func:`padded_planes`,
  :func:`plane_stride`, :func:`rows_contiguous`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch
from torch import Tensor

__all__ = ["use", "mode", "native", "native_available", "triton_modules", "triton_available", "error", "usable",
           "no_grad_usable", "gpu_fused_usable", "gpu_fused_failed",
           "pixel_grid", "settings", "configure", "Settings", "padded_planes", "plane_stride", "rows_contiguous"]

_MODES = ("auto", "torch", "native")
# mode: the user's choice; kernels: the loaded kernels (None: not loaded / unavailable);
# loaded: whether the choice has been resolved; error: why no kernels are in use.
_state: dict = {"mode": "auto", "kernels": None, "loaded": False, "error": None}


def _env_disabled() -> bool:
    return os.environ.get("GSPRESTORE_NATIVE", "1").strip().lower() in ("0", "false", "no", "off")


def _resolve() -> None:
    from .. import native as _native_lib

    mod = _state["mode"]
    kernels, err = None, None
    if mod == "torch":
        err = "the PyTorch backend was chosen (backend.use('torch'))"
    elif mod == "auto" and _env_disabled():
        err = "disabled by GSPRESTORE_NATIVE"
    else:
        try:
            kernels = _native_lib.load()
        except _native_lib.NativeUnavailable as exc:
            if mod == "native":
                raise
            err = str(exc)
            logging.getLogger("gsprestore").warning(
                "gsprestore: native CPU kernels unavailable (%s); using the PyTorch path (about 3x slower)", exc
            )
    _state.update(kernels=kernels, error=err, loaded=True)


class _Use(contextlib.AbstractContextManager):
    """What :func:`use` returns: the switch is already made; ``with`` restores the previous one."""

    def __init__(self, previous: dict):
        self._previous = previous

    def __exit__(self, *exc) -> None:
        _state.clear()
        _state.update(self._previous)


def use(choice: Any = "auto") -> _Use:
    """Choose the backend: ``"auto"`` (native kernels where available, unless
    ``GSPRESTORE_NATIVE=0``; forgets an earlier load, so the environment is read again),
    ``"torch"`` (PyTorch formulas only) or ``"native"`` (the kernels; raises
    :class:`gsprestore.native.NativeUnavailable` where none are built). A kernels object (e.g.
    ``gsprestore.native.Kernels(path)``, or a wrapper with the same methods) is used as given.
    Usable as ``with backend.use("torch"): ...`` (the previous choice comes back on exit)."""
    previous = dict(_state)
    if isinstance(choice, str):
        if choice not in _MODES:
            raise ValueError(f"backend must be one of {_MODES} or a kernels object, got {choice!r}")
        _state.update(mode=choice, kernels=None, loaded=False, error=None)
        if choice == "native":
            try:
                _resolve()
            except Exception:
                _state.clear()
                _state.update(previous)
                raise
    elif choice is None:
        _state.update(mode="torch", kernels=None, loaded=True, error="the PyTorch backend was chosen")
    else:
        _state.update(mode="native", kernels=choice, loaded=True, error=None)
    return _Use(previous)


def mode() -> str:
    """The current choice: ``"auto"``, ``"torch"`` or ``"native"``."""
    return _state["mode"]


def native():
    """The native kernels in use (:class:`gsprestore.native.Kernels`), or None: the PyTorch
    backend was chosen, ``GSPRESTORE_NATIVE=0``, or no library was built (a source install
    without a C++ compiler; said once, in one line, on the ``gsprestore`` logger)."""
    if not _state["loaded"]:
        _resolve()
    return _state["kernels"]


def native_available() -> bool:
    """Whether the native kernels are in use (loads them on the first call)."""
    return native() is not None


def error() -> Optional[str]:
    """Why no native kernels are in use (None while they are, or before the first load)."""
    return _state["error"]


def usable(*tensors: Optional[Tensor]) -> bool:
    """Whether the native kernels may run on these tensors: in use, and every tensor given is a
    CPU float32/float64 tensor (CUDA tensors and other dtypes always take the PyTorch path)."""
    for t in tensors:
        if t is not None and (t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64)):
            return False
    return native() is not None


def no_grad_usable(*tensors: Tensor) -> bool:
    """Whether a forward-only native kernel may replace a plain-autograd PyTorch formula (no
    gradient to record: autograd off or no input requiring one)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return usable(*tensors)


def gpu_fused_usable(*tensors: Optional[Tensor]) -> bool:
    """Whether the fused Triton kernels may run on these tensors (forward only: the caller checks
    that no gradient is recorded): each is a float32 CUDA tensor (or a CPU one under
    ``TRITON_INTERPRET=1``), Triton can be imported, and neither ``GSPRESTORE_TRITON=0``,
    ``use("torch")`` nor ``configure(gpu_fused=0)`` turned them off."""
    if not settings.gpu_fused or _state["mode"] == "torch":
        return False
    if os.environ.get("GSPRESTORE_TRITON", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    interpret = os.environ.get("TRITON_INTERPRET", "0") == "1"
    for t in tensors:
        if t is not None and (t.dtype != torch.float32 or not (t.is_cuda or (interpret and t.device.type == "cpu"))):
            return False
    return triton_available()


def gpu_fused_failed(kernel: str, exc: BaseException) -> None:
    """A fused Triton kernel raised (a Triton that cannot compile here): say so once, in one
    line on the ``gsprestore`` logger, and turn the fused kernels off (``settings.gpu_fused = 0``)
    so the caller's PyTorch path runs from now on."""
    settings.gpu_fused = 0
    logging.getLogger("gsprestore").warning(
        "gsprestore: the fused Triton %s failed (%s: %s); using the PyTorch path", kernel, type(exc).__name__, exc)


#: (module, kernel) of every fused Triton kernel: inference (graphs, CG steps, the ADMM edge
#: replay) and training (the CG and ADMM edge adjoints, the graphs' backward); lab/tools/triton_sm90.py compiles them all
TRITON_KERNELS = [("gsprestore.graph.triton_kernels", "_random_walk_kernel"), ("gsprestore.graph.triton_kernels", "_edge_weights_kernel"),
                  ("gsprestore.solvers.cg.triton_kernels", "_cg_step_kernel"), ("gsprestore.solvers.gtv.triton_kernels", "_replay_kernel"),
                  ("gsprestore.solvers.cg.triton_adjoint", "_adjoint_step_kernel"),
                  ("gsprestore.solvers.cg.triton_adjoint", "_weight_grad_kernel"),
                  ("gsprestore.solvers.gtv.triton_adjoint", "_edge_adjoint_kernel"),
                  ("gsprestore.graph.triton_kernels", "_rw_backward_kernel"),
                  ("gsprestore.graph.triton_kernels", "_distances_backward_kernel"),
                  ("gsprestore.graph.triton_kernels", "_diag_minus_adjacency_kernel"),
                  ("gsprestore.graph.triton_kernels", "_adjacency_grad_kernel")]

#: CUDA's limit on grid axes 1 and 2 (axis 0 takes up to 2^31 - 1 blocks)
MAX_GRID_YZ = 65535


def pixel_grid(pixels: int, block: int, planes: int) -> tuple[int, int]:
    """The launch grid of the fused Triton kernels: the ``block``-pixel blocks of a plane on axis
    0 (a 24-MP tile is ~94k blocks of 256, over axis 1's limit) and the ``planes`` on axis 1."""
    if planes > MAX_GRID_YZ:
        raise ValueError(f"{planes} image planes in one launch, more than CUDA's {MAX_GRID_YZ} on grid axis 1")
    return -(-pixels // block), planes


def triton_modules() -> tuple[Any, Any]:
    """``(triton, triton.language)``, imported once, or ``(None, None)`` where Triton is not installed
    or does not import: the one place the optional Triton is imported (the fused kernels' modules
    define their kernels only when it is there)."""
    if "triton" not in _state:
        try:
            import triton
            import triton.language as tl
        except Exception:  # pragma: no cover - depends on the installation
            triton = tl = None
        _state["triton"] = (triton, tl)
    return _state["triton"]


def triton_available() -> bool:
    """Whether Triton imports here (it does not say that a kernel may run: :func:`gpu_fused_usable`)."""
    return triton_modules()[0] is not None


# --------------------------------------------------------------------------------------------
# tunables
# --------------------------------------------------------------------------------------------


@dataclass
class Settings:
    """Process-wide tunables (change them through :func:`configure`).

    * ``band_elements``: elements per operand slice when a PyTorch stencil loop runs in row bands
      (bands keep each fused multiply-accumulate's operands in cache; 0 turns banding off).
    * ``fused_cg_mode``: how the fused native unrolled CG schedules its work: -1 automatic, 0 every
      step a parallel pass over all rows, 1 one cache-resident wavefront sweep per (batch, head)
      plane for all steps.
    * ``max_replayed_steps``: the most ADMM iterates the native kernel replays (the edge steps of
      one call, ``admm_iters - 1``); longer runs keep the edge state instead.
    * ``gpu_fused``: 1 runs unrolled CG on CUDA through the fused Triton kernels where Triton is
      installed (:func:`gpu_fused_usable`), 0 the PyTorch formulas.
    * ``cg_adjoint``: 1 differentiates unrolled CG on a stencil operator as one autograd op with
      the hand-written adjoint backward (:mod:`gsprestore.solvers.cg.adjoint`; CPU and GPU),
      0 by plain autograd through every step (the reference; ``GSPRESTORE_CG_ADJOINT=0``).
    * ``gpu_training``: 1 lets a training step on a GPU run uGTV's ADMM edge terms and the learned
      graphs through their fused Triton training ops (:mod:`gsprestore.solvers.gtv.triton_adjoint`,
      :func:`gsprestore.graph.triton_kernels.trained_or_none`), 0 the PyTorch formulas
      (``GSPRESTORE_GPU_TRAINING=0``; the GPU job sets it when the device's gradients differ).
    """

    band_elements: int = 1 << 19
    fused_cg_mode: int = -1
    max_replayed_steps: int = 8
    gpu_fused: int = 1
    cg_adjoint: int = int(os.environ.get("GSPRESTORE_CG_ADJOINT", "1") != "0")
    gpu_training: int = int(os.environ.get("GSPRESTORE_GPU_TRAINING", "1") != "0")


#: The tunables in force.
settings = Settings()


@contextlib.contextmanager
def configure(**changes: int) -> Iterator[Settings]:
    """Change :data:`settings` for the duration of a ``with`` block (e.g.
    ``with backend.configure(fused_cg_mode=1): ...``); unknown names raise ``TypeError``."""
    for name in changes:
        if not hasattr(settings, name):
            raise TypeError(f"unknown backend setting {name!r}")
    old = {name: getattr(settings, name) for name in changes}
    for name, value in changes.items():
        setattr(settings, name, int(value))
    try:
        yield settings
    finally:
        for name, value in old.items():
            setattr(settings, name, value)


# --------------------------------------------------------------------------------------------
# plane layouts the native kernels rely on
# --------------------------------------------------------------------------------------------


def padded_planes(like: Tensor, *shape: int) -> Tensor:
    """An empty tensor of ``shape`` (..., H, W) with contiguous rows whose H x W planes start 64
    bytes past a 1 KiB boundary from each other instead of H * W elements apart (the dims before
    them contiguous over the planes). A stencil reads the same pixel of the 12 weight planes (or
    of the channels) together; at a plane stride that is a multiple of 4 KiB (e.g. 768 x 512
    floats) those reads fall into one L1 cache set and evict each other, which made the fused
    CG's stencil run at half speed."""
    *lead, H, W = shape
    item = like.element_size()
    unit = max(1, 1024 // item)
    ps = -(-(H * W) // unit) * unit + max(1, 64 // item)
    strides, acc = [], ps
    for n in reversed(lead):
        strides.append(acc)
        acc *= n
    buf = like.new_empty(max(1, acc))
    return buf.as_strided(tuple(shape), tuple(reversed(strides)) + (W, 1))


def plane_stride(t: Tensor) -> Optional[int]:
    """The plane stride of ``t`` (..., H, W) if it has contiguous rows and its leading dims are
    contiguous over its planes (a contiguous or :func:`padded_planes` layout), else None."""
    *lead, H, W = t.shape
    if t.stride(-1) != 1 and W > 1 or t.stride(-2) != W and H > 1:
        return None
    ps = t.stride(-3) if lead else H * W
    if ps < H * W:
        return None
    acc = ps
    for n, st in zip(reversed(lead), reversed(t.stride()[:-2])):
        if st != acc and n > 1:
            return None
        acc *= n
    return ps


def rows_contiguous(t: Tensor) -> Tensor:
    """t with stride 1 along W and W along H (other strides free, broadcast dims stay stride 0)."""
    if t.stride(-1) == 1 and (t.shape[-2] == 1 or t.stride(-2) == t.shape[-1]):
        return t
    return t.contiguous()
