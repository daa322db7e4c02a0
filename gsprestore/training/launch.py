"""Starting a training run (:func:`train`): check the options, join the ranks under ``torchrun``
(:mod:`gsprestore.runtime.distributed`), read or check the recipe, cut the patches, then hand the run to
the loop (:class:`gsprestore.training.loop.TrainingRun`: steps, validation, checkpoints, export)."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from ..runtime import distributed as D
from ..core.claims import run_lock
from ..core.errors import GspError, UsageError
from .build import adopt_init_config, build_network, build_patch_sets, pick_device
from .checkpoints import open_recipe
from .loop import TrainingRun
from .recipe import TrainConfig
from ..runtime.progress import TrainProgress
from .report import TrainResult
from .stopping import Deadline


def train(
    cfg: TrainConfig | None,
    run_dir: str | Path,
    *,
    resume: bool = False,
    epochs: int | None = None,
    device: str = "auto",
    threads: int | None = None,
    workers: int = 0,
    max_steps: int | None = None,
    progress: TrainProgress | bool | None = None,
    grad_checkpoint: bool = False,
    time_budget: float | None = None,
    cuda_graph: bool = False,
) -> TrainResult:
    """Train (or, with ``resume``, continue training) the run in ``run_dir``.

    ``cfg`` is the recipe of a new run; with ``resume`` it is read from ``run_dir`` (pass None),
    and only ``epochs`` may change (to extend a run). ``max_steps`` stops after that many optimizer
    steps in total (a smoke run; the schedule still spans all epochs). SIGINT / SIGTERM finish the
    current step and write a checkpoint (status ``stopped``).

    ``time_budget`` (seconds, counted from this call, patch cutting included) ends the run in
    time: before a step that would leave less than the time a validation, a checkpoint and the
    export need (measured, with a margin), the run validates, checkpoints and exports its best
    weights (status ``time-budget``). A run started from ``cfg.init`` validates those weights
    first: they are the best until training beats them, so the exported model is never worse on
    validation than the one it started from.

    ``cuda_graph`` (CUDA only) replays each full-size batch's forward + backward from a CUDA graph
    captured at the first step and checked against an eager step (:mod:`gsprestore.training.graphed_step`);
    if capture fails or differs, the run logs why and continues eagerly.

    ``progress`` receives the run's progress (:class:`TrainProgress`); None or False: nothing.

    Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) every rank calls this and they train
    one model with DistributedDataParallel (NCCL on CUDA, each rank on ``cuda:LOCAL_RANK``; gloo
    on the CPU): ``cfg.batch_size`` is the *global* batch, each rank takes its contiguous share
    of every step's batch (``batch_size / WORLD_SIZE`` patches) and the gradients are averaged,
    so N ranks give the weights one rank gives on the same batches. Rank 0 alone validates and
    writes the run folder; ``max_steps``, the time budget and a signal on any rank stop every
    rank at the same step. The world size must divide the global batch (on ``resume`` too)."""
    import torch

    t_call = time.monotonic()
    if time_budget is not None and not time_budget > 0:
        raise UsageError(f"--time-budget must be a positive number of seconds, got {time_budget}")
    deadline = Deadline(time_budget, t_call)
    if not isinstance(progress, TrainProgress):
        if progress not in (None, False):
            raise TypeError("progress must be a TrainProgress (e.g. gsprestore.runtime.progress.RichProgress)")
        progress = TrainProgress()
    run_dir = Path(run_dir)
    if threads:
        torch.set_num_threads(int(threads))
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps must be >= 1, got {max_steps}")

    ranks = D.ranks_from_env()
    if ranks.active:
        _check_world_before_joining(cfg, run_dir, resume, ranks.world, cuda_graph)
        if not ranks.main:
            progress = TrainProgress()  # one display: rank 0's
    dev = pick_device(D.rank_device(device, ranks))
    if dev.type == "cuda" and ranks.active:
        torch.cuda.set_device(dev)
    D.start(ranks, "nccl" if dev.type == "cuda" else "gloo")
    lock = ExitStack()  # rank 0 holds the run folder's lock for the whole run (taken with the recipe)
    try:
        return _train_ranks(cfg, run_dir, ranks, dev, progress, deadline, resume=resume, epochs=epochs,
                            workers=workers, max_steps=max_steps, grad_checkpoint=grad_checkpoint,
                            time_budget=time_budget, cuda_graph=cuda_graph, lock=lock)
    finally:
        lock.close()
        D.finish(ranks)


def _check_world_before_joining(cfg: TrainConfig | None, run_dir: Path, resume: bool, world: int,
                                cuda_graph: bool) -> None:
    """The refusals every rank can make alone, before the ranks meet: ``--cuda-graph`` with more
    than one rank, and a world size that does not divide the global batch (read from the run's
    ``config.json`` on resume, where this rank can read it; rank 0 checks again after joining)."""
    if cuda_graph:
        raise UsageError("--cuda-graph trains on one rank only for now (leave it out under torchrun)")
    batch = None
    if not resume and cfg is not None:
        batch = cfg.batch_size
    elif resume:
        try:
            from .checkpoints import load_run_config

            batch = load_run_config(run_dir).batch_size
        except GspError:
            batch = None  # rank 0 says what is wrong with the folder
    if batch is not None:
        _check_world(batch, world, resume)


def _check_world(batch: int, world: int, resume: bool) -> None:
    if batch % world:
        if resume:
            raise UsageError(f"this run's global batch is {batch}: resume it on a number of ranks that divides "
                             f"{batch} (WORLD_SIZE is {world})")
        raise UsageError(f"--batch-size {batch} is the global batch: it must be a multiple of the {world} "
                         f"ranks (WORLD_SIZE), each rank taking batch / ranks patches per step")


def _train_ranks(cfg, run_dir: Path, ranks: D.Ranks, dev, progress: TrainProgress, deadline: Deadline, *,
                 resume: bool, epochs, workers: int, max_steps, grad_checkpoint: bool, time_budget,
                 cuda_graph: bool, lock: ExitStack) -> TrainResult:
    """:func:`train` once the ranks (if several) have joined: rank 0 takes the run folder's lock
    (:func:`gsprestore.core.claims.run_lock`, held until the run ends: a second run into the same
    folder, new or resumed, is refused in one line), reads or checks the recipe (and adopts the
    ``--init`` configuration) for everyone, each rank cuts the same patches."""

    def recipe():
        lock.enter_context(run_lock(run_dir, "training run"))
        c = open_recipe(cfg, run_dir, resume, epochs)
        c.check()
        init = None if resume else adopt_init_config(c)  # --init: the weights' own configuration
        if init is not None:
            build_network(c)  # an --init that copies nothing fails here, in one line, before the patches
        return c, init

    cfg, init = D.from_rank0(ranks, recipe, "reading the recipe")
    _check_world(cfg.batch_size, ranks.world, resume)
    if init is not None:
        progress.message(init["note"])
    if cfg.schedule == "cosine-time" and time_budget is None:
        raise UsageError("--schedule cosine-time anneals over the wall-clock budget: pass --time-budget")
    if cuda_graph and dev.type != "cuda":
        raise UsageError(f"--cuda-graph needs a CUDA device (--device is {dev})")

    # ---- patches (a pure function of the recipe; every rank cuts the same ones)
    from .patches import check_patch_memory, list_images
    from .trainpack import is_pack

    for folder in cfg.data:  # a missing or empty folder is its one-line error before any progress line
        if not is_pack(folder):
            list_images(folder)
    check_patch_memory(cfg.patches, int(round(cfg.patches * cfg.val_fraction)) if cfg.val_patches is None
                       else cfg.val_patches, cfg.patch_size)  # so are patches that cannot fit in memory
    with progress.busy("cutting training patches..."):
        sets = build_patch_sets(cfg, workers=workers)
    if sets.train.shape[0] == 0:
        raise UsageError("no training patches")
    if ranks.active:
        theirs = D.from_rank0(ranks, lambda: sets.info["train_digest"], "comparing the patches")
        differ = D.all_max(ranks, [float(theirs != sets.info["train_digest"])], dev, "comparing the patches")[0]
        if differ:  # every rank says so and stops
            raise GspError("the ranks cut different training patches from their --data folders (the folders "
                           "differ between the nodes); make them equal")
    run = TrainingRun(cfg, run_dir, sets, dev, progress, deadline, grad_checkpoint=grad_checkpoint,
               cuda_graph=cuda_graph, max_steps=max_steps, ranks=ranks)
    run.init_config = init
    try:
        run.open(resume)
        run.loop()
        result = run.stopped() if run.status == "stopped" else run.export()
        D.barrier(ranks, "the end of the run")  # the others wait for rank 0's files
        return result
    finally:
        run.close()
