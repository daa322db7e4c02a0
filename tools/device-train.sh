#!/usr/bin/env bash
# The prepared GPU job of issues #12 and #20: sanity check, memory probe, parallel fine-tuning of the
# four shipped models with wall-clock budgets, inference measurement, results in $OUT as they arrive.
# See tools/device_train.py (its docstring: stages and time arithmetic) and docs/training.md.
#
# On the lent GPU machine (its own python3; no install, no network), from the repository root:
#   OUT=$OUT bash tools/device-train.sh            (the training pack travels as carry/pack)
# Rehearsal on this CPU (what CI runs, in a few minutes):
#   DRY_RUN=1 OUT=/tmp/dry PACK=some/pack PYTHON=.venv/bin/python bash tools/device-train.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
# The working tree is the package (no install); the CPU reference must not start the C++ build.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GSPRESTORE_NATIVE=0
# The driver writes $OUT/driver.log itself (a pipe through tee would die with the job's process group).
exec "${PYTHON:-python3}" tools/device_train.py
