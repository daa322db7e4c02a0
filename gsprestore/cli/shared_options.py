"""The options several commands share, declared once, and how ``--help`` labels what an option
takes: :class:`Command` / :class:`Group` give every option without a metavar of its own the word
:func:`value_label` chooses (``N``, ``PATH``, ``METHOD``...: Click's public ``metavar``), flags none,
and arguments no type (their name says it; :class:`PlainArgument`), where Typer would print Python
type tags (``<int>``, ``<list[str]>``, ``<bool>`` after a flag). No Typer class is changed."""

from typing import Annotated, Any, Optional

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

#: The placeholder ``--help`` shows after an option that takes a value, by the option's name;
#: other options get one by the value's type (:data:`TYPE_LABELS`). Flags get none.
NAME_LABELS = {
    "output": "PATH", "out": "FOLDER", "resume": "FOLDER", "data": "FOLDER", "data_dir": "FOLDER",
    "init": "FILE", "weights": "FILE", "json": "FILE", "csv": "FILE", "markdown": "FILE",
    "method": "METHOD", "methods": "M1,M2,...", "prior": "glr|gtv", "task": "TASK", "pattern": "PATTERN",
    "device": "DEVICE", "precision": "PRECISION", "crop": "X,Y,W,H", "pixel": "X,Y", "ext": "EXT",
    "suffix": "TEXT", "model_opt": "KEY=VALUE", "noise_sigma": "S1,S2,...", "time_budget": "SECONDS",
    "wb": "WB", "output_space": "SPACE", "bright": "auto|none|FACTOR", "dataset": "NAME", "schedule": "NAME",
    "loss": "NAME", "codec": "NAME", "denoise": "auto|off|on|FACTOR", "raw_noise": "LEVEL",
}
TYPE_LABELS = {"int": "N", "float": "NUMBER", "str": "TEXT", "Path": "PATH"}


def value_label(param: Any) -> str:
    """What ``--help`` shows after an option that takes a value: the word for what it takes (by its
    name, else its type: ``N``, ``NUMBER``, ``TEXT``, ``PATH``; ``...`` when repeatable) instead of
    a Python type tag (``<str>``, ``<list[str]>``); nothing (an empty label) for a flag."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    name = getattr(param, "name", "") or ""
    label = "[METHOD=]FILE" if name == "weights" and getattr(param, "multiple", False) else NAME_LABELS.get(name)
    if label is None:
        try:
            kind = param.bare_type()
        except Exception:  # noqa: BLE001 - an unusual annotation: a neutral word
            kind = "str"
        kind = kind[5:-1] if kind.startswith("list[") else kind
        label = TYPE_LABELS.get(kind, "VALUE")
    return label + ("..." if getattr(param, "multiple", False) else "")


class PlainArgument(TyperArgument):
    """An argument whose ``--help`` row shows no type: its name says what it takes."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _annotation(param: Any) -> Any:
    return getattr(getattr(param, "type_descriptor", None), "annotation", None)


def plain_labels(params: list[Any]) -> None:
    """Label ``params`` for ``--help``: options by :func:`value_label` (unless they set a metavar),
    arguments as :class:`PlainArgument`; a ``bool`` flag not given reads False, not None."""
    for param in params:
        if isinstance(param, TyperArgument):
            param.__class__ = PlainArgument
        elif param.metavar is None:
            param.metavar = value_label(param)
        if getattr(param, "is_flag", False) and param.default is None and _annotation(param) is bool:
            # ``--help``, the completion flags: not given is False. Typer coerces a flag's None
            # through pydantic, whose import is a third of a ``--help``'s time.
            param.default = False


class Command(TyperCommand):
    """A command whose ``--help`` uses :func:`plain_labels` (on every parameter, ``--help`` too)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        plain_labels(params)
        return params


class Group(TyperGroup):
    """The app's group (``--version``, completion), labelled like :class:`Command`."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        plain_labels(params)
        return params


def suffix_option(default: str) -> Any:
    """``--suffix`` of a command whose outputs are named NAME{default}.EXT by default."""
    return Annotated[Optional[str], typer.Option("--suffix", help=f"Added to output names (default: {default} "
                                                 "next to the input, none with -o FOLDER).")]


Inputs = Annotated[list[str], typer.Argument(help="Image files, folders or globs (PNG, TIFF, JPEG or WebP).",
                                             show_default=False)]
RawInputs = Annotated[list[str], typer.Argument(help="Bayer mosaics (PNG or TIFF, single channel) or camera RAW "
                                                "files (DNG, CR2, NEF, ARW, RAF, ...): files, folders or globs.",
                                                show_default=False)]
Output = Annotated[Optional[str], typer.Option("--output", "-o", help="Output file (one input) or folder "
                                                "(mirrors the input tree). Default: next to each input.")]
Ext = Annotated[str, typer.Option("--ext", help="Output format: png, tiff, jpg, webp or same (as the input; PNG for "
                                   "camera RAW inputs).")]
MosaicExt = Annotated[str, typer.Option("--ext", help="Output format: png, tiff, dng (a camera RAW file) or same.")]
Quality = Annotated[Optional[int], typer.Option("--quality", help="JPEG / WebP quality, 1-100 (default 95).")]
WhiteBalance = Annotated[str, typer.Option("--wb", help="Camera RAW only: white balance, camera (as shot), daylight "
                                           "or none.")]
OutputSpace = Annotated[str, typer.Option("--output-space", help="Camera RAW only: srgb (the camera-to-sRGB matrix "
                                          "and the sRGB curve), linear (linear sRGB) or camera (white-balanced "
                                          "camera RGB, linear).")]
Bright = Annotated[str, typer.Option("--bright", help="Camera RAW only: auto (as LibRaw / dcraw by default: the "
                                     "brightest channel's 99th percentile to white), none (the sensor's clipping "
                                     "point is white) or a FACTOR on linear values. Highlights above white are "
                                     "clipped, as LibRaw's default highlight mode.")]
Denoise = Annotated[str, typer.Option("--denoise", help="Camera RAW only: auto (the sensor noise is measured "
                                      "from the file; a noisy one is denoised by ugtv-lite-denoise, and the report "
                                      "says so), off, on, or a FACTOR on the measured noise variance (0.5 gentler, "
                                      "2 stronger).")]
BitDepth = Annotated[Optional[int], typer.Option("--bit-depth", help="8 or 16 (default: the input file's depth).")]
Recursive = Annotated[bool, typer.Option("--recursive", "-r", help="Descend into sub-folders of folder inputs.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace existing outputs (default: refuse).")]
SkipExisting = Annotated[bool, typer.Option("--skip-existing", help="Leave existing outputs alone and go on.")]
ContinueOnError = Annotated[bool, typer.Option("--continue-on-error", help="Do every good file even if some fail "
                                                "(exit code 3 if any failed).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", "--no-progress", help="No progress or notices on stderr "
                                     "(errors only).")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print a JSON summary of every file on stdout.")]
BayerPattern = Annotated[str, typer.Option("--pattern", "-p", help="Bayer pattern, named by its top-left 2x2 block: "
                                           "RGGB, BGGR, GRBG or GBRG.")]
RawPattern = Annotated[Optional[str], typer.Option("--pattern", "-p", help="Bayer pattern of PNG/TIFF mosaics, named by "
                                                   "its top-left 2x2 block: RGGB (default), BGGR, GRBG or GBRG. "
                                                   "Camera RAW files carry their own.")]
Method = Annotated[Optional[str], typer.Option("--method", "-m", help="Method name (see `gsprestore models`); "
                                                "default: the best by recorded quality that is fast enough on this "
                                                "kind of device (`gsprestore models` says which and why).")]
Prior = Annotated[Optional[str], typer.Option("--prior", help="glr or gtv: the learned network of that prior, "
                                             "shorthand for --method uglr / ugtv.")]
Fast = Annotated[bool, typer.Option("--fast", help="Run the classical method (menon / bicubic; no learned network).")]
Weights = Annotated[Optional[str], typer.Option("--weights", help="Weights file for a learned method "
                                                 "(default: the shipped ones).")]
Tile = Annotated[int, typer.Option("--tile", help="Tile size in input pixels; 0 = choose from available memory.")]
Overlap = Annotated[Optional[int], typer.Option("--overlap", help="Context pixels around each tile "
                                                 "(default: max(32, the method's halo)).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N (a missing device is an error).")]
AnyDevice = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
Precision = Annotated[str, typer.Option("--precision", help="fp32, or bf16 / fp16 on CUDA.")]
Shard = Annotated[Optional[str], typer.Option("--shard", metavar="K/N", help="Do share K of N of the files "
                                              "(0 <= K < N, dealt round-robin after the sorted walk): one array "
                                              "job of a batch scheduler, e.g. --shard $SLURM_ARRAY_TASK_ID/8. "
                                              "Under torchrun the ranks share the files by themselves.")]
