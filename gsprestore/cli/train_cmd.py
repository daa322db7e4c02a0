"""``gsprestore train``: train uGLR / uGTV on folders of photos, or resume a run.

Thin wrapper over :func:`gsprestore.training.train`; no torch import at module level."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from .registry import command

#: Options that may be given together with --resume (they do not change the recipe).
RESUME_OPTIONS = {"resume", "epochs", "device", "threads", "workers", "max_steps", "progress", "quiet", "checkpoint",
                  "time_budget", "cuda_graph"}
#: Model options with their own flag: CLI parameter name -> build_model key.
MODEL_FLAGS = {"blocks": "blocks", "heads": "heads", "width": "width", "cg_iters": "cg_iters",
               "admm_iters": "admm_iters"}


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


def _parse_model_opts(items: list[str]) -> dict[str, Any]:
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


@command("train")
def train(
    ctx: typer.Context,
    more_data: Annotated[
        Optional[list[Path]],
        typer.Argument(metavar="[DIR ...]", help="More training folders (so that --data A B C works).",
                       show_default=False),
    ] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="demosaic (RGGB) or upscale2x.")] = None,
    prior: Annotated[Optional[str], typer.Option("--prior", help="glr (uGLR) or gtv (uGTV).")] = None,
    data: Annotated[
        Optional[list[Path]],
        typer.Option("--data", help="Folder of training photos (PNG/JPEG/TIFF, searched recursively): "
                     "--data DIR [DIR ...]. Never a test set (Kodak24, McM, Urban100 are refused).",
                     show_default=False),
    ] = None,
    out: Annotated[Optional[Path], typer.Option("--output", "-o", "--out", help="Run folder to create (checkpoints, "
                                                "log, model.pt).")] = None,
    resume: Annotated[
        Optional[Path], typer.Option("--resume", help="Continue the run in this folder where it stopped "
                                     "(only --epochs, --max-steps, --device, --threads, --workers may be given).")
    ] = None,
    patch_size: Annotated[int, typer.Option("--patch-size", help="Patch side (even).")] = 64,
    patches: Annotated[int, typer.Option("--patches", help="Number of training patches.")] = 10000,
    val_fraction: Annotated[
        float, typer.Option("--val-fraction", help="Fraction of the photos (of each folder) held out for validation.")
    ] = 0.1,
    val_patches: Annotated[
        Optional[int], typer.Option("--val-patches", help="Validation patches (default: patches x val-fraction).")
    ] = None,
    epochs: Annotated[Optional[int], typer.Option("--epochs", help="Epochs (default: 30).", show_default=False)] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Patches per step: the global batch (under "
                                            "torchrun each rank takes batch / ranks of them).")] = 16,
    lr: Annotated[float, typer.Option("--lr", help="Adam learning rate.")] = 1e-3,
    schedule: Annotated[str, typer.Option("--schedule", help="cosine, cosine-time (over the --time-budget), step "
                                          "or none.")] = "cosine",
    min_lr_ratio: Annotated[float, typer.Option("--min-lr-ratio", help="Cosine: final lr / lr.")] = 0.01,
    step_epochs: Annotated[
        Optional[int], typer.Option("--step-epochs", help="Step schedule: epochs per decay (default: epochs / 3).")
    ] = None,
    step_gamma: Annotated[float, typer.Option("--step-gamma", help="Step schedule: decay factor.")] = 0.5,
    warmup_steps: Annotated[int, typer.Option("--warmup-steps", help="Linear learning-rate warm-up steps.")] = 0,
    loss: Annotated[str, typer.Option("--loss", help="l1, l2 or charbonnier.")] = "l1",
    grad_clip: Annotated[float, typer.Option("--grad-clip", help="Clip the gradient norm to this (0: off).")] = 0.0,
    weight_decay: Annotated[float, typer.Option("--weight-decay", help="Adam weight decay.")] = 0.0,
    step_size_lr_scale: Annotated[float, typer.Option(
        "--step-size-lr-scale", help="Learning-rate multiplier of the unrolled CG step sizes (alpha, beta), which "
        "Adam otherwise moves at the CNN weights' rate though they are ~20x larger.")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the patches, the split, the order and the init.")] = 0,
    downscale: Annotated[
        int, typer.Option("--downscale", help="Downscale the photos by this factor (1 or 2) with an anti-aliasing "
                          "filter before cutting patches.")
    ] = 1,
    downscale_filter: Annotated[str, typer.Option("--downscale-filter", help="lanczos or area.")] = "lanczos",
    downscale_scope: Annotated[
        str, typer.Option("--downscale-scope", help="all, or jpeg (only JPEG photos, e.g. BSDS with 4:2:0 chroma).")
    ] = "all",
    downscale_bsds: Annotated[
        bool, typer.Option("--downscale-bsds", help="Shorthand for --downscale 2 --downscale-scope jpeg.")
    ] = False,
    augment: Annotated[
        bool, typer.Option("--augment/--no-augment", help="Random flips and 90-degree rotations of the patches.")
    ] = True,
    blocks: Annotated[Optional[int], typer.Option("--blocks", help="Model: unrolled blocks.")] = None,
    heads: Annotated[Optional[int], typer.Option("--heads", help="Model: graph-learning heads per block.")] = None,
    width: Annotated[Optional[int], typer.Option("--width", help="Model: feature-CNN channels.")] = None,
    cg_iters: Annotated[Optional[int], typer.Option("--cg-iters", help="Model: unrolled CG iterations.")] = None,
    admm_iters: Annotated[Optional[int], typer.Option("--admm-iters", help="Model (uGTV): ADMM iterations.")] = None,
    model_opt: Annotated[
        Optional[list[str]], typer.Option("--model-opt", help="Any model option KEY=VALUE (repeatable).",
                                          show_default=False)
    ] = None,
    init: Annotated[
        Optional[Path], typer.Option("--init", help="Start from these weights (model.pt / best.pt / last.pt / a "
                                     "shipped file) in the model configuration stored with them; the model "
                                     "options override single keys (e.g. more CG/ADMM iterations: a curriculum).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads for torch (default: torch's; "
                                                   "1 on a busy machine).")] = None,
    workers: Annotated[int, typer.Option("--workers", help="Threads decoding photos while cutting patches.")] = 0,
    max_steps: Annotated[
        Optional[int], typer.Option("--max-steps", help="Stop after this many steps in all (smoke runs; the "
                                    "schedule still spans every epoch).")
    ] = None,
    log_every: Annotated[int, typer.Option("--log-every", help="Write a log record every N steps (and at least "
                                           "once a minute).")] = 50,
    time_budget: Annotated[
        Optional[float], typer.Option("--time-budget", help="Wall-clock seconds for this call, patch cutting "
                                      "included: a step starts only if it (timed), a validation, the "
                                      "checkpoints and model.pt still fit before the deadline (status "
                                      "time-budget).", min=1.0)
    ] = None,
    checkpoint: Annotated[
        bool, typer.Option("--grad-checkpoint/--no-grad-checkpoint", help="Recompute each block in the backward "
                           "pass and (glibc) hand freed tensors back to the OS at once: less memory, ~30% "
                           "slower.")
    ] = False,
    cuda_graph: Annotated[
        bool, typer.Option("--cuda-graph/--no-cuda-graph", help="CUDA: replay each step's forward + backward "
                           "from a CUDA graph (checked against an eager step; falls back if it differs).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", "--no-progress", help="No progress on stderr (by default "
                                        "a bar on a terminal, else a line every 30 s).")] = False,
    progress: Annotated[bool, typer.Option("--progress", hidden=True, help="Progress on stderr (the default).")]
    = True,
) -> None:
    """Train uGLR / uGTV on random patches of folders of photos; checkpoints every epoch, resumable.

    The run folder gets config.json, log.jsonl, last.pt, best.pt and, at the end, model.pt (best weights).

    Ctrl-C or SIGTERM finishes the step, writes a checkpoint and exits 130 / 143: then --resume RUN_DIR."""
    from rich.console import Console

    from ..runtime.distributed import ranks_from_env
    from ..core.errors import UsageError
    from ..models.unrolled import check_config
    from ..training import TrainConfig
    from ..training import train as run_training
    from ..training.progress import RichProgress, summary_table

    console = Console(stderr=True)
    main_rank = ranks_from_env().main  # under torchrun, rank 0 alone prints (every rank trains)
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1 (leave it out for torch's default), got {threads}")
    if threads is not None and threads > 4096:
        raise UsageError(f"--threads must be at most 4096, got {threads}")
    if not 0 <= workers <= 256:
        raise UsageError(f"--workers must be 0 to 256, got {workers}")
    if max_steps is not None and max_steps > 2**31 - 1:
        raise UsageError(f"--max-steps must be at most {2**31 - 1:,}, got {max_steps}")
    if time_budget is not None and not math.isfinite(time_budget):
        raise UsageError(f"--time-budget must be a finite number of seconds (leave it out for none), got {time_budget}")
    given = {name for name in ctx.params
             if (src := ctx.get_parameter_source(name)) is not None and src.name in ("COMMANDLINE", "ENVIRONMENT")}
    folders = list(data or []) + list(more_data or [])
    if resume is not None:
        extra = sorted(given - RESUME_OPTIONS - {"more_data"} - ({"out"} if out == resume else set()))
        if folders:
            extra = sorted(set(extra) | {"data"})
        if extra:
            flags = ", ".join("--" + e.replace("_", "-") for e in extra)
            raise UsageError(f"{flags}: cannot change a run's recipe on --resume (only --epochs, --max-steps, "
                             "--device, --threads, --workers); start a new run with --out instead")
        cfg, run_dir = None, resume
        note = resume_plan(resume, epochs_given="epochs" in given, steps_given="max_steps" in given)
        if note and main_rank:
            console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    else:
        missing = [flag for flag, v in (("--task", task), ("--prior", prior), ("--data", folders or None),
                                        ("--out", out)) if v is None]
        if missing:
            raise UsageError(f"missing {', '.join(missing)} (or pass --resume RUN_DIR)")
        model = _parse_model_opts(model_opt or [])
        for name, key in MODEL_FLAGS.items():
            value = locals()[name]
            if value is not None:
                model[key] = value
        try:  # sizes within the architecture's bounds (--blocks 0 is no network)
            check_config(model)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if downscale_bsds:
            if "downscale" in given and downscale != 2:
                raise UsageError("--downscale-bsds means --downscale 2")
            downscale, downscale_scope = 2, "jpeg"
        if max_steps is not None and max_steps >= 1:  # a smoke run cuts only what it can use
            patches, val_patches, note = smoke_sets(max_steps, batch_size, patches, val_patches, val_fraction, given)
            if note and main_rank:
                console.print(note, markup=False, highlight=False, soft_wrap=True)
        cfg = TrainConfig(
            task=task, prior=str(prior).lower(), data=[str(f) for f in folders], patch_size=patch_size,
            patches=patches, val_fraction=val_fraction, val_patches=val_patches, epochs=epochs or 30,
            batch_size=batch_size, lr=lr, schedule=schedule, min_lr_ratio=min_lr_ratio, step_epochs=step_epochs,
            step_gamma=step_gamma, warmup_steps=warmup_steps, loss=loss, grad_clip=grad_clip,
            weight_decay=weight_decay, step_size_lr_scale=step_size_lr_scale, seed=seed, downscale=downscale,
            downscale_filter=downscale_filter, downscale_scope=downscale_scope, augment=augment, model=model,
            init=None if init is None else str(init), log_every=log_every,
        ).check()
        run_dir = out

    if checkpoint:
        from ..training import set_mmap_threshold

        set_mmap_threshold(1 << 20)  # docs/architecture.md: one paper-size uGTV step 3.98 -> 1.45 GB
    else:
        from ..training import keep_freed_memory

        keep_freed_memory()  # no page faults on each step's fresh tensors (docs/training.md)
    result = run_training(cfg, run_dir, resume=resume is not None, epochs=epochs, device=device, threads=threads,
                          workers=workers, max_steps=max_steps, progress=RichProgress(console, enabled=progress and not quiet),
                          grad_checkpoint=checkpoint, time_budget=time_budget, cuda_graph=cuda_graph)
    if main_rank:
        console.print(summary_table(result))
    if result.status == "stopped":
        import signal

        if main_rank:
            console.print(f"stopped by {result.signal}: checkpoint written; continue with "
                          f"gsprestore train --resume {result.run_dir}")
        raise typer.Exit(code=128 + int(signal.Signals[result.signal]))


#: A finished run resumed without --epochs / --max-steps trains on only if what is left is
#: expected to take less than this (seconds, at its recorded pace); longer is refused with the figures.
RESUME_QUIET_S = 600.0


def resume_plan(run_dir: Path, *, epochs_given: bool, steps_given: bool) -> str | None:
    """What ``train --resume RUN_DIR`` has left to do and about how long it takes (its recorded
    patches/s): one line, or None when the run left no summary (it was interrupted: resuming
    finishes what it started). A run that ended (``summary.json``: finished, ``--max-steps``,
    time budget) and would train longer than :data:`RESUME_QUIET_S` more is refused unless
    ``--epochs`` or ``--max-steps`` says how far; a complete run without ``--epochs`` too."""
    import math

    from ..core.errors import UsageError
    from ..core.heartbeat import clock
    from ..training.checkpoints import read_run_config

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


@command("train-pack")
def train_pack(
    folders: Annotated[list[Path], typer.Argument(metavar="DIR ...", help="Folders of training photos "
                                                  "(PNG/JPEG/TIFF/WebP, searched recursively).")],
    out: Annotated[Path, typer.Option("--output", "-o", "--out", help="Pack folder to create.")],
    budget_mib: Annotated[float, typer.Option("--budget-mib", help="Total size of the crops, MiB.")] = 48.0,
    crop: Annotated[int, typer.Option("--crop", metavar="SIDE", help="Crop side in pixels (multiple of 4, >= 64).")] = 192,
    val_fraction: Annotated[
        float, typer.Option("--val-fraction", help="Fraction of each folder's photos held out (validation crops "
                            "come only from them).")
    ] = 0.1,
    val_share: Annotated[float, typer.Option("--val-share", help="Share of the budget for validation crops.")] = 0.08,
    texture_power: Annotated[
        float, typer.Option("--texture-power", help="Crops are drawn with probability ~ texture ** this "
                            "(0: uniform).")
    ] = 1.0,
    codec: Annotated[str, typer.Option("--codec", help="Lossless codec: webp or png.")] = "webp",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the photo split and the draw.")] = 0,
    downscale_jpeg: Annotated[
        bool, typer.Option("--downscale-jpeg/--no-downscale-jpeg", help="Halve JPEG photos first (their 4:2:0 "
                           "chroma becomes full resolution).")
    ] = True,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing pack.")] = False,
) -> None:
    """Pack the most textured crops of photo folders into a size budget (lossless), with a recorded
    photo-level validation split: the training data that travels to a GPU machine.
    `gsprestore train --data PACK` reads it. See docs/training.md."""
    from rich.console import Console

    from ..core.errors import one_line
    from ..training.trainpack import make_pack

    console = Console(stderr=True)
    last = {"t": 0.0}

    def progress(what: str, done: int, total: int) -> None:
        import time

        now = time.monotonic()
        if now - last["t"] > 2.0 or done >= total:
            last["t"] = now
            console.print(f"{what}: {done}/{total}", highlight=False)

    info = make_pack(folders, out, budget_mib=budget_mib, val_fraction=val_fraction, val_share=val_share,
                     crop=crop, texture_power=texture_power, codec=codec, seed=seed,
                     downscale_jpeg=downscale_jpeg, overwrite=overwrite, progress=progress)
    for split, t in info["totals"].items():
        typer.echo(f"{split}: {t['crops']} crops ({t['megapixels']} MP) from {t['photos']} photos, "
                   f"{t['bytes'] / 2**20:.1f} MiB, {t['bytes_per_pixel']} B/px, median texture "
                   f"{t['median_score_kept']} (all candidates {t['median_score_all']})")
    for bad in info["skipped"]:
        console.print(one_line(f"skipped {bad['file']}: {bad['reason']}"), highlight=False, markup=False,
                      soft_wrap=True)
    typer.echo(f"wrote {out} in {info['seconds']} s")
