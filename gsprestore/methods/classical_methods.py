"""The classical methods as restorers: bilinear, Malvar 2004 and Menon 2007 demosaicking
(:mod:`gsprestore.classical.demosaic`) and bicubic 2x interpolation (:mod:`gsprestore.classical.upscale`),
built by :func:`make_restorer` for the registry (``gsprestore.methods.registry.METHODS``). Their functions
are re-exported here, so ``from gsprestore.methods.classical_methods import demosaic_menon`` keeps working.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..classical import demosaic as demosaic_classical, upscale as upscale_classical
from ..classical.demosaic import STRIP_PIXELS, demosaic_bilinear, demosaic_malvar, demosaic_menon
from ..core.errors import UsageError
from ..classical.upscale import keys_weight, upscale_bicubic, upscale_bicubic_halfpixel

__all__ = [
    "demosaic_bilinear",
    "demosaic_malvar",
    "demosaic_menon",
    "upscale_bicubic",
    "upscale_bicubic_halfpixel",
    "keys_weight",
    "make_restorer",
    "HALO",
    "STRIP_PIXELS",
]

#: Exact context (pixels each side; output pixels for 2x) a tile needs for its interior to equal
#: the untiled result. Checked (tight) by ``tests/test_baselines.py::test_halo_is_exact_and_tight``.
HALO: dict[str, int] = {**demosaic_classical.HALO, **upscale_classical.HALO}


# ----------------------------------------------------------------------------------------------
# Restorer factory
# ----------------------------------------------------------------------------------------------

_TASK = {
    "bilinear": "demosaic",
    "malvar": "demosaic",
    "menon": "demosaic",
    "bicubic": "upscale2x",
    "bicubic-halfpixel": "upscale2x",
}


def make_restorer(name: str, task: str, **options: Any):
    """Build the :class:`gsprestore.methods.registry.Restorer` of a classical method.

    Options: ``menon`` takes ``refining`` (bool, default True); the demosaickers take
    ``strip_pixels`` (int, 0 = one pass); ``bicubic`` takes ``a`` (float, default -0.75).
    ``halo`` is the exact context a tile needs (:data:`HALO`)."""
    from .interface import Restorer

    if name not in _TASK:
        raise UsageError(f"unknown classical method {name!r}; expected one of {', '.join(_TASK)}")
    if task != _TASK[name]:
        raise UsageError(f"method {name!r} does {_TASK[name]}, not {task}")
    allowed = {"menon": {"refining", "strip_pixels"}, "bilinear": {"strip_pixels"}, "malvar": {"strip_pixels"},
               "bicubic": {"a"}, "bicubic-halfpixel": set()}[name]
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise UsageError(
            f"method {name!r} has no option {', '.join(unknown)}"
            + (f"; options: {', '.join(sorted(allowed))}" if allowed else "")
        )
    info: dict[str, Any] = dict(options)
    halo = HALO[name]
    if name in ("bilinear", "malvar", "menon"):
        func = {"bilinear": demosaic_bilinear, "malvar": demosaic_malvar, "menon": demosaic_menon}[name]
        kwargs: dict[str, Any] = {}
        if "strip_pixels" in options:
            kwargs["strip_pixels"] = int(options["strip_pixels"]) or None
        if name == "menon":
            refining = bool(options.get("refining", True))
            kwargs["refining"] = refining
            info["refining"] = refining
            halo = HALO["menon" if refining else "menon-norefine"]

        def fn(y: Tensor, pattern: str = "RGGB") -> Tensor:
            return func(y, pattern, **kwargs)

    elif name == "bicubic":
        a = float(options.get("a", -0.75))
        info["a"] = a

        def fn(y: Tensor, pattern: str = "RGGB") -> Tensor:
            return upscale_bicubic(y, a)

    else:

        def fn(y: Tensor, pattern: str = "RGGB") -> Tensor:
            return upscale_bicubic_halfpixel(y)

    return Restorer(name=name, task=task, fn=fn, halo=halo, kind="classical", module=None, info=info)
