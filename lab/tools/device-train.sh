#!/usr/bin/env bash
# The prepared GPU job of issues #12 and #20: sanity check, memory probe, parallel fine-tuning of the
# four shipped models with wall-clock budgets, inference measurement, results in $OUT as they arrive.
# See lab/tools/device_train.py (its docstring: stages and time arithmetic) and docs/training.md.
#
# On the lent GPU machine (its own python3; no install, no network), from the repository root:
#   OUT=$OUT bash lab/tools/device-train.sh            (the training pack travels as carry/pack)
# A second job in the same window (job 1 takes ~510 s of the 900 s with start-up), going on from job 1's
# results, no inference stage (the third and fourth windows, 2026-11-27: all four models, 267-268 s of wall time):
#   mkdir -p carry/init && cp FILES_AT/*.pt carry/init/                                    (here)
#   OUT=$OUT INIT=carry/init INFER_S=0 BUDGET_S=300 SEED=4 bash lab/tools/device-train.sh
#     carry ["carry/pack", "carry/init"]  timeout_s 345
# or only the demosaickers: MODELS=ugtv_demosaic,uglr_demosaic SHARES=uglr_demosaic=1.0 (the second window).
# (BUDGET_S: the device time left less ~60 s of start-up and transfer; delete carry/init afterwards.)
# A recipe trial (issue 3/6), e.g. the paper's 5 ADMM x 10 CG for uGTV demosaic from 2 x 5 weights (job 1's
# with INIT=carry/init, else the shipped ones), the next window's best second job (lab/notes/gpu-windows.md, the third
# and fourth windows: 2 x 5 gains ~0.05 dB a window now; the fourth window ran a plain job 2 instead):
#   OUT=$OUT INIT=carry/init MODELS=ugtv_demosaic MODEL_OPTS="ugtv_demosaic:admm_iters=5,cg_iters=10" BUDGET_S=300 INFER_S=0 ...
# (the probe sizes the batch for the changed network; judge it on the pack's validation crops like any stage;
# since 2026-11-27 the added CG steps start as no-ops, alpha 0, so the trial starts at its weights' validation;
# the added steps' gradient has no consistent sign at the start (lab/research/unrolling_gradient.py, docs/training.md
# "What we tried"): leave STEP_SIZE_LR_SCALE at 1, and expect the deeper network to have to re-adapt before it gains).
# Job 1's infer.json also times uGLR demosaicking ("uglr_demosaic_fp32_fused"): ship it as that model's CUDA speed
# (lab/tools/ship_weights.py --speed cuda=...job1-infer.json:uglr_demosaic_fp32_fused), the defaults need it.
# It times the ensembles too ("ensemble_demosaic_fp32_fused", both networks on every tile): record it with
# lab/tools/record_ensemble.py --task demosaic --speed cuda=...job1-infer.json:ensemble_demosaic_fp32_fused (scores kept)
# (at >= 1 MP/s the demosaicking ensemble, best by quality, becomes the GPU default).
# Job 1's profile (job1 infer.json "profile") times the CG adjoint kernels split after the fourth window
# (_adjoint_step_kernel, _weight_grad_kernel): compare with lab/notes/gpu-windows.md, the fourth window.
# Rehearsal on this CPU (what CI runs, in a few minutes):
#   DRY_RUN=1 OUT=/tmp/dry PACK=some/pack PYTHON=.venv/bin/python bash lab/tools/device-train.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
# The working tree is the package and the lab (no install); the CPU reference must not start the C++ build.
export PYTHONPATH="$PWD:$PWD/lab${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GSPRESTORE_NATIVE=0
# The driver writes $OUT/driver.log itself (a pipe through tee would die with the job's process group).
exec "${PYTHON:-python3}" lab/tools/device_train.py
