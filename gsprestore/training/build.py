"""What a training run is built from: the device, the patches (:mod:`gsprestore.training.patches`, training
packs included), their order in each epoch, and the network of the recipe (seeded, optionally
started from ``--init`` weights)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from ..runtime.tiling import resolve_device
from ..core.errors import GspError, UsageError
from .checkpoints import init_config, init_from
from .recipe import TrainConfig

#: Keys of a stored model configuration that name the network rather than configure it.
IDENTITY_KEYS = ("prior", "task", "method")


def pick_device(device: str = "auto"):
    """``--device`` of ``gsprestore train``: :func:`gsprestore.runtime.tiling.resolve_device` (auto, cpu,
    cuda, cuda:N), any refusal a usage error (exit code 2)."""
    try:
        return resolve_device(device)
    except UsageError:
        raise
    except GspError as exc:
        raise UsageError(str(exc)) from None


def model_factory() -> Callable:
    """``build_model(method, task, **overrides) -> nn.Module`` (:mod:`gsprestore.models`); the
    trainer needs only ``forward(known, mask) -> x`` and a JSON-able ``.config``."""
    from ..models import build_model

    return build_model


def adopt_init_config(cfg: TrainConfig) -> dict[str, Any] | None:
    """``--init``: the new run's network takes the configuration stored with its starting weights
    (:func:`~gsprestore.training.checkpoints.init_config`: e.g. the shipped uGTV demosaicker's
    2 ADMM x 5 CG, green-difference signal), not the paper-size default; the keys already in
    ``cfg.model`` (``--blocks``, ``--cg-iters``, ``--model-opt``, ...) win. ``cfg.model`` is
    updated in place to the whole configuration, so ``config.json``, its command line, a resume
    and the export all rebuild the same network.

    Nothing is adopted from weights of another prior or task (their fitting tensors are still
    copied by :func:`init_from`). Returns ``{"adopted", "given", "note"}``: the adopted keys, the
    keys the options set, and the one line that says so; None without ``cfg.init``."""
    if not cfg.init:
        return None
    path = Path(cfg.init)
    stored = init_config(path) or {}
    given = dict(cfg.model)
    identity = {k: stored.get(k) for k in IDENTITY_KEYS if stored.get(k) is not None}
    expected = {"prior": cfg.prior, "task": cfg.task, "method": cfg.method}
    # the method name follows from the configuration (ugtv-lite is ugtv with the packed trunk,
    # a key the weights' configuration brings): only another prior or task is foreign
    foreign = {k: v for k, v in identity.items() if k != "method" and v != expected[k]}
    name = path.name
    if foreign or not stored:
        source = identity.get("method") or ("u" + str(identity["prior"]) if "prior" in identity else "other")
        what = ("records no model configuration" if not stored else
                f"holds {source} {identity.get('task', '')} weights, not {cfg.method} {cfg.task}".replace("  ", " "))
        return {"adopted": {}, "given": given,
                "note": f"--init {name} {what}: building the "
                        + ("configured" if given else "default") + " network; tensors that fit are copied"}
    adopted = {k: v for k, v in stored.items() if k not in IDENTITY_KEYS and k not in given}
    cfg.model = {**adopted, **given}
    try:
        from ..models.unrolled import default_config

        default = default_config(cfg.prior, cfg.task)
    except (ImportError, ValueError):  # pragma: no cover - a replaced model factory
        default = {}
    shown = {k: v for k, v in sorted(adopted.items()) if default.get(k, object()) != v}
    note = (f"--init {name}: its own model configuration ("
            + (", ".join(f"{k}={_short(v)}" for k, v in shown.items()) + ", rest default" if shown
               else "the default")
            + ")")
    if given:
        note += "; from the options: " + ", ".join(f"{k}={_short(v)}" for k, v in sorted(given.items()))
    # other unrolling depths: see gsprestore.models.unrolled.regrown_step_sizes
    depth = [k for k in ("admm_iters", "cg_iters")
             if isinstance(stored.get(k), int) and isinstance(cfg.model.get(k), int) and cfg.model[k] != stored[k]]
    if depth:
        note += ("; the added iterations' CG step sizes start at 0, so the network starts as the weights' own"
                 if all(cfg.model[k] > stored[k] for k in depth)
                 else "; the step sizes of the iterations both have are kept")
    return {"adopted": adopted, "given": given, "note": note}


def _short(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def build_network(cfg: TrainConfig, *, grad_checkpoint: bool = False):
    """The network of the recipe, initialised from ``torch.manual_seed(cfg.seed)`` (or from the
    weights in ``cfg.init``: a ``model.pt``, ``best.pt`` or ``last.pt``). ``grad_checkpoint``
    (memory, not architecture) recomputes each block in the backward pass."""
    import torch

    torch.manual_seed(cfg.seed)
    extra = {"checkpoint": True} if grad_checkpoint else {}
    try:
        # read on the package (gsprestore.training.model_factory), where tests replace it
        model = sys.modules[__package__].model_factory()(cfg.method, cfg.task, **cfg.model, **extra)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad model option ({exc}); check --model-opt / --blocks / --cg-iters ...") from None
    if cfg.init:
        model.init_regrown = []
        model.init_report = init_from(model, Path(cfg.init), model.init_regrown)
    return model


def optimizer_groups(model, step_size_lr_scale: float = 1.0) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: one group of every parameter, or, with a
    ``step_size_lr_scale`` other than 1, the unrolled CG step sizes (each block's ``alpha`` and
    ``beta``) in a group of their own whose ``lr_scale`` multiplies the scheduled learning rate.
    Adam moves every parameter by about the learning rate a step whatever its scale, and the step
    sizes are O(1) where the CNN's weights are O(0.05): at the CNN's rate, step sizes that
    ``--init`` added at 0 (:func:`gsprestore.models.unrolled.regrown_step_sizes`) need thousands
    of steps to matter."""
    from ..models.unrolled import STEP_SIZE_SUFFIXES

    named = list(model.named_parameters())
    if step_size_lr_scale == 1.0:
        return [{"params": [p for _, p in named]}]
    steps = [p for n, p in named if n.endswith(STEP_SIZE_SUFFIXES)]
    rest = [p for n, p in named if not n.endswith(STEP_SIZE_SUFFIXES)]
    return [{"params": rest, "lr_scale": 1.0}, {"params": steps, "lr_scale": float(step_size_lr_scale)}]


def model_config(model) -> dict[str, Any]:
    """The network's JSON-able ``.config`` (empty when it has none)."""
    cfg = getattr(model, "config", None)
    return dict(cfg) if isinstance(cfg, dict) else {}


def build_patch_sets(cfg: TrainConfig, *, workers: int = 0):
    """The training/validation patches of a recipe (see :mod:`gsprestore.training.patches`); a training
    pack among the folders (:mod:`gsprestore.training.trainpack`) brings its own photo-level split."""
    from . import patches
    from .trainpack import is_pack, pack_folders

    packs = [pack_folders(f) for f in cfg.data if is_pack(f)]
    return patches.build_patch_sets(
        [f for f in cfg.data if not is_pack(f)], presplit=packs, patches=cfg.patches, patch_size=cfg.patch_size,
        val_fraction=cfg.val_fraction, val_patches=cfg.val_patches, seed=cfg.seed, downscale=cfg.downscale,
        downscale_filter=cfg.downscale_filter, downscale_scope=cfg.downscale_scope, augment=cfg.augment,
        mine_share=cfg.mine_share, task=cfg.task, workers=workers)


def epoch_order(seed: int, epoch: int, n: int):
    """The order of the ``n`` training patches in ``epoch``: a permutation from a generator seeded
    by ``(seed, epoch)`` alone, so it can be recomputed when resuming mid-epoch."""
    import numpy as np
    import torch

    s = int(np.random.SeedSequence([seed, 104, epoch]).generate_state(1, np.uint64)[0])
    g = torch.Generator().manual_seed(s)
    return torch.randperm(n, generator=g)
