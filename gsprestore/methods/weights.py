"""Pretrained weights: where they live, the manifest that vouches for them, saving and loading.

Layout: the package's own ``gsprestore/weights/`` folder (package data, so every install, ``pip
install --target`` included, carries it) holds the weight files and ``manifest.json``::

    {"models": [{"file": "ugtv_demosaic.pt", "sha256": "...", "method": "ugtv",
                 "task": "demosaic", "params": 323400, "training": {...}, "psnr": {...}}, ...]}

The manifest also records the classical methods' scores (``baselines``) that
:mod:`gsprestore.methods.defaults` compares the shipped networks with. ``GSPRESTORE_WEIGHTS`` overrides
the folder; installs of older versions put it under ``<prefix>/share/gsprestore/weights``, which
is still looked at last.

A weight file is a ``torch.save`` of ``{"state_dict", "config", "method", "task", "meta"}`` made of
tensors and plain JSON-like values only, so it loads with ``torch.load(..., weights_only=True)``
(no pickled code runs). Shipped files are checked against the manifest's SHA-256 *before* they are
unpickled; a missing, truncated or tampered file is a one-line :class:`WeightsError` naming it.
"""

from __future__ import annotations

import json
import os
import site
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..physics.tasks import TASKS, is_mosaic
from ..core.atomic import atomic_file
from ..core.digest import sha256_file
from ..core.errors import GspError, WeightsError
from ..core.fileid import same_file
from ..core.jsontext import loads

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

ENV_VAR = "GSPRESTORE_WEIGHTS"
MANIFEST = "manifest.json"
#: The learned methods (``gsprestore.models.unrolled.METHOD_PRIOR``): the paper-size networks and
#: their CPU-size ``-lite`` variants.
LEARNED_METHODS: tuple[str, ...] = ("uglr", "ugtv", "uglr-lite", "ugtv-lite", "ugtv-lite-denoise")
FILE_KEYS: tuple[str, ...] = ("state_dict", "config", "method", "task")


def _candidates() -> list[Path]:
    pkg = Path(__file__).resolve().parents[1]
    out: list[Path] = [pkg / "weights"]  # package data: checkout, editable and regular installs alike
    data_roots = [sysconfig.get_path("data"), sys.prefix]
    try:
        data_roots.append(site.getuserbase())
    except Exception:  # pragma: no cover - site customisations
        pass
    for root in data_roots:
        if root:
            out.append(Path(root) / "share" / "gsprestore" / "weights")
    return out


def weights_dir() -> Path:
    """The folder with ``manifest.json``: ``$GSPRESTORE_WEIGHTS``, else the package's ``weights/``,
    else the data files of an older install. When none exists, the first candidate (for messages)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    cands = _candidates()
    for c in cands:
        if (c / MANIFEST).is_file():
            return c
    return cands[0]


def manifest_path() -> Path:
    return weights_dir() / MANIFEST


def read_manifest(path: str | Path | None = None) -> dict[str, Any]:
    """The manifest as a dict with a ``models`` list (empty when there is no manifest, unless
    ``$GSPRESTORE_WEIGHTS`` names the folder: then a missing folder or manifest is an error, not
    a silent fall-back to the classical methods)."""
    p = Path(path) if path is not None else manifest_path()
    try:
        data = loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if path is None and os.environ.get(ENV_VAR):  # the user named a folder: it must be one
            what = "no such folder" if not p.parent.is_dir() else f"no {MANIFEST} in this folder"
            raise WeightsError(f"{ENV_VAR} names a weights folder, but there is {what}", p.parent) from None
        return {"models": []}
    except (OSError, ValueError) as exc:
        raise WeightsError(f"unreadable weights manifest ({exc})", p) from None
    if not isinstance(data, dict) or not isinstance(data.get("models", []), list):
        raise WeightsError("weights manifest must be an object with a 'models' list", p)
    data.setdefault("models", [])
    return data


def manifest_entry(method: str, task: str, manifest: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The manifest's entry for ``method`` and ``task`` (the first one), or None."""
    m = read_manifest() if manifest is None else manifest
    for entry in m["models"]:
        if entry.get("method") == method and entry.get("task") == task:
            return entry
    return None


def weights_status(method: str, task: str) -> str:
    """``"shipped"`` (listed and present), ``"missing"`` (learned, none usable) or ``"n.a."``."""
    if method not in LEARNED_METHODS:
        return "n.a."
    try:
        entry = manifest_entry(method, task)
    except WeightsError:
        return "missing"
    if entry is None or not (weights_dir() / str(entry.get("file", ""))).is_file():
        return "missing"
    return "shipped"


def save_weights(path: str | Path, model: "nn.Module", meta: dict[str, Any] | None = None) -> str:
    """Write ``model`` (an ``UnrolledNet``) to ``path`` atomically; returns the file's SHA-256.

    ``meta`` (JSON-like: training recipe, data, scores...) is stored beside the weights; its
    ``method``/``task`` default to the model's. Everything in the file loads with
    ``weights_only=True``."""
    import torch

    meta = dict(meta or {})
    config = dict(getattr(model, "config", {}) or {})
    method = meta.get("method") or getattr(model, "method", None)
    task = meta.get("task") or config.get("task")
    if method is None or task is None:
        raise ValueError("save_weights needs the model's method and task (model.config or meta)")
    obj = {
        "state_dict": {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
        "config": config,
        "method": method,
        "task": task,
        "meta": json.loads(json.dumps(meta, default=str)),  # plain JSON types only
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, "wb") as f:
        torch.save(obj, f)
    return sha256_file(path)


def _no_weights(method: str, task: str) -> WeightsError:
    return WeightsError(
        f"no pretrained weights for {method} ({task}): {manifest_path()} has none; "
        "train with `gsprestore train` or pass --weights PATH"
    )


_BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation")


def load_reason(exc: BaseException, limit: int = 160) -> str:
    """Why ``torch.load(..., weights_only=True)`` refused a file, in a few words: for the safe
    unpickler, the line that says what it met (``unsupported GLOBAL posix.system``: code that
    would run), without torch's paragraphs of advice; else the error's first line. Never cut
    inside a word."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith(_BOILERPLATE[0]):
        found = [line for line in lines if not line.startswith(_BOILERPLATE)]
        what = (found[0] if found else "not plain tensors and values").rstrip(".")
        if "GLOBAL" in what or "global" in what:
            return f"refused: it holds pickled code that would run on loading ({_shorten(what, limit)})"
        return f"refused by the safe loader: {_shorten(what, limit)}"
    return f"{type(exc).__name__}: {_shorten(lines[0] if lines else '', limit)}".rstrip(": ")


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def read_weights_file(path: str | Path) -> dict[str, Any]:
    """The dictionary a gsprestore weights file holds (:data:`FILE_KEYS`: method, task, config,
    state, meta), loaded with ``weights_only``; :class:`WeightsError` naming the file when it is
    missing, not a regular file, unreadable or not a gsprestore weights file."""
    import warnings

    import torch

    from ..imageio.images import existing_file

    path = Path(path)
    if path.exists():  # a FIFO or a device would never end: refused before torch opens it
        try:
            existing_file(path, "a weights file")
        except GspError as exc:
            raise WeightsError(exc.reason, path) from None
    try:
        with warnings.catch_warnings():  # torch warns about the pickle it is about to refuse
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise WeightsError("no such weights file", path) from None
    except IsADirectoryError:
        raise WeightsError("is a folder, not a weights file", path) from None
    except Exception as exc:  # truncated zip, pickle with code (refused by weights_only), ...
        raise WeightsError(f"not a readable weights file ({load_reason(exc)})", path) from None
    if not isinstance(obj, dict) or any(k not in obj for k in FILE_KEYS):
        raise WeightsError(f"not a gsprestore weights file (expected keys {', '.join(FILE_KEYS)})", path)
    return obj


def file_method(path: str | Path) -> str:
    """The method (``uglr`` / ``ugtv``) a weights file was trained for, so that ``--weights FILE``
    alone picks its network (the default method may be a classical one)."""
    return str(read_weights_file(Path(path))["method"])


def _check_shapes(prior: str, task: str, config: dict[str, Any], state: Any) -> None:
    """Before the network is built for real: its configuration is within the architecture's
    bounds (:func:`gsprestore.models.unrolled.check_config`), and the network it describes,
    built on the ``meta`` device (no memory), has exactly the tensors ``state`` holds. A small
    file whose ``config`` asks for a huge network is refused without allocating it."""
    import torch

    from ..models.unrolled import UnrolledNet, check_config, default_config

    check_config({**default_config(prior, task), **config})
    if not isinstance(state, dict):
        raise ValueError("state_dict is not a dict of tensors")
    with torch.device("meta"):
        wanted = UnrolledNet(prior, task, **config).state_dict()
    missing, unexpected = sorted(set(wanted) - set(state)), sorted(set(state) - set(wanted))
    if missing or unexpected:
        raise ValueError(f"{len(missing)} tensors missing, {len(unexpected)} unexpected, e.g. "
                         f"{', '.join((missing + unexpected)[:2])}")
    for key, tensor in wanted.items():
        got = tuple(getattr(state[key], "shape", ()))
        if got != tuple(tensor.shape):
            raise ValueError(f"{key} is {got} in the file but {tuple(tensor.shape)} in the network its config describes")


def load_model(method: str, task: str, path: str | Path | None = None, *, verify: bool = True) -> "nn.Module":
    """The trained ``method`` network for ``task``, in eval mode on the CPU.

    ``path=None``: the shipped file from the manifest, whose SHA-256 is checked before loading.
    A user file (``--weights PATH``) is loaded as given (also with ``weights_only=True``); if it
    is a file the manifest lists, its hash is checked too. Any failure is a :class:`WeightsError`.
    """
    from ..models.unrolled import METHOD_PRIOR, UnrolledNet, method_name

    if method not in LEARNED_METHODS:
        raise WeightsError(f"{method} has no weights (only {', '.join(LEARNED_METHODS)} do)")
    expected: str | None = None
    if path is None:
        entry = manifest_entry(method, task)
        if entry is None or not entry.get("file"):
            raise _no_weights(method, task)
        file = weights_dir() / str(entry["file"])
        if not file.is_file():
            raise WeightsError(f"shipped weights for {method} ({task}) are listed in the manifest but missing", file)
        expected = entry.get("sha256")
        if not expected:
            raise WeightsError("manifest entry has no sha256; refusing to load unverified weights", file)
    else:
        file = Path(path)
        if not file.exists():
            raise WeightsError("no such weights file", file)
        if file.is_file():
            try:
                for entry in read_manifest()["models"]:
                    if same_file(weights_dir() / str(entry.get("file", "")), file):
                        expected = entry.get("sha256")
            except (WeightsError, OSError):
                pass
    if verify and expected is not None:
        actual = sha256_file(file)
        if actual != expected:
            raise WeightsError(
                f"SHA-256 mismatch (file {actual[:12]}..., manifest {str(expected)[:12]}...): "
                "the file is damaged or was modified",
                file,
            )
    obj = read_weights_file(file)
    if obj["method"] != method or obj["task"] != task:
        raise WeightsError(f"holds {obj['method']} ({obj['task']}) weights, not {method} ({task})", file)
    config = dict(obj["config"])
    prior, ftask = config.pop("prior", None), config.pop("task", None)
    if prior != METHOD_PRIOR[method] or ftask != task or method_name(prior, config.get("feature_trunk", "per-block"),
                                                                bool(config.get("noise_input"))) != method:
        raise WeightsError(f"config is for {prior!r}/{ftask!r} ({config.get('feature_trunk', 'per-block')} features), "
                           f"not {method} ({task})", file)
    try:
        _check_shapes(prior, task, config, obj["state_dict"])
        model = UnrolledNet(prior, task, **config)
        model.load_state_dict(obj["state_dict"], strict=True)
    except (TypeError, ValueError, RuntimeError, KeyError, AttributeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WeightsError(f"weights do not fit the {method} network ({_shorten(reason, 160)})", file) from None
    model.weights_meta = dict(obj.get("meta") or {})
    model.weights_file = str(file)
    return model.eval()


def ship_weights(source: str | Path, *, folder: str | Path | None = None, stages: list[dict[str, Any]] | None = None,
                 scores: dict[str, Any] | None = None, notes: str | None = None,
                 speed: dict[str, Any] | None = None, history: str | None = None) -> dict[str, Any]:
    """Copy the trained weights file ``source`` into ``folder`` (default: :func:`weights_dir`) as
    ``<method>_<task>.pt`` and record it in the manifest (replacing that method and task's entry).

    The entry holds the file, its SHA-256, method, task, parameter count and configuration, the
    training ``stages`` (default: the file's own ``meta``: recipe, command, data, epochs, steps,
    validation PSNR, device...), ``scores`` (e.g. ``gsprestore benchmark --json`` rows per data
    set), ``history``: where the records of earlier stages are kept when ``stages`` holds only the
    last (the installed manifest keeps what a user needs; ``lab/tools/ship_weights.py`` keeps the rest in
    docs/weights-history.json), measured ``speed`` per kind of device (``{"cuda": {"megapixels_per_second": ...,
    "source": ..., "conditions": ...}}``: what :func:`gsprestore.methods.defaults.recorded_speed` reads) and
    free-text ``notes``. The file is loaded (``weights_only``) and rebuilt as a network
    before anything is written, so a bad file never reaches the manifest. Returns the entry."""
    import shutil

    source = Path(source)
    obj = read_weights_file(source)
    method, task = str(obj["method"]), str(obj["task"])
    model = load_model(method, task, source, verify=False)  # the network must rebuild from it
    folder = Path(folder) if folder is not None else weights_dir()
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{method}_{task}.pt"
    target = folder / name
    if not same_file(source, target):
        with atomic_file(target, "wb") as f, open(source, "rb") as src:
            shutil.copyfileobj(src, f)
    entry: dict[str, Any] = {
        "file": name,
        "sha256": sha256_file(target),
        "method": method,
        "task": task,
        "pattern": "RGGB" if is_mosaic(task) else None,
        "params": model.num_params(),
        "config": dict(obj["config"]),
        "training": list(stages) if stages is not None else [dict(obj.get("meta") or {})],
        "scores": dict(scores or {}),
    }
    if history:
        entry["training_history"] = history
    if speed:
        entry["speed"] = dict(speed)
    if notes:
        entry["notes"] = notes
    manifest_file = folder / MANIFEST
    manifest = read_manifest(manifest_file)
    models = [e for e in manifest["models"] if not (e.get("method") == method and e.get("task") == task)]
    models.append(entry)
    order = {(m, t): i for i, (m, t) in enumerate((m, t) for t in TASKS
                                                   for m in ("ugtv", "uglr", "ugtv-lite", "uglr-lite",
                                                             "ugtv-lite-denoise"))}
    models.sort(key=lambda e: order.get((e.get("method"), e.get("task")), 99))
    manifest["models"] = models
    with atomic_file(manifest_file, "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
    return entry
