"""Restorer factory for the graph methods (the registry, ``restorers.METHODS``, points here by name): iGLR / iGTV
(non-learned, :mod:`.interpolators`) and uGLR / uGTV (learned, :mod:`.unrolled`, weights from
:mod:`gsprestore.methods.weights`; never random weights)."""

from __future__ import annotations

from typing import Any

import torch

from ..physics.tasks import is_mosaic
from ..core.errors import UsageError
from ..models.interpolators import CG_MODES, GRAPH_METHODS, build_interpolator
from ..models.pattern import to_rggb
from ..models.unrolled import METHOD_PRIOR

#: Halo (pixels each side of a tile) used for tiling. The exact receptive fields of these models
#: are hundreds of pixels (unrolled CG reaches 2-4 px per step) or unbounded (exact CG); the
#: influence of far pixels decays geometrically, and 32 px keeps tiled and untiled outputs
#: within 1e-4 for the non-learned interpolators (see ``docs/architecture.md``).
EFFECTIVE_HALO = 32


def _halo(receptive_field: int | None) -> int:
    return EFFECTIVE_HALO if receptive_field is None else min(receptive_field, EFFECTIVE_HALO)


def make_restorer(
    name: str,
    task: str,
    *,
    weights: Any = None,
    cg: str | None = None,
    device: str | torch.device = "cpu",
    **options: Any,
):
    """The :class:`~gsprestore.methods.interface.Restorer` for ``name`` in {iglr, igtv, uglr, ugtv}.

    * iGLR / iGTV: ``cg="unrolled"`` (default, fixed alpha 0.5 / beta 0.3 as in the paper) or
      ``"exact"``; ``options`` override :data:`~.interpolators.DEFAULTS` (e.g. ``passes=2``).
    * uGLR / uGTV: ``weights=PATH`` or the shipped file from ``weights/manifest.json``; without
      either a :class:`~gsprestore.core.errors.WeightsError` says so. Demosaicking models are trained
      on RGGB; other patterns are flipped/shifted into RGGB and back (:mod:`.pattern`).
    """
    from .interface import Restorer
    from ..physics.sampling import check_pattern
    from ..physics.tasks import check_task, observation

    check_task(task)
    name = name.lower()
    kind = "graph" if name in GRAPH_METHODS else "learned" if name in METHOD_PRIOR else None
    if kind == "graph":
        if weights is not None:
            raise UsageError(f"{name} is not learned and takes no weights (--weights is for uglr/ugtv)")
        mode = cg or "unrolled"
        if mode not in CG_MODES:
            raise UsageError(f"unknown CG mode {cg!r}; expected one of {', '.join(CG_MODES)}")
        try:
            model = build_interpolator(name, task, cg=mode, **options)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        info: dict[str, Any] = {"cg": mode, "config": dict(model.config)}
    elif kind == "learned":
        if cg is not None:
            raise UsageError(f"--cg applies to iglr/igtv; {name} uses its learned unrolled CG")
        if options:
            raise UsageError(f"unknown options for {name}: {', '.join(sorted(options))}")
        from .weights import load_model

        model = load_model(name, task, path=weights)
        info = {"config": dict(model.config), "weights": getattr(model, "weights_file", None)}
    else:
        raise UsageError(f"{name} is not a graph method (iglr, igtv, uglr, ugtv)")
    model = model.to(torch.device(device)).eval()
    rf = model.receptive_field()
    info["receptive_field"] = rf
    align = kind == "learned" and is_mosaic(task)

    def fn(y: torch.Tensor, pattern: str = "RGGB") -> torch.Tensor:
        with torch.inference_mode():
            if is_mosaic(task):
                pattern = check_pattern(pattern)
                if align and pattern != "RGGB":
                    y_rggb, undo = to_rggb(y, pattern)
                    known, mask = observation(task, y_rggb, "RGGB")
                    return undo(model(known, mask))
            known, mask = observation(task, y, pattern)
            return model(known, mask)

    return Restorer(name=name, task=task, fn=fn, halo=_halo(rf), kind=kind, module=model, info=info)
