"""The prepared GPU job (lab/tools/device-train.sh) rehearsed on the CPU with ``DRY_RUN=1``: the same
script, tiny budgets, the same files in ``$OUT``, so the real run on a lent GPU never fails on a typo;
and the same rehearsal with injected faults (a stage that raises or hangs, a Triton kernel that
fails to compile, a run stopped at its deadline, the whole job stopped by SIGTERM): each still
brings back the models trained so far and a complete ``summary.json``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gsprestore.training.trainpack import make_pack
from gsprestore.methods.weights import load_model, save_weights

REPO = Path(__file__).resolve().parents[1]
MODELS = ["ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x"]
#: Our dependencies that the lent GPU machine's Python lacks (device tool's package list).
ABSENT_ON_GPU_MACHINE = ["platformdirs", "pooch", "rawpy"]
FILES = sorted(["summary.json", "driver.log", "logs.tar.gz", *[f"{m}.pt" for m in MODELS]])


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """``start(name, **env)``: the dry run in its own folder (a tiny pack, our GPU-machine-absent
    packages blocked), as a process; ``finish(proc)`` waits for it."""
    base = tmp_path_factory.mktemp("device-job")
    rng = np.random.default_rng(0)
    photos = base / "photos"
    photos.mkdir()
    for i in range(6):
        col = rng.integers(0, 256, size=(3,))
        img = np.clip(col + rng.normal(0, 40, size=(96, 128, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(photos / f"p{i}.png")
    make_pack([photos], base / "pack", budget_mib=0.4, val_fraction=0.34, val_share=0.3, crop=64)
    # packages the GPU machine does not have: importing them there would fail the job
    blocked = base / "blocked"
    blocked.mkdir()
    for name in ABSENT_ON_GPU_MACHINE:
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not on the GPU machine')\n")

    def start(name: str, **extra: str) -> tuple[subprocess.Popen, Path, Path]:
        out, runs = base / name / "out", base / name / "runs"
        env = {**os.environ, "DRY_RUN": "1", "OUT": str(out), "PACK": str(base / "pack"), "RUNS": str(runs),
               "PYTHON": sys.executable, "PYTHONPATH": str(blocked),
               "TRITON_CACHE_DIR": str(base / "triton-cache"), **extra}
        env.pop("TRITON_INTERPRET", None)
        proc = subprocess.Popen(["bash", str(REPO / "lab" / "tools" / "device-train.sh")], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=base, start_new_session=True)
        return proc, out, runs

    return start


def _finish(proc: subprocess.Popen) -> str:
    try:
        return proc.communicate(timeout=600)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _check_models_and_summary(out: Path, models: list[str]) -> dict:
    """The models trained so far load as weights files; summary.json is whole and final."""
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(["summary.json", "driver.log", "logs.tar.gz", *[f"{m}.pt" for m in models]]), files
    assert len(files) <= 8  # the device tool brings back at most 8 files
    summary = json.loads((out / "summary.json").read_text())
    assert "exit_code" in summary and summary["elapsed_s"] < summary["budget_s"], summary
    assert {"pre", "sanity", "probe", "plan", "train"} <= set(summary["stages"]), summary["stages"].keys()
    for m in models:
        rec = summary["stages"]["train"][m]
        assert rec["model_file"] == f"{m}.pt" and "collect_error" not in rec, rec
        assert rec["init_val_psnr"] is not None and rec["best_val_psnr"] is not None, rec
        assert rec["best_val_psnr"] >= rec["init_val_psnr"]  # the shipped weights are the floor
        method, task = m.split("_")
        model = load_model(method, task, out / f"{m}.pt")  # a valid weights file for --weights
        assert model.config["task"] == task
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert all(f"{m}/log.jsonl" in names and f"{m}.log" in names for m in models), names
    assert "pre.log" in names
    return summary


@pytest.mark.slow
def test_dry_run_writes_every_file_the_gpu_run_brings_back(job):
    proc, out, _ = job("clean", MODEL_OPTS="ugtv_upscale2x:cg_iters=3")  # one recipe trial
    log = _finish(proc)
    assert proc.returncode == 0, log[-3000:]
    summary = _check_models_and_summary(out, MODELS)
    assert summary["dry_run"] and summary["exit_code"] == 0 and "error" not in summary
    assert summary["toolchain"]["python_version"] and "python_h" in summary["toolchain"]
    stages = summary["stages"]
    assert all(stages["sanity"][m]["ok"] and stages["sanity"][m]["grad_ok"] for m in MODELS)
    # the gradient check's noise floor: the CPU's own gradients under 1e-6 input jitters
    assert all(0 < stages["sanity"][m]["grad_jitter_rel_diff"] < 0.5 and 1e-3 <= stages["sanity"][m]["grad_tol"] <= 0.1
               for m in MODELS)
    assert summary["cg_backward"] == {"path": "adjoint"}
    assert all(stages["probe"][m]["patches_per_s"] > 0 for m in MODELS)  # the trial's network too
    assert stages["plan"]["ugtv_upscale2x"]["model_opts"] == {"cg_iters": 3}
    assert load_model("ugtv", "upscale2x", out / "ugtv_upscale2x.pt").config["cg_iters"] == 3
    assert not any(stages["plan"][m]["from"].startswith("probe failed") for m in MODELS)
    for m in MODELS:
        rec = stages["train"][m]
        assert rec["exit_code"] == 0 and rec["status"] in ("finished", "time-budget", "max-steps"), rec
        assert rec["steps"] >= 1 and rec["patch_passes"] >= 1
    # uGTV demosaic trains longest: its window ends with training, the others' earlier
    ends = {m: stages["train"][m]["window_end_s"] for m in MODELS}
    assert ends["ugtv_demosaic"] == max(ends.values()) and ends["ugtv_demosaic"] > min(ends.values())
    inf = stages["inference"]  # issue #16's GPU measurement, after training, rehearsed on the CPU
    assert inf["exit_code"] == 0 and "error" not in inf and 5 < inf["val_psnr_fp32"] < 60
    assert inf["bf16_fused"] == "skipped: not on CUDA"
    # on the CPU the fused kernels cannot run: the measurement says so instead of calling it fused
    assert inf["fp32_fused"]["megapixels_per_s"] > 0 and inf["fp32_fused"]["fused_ran"] is False
    assert stages["train"]["ugtv_demosaic"]["ended_s"] <= inf["started_s"]
    # the 2x networks' speed, in megapixels of output (4x the input's), each naming its model
    for m in ("ugtv_upscale2x", "uglr_upscale2x", "ensemble_upscale2x"):
        rec = inf[f"{m}_fp32_fused"]
        assert (rec["method"], rec["task"]) == tuple(m.split("_")) and rec["megapixels_per_s"] > 0, rec
        assert rec["megapixels"] == pytest.approx(4 * rec["input_megapixels"], rel=1e-3)
    rec = inf["ensemble_demosaic_fp32_fused"]  # the ensemble's too (both networks on every tile)
    assert (rec["method"], rec["task"]) == ("ensemble", "demosaic") and rec["megapixels_per_s"] > 0, rec
    # then where a training step's time goes (on the CPU: operators by self CPU time)
    for m in ("ugtv_demosaic",):  # a dry run profiles the first model only
        prof = inf["profile"][m]
        assert prof["step_s"] > 0 and prof["launches"] >= len(prof["top"]) > 0, prof
        assert prof["top"][0]["us"] >= prof["top"][-1]["us"] and 0 < prof["top"][0]["share"] <= 1
        assert any("conv" in row["name"] for row in prof["top"]), prof["top"]


@pytest.mark.slow
def test_dry_run_with_injected_faults_still_returns_every_model(job, tmp_path):
    """The gradient check fails, the probe and the inference raise, every Triton launch fails as a kernel that cannot
    compile would (the fused path runs under the interpreter here), and one run overruns its window
    (ten times its budget, the window ended after its first validation): the driver stops it and
    exports its best weights."""
    models = ["ugtv_demosaic", "uglr_upscale2x"]
    # and uGTV starts from a previous job's result (INIT), not from the shipped weights
    init = tmp_path / "init"
    init.mkdir()
    previous = load_model("ugtv", "demosaic")
    with torch.no_grad():
        next(previous.parameters()).mul_(1.01)
    save_weights(init / "ugtv_demosaic.pt", previous)
    # and uGLR 2x is a recipe trial: a network with 4 CG steps instead of the shipped 15
    proc, out, runs = job("faults", FAULTS="probe,infer,compile,grad,overrun:uglr_upscale2x", MODELS=",".join(models),
                          INIT=str(init), MODEL_OPTS="uglr_upscale2x:cg_iters=4")
    log = _finish(proc)
    assert proc.returncode == 1, log[-3000:]  # a run ended by a signal
    summary = _check_models_and_summary(out, models)
    stages = summary["stages"]
    assert "injected fault: probe" in stages["probe"]["error"]
    # the gradient check failed: the runs differentiate CG by plain autograd, and the summary says so
    assert summary["cg_backward"]["path"] == "autograd" and "differ" in summary["cg_backward"]["why"]
    assert summary["cg_backward"]["gpu_training_ops"] == "off"  # the ADMM edge and graph training ops too
    assert all(stages["plan"][m]["batch"] == 1 and not stages["plan"][m]["cuda_graph"] for m in models)
    assert "injected fault: infer" in json.dumps(stages["inference"])
    assert summary["init"] == {"ugtv_demosaic": str(init / "ugtv_demosaic.pt"), "uglr_upscale2x": "shipped"}
    start = json.loads((runs / "ugtv_demosaic" / "log.jsonl").read_text().splitlines()[0])
    assert start["init"] == str(init / "ugtv_demosaic.pt"), start
    # the sanity stage checked the model the run started from (a SHA-256 check of a shipped file would fail here)
    assert "error" not in stages["sanity"]["ugtv_demosaic"], stages["sanity"]
    assert summary["model_opts"] == {"uglr_upscale2x": {"cg_iters": 4}}
    assert stages["plan"]["uglr_upscale2x"]["model_opts"] == {"cg_iters": 4}
    assert load_model("uglr", "upscale2x", out / "uglr_upscale2x.pt").config["cg_iters"] == 4
    assert load_model("ugtv", "demosaic", out / "ugtv_demosaic.pt").config["cg_iters"] == 5  # its own, unchanged
    stopped = stages["train"]["uglr_upscale2x"]
    assert "sigterm_s" in stopped and stopped["exit_code"] != 0 and stopped["exported_from"] == "best.pt", stopped
    assert stages["train"]["ugtv_demosaic"]["exit_code"] == 0, stages["train"]["ugtv_demosaic"]
    pre_log = (runs / "pre.log").read_text()
    if summary["toolchain"]["triton"]:  # else the fused path is never taken
        # the sanity forward met the failing kernel, fell back to PyTorch, and its output still matched
        assert "the fused Triton" in pre_log and "injected fault" in pre_log, pre_log[-2000:]
        assert all(stages["sanity"][m]["ok"] and not stages["sanity"][m]["fused_calls"] for m in models)


@pytest.mark.slow
def test_dry_run_stopped_by_sigterm_returns_the_models_trained_so_far(job):
    """The pre stage hangs (stopped at its deadline; training runs with the default batch), then
    the device tool's SIGTERM reaches the job mid-training: each run is stopped and its best
    weights exported, summary.json says so."""
    models = ["ugtv_demosaic", "uglr_demosaic"]
    proc, out, runs = job("sigterm", FAULTS="pre-hang", PRE_S="8", MAX_STEPS="0", MODELS=",".join(models))
    t_end = time.monotonic() + 300
    while not all((runs / m / "best.pt").is_file() for m in models):  # each validated its start
        assert proc.poll() is None and time.monotonic() < t_end, _finish(proc)[-3000:]
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGTERM)  # bash exec'd the driver: this pid is the driver
    log = _finish(proc)
    assert proc.returncode == 2, log[-3000:]
    summary = _check_models_and_summary(out, models)
    assert summary["terminated"] == "SIGTERM" and summary["exit_code"] == 2
    assert "stopped at its" in summary["stages"]["pre"]["error"]
    assert all(summary["stages"]["plan"][m]["from"].startswith("probe failed") for m in models)
    assert all(summary["stages"]["train"][m]["exported_from"] == "best.pt" for m in models)
