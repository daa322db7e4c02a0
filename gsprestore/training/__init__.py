"""Training of the unrolled networks uGLR / uGTV (paper Sec. 5: trained end to end by
back-propagation through the unrolled CG / ADMM iterations, on 10k random 64x64 patches).

One run lives in a folder ``RUN_DIR``::

    config.json   the recipe (every option that shapes the result) and how the patches were made
    log.jsonl     JSON lines: "start"/"resume", "step" (every ``log_every`` steps), "epoch",
                  "stop", "end" records; a resumed run appends to it
    last.pt       the latest checkpoint: model, optimizer, schedule, RNG states, epoch/batch/step
    best.pt       the model with the best validation PSNR so far (never overwritten by a worse one)
    model.pt      the exported best weights (:func:`gsprestore.methods.weights.save_weights`), full recipe
                  in its ``meta``
    summary.json  the final figures (also printed as a table)

A training step: ground-truth RGB patches ``x`` (already augmented, :mod:`gsprestore.training.patches`),
the observation ``y = H x`` (RGGB mosaic, or ``x[..., ::2, ::2]`` for 2x), the network input
``(known, mask) = (H^T y, H^T 1)`` (:func:`gsprestore.physics.tasks.network_input`), the loss between the
network's output and ``x``, one Adam step. Validation after every epoch is the dataset-MSE PSNR
(docs/protocol.md; RGB for demosaicking, BT.601 luma Y for 2x) of the reconstruction of held-out
patches (photos never used for training).

Determinism: the initial weights come from ``torch.manual_seed(seed)``; the order of the patches
in epoch ``e`` is a permutation drawn from its own generator seeded by ``(seed, e)``; the
learning rate is a pure function of the step (:class:`LRSchedule`). So a checkpoint (weights,
Adam state, RNG states, step, position in the epoch) resumes a run exactly where it stopped, and
two CPU runs with the same seed and thread count give identical weights.

Under ``torchrun`` every rank calls :func:`train` and they train one model with
DistributedDataParallel (:mod:`gsprestore.runtime.distributed`; docs/training.md, "More than one GPU"):
``batch_size`` is the global batch, each rank takes its share of every step's batch, rank 0 alone
writes the run folder, and every stop (``max_steps``, the time budget, a signal) is agreed so that
all ranks stop at the same step.

The modules: :mod:`.recipe` (TrainConfig, LRSchedule, losses), :mod:`.checkpoints` (the run
folder's files), :mod:`.build` (device, patches, network), :mod:`.evaluation` (validation),
:mod:`.stopping` (signals, time budget), :mod:`.launch` (:func:`train`: options, ranks, recipe,
patches), :mod:`.loop` (the steps, validation, checkpoints, export), :mod:`.report` (what it
reports and returns) and :mod:`.progress` (the
Rich display and summary table). ``model_factory``, ``make_loss``, ``evaluate`` and
``MAX_BAD_STEPS`` are read here at run time by the loop: replace them on this package.
"""

from __future__ import annotations

from ..core.memory import keep_freed_memory, set_mmap_threshold  # the trainer's allocator settings
from .build import (
    adopt_init_config, build_network, build_patch_sets, epoch_order, model_factory, optimizer_groups,
    pick_device,
)
from .checkpoints import (
    CHECKPOINT_FORMAT, JsonLog, atomic_save, export_weights, init_from, load_checkpoint, load_run_config,
    read_log,
)
from .evaluation import evaluate, score_space
from .launch import train
from .loop import MAX_BAD_STEPS
from ..runtime.progress import RichProgress, TrainProgress, summary_table
from .report import TrainResult
from .recipe import LOSSES, PRIORS, RESUMABLE_CHANGES, SCHEDULES, LRSchedule, TrainConfig, make_loss
from .stopping import Deadline, GracefulStop

__all__ = [
    "CHECKPOINT_FORMAT", "LOSSES", "MAX_BAD_STEPS", "PRIORS", "RESUMABLE_CHANGES", "SCHEDULES", "Deadline",
    "GracefulStop", "JsonLog", "LRSchedule", "RichProgress", "TrainConfig", "TrainProgress", "TrainResult",
    "adopt_init_config", "atomic_save", "build_network", "build_patch_sets", "epoch_order", "evaluate",
    "export_weights", "init_from", "optimizer_groups",
    "load_checkpoint", "load_run_config", "make_loss", "model_factory", "pick_device", "read_log",
    "score_space", "set_mmap_threshold", "keep_freed_memory", "summary_table", "train",
]
