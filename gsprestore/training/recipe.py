"""The recipe of a training run (paper Sec. 5): :class:`TrainConfig` (every choice that shapes the
trained weights, and the ``gsprestore train`` command line that reproduces it), the learning-rate
schedule :class:`LRSchedule` (a pure function of the step, or of the wall-clock fraction for
``cosine-time``) and the losses (:func:`make_loss`).

A recipe is also a file a user can read, copy and edit (as Real-ESRGAN's ``options/*.yml``):
``gsprestore train --recipe FILE`` reads a TOML file of :class:`TrainConfig`'s fields (the model's
options in a ``[model]`` table), a run's ``config.json``, or the recorded recipe of a shipped model
by its name (``ugtv-lite_demosaic``: the manifest's last training stage), and ``--print-recipe``
writes the assembled recipe as such a TOML file (:func:`load_recipe`, :func:`recipe_toml`)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from ..core.errors import UsageError
from ..models.unrolled import PRIORS

SCHEDULES = ("cosine", "cosine-time", "step", "none")
LOSSES = ("l1", "l2", "charbonnier")
#: The largest count a recipe takes (steps, patches, epochs...): torch and NumPy hold them as C ints.
MAX_COUNT = 2**31 - 1
#: Options that may differ when a run is resumed (everything else is the run's recipe).
RESUMABLE_CHANGES = ("epochs",)

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
    #: learning-rate multiplier of the unrolled CG step sizes (every block's alpha_t, beta_t)
    step_size_lr_scale: float = 1.0
    seed: int = 0
    downscale: int = 1
    downscale_filter: str = "lanczos"
    downscale_scope: str = "all"
    augment: bool = True
    #: share of the training patches drawn by difficulty (hard-patch mining, :mod:`.mining`)
    mine_share: float = 0.0
    #: exposure and colour-balance jitter of the training patches (:func:`.augment.jitter`): gains
    #: ``exp(U(-s, s))`` per patch and, at half that spread, per channel; 0 is off
    color_jitter: float = 0.0
    #: noisy training pairs (issue 49, :func:`gsprestore.physics.noise.noisy_mosaic`): "" off, or
    #: the highest named level of :data:`gsprestore.physics.noise.LEVELS` drawn (a noise-aware
    #: network, ``noise_input``, learns from them; validation is noisy the same way, seeded)
    raw_noise: str = ""
    model: dict[str, Any] = field(default_factory=dict)
    init: str | None = None
    log_every: int = 50

    @property
    def method(self) -> str:
        """``ugtv`` / ``uglr``, or ``ugtv-lite`` / ``uglr-lite`` with ``--model-opt
        feature_trunk="packed"`` (the CPU-size networks, :func:`gsprestore.models.unrolled.lite_config`)."""
        from ..models.unrolled import method_name

        return method_name(self.prior, str(self.model.get("feature_trunk", "per-block")),
                           bool(self.model.get("noise_input")))

    def check(self) -> "TrainConfig":
        """Raise :class:`UsageError` for an impossible recipe (message shows the value)."""
        from ..physics.tasks import check_task

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
        if not (self.step_size_lr_scale > 0 and math.isfinite(self.step_size_lr_scale)):
            raise UsageError(f"--step-size-lr-scale must be a positive number, got {self.step_size_lr_scale}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise UsageError(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        # every other number of the recipe, at the edge: a value no schedule, optimizer or random
        # generator takes is a usage error here, not a ValueError deep in torch or NumPy
        for name, value, ok, want in [
            ("--min-lr-ratio", self.min_lr_ratio, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]"),
            ("--step-gamma", self.step_gamma, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]"),
            ("--weight-decay", self.weight_decay, lambda v: 0.0 <= v < math.inf, "a number >= 0"),
            ("--grad-clip", self.grad_clip, lambda v: 0.0 <= v < math.inf, "a number >= 0 (0: off)"),
            ("charbonnier_eps", self.charbonnier_eps, lambda v: 0.0 < v < math.inf, "a positive number"),
        ]:
            if not (isinstance(value, (int, float)) and ok(float(value))):  # NaN fails every comparison
                raise UsageError(f"{name} must be {want}, got {value}")
        for name, value, low in [("--warmup-steps", self.warmup_steps, 0), ("--seed", self.seed, 0)]:
            if value < low:
                raise UsageError(f"{name} must be >= {low}, got {value}")
        if self.seed >= 2**63:
            raise UsageError(f"--seed must be below 2**63, got {self.seed}")
        if self.step_epochs is not None and self.step_epochs < 1:
            raise UsageError(f"--step-epochs must be >= 1, got {self.step_epochs}")
        if self.val_patches is not None and self.val_patches < 0:
            raise UsageError(f"--val-patches must be >= 0, got {self.val_patches}")
        for name, value in [("--epochs", self.epochs), ("--batch-size", self.batch_size), ("--patches", self.patches),
                            ("--val-patches", self.val_patches), ("--log-every", self.log_every),
                            ("--warmup-steps", self.warmup_steps), ("--step-epochs", self.step_epochs),
                            ("--patch-size", self.patch_size)]:
            if value is not None and value > MAX_COUNT:  # counts become C ints in torch and NumPy
                raise UsageError(f"{name} must be at most {MAX_COUNT:,}, got {value}")
        if not (isinstance(self.mine_share, (int, float)) and 0.0 <= self.mine_share <= 1.0):
            raise UsageError(f"--mine-share must be a number in [0, 1], got {self.mine_share}")
        if not (isinstance(self.color_jitter, (int, float)) and 0.0 <= self.color_jitter <= 1.0):
            raise UsageError(f"--color-jitter must be a number in [0, 1], got {self.color_jitter}")
        if self.raw_noise:
            from ..physics.noise import LEVELS

            if self.raw_noise not in LEVELS:
                raise UsageError(f"--raw-noise must be one of {', '.join(LEVELS)}, got {self.raw_noise!r}")
            if self.task != "demosaic":
                raise UsageError("--raw-noise is for demosaicking")
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
        if self.step_size_lr_scale != 1.0:
            args += ["--step-size-lr-scale", repr(self.step_size_lr_scale)]
        if self.downscale > 1:
            args += ["--downscale", str(self.downscale), "--downscale-filter", self.downscale_filter,
                     "--downscale-scope", self.downscale_scope]
        if not self.augment:
            args += ["--no-augment"]
        if self.mine_share:
            args += ["--mine-share", repr(self.mine_share)]
        if self.color_jitter:
            args += ["--color-jitter", repr(self.color_jitter)]
        if self.raw_noise:
            args += ["--raw-noise", self.raw_noise]
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


def without_init(cfg: TrainConfig) -> TrainConfig:
    """The recipe with no ``init`` weights (a resumed run and the export rebuild the bare network)."""
    return TrainConfig.from_json({**cfg.to_json(), "init": None})


# --------------------------------------------------------------------------- recipe files

#: Recipe keys of a shipped model's record that name this machine's files, not a choice of the
#: recipe: dropped when a shipped recipe is loaded (the user passes their own --data / --init).
MACHINE_KEYS = ("data", "init")


def load_recipe(source: str | Path) -> tuple[dict[str, Any], list[str]]:
    """``(fields, notes)`` of a recipe: a ``.toml`` file (:class:`TrainConfig`'s fields, the
    model's options in a ``[model]`` table), a ``.json`` file (a run's ``config.json`` or a bare
    recipe), or the name of a shipped model (``METHOD_TASK``, e.g. ``ugtv-lite_demosaic``: the
    recipe of its last recorded training stage, without :data:`MACHINE_KEYS`). Unknown keys and
    unreadable files are :class:`UsageError` naming the file; nothing is checked beyond the keys
    here (the assembled recipe is, by :meth:`TrainConfig.check`)."""
    from ..core.jsontext import loads

    notes: list[str] = []
    path = Path(source)
    if path.suffix.lower() in (".toml", ".json") or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the recipe ({getattr(exc, 'strerror', None) or exc})", path) from None
        try:
            if path.suffix.lower() == ".toml":
                import tomllib

                doc = tomllib.loads(text)
            else:
                doc = loads(text)
        except ValueError as exc:  # tomllib.TOMLDecodeError and json's are ValueErrors
            raise UsageError(f"not a recipe file ({str(exc).splitlines()[0] if str(exc) else 'unreadable'})",
                             path) from None
        if isinstance(doc, dict) and isinstance(doc.get("recipe"), dict):  # a run's config.json
            doc = doc["recipe"]
        where: str | Path = path
    else:
        doc, where = _shipped_recipe(str(source)), str(source)
        notes.append(f"recipe of the shipped {source} (its last training stage); its data and --init are "
                     "this project's files, not carried: pass --data (and --init) yourself")
    if not isinstance(doc, dict):
        raise UsageError("not a recipe file (expected a table of TrainConfig fields)", where)
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise UsageError(f"unknown recipe key(s) {', '.join(map(repr, unknown))}; the keys are TrainConfig's "
                         f"fields ({', '.join(sorted(known))})", where)
    if isinstance(doc.get("model"), dict):
        from ..models.unrolled import OPTIONAL_KEYS, default_config
        from ..physics.tasks import TASKS

        keys = {k for prior in PRIORS for task in TASKS for k in default_config(prior, task)} | set(OPTIONAL_KEYS)
        odd = sorted(set(doc["model"]) - keys)
        if odd:
            raise UsageError(f"unknown model option(s) {', '.join(map(repr, odd))} in the recipe's [model]", where)
    for f in fields(TrainConfig):
        if f.name in doc and not _of_type(doc[f.name], str(f.type)):
            raise UsageError(f"recipe key {f.name!r} must be {_TYPE_WORDS.get(str(f.type), f.type)}, got "
                             f"{doc[f.name]!r}", where)
    return dict(doc), notes


#: How the recipe's field types read in an error message.
_TYPE_WORDS = {"int": "a whole number", "float": "a number", "str": "a string", "bool": "true or false",
               "list[str]": "a list of folders", "int | None": "a whole number", "str | None": "a string",
               "dict[str, Any]": "a table of model options"}


def _of_type(value: Any, annotation: str) -> bool:
    """Whether ``value`` (from TOML or JSON) fits the :class:`TrainConfig` field annotated so."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    base = annotation.removesuffix(" | None")
    if value is None:
        return annotation.endswith("| None")
    return {"int": isinstance(value, int) and not isinstance(value, bool), "float": number,
            "str": isinstance(value, str), "bool": isinstance(value, bool),
            "list[str]": isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)),
            "dict[str, Any]": isinstance(value, dict)}.get(base, True)


def _shipped_recipe(name: str) -> dict[str, Any]:
    """The last recorded training recipe of the shipped model ``name`` (``METHOD_TASK``)."""
    from ..core.errors import WeightsError
    from ..methods.weights import read_manifest

    try:
        entries = read_manifest()["models"]
    except WeightsError:  # a damaged manifest: no shipped recipes to name
        entries = []
    names = {f"{e.get('method')}_{e.get('task')}": e for e in entries if isinstance(e, dict)}
    entry = names.get(name)
    stages = entry.get("training") if entry else None
    if not stages or not isinstance(stages[-1], dict) or not isinstance(stages[-1].get("recipe"), dict):
        raise UsageError(f"no recipe file or shipped model named {name!r}; shipped recipes: "
                         f"{', '.join(sorted(k for k, e in names.items() if e.get('training'))) or 'none'}")
    return {k: v for k, v in stages[-1]["recipe"].items() if k not in MACHINE_KEYS}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)  # a TOML basic string is a JSON string


def recipe_toml(cfg: TrainConfig) -> str:
    """``cfg`` as a TOML recipe file :func:`load_recipe` reads back to the same recipe (fields that
    are None are left out: their default is None)."""
    d = cfg.to_json()
    model = d.pop("model") or {}
    lines = ["# gsprestore training recipe: gsprestore train --recipe THIS.toml --out RUN_DIR",
             "# (any option given on the command line overrides the value here)"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in d.items() if v is not None]
    if model:
        lines += ["", "[model]"] + [f"{k} = {_toml_value(v)}" for k, v in sorted(model.items()) if v is not None]
    return "\n".join(lines) + "\n"
