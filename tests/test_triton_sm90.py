"""The fused Triton kernels as the GPU job meets them, checked without a GPU: every variant that
the shipped models launch compiles for an H100 / H200 (sm_90) with Triton's real compiler in a
few seconds (lab/tools/triton_sm90.py), the tile shape does not choose the variant, and the launch
grid keeps within CUDA's limits on a 24-MP tile. Skipped where Triton is not installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")

REPO = Path(__file__).resolve().parents[1]
#: The most CPU seconds one variant may take to compile (CPU time: a loaded machine does not fail
#: the test). The unrolled random-walk kernel took 143-149 s (the job's first GPU forward would
#: have waited minutes for it, again for each tile shape); each variant now takes 0.1-2.2 s.
COMPILE_LIMIT_S = 10.0
KERNELS = {"_random_walk_kernel", "_edge_weights_kernel", "_cg_step_kernel", "_replay_kernel",
           "_adjoint_step_kernel", "_weight_grad_kernel", "_edge_adjoint_kernel", "_rw_backward_kernel",
           "_distances_backward_kernel", "_diag_minus_adjacency_kernel", "_adjacency_grad_kernel"}
MODELS = {"ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x"}


@pytest.mark.slow
def test_every_kernel_variant_the_job_launches_compiles_for_sm90_in_seconds(tmp_path):
    shapes = ["16x16", "22x18"]
    out = tmp_path / "sm90.json"
    res = subprocess.run([sys.executable, str(REPO / "lab" / "tools" / "triton_sm90.py"), "--shapes", ",".join(shapes),
                          "--json", str(out)], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert out.is_file(), res.stdout[-3000:] + res.stderr[-3000:]
    variants = json.loads(out.read_text())["variants"]
    table = "\n".join(f"{v['kernel']} {v['constexprs']}: {v['cpu_seconds']} s CPU {v['error'] or ''}" for v in variants)
    assert res.returncode == 0 and not any(v["error"] for v in variants), table
    assert {v["kernel"] for v in variants} == KERNELS, table
    launched_by = set().union(*(v["models"] for v in variants))
    assert {m.replace(" (training)", "") for m in launched_by} == MODELS, table
    # the training step of every model launches the CG training kernels
    training = {m for v in variants if v["kernel"] == "_adjoint_step_kernel" for m in v["models"]}
    assert training == {m + " (training)" for m in MODELS}, table
    weights = {m for v in variants if v["kernel"] == "_weight_grad_kernel" for m in v["models"]}
    assert weights == training, table
    # and the uGTV models' training step the ADMM edge term's (admm_adjoint_triton)
    edge = {m for v in variants if v["kernel"] == "_edge_adjoint_kernel" for m in v["models"]}
    assert edge == {m + " (training)" for m in MODELS if m.startswith("ugtv")}, table
    # and the graphs' backward: every model's features, uGTV's softmax
    dist = {m for v in variants if v["kernel"] == "_distances_backward_kernel" for m in v["models"]}
    assert dist == {m + " (training)" for m in MODELS}, table
    rw = {m for v in variants if v["kernel"] == "_rw_backward_kernel" for m in v["models"]}
    assert rw == {m + " (training)" for m in MODELS if m.startswith("ugtv")}, table
    # uGLR's right-hand side (a x - W x): forward and training, and its weights' gradient in training
    rhs = {m for v in variants if v["kernel"] == "_diag_minus_adjacency_kernel" for m in v["models"]}
    assert rhs >= {m for m in MODELS if m.startswith("uglr")} | {m + " (training)" for m in MODELS if m.startswith("uglr")}, table
    grad_w = {m for v in variants if v["kernel"] == "_adjacency_grad_kernel" for m in v["models"]}
    assert grad_w >= {m + " (training)" for m in MODELS if m.startswith("uglr")}, table
    slow = [v for v in variants if v["cpu_seconds"] > COMPILE_LIMIT_S]
    assert not slow, table
    # no variant spills registers to local memory (the CG training kernel once spilled ~1 KB a
    # thread and took 53-66 % of an H100 training step); read from the cubins where Triton ships
    # cuobjdump, as its NVIDIA backend does
    usage = [v for v in variants if v["registers"] is not None]
    if importlib.util.find_spec("triton.backends.nvidia") is not None:
        assert len(usage) == len(variants), table
    assert all(v["stack_bytes"] == 0 and v["registers"] <= 255 for v in usage), "\n".join(
        f"{v['kernel']} {v['constexprs']}: {v['registers']} regs, {v['stack_bytes']} B stack" for v in usage)
    # shapes are run-time arguments: a new tile shape reuses the compiled variants
    assert all(sorted(v["shapes"]) == sorted(shapes) for v in variants), table


def _grids(monkeypatch, module, name: str) -> list:
    grids = []

    class Recorder:
        def __getitem__(self, grid):
            grids.append(tuple(grid))
            return lambda *a, **k: None

    monkeypatch.setattr(module, name, Recorder())
    return grids


def test_launch_grids_of_a_24_megapixel_tile_keep_within_cuda_limits(monkeypatch):
    """Pixel blocks on grid axis 0 (up to 2^31 - 1): on axis 1 (at most 65,535) a tile over
    16.8 MP would not launch. Shapes only (tensors on the meta device), nothing runs."""
    import torch

    from gsprestore.core import backend
    from gsprestore.graph import triton_kernels as graph_triton
    from gsprestore.solvers.cg import triton_kernels as cg_triton
    from gsprestore.solvers.gtv import triton_kernels as admm_triton

    B, K, C, H, W = 1, 4, 2, 4000, 6000
    meta = {"device": "meta"}
    g = torch.empty(B, K, 12, H, W, **meta)
    rw, ew = _grids(monkeypatch, graph_triton, "_random_walk_kernel"), _grids(monkeypatch, graph_triton,
                                                                               "_edge_weights_kernel")
    graph_triton.random_walk_weights_from_projected(g)
    graph_triton.edge_weights_from_projected(g)
    cg = _grids(monkeypatch, cg_triton, "_cg_step_kernel")
    b = torch.empty(B, K, C, H, W, **meta)
    cg_triton.cg_unrolled_triton(torch.empty(B, K, 12, H, W, **meta), b, None, b, b, torch.ones(3), torch.ones(3))
    rp = _grids(monkeypatch, admm_triton, "_replay_kernel")
    admm_triton.edge_term_replayed_triton([b], torch.empty(B, K, 24, H, W, **meta), torch.ones(K))
    for grids, block, planes in ((rw, graph_triton.BLOCK, B * K), (ew, graph_triton.BLOCK, B * K),
                                 (cg, cg_triton.BLOCK, B * K * C), (rp, admm_triton.BLOCK, B * K * C)):
        assert grids, "no launch recorded"
        for grid in grids:
            assert grid == (-(-H * W // block), planes), grid
            assert grid[0] < 2**31 and all(n <= backend.MAX_GRID_YZ for n in grid[1:]), grid
    with pytest.raises(ValueError, match="grid axis 1"):
        backend.pixel_grid(H * W, 256, backend.MAX_GRID_YZ + 1)
