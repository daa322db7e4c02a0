"""What ``gsprestore compare`` and ``explain`` take, checked before the work starts: the image (a
ground truth, an observation, or a camera RAW file's sensor mosaic: :func:`read_input`), the methods
shown by default (:func:`compare_default`), the weights per method (:func:`weights_map`), and the
outputs (:func:`check_montage_output`, :func:`check_explain_folder`). Nothing heavy is imported at
module level."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..physics.tasks import is_mosaic


def read_input(image: str, task: str, pattern: str, no_reference: bool,
               notice: Callable[[str], None]) -> tuple:
    """``(float (H, W, C) array, Bayer pattern, reference?)`` of IMAGE. A camera RAW file (by its
    suffix, as ``demosaic`` takes it) is its white-balanced sensor mosaic in stored order, with the
    file's own Bayer pattern: an observation, never a ground truth, and for ``--task demosaic`` only."""
    from ..imageio.camera_raw import is_camera_raw, read_raw
    from ..imageio.raw_develop import balanced_mosaic
    from ..core.errors import GspError
    from ..imageio.images import read_image

    if not is_camera_raw(image):
        return read_image(image).array, pattern, not no_reference
    if not is_mosaic(task):
        raise GspError("a camera RAW file is a sensor mosaic: use --task demosaic (or develop it with `gsprestore "
                       "demosaic` first)", image)
    frame = read_raw(image)
    if pattern.upper() != frame.pattern and pattern.upper() != "RGGB":  # RGGB is the option's default
        notice(f"{image}: --pattern {pattern} ignored, the file's colour filter is {frame.pattern}")
    if not no_reference:
        notice(f"{image}: a camera RAW file has no ground truth; its sensor mosaic (camera white balance, camera "
               "RGB, stored order) is the input and there are no scores")
    return balanced_mosaic(frame, "camera", notice)[:, :, None], frame.pattern, False


def weights_map(values: list[str] | None, methods: list[str]) -> dict[str, str]:
    """``--weights PATH`` (one learned method) or ``--weights METHOD=PATH`` (repeatable)."""
    from ..core.errors import UsageError
    from ..methods.registry import METHODS

    out: dict[str, str] = {}
    learned = [m for m in methods if METHODS[m].kind == "learned"]
    for v in values or []:
        if "=" in v and v.split("=", 1)[0].lower() in METHODS:
            name, path = v.split("=", 1)
            out[name.lower()] = path
        elif len(learned) == 1:
            out[learned[0]] = v
        else:
            raise UsageError("with several learned methods, give --weights METHOD=PATH for each")
    return out


def compare_default(task: str) -> list[str]:
    """What ``compare`` shows by default: the task's first classical method in the registry (the
    simplest), its classical default, and the shipped networks that beat the best classical method
    on both sets, best first (:func:`gsprestore.methods.defaults.best_by_quality`'s ranking, from the
    manifest; an ensemble of them is left out: its members are there)."""
    from ..methods.defaults import CLASSICAL_DEFAULT, best_by_quality
    from ..methods.registry import METHODS, methods_for

    classical = [m for m in methods_for(task) if METHODS[m].kind == "classical"]
    ranked = [m for m in best_by_quality(task).ranked if m in METHODS and METHODS[m].kind == "learned"]
    return list(dict.fromkeys(classical[:1] + [CLASSICAL_DEFAULT[task]] + ranked))


def check_montage_output(output: str, image: str, overwrite: bool) -> None:
    """``compare -o``: never the input (by identity: a link or a bind mount reaches it too), an
    existing file only with ``overwrite``, and a place that can be written."""
    from ..core.errors import GspError, UsageError
    from ..core.fileid import same_file
    from ..imageio.images import check_writable

    if same_file(output, image):
        raise UsageError(f"-o {output} is the input {image}; choose another -o")
    if Path(output).exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it)", output)
    check_writable(output, overwrite=overwrite)


def check_explain_folder(output: str, image: str, overwrite: bool) -> Path:
    """``explain -o``: a new or empty folder (a non-empty one only with ``overwrite``, and never the
    input's own folder then, whose files it would replace)."""
    from ..core.errors import GspError, UsageError
    from ..core.fileid import file_id

    out = Path(output)
    if overwrite and file_id(out) is not None and file_id(out) == file_id(Path(image).parent):
        raise UsageError(f"-o {output} is the folder of the input {image}: --overwrite would replace files "
                         "there; choose another -o")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise GspError("output folder exists and is not empty (pass --overwrite to replace its files)", out)
    if out.exists() and not out.is_dir():
        raise GspError("output exists and is not a folder", out)
    return out
