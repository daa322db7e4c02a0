"""The prepared GPU job (issue #12): one command that fine-tunes all four shipped models on a lent
GPU inside one short window, and brings back everything needed to decide whether to ship them.

Run it through ``tools/device-train.sh`` (which sets the environment). Stages, each recorded in
``$OUT/summary.json`` as soon as it ends (so a killed job still reports what it did):

1. **sanity** - each shipped model's output on a small input, CUDA against the CPU (float32,
   TF32 off); a difference above ``SANITY_TOL`` is recorded and warned about (not fatal: each
   run's first validation on the GPU shows whether the shipped weights still score there).
1b. **inference** - issue #16's GPU target, within ``INFER_BUDGET_S``: the shipped uGTV
   demosaicker's PSNR on the pack's validation crops in fp32 and bf16, then MP/s through the tiled
   engine on a synthetic ``INFER_MP``-megapixel mosaic in fp32 (the fused Triton CG), bf16, and fp32
   without the Triton CG on a quarter of the size (the unfused PyTorch formulas, for the ratio).
2. **probe** - per model, peak GPU memory of a training step at a small batch, the batch that
   lets all models train side by side in ``MEM_FRACTION`` of the card, and patches/s at that batch,
   eagerly and with the forward + backward replayed from a CUDA graph
   (:mod:`gsprestore.graphed_step`, checked against the eager gradients); the faster is used.
3. **plan** - how many patch passes fit each model's share of the remaining time
   (``PARALLEL_SHARE``: the fraction of its solo speed a model keeps while the others run): the
   size of an epoch (validation after each); the runs' ``cosine-time`` learning rate anneals over
   the wall-clock budget, so a wrong guess costs validations, not a truncated schedule.
4. **train** - the four ``gsprestore train --init <shipped> --time-budget ...`` runs in parallel
   processes, each on the training pack (``PACK``), each validating its starting weights first.
   A run that overruns its budget by ``GRACE_S`` gets SIGTERM (all at once), then SIGKILL.
5. **collect** - each run's ``model.pt`` as ``$OUT/<method>_<task>.pt``, its validation PSNR
   beside the shipped weights' on the same patches, logs in ``$OUT/logs.tar.gz``.

Environment: ``OUT`` (required), ``DRY_RUN=1`` (CPU, tiny budgets: the CI test), ``PACK``
(default ``carry/pack``), ``BUDGET_S`` (whole job; 530 / 150 dry), ``MODELS`` (comma list of
``method_task``), ``RUNS`` (run folders; default a temporary folder), ``LR``, ``BATCH_MAX``,
``PATCH``, ``PARALLEL_SHARE``, ``SEED``. Files in ``$OUT``: at most 8 (the device tool's limit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

T0 = time.monotonic()
REPO = Path(__file__).resolve().parents[1]
DRY = os.environ.get("DRY_RUN", "0") not in ("", "0")
OUT = Path(os.environ["OUT"]).resolve()
PACK = Path(os.environ.get("PACK", REPO / "carry" / "pack")).resolve()
BUDGET_S = float(os.environ.get("BUDGET_S", 150 if DRY else 530))
MODELS = [m for m in os.environ.get("MODELS", "ugtv_demosaic,uglr_demosaic,ugtv_upscale2x,uglr_upscale2x").split(",") if m]
RUNS = Path(os.environ.get("RUNS") or tempfile.mkdtemp(prefix="gsp-runs-"))
LR = float(os.environ.get("LR", 4e-4))
BATCH_MAX = int(os.environ.get("BATCH_MAX", 1 if DRY else 64))
PROBE_BATCH = 1 if DRY else 8
PATCH = int(os.environ.get("PATCH", 16 if DRY else 64))
WARMUP_STEPS, TIMED_STEPS = (1, 1) if DRY else (2, 4)
VAL_PATCHES = int(os.environ.get("VAL_PATCHES", 8 if DRY else 512))
PATCHES_MAX = 64 if DRY else 16000
PARALLEL_SHARE = float(os.environ.get("PARALLEL_SHARE", 0.3))
MEM_FRACTION = 0.7
SEED = int(os.environ.get("SEED", 2))
USE_GRAPHS = os.environ.get("CUDA_GRAPHS", "1") not in ("", "0")
SANITY_TOL = 2e-3
INFER_MP = float(os.environ.get("INFER_MP", 0.02 if DRY else 24.0))
INFER_BUDGET_S = float(os.environ.get("INFER_BUDGET_S", 60 if DRY else 80))
GRACE_S = 25.0
#: Seconds a training process needs before its first step (imports, CUDA, patch cutting, the
#: starting weights' validation) and the job needs after the runs (collect, archive).
STARTUP_S, TAIL_S = (25.0, 15.0) if DRY else (45.0, 20.0)
#: The least time a training process is given (a dry run on a loaded CPU may have spent the rest).
MIN_TRAIN_S = 45.0 if DRY else 60.0

summary: dict = {"format": "gsprestore-device-train/1", "dry_run": DRY, "budget_s": BUDGET_S, "models": MODELS,
                 "pack": str(PACK), "stages": {}}


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def save_summary() -> None:
    summary["elapsed_s"] = round(time.monotonic() - T0, 1)
    tmp = OUT / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    tmp.replace(OUT / "summary.json")


def split_name(name: str) -> tuple[str, str]:
    method, _, task = name.partition("_")
    return method, task


def shipped(name: str):
    """The shipped model (CPU, eval) and its weight file."""
    from gsprestore.weights import load_model

    model = load_model(*split_name(name))
    return model, Path(model.weights_file)


def model_opts(model) -> dict:
    cfg = dict(model.config)
    cfg.pop("prior", None)
    cfg.pop("task", None)
    return cfg


def stage_sanity(dev) -> None:
    """CUDA output == CPU output of each shipped model on a small input (dry run: CPU twice)."""
    import torch

    from gsprestore.training import observe

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    results = {}
    g = torch.Generator().manual_seed(0)
    gt = torch.rand(2, 3, PATCH, PATCH, generator=g)
    for name in MODELS:
        model, _ = shipped(name)
        _, task = split_name(name)
        with torch.no_grad():
            ref = model(*observe(task, gt))
            other = model.to(dev)(*[t.to(dev) for t in observe(task, gt)]).cpu()
        diff = float((ref - other).abs().max())
        results[name] = {"max_abs_diff": diff, "device": str(dev), "ok": diff <= SANITY_TOL}
        log(f"sanity {name}: max |cpu - {dev}| = {diff:.2e}")
    summary["stages"]["sanity"] = results
    torch.backends.cudnn.allow_tf32 = True
    if not all(r["ok"] for r in results.values()):
        # recorded, not fatal: the GPU window is short, and each run's first validation (on the GPU)
        # shows whether the shipped weights still score there
        log(f"WARNING: sanity check above tolerance {SANITY_TOL}: {results}")


def stage_inference(dev) -> None:
    """Issue #16's GPU target (>= 10 MP/s for uGTV demosaicking of 24-MP images, fp32 and bf16 with
    the PSNR change); each measurement is skipped once ``INFER_BUDGET_S`` is spent."""
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_engine import synthetic_mosaic
    from precision_psnr import load_images, score

    from gsprestore.backend import configure
    from gsprestore.engine import restore
    from gsprestore.restorers import get_restorer

    t_start = time.monotonic()
    out: dict = {"method": "ugtv", "task": "demosaic", "budget_s": INFER_BUDGET_S}
    summary["stages"]["inference"] = out
    precisions = ["fp32", "bf16"] if dev.type == "cuda" else ["fp32"]
    # PSNR on the validation crops, fp32 against bf16
    model, _ = shipped("ugtv_demosaic")
    model = model.to(dev).eval()
    crops = load_images(PACK / "val", 4 if DRY else 64)
    for prec in precisions:
        out[f"val_psnr_{prec}"] = round(score(model, "demosaic", crops, dev, prec)[0], 3)
    if "val_psnr_bf16" in out:
        out["bf16_psnr_change_db"] = round(out["val_psnr_bf16"] - out["val_psnr_fp32"], 3)
    out["val_crops"] = len(crops)
    scores = ", ".join(f"{p} {out['val_psnr_' + p]}" for p in precisions)
    log(f"inference: val PSNR {scores} on {len(crops)} crops")
    restorer = get_restorer("ugtv", "demosaic")
    runs = [("fp32", 1, INFER_MP), ("bf16", 1, INFER_MP), ("fp32", 0, INFER_MP / 4)]
    for prec, fused, mp in runs:
        key = f"{prec}_{'fused' if fused else 'unfused'}"
        if prec not in precisions:
            out[key] = "skipped: not on CUDA"
            continue
        if time.monotonic() - t_start > INFER_BUDGET_S:
            out[key] = "skipped: inference budget spent"
            continue
        y = synthetic_mosaic(mp)
        with configure(gpu_fused=fused):
            restore(restorer, y[:, :512, :512], "RGGB", device=dev, precision=prec)  # warm-up (compile)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            t0 = time.perf_counter()
            restore(restorer, y, "RGGB", device=dev, precision=prec)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            secs = time.perf_counter() - t0
        megapixels = y.shape[-2] * y.shape[-1] / 1e6
        out[key] = {"megapixels": round(megapixels, 2), "seconds": round(secs, 2),
                    "megapixels_per_s": round(megapixels / secs, 3),
                    "cuda_peak_mb": round(torch.cuda.max_memory_allocated(dev) / 2**20) if dev.type == "cuda" else None}
        log(f"inference {key}: {megapixels:.1f} MP in {secs:.1f} s = {megapixels / secs:.2f} MP/s")
        save_summary()
    out["seconds"] = round(time.monotonic() - t_start, 1)


def _probe_steps(name: str, dev, batch: int, steps: int, graph: bool = False) -> dict:
    """Time ``steps`` training steps (forward, backward, clipping, Adam) at ``batch`` after the
    warm-ups; ``graph``: forward + backward replayed from a checked CUDA graph (None if refused)."""
    import torch

    from gsprestore.graphed_step import capture_training_step
    from gsprestore.training import make_loss, observe

    model, _ = shipped(name)
    _, task = split_name(name)
    model = model.to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    loss_fn = make_loss("l1")
    gt = torch.rand(batch, 3, PATCH, PATCH, device=dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    graphed = None
    if graph:
        graphed, info = capture_training_step(model, task, loss_fn, gt, observe)
        if graphed is None:
            log(f"probe {name}: no CUDA graph ({info['reason']})")
            return {"batch": batch, "graph": info}
    times = []
    for i in range(steps + WARMUP_STEPS):
        t0 = time.perf_counter()
        if graphed is not None:
            loss = graphed(gt)
        else:
            loss = loss_fn(model(*observe(task, gt)), gt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    del model, opt, gt, graphed
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    step_s = sorted(times)[len(times) // 2]
    out = {"batch": batch, "step_s": step_s, "patches_per_s": batch / step_s, "peak_bytes": peak}
    if graph:
        out["graph"] = info
    return out


def stage_probe(dev) -> dict:
    """Memory at a small batch -> the batch each model gets -> its patches/s at that batch."""
    import torch

    out = {}
    total = torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else None
    for name in MODELS:
        small = _probe_steps(name, dev, PROBE_BATCH, 1) if total is not None else None
        batch = BATCH_MAX
        if small is not None and small["peak_bytes"]:
            per_patch = small["peak_bytes"] / PROBE_BATCH
            fit = int(MEM_FRACTION * total / len(MODELS) / per_patch)
            batch = max(PROBE_BATCH, min(BATCH_MAX, fit // 8 * 8 or PROBE_BATCH))
        speed = _probe_steps(name, dev, batch, TIMED_STEPS)
        log(f"probe {name}: batch {batch}, {speed['patches_per_s']:.1f} patches/s alone (eager)"
            + (f", peak {speed['peak_bytes'] / 2**30:.1f} GiB" if speed["peak_bytes"] else ""))
        graphed = _probe_steps(name, dev, batch, TIMED_STEPS, graph=True) if dev.type == "cuda" and USE_GRAPHS \
            else None
        use_graph = bool(graphed and graphed.get("patches_per_s", 0) > speed["patches_per_s"])
        if graphed and "patches_per_s" in graphed:
            log(f"probe {name}: {graphed['patches_per_s']:.1f} patches/s alone (CUDA graph, grads within "
                f"{graphed['graph']['max_rel_grad_diff']:.1e} of eager)")
        best = graphed if use_graph else speed
        out[name] = {"probe_small": small, "eager": speed, "cuda_graph": graphed, "use_cuda_graph": use_graph,
                     "batch": batch, "patches_per_s": best["patches_per_s"], "peak_bytes": best["peak_bytes"]}
    summary["stages"]["probe"] = out
    return out


def stage_plan(probe: dict) -> dict:
    """Patches per model from its predicted share of the time (at most ``PATCHES_MAX``: one epoch
    between validations); epochs are open-ended, the ``cosine-time`` schedule anneals by the
    deadline whatever the speed turns out to be."""
    train_s = max(MIN_TRAIN_S, BUDGET_S - (time.monotonic() - T0) - TAIL_S)
    plans = {}
    for name in MODELS:
        pps = probe[name]["patches_per_s"] * PARALLEL_SHARE
        passes = max(probe[name]["batch"], int(pps * max(train_s - STARTUP_S, 1.0)))
        patches = max(probe[name]["batch"], min(PATCHES_MAX, passes))
        epochs = 1000  # the time budget ends the run
        patches = max(probe[name]["batch"], patches // probe[name]["batch"] * probe[name]["batch"])  # whole batches
        plans[name] = {"time_budget_s": round(train_s, 1), "predicted_patch_passes": passes, "patches": patches,
                       "epochs": epochs, "batch": probe[name]["batch"], "lr": LR,
                       "cuda_graph": probe[name]["use_cuda_graph"]}
        log(f"plan {name}: {passes} patch passes predicted -> epochs of {patches} patches, "
            f"budget {train_s:.0f} s")
    summary["stages"]["plan"] = plans
    return plans


def train_command(name: str, plan: dict, init: Path, opts: dict, dev) -> list[str]:
    method, task = split_name(name)
    cmd = [sys.executable, "-m", "gsprestore", "train", "--task", task, "--prior", method[1:],
           "--data", str(PACK), "--out", str(RUNS / name), "--patch-size", str(PATCH),
           "--patches", str(plan["patches"]), "--val-patches", str(VAL_PATCHES), "--epochs", str(plan["epochs"]),
           "--batch-size", str(plan["batch"]), "--lr", repr(plan["lr"]), "--schedule", "cosine-time",
           "--warmup-steps", "2" if DRY else "20", "--grad-clip", "1.0", "--loss", "l1", "--seed", str(SEED),
           "--init", str(init), "--device", str(dev), "--time-budget", str(plan["time_budget_s"]),
           "--no-progress", "--log-every", "1" if DRY else "20",
           "--threads", str(max(1, (os.cpu_count() or 4) // len(MODELS))), "--workers", "2" if DRY else "4"]
    for key, value in sorted(opts.items()):
        cmd += ["--model-opt", f"{key}={json.dumps(value)}"]
    if plan["cuda_graph"]:
        cmd.append("--cuda-graph")
    return cmd


def stage_train(plans: dict, dev) -> dict:
    procs = {}
    for name in MODELS:
        model, init = shipped(name)
        cmd = train_command(name, plans[name], init, model_opts(model), dev)
        logf = open(RUNS / f"{name}.log", "w")
        logf.write(" ".join(cmd) + "\n")
        logf.flush()
        procs[name] = (subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO), logf)
        log(f"started {name} (pid {procs[name][0].pid})")
    hard = time.monotonic() + max(p["time_budget_s"] for p in plans.values()) + GRACE_S
    while any(p.poll() is None for p, _ in procs.values()) and time.monotonic() < hard:
        time.sleep(1.0)
    running = [p for p, _ in procs.values() if p.poll() is None]
    if running:  # all at once, so each gets the same grace to write its checkpoint
        log(f"deadline: SIGTERM to {len(running)} run(s)")
        for p in running:
            p.send_signal(signal.SIGTERM)
        t_kill = time.monotonic() + 10.0
        while any(p.poll() is None for p in running) and time.monotonic() < t_kill:
            time.sleep(0.5)
        for p in running:
            if p.poll() is None:
                p.kill()
    codes = {}
    for name, (p, logf) in procs.items():
        codes[name] = p.wait()
        logf.close()
        log(f"{name} exited {codes[name]}")
    return codes


def stage_collect(codes: dict) -> None:
    import shutil

    results = {}
    for name in MODELS:
        run = RUNS / name
        rec: dict = {"exit_code": codes.get(name)}
        if (run / "summary.json").is_file():
            s = json.loads((run / "summary.json").read_text())
            rec.update({k: s.get(k) for k in ("status", "steps", "epochs_done", "patches_per_s", "train_time_s",
                                              "init_val_psnr", "best_val_psnr", "best_epoch", "best_is_init",
                                              "val_space", "device")})
            if rec["steps"] is not None and rec["patches_per_s"]:
                rec["patch_passes"] = int(round(rec["patches_per_s"] * (rec["train_time_s"] or 0.0)))
            rec["gain_db"] = (None if rec["init_val_psnr"] is None or rec["best_val_psnr"] is None
                              else rec["best_val_psnr"] - rec["init_val_psnr"])
            rec["improved"] = bool(rec["gain_db"] and rec["gain_db"] > 0 and not rec["best_is_init"])
        if (run / "model.pt").is_file():
            shutil.copyfile(run / "model.pt", OUT / f"{name}.pt")
            rec["model_file"] = f"{name}.pt"
        results[name] = rec
        log(f"{name}: {rec.get('status')}, {rec.get('steps')} steps, val {rec.get('init_val_psnr')} -> "
            f"{rec.get('best_val_psnr')} ({'improved' if rec.get('improved') else 'not improved'})")
    summary["stages"]["train"] = results
    total_pps = sum((r.get("patches_per_s") or 0.0) for r in results.values())
    summary["aggregate_patches_per_s"] = total_pps


def archive_logs() -> None:
    with tarfile.open(OUT / "logs.tar.gz", "w:gz") as tar:
        for path in sorted(RUNS.rglob("*")):
            if path.is_file() and path.suffix in (".json", ".jsonl", ".log"):
                tar.add(path, arcname=str(path.relative_to(RUNS)))


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("GSPRESTORE_NATIVE", "0")
    import torch

    from gsprestore.trainpack import read_pack

    dev = torch.device("cuda" if torch.cuda.is_available() and not DRY else "cpu")
    summary.update({"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                    "torch": torch.__version__, "python": sys.version.split()[0], "cpu_count": os.cpu_count()})
    if dev.type != "cuda" and not DRY:
        summary["error"] = "no CUDA device (set DRY_RUN=1 for the CPU rehearsal)"
        save_summary()
        return 3
    pack = read_pack(PACK)
    summary["pack_totals"] = pack["totals"]
    status = 0
    try:
        stage_sanity(dev)
        save_summary()
        try:
            stage_inference(dev)
        except Exception as exc:  # noqa: BLE001 - a measurement, not the job: record and go on to training
            summary["stages"].setdefault("inference", {})["error"] = f"{type(exc).__name__}: {exc}"
            log(f"inference stage failed: {type(exc).__name__}: {exc}")
        save_summary()
        probe = stage_probe(dev)
        save_summary()
        plans = stage_plan(probe)
        save_summary()
        codes = stage_train(plans, dev)
        stage_collect(codes)
        status = 0 if all(c == 0 for c in codes.values()) else 1
    except SystemExit as exc:
        summary["error"] = str(exc)
        status = 2
    except Exception as exc:  # noqa: BLE001 - report whatever broke, then still archive
        summary["error"] = f"{type(exc).__name__}: {exc}"
        status = 2
        raise
    finally:
        summary["exit_code"] = status
        save_summary()
        archive_logs()
        log(f"done: exit {status}, files in {OUT}: {sorted(p.name for p in OUT.iterdir())}")
    return status


if __name__ == "__main__":
    sys.exit(main())
