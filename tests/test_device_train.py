"""The prepared GPU job (tools/device-train.sh) rehearsed on the CPU with ``DRY_RUN=1``: the same
script, tiny budgets, the same files in ``$OUT``, so the real run on a lent GPU never fails on a typo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gsprestore.trainpack import make_pack
from gsprestore.weights import load_model

REPO = Path(__file__).resolve().parents[1]
MODELS = ["ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x"]
#: Our dependencies that the lent GPU machine's Python lacks (device tool's package list).
ABSENT_ON_GPU_MACHINE = ["platformdirs", "rawpy"]


@pytest.mark.slow
def test_dry_run_writes_every_file_the_gpu_run_brings_back(tmp_path):
    rng = np.random.default_rng(0)
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(6):
        base = rng.integers(0, 256, size=(3,))
        img = np.clip(base + rng.normal(0, 40, size=(96, 128, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(photos / f"p{i}.png")
    make_pack([photos], tmp_path / "pack", budget_mib=0.4, val_fraction=0.34, val_share=0.3, crop=64)
    out = tmp_path / "out"
    # packages the GPU machine does not have: importing them there would fail the job
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ABSENT_ON_GPU_MACHINE:
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not on the GPU machine')\n")
    env = {**os.environ, "DRY_RUN": "1", "OUT": str(out), "PACK": str(tmp_path / "pack"),
           "RUNS": str(tmp_path / "runs"), "PYTHON": sys.executable, "BUDGET_S": "60", "PYTHONPATH": str(blocked)}
    res = subprocess.run(["bash", str(REPO / "tools" / "device-train.sh")], env=env, capture_output=True, text=True,
                         timeout=900, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(["summary.json", "driver.log", "logs.tar.gz", *[f"{m}.pt" for m in MODELS]])
    assert len(files) <= 8  # the device tool brings back at most 8 files
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] and summary["exit_code"] == 0 and "error" not in summary
    stages = summary["stages"]
    assert all(stages["sanity"][m]["ok"] for m in MODELS)
    inf = stages["inference"]  # issue #16's GPU measurement, rehearsed on the CPU
    assert "error" not in inf and 5 < inf["val_psnr_fp32"] < 60 and inf["bf16_fused"] == "skipped: not on CUDA"
    assert inf["fp32_fused"] == "skipped: inference budget spent" or inf["fp32_fused"]["megapixels_per_s"] > 0
    assert all(stages["probe"][m]["patches_per_s"] > 0 for m in MODELS)
    assert all(stages["plan"][m]["epochs"] >= 1 and stages["plan"][m]["patches"] >= 1 for m in MODELS)
    for m in MODELS:
        rec = stages["train"][m]
        assert rec["exit_code"] == 0 and rec["status"] in ("finished", "time-budget", "max-steps"), rec
        assert rec["steps"] >= 1 and rec["init_val_psnr"] is not None and rec["best_val_psnr"] is not None
        assert rec["best_val_psnr"] >= rec["init_val_psnr"]  # the shipped weights are the floor
        method, task = m.split("_")
        model = load_model(method, task, out / f"{m}.pt")  # a valid weights file for --weights
        assert model.config["task"] == task
    import tarfile

    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert all(f"{m}/log.jsonl" in names and f"{m}.log" in names for m in MODELS)
