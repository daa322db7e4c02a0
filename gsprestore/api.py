"""The Python API: the CLI's engine as functions on arrays and on files.

>>> import numpy as np, gsprestore
>>> raw = np.random.rand(64, 64).astype(np.float32)          # a Bayer mosaic in [0, 1]
>>> rgb = gsprestore.demosaic(raw, method="menon", pattern="RGGB")
>>> rgb.shape
(64, 64, 3)
>>> gsprestore.upscale2x(rgb, method="bicubic").shape
(128, 128, 3)

numpy in -> numpy out: ``(H, W)`` or ``(H, W, C)`` (uint8 / uint16 scaled by their type's range,
floats taken as [0, 1]) -> float32 ``(H', W', C')``, not clipped. torch in -> torch out:
``(C, H, W)`` or ``(B, C, H, W)`` -> the same layout, on the input's device. Both go through
:func:`gsprestore.runtime.tiling.restore` (tiles, overlap, device, precision) like ``gsprestore demosaic``.
:func:`restore_file` restores one image file exactly as the commands do
(:func:`gsprestore.runtime.file_restore.restore_file`).

The commands themselves are these functions: :func:`restore_paths` and :func:`mosaic_paths` (files,
folders and globs, as ``gsprestore demosaic | upscale2x | mosaic``: :class:`RestoreOptions` for how
each file is restored, :class:`BatchOptions` for where the files come from and go),
:func:`models` (the catalog ``gsprestore models`` prints) and :func:`demo` (``gsprestore demo``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .core.errors import UsageError
from .methods.registry import Restorer, get_restorer
from .runtime.batch_run import BatchOptions, BatchOutcome
from .runtime.restore_batch import RestoreOptions, mosaic_paths, restore_paths

if TYPE_CHECKING:  # pragma: no cover - loaded on first use (:data:`_LAZY`)
    from .evaluation.benchmark_run import BenchmarkOptions
    from .training.train_options import TrainOptions

__all__ = ["BatchOptions", "BatchOutcome", "BenchmarkOptions", "RestoreOptions", "TrainOptions", "demo", "demosaic",
           "models", "mosaic_paths", "plan_benchmark", "restore_file", "restore_paths", "train", "upscale2x"]

#: Option classes whose modules import torch: loaded when first asked for (``import gsprestore.api``
#: and ``gsprestore --help`` stay torch-free).
_LAZY = {"TrainOptions": "gsprestore.training.train_options", "BenchmarkOptions": "gsprestore.evaluation.benchmark_run"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _restorer(method: "str | Restorer | None", task: str, weights: str | None, options: dict,
              device: Any = "auto") -> Restorer:
    if isinstance(method, Restorer):
        if method.task != task:
            raise UsageError(f"restorer {method.name!r} does {method.task}, not {task}")
        return method
    from .methods.defaults import choose_method
    from .runtime.tiling import resolve_device

    if weights is not None:
        options = {**options, "weights": weights}
    # the named method, else the file's network, else the default worth its time on this device (the
    # device is resolved only when the default is needed, as before)
    kind = resolve_device(device).type if not method and weights is None else "cpu"
    method = choose_method(method or None, weights, task, kind)
    return get_restorer(method, task, **options)


def _as_input(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x if x.is_floating_point() else x.float()
    a = np.asarray(x)
    if a.dtype == np.uint8:
        return a.astype(np.float32) / np.float32(255.0)
    if a.dtype == np.uint16:
        return a.astype(np.float32) / np.float32(65535.0)
    if a.dtype.kind not in "fiub":
        raise UsageError(f"expected a numeric array, got dtype {a.dtype}")
    return a.astype(np.float32, copy=False)


def _device_for(x: Any, device: str | None) -> str:
    import torch

    if device is not None:
        return device
    if isinstance(x, torch.Tensor) and x.device.type != "cpu":
        return str(x.device)
    return "auto"


def demosaic(
    mosaic: Any,
    method: "str | Restorer | None" = None,
    pattern: str = "RGGB",
    *,
    tile: int = 0,
    overlap: int | None = None,
    device: str | None = None,
    precision: str = "fp32",
    weights: str | None = None,
    **options: Any,
) -> Any:
    """Demosaic a Bayer ``mosaic`` (numpy ``(H, W)`` / ``(H, W, 1)``, or torch ``(1, H, W)`` /
    ``(B, 1, H, W)``) with ``method`` (default: the best worth its time on the device,
    :func:`gsprestore.methods.defaults.default_method`; any name from ``gsprestore models`` or a
    :class:`Restorer`). ``pattern`` is the CFA's top-left 2x2 block. Odd sizes are handled by
    mirroring one row/column and cropping back. ``device`` None = the tensor's device, else auto.
    ``options`` go to :func:`gsprestore.methods.registry.get_restorer` (``self_ensemble=True``: the mean of
    the method on the mosaic and on its transpose, twice the time)."""
    from .runtime.tiling import restore_array

    y = _as_input(mosaic)
    shape = tuple(y.shape)
    if (isinstance(y, np.ndarray) and not (y.ndim == 2 or (y.ndim == 3 and shape[2] == 1))) or (
        not isinstance(y, np.ndarray) and not (y.dim() in (2, 3, 4) and (y.dim() == 2 or shape[-3] == 1))
    ):
        raise UsageError(f"demosaic needs a single-channel Bayer mosaic, got shape {shape}; "
                         "make one with gsprestore.physics.sampling.mosaic")
    dev = _device_for(mosaic, device)
    r = _restorer(method, "demosaic", weights, options, dev)
    return restore_array(r, y, pattern, tile=tile, overlap=overlap, device=dev, precision=precision)


def upscale2x(
    image: Any,
    method: "str | Restorer | None" = None,
    *,
    tile: int = 0,
    overlap: int | None = None,
    device: str | None = None,
    precision: str = "fp32",
    weights: str | None = None,
    **options: Any,
) -> Any:
    """Upscale ``image`` 2x (numpy ``(h, w)`` / ``(h, w, C)``, or torch ``(C, h, w)`` /
    ``(B, C, h, w)``): the input pixels land on the even coordinates of the output (the paper's
    ``HR[0::2, 0::2]`` sampling). ``method`` default: the best worth its time on the device
    (:func:`gsprestore.methods.defaults.default_method`);
    ``bicubic`` needs no weights. ``options`` as for :func:`demosaic` (``self_ensemble=True``)."""
    from .runtime.tiling import restore_array

    y = _as_input(image)
    dev = _device_for(image, device)
    r = _restorer(method, "upscale2x", weights, options, dev)
    return restore_array(r, y, "RGGB", tile=tile, overlap=overlap, device=dev, precision=precision)


def restore_file(
    source: Any,
    output: Any,
    task: str = "demosaic",
    method: "str | Restorer | None" = None,
    *,
    pattern: str = "RGGB",
    tile: int = 0,
    overlap: int | None = None,
    device: str | None = None,
    precision: str = "fp32",
    weights: str | None = None,
    bit_depth: int | None = None,
    quality: int | None = None,
    overwrite: bool = False,
    **options: Any,
) -> dict:
    """Restore the image file ``source`` (PNG, TIFF, JPEG, WebP; camera RAW for ``demosaic``) and
    write ``output``, exactly as ``gsprestore demosaic`` / ``upscale2x`` do for one file (the same
    :func:`gsprestore.runtime.file_restore.restore_file`): orientation, alpha, ICC profile, bit depth kept.
    Returns what was written (width, height, bit_depth, ...). Raises :class:`GspError` if
    ``output`` exists and ``overwrite`` is False."""
    from .runtime.file_restore import restore_file as _restore_file
    from .physics.tasks import check_task

    task = check_task(task)
    r = _restorer(method, task, weights, options, device or "auto")
    return _restore_file(r, source, output, pattern=pattern, tile=tile, overlap=overlap,
                         device=device or "auto", precision=precision, bit_depth=bit_depth, quality=quality,
                         overwrite=overwrite)


def models(device: str = "auto") -> dict[str, Any]:
    """The catalog of methods (:func:`gsprestore.methods.catalog.catalog`: every method's kind,
    parameters, weights, recorded scores and speed, each task's default and why) for the kind of
    ``device``: ``auto`` (this machine's: cuda if available), ``cpu`` or ``cuda`` (``cuda:N`` is
    its kind)."""
    from .methods.catalog import catalog
    from .runtime.tiling import device_kind

    return catalog(device_kind(device))


def demo(output: Any = "gsprestore-demo.png", method: str | None = None, pattern: str = "RGGB", *,
         device: str = "auto", overwrite: bool = False, notice: Any = None) -> Any:
    """Demosaic the bundled test chart's mosaic with the best method by recorded quality (or
    ``method``), write the PNG and score it beside the classical method
    (:func:`gsprestore.runtime.chart_demo.run_demo`, which says what it returns)."""
    from .runtime.chart_demo import run_demo

    return run_demo(output, method, pattern, device=device, overwrite=overwrite, notice=notice)


def train(options: Any, given: "set[str] | None" = None, *, say: Any = print, progress: Any = None) -> Any:
    """Train a network as ``gsprestore train`` does: ``options`` a :class:`TrainOptions` (every
    flag of the command, its defaults included), ``given`` the names the user set (the rest are
    defaults a resumed or ``--init`` run may take from its own record), ``say`` where the run's
    notes go; its :class:`gsprestore.training.report.TrainResult`
    (:func:`gsprestore.training.train_options.train_from_options`)."""
    from .training.train_options import train_from_options

    return train_from_options(options, set(given or ()), say=say, progress=progress)


def plan_benchmark(options: Any) -> Any:
    """Check a :class:`BenchmarkOptions` (usage errors first, before any data is read), find the
    data set and estimate the time: a plan whose ``run(task, methods)`` scores the methods with the
    paper's protocol and ``write_reports`` writes the JSON / CSV / Markdown
    (:func:`gsprestore.evaluation.benchmark_run.plan_benchmark`)."""
    from .evaluation.benchmark_run import plan_benchmark as plan

    return plan(options)
