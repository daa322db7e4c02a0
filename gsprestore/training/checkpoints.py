"""The files of a training run (module docstring of :mod:`gsprestore.training`): atomic writes,
``config.json``, the ``log.jsonl`` JSON lines, the ``last.pt`` / ``best.pt`` checkpoints with the
RNG states that make a resume exact, initial weights (``--init``) and the exported ``model.pt``."""

from __future__ import annotations

import json
import os
import random
import stat
import threading
import time
from pathlib import Path
from typing import Any

from ..core.atomic import atomic_file
from ..core.errors import GspError, UsageError, one_line
from ..core.jsontext import dump_atomic, loads
from .recipe import TrainConfig

CHECKPOINT_FORMAT = "gsprestore-train-checkpoint/1"
RUN_FORMAT = "gsprestore-train-run/1"


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` (bytes) or, for a ``str``, the text in UTF-8, to a temporary file in the
    same folder, fsync, then rename over ``path`` (:func:`gsprestore.core.atomic.atomic_file`): a crash
    leaves either the old or the new file, never a truncated one."""
    if isinstance(obj, str):
        with atomic_file(path, "w", encoding="utf-8") as f:
            f.write(obj)
        return
    import torch

    with atomic_file(path, "wb") as f:
        torch.save(obj, f)


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """The stored ``RUN_DIR/config.json`` (recipe, command, model config, patch fingerprints)."""
    path = run_dir / "config.json"
    try:
        stored = loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError("not a training run folder (no config.json); nothing to resume", run_dir) from None
    except ValueError as exc:
        raise GspError(f"damaged config.json ({exc})", path) from None
    if not isinstance(stored, dict) or not isinstance(stored.get("recipe"), dict):
        raise GspError("damaged config.json (no recipe object)", path)
    return stored


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The recipe stored in ``RUN_DIR/config.json``."""
    return TrainConfig.from_json(read_run_config(Path(run_dir))["recipe"])


def _torch_load(path: Path, what: str, hint: str = "") -> Any:
    """``torch.load`` on the CPU, ``weights_only=True``; a missing or damaged ``what`` (e.g.
    "checkpoint") is a one-line :class:`GspError` naming the file (``hint`` appended)."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise GspError(f"no such {what}", path) from None
    except Exception as exc:
        raise GspError(f"unreadable {what} ({type(exc).__name__}){hint}", path) from None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a ``last.pt`` / ``best.pt`` (``weights_only=True``); a damaged file is a one-line error."""
    ck = _torch_load(path, "checkpoint", "; it may be truncated")
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        raise GspError(f"not a gsprestore training checkpoint (format {CHECKPOINT_FORMAT})", path)
    return ck


class JsonLog:
    """Append-only JSON-lines log; each record gets ``event`` and wall-clock ``time``. Safe to write
    from two threads (the run and its heartbeat); ``last_write`` is the ``time.monotonic()`` of the
    latest record and ``on_write`` (if set) is called after each. The file is opened without
    following a symbolic link (``O_NOFOLLOW``): a link at its name is an error, never a write into
    the file it names."""

    def __init__(self, path: Path):
        self.path = path
        self.last_write = time.monotonic()
        self.on_write: Any = None
        self._lock = threading.Lock()

    def write(self, event: str, **record: Any) -> dict[str, Any]:
        rec = {"event": event, "time": round(time.time(), 3), **record}
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec, sort_keys=False) + "\n")
            self.last_write = time.monotonic()
        if self.on_write is not None:
            self.on_write()
        return rec


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``log.jsonl``."""
    with open(path, encoding="utf-8") as f:
        return [loads(line) for line in f if line.strip()]


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        try:
            torch.cuda.set_rng_state_all(state["cuda"])
        except Exception:  # a different number of GPUs: weights stay exact, dropout-free models too
            pass


def init_from(model, path: Path, regrown: list[str] | None = None) -> list[str]:
    """Copy the weights in ``path`` into ``model`` (a curriculum step: e.g. weights trained with
    fewer CG / ADMM iterations). Tensors must have the same names. The unrolled CG step sizes of a
    network with other iteration counts are carried over step by step, the added steps as no-ops
    (:func:`gsprestore.models.unrolled.regrown_step_sizes`: a deeper network starts out computing
    what the weights did); their names are appended to ``regrown`` when it is a list. Any other
    tensor whose shape differs, or that the file lacks (a block the weights did not have), keeps
    its fresh initial value; tensors of the file the network lacks are not used. Returns the names
    of the tensors that keep their initial value; refused when no tensor fits at all."""
    import torch

    from ..models.unrolled import regrown_step_sizes

    state = _state_dict_from(path)
    own = model.state_dict()
    new = {}
    for k in own:
        if k not in state:  # e.g. --blocks 2 from one-block weights: the second block starts fresh
            continue
        if own[k].shape == state[k].shape:
            new[k] = state[k]
            continue
        grown = regrown_step_sizes(k, state[k], tuple(own[k].shape)) if isinstance(state[k], torch.Tensor) else None
        if grown is not None:
            new[k] = grown
            if regrown is not None:
                regrown.append(k)
    kept = sorted(k for k in own if k not in new)
    if not new:  # nothing would come from the file: not a start from these weights at all
        example = ", ".join(f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in kept[:2]
                            if hasattr(state.get(k), "shape"))
        raise UsageError(f"--init: no tensor of these weights fits this network (all {len(own)} differ in shape"
                         + (f", e.g. {example}" if example else "") + "); choose weights of this configuration",
                         path)
    model.load_state_dict({k: new.get(k, own[k]) for k in own}, strict=True)
    return kept


def init_copy_note(model, path: str | Path, kept: list[str]) -> str | None:
    """The line that says how much of ``--init`` weights a network took, when it did not take all
    (``kept``: the tensors of :func:`init_from` that keep their fresh initial values); None when
    every tensor was copied."""
    if not kept:
        return None
    own = model.state_dict()
    copied = [k for k in own if k not in set(kept)]
    n_copied, n_all = sum(own[k].numel() for k in copied), sum(v.numel() for v in own.values())
    return (f"--init {Path(path).name}: copied {len(copied)} of {len(own)} tensors ({n_copied:,} of {n_all:,} "
            f"parameters); {len(kept)} differ in shape or are not in the file and start fresh "
            f"(e.g. {', '.join(kept[:3])})")


def _state_dict_from(path: Path) -> dict:
    obj = _torch_load(path, "weights file")
    for key in ("state_dict", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            return obj[key]
    raise GspError("no model state in this file (expected model.pt, best.pt or last.pt)", path)


def init_config(path: Path) -> dict[str, Any] | None:
    """The model configuration stored with the weights in ``path``: a weights file's ``config``
    (``model.pt``, the shipped files), a checkpoint's ``model_config`` (``best.pt`` / ``last.pt``),
    with the file's ``method`` / ``task`` where the configuration lacks them; None when the file
    records none."""
    obj = _torch_load(path, "weights file")
    if not isinstance(obj, dict):
        return None
    for key in ("config", "model_config"):
        if isinstance(obj.get(key), dict):
            cfg = dict(obj[key])
            for name in ("method", "task"):
                if isinstance(obj.get(name), str):
                    cfg.setdefault(name, obj[name])
            return cfg
    return None


def export_weights(path: Path, model, meta: dict[str, Any]) -> Path:
    """Write the shipped-weights file through :func:`gsprestore.methods.weights.save_weights`."""
    from ..methods.weights import save_weights

    save_weights(path, model, meta)
    return path


def is_run_folder(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a training run this tool made: its ``config.json`` is a regular
    file (not a link) as ``gsprestore train`` writes it (``format`` :data:`RUN_FORMAT`)."""
    path = run_dir / "config.json"
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 64 * 2**20:
            return False
        stored = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(stored, dict) and stored.get("format") == RUN_FORMAT


def open_recipe(cfg: TrainConfig | None, run_dir: Path, resume: bool, epochs: int | None) -> TrainConfig:
    """The run's recipe: read from ``run_dir`` on resume (a changed ``epochs`` is recorded in
    ``config.json``), else ``cfg`` for a new folder.

    A run writes only into a folder of its own: a new run into a folder that does not exist yet
    or is empty, a resumed one into a run folder this tool made (:func:`is_run_folder`). Any other
    folder (the user's, not empty) is a one-line :class:`UsageError` naming it, before anything is
    written."""
    if resume:
        stored = read_run_config(run_dir)
        if stored.get("format") != RUN_FORMAT:
            raise UsageError("not a gsprestore training run (its config.json was not written by gsprestore "
                             "train); nothing to resume", run_dir)
        if (run_dir / "log.jsonl").is_symlink():  # the run appends to its log: never through a link
            raise UsageError("a symbolic link is in the way of this run's log (a run appends only to its own "
                             "log.jsonl): move it away", run_dir / "log.jsonl")
        try:  # a recipe edited by hand or cut short: one line, never a TypeError
            cfg = TrainConfig.from_json(stored["recipe"]).check()
        except UsageError as exc:
            raise UsageError(f"its recipe does not hold: {exc.reason}; start a new run", run_dir / "config.json") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"no {exc}" if isinstance(exc, KeyError) else one_line(str(exc))
            raise UsageError(f"its recipe is incomplete or damaged ({what}); start a new run",
                             run_dir / "config.json") from None
        if not (run_dir / "last.pt").is_file():
            raise UsageError("no last.pt checkpoint in this run folder; nothing to resume", run_dir)
        if epochs is not None and epochs != cfg.epochs:
            cfg.epochs = epochs
            stored["recipe"] = cfg.to_json()
            stored.setdefault("changes", []).append({"epochs": epochs, "time": round(time.time(), 3)})
            dump_atomic(stored, run_dir / "config.json")
        return cfg
    if cfg is None:
        raise UsageError("a new run needs its recipe (--task, --prior, --data)")
    if epochs is not None:
        cfg.epochs = epochs
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError("--out must be a folder", run_dir)
    if run_dir.is_dir():
        try:
            entries = sorted(os.listdir(run_dir))
        except OSError as exc:
            raise GspError(f"cannot read the --out folder ({exc.strerror or exc})", run_dir) from None
        if entries and is_run_folder(run_dir):
            raise UsageError("this folder already holds a training run; pass --resume to continue it "
                             "or choose another --out", run_dir)
        if entries:  # the user's files: a run never writes among them (best.pt, model.pt, summary.json...)
            shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
            raise UsageError(f"--out is not empty and holds no gsprestore training run ({shown}); a new run "
                             "writes only into a new or empty folder: choose another --out", run_dir)
    return cfg
