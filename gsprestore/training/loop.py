"""The training loop (paper Sec. 5: back-propagation through the unrolled CG / ADMM iterations):
:func:`gsprestore.training.launch.train` opens or resumes a run folder, then :class:`TrainingRun` does the steps, validates and
checkpoints after every epoch, and exports the best weights. It draws nothing: it reports to a
``progress=`` object (:class:`gsprestore.training.report.TrainProgress`; ``gsprestore train``
passes the Rich one, :class:`gsprestore.runtime.progress.RichProgress`).

``model_factory``, ``make_loss``, ``evaluate`` and ``MAX_BAD_STEPS`` are read on the package
namespace (:mod:`gsprestore.training`) when a run uses them, so replacing them there (the tests
do) reaches the loop."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..physics.tasks import is_mosaic
from ..runtime import distributed as D
from ..core.errors import GspError
from ..core.heartbeat import Heartbeat
from .build import build_network, epoch_order, model_config, optimizer_groups
from .checkpoints import (
    CHECKPOINT_FORMAT, RUN_FORMAT, JsonLog, atomic_save, export_weights, load_checkpoint, rng_state,
    set_rng_state,
)
from ..core.jsontext import dump_atomic
from ..physics.tasks import network_input
from .evaluation import score_space
from .recipe import LRSchedule, TrainConfig, without_init
from ..runtime.progress import TrainProgress
from .report import TrainResult
from .stopping import Deadline, GracefulStop

#: Steps in a row whose loss or gradient may be non-finite (each update skipped) before a run stops.
MAX_BAD_STEPS = 10


def _heartbeat():
    """:mod:`gsprestore.core.heartbeat`, whose intervals are read at run time (tests shorten them)."""
    from ..core import heartbeat

    return heartbeat


def _package():
    """:mod:`gsprestore.training`, where ``model_factory``, ``make_loss``, ``evaluate`` and
    ``MAX_BAD_STEPS`` are looked up at run time."""
    return sys.modules[__package__]


class _Window:
    """Running sums of the losses (weighted by the patches of a finite step), patches and time."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss, self.n, self.t, self.p = 0.0, 0, 0.0, 0

    def add(self, loss: float, weight: int, dt: float, patches: int) -> None:
        self.loss, self.n, self.t, self.p = self.loss + loss * weight, self.n + weight, self.t + dt, self.p + patches


class _NoLog:
    """The log of a rank other than 0: nothing is written (rank 0 is the one writer)."""

    on_write = None

    def write(self, event: str, **record: Any) -> dict[str, Any]:
        return {"event": event, **record}


class TrainingRun:
    """One call of :func:`train`: the model, optimizer, schedule and counters of a run, and its
    steps, epochs, checkpoints and export. With several ranks (``ranks``), every rank runs one,
    in lockstep; only rank 0's touches the run folder."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, sets, dev, progress: TrainProgress, deadline: Deadline, *,
                 grad_checkpoint: bool, cuda_graph: bool, max_steps: int | None, ranks: D.Ranks | None = None):
        import torch

        self.ranks = ranks or D.Ranks()
        self.main = self.ranks.main
        self.world_sizes: list[int] = []  # the world size of every call that trained this run
        self.signum: int | None = None  # the signal the ranks agreed to stop on
        self.fraction: float | None = None  # the budget's fraction spent, as the ranks agreed (cosine-time)
        self.cfg, self.run_dir, self.sets, self.dev = cfg, run_dir, sets, dev
        self.progress, self.deadline, self.cuda_graph, self.max_steps = progress, deadline, cuda_graph, max_steps
        self.grad_checkpoint = grad_checkpoint
        self.n_train = int(sets.train.shape[0])
        self.spe = math.ceil(self.n_train / cfg.batch_size)
        self.sched = LRSchedule.for_run(cfg, self.spe)
        self.state = {"epoch": 0, "batch": 0, "step": 0, "elapsed": 0.0, "train_time": 0.0, "patches_seen": 0}
        self.best: dict[str, Any] = {"psnr": None, "epoch": None, "step": None}
        self.history: list[dict[str, Any]] = []
        self.status = "finished"
        self.last_psnr: float | None = None
        self.init_val: float | None = None
        self.stopper = GracefulStop()
        self.graphed, self.graph_tried = None, False
        self.bad_run = 0  # consecutive steps skipped for a non-finite loss or gradient
        self.init_config: dict[str, Any] | None = None  # what --init adopted (adopt_init_config)
        self.phase = "starting"  # what the run is doing, for the log's "alive" records
        self.last_step_log = time.monotonic()  # when the latest "step" record was written
        self.alive: Heartbeat | None = None
        self.torch = torch

    # ---- setup

    def open(self, resume: bool) -> None:
        """Build the model, optimizer and loss; load ``last.pt`` (resume) or write ``config.json``
        (new run); log the start; validate ``--init`` weights (or time a validation for the budget)."""
        torch, cfg, run_dir = self.torch, self.cfg, self.run_dir
        self.model = build_network(without_init(cfg) if resume else cfg,
                                   grad_checkpoint=self.grad_checkpoint).to(self.dev)
        self.model.train()
        if cfg.init and not resume and self.main:  # a partial start says how partial
            from .checkpoints import init_copy_note

            note = init_copy_note(self.model, cfg.init, getattr(self.model, "init_report", None) or [])
            if note:
                self.progress.message(note)
        self.opt = torch.optim.Adam(optimizer_groups(self.model, cfg.step_size_lr_scale), lr=cfg.lr,
                                    weight_decay=cfg.weight_decay)
        self.loss_fn = _package().make_loss(cfg.loss, cfg.charbonnier_eps)
        ck = None
        ranks = self.ranks
        if resume:
            ck = self._load_last()
        elif self.main:
            run_dir.mkdir(parents=True, exist_ok=True)
            dump_atomic({"format": RUN_FORMAT, "method": cfg.method, "task": cfg.task, "recipe": cfg.to_json(),
                        "command": cfg.command(run_dir), "model_config": model_config(self.model),
                        "patches": self.sets.info}, run_dir / "config.json")
        self.world_sizes.append(ranks.world)
        self.net = self.model  # what the steps call: the model, or its DistributedDataParallel wrapper
        if ranks.active:
            from torch.nn.parallel import DistributedDataParallel

            # rank 0's weights go to every rank here (they are equal already: same seed or checkpoint)
            self.net = DistributedDataParallel(self.model, device_ids=[self.dev.index] if self.dev.type == "cuda"
                                               else None)
        if self.main:
            self._record_ranks()
            self.log = JsonLog(run_dir / "log.jsonl")
            # a record at least every LOG_INTERVAL_S, whatever runs (a long step, a validation, the export)
            self.alive = Heartbeat(_heartbeat().LOG_INTERVAL_S, self._alive)
            self.log.on_write = self.alive.touch
            self.alive.start()
        else:
            self.log = _NoLog()
        from .._version import __version__

        self.log.write("resume" if resume else "start", epoch=self.state["epoch"], step=self.state["step"],
                       batch=self.state["batch"], device=str(self.dev), threads=torch.get_num_threads(),
                       world_size=ranks.world, global_batch=cfg.batch_size,
                       per_rank_batch=cfg.batch_size // ranks.world, backend=ranks.backend,
                       max_steps=self.max_steps, epochs=cfg.epochs, steps_per_epoch=self.spe,
                       train_patches=self.n_train, val_patches=int(self.sets.val.shape[0]),
                       params=sum(p.numel() for p in self.model.parameters()), version=__version__,
                       torch=torch.__version__, init=cfg.init,
                       init_kept=getattr(self.model, "init_report", None) if not resume else None,
                       init_regrown=getattr(self.model, "init_regrown", None) if not resume else None,
                       init_config=None if self.init_config is None else
                       {k: self.init_config[k] for k in ("adopted", "given", "note")})
        self.train_x = self.sets.train.to(self.dev)
        self.val_x = self.sets.val
        total_steps = cfg.epochs * self.spe
        self.stop_at = total_steps if self.max_steps is None else min(total_steps, self.max_steps)
        self.last_psnr = self.history[-1].get("val_psnr") if self.history else None
        n_val = int(self.val_x.shape[0])
        if cfg.init and not resume:  # the starting weights are the ones to beat (epoch 0)
            self.phase = "validating the --init weights"
            kept0 = self.validate_and_keep(False, initial=True)
            self.init_val = None if kept0["val"] is None else kept0["val"]["psnr"]
            self.log.write("init-val", val_psnr=self.init_val, val_time=kept0["val_time"], init=cfg.init)
            if n_val:  # the first step's estimate, for the budget (each rank validated its share)
                self.deadline.expect_step(kept0["val_time"] / math.ceil(n_val / self.ranks.world), cfg.batch_size)
        elif self.deadline.at is not None and n_val and self.main:
            # time the validation (and so a step) the budget must keep; with several ranks rank 0's
            # budget governs (any rank's stop is everyone's) and the figure, a whole validation on
            # one rank, is on the safe side until the first shared validation is measured
            self.phase = "timing a validation"
            t0 = time.perf_counter()
            vb = max(cfg.batch_size, 32)
            _package().evaluate(self.model, cfg.task, self.val_x[:vb], batch_size=vb, device=self.dev)
            took = time.perf_counter() - t0
            self.deadline.val_s = took * max(1.0, n_val / vb)
            self.deadline.expect_step(took / min(vb, n_val), cfg.batch_size)
        if resume:
            self.init_val = ck.get("init_val")

    def close(self) -> None:
        """Stop the log's heartbeat (after the run, whatever ended it)."""
        if self.alive is not None:
            self.alive.stop()

    def _alive(self, elapsed: float) -> None:
        """A ``log.jsonl`` record after :data:`gsprestore.core.heartbeat.LOG_INTERVAL_S` of silence."""
        self.log.write("alive", phase=self.phase, epoch=self.state["epoch"] + 1, step=self.state["step"],
                       elapsed_s=round(elapsed, 1))

    def _read_last(self) -> dict[str, Any]:
        """``last.pt``, with the best record of ``best.pt`` where that one is better."""
        ck = load_checkpoint(self.run_dir / "last.pt")
        if (self.run_dir / "best.pt").is_file():  # best.pt is written first: trust it over last.pt
            b = load_checkpoint(self.run_dir / "best.pt")
            best = ck["best"]
            if best["psnr"] is None or (b["best"]["psnr"] is not None and b["best"]["psnr"] > best["psnr"]):
                ck["best"] = dict(b["best"])
        return ck

    def _load_last(self) -> dict[str, Any]:
        ck = D.from_rank0(self.ranks, self._read_last, "reading last.pt")  # rank 0 reads it for all
        info = self.sets.info
        if ck["train_digest"] != info["train_digest"] or ck["val_digest"] != info["val_digest"]:
            raise GspError("the training photos changed since this run started (patch fingerprint differs); "
                           "restore them or start a new run", self.run_dir)
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["optimizer"])
        self.state.update({k: ck[k] for k in self.state})
        self.history = list(ck.get("history", []))
        self.best = dict(ck["best"])
        self.world_sizes = list(ck.get("world_sizes", [1]))
        set_rng_state(ck["rng"])
        return ck

    def _record_ranks(self) -> None:
        """``config.json`` says how many ranks trained the run: ``ranks``, one entry per call."""
        from .checkpoints import read_run_config

        stored = read_run_config(self.run_dir)
        stored.setdefault("ranks", []).append({
            "world_size": self.ranks.world, "global_batch": self.cfg.batch_size,
            "per_rank_batch": self.cfg.batch_size // self.ranks.world, "backend": self.ranks.backend,
            "from_step": self.state["step"], "time": round(time.time(), 3)})
        dump_atomic(stored, self.run_dir / "config.json")

    # ---- checkpoints, validation

    def checkpoint(self) -> None:
        if not self.main:
            return
        info = self.sets.info
        atomic_save({"world_sizes": self.world_sizes,
            "format": CHECKPOINT_FORMAT, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
            "schedule": asdict(self.sched), "rng": rng_state(), **self.state, "best": self.best,
            "history": self.history, "train_digest": info["train_digest"], "val_digest": info["val_digest"],
            "model_config": model_config(self.model), "recipe": self.cfg.to_json(), "init_val": self.init_val,
        }, self.run_dir / "last.pt")

    def validate_and_keep(self, partial: bool, initial: bool = False) -> dict[str, Any]:
        """Validate; if better than the best so far (or without a validation slice), write ``best.pt``."""
        cfg, best = self.cfg, self.best
        t0 = time.perf_counter()
        if not initial:
            self.phase = "validation"
        val = self._evaluate()
        self.deadline.val_s = time.perf_counter() - t0
        improved = val is not None and (best["psnr"] is None or val["psnr"] > best["psnr"])
        if val is None:  # no validation slice: the latest model is the best we know
            improved = True
        if improved:
            best.update({"psnr": None if val is None else val["psnr"],
                         "epoch": 0 if initial else self.state["epoch"] + 1, "step": self.state["step"],
                         "partial": partial, "init": initial})
        if improved and self.main:
            atomic_save({"format": CHECKPOINT_FORMAT, "model": self.model.state_dict(), "best": dict(best),
                         "val": val, "model_config": model_config(self.model), "recipe": cfg.to_json()},
                        self.run_dir / "best.pt")
        self.last_psnr = None if val is None else val["psnr"]
        return {"val": val, "improved": improved, "val_time": time.perf_counter() - t0}

    def _evaluate(self) -> dict[str, Any] | None:
        """The validation figures (None without validation patches). With several ranks each
        evaluates its contiguous share of the patches and the shares' mean MSEs are summed,
        weighted by their sizes: the dataset-MSE PSNR of the whole set, on every rank."""
        cfg, n_val = self.cfg, int(self.val_x.shape[0])
        if not n_val:
            return None
        vb = max(cfg.batch_size, 32)
        if not self.ranks.active:
            return _package().evaluate(self.model, cfg.task, self.val_x, batch_size=vb, device=self.dev,
                                       raw_noise=cfg.raw_noise)
        lo, hi = D.split(n_val, self.ranks.rank, self.ranks.world)
        sums = [0.0, 0.0]
        if hi > lo:
            part = _package().evaluate(self.model, cfg.task, self.val_x[lo:hi], batch_size=vb, device=self.dev,
                                       raw_noise=cfg.raw_noise, offset=lo)
            sums = [(hi - lo) * 10.0 ** (-part[key] / 10.0) for key in ("psnr", "psnr_rgb")]
        total = D.all_sum(self.ranks, sums, self.dev, "the validation")

        def psnr(sq_sum: float) -> float:
            return math.inf if sq_sum <= 0 else 10.0 * math.log10(n_val / sq_sum)

        return {"psnr": psnr(total[0]), "psnr_rgb": psnr(total[1]), "space": score_space(cfg.task)}

    # ---- steps, epochs

    def loop(self) -> None:
        """Epochs until the last one, ``max_steps``, the time budget or a signal."""
        state, cfg = self.state, self.cfg
        self.deadline.start_loop()  # cosine-time: the fraction of the time left at the first step
        self.progress.start(self.stop_at, min(state["step"], self.stop_at))
        try:
            with self.stopper:
                while state["epoch"] < cfg.epochs and self.status == "finished":
                    if not self.epoch():
                        break
        finally:
            self.progress.stop()

    def epoch(self) -> bool:
        """The rest of the current epoch, then validation and a checkpoint. False: stop the loop now."""
        state, cfg = self.state, self.cfg
        epoch = state["epoch"]
        order = epoch_order(cfg.seed, epoch, self.n_train).to(self.dev)
        ep, win, ep_t0 = _Window(), _Window(), time.perf_counter()
        while state["batch"] < self.spe:
            if state["step"] >= self.stop_at:
                self.status = "max-steps"
                break
            if self._out_of_time():
                self.status = "time-budget"
                break
            self.step(epoch, order, ep, win)
            if self._stop_signal() is not None:
                self.status = "stopped"
                break
        if self.status == "stopped":
            return False
        if (self.status == "time-budget" and ep.p == 0
                and D.from_rank0(self.ranks, (self.run_dir / "best.pt").is_file, "the time budget")):
            return False  # no step since the last validation: nothing new to validate
        partial = state["batch"] < self.spe
        if partial and state["step"] >= self.stop_at:
            self.status = "max-steps"
        kept = self.validate_and_keep(partial)
        record = {
            "epoch": epoch + 1, "step": state["step"], "partial": partial,
            "train_loss": ep.loss / ep.n if ep.n else None,
            "lr": self.sched(max(state["step"] - 1, 0), self.deadline.fraction()),
            "patches_per_s": ep.p / ep.t if ep.t else None,
            "epoch_time": time.perf_counter() - ep_t0,
            "val_psnr": None if kept["val"] is None else kept["val"]["psnr"],
            "val_psnr_rgb": None if kept["val"] is None else kept["val"]["psnr_rgb"],
            "val_space": score_space(cfg.task), "val_time": kept["val_time"], "best": kept["improved"],
        }
        self.history.append(record)
        if not partial:
            state["epoch"] += 1
            state["batch"] = 0
        state["elapsed"] += time.perf_counter() - ep_t0
        t_save = time.perf_counter()
        self.phase = "checkpoint"
        self.checkpoint()
        self.deadline.save_s = time.perf_counter() - t_save
        self.log.write("epoch", **record)
        self.progress.note(f"epoch {epoch + 1}/{cfg.epochs}: "
                           + ("" if record["train_loss"] is None else f"loss {record['train_loss']:.5f}")
                           + ("" if record["val_psnr"] is None else f", val PSNR {record['val_psnr']:.2f} dB")
                           + (" (best)" if kept["improved"] else "")
                           + (" [partial epoch]" if partial else ""))
        if state["step"] >= self.stop_at and state["epoch"] < cfg.epochs:
            self.status = "max-steps"
        if self._stop_signal() is not None and self.status == "finished":
            self.status = "stopped"
        return True

    def _out_of_time(self) -> bool:
        """The time budget says stop before the next step: on one rank, the ranks agree (any rank)."""
        late = self.deadline.out_of_time()
        if not self.ranks.active:
            return late
        # and the budget's fraction spent (the cosine-time learning rate), the same on every rank,
        # or the ranks' weights would drift apart
        frac = self.deadline.fraction()
        got = D.all_max(self.ranks, [float(late), -1.0 if frac is None else frac], self.dev, "the time-budget check")
        self.fraction = None if got[1] < 0 else got[1]
        return got[0] > 0

    def _stop_signal(self) -> int | None:
        """The signal (SIGINT / SIGTERM) to stop on: this process's, or with several ranks the one
        any rank received (all stop at the same step)."""
        if self.ranks.active:
            got = D.all_max(self.ranks, [float(self.stopper.signum or 0)], self.dev, "the stop check")[0]
            self.signum = int(got) or None
        else:
            self.signum = self.stopper.signum
        return self.signum

    def step(self, epoch: int, order, ep: _Window, win: _Window) -> None:
        """One optimizer step on the next batch of ``order`` (skipped if its loss or gradient is
        not finite; :data:`MAX_BAD_STEPS` such steps in a row stop the run)."""
        torch, cfg, state = self.torch, self.cfg, self.state
        b = state["batch"]
        t0 = time.perf_counter()
        self.phase = f"step {state['step'] + 1}"
        # cosine-time: with several ranks, the fraction of the budget they agreed on before the step
        lr = self.sched(state["step"], self.fraction if self.ranks.active else self.deadline.fraction())
        for g in self.opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
        n_all, weight = int(idx.shape[0]), 1.0
        if self.ranks.active:  # this rank's contiguous share of the global batch
            lo, hi = D.split(n_all, self.ranks.rank, self.ranks.world)
            # DDP averages the ranks' gradients: weight each rank's mean loss by its share, so that
            # the average is the gradient of the global batch's mean loss (as on one rank)
            weight = (hi - lo) * self.ranks.world / n_all
            idx = idx[lo:hi] if hi > lo else idx[:1]  # a rank without patches still joins (weight 0)
        gt = self.train_x[idx].float() / 255.0
        if cfg.color_jitter:  # exposure / colour-balance jitter, a pure function of (seed, step)
            from .augment import jitter

            gt = jitter(gt, cfg.color_jitter, (cfg.seed, 106, state["step"]))
        try:
            loss = self._forward_backward(gt, weight)
        except RuntimeError as exc:  # DDP's gradient all-reduce: a rank that died ends the job here
            if not self.ranks.active:
                raise
            raise GspError(f"rank {self.ranks.rank} of {self.ranks.world}: step {state['step'] + 1} failed "
                           f"({D.first_line(exc)}); if another rank stopped, see its log") from None
        lv = float(loss.detach())  # synchronises the device: timings below are real
        if self.ranks.active:  # the global batch's mean loss, the same on every rank
            lv = D.all_sum(self.ranks, [lv * (hi - lo)], self.dev, "the step's loss")[0] / n_all
        gnorm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                     cfg.grad_clip if cfg.grad_clip > 0 else math.inf))
        if math.isfinite(lv) and math.isfinite(gnorm):
            self.opt.step()
            self.bad_run = 0
        else:  # a diverging batch: skip its update (the weights stay finite), stop if it persists
            self._skip(epoch, lv, gnorm)
            lv = 0.0  # not counted in the running loss (below, weighted by 0 patches)
        dt = time.perf_counter() - t0
        self.deadline.step_took(dt)
        bs = n_all
        lw = bs if self.bad_run == 0 else 0  # weight of this step in the running losses
        state["batch"] += 1
        state["step"] += 1
        state["patches_seen"] += bs
        state["train_time"] += dt
        ep.add(lv, lw, dt, bs)
        win.add(lv, lw, dt, bs)
        self.progress.update(state["step"], epoch=epoch + 1, epochs=cfg.epochs, loss=ep.loss / max(ep.n, 1),
                             pps=state["patches_seen"] / max(state["train_time"], 1e-9))
        # every --log-every steps, and at least every LOG_INTERVAL_S (a short run still logs its steps)
        if (state["step"] % cfg.log_every == 0
                or time.monotonic() - self.last_step_log >= _heartbeat().LOG_INTERVAL_S):
            self.last_step_log = time.monotonic()
            self.log.write("step", epoch=epoch + 1, step=state["step"], loss=win.loss / win.n if win.n else None,
                           lr=lr, patches_per_s=win.p / max(win.t, 1e-9))
            win.reset()

    def _forward_backward(self, gt, weight: float = 1.0):
        """The loss of batch ``gt`` with the gradients in ``.grad``: from the CUDA graph when one was
        captured for this batch shape, else eagerly (the first full-size batch tries the capture)."""
        cfg = self.cfg
        if self.cuda_graph and not self.graph_tried and gt.shape[0] == cfg.batch_size and not cfg.raw_noise:
            from .graphed_step import capture_training_step

            self.graph_tried = True
            self.graphed, ginfo = capture_training_step(self.model, cfg.task, self.loss_fn, gt, network_input)
            self.log.write("cuda-graph", used=self.graphed is not None, **ginfo)
        if self.graphed is not None and tuple(gt.shape) == self.graphed.shape:
            return self.graphed(gt)  # overwrites every parameter's .grad
        if cfg.raw_noise:  # noisy pairs, a pure function of (seed, step)
            from ..physics.noise import draw_levels, noisy_mosaic
            from ..physics.tasks import observation

            noise = draw_levels(gt.shape[0], (cfg.seed, 107, self.state["step"]), top=cfg.raw_noise)
            y = noisy_mosaic(gt, noise, (cfg.seed, 108, self.state["step"]))
            out = self.net(*observation(cfg.task, y), noise=noise.to(gt.device))
        else:
            out = self.net(*network_input(cfg.task, gt))
        loss = self.loss_fn(out, gt)
        # after a capture the gradients are the graph's static tensors: zero them, keep them
        self.opt.zero_grad(set_to_none=self.graphed is None)
        (loss if weight == 1.0 else loss * weight).backward()
        return loss

    def _skip(self, epoch: int, lv: float, gnorm: float) -> None:
        state = self.state
        self.bad_run += 1
        state["skipped_steps"] = state.get("skipped_steps", 0) + 1
        self.log.write("skip", epoch=epoch + 1, step=state["step"], loss=lv, grad_norm=gnorm,
                       reason="non-finite loss or gradient; update skipped")
        if self.bad_run >= _package().MAX_BAD_STEPS:
            self.log.write("error", epoch=epoch, step=state["step"], reason="non-finite loss")
            raise GspError(f"the loss or its gradient was not finite {self.bad_run} steps in a row "
                           f"(last at step {state['step']}, epoch {epoch + 1}); lower --lr or set "
                           "--grad-clip and start again", self.run_dir)

    # ---- the end

    def _pps(self) -> float | None:
        return self.state["patches_seen"] / self.state["train_time"] if self.state["train_time"] else None

    def stopped(self) -> TrainResult:
        """Stopped by a signal: checkpoint, log, no export."""
        import signal

        state, best = self.state, self.best
        name = signal.Signals(self.signum).name if self.signum else self.stopper.name
        self.checkpoint()
        self.log.write("stop", reason=name, epoch=state["epoch"], batch=state["batch"],
                       step=state["step"], world_size=self.ranks.world)
        return TrainResult(self.run_dir, self.status, state["epoch"], state["step"], best["psnr"], best["epoch"],
                           self.last_psnr, self._pps(), None, name)

    def export(self) -> TrainResult:
        """Export the best weights with the full recipe (``model.pt``), write ``summary.json``."""
        torch, cfg, state, best, run_dir = self.torch, self.cfg, self.state, self.best, self.run_dir
        from .._version import __version__

        self.phase = "export"

        pps = self._pps()
        if not self.main:  # rank 0 writes model.pt and summary.json
            return TrainResult(run_dir, self.status, state["epoch"], state["step"], best["psnr"], best["epoch"],
                               self.last_psnr, pps, run_dir / "model.pt", None, {})
        best_ck = load_checkpoint(run_dir / "best.pt")
        export_model = build_network(without_init(cfg))
        export_model.load_state_dict(best_ck["model"])
        export_model.eval()
        meta = {
            "method": cfg.method, "task": cfg.task, "pattern": "RGGB" if is_mosaic(cfg.task) else None,
            "command": cfg.command(run_dir), "recipe": cfg.to_json(), "data": list(cfg.data),
            "patches": {k: v for k, v in self.sets.info.items() if k != "val_files"},
            "epochs_done": state["epoch"], "steps": state["step"], "status": self.status,
            "best_epoch": best["epoch"], "best_step": best["step"],
            "val_psnr": best["psnr"], "val_space": score_space(cfg.task), "init_val_psnr": self.init_val,
            "val_psnr_definition": "dataset-MSE PSNR on held-out training-photo patches (float, unclipped)",
            "patches_per_s": pps, "device": str(self.dev), "threads": torch.get_num_threads(),
            "train_time_s": state["train_time"], "params": sum(p.numel() for p in export_model.parameters()),
            "version": __version__, "torch": torch.__version__,
            "world_size": self.ranks.world, "world_sizes": self.world_sizes, "global_batch": cfg.batch_size,
        }
        model_path = export_weights(run_dir / "model.pt", export_model, meta)
        summary = {
            "status": self.status, "epochs_done": state["epoch"], "epochs": cfg.epochs, "steps": state["step"],
            "best_val_psnr": best["psnr"], "best_epoch": best["epoch"], "init_val_psnr": self.init_val,
            "best_is_init": bool(best.get("init")),
            "last_val_psnr": self.last_psnr, "time_budget_s": self.deadline.budget,
            "val_space": score_space(cfg.task),
            "patches_per_s": pps, "train_time_s": state["train_time"], "elapsed_s": state["elapsed"],
            "params": meta["params"], "device": str(self.dev), "model": str(model_path),
            "world_size": self.ranks.world, "world_sizes": self.world_sizes, "global_batch": cfg.batch_size,
        }
        dump_atomic(summary, run_dir / "summary.json")
        self.log.write("end", **summary)
        return TrainResult(run_dir, self.status, state["epoch"], state["step"], best["psnr"], best["epoch"],
                           summary["last_val_psnr"], pps, model_path, None, summary)
