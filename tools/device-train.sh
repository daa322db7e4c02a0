#!/usr/bin/env bash
# The prepared GPU job of issue #12: sanity check, throughput probe, parallel fine-tuning of the four
# shipped models with wall-clock budgets, results in $OUT. See tools/device_train.py and docs/training.md.
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
PY="${PYTHON:-python3}"
"$PY" tools/device_train.py 2>&1 | tee "$OUT/driver.log"
exit "${PIPESTATUS[0]}"
