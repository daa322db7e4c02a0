#!/usr/bin/env bash
# Before a GPU window (no device time is spent here): make the training pack if it is missing, check
# that the working tree plus the pack fit the 64 MiB that travel, and rehearse the job on the CPU.
#   bash lab/tools/prepare-device-train.sh [PHOTO_ROOT]     (default ../shared/datasets/train)
# Then, with the device tool: run  OUT=$OUT bash lab/tools/device-train.sh  carry ["carry/pack"]  timeout_s 560.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="${1:-../shared/datasets/train}"
PY="${PYTHON:-.venv/bin/python}"
if [ ! -f carry/pack/pack.json ]; then
    "$PY" -m gsprestore train-pack "$ROOT/photos" "$ROOT/div2k-0020" "$ROOT/bsds432" -o carry/pack \
        --budget-mib 46 --crop 128 --seed 0
fi
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
others=$(git ls-files -z --others --exclude-standard | xargs -0 -r du -cb | tail -1 | cut -f1)
pack=$(du -sb carry | cut -f1)  # the pack and any carry/init (a second job in one window)
total=$(( tree + ${others:-0} + pack ))
echo "travels: tree $((tree >> 20)) MiB + untracked $(( ${others:-0} >> 20 )) MiB + carry/ $((pack >> 20)) MiB = $((total >> 20)) MiB (limit 64)"
[ "$total" -lt $((64 << 20)) ] || { echo "too large for the device tool" >&2; exit 1; }
DRY_RUN=1 OUT="${DRY_OUT:-/tmp/gsp-dry}" PYTHON="$PY" bash lab/tools/device-train.sh
