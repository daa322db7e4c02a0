"""Restorer factory for the graph methods (the registry, ``restorers.METHODS``, points here by name): iGLR / iGTV
(non-learned, :mod:`.interpolators`) and uGLR / uGTV (learned, :mod:`.unrolled`, weights from
:mod:`gsprestore.methods.weights`; never random weights)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from ..physics.sampling import check_pattern
from ..physics.tasks import is_mosaic, observation
from ..core.errors import UsageError
from ..models.interpolators import CG_MODES, GRAPH_METHODS, build_interpolator
from ..models.pattern import to_rggb
from ..models.unrolled import METHOD_PRIOR
from .interface import Restorer

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
    """The :class:`GraphRestorer` for ``name`` in {iglr, igtv, uglr, ugtv}.

    * iGLR / iGTV: ``cg="unrolled"`` (default, fixed alpha 0.5 / beta 0.3 as in the paper) or
      ``"exact"``; ``options`` override :data:`~.interpolators.DEFAULTS` (e.g. ``passes=2``).
    * uGLR / uGTV: ``weights=PATH`` or the shipped file from ``weights/manifest.json``; without
      either a :class:`~gsprestore.core.errors.WeightsError` says so. The noise-aware
      ``ugtv-lite-denoise`` also takes ``noise`` (``(3, 2)``: the Poisson-Gaussian ``(a, b)`` per
      colour channel of the linear mosaic, :mod:`gsprestore.physics.noise`; None: clean) and
      ``linear=True`` (the mosaic is linear: it is sRGB-encoded for the network and decoded after),
      with ``exposure`` (the linear mosaic is multiplied by it before and divided after: an
      underexposed frame is brought to the exposure of the photos the network learned from, and
      ``noise`` is scaled with it). Demosaicking models are trained
      on RGGB; other patterns are flipped/shifted into RGGB and back (:mod:`.pattern`).
    """
    from ..physics.tasks import check_task

    check_task(task)
    name = name.lower()
    kind = "graph" if name in GRAPH_METHODS else "learned" if name in METHOD_PRIOR else None
    noise, linear, exposure = None, False, 1.0  # the noise-aware network's options (below)
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
        noise = options.pop("noise", None)
        linear = bool(options.pop("linear", False))
        exposure = float(options.pop("exposure", 1.0))
        if options:
            raise UsageError(f"unknown options for {name}: {', '.join(sorted(options))}")
        from .weights import load_model

        model = load_model(name, task, path=weights)
        info = {"config": dict(model.config), "weights": getattr(model, "weights_file", None)}
        if (noise is not None or linear) and not model.config.get("noise_input"):
            raise UsageError(f"{name} is not noise-aware: it takes no noise level (ugtv-lite-denoise does)")
        if noise is not None:
            # the noise of the values the network reads: the mosaic times ``exposure``
            noise = torch.as_tensor(noise, dtype=torch.float32).reshape(1, 3, 2)
            noise = noise * torch.tensor([exposure, exposure * exposure])
            info["noise"] = noise[0].tolist()
    else:
        raise UsageError(f"{name} is not a graph method (iglr, igtv, uglr, ugtv)")
    model = model.to(torch.device(device)).eval()
    rf = model.receptive_field()
    info["receptive_field"] = rf
    return GraphRestorer(name=name, task=task, halo=_halo(rf), kind=kind, module=model, info=info, noise=noise,
                         linear=linear, exposure=exposure)


@dataclass
class GraphRestorer(Restorer):
    """A graph model ready to run (iGLR / iGTV, uGLR / uGTV): ``restorer(y, pattern)`` is
    ``module(known, mask)`` on the task's observation of ``y`` (:func:`gsprestore.physics.tasks.observation`),
    under ``torch.inference_mode``. A learned demosaicker was trained on RGGB: another pattern is
    flipped / shifted into RGGB and the output back (:func:`gsprestore.models.pattern.to_rggb`). The
    noise-aware network also reads ``noise`` (``(1, 3, 2)``, already scaled by ``exposure``), and with
    ``linear`` its input is ``encode_srgb(y * exposure)`` and its output is decoded and divided back."""

    fn: Any = None  # not used: __call__ below runs the network
    noise: Optional[torch.Tensor] = None
    linear: bool = False
    exposure: float = 1.0

    def __call__(self, y: torch.Tensor, pattern: str = "RGGB") -> torch.Tensor:
        with torch.inference_mode():
            if self.linear:  # a noise-aware network reads sRGB-encoded values (what it was trained on)
                from ..physics.noise import decode_srgb, encode_srgb

                return decode_srgb(self._restore(encode_srgb(y * self.exposure), pattern)) / self.exposure
            return self._restore(y, pattern)

    def _restore(self, y: torch.Tensor, pattern: str) -> torch.Tensor:
        if is_mosaic(self.task):
            pattern = check_pattern(pattern)
            if self.kind == "learned" and pattern != "RGGB":
                y_rggb, undo = to_rggb(y, pattern)
                known, mask = observation(self.task, y_rggb, "RGGB")
                return undo(self._network(known, mask))
        known, mask = observation(self.task, y, pattern)
        return self._network(known, mask)

    def _network(self, known: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.noise is None:
            return self.module(known, mask)
        return self.module(known, mask, noise=self.noise.to(known.device, known.dtype).expand(known.shape[0], 3, 2))
