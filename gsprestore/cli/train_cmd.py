"""``gsprestore train``: train uGLR / uGTV on folders of photos, or resume a run; ``gsprestore
train-pack``: pack photo folders into the training data that travels to a GPU machine.

Thin commands: the options, as :class:`gsprestore.training.train_options.TrainOptions`, are checked,
assembled into a recipe and trained by :func:`gsprestore.training.train_options.train_from_options`;
:func:`gsprestore.training.trainpack.make_pack` packs. No torch import at module level."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from .command_table import command


@command("train")
def train(
    ctx: typer.Context,
    more_data: Annotated[Optional[list[Path]], typer.Argument(metavar="[DIR ...]", help="More training folders (so "
                         "that --data A B C works).", show_default=False)] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="demosaic (RGGB) or upscale2x.")] = None,
    prior: Annotated[Optional[str], typer.Option("--prior", help="glr (uGLR) or gtv (uGTV).")] = None,
    data: Annotated[Optional[list[Path]], typer.Option("--data", help="Folder of training photos (PNG/JPEG/TIFF, "
                    "searched recursively): --data DIR [DIR ...]. Never a test set (Kodak24, McM, Urban100 are "
                    "refused).", show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option("--output", "-o", "--out", help="Run folder to create (checkpoints, "
                                                "log, model.pt).")] = None,
    resume: Annotated[Optional[Path], typer.Option("--resume", help="Continue the run in this folder where it stopped "
                      "(only --epochs, --max-steps, --device, --threads, --workers may be given).")] = None,
    recipe: Annotated[Optional[str], typer.Option("--recipe", metavar="FILE|MODEL", help="Take every recipe option "
                      "not given here from a TOML recipe file, a run's config.json, or a shipped model's recorded "
                      "recipe by name (e.g. ugtv-lite_demosaic); see docs/howto/train-your-own-weights.md.",
                      show_default=False)] = None,
    print_recipe: Annotated[bool, typer.Option("--print-recipe", help="Print the assembled recipe as a TOML file "
                            "(for --recipe) on stdout and exit without training; --out is not needed.")] = False,
    patch_size: Annotated[int, typer.Option("--patch-size", help="Patch side (even).")] = 64,
    patches: Annotated[int, typer.Option("--patches", help="Number of training patches.")] = 10000,
    val_fraction: Annotated[float, typer.Option("--val-fraction", help="Fraction of the photos (of each folder) held "
                            "out for validation.")] = 0.1,
    val_patches: Annotated[Optional[int], typer.Option("--val-patches", help="Validation patches (default: patches x "
                           "val-fraction).")] = None,
    epochs: Annotated[Optional[int], typer.Option("--epochs", help="Epochs (default: 30).", show_default=False)] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Patches per step: the global batch (under "
                                            "torchrun each rank takes batch / ranks of them).")] = 16,
    lr: Annotated[float, typer.Option("--lr", help="Adam learning rate.")] = 1e-3,
    schedule: Annotated[str, typer.Option("--schedule", help="cosine, cosine-time (over the --time-budget), step "
                                          "or none.")] = "cosine",
    min_lr_ratio: Annotated[float, typer.Option("--min-lr-ratio", help="Cosine: final lr / lr.")] = 0.01,
    step_epochs: Annotated[Optional[int], typer.Option("--step-epochs", help="Step schedule: epochs per decay "
                           "(default: epochs / 3).")] = None,
    step_gamma: Annotated[float, typer.Option("--step-gamma", help="Step schedule: decay factor.")] = 0.5,
    warmup_steps: Annotated[int, typer.Option("--warmup-steps", help="Linear learning-rate warm-up steps.")] = 0,
    loss: Annotated[str, typer.Option("--loss", help="l1, l2 or charbonnier.")] = "l1",
    grad_clip: Annotated[float, typer.Option("--grad-clip", help="Clip the gradient norm to this (0: off).")] = 0.0,
    weight_decay: Annotated[float, typer.Option("--weight-decay", help="Adam weight decay.")] = 0.0,
    step_size_lr_scale: Annotated[float, typer.Option(
        "--step-size-lr-scale", help="Learning-rate multiplier of the unrolled CG step sizes (alpha, beta), which "
        "Adam otherwise moves at the CNN weights' rate though they are ~20x larger.")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the patches, the split, the order and the init.")] = 0,
    downscale: Annotated[int, typer.Option("--downscale", help="Downscale the photos by this factor (1 or 2) with an "
                         "anti-aliasing filter before cutting patches.")] = 1,
    downscale_filter: Annotated[str, typer.Option("--downscale-filter", help="lanczos or area.")] = "lanczos",
    downscale_scope: Annotated[str, typer.Option("--downscale-scope", help="all, or jpeg (only JPEG photos, e.g. BSDS "
                               "with 4:2:0 chroma).")] = "all",
    downscale_bsds: Annotated[bool, typer.Option("--downscale-bsds", help="Shorthand for --downscale 2 "
                              "--downscale-scope jpeg.")] = False,
    augment: Annotated[bool, typer.Option("--augment/--no-augment", help="Random flips and 90-degree rotations of the "
                       "patches.")] = True,
    mine_share: Annotated[float, typer.Option("--mine-share", help="Share of the training patches drawn by "
                          "difficulty: the error of the task's classical method (Menon / bicubic) on them.")] = 0.0,
    color_jitter: Annotated[float, typer.Option("--color-jitter", help="Exposure and colour-balance jitter of the "
                            "training patches: log-gain spread per patch (half per channel); 0 off.")] = 0.0,
    raw_noise: Annotated[str, typer.Option("--raw-noise", metavar="LEVEL", help="Noisy training pairs up to this "
                         "level (low, medium, high): sensor noise on the linear mosaic, for a noise-aware model "
                         "(--model-opt noise_input=true or --init such weights).")] = "",
    blocks: Annotated[Optional[int], typer.Option("--blocks", help="Model: unrolled blocks.")] = None,
    heads: Annotated[Optional[int], typer.Option("--heads", help="Model: graph-learning heads per block.")] = None,
    width: Annotated[Optional[int], typer.Option("--width", help="Model: feature-CNN channels.")] = None,
    cg_iters: Annotated[Optional[int], typer.Option("--cg-iters", help="Model: unrolled CG iterations.")] = None,
    admm_iters: Annotated[Optional[int], typer.Option("--admm-iters", help="Model (uGTV): ADMM iterations.")] = None,
    model_opt: Annotated[Optional[list[str]], typer.Option("--model-opt", help="Any model option KEY=VALUE "
                         "(repeatable).", show_default=False)] = None,
    init: Annotated[Optional[Path], typer.Option("--init", help="Start from these weights (model.pt / best.pt / last.pt "
                    "/ a shipped file) in the model configuration stored with them; the model options override single "
                    "keys (e.g. more CG/ADMM iterations: a curriculum).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads for torch (default: torch's; "
                                                   "1 on a busy machine).")] = None,
    workers: Annotated[int, typer.Option("--workers", help="Threads decoding photos while cutting patches.")] = 0,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", help="Stop after this many steps in all (smoke "
                         "runs; the schedule still spans every epoch).")] = None,
    log_every: Annotated[int, typer.Option("--log-every", help="Write a log record every N steps (and at least "
                                           "once a minute).")] = 50,
    time_budget: Annotated[Optional[float], typer.Option("--time-budget", help="Wall-clock seconds for this call, "
                           "patch cutting included: a step starts only if it (timed), a validation, the checkpoints "
                           "and model.pt still fit before the deadline (status time-budget).", min=1.0)] = None,
    checkpoint: Annotated[bool, typer.Option("--grad-checkpoint/--no-grad-checkpoint", help="Recompute each block in "
                          "the backward pass and (glibc) hand freed tensors back to the OS at once: less memory, ~30% "
                          "slower.")] = False,
    cuda_graph: Annotated[bool, typer.Option("--cuda-graph/--no-cuda-graph", help="CUDA: replay each step's forward + "
                          "backward from a CUDA graph (checked against an eager step; falls back if it differs).")]
    = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", "--no-progress", help="No progress on stderr (by default "
                                        "a bar on a terminal, else a line every 30 s).")] = False,
    progress: Annotated[bool, typer.Option("--progress", hidden=True, help="Progress on stderr (the default).")]
    = True,
) -> None:
    """Train uGLR / uGTV on random patches of folders of photos; checkpoints every epoch, resumable.

    The run folder gets config.json, log.jsonl, last.pt, best.pt and, at the end, model.pt (best weights).

    Ctrl-C or SIGTERM finishes the step, writes a checkpoint and exits 130 / 143: then --resume RUN_DIR."""
    from rich.console import Console

    from ..training.train_options import TrainOptions, train_from_options
    from ..runtime.distributed import ranks_from_env
    from ..runtime.progress import RichProgress, summary_table

    console = Console(stderr=True)
    main_rank = ranks_from_env().main  # under torchrun, rank 0 alone prints (every rank trains)
    given = {name for name in ctx.params  # what the command line (or the environment) set, not a default
             if (src := ctx.get_parameter_source(name)) is not None and src.name in ("COMMANDLINE", "ENVIRONMENT")}
    options = TrainOptions(**ctx.params)

    def say(text: str) -> None:
        if main_rank:
            console.print(text, markup=False, highlight=False, soft_wrap=True)

    if options.print_recipe:  # what would be trained, as a file to keep, edit and pass to --recipe
        from ..training.build import build_network
        from ..training.recipe import recipe_toml, without_init
        from ..training.train_options import assemble

        cfg, _ = assemble(options, given, say)
        if cfg is None:
            from ..core.errors import UsageError

            raise UsageError("--print-recipe prints a new run's recipe; a resumed run's is in its config.json")
        build_network(without_init(cfg))  # the model options make a network (an unknown key is an error here too)
        typer.echo(recipe_toml(cfg), nl=False)
        return
    result = train_from_options(options, given, say=say,
                                progress=RichProgress(console, enabled=options.progress and not options.quiet))
    if main_rank:
        console.print(summary_table(result))
    if result.status == "stopped":
        import signal

        if main_rank:
            console.print(f"stopped by {result.signal}: checkpoint written; continue with "
                          f"gsprestore train --resume {result.run_dir}")
        raise typer.Exit(code=128 + int(signal.Signals[result.signal]))


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
    score: Annotated[str, typer.Option("--score", help="What a crop is drawn by: texture (luma differences) or "
                     "menon (Menon's demosaicking error on it: hard-patch mining).")] = "texture",
) -> None:
    """Pack the most textured crops of photo folders into a size budget (lossless), with a recorded
    photo-level validation split: the training data that travels to a GPU machine.
    `gsprestore train --data PACK` reads it. See docs/training.md."""
    from rich.console import Console

    from ..core.errors import one_line
    from ..runtime.progress import CountLines
    from ..training.trainpack import make_pack

    console = Console(stderr=True)
    info = make_pack(folders, out, budget_mib=budget_mib, val_fraction=val_fraction, val_share=val_share,
                     crop=crop, texture_power=texture_power, codec=codec, seed=seed,
                     downscale_jpeg=downscale_jpeg, overwrite=overwrite, progress=CountLines(console), score=score)
    for split, t in info["totals"].items():
        typer.echo(f"{split}: {t['crops']} crops ({t['megapixels']} MP) from {t['photos']} photos, "
                   f"{t['bytes'] / 2**20:.1f} MiB, {t['bytes_per_pixel']} B/px, median {score} "
                   f"{t['median_score_kept']} (all candidates {t['median_score_all']})")
    for bad in info["skipped"]:
        console.print(one_line(f"skipped {bad['file']}: {bad['reason']}"), highlight=False, markup=False,
                      soft_wrap=True)
    typer.echo(f"wrote {out} in {info['seconds']} s")
