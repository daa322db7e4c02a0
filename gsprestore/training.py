"""Training loop for the unrolled networks uGLR / uGTV (paper Sec. 5: trained end to end by
back-propagation through the unrolled CG / ADMM iterations, on 10k random 64x64 patches).

One run lives in a folder ``RUN_DIR``::

    config.json   the recipe (every option that shapes the result) and how the patches were made
    log.jsonl     JSON lines: "start"/"resume", "step" (every ``log_every`` steps), "epoch",
                  "stop", "end" records; a resumed run appends to it
    last.pt       the latest checkpoint: model, optimizer, schedule, RNG states, epoch/batch/step
    best.pt       the model with the best validation PSNR so far (never overwritten by a worse one)
    model.pt      the exported best weights (:func:`gsprestore.weights.save_weights`), full recipe
                  in its ``meta``
    summary.json  the final figures (also printed as a table)

A training step: ground-truth RGB patches ``x`` (already augmented, :mod:`gsprestore.patches`),
the observation ``y = H x`` (RGGB mosaic, or ``x[..., ::2, ::2]`` for 2x), the network input
``(known, mask) = (H^T y, H^T 1)`` (:func:`gsprestore.restorers.observation`), the loss between the
network's output and ``x``, one Adam step. Validation after every epoch is the dataset-MSE PSNR
(docs/protocol.md; RGB for demosaicking, BT.601 luma Y for 2x) of the reconstruction of held-out
patches (photos never used for training).

Determinism: the initial weights come from ``torch.manual_seed(seed)``; the order of the patches
in epoch ``e`` is a permutation drawn from its own generator seeded by ``(seed, e)``; the
learning rate is a pure function of the step (:class:`LRSchedule`). So a checkpoint (weights,
Adam state, RNG states, step, position in the epoch) resumes a run exactly where it stopped, and
two CPU runs with the same seed and thread count give identical weights.
"""

from __future__ import annotations

import json
import math
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from .atomic import atomic_file
from .errors import GspError, UsageError
from .tasks import score_space

PRIORS = ("glr", "gtv")
SCHEDULES = ("cosine", "cosine-time", "step", "none")
LOSSES = ("l1", "l2", "charbonnier")
CHECKPOINT_FORMAT = "gsprestore-train-checkpoint/1"
#: Options that may differ when a run is resumed (everything else is the run's recipe).
RESUMABLE_CHANGES = ("epochs",)
#: Steps in a row whose loss or gradient may be non-finite (each update skipped) before a run stops.
MAX_BAD_STEPS = 10


# --------------------------------------------------------------------------- recipe


@dataclass
class TrainConfig:
    """The recipe of a training run: every choice that shapes the trained weights.

    Runtime choices that do not (device, threads, workers, ``max_steps``, progress display) are
    arguments of :func:`train` instead."""

    task: str
    prior: str
    data: list[str]
    patch_size: int = 64
    patches: int = 10000
    val_fraction: float = 0.1
    val_patches: int | None = None
    epochs: int = 30
    batch_size: int = 16
    lr: float = 1e-3
    schedule: str = "cosine"
    min_lr_ratio: float = 0.01
    step_epochs: int | None = None
    step_gamma: float = 0.5
    warmup_steps: int = 0
    loss: str = "l1"
    charbonnier_eps: float = 1e-3
    grad_clip: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0
    downscale: int = 1
    downscale_filter: str = "lanczos"
    downscale_scope: str = "all"
    augment: bool = True
    model: dict[str, Any] = field(default_factory=dict)
    init: str | None = None
    log_every: int = 50

    @property
    def method(self) -> str:
        return "u" + self.prior

    def check(self) -> "TrainConfig":
        """Raise :class:`UsageError` for an impossible recipe (message shows the value)."""
        from .tasks import check_task

        check_task(self.task)
        if self.prior not in PRIORS:
            raise UsageError(f"unknown prior {self.prior!r}; expected one of {', '.join(PRIORS)}")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"unknown schedule {self.schedule!r}; expected one of {', '.join(SCHEDULES)}")
        if self.loss not in LOSSES:
            raise UsageError(f"unknown loss {self.loss!r}; expected one of {', '.join(LOSSES)}")
        if not self.data:
            raise UsageError("no training data: pass --data DIR [DIR ...]")
        for name, value, low in [("--epochs", self.epochs, 1), ("--batch-size", self.batch_size, 1),
                                 ("--patches", self.patches, 1), ("--log-every", self.log_every, 1)]:
            if value < low:
                raise UsageError(f"{name} must be >= {low}, got {value}")
        if self.patch_size < 2 or self.patch_size % 2:
            raise UsageError(f"--patch-size must be even and >= 2 (Bayer 2x2 block), got {self.patch_size}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise UsageError(f"--lr must be a positive number, got {self.lr}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise UsageError(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        if self.downscale not in (1, 2):
            raise UsageError(f"--downscale must be 1 or 2, got {self.downscale}")
        return self

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def command(self, out: str | Path) -> str:
        """A complete ``gsprestore train`` command line that reproduces this recipe."""
        import shlex

        args = ["gsprestore", "train", "--task", self.task, "--prior", self.prior, "--data", *self.data,
                "--out", str(out), "--patch-size", str(self.patch_size), "--patches", str(self.patches),
                "--val-fraction", str(self.val_fraction), "--epochs", str(self.epochs),
                "--batch-size", str(self.batch_size), "--lr", repr(self.lr), "--schedule", self.schedule,
                "--loss", self.loss, "--seed", str(self.seed)]
        if self.val_patches is not None:
            args += ["--val-patches", str(self.val_patches)]
        if self.warmup_steps:
            args += ["--warmup-steps", str(self.warmup_steps)]
        if self.grad_clip:
            args += ["--grad-clip", repr(self.grad_clip)]
        if self.weight_decay:
            args += ["--weight-decay", repr(self.weight_decay)]
        if self.downscale > 1:
            args += ["--downscale", str(self.downscale), "--downscale-filter", self.downscale_filter,
                     "--downscale-scope", self.downscale_scope]
        if not self.augment:
            args += ["--no-augment"]
        for k, v in sorted(self.model.items()):
            args += ["--model-opt", f"{k}={json.dumps(v)}"]
        if self.init:
            args += ["--init", self.init]
        return shlex.join(args)


# --------------------------------------------------------------------------- schedule, loss


@dataclass(frozen=True)
class LRSchedule:
    """Learning rate as a pure function of the optimizer step (so resuming is exact).

    * ``cosine``: ``lr_min + (lr - lr_min) (1 + cos(pi t / T)) / 2`` over the run's ``T`` steps
      (``lr_min = min_lr_ratio * lr``), after ``warmup_steps`` of linear warm-up;
    * ``cosine-time``: the same curve over the *fraction of the wall-clock budget* spent
      (``--time-budget``; ``fraction`` argument), so that a run whose speed is not known in advance
      anneals exactly by its deadline (a GPU window). Not reproducible step for step, and a resumed
      run anneals again over its new budget;
    * ``step``: ``lr * gamma ** (epoch // step_epochs)``;
    * ``none``: constant ``lr`` (after the warm-up).
    """

    kind: str
    lr: float
    total_steps: int
    steps_per_epoch: int
    min_lr_ratio: float = 0.01
    step_epochs: int = 10
    gamma: float = 0.5
    warmup_steps: int = 0

    def __call__(self, step: int, fraction: float | None = None) -> float:
        if self.warmup_steps and step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.kind in ("cosine", "cosine-time"):
            span = max(1, self.total_steps - self.warmup_steps)
            t = min(1.0, (step - self.warmup_steps) / span)
            if self.kind == "cosine-time":
                t = min(1.0, max(0.0, fraction or 0.0))
            lo = self.lr * self.min_lr_ratio
            return lo + (self.lr - lo) * 0.5 * (1.0 + math.cos(math.pi * t))
        if self.kind == "step":
            return self.lr * self.gamma ** ((step // self.steps_per_epoch) // max(1, self.step_epochs))
        return self.lr

    @classmethod
    def for_run(cls, cfg: TrainConfig, steps_per_epoch: int) -> "LRSchedule":
        return cls(cfg.schedule, cfg.lr, cfg.epochs * steps_per_epoch, steps_per_epoch, cfg.min_lr_ratio,
                   cfg.step_epochs or max(1, cfg.epochs // 3), cfg.step_gamma, cfg.warmup_steps)


def make_loss(name: str, eps: float = 1e-3) -> Callable:
    """Training loss ``(out, target) -> scalar``: mean absolute error (``l1``), mean squared
    error (``l2``), or Charbonnier ``mean(sqrt((out - target)^2 + eps^2))`` (a smooth L1)."""
    import torch
    import torch.nn.functional as F

    if name == "l1":
        return F.l1_loss
    if name == "l2":
        return F.mse_loss
    if name == "charbonnier":
        return lambda out, target: torch.sqrt((out - target) ** 2 + eps * eps).mean()
    raise UsageError(f"unknown loss {name!r}; expected one of {', '.join(LOSSES)}")


# --------------------------------------------------------------------------- observation, validation


def observe(task: str, gt):
    """The network input for ground-truth RGB patches ``gt`` ``(B, 3, P, P)`` in [0, 1]:
    ``y = H gt`` (RGGB mosaic, or plain 2x decimation), then ``(known, mask) = (H^T y, H^T 1)``
    (:func:`gsprestore.tasks.network_input`)."""
    from .tasks import network_input

    return network_input(task, gt, "RGGB")


def evaluate(model, task: str, patches, *, batch_size: int = 32, device=None) -> dict[str, float]:
    """Dataset-MSE PSNR (docs/protocol.md: ``10 log10(1 / mean_i MSE_i)``, float output, not clipped)
    of the model's reconstructions of ``patches`` (``uint8 (N, 3, P, P)``), in the task's protocol
    space (``psnr``) and in RGB (``psnr_rgb``)."""
    import torch

    from . import metrics

    space = score_space(task)
    was_training = model.training
    model.eval()
    mse_space, mse_rgb = [], []
    with torch.no_grad():
        for i in range(0, patches.shape[0], batch_size):
            gt = patches[i:i + batch_size].to(device).float() / 255.0
            out = model(*observe(task, gt))
            mse_rgb.append(metrics.mse(out, gt).cpu())
            mse_space.append(metrics.mse(metrics.to_space(out, space), metrics.to_space(gt, space)).cpu())
    model.train(was_training)
    return {
        "psnr": metrics.psnr_dataset_mse(torch.cat(mse_space)),
        "psnr_rgb": metrics.psnr_dataset_mse(torch.cat(mse_rgb)),
        "space": space,
    }


# --------------------------------------------------------------------------- files


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over ``path``:
    a crash leaves either the old or the new file, never a truncated one."""
    import torch

    with atomic_file(path, "wb") as f:
        torch.save(obj, f)


def atomic_write_text(text: str, path: Path) -> None:
    with atomic_file(path, "w", encoding="utf-8") as f:
        f.write(text)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a ``last.pt`` / ``best.pt`` (``weights_only=True``); a damaged file is a one-line error."""
    import torch

    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise GspError("no such checkpoint", path) from None
    except Exception as exc:
        raise GspError(f"unreadable checkpoint ({type(exc).__name__}); it may be truncated", path) from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        raise GspError(f"not a gsprestore training checkpoint (format {CHECKPOINT_FORMAT})", path)
    return ck


class JsonLog:
    """Append-only JSON-lines log; each record gets ``event`` and wall-clock ``time``."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, event: str, **record: Any) -> dict[str, Any]:
        rec = {"event": event, "time": round(time.time(), 3), **record}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, sort_keys=False) + "\n")
        return rec


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``log.jsonl``."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --------------------------------------------------------------------------- RNG, signals


def _rng_state() -> dict[str, Any]:
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


def _set_rng_state(state: dict[str, Any]) -> None:
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


def epoch_order(seed: int, epoch: int, n: int):
    """The order of the ``n`` training patches in ``epoch``: a permutation from a generator seeded
    by ``(seed, epoch)`` alone, so it can be recomputed when resuming mid-epoch."""
    import numpy as np
    import torch

    s = int(np.random.SeedSequence([seed, 104, epoch]).generate_state(1, np.uint64)[0])
    g = torch.Generator().manual_seed(s)
    return torch.randperm(n, generator=g)


class GracefulStop:
    """While active, SIGINT / SIGTERM set :attr:`signum` instead of killing the process, so the
    loop finishes its step and writes a checkpoint. A second SIGINT interrupts at once. Signal
    handlers exist only in the main thread; elsewhere this does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:  # noqa: ARG002
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name


# --------------------------------------------------------------------------- model


def pick_device(device: str = "auto"):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: no CUDA device is available (use --device cpu or auto)")
    if device != "cpu" and not device.startswith("cuda"):
        raise UsageError(f"unknown device {device!r}; expected auto, cpu or cuda[:N]")
    return torch.device(device)


def model_factory() -> Callable:
    """``build_model(method, task, **overrides) -> nn.Module`` (:mod:`gsprestore.models`); the
    trainer needs only ``forward(known, mask) -> x`` and a JSON-able ``.config``."""
    from .models import build_model

    return build_model


def set_mmap_threshold(nbytes: int) -> bool:
    """glibc ``mallopt(M_MMAP_THRESHOLD, nbytes)`` (``gsprestore train --grad-checkpoint`` sets 1 MiB): allocations of at least ``nbytes`` get their
    own mapping and go back to the OS when freed. By default the threshold adapts upwards (up to
    32 MB), so the many 1-30 MB tensors of a training step land in the heap, which fragments and
    keeps the resident size well above the live tensors. Returns False where unavailable."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-3, int(nbytes)))  # M_MMAP_THRESHOLD = -3
    except (OSError, AttributeError):
        return False


def build_network(cfg: TrainConfig, *, grad_checkpoint: bool = False):
    """The network of the recipe, initialised from ``torch.manual_seed(cfg.seed)`` (or from the
    weights in ``cfg.init``: a ``model.pt``, ``best.pt`` or ``last.pt``). ``grad_checkpoint``
    (memory, not architecture) recomputes each block in the backward pass."""
    import torch

    torch.manual_seed(cfg.seed)
    extra = {"checkpoint": True} if grad_checkpoint else {}
    try:
        model = model_factory()(cfg.method, cfg.task, **cfg.model, **extra)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad model option ({exc}); check --model-opt / --blocks / --cg-iters ...") from None
    if cfg.init:
        model.init_report = init_from(model, Path(cfg.init))
    return model


def init_from(model, path: Path) -> list[str]:
    """Copy the weights in ``path`` into ``model`` (a curriculum step: e.g. weights trained with
    fewer CG / ADMM iterations). Tensors must have the same names; a tensor whose shape differs
    (per-iteration step sizes) keeps its fresh initial value. Returns those tensors' names."""
    state = _state_dict_from(path)
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        bad = (missing + unexpected)[:3]
        raise GspError(f"weights do not fit this model ({len(missing)} tensors missing, {len(unexpected)} "
                       f"unexpected, e.g. {', '.join(bad)})", path)
    kept = sorted(k for k in own if own[k].shape != state[k].shape)
    model.load_state_dict({k: (own[k] if k in kept else state[k]) for k in own}, strict=True)
    return kept


def _state_dict_from(path: Path) -> dict:
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise GspError("no such weights file", path) from None
    except Exception as exc:
        raise GspError(f"unreadable weights file ({type(exc).__name__})", path) from None
    for key in ("state_dict", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            return obj[key]
    raise GspError("no model state in this file (expected model.pt, best.pt or last.pt)", path)


def export_weights(path: Path, model, meta: dict[str, Any]) -> Path:
    """Write the shipped-weights file through :func:`gsprestore.weights.save_weights`."""
    from .weights import save_weights

    save_weights(path, model, meta)
    return path


# --------------------------------------------------------------------------- training


@dataclass
class TrainResult:
    """What a call to :func:`train` ended with. ``status``: ``finished`` (all epochs),
    ``max-steps`` (stopped by ``max_steps``) or ``stopped`` (by a signal: ``signal`` names it)."""

    run_dir: Path
    status: str
    epoch: int
    step: int
    best_psnr: float | None
    best_epoch: int | None
    last_psnr: float | None
    patches_per_s: float | None
    model_path: Path | None
    signal: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


def _json_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError("not a training run folder (no config.json); nothing to resume", run_dir) from None
    except json.JSONDecodeError as exc:
        raise GspError(f"damaged config.json ({exc})", path) from None


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The recipe stored in ``RUN_DIR/config.json``."""
    return TrainConfig.from_json(_json_config(Path(run_dir))["recipe"])


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
    progress: bool = True,
    console=None,
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
    captured at the first step and checked against an eager step (:mod:`gsprestore.graphed_step`);
    if capture fails or differs, the run logs why and continues eagerly."""
    import torch
    from rich.console import Console

    t_call = time.monotonic()
    if time_budget is not None and not time_budget > 0:
        raise UsageError(f"--time-budget must be a positive number of seconds, got {time_budget}")
    deadline = None if time_budget is None else t_call + float(time_budget)

    console = console or Console(stderr=True)
    run_dir = Path(run_dir)
    if threads:
        torch.set_num_threads(int(threads))
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps must be >= 1, got {max_steps}")

    # ---- the run folder and its recipe
    if resume:
        stored = _json_config(run_dir)
        cfg = TrainConfig.from_json(stored["recipe"])
        if not (run_dir / "last.pt").is_file():
            raise UsageError("no last.pt checkpoint in this run folder; nothing to resume", run_dir)
        if epochs is not None and epochs != cfg.epochs:
            cfg.epochs = epochs
            stored["recipe"] = cfg.to_json()
            stored.setdefault("changes", []).append({"epochs": epochs, "time": round(time.time(), 3)})
            atomic_write_text(json.dumps(stored, indent=2) + "\n", run_dir / "config.json")
    else:
        if cfg is None:
            raise UsageError("a new run needs its recipe (--task, --prior, --data)")
        if epochs is not None:
            cfg.epochs = epochs
        if run_dir.exists() and not run_dir.is_dir():
            raise UsageError("--out must be a folder", run_dir)
        if (run_dir / "last.pt").exists() or (run_dir / "config.json").exists():
            raise UsageError("this folder already holds a training run; pass --resume to continue it "
                             "or choose another --out", run_dir)
    cfg.check()
    if cfg.schedule == "cosine-time" and time_budget is None:
        raise UsageError("--schedule cosine-time anneals over the wall-clock budget: pass --time-budget")
    dev = pick_device(device)
    if cuda_graph and dev.type != "cuda":
        raise UsageError(f"--cuda-graph needs a CUDA device (--device is {dev})")

    # ---- patches (a pure function of the recipe)
    with console.status("cutting training patches...", spinner="dots") if progress else _null():
        sets = build_patch_sets(cfg, workers=workers)
    if sets.train.shape[0] == 0:
        raise UsageError("no training patches")
    n_train = int(sets.train.shape[0])
    spe = math.ceil(n_train / cfg.batch_size)
    sched = LRSchedule.for_run(cfg, spe)

    # ---- model, optimizer, state
    model = build_network(_no_init(cfg) if resume else cfg, grad_checkpoint=grad_checkpoint).to(dev)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = make_loss(cfg.loss, cfg.charbonnier_eps)
    state = {"epoch": 0, "batch": 0, "step": 0, "elapsed": 0.0, "train_time": 0.0, "patches_seen": 0}
    best: dict[str, Any] = {"psnr": None, "epoch": None, "step": None}
    history: list[dict[str, Any]] = []
    if resume:
        ck = load_checkpoint(run_dir / "last.pt")
        if ck["train_digest"] != sets.info["train_digest"] or ck["val_digest"] != sets.info["val_digest"]:
            raise GspError("the training photos changed since this run started (patch fingerprint differs); "
                           "restore them or start a new run", run_dir)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        state.update({k: ck[k] for k in state})
        history = list(ck.get("history", []))
        best = dict(ck["best"])
        if (run_dir / "best.pt").is_file():  # best.pt is written first: trust it over last.pt
            b = load_checkpoint(run_dir / "best.pt")
            if best["psnr"] is None or (b["best"]["psnr"] is not None and b["best"]["psnr"] > best["psnr"]):
                best = dict(b["best"])
        _set_rng_state(ck["rng"])
        log = JsonLog(run_dir / "log.jsonl")
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        stored = {
            "format": "gsprestore-train-run/1",
            "method": cfg.method,
            "task": cfg.task,
            "recipe": cfg.to_json(),
            "command": cfg.command(run_dir),
            "model_config": _model_config(model),
            "patches": sets.info,
        }
        atomic_write_text(json.dumps(stored, indent=2) + "\n", run_dir / "config.json")
        log = JsonLog(run_dir / "log.jsonl")
    from ._version import __version__

    log.write("resume" if resume else "start", epoch=state["epoch"], step=state["step"], batch=state["batch"],
              device=str(dev), threads=torch.get_num_threads(), max_steps=max_steps, epochs=cfg.epochs,
              steps_per_epoch=spe, train_patches=n_train, val_patches=int(sets.val.shape[0]),
              params=sum(p.numel() for p in model.parameters()), version=__version__, torch=torch.__version__,
              init=cfg.init, init_kept=getattr(model, "init_report", None) if not resume else None)

    train_x = sets.train.to(dev)
    val_x = sets.val
    total_steps = cfg.epochs * spe
    stop_at = total_steps if max_steps is None else min(total_steps, max_steps)
    status = "finished"
    last_psnr: float | None = history[-1].get("val_psnr") if history else None
    stopper = GracefulStop()
    timing = {"val_s": None, "step_s": None, "save_s": 0.2}  # save_s: measured at the first checkpoint

    def checkpoint() -> None:
        atomic_save({
            "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": opt.state_dict(),
            "schedule": asdict(sched), "rng": _rng_state(), **state, "best": best, "history": history,
            "train_digest": sets.info["train_digest"], "val_digest": sets.info["val_digest"],
            "model_config": _model_config(model), "recipe": cfg.to_json(), "init_val": init_val,
        }, run_dir / "last.pt")

    def validate_and_keep(partial: bool, initial: bool = False) -> dict[str, Any]:
        nonlocal last_psnr
        t0 = time.perf_counter()
        val = evaluate(model, cfg.task, val_x, batch_size=max(cfg.batch_size, 32), device=dev) \
            if val_x.shape[0] else None
        timing["val_s"] = time.perf_counter() - t0
        improved = val is not None and (best["psnr"] is None or val["psnr"] > best["psnr"])
        if val is None:  # no validation slice: the latest model is the best we know
            improved = True
        if improved:
            best.update({"psnr": None if val is None else val["psnr"],
                         "epoch": 0 if initial else state["epoch"] + 1, "step": state["step"],
                         "partial": partial, "init": initial})
            atomic_save({"format": CHECKPOINT_FORMAT, "model": model.state_dict(), "best": dict(best),
                         "val": val, "model_config": _model_config(model), "recipe": cfg.to_json()},
                        run_dir / "best.pt")
        last_psnr = None if val is None else val["psnr"]
        return {"val": val, "improved": improved, "val_time": time.perf_counter() - t0}

    def out_of_time() -> bool:
        """True when one more step would leave less than a validation + checkpoint + export."""
        if deadline is None:
            return False
        val_s = timing["val_s"] if timing["val_s"] is not None else 0.0
        step_s = timing["step_s"] or 0.0
        # a validation, two steps (the one about to start and slack), checkpoint + best + export,
        # and a margin for a noisy machine
        reserve = 1.5 * val_s + 2.0 * step_s + 3.0 * timing["save_s"] + 0.5 + 0.02 * float(time_budget)
        return time.monotonic() + reserve > deadline

    init_val = None
    if cfg.init and not resume:  # the starting weights are the ones to beat (epoch 0)
        kept0 = validate_and_keep(False, initial=True)
        init_val = None if kept0["val"] is None else kept0["val"]["psnr"]
        log.write("init-val", val_psnr=init_val, val_time=kept0["val_time"], init=cfg.init)
    elif deadline is not None and val_x.shape[0]:  # measure the validation time the budget must keep
        t0 = time.perf_counter()
        evaluate(model, cfg.task, val_x[:max(cfg.batch_size, 32)], batch_size=max(cfg.batch_size, 32), device=dev)
        timing["val_s"] = (time.perf_counter() - t0) * max(1.0, val_x.shape[0] / max(cfg.batch_size, 32))
    if resume:
        init_val = ck.get("init_val")

    graphed, graph_tried = None, False
    t_loop = time.monotonic()  # cosine-time: the fraction of the time left at the first step

    def time_fraction() -> float | None:
        if deadline is None:
            return None
        return (time.monotonic() - t_loop) / max(deadline - t_loop, 1e-9)

    bar = _Bar(console, enabled=progress, total=stop_at, completed=min(state["step"], stop_at))
    bad_run = 0  # consecutive steps skipped for a non-finite loss or gradient
    with stopper, bar:
        while state["epoch"] < cfg.epochs and status == "finished":
            epoch = state["epoch"]
            order = epoch_order(cfg.seed, epoch, n_train).to(dev)
            ep_loss_sum, ep_n, ep_p, ep_t0, ep_train_time = 0.0, 0, 0, time.perf_counter(), 0.0
            win_loss, win_n, win_t, win_p = 0.0, 0, 0.0, 0
            while state["batch"] < spe:
                if state["step"] >= stop_at:
                    status = "max-steps"
                    break
                if out_of_time():
                    status = "time-budget"
                    break
                b = state["batch"]
                t0 = time.perf_counter()
                lr = sched(state["step"], time_fraction())
                for g in opt.param_groups:
                    g["lr"] = lr
                gt = train_x[order[b * cfg.batch_size:(b + 1) * cfg.batch_size]].float() / 255.0
                if cuda_graph and not graph_tried and gt.shape[0] == cfg.batch_size:
                    from .graphed_step import capture_training_step

                    graph_tried = True
                    graphed, ginfo = capture_training_step(model, cfg.task, loss_fn, gt, observe)
                    log.write("cuda-graph", used=graphed is not None, **ginfo)
                if graphed is not None and tuple(gt.shape) == graphed.shape:
                    loss = graphed(gt)  # overwrites every parameter's .grad
                else:
                    out = model(*observe(cfg.task, gt))
                    loss = loss_fn(out, gt)
                    # after a capture the gradients are the graph's static tensors: zero them, keep them
                    opt.zero_grad(set_to_none=graphed is None)
                    loss.backward()
                lv = float(loss.detach())  # synchronises the device: timings below are real
                gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                             cfg.grad_clip if cfg.grad_clip > 0 else math.inf))
                if math.isfinite(lv) and math.isfinite(gnorm):
                    opt.step()
                    bad_run = 0
                else:  # a diverging batch: skip its update (the weights stay finite), stop if it persists
                    bad_run += 1
                    state["skipped_steps"] = state.get("skipped_steps", 0) + 1
                    log.write("skip", epoch=epoch + 1, step=state["step"], loss=lv, grad_norm=gnorm,
                              reason="non-finite loss or gradient; update skipped")
                    if bad_run >= MAX_BAD_STEPS:
                        log.write("error", epoch=epoch, step=state["step"], reason="non-finite loss")
                        raise GspError(f"the loss or its gradient was not finite {bad_run} steps in a row "
                                       f"(last at step {state['step']}, epoch {epoch + 1}); lower --lr or set "
                                       "--grad-clip and start again", run_dir)
                    lv = 0.0  # not counted in the running loss (below, weighted by 0 patches)
                dt = time.perf_counter() - t0
                timing["step_s"] = dt if timing["step_s"] is None else 0.9 * timing["step_s"] + 0.1 * dt
                bs = gt.shape[0]
                lw = bs if bad_run == 0 else 0  # weight of this step in the running losses
                state["batch"] += 1
                state["step"] += 1
                state["patches_seen"] += bs
                state["train_time"] += dt
                ep_train_time += dt
                ep_loss_sum += lv * lw
                ep_n += lw
                win_loss, win_n, win_t, win_p = win_loss + lv * lw, win_n + lw, win_t + dt, win_p + bs
                ep_p += bs
                bar.update(state["step"], epoch=epoch + 1, epochs=cfg.epochs, loss=ep_loss_sum / max(ep_n, 1),
                           pps=state["patches_seen"] / max(state["train_time"], 1e-9))
                if state["step"] % cfg.log_every == 0:
                    log.write("step", epoch=epoch + 1, step=state["step"], loss=win_loss / win_n if win_n else None, lr=lr,
                              patches_per_s=win_p / max(win_t, 1e-9))
                    win_loss, win_n, win_t, win_p = 0.0, 0, 0.0, 0
                if stopper.signum is not None:
                    status = "stopped"
                    break
            if status == "stopped":
                break
            if status == "time-budget" and ep_p == 0 and (run_dir / "best.pt").is_file():
                break  # no step since the last validation: nothing new to validate
            partial = state["batch"] < spe
            if partial and state["step"] >= stop_at:
                status = "max-steps"
            kept = validate_and_keep(partial)
            record = {
                "epoch": epoch + 1, "step": state["step"], "partial": partial,
                "train_loss": ep_loss_sum / ep_n if ep_n else None,
                "lr": sched(max(state["step"] - 1, 0), time_fraction()),
                "patches_per_s": ep_p / ep_train_time if ep_train_time else None,
                "epoch_time": time.perf_counter() - ep_t0,
                "val_psnr": None if kept["val"] is None else kept["val"]["psnr"],
                "val_psnr_rgb": None if kept["val"] is None else kept["val"]["psnr_rgb"],
                "val_space": score_space(cfg.task), "val_time": kept["val_time"], "best": kept["improved"],
            }
            history.append(record)
            if not partial:
                state["epoch"] += 1
                state["batch"] = 0
            state["elapsed"] += time.perf_counter() - ep_t0
            t_save = time.perf_counter()
            checkpoint()
            timing["save_s"] = time.perf_counter() - t_save
            log.write("epoch", **record)
            bar.note(f"epoch {epoch + 1}/{cfg.epochs}: "
                     + ("" if record["train_loss"] is None else f"loss {record['train_loss']:.5f}")
                     + ("" if record["val_psnr"] is None else f", val PSNR {record['val_psnr']:.2f} dB")
                     + (" (best)" if kept["improved"] else "")
                     + (" [partial epoch]" if partial else ""))
            if state["step"] >= stop_at and state["epoch"] < cfg.epochs:
                status = "max-steps"
            if stopper.signum is not None and status == "finished":
                status = "stopped"

    pps = state["patches_seen"] / state["train_time"] if state["train_time"] else None
    if status == "stopped":
        checkpoint()
        log.write("stop", reason=stopper.name, epoch=state["epoch"], batch=state["batch"], step=state["step"])
        return TrainResult(run_dir, status, state["epoch"], state["step"], best["psnr"], best["epoch"],
                           last_psnr, pps, None, stopper.name)

    # ---- export the best weights with the full recipe
    best_ck = load_checkpoint(run_dir / "best.pt")
    export_model = build_network(_no_init(cfg))
    export_model.load_state_dict(best_ck["model"])
    export_model.eval()
    meta = {
        "method": cfg.method, "task": cfg.task, "pattern": "RGGB" if cfg.task == "demosaic" else None,
        "command": cfg.command(run_dir), "recipe": cfg.to_json(), "data": list(cfg.data),
        "patches": {k: v for k, v in sets.info.items() if k != "val_files"},
        "epochs_done": state["epoch"], "steps": state["step"], "status": status,
        "best_epoch": best["epoch"], "best_step": best["step"],
        "val_psnr": best["psnr"], "val_space": score_space(cfg.task), "init_val_psnr": init_val,
        "val_psnr_definition": "dataset-MSE PSNR on held-out training-photo patches (float, unclipped)",
        "patches_per_s": pps, "device": str(dev), "threads": torch.get_num_threads(),
        "train_time_s": state["train_time"], "params": sum(p.numel() for p in export_model.parameters()),
        "version": __version__, "torch": torch.__version__,
    }
    model_path = export_weights(run_dir / "model.pt", export_model, meta)
    summary = {
        "status": status, "epochs_done": state["epoch"], "epochs": cfg.epochs, "steps": state["step"],
        "best_val_psnr": best["psnr"], "best_epoch": best["epoch"], "init_val_psnr": init_val,
        "best_is_init": bool(best.get("init")),
        "last_val_psnr": last_psnr, "time_budget_s": time_budget, "val_space": score_space(cfg.task),
        "patches_per_s": pps, "train_time_s": state["train_time"], "elapsed_s": state["elapsed"],
        "params": meta["params"], "device": str(dev), "model": str(model_path),
    }
    atomic_write_text(json.dumps(summary, indent=2) + "\n", run_dir / "summary.json")
    log.write("end", **summary)
    return TrainResult(run_dir, status, state["epoch"], state["step"], best["psnr"], best["epoch"],
                       summary["last_val_psnr"], pps, model_path, None, summary)


def _no_init(cfg: TrainConfig) -> TrainConfig:
    return TrainConfig.from_json({**cfg.to_json(), "init": None})


def _model_config(model) -> dict[str, Any]:
    cfg = getattr(model, "config", None)
    return dict(cfg) if isinstance(cfg, dict) else {}


def build_patch_sets(cfg: TrainConfig, *, workers: int = 0):
    """The training/validation patches of a recipe (see :mod:`gsprestore.patches`); a training
    pack among the folders (:mod:`gsprestore.trainpack`) brings its own photo-level split."""
    from . import patches
    from .trainpack import is_pack, pack_folders

    packs = [pack_folders(f) for f in cfg.data if is_pack(f)]
    return patches.build_patch_sets(
        [f for f in cfg.data if not is_pack(f)], presplit=packs, patches=cfg.patches, patch_size=cfg.patch_size, val_fraction=cfg.val_fraction,
        val_patches=cfg.val_patches, seed=cfg.seed, downscale=cfg.downscale,
        downscale_filter=cfg.downscale_filter, downscale_scope=cfg.downscale_scope, augment=cfg.augment,
        workers=workers)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class _Bar:
    """Rich progress bar on stderr: steps, epoch, running loss, patches/s, elapsed and ETA."""

    def __init__(self, console, *, enabled: bool, total: int, completed: int):
        self.enabled = enabled
        self.console = console
        if enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.progress = Progress(
                TextColumn("[bold]epoch {task.fields[epoch]}/{task.fields[epochs]}"), BarColumn(),
                MofNCompleteColumn(), TextColumn("loss {task.fields[loss]:.5f}"),
                TextColumn("{task.fields[pps]:.3g} patches/s"), TimeElapsedColumn(), TextColumn("ETA"),
                TimeRemainingColumn(), console=console, transient=False)
            self.task = self.progress.add_task("train", total=total, completed=completed, epoch="-",
                                               epochs="-", loss=float("nan"), pps=0.0)

    def __enter__(self):
        if self.enabled:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.stop()

    def update(self, step: int, **fields_: Any) -> None:
        if self.enabled:
            self.progress.update(self.task, completed=step, **fields_)

    def note(self, text: str) -> None:
        if self.enabled:
            self.progress.console.print(text)


def summary_table(result: TrainResult):
    """A Rich table of a finished (or stopped) run's figures."""
    from rich.table import Table

    t = Table(title=f"training run {result.run_dir}", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")

    def fmt(v, f="{:.2f}"):
        return "-" if v is None else f.format(v)

    t.add_row("status", result.status + (f" ({result.signal})" if result.signal else ""))
    t.add_row("epochs done / steps", f"{result.epoch} / {result.step}")
    t.add_row("best val PSNR", fmt(result.best_psnr, "{:.3f} dB") + (f" (epoch {result.best_epoch})"
                                                                    if result.best_epoch else ""))
    t.add_row("last val PSNR", fmt(result.last_psnr, "{:.3f} dB"))
    t.add_row("training speed", fmt(result.patches_per_s, "{:.3g} patches/s"))
    if result.summary:
        t.add_row("train time", fmt(result.summary.get("train_time_s"), "{:.1f} s"))
        t.add_row("parameters", f"{result.summary.get('params', 0):,}")
        t.add_row("device", str(result.summary.get("device")))
    t.add_row("weights", str(result.model_path) if result.model_path else "- (resume to finish)")
    return t
