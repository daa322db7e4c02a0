"""What a method is: its static description (:class:`MethodSpec`, listed without importing torch)
and the ready-to-run object every method builds (:class:`Restorer`). Methods (``baselines``,
``models``) build Restorers; the registry (:mod:`gsprestore.methods.registry`) lists the specs and finds
each method's factory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import Tensor


@dataclass(frozen=True)
class MethodSpec:
    """Static description of a method (no torch import needed to list methods)."""

    name: str
    tasks: tuple[str, ...]
    kind: str  # "classical" | "graph" (non-learned solver) | "learned" | "ensemble" (of learned ones)
    factory: Callable[..., "Restorer"]  # ``factory(name, task, **options) -> Restorer`` (:mod:`.registry`)
    summary: str


@dataclass
class Restorer:
    """A ready-to-run method for one task.

    ``restorer(y, pattern) -> x`` does the work on a batch: here ``fn(y, pattern)``, the method's
    function (the classical methods, an ensemble); a graph model's restorer
    (:class:`gsprestore.methods.graph_methods.GraphRestorer`) runs its network in its own
    ``__call__`` instead. ``halo`` is the context (in output pixels)
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
