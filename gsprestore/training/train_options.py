"""What a ``gsprestore train`` call asks for (:class:`TrainOptions`, its options by name), checked
and assembled into a recipe (:class:`gsprestore.training.recipe.TrainConfig`) or a resumed run, then
trained (:func:`train_from_options`): a resumed run may change only what does not shape the result
(:data:`RESUME_OPTIONS`) and must say how far to go on once it ended (:func:`resume_plan`); a smoke
run (``--max-steps``) cuts only the patches it can use (:func:`smoke_sets`); the model options come
from their own flags (:data:`MODEL_FLAGS`) and ``--model-opt KEY=VALUE``. A recipe file (``--recipe``,
:func:`gsprestore.training.recipe.load_recipe`) gives the defaults of every recipe option: what the
command line gives wins."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .recipe import RESUMABLE_CHANGES, TrainConfig, load_recipe

#: The options that say how a call runs, never what it trains (not part of any recipe).
RUNTIME_OPTIONS = {"device", "threads", "workers", "max_steps", "progress", "quiet", "checkpoint", "time_budget",
                   "cuda_graph"}
#: Options that may be given together with --resume: the runtime ones and the recipe's
#: :data:`~gsprestore.training.recipe.RESUMABLE_CHANGES` (its one list of what may change).
RESUME_OPTIONS = {"resume", *RESUMABLE_CHANGES, *RUNTIME_OPTIONS}
#: Model options with their own flag: option name -> build_model key.
MODEL_FLAGS = {"blocks": "blocks", "heads": "heads", "width": "width", "cg_iters": "cg_iters",
               "admm_iters": "admm_iters"}


@dataclass
class TrainOptions:
    """Every option of ``gsprestore train`` by its name (``gsprestore train --help`` says what each
    does); ``more_data``: the folders after ``--data DIR``; ``out``: the run folder; ``checkpoint``:
    gradient checkpointing. An option that is a recipe field defaults to the recipe's own default
    (:class:`gsprestore.training.recipe.TrainConfig`)."""

    more_data: list[Path] | None = None
    task: str | None = None
    prior: str | None = None
    data: list[Path] | None = None
    out: Path | None = None
    resume: Path | None = None
    recipe: str | None = None
    print_recipe: bool = False
    patch_size: int = TrainConfig.patch_size
    patches: int = TrainConfig.patches
    val_fraction: float = TrainConfig.val_fraction
    val_patches: int | None = None
    epochs: int | None = None
    batch_size: int = TrainConfig.batch_size
    lr: float = TrainConfig.lr
    schedule: str = TrainConfig.schedule
    min_lr_ratio: float = TrainConfig.min_lr_ratio
    step_epochs: int | None = None
    step_gamma: float = TrainConfig.step_gamma
    warmup_steps: int = TrainConfig.warmup_steps
    loss: str = TrainConfig.loss
    grad_clip: float = TrainConfig.grad_clip
    weight_decay: float = TrainConfig.weight_decay
    step_size_lr_scale: float = TrainConfig.step_size_lr_scale
    seed: int = TrainConfig.seed
    downscale: int = TrainConfig.downscale
    downscale_filter: str = TrainConfig.downscale_filter
    downscale_scope: str = TrainConfig.downscale_scope
    downscale_bsds: bool = False
    augment: bool = TrainConfig.augment
    mine_share: float = TrainConfig.mine_share
    color_jitter: float = TrainConfig.color_jitter
    raw_noise: str = TrainConfig.raw_noise
    blocks: int | None = None
    heads: int | None = None
    width: int | None = None
    cg_iters: int | None = None
    admm_iters: int | None = None
    model_opt: list[str] | None = None
    init: Path | None = None
    device: str = "auto"
    threads: int | None = None
    workers: int = 0
    max_steps: int | None = None
    log_every: int = TrainConfig.log_every
    time_budget: float | None = None
    checkpoint: bool = False
    cuda_graph: bool = False
    quiet: bool = False
    progress: bool = True

    def check_resources(self) -> None:
        """``--threads``, ``--workers``, ``--max-steps`` and ``--time-budget`` within bounds (usage errors)."""
        from ..core.errors import UsageError

        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be at least 1 (leave it out for torch's default), got {self.threads}")
        if self.threads is not None and self.threads > 4096:
            raise UsageError(f"--threads must be at most 4096, got {self.threads}")
        if not 0 <= self.workers <= 256:
            raise UsageError(f"--workers must be 0 to 256, got {self.workers}")
        if self.max_steps is not None and self.max_steps > 2**31 - 1:
            raise UsageError(f"--max-steps must be at most {2**31 - 1:,}, got {self.max_steps}")
        if self.time_budget is not None and not math.isfinite(self.time_budget):
            raise UsageError("--time-budget must be a finite number of seconds (leave it out for none), got "
                             f"{self.time_budget}")


def assemble(o: TrainOptions, given: set[str], say: Callable[[str], None]) -> tuple[Any, Path]:
    """``(recipe, run folder)`` of a call: a new run's checked :class:`TrainConfig`, or None and the
    folder of a run to resume. ``given``: the options given on the command line (or in the
    environment), not left at their defaults; ``say``: where the notes go (a resumed run's plan, a
    smoke run's cut)."""
    from ..core.errors import UsageError
    from ..models.unrolled import check_config

    o.check_resources()
    folders = list(o.data or []) + list(o.more_data or [])
    if o.resume is not None:
        extra = sorted(given - RESUME_OPTIONS - {"more_data"} - ({"out"} if o.out == o.resume else set()))
        if folders:
            extra = sorted(set(extra) | {"data"})
        if extra:
            flags = ", ".join("--" + e.replace("_", "-") for e in extra)
            raise UsageError(f"{flags}: cannot change a run's recipe on --resume (only --epochs, --max-steps, "
                             "--device, --threads, --workers); start a new run with --out instead")
        note = resume_plan(o.resume, epochs_given="epochs" in given, steps_given="max_steps" in given)
        if note:
            say(f"note: {note}")
        return None, o.resume
    recipe_model: dict[str, Any] = {}
    recipe_extra: dict[str, Any] = {}
    if o.recipe is not None:  # the file's values stand in for every recipe option not given
        fields_, notes = load_recipe(o.recipe)
        for note in notes:
            say(f"note: {note}")
        for key, value in fields_.items():
            if key == "model":
                recipe_model = dict(value)
            elif key == "charbonnier_eps":  # a recipe field with no option of its own
                recipe_extra[key] = value
            elif key == "data":
                if not folders:
                    folders = [Path(v) for v in ([value] if isinstance(value, str) else value)]
            elif key not in given:
                setattr(o, key, Path(value) if key == "init" and value is not None else value)
    missing = [flag for flag, v in (("--task", o.task), ("--prior", o.prior), ("--data", folders or None),
                                    ("--out", o.out or o.print_recipe or None)) if v is None]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or pass --resume RUN_DIR)")
    model = {**recipe_model, **parse_model_opts(o.model_opt or [])}
    for name, key in MODEL_FLAGS.items():
        if (value := getattr(o, name)) is not None:
            model[key] = value
    try:  # sizes within the architecture's bounds (--blocks 0 is no network)
        check_config(model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    downscale, downscale_scope = o.downscale, o.downscale_scope
    if o.downscale_bsds:
        if "downscale" in given and downscale != 2:
            raise UsageError("--downscale-bsds means --downscale 2")
        downscale, downscale_scope = 2, "jpeg"
    patches, val_patches = o.patches, o.val_patches
    if o.max_steps is not None and o.max_steps >= 1:  # a smoke run cuts only what it can use
        patches, val_patches, note = smoke_sets(o.max_steps, o.batch_size, patches, val_patches, o.val_fraction, given)
        if note:
            say(note)
    cfg = TrainConfig(
        task=o.task, prior=str(o.prior).lower(), data=[str(f) for f in folders], patch_size=o.patch_size,
        patches=patches, val_fraction=o.val_fraction, val_patches=val_patches, epochs=o.epochs or 30,
        batch_size=o.batch_size, lr=o.lr, schedule=o.schedule, min_lr_ratio=o.min_lr_ratio,
        step_epochs=o.step_epochs, step_gamma=o.step_gamma, warmup_steps=o.warmup_steps, loss=o.loss,
        grad_clip=o.grad_clip, weight_decay=o.weight_decay, step_size_lr_scale=o.step_size_lr_scale, seed=o.seed,
        downscale=downscale, downscale_filter=o.downscale_filter, downscale_scope=downscale_scope,
        augment=o.augment, mine_share=o.mine_share, color_jitter=o.color_jitter, raw_noise=o.raw_noise, model=model,
        init=None if o.init is None else str(o.init), log_every=o.log_every, **recipe_extra,
    ).check()
    return cfg, o.out


def train_from_options(o: TrainOptions, given: set[str], *, say: Callable[[str], None], progress: Any = None) -> Any:
    """Check and assemble ``o`` (:func:`assemble`), set the allocator for the run (``checkpoint``:
    freed memory goes back to the OS at once; else it is kept, no page faults on each step's fresh
    tensors: docs/training.md) and train (:func:`gsprestore.training.train`); its
    :class:`gsprestore.training.report.TrainResult`."""
    from ..core.memory import keep_freed_memory, set_mmap_threshold
    from .launch import train

    cfg, run_dir = assemble(o, given, say)
    if o.checkpoint:
        set_mmap_threshold(1 << 20)  # docs/architecture.md: one paper-size uGTV step 3.98 -> 1.45 GB
    else:
        keep_freed_memory()
    return train(cfg, run_dir, resume=o.resume is not None, epochs=o.epochs, device=o.device, threads=o.threads,
                 workers=o.workers, max_steps=o.max_steps, progress=progress, grad_checkpoint=o.checkpoint,
                 time_budget=o.time_budget, cuda_graph=o.cuda_graph)


def smoke_sets(max_steps: int, batch_size: int, patches: int, val_patches: int | None, val_fraction: float,
               given: set[str]) -> tuple[int, int | None, str | None]:
    """``--max-steps N`` on a new run without ``--patches`` / ``--val-patches``: cut the N x batch
    training patches the run can use (not 10,000) and as many validation patches as the fraction
    gives of those (at least 8), and say so in one line. Returns ``(patches, val_patches, note)``."""
    new_patches, new_val = patches, val_patches
    if "patches" not in given:
        new_patches = max(batch_size, min(patches, max_steps * batch_size))
    if "val_patches" not in given and val_patches is None and val_fraction > 0:
        before = int(round(patches * val_fraction))  # the default of gsprestore.training.patches
        new_val = min(before, max(8, int(round(new_patches * val_fraction))))
        if new_val == before:
            new_val = None
    if (new_patches, new_val) == (patches, val_patches):
        return patches, val_patches, None
    val_text = "" if new_val is None else f" and {new_val:,} validation patches"
    note = (f"--max-steps {max_steps}: cutting {new_patches:,} training patches ({max_steps} steps x batch "
            f"{batch_size}){val_text}, not {patches:,}"
            + ("" if new_val is None else f" / {int(round(patches * val_fraction)):,}")
            + " (--patches / --val-patches choose)")
    return new_patches, new_val, note


def parse_model_opts(items: list[str]) -> dict[str, Any]:
    from ..core.errors import UsageError
    from ..core.jsontext import loads

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--model-opt takes KEY=VALUE, got {item!r}")
        try:
            out[key] = loads(value)
        except ValueError:  # not JSON (or nested too deeply): the text itself
            out[key] = value
    return out


#: A finished run resumed without --epochs / --max-steps trains on only if what is left is
#: expected to take less than this (seconds, at its recorded pace); longer is refused with the figures.
RESUME_QUIET_S = 600.0


def resume_plan(run_dir: Path, *, epochs_given: bool, steps_given: bool) -> str | None:
    """What ``train --resume RUN_DIR`` has left to do and about how long it takes (its recorded
    patches/s): one line, or None when the run left no summary (it was interrupted: resuming
    finishes what it started). A run that ended (``summary.json``: finished, ``--max-steps``,
    time budget) and would train longer than :data:`RESUME_QUIET_S` more is refused unless
    ``--epochs`` or ``--max-steps`` says how far; a complete run without ``--epochs`` too."""
    from ..core.errors import UsageError
    from ..core.heartbeat import clock
    from .checkpoints import read_run_config

    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    recipe = read_run_config(run_dir).get("recipe", {})
    total, done = int(summary.get("epochs") or recipe.get("epochs") or 0), int(summary.get("epochs_done") or 0)
    status, steps = summary.get("status", "finished"), int(summary.get("steps") or 0)
    batch = int(recipe.get("batch_size") or 1)
    per_epoch = math.ceil(int(recipe.get("patches") or 0) / batch) or (steps // max(done, 1))
    left_steps = max(0, per_epoch * total - steps)
    pps = summary.get("patches_per_s")
    seconds = left_steps * batch / pps if isinstance(pps, (int, float)) and pps > 0 else None
    how_long = f"about {clock(seconds)} at its recorded {pps:.3g} patches/s" if seconds is not None else "time unknown"
    where = f"{run_dir} ended ({status}) at step {steps}, epoch {done} of {total}"
    if epochs_given or steps_given:
        return f"{where}; resuming as --epochs / --max-steps say"
    if left_steps == 0:
        raise UsageError(f"{where}: it is complete; pass --epochs N (more than {total}) to train on")
    left = f"{left_steps} steps ({total - done} epoch(s)) left of its {total} epochs, {how_long}"
    if seconds is None or seconds > RESUME_QUIET_S:
        raise UsageError(f"{where}; {left}: pass --epochs N or --max-steps N to say how far to go on")
    return f"{where}; training on: {left}"
