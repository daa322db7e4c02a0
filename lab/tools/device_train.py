"""The prepared GPU job (issues #12, #20): one command that fine-tunes all four shipped models on a
lent GPU inside one short window, and brings back everything needed to decide whether to ship them.

Run it through ``lab/tools/device-train.sh`` (which sets the environment). This process, the
*driver*, never touches the GPU: it starts, watches and stops child processes, each with a hard
deadline, and copies their results to ``$OUT`` as they arrive, so no stage can hold it past the
job's end and a job stopped at any point still returns what was done. ``$OUT/summary.json`` is
rewritten after every event.

1. **pre** (a child, at most ``PRE_S``): *probe*, each model's peak GPU memory in one eager
   training step at batch ``PROBE_BATCH``, which sets its batch (a model whose probe failed
   trains at ``DEFAULT_BATCH``); *sanity*, each shipped model's output on a small input, CUDA
   against the CPU (float32, TF32 off; a difference above ``SANITY_TOL`` is recorded, not fatal;
   this forward also compiles the fused Triton kernels into the shared ``TRITON_CACHE_DIR`` that
   the training runs then read). The child's exit frees all its GPU memory.
2. **plan**: per model the batch that lets all of them train side by side in ``MEM_FRACTION`` of
   the card (twice the eager peak per patch with CUDA graphs: the graph keeps its own pool), at
   most ``BATCH_MAX``; epochs of ``EPOCH_PATCHES`` patches (validation after each).
3. **train**: the ``gsprestore train --init <shipped> --time-budget ... --schedule cosine-time``
   runs, ``STAGGER_S`` apart, the largest share first. uGTV demosaic (the default candidate) trains
   until the end of the training window; each other model for ``SHARES`` of it, so uGTV demosaic
   has the GPU to itself at the end. Each run validates its starting weights first (the floor of
   what it exports). A run still alive ``GRACE_S`` after its window gets SIGTERM (it checkpoints),
   then SIGKILL; as each run ends its ``model.pt`` (exported by the run, or by this driver from
   ``best.pt`` when the run was stopped) is copied to ``$OUT/<method>_<task>.pt``.
4. **infer** (a child, the ``INFER_S`` after training): issue #16's GPU target: the shipped uGTV
   demosaicker's PSNR on the pack's validation crops in fp32 and bf16, then MP/s through the tiled
   engine on a synthetic ``INFER_MP``-megapixel mosaic in fixed ``INFER_TILE`` tiles (extents
   multiples of 16, the same tiles run once untimed first) in fp32 with the fused Triton kernels,
   bf16, and fp32 without them on a quarter of the size; each records whether the fused kernels
   really ran (calls counted; a fallback to the PyTorch path is not "fused"); the 2x networks'
   MP/s (of output) the same way, fp32 with the fused kernels; then, in the time left,
   ``profile_steps``: one eager training step of each demosaicker under torch.profiler (the
   kernels that take the step's device time).
5. **collect**: every run's record in ``summary.json``, logs in ``$OUT/logs.tar.gz``.

Time arithmetic, all from the job's start ``T0`` (``END = T0 + BUDGET_S``): the children are all
gone by ``CLOSE = END - TAIL_S`` (exports, summary and the log archive take the tail); inference
runs until ``CLOSE - KILL_WAIT_S`` and starts no later than ``INFER_S`` before it; training ends
when inference starts (``TRAIN_END``), and is skipped when less than ``MIN_TRAIN_S`` is left for
it. A run's ``--time-budget`` counts from its own start (``IMPORT_S`` after the spawn), so it is
its window less the time already gone.

Environment: ``OUT`` (required), ``DRY_RUN=1`` (CPU, tiny budgets: the CI test), ``PACK`` (default
``carry/pack``), ``INIT`` (a folder of ``<method>_<task>.pt`` files to start from instead of the
shipped weights, each model whose file it holds: a previous job's ``$OUT``; the shipped files are
checked against the manifest's SHA-256, so copying a result over them fails the sanity and
inference stages), ``BUDGET_S`` (whole job; 530 / 420 dry), ``MODELS`` (comma list of
``method_task``), ``RUNS`` (run folders; default a temporary folder), ``LR``, ``BATCH_MAX``,
``DEFAULT_BATCH``, ``PATCH``, ``EPOCH_PATCHES``, ``MAX_STEPS`` (a dry run: 3), ``SHARES``
(``model=fraction,...``),
``INFER_S`` (0: no inference), ``PROFILE=0`` (no profile), ``MODEL_OPTS`` (a recipe trial:
``model:key=value,...;model:...``, e.g. ``ugtv_demosaic:admm_iters=5,cg_iters=10``),
``STEP_SIZE_LR_SCALE`` (the trial models' ``--step-size-lr-scale``, default 1), ``SEED``,
``CUDA_GRAPHS=0``, ``TRITON_CACHE_DIR``. For the
rehearsal, ``FAULTS`` (comma list) injects failures: ``grad`` (the sanity stage's gradient check
fails: training falls back to plain autograd through CG), ``sanity``, ``probe`` or ``infer`` (that stage
raises), ``pre-hang`` (the pre child hangs until killed), ``compile`` (every Triton kernel launch
fails, as a kernel that cannot compile; a dry run then runs the fused path under
``TRITON_INTERPRET=1``), ``overrun:<model>`` (that run gets ten times its budget, and its window
ends 3 s after its first validation: the driver stops it). Files in ``$OUT``: at most 8 (the device tool's limit).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

T0 = time.monotonic()
REPO = Path(__file__).resolve().parents[2]
DRY = os.environ.get("DRY_RUN", "0") not in ("", "0")


def _num(name: str, gpu: float, dry: float) -> float:
    return float(os.environ.get(name, dry if DRY else gpu))


OUT = Path(os.environ["OUT"]).resolve()
PACK = Path(os.environ.get("PACK", REPO / "carry" / "pack")).resolve()
INIT = Path(os.environ["INIT"]).resolve() if os.environ.get("INIT") else None
BUDGET_S = _num("BUDGET_S", 530, 420)  # a dry run ends early (MAX_STEPS); the rest absorbs a loaded CPU
END = T0 + BUDGET_S
MODELS = [m for m in os.environ.get("MODELS", "ugtv_demosaic,uglr_demosaic,ugtv_upscale2x,uglr_upscale2x").split(",") if m]
#: fraction of the training window each model trains for (the rest: 0.7)
SHARES = {m: 0.7 for m in MODELS} | {"ugtv_demosaic": 1.0} | {
    k: float(v) for k, _, v in (s.partition("=") for s in os.environ.get("SHARES", "").split(",") if s)}


def parse_model_opts(text: str) -> dict[str, dict]:
    """``"ugtv_demosaic:admm_iters=5,cg_iters=10;uglr_demosaic:cg_iters=25"`` -> ``{model: {key:
    value}}``, each value read as JSON where it parses (numbers, booleans, quoted strings)."""
    out: dict[str, dict] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, opts = part.partition(":")
        opts_of = out.setdefault(name.strip(), {})
        for item in filter(None, (i.strip() for i in opts.split(","))):
            key, _, value = item.partition("=")
            try:
                opts_of[key.strip()] = json.loads(value)
            except ValueError:
                opts_of[key.strip()] = value
    return out


#: a recipe trial (issue 3/6: e.g. the paper's 5 ADMM x 10 CG): these models train a network whose
#: configuration differs in these keys, from the same starting weights (``--init`` copies the
#: tensors that fit, and the CG step sizes step by step, the added steps as no-ops: the deeper
#: network starts as the weights' own); the probe measures the changed network's memory
MODEL_OPTS = parse_model_opts(os.environ.get("MODEL_OPTS", ""))
#: the trial models' ``--step-size-lr-scale`` (the CG step sizes' learning-rate multiplier: the
#: steps a deeper unrolling adds start at 0 and at the CNN's rate barely move in one job)
STEP_SIZE_LR_SCALE = _num("STEP_SIZE_LR_SCALE", 1.0, 1.0)
LR = float(os.environ.get("LR", 4e-4))
BATCH_MAX = int(_num("BATCH_MAX", 64, 1))
DEFAULT_BATCH = int(_num("DEFAULT_BATCH", 32, 1))
PROBE_BATCH = 1 if DRY else 8
PATCH = int(_num("PATCH", 64, 16))
EPOCH_PATCHES = int(_num("EPOCH_PATCHES", 8192, 64))
MAX_STEPS = int(_num("MAX_STEPS", 0, 3))  # 0: none (a dry run stops early, unless the window ends first)
VAL_PATCHES = int(_num("VAL_PATCHES", 512, 8))
MEM_FRACTION = 0.7
SEED = int(os.environ.get("SEED", 2))
USE_GRAPHS = os.environ.get("CUDA_GRAPHS", "1") not in ("", "0")
SANITY_TOL = 2e-3
#: the check of the CUDA training gradients against the CPU's (relative, all parameters): a model
#: passes at most GRAD_TOL off, or within GRAD_NOISE_FACTOR x the most its CPU gradients move under
#: GRAD_JITTER_DRAWS input jitters of GRAD_JITTER, but never beyond GRAD_TOL_MAX. The L1 loss and the
#: ADMM projections are not smooth, so the gradients of trained weights are noisy and heavy-tailed:
#: in the third window (64 x 64 patches, on the CPU, against float32 at the unjittered input) four
#: draws moved them 0.02-4.6 %, the CUDA gradients differed 0.01-1.6 %, and the old fixed 1e-3 sent
#: both jobs to the slow path (lab/research/grad_noise.py measures the moves). A model beyond the
#: tolerance makes training fall back from the adjoint CG backward to plain autograd
#: (GSPRESTORE_CG_ADJOINT=0) and from the fused training ops of the ADMM edge terms and graphs to
#: PyTorch (GSPRESTORE_GPU_TRAINING=0); a broken kernel's error is O(1).
GRAD_TOL, GRAD_TOL_MAX = 1e-3, 0.1
GRAD_JITTER, GRAD_JITTER_DRAWS, GRAD_NOISE_FACTOR = 1e-6, 4, 4.0
INFER_MP = _num("INFER_MP", 24.0, 0.0025)  # a dry run: 40 x 60 pixels on the PyTorch path
#: the inference tiles: 4000 x 6000 in 2000-pixel cores with 32 pixels of context gives windows of
#: 2032 and 2064 pixels a side, multiples of 16 (a dry run: one tile)
INFER_TILE, INFER_OVERLAP = int(_num("INFER_TILE", 2000, 256)), 32
#: the training step profiled after the inference measurements (``PROFILE=0``: none): these models,
#: at this batch (the trained one), one eager step each under torch.profiler (a dry run: the first
#: only, cut to one block: see :func:`_profile_one`)
PROFILE_MODELS = [m for m in ("ugtv_demosaic", "uglr_demosaic") if m in MODELS][:1 if DRY else 2] if os.environ.get(
    "PROFILE", "1") not in ("", "0") else []
PROFILE_BATCH = int(_num("PROFILE_BATCH", 64, 1))
PROFILE_TOP = 25
# seconds (GPU / dry run)
INFER_S = _num("INFER_S", 85, 30)  # inference (and the profile) after training
PRE_S = _num("PRE_S", 75, 180)  # the pre child's hard limit (a dry run: room for a loaded CI machine)
TAIL_S = _num("TAIL_S", 15, 15)  # after every child is gone: exports, summary, archive
KILL_WAIT_S = _num("KILL_WAIT_S", 10, 5)  # SIGTERM -> SIGKILL
MIN_TRAIN_S = _num("MIN_TRAIN_S", 90, 30)  # less left: no training
MIN_RUN_S = _num("MIN_RUN_S", 45, 10)  # a run's budget below this: not started
IMPORT_S = _num("IMPORT_S", 8, 5)  # a training process's start before its budget counts
GRACE_S = _num("GRACE_S", 5, 10)  # a run's overrun of its window before SIGTERM
STAGGER_S = _num("STAGGER_S", 4, 0.5)
PROGRESS_S = _num("PROGRESS_S", 20, 5)  # summary.json's training progress
CLOSE = END - TAIL_S
INFER_END = CLOSE - KILL_WAIT_S
TRAIN_END = INFER_END - max(INFER_S, 0.0)
FAULTS = [f for f in os.environ.get("FAULTS", "").split(",") if f]

summary: dict = {"format": "gsprestore-device-train/2", "dry_run": DRY, "budget_s": BUDGET_S, "models": MODELS,
                 "pack": str(PACK), "faults": FAULTS, "stages": {}}
CHILDREN: list[subprocess.Popen] = []  # live child processes (stopped at the end, whatever happens)
_log_file = None


class Terminated(BaseException):
    """SIGTERM / SIGINT reached the driver (the device tool's limit, or a user); not an
    ``Exception``, so that no stage's guard swallows it."""


def log(msg: str) -> None:
    line = f"[{time.monotonic() - T0:6.1f}s] {msg}"
    with contextlib.suppress(OSError, ValueError):  # a closed pipe must not end the job
        print(line, flush=True)
    if _log_file is not None:
        _log_file.write(line + "\n")
        _log_file.flush()


def left(at: float) -> float:
    return at - time.monotonic()


def write_json(obj, path: Path) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def save_summary() -> None:
    summary["elapsed_s"] = round(time.monotonic() - T0, 1)
    write_json(summary, OUT / "summary.json")


def fault(name: str) -> None:
    if name in FAULTS:
        raise RuntimeError(f"injected fault: {name}")


def split_name(name: str) -> tuple[str, str]:
    method, _, task = name.partition("_")
    return method, task


def init_file(name: str) -> Path | None:
    """The weights file model ``name`` starts from when ``INIT`` names a folder holding
    ``<name>.pt`` (a previous job's ``$OUT``, carried as e.g. ``carry/init``: a second job in the
    same window goes on from the first); None: the shipped weights."""
    path = INIT / f"{name}.pt" if INIT else None
    return path if path and path.is_file() else None


def changed(model, name: str, **changes):
    """A fresh network of ``model``'s configuration with ``changes`` (a recipe trial's, or the dry
    run's smaller one): for its memory and speed, its values untrained."""
    from gsprestore.models import build_model
    from gsprestore.training.build import IDENTITY_KEYS

    cfg = {k: v for k, v in model.config.items() if k not in IDENTITY_KEYS}
    return build_model(*split_name(name), **{**cfg, **changes})


def shipped(name: str):
    """The model this job starts from (CPU, eval; the shipped weights, or ``INIT``'s file) and its
    weight file."""
    from gsprestore.methods.weights import load_model

    model = load_model(*split_name(name), init_file(name))
    return model, Path(model.weights_file)


# ------------------------------------------------------------------------------------------------
# child processes: the stages that use the GPU
# ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def fused_calls():
    """Counts the fused Triton kernels' completed calls by name while active (a fallback to the
    PyTorch path counts nothing)."""
    from gsprestore.graph import triton_kernels as graph_triton
    from gsprestore.solvers.cg import triton_kernels as cg_triton
    from gsprestore.solvers.gtv import triton_kernels as admm_triton

    calls: dict[str, int] = {}
    saved = []
    for mod, name in ((graph_triton, "random_walk_weights_from_projected"), (graph_triton, "edge_weights_from_projected"),
                      (cg_triton, "cg_unrolled_triton"), (admm_triton, "edge_term_replayed_triton")):
        real = getattr(mod, name)

        def counted(*a, _real=real, _name=name, **k):
            out = _real(*a, **k)
            calls[_name] = calls.get(_name, 0) + 1
            return out

        saved.append((mod, name, real))
        setattr(mod, name, counted)
    try:
        yield calls
    finally:
        for mod, name, real in saved:
            setattr(mod, name, real)


def _free(dev) -> None:
    import gc

    import torch

    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def recorded(res: dict, key: str, measure, dev, save) -> float:
    """``res[key] = measure()``, or ``{"error": ...}`` if it raised (the next measurement goes
    on); then the device's memory freed and the results saved. Returns the seconds it took."""
    t0 = time.perf_counter()
    try:
        res[key] = measure()
    except Exception as exc:  # noqa: BLE001 - recorded
        res[key] = {"error": f"{type(exc).__name__}: {exc}"}
    _free(dev)
    save()
    return time.perf_counter() - t0


def sanity(dev, out: dict, save) -> None:
    """CUDA output == CPU output of each shipped model on a small input (dry run: CPU twice)."""
    import torch

    from gsprestore.physics.tasks import network_input

    res = out["sanity"] = {}
    fault("sanity")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    gt = torch.rand(2, 3, PATCH, PATCH, generator=torch.Generator().manual_seed(0))

    def check(name: str) -> dict:
        t0 = time.perf_counter()
        model, _ = shipped(name)
        _, task = split_name(name)
        with torch.no_grad():
            ref = model(*network_input(task, gt))
            with fused_calls() as calls:
                other = model.to(dev)(*[t.to(dev) for t in network_input(task, gt)]).cpu()
        diff = float((ref - other).abs().max())
        rec = {"max_abs_diff": diff, "device": str(dev), "ok": diff <= SANITY_TOL, "fused_calls": calls,
               **grad_check(model, task, gt, dev), "seconds": round(time.perf_counter() - t0, 1)}
        print(f"sanity {name}: max |cpu - {dev}| = {diff:.2e}, fused calls {calls}, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        return rec

    for name in MODELS:  # a model that fails is recorded; the other models go on
        recorded(res, name, lambda name=name: check(name), dev, save)


def grad_check(model, task: str, gt, dev) -> dict:
    """The training gradients on ``dev`` (the adjoint unrolled CG of issue 2/6, the path training
    takes) against the CPU's, all parameters together: ``grad_rel_diff`` = |g_dev - g_cpu| / |g_cpu|;
    ``grad_jitter_rel_diff``: the most the CPU's own gradients move when the input moves by
    ``GRAD_JITTER`` (``GRAD_JITTER_DRAWS`` draws), the noise floor of a non-smooth loss; ``grad_ok``
    when ``grad_rel_diff`` is at most ``grad_tol`` = min(GRAD_TOL_MAX, max(GRAD_TOL,
    GRAD_NOISE_FACTOR x that floor)) (``FAULTS=grad`` makes it fail: the rehearsal of the fallback
    to plain autograd)."""
    import torch

    from gsprestore.physics.tasks import network_input
    from gsprestore.training import make_loss

    loss_fn = make_loss("l1")  # the training loss

    def grads(d, x):
        m = model.to(d)
        m.zero_grad(set_to_none=True)
        known, mask = (t.to(d) for t in network_input(task, x))
        loss_fn(m(known, mask), x.to(d)).backward()
        g = torch.cat([p.grad.detach().flatten().cpu() for p in m.parameters() if p.grad is not None])
        m.zero_grad(set_to_none=True)
        return g

    def rel(a, b) -> float:
        return float((a - b).norm() / b.norm().clamp_min(1e-30))

    def jittered(k: int):
        return (gt + GRAD_JITTER * torch.randn(gt.shape, generator=torch.Generator().manual_seed(k))).clamp(0, 1)

    cpu = torch.device("cpu")
    ref = grads(cpu, gt)
    floor = max(rel(grads(cpu, jittered(k)), ref) for k in range(1, GRAD_JITTER_DRAWS + 1))
    diff = rel(grads(dev, gt), ref)
    if "grad" in FAULTS:
        diff = float("inf")
    tol = min(GRAD_TOL_MAX, max(GRAD_TOL, GRAD_NOISE_FACTOR * floor))
    return {"grad_rel_diff": diff, "grad_jitter_rel_diff": floor, "grad_tol": tol, "grad_ok": diff <= tol}


def probe(dev, out: dict, save) -> None:
    """Each model's peak memory (and time) in an eager training step at ``PROBE_BATCH``."""
    import torch

    from gsprestore.physics.tasks import network_input
    from gsprestore.training import make_loss

    res = out["probe"] = {}
    fault("probe")
    for name in MODELS:
        try:
            model, _ = shipped(name)
            _, task = split_name(name)
            if name in MODEL_OPTS:  # the trial's network (its memory; the values do not matter here)
                model = changed(model, name, **MODEL_OPTS[name])
            model = model.to(dev).train()
            opt = torch.optim.Adam(model.parameters(), lr=1e-5)
            loss_fn = make_loss("l1")
            gt = torch.rand(PROBE_BATCH, 3, PATCH, PATCH, device=dev)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            times = []
            for _ in range(1 if DRY else 2):  # the first warms up (a dry run: only plumbing)
                t0 = time.perf_counter()
                loss = loss_fn(model(*network_input(task, gt)), gt)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                times.append(time.perf_counter() - t0)
            peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
            res[name] = {"batch": PROBE_BATCH, "step_s": times[-1], "patches_per_s": PROBE_BATCH / times[-1],
                         "peak_bytes": peak}
            print(f"probe {name}: {times[-1]:.2f} s a step at batch {PROBE_BATCH}"
                  + (f", peak {peak / 2**30:.2f} GiB" if peak else ""), flush=True)
            del model, opt, gt, loss
        except Exception as exc:  # noqa: BLE001 - this model trains with the defaults
            res[name] = {"error": f"{type(exc).__name__}: {exc}"}
        _free(dev)
        save()


def infer(dev, out: dict, save, until: float) -> None:
    """Issue #16's GPU target (>= 10 MP/s for uGTV demosaicking of 24-MP images, fp32 and bf16 with
    the PSNR change). A measurement that would not end by ``until`` (time.time()) is skipped."""
    import torch

    from gsprestore.core import backend
    from gsprestore_lab.precision import load_crops, precision_psnr
    from gsprestore_lab.timing import synthetic_mosaic
    from gsprestore.runtime.tiling import restore
    from gsprestore.methods.ensemble import MEMBERS
    from gsprestore.methods.ensemble import NAME as ENSEMBLE
    from gsprestore.methods.registry import get_restorer

    fault("infer")
    out.update({"method": "ugtv", "task": "demosaic", "tile": INFER_TILE, "overlap": INFER_OVERLAP})
    precisions = ["fp32", "bf16"] if dev.type == "cuda" else ["fp32"]
    try:  # PSNR on the validation crops, fp32 against bf16
        model, _ = shipped("ugtv_demosaic")
        model = model.to(dev).eval()
        crops = load_crops(PACK / "val", 2 if DRY else 64)
        out["val_crops"] = len(crops)
        for prec in precisions:
            out[f"val_psnr_{prec}"] = round(precision_psnr(model, "demosaic", crops, dev, prec)[0], 3)
            save()
        if "val_psnr_bf16" in out:
            out["bf16_psnr_change_db"] = round(out["val_psnr_bf16"] - out["val_psnr_fp32"], 3)
        print(f"inference: val PSNR {[out.get('val_psnr_' + p) for p in precisions]} on {len(crops)} crops", flush=True)
        del model
    except Exception as exc:  # noqa: BLE001 - the inference timings still run
        out["val_error"] = f"{type(exc).__name__}: {exc}"
    save()

    def timed(restorer, y, kw, fused: int) -> dict:
        """One untimed run on the same tiles (compiles, cuDNN plans), then the timed one."""
        with backend.configure(gpu_fused=fused), fused_calls() as calls:
            t0 = time.perf_counter()
            restore(restorer, y, "RGGB", **kw)
            warm = time.perf_counter() - t0
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            before = dict(calls)
            t0 = time.perf_counter()
            out_img = restore(restorer, y, "RGGB", **kw)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            secs = time.perf_counter() - t0
            timed_calls = {k: v - before.get(k, 0) for k, v in calls.items()}
            fused_ran = bool(timed_calls) and backend.settings.gpu_fused == 1
        megapixels = out_img.shape[0] * out_img.shape[1] / 1e6  # of output, as the defaults' speeds
        # 4 significant digits: a slow CPU rehearsal measures ~1e-4 MP/s, which 3 decimals round to 0
        return {"megapixels": float(f"{megapixels:.4g}"), "seconds": round(secs, 2), "warmup_s": round(warm, 2),
                "megapixels_per_s": float(f"{megapixels / secs:.4g}"), "fused_ran": fused_ran,
                "fused_calls": timed_calls,
                "cuda_peak_mb": round(torch.cuda.max_memory_allocated(dev) / 2**20) if dev.type == "cuda" else None}

    def measured(key: str, label: str, run) -> float:
        """:func:`recorded` ``out[key] = run()``, printed; returns the seconds it took."""
        def measure() -> dict:
            rec = run()
            print(f"inference {key}: {rec['megapixels']:.1f} MP{label} in {rec['seconds']:.2f} s = "
                  f"{rec['megapixels_per_s']:.2f} MP/s (fused kernels ran: {rec['fused_ran']})", flush=True)
            return rec

        return recorded(out, key, measure, dev, save)

    restorer = get_restorer("ugtv", "demosaic")
    last_s = 0.0
    kw = {"device": dev, "tile": INFER_TILE, "overlap": INFER_OVERLAP}
    for prec, fused, mp in [("fp32", 1, INFER_MP), ("bf16", 1, INFER_MP), ("fp32", 0, INFER_MP / 4)]:
        key = f"{prec}_{'fused' if fused else 'unfused'}"
        if prec not in precisions:
            out[key] = "skipped: not on CUDA"
        elif time.time() + 1.2 * last_s * (mp / INFER_MP) > until:
            out[key] = "skipped: too little time left"
        else:
            last_s = measured(key, "", lambda: timed(restorer, synthetic_mosaic(mp), {**kw, "precision": prec}, fused))  # noqa: B023
    # The other networks' speed (the defaults need one per kind of device: uGLR demosaic, best by
    # quality since 2026-11-27, has none for CUDA): uGLR demosaicking of the INFER_MP mosaic, and the
    # 2x networks on an RGB image of a quarter of INFER_MP upscaled to INFER_MP; fp32, fused
    # kernels; each block names its method and task (for lab/tools/ship_weights.py --speed, and
    # lab/tools/record_ensemble.py --speed for the ensembles' blocks).
    # And the ensemble of each task whose two networks are here (gsprestore.methods.ensemble: both networks
    # on every tile; best by quality where its scores are recorded, a default only with a speed).
    ensembles = [f"{ENSEMBLE}_{t}" for t in ("demosaic", "upscale2x") if {f"{m}_{t}" for m in MEMBERS} <= set(MODELS)]
    for name in [m for m in MODELS if m == "uglr_demosaic" or m.endswith("_upscale2x")] + ensembles:
        key = f"{name}_fp32_fused"
        if time.time() + 1.2 * last_s > until:
            out[key] = "skipped: too little time left"
            continue
        method, task = split_name(name)

        def run(method=method, task=task) -> dict:
            y = (synthetic_mosaic(INFER_MP) if task == "demosaic"
                 else synthetic_mosaic(INFER_MP / 4).expand(3, -1, -1).contiguous())
            return {"method": method, "task": task, "input_megapixels": float(f"{y.shape[-2] * y.shape[-1] / 1e6:.4g}"),
                    **timed(get_restorer(method, task), y, {**kw, "precision": "fp32"}, 1)}

        last_s = measured(key, " out", run)


def _profile_one(name: str, dev) -> dict:
    """One model's record for :func:`profile_steps` (its tensors freed on return)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from gsprestore.physics.tasks import network_input
    from gsprestore.training import make_loss

    cuda = dev.type == "cuda"
    model, _ = shipped(name)
    _, task = split_name(name)
    if DRY:  # the plumbing only: one block (the CPU's PyTorch path, ~170k operator calls a step for
        # five, makes the profiler's sums ~25 s)
        model = changed(model, name, blocks=1)
    model = model.to(dev).train()
    loss_fn = make_loss("l1")
    gt = torch.rand(PROFILE_BATCH, 3, PATCH, PATCH, device=dev)

    def step() -> float:
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss_fn(model(*network_input(task, gt)), gt).backward()
        if cuda:
            torch.cuda.synchronize(dev)
        return time.perf_counter() - t0

    step()  # warm-up (compiles, cuDNN plans)
    plain = step()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        profiled = step()
    kind = DeviceType.CUDA if cuda else DeviceType.CPU
    rows = []
    for e in prof.key_averages():
        if e.device_type == kind:
            us = (getattr(e, "self_device_time_total", None) if cuda else e.self_cpu_time_total) or 0.0
            rows.append((float(us), e.key, int(e.count)))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    return {"step_s": round(plain, 4), "profiled_step_s": round(profiled, 4),
            "patches_per_s": round(PROFILE_BATCH / plain, 1), "time_total_us": round(total),
            "busy_fraction": round(total / 1e6 / profiled, 3) if profiled else None,
            "distinct": len(rows), "launches": sum(r[2] for r in rows),
            "top": [{"name": k[:120], "calls": c, "us": round(us), "share": round(us / total, 4) if total else None}
                    for us, k, c in rows[:PROFILE_TOP]]}


def profile_steps(dev, out: dict, save, until: float) -> None:
    """Where a training step's time goes on the device (the next bytes to cut: the real rate of the
    2026-11-27 window was a quarter of the counted floor): for each of ``PROFILE_MODELS`` one eager
    forward + L1 + backward at ``PROFILE_BATCH`` after a warm-up, under ``torch.profiler``. Records
    the step's wall time with and without the profiler, the kernels' summed device time (its ratio
    to the wall: how busy the GPU was; a CUDA-graph replay removes the launch gaps, not the
    kernels' time) and the ``PROFILE_TOP`` kernels by device time (on the CPU: operators by self
    CPU time). A model that would not end by ``until`` (1.2x the previous one's time) is skipped:
    a profile cut off by the stage's deadline loses only itself (each is saved as it ends; the third
    window skipped uGLR's with ~28 s of the stage left, under twice uGTV's time)."""
    res = out["profile"] = {"batch": PROFILE_BATCH, "patch": PATCH, "unit": "us",
                            "rows": "kernels by self device time" if dev.type == "cuda" else "operators by self CPU time"}
    last_s = 5.0
    for name in PROFILE_MODELS:
        if time.time() + 1.2 * last_s > until:
            res[name] = "skipped: too little time left"
            continue

        def measure(name=name) -> dict:
            rec = _profile_one(name, dev)
            print(f"profile {name}: step {rec['step_s']:.3f} s at batch {PROFILE_BATCH}, {rec['distinct']} distinct "
                  f"{'kernels' if dev.type == 'cuda' else 'operators'}, busy {rec['busy_fraction']}", flush=True)
            return rec

        last_s = recorded(res, name, measure, dev, save)


def child_main(stage: str, until: float) -> int:
    """A stage in its own process: results in ``RUNS/<stage>.json``, rewritten after each step."""
    import torch

    runs = Path(os.environ["RUNS"])
    out: dict = {}

    def save() -> None:
        write_json(out, runs / f"{stage}.json")

    dev = torch.device("cuda" if torch.cuda.is_available() and not DRY else "cpu")
    out.update({"device": str(dev), "torch": torch.__version__, "cuda_available": torch.cuda.is_available()})
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        out.update({"device_name": props.name, "total_memory": props.total_memory})
    save()
    if stage == "pre":
        if "pre-hang" in FAULTS:
            time.sleep(1e6)
        for part in (probe, sanity):  # the probe first: the batches matter more than the check
            try:
                part(dev, out, save)
            except Exception as exc:  # noqa: BLE001 - recorded; the next part goes on
                out.setdefault(part.__name__, {})["error"] = f"{type(exc).__name__}: {exc}"
                print(f"{part.__name__} failed: {type(exc).__name__}: {exc}", flush=True)
            save()
    elif stage == "infer":
        try:
            infer(dev, out, save, until)
            profile_steps(dev, out, save, until)
        except BaseException as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
            save()
            raise
    save()
    return 0


# ------------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------------


def stop(procs: list[subprocess.Popen], kill_at: float) -> None:
    """SIGTERM to each live process (all at once, so each gets the same time to checkpoint), then
    SIGKILL at ``kill_at``."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    while any(p.poll() is None for p in live) and time.monotonic() < kill_at:
        time.sleep(0.2)
    for p in live:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()


def run_child(stage: str, deadline: float) -> int | None:
    """``--stage stage`` until ``deadline`` (monotonic), then SIGTERM, SIGKILL. Its exit code
    (negative: killed by that signal)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", stage,
           "--until", repr(time.time() + left(deadline))]
    with open(RUNS / f"{stage}.log", "w") as logf:
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO)
        CHILDREN.append(p)
        if stage == "pre":  # meanwhile, what collect needs (an export from best.pt is then quick)
            with contextlib.suppress(Exception):
                import gsprestore.models  # noqa: F401
                import gsprestore.training.build  # noqa: F401
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if p.poll() is None:
            log(f"{stage}: still running at its deadline; stopped")
            stop([p], deadline + KILL_WAIT_S)
        CHILDREN.remove(p)
    return p.returncode


def child_result(stage: str, code: int | None, budget: float) -> dict:
    res: dict = {}
    path = RUNS / f"{stage}.json"
    if path.is_file():
        with contextlib.suppress(ValueError):
            res = json.loads(path.read_text())
    res.update({"exit_code": code, "budget_s": round(budget, 1)})
    if code != 0:
        why = (f"stopped at its {budget:.0f} s deadline" if code is not None and code < 0
               else f"exit code {code}") + f"; see {stage}.log in logs.tar.gz"
        res["error"] = f"{res['error']} ({why})" if "error" in res else why
    return res


def stage_pre() -> dict:
    deadline = min(time.monotonic() + PRE_S, TRAIN_END - MIN_TRAIN_S - KILL_WAIT_S - 1.0)
    budget = left(deadline)
    if budget < 5:
        return {"error": "skipped: no time left"}
    res = child_result("pre", run_child("pre", deadline), budget)
    for part in ("sanity", "probe"):
        summary["stages"][part] = res.get(part) or {"error": res.get("error", "not run")}
    bad = {m: r for m, r in (res.get("sanity") or {}).items() if isinstance(r, dict) and not r.get("ok")}
    bad_grad = sorted(m for m, r in (res.get("sanity") or {}).items() if isinstance(r, dict) and r.get("grad_ok") is False)
    if bad_grad:  # the runs inherit the driver's environment
        os.environ["GSPRESTORE_CG_ADJOINT"] = "0"
        os.environ["GSPRESTORE_GPU_TRAINING"] = "0"
        summary["cg_backward"] = {"path": "autograd", "gpu_training_ops": "off",
                                  "why": f"gradients on the device differ from the CPU's: {bad_grad}"}
        log(f"WARNING: {summary['cg_backward']['why']}; training differentiates CG by plain autograd and the "
            "ADMM edge terms and graphs by the PyTorch formulas")
    else:
        summary["cg_backward"] = {"path": "adjoint" if os.environ.get("GSPRESTORE_CG_ADJOINT", "1") != "0" else "autograd"}
    if bad:  # recorded, not fatal: each run's first validation (on the GPU) shows whether the weights score
        log(f"WARNING: sanity check failed or above tolerance {SANITY_TOL}: {bad}")
    log(f"pre: exit {res['exit_code']}, device {res.get('device_name', res.get('device'))}"
        + (f"; {res['error']}" if "error" in res else ""))
    summary["stages"]["pre"] = {k: v for k, v in res.items() if k not in ("sanity", "probe")}
    return res


def stage_plan(pre: dict) -> dict:
    """Batch (from the probe's memory, else ``DEFAULT_BATCH``), epoch size, CUDA graph."""
    total = pre.get("total_memory")
    cuda = not DRY
    plans = {}
    for name in MODELS:
        p = (pre.get("probe") or {}).get(name)
        graph = USE_GRAPHS and cuda  # the run checks the graph against an eager step, else trains eagerly
        if not isinstance(p, dict) or "step_s" not in p:
            batch, why = DEFAULT_BATCH, "probe failed: default batch"
        elif p.get("peak_bytes") and total:
            per_patch = p["peak_bytes"] / p["batch"] * (2 if graph else 1)
            fit = int(MEM_FRACTION * total / len(MODELS) / per_patch)
            batch, why = max(PROBE_BATCH, min(BATCH_MAX, fit // 8 * 8 or PROBE_BATCH)), "probe"
        else:
            batch, why = BATCH_MAX, "probe (no memory figure)"
        patches = max(batch, EPOCH_PATCHES // batch * batch)
        plans[name] = {"batch": batch, "patches": patches, "epochs": 1000, "lr": LR, "cuda_graph": graph,
                       "share": SHARES.get(name, 0.7), "from": why, "model_opts": MODEL_OPTS.get(name, {}),
                       "step_size_lr_scale": STEP_SIZE_LR_SCALE if name in MODEL_OPTS else 1.0}
        log(f"plan {name}: batch {batch}, epochs of {patches} patches, "
            f"{'CUDA graph' if graph else 'eager'}, share {plans[name]['share']} ({why})"
            + (f", trial {MODEL_OPTS[name]}" if name in MODEL_OPTS else ""))
    summary["stages"]["plan"] = plans
    return plans


def train_command(name: str, plan: dict, budget: float) -> list[str]:
    from gsprestore.methods.weights import manifest_entry, weights_dir

    method, task = split_name(name)
    entry = manifest_entry(method, task)  # the shipped weights (the driver does not load torch for this)
    init = init_file(name) or weights_dir() / entry["file"]
    cmd = [sys.executable, "-m", "gsprestore", "train", "--task", task, "--prior", method[1:],
           "--data", str(PACK), "--out", str(RUNS / name), "--patch-size", str(PATCH),
           "--patches", str(plan["patches"]), "--val-patches", str(VAL_PATCHES), "--epochs", str(plan["epochs"]),
           "--batch-size", str(plan["batch"]), "--lr", repr(plan["lr"]), "--schedule", "cosine-time",
           "--warmup-steps", "2" if DRY else "20", "--grad-clip", "1.0", "--loss", "l1", "--seed", str(SEED),
           "--init", str(init), "--device", "cpu" if DRY else "cuda", "--time-budget", f"{budget:.1f}",
           "--no-progress", "--log-every", "1" if DRY else "20",
           "--threads", str(max(1, (os.cpu_count() or 4) // len(MODELS))), "--workers", "2" if DRY else "4"]
    # the shipped weights' configuration, stated (``--init`` adopts it too); an ``INIT`` file's own
    # configuration is adopted by ``--init`` alone
    cfg = ({} if init_file(name) else dict(entry["config"])) | MODEL_OPTS.get(name, {})
    cfg.pop("prior", None)
    cfg.pop("task", None)
    for key, value in sorted(cfg.items()):
        cmd += ["--model-opt", f"{key}={json.dumps(value)}"]
    if plan["step_size_lr_scale"] != 1.0:
        cmd += ["--step-size-lr-scale", repr(plan["step_size_lr_scale"])]
    if plan["cuda_graph"]:
        cmd.append("--cuda-graph")
    if MAX_STEPS and f"overrun:{name}" not in FAULTS:
        cmd += ["--max-steps", str(MAX_STEPS)]
    return cmd


def read_log(run: Path) -> list[dict]:
    path = run / "log.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def export_best(run: Path, status: str) -> dict:
    """``model.pt`` from the run's ``best.pt`` (a run stopped by a signal only checkpoints); returns
    the checkpoint's ``best`` record."""
    from gsprestore.training.build import build_network
    from gsprestore.training.checkpoints import load_checkpoint, load_run_config
    from gsprestore.training.evaluation import score_space
    from gsprestore.training.recipe import without_init
    from gsprestore.methods.weights import save_weights

    cfg = load_run_config(run)
    ck = load_checkpoint(run / "best.pt")
    model = build_network(without_init(cfg))
    model.load_state_dict(ck["model"])
    model.eval()
    best = ck["best"]
    save_weights(run / "model.pt", model, {
        "method": cfg.method, "task": cfg.task, "pattern": "RGGB" if cfg.task == "demosaic" else None,
        "command": cfg.command(run), "recipe": cfg.to_json(), "data": list(cfg.data), "status": status,
        "best_epoch": best.get("epoch"), "best_step": best.get("step"), "val_psnr": best.get("psnr"),
        "val_space": score_space(cfg.task), "exported_from": "best.pt by lab/tools/device_train.py"})
    return best


def collect_run(name: str, code: int | None) -> None:
    """A run that ended: its record, its ``model.pt`` (exported from ``best.pt`` if the run did not)
    copied to ``$OUT``."""
    rec = summary["stages"]["train"][name]
    run = RUNS / name
    rec["exit_code"] = code
    rec["ended_s"] = round(time.monotonic() - T0, 1)
    try:
        records = read_log(run)
        init = next((r for r in records if r.get("event") == "init-val"), {})
        steps = max((r.get("step") or 0 for r in records), default=0)
        rec.update({"status": "stopped" if code != 0 else "unknown", "steps": steps, "init_val_psnr": init.get("val_psnr")})
        if (run / "summary.json").is_file():
            s = json.loads((run / "summary.json").read_text())
            rec.update({k: s.get(k) for k in ("status", "steps", "epochs_done", "patches_per_s", "train_time_s",
                                              "init_val_psnr", "best_val_psnr", "best_epoch", "best_is_init",
                                              "val_space", "device")})
        if not (run / "model.pt").is_file() and (run / "best.pt").is_file():
            best = export_best(run, rec["status"])
            rec.update({"exported_from": "best.pt", "best_val_psnr": best.get("psnr"), "best_epoch": best.get("epoch"),
                        "best_is_init": bool(best.get("init"))})
        if (run / "model.pt").is_file():
            tmp = OUT / f".{name}.pt.tmp"
            shutil.copyfile(run / "model.pt", tmp)
            tmp.replace(OUT / f"{name}.pt")
            rec["model_file"] = f"{name}.pt"
        cg = next((r for r in records if r.get("event") == "cuda-graph"), None)
        rec["cuda_graph_used"] = None if cg is None else cg.get("used")
        rec["patch_passes"] = (rec.get("steps") or 0) * rec["batch"]
        init_v, best_v = rec.get("init_val_psnr"), rec.get("best_val_psnr")
        rec["gain_db"] = None if init_v is None or best_v is None else best_v - init_v
        rec["improved"] = bool(rec["gain_db"] and rec["gain_db"] > 0 and not rec.get("best_is_init"))
    except Exception as exc:  # noqa: BLE001 - recorded; the other runs are collected all the same
        rec["collect_error"] = f"{type(exc).__name__}: {exc}"
    rec["collected"] = True
    log(f"{name}: exit {code}, {rec.get('status')}, {rec.get('steps')} steps, val {rec.get('init_val_psnr')} -> "
        f"{rec.get('best_val_psnr')} ({'improved' if rec.get('improved') else 'not improved'})"
        + (f", model in $OUT/{rec['model_file']}" if rec.get("model_file") else ", NO MODEL"))
    save_summary()


def progress(names) -> None:
    """The latest step / validation of each running run, into summary.json."""
    for name in names:
        records = read_log(RUNS / name)
        last = next((r for r in reversed(records) if r.get("event") in ("step", "epoch")), None)
        val = next((r for r in reversed(records) if r.get("event") in ("epoch", "init-val")), None)
        summary["stages"]["train"][name]["progress"] = {
            "at_s": round(time.monotonic() - T0, 1), "step": None if last is None else last.get("step"),
            "patches_per_s": None if last is None else last.get("patches_per_s"),
            "val_psnr": None if val is None else val.get("val_psnr")}


def stage_train(plans: dict) -> None:
    runs = summary["stages"]["train"] = {}
    procs: dict[str, tuple[subprocess.Popen, float]] = {}
    t_first = time.monotonic()
    order = sorted(MODELS, key=lambda m: -plans[m]["share"])
    try:
        for i, name in enumerate(order):
            if i:
                time.sleep(STAGGER_S)
            plan = plans[name]
            now = time.monotonic()
            window_end = t_first + plan["share"] * (TRAIN_END - t_first)
            budget = window_end - now - IMPORT_S
            if budget < MIN_RUN_S:
                runs[name] = {"status": f"skipped: a {budget:.0f} s budget", "batch": plan["batch"]}
                log(f"{name}: not started (budget {budget:.0f} s)")
                continue
            if f"overrun:{name}" in FAULTS:
                budget *= 10  # the driver has to stop it at its window's end
            cmd = train_command(name, plan, budget)
            logf = open(RUNS / f"{name}.log", "w")
            logf.write(" ".join(cmd) + "\n")
            logf.flush()
            p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO)
            logf.close()
            CHILDREN.append(p)
            procs[name] = (p, window_end)
            runs[name] = {"status": "running", "batch": plan["batch"], "time_budget_s": round(budget, 1),
                          "started_s": round(now - T0, 1), "window_end_s": round(window_end - T0, 1)}
            log(f"started {name} (pid {p.pid}), budget {budget:.0f} s, window ends at {window_end - T0:.0f} s")
            save_summary()
        last_progress = time.monotonic()
        while any(not runs[n].get("collected") for n in procs):
            now = time.monotonic()
            for name, (p, window_end) in procs.items():
                if runs[name].get("collected"):
                    continue
                if f"overrun:{name}" in FAULTS and "overrun_at_s" not in runs[name]:
                    window_end = INFER_END
                    if (RUNS / name / "best.pt").is_file():  # it has weights to export: its window ends
                        procs[name] = (p, now + 3.0)
                        runs[name]["overrun_at_s"] = round(now - T0, 1)
                term_at = min(window_end + GRACE_S, INFER_END)
                if p.poll() is not None:
                    CHILDREN.remove(p)
                    collect_run(name, p.returncode)
                elif now > term_at and "sigterm_s" not in runs[name]:
                    log(f"{name}: past its window; SIGTERM")
                    runs[name]["sigterm_s"] = round(now - T0, 1)
                    p.send_signal(signal.SIGTERM)
                elif now > term_at + KILL_WAIT_S:
                    log(f"{name}: SIGKILL")
                    p.kill()
                    p.wait()
            if now - last_progress > PROGRESS_S:
                progress([n for n in procs if not runs[n].get("collected")])
                save_summary()
                last_progress = now
            time.sleep(0.5)
    finally:  # stopped early (a signal): the runs checkpoint, then their best weights are exported
        live = [n for n in procs if not runs[n].get("collected")]
        if live:
            stop([procs[n][0] for n in live], min(time.monotonic() + KILL_WAIT_S, CLOSE))
            for n in live:
                if procs[n][0] in CHILDREN:
                    CHILDREN.remove(procs[n][0])
                collect_run(n, procs[n][0].returncode)
    ok = [n for n, r in runs.items() if r.get("model_file")]
    summary["aggregate_patches_per_s"] = sum((r.get("patches_per_s") or 0.0) for r in runs.values())
    log(f"training: {len(ok)} of {len(MODELS)} models back in $OUT")


def stage_infer() -> None:
    budget = left(INFER_END)
    if INFER_S <= 0 or budget < min(INFER_S, 10.0):
        summary["stages"]["inference"] = {"skipped": f"{budget:.0f} s left"}
        return
    started = round(time.monotonic() - T0, 1)
    res = child_result("infer", run_child("infer", INFER_END), budget)
    res["started_s"] = started
    summary["stages"]["inference"] = res
    log("inference: " + ", ".join(f"{k} {v['megapixels_per_s']} MP/s (fused ran: {v['fused_ran']})"
                                  for k, v in res.items() if isinstance(v, dict) and "megapixels_per_s" in v)
        + (f"; {res['error']}" if "error" in res else ""))


def toolchain() -> dict:
    """What Triton needs to build its launcher at the first launch (a C compiler, Python.h)."""
    import importlib.metadata
    import sysconfig

    include = Path(sysconfig.get_paths().get("include") or "")
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return {"python": sys.executable, "python_version": sys.version.split()[0], "gcc": shutil.which("gcc"),
            "cc": os.environ.get("CC") or shutil.which("cc"),
            "python_h": str(include / "Python.h") if (include / "Python.h").is_file() else None,
            "triton": triton, "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR"), "cpu_count": os.cpu_count()}


def setup_faults() -> None:
    """``FAULTS=compile``: every Triton launch in the child processes raises, as a kernel that
    fails to compile would (a ``sitecustomize`` on their path)."""
    if "compile" not in FAULTS:
        return
    site = RUNS / "fault-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "# lab/tools/device_train.py FAULTS=compile: every Triton kernel launch fails\n"
        "def _fail(*a, **k):\n"
        "    raise RuntimeError('injected fault: the Triton kernel failed to compile')\n"
        "try:\n"
        "    import triton.runtime.jit as _jit\n"
        "    _jit.JITFunction.run = _fail\n"
        "    import triton.runtime.interpreter as _interp\n"
        "    _interp.InterpretedFunction.run = _fail\n"
        "except ImportError:\n"
        "    pass\n", encoding="utf-8")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    if DRY:  # CPU tensors take the fused path only under Triton's interpreter
        os.environ["TRITON_INTERPRET"] = "1"


def archive_logs() -> None:
    with tarfile.open(OUT / "logs.tar.gz", "w:gz") as tar:
        for path in sorted(RUNS.rglob("*")):
            if path.is_file() and path.suffix in (".json", ".jsonl", ".log") and "fault-site" not in path.parts:
                tar.add(path, arcname=str(path.relative_to(RUNS)))


def _terminate(signum, frame) -> None:  # noqa: ARG001
    for s in (signal.SIGTERM, signal.SIGINT):  # once: the driver now winds down
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(signal.Signals(signum).name)


def main() -> int:
    global _log_file
    OUT.mkdir(parents=True, exist_ok=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    _log_file = open(OUT / "driver.log", "w", encoding="utf-8")
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    os.environ["RUNS"] = str(RUNS)
    os.environ.setdefault("GSPRESTORE_NATIVE", "0")
    # one compiled-kernel cache for every process: the training runs reuse what pre compiled
    os.environ.setdefault("TRITON_CACHE_DIR", str(Path(tempfile.gettempdir()) / "gsp-triton-cache"))
    Path(os.environ["TRITON_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
    setup_faults()
    summary["toolchain"] = tc = toolchain()
    summary["times"] = {"end_s": BUDGET_S, "close_s": round(CLOSE - T0, 1), "infer_end_s": round(INFER_END - T0, 1),
                        "train_end_s": round(TRAIN_END - T0, 1)}
    log(f"job: budget {BUDGET_S:.0f} s (training until {TRAIN_END - T0:.0f} s, inference until "
        f"{INFER_END - T0:.0f} s, children gone by {CLOSE - T0:.0f} s); python {tc['python_version']} "
        f"({tc['python']}), gcc {tc['gcc']}, cc {tc['cc']}, Python.h {tc['python_h']}, triton {tc['triton']}, "
        f"TRITON_CACHE_DIR {tc['triton_cache_dir']}")
    summary["init"] = {m: str(init_file(m) or "shipped") for m in MODELS}
    summary["model_opts"] = MODEL_OPTS
    summary["step_size_lr_scale"] = STEP_SIZE_LR_SCALE
    if set(MODEL_OPTS) - set(MODELS):
        log(f"WARNING: MODEL_OPTS names {sorted(set(MODEL_OPTS) - set(MODELS))}, not among MODELS {MODELS}: ignored")
    if INIT:
        log(f"init: {summary['init']}")
        if not any(init_file(m) for m in MODELS):
            log(f"WARNING: INIT={INIT} holds none of {[m + '.pt' for m in MODELS]}: every model starts from the shipped weights")
    if tc["triton"] and not (tc["cc"] or tc["gcc"]) or tc["triton"] and not tc["python_h"]:
        log("WARNING: no C compiler or Python.h: Triton cannot build its launcher; the PyTorch path will run")
    save_summary()
    status = 0
    try:
        pre = stage_pre()
        save_summary()
        if pre.get("cuda_available") is False and not DRY:
            summary["error"] = "no CUDA device (set DRY_RUN=1 for the CPU rehearsal)"
            status = 3
            return status
        plans = stage_plan(pre)
        save_summary()
        if left(TRAIN_END) < MIN_TRAIN_S:
            summary["stages"]["train"] = {"skipped": f"{left(TRAIN_END):.0f} s left for training"}
            log(f"training skipped: {left(TRAIN_END):.0f} s left")
            status = 1
        else:
            stage_train(plans)
            runs = summary["stages"]["train"]
            status = 0 if all(r.get("model_file") and r.get("exit_code") == 0 for r in runs.values()) else 1
        save_summary()
        stage_infer()
    except Terminated as exc:
        summary["terminated"] = str(exc)
        log(f"{exc}: winding down")
        status = 2
    except Exception as exc:  # noqa: BLE001 - report whatever broke, then still collect and archive
        summary["error"] = f"{type(exc).__name__}: {exc}"
        log(f"job error: {type(exc).__name__}: {exc}")
        status = 2
    finally:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        stop(list(CHILDREN), min(time.monotonic() + KILL_WAIT_S, END))
        summary["exit_code"] = status
        save_summary()
        with contextlib.suppress(Exception):
            archive_logs()
        log(f"done: exit {status}, files in {OUT}: {sorted(p.name for p in OUT.iterdir() if not p.name.startswith('.'))}")
        save_summary()
    return status


RUNS = Path(os.environ.get("RUNS") or tempfile.mkdtemp(prefix="gsp-runs-"))

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--stage":
        sys.exit(child_main(sys.argv[2], float(sys.argv[4])))
    sys.exit(main())
