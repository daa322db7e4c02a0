"""lab/research/count_training_traffic.py: both paths count a training step, and the fused path (the
Triton training kernels recorded, not run) moves less and launches less than the unfused one.
Skipped where Triton is not installed (the fused path needs its interpreter to be chosen on a CPU)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_fused_training_step_moves_and_launches_less_than_the_unfused_one():
    res = subprocess.run([sys.executable, str(REPO / "lab" / "research" / "count_training_traffic.py"), "--models",
                          "ugtv_demosaic", "--batch", "1", "--patch", "16", "--path", "pytorch,fused"],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {(m, p): (int(n), float(gb)) for m, p, n, gb in
            re.findall(r"^(\w+_\w+)\s+(pytorch|fused)\s+(\d+)\s+([\d.]+)", res.stdout, flags=re.M)}
    assert len(rows) == 2, res.stdout
    for model in ("ugtv_demosaic",):
        (n_plain, gb_plain), (n_fused, gb_fused) = rows[(model, "pytorch")], rows[(model, "fused")]
        assert n_fused * 4 < n_plain and gb_fused * 2 < gb_plain, (model, rows)
    # the fused path's traffic names the Triton training kernels it counted
    assert "triton:_adjoint_step_kernel" in res.stdout
