"""Ensemble: the mean of the two learned networks' outputs, uGTV and uGLR (``--method ensemble``).

The two networks unroll different priors (GTV's l1 penalty solved by ADMM, eqs. 19-24; GLR's
quadratic one solved by CG, eq. 9) over graphs they learned separately, so their errors are only
partly correlated and the mean of their outputs can beat either (measured on the training pack's
held-out crops, never a test set: ``lab/research/average_outputs.py``; the figures are in
docs/training.md, "What we tried"). It costs the two networks' time together (two passes; four as a
self-ensemble, :mod:`gsprestore.methods.self_ensemble`).

The ensemble is a method like the others: the engine tiles it (its halo is the larger of the
two), the benchmark scores it (``--weights ugtv=A --weights uglr=B`` also set its members), and its
recorded scores go in the weights manifest's ``ensembles`` section *with the SHA-256 of the member
weights they were measured with* (``lab/tools/record_ensemble.py``). Shipping new weights for a member
makes those scores stale, and a stale record counts for nothing (:func:`gsprestore.methods.defaults.current_ensembles`) until the
ensemble is scored again: ``--best`` never runs it on the strength of other weights' figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from .interface import Restorer

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

#: The method's name.
NAME = "ensemble"
#: The methods it averages, in the order they run.
MEMBERS: tuple[str, ...] = ("ugtv", "uglr")


def make_restorer(name: str, task: str, *, weights: Any = None, device: Any = "cpu", **options: Any) -> Restorer:
    """The ensemble's :class:`~gsprestore.methods.interface.Restorer`: every member of :data:`MEMBERS` run on
    the same tile and the outputs averaged. ``weights``: ``{member: PATH}`` for members that should
    not use their shipped weights (the others do); missing shipped weights raise the member's
    :class:`~gsprestore.core.errors.WeightsError`."""
    import torch

    from .graph_methods import make_restorer as network  # the members' factory (no registry: it names us)

    if options:
        raise UsageError(f"unknown options for {NAME}: {', '.join(sorted(options))}")
    if weights is not None and not isinstance(weights, dict):
        raise UsageError(f"{NAME} takes its members' weights, one each: --weights ugtv=PATH --weights uglr=PATH")
    given = {str(k).lower(): v for k, v in (weights or {}).items()}
    unknown = sorted(set(given) - set(MEMBERS))
    if unknown:
        raise UsageError(f"{NAME} averages {', '.join(MEMBERS)}; no member {', '.join(unknown)}")
    members = [network(m, task, device=device, **({"weights": given[m]} if m in given else {})) for m in MEMBERS]

    def fn(y: "Tensor", pattern: str = "RGGB") -> "Tensor":
        total = members[0](y, pattern).float()
        for member in members[1:]:
            total = total + member(y, pattern).float()  # out of place: outputs may be inference tensors
        return total.div_(len(members))

    info = {"members": {m.name: m.info for m in members}}
    return Restorer(name=NAME, task=task, fn=fn, halo=max(m.halo for m in members), kind="ensemble",
                    module=torch.nn.ModuleList([m.module for m in members]), info=info)
