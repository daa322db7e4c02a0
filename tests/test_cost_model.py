"""benchmarks/cost_model.py: the analytic FLOP model agrees with the operator-level count of the
PyTorch path, part by part, up to the differences the docs name (issue 16's cost model)."""

from __future__ import annotations


import pytest


def _cost_model():
    import cost_model  # benchmarks/ is on the tests' path (pyproject: pythonpath)

    return cost_model


@pytest.mark.parametrize("name", ["ugtv_demosaic", "uglr_upscale2x"])
def test_analytic_flops_match_the_dispatch_count(name):
    cm = _cost_model()
    H, W = 24, 40
    counted = cm.count(name, H, W)["parts"]
    model, _ = cm._load(name)
    cfg = model.config
    an = cm.analytic(cfg, H, W)
    exact = ("solver.setup", "solver.cg", "rest", "estimate") + (("graph",) if cfg["prior"] == "glr" else ())
    for p in exact:
        assert counted[p]["flops"] == pytest.approx(an[p]["flops"], rel=1e-9), p
    # the feature CNN's border strips (replicate padding): each conv recomputes one row / column per side
    # (conv = MACs x 2 + bias: the CNN's FLOPs less its ReLUs, residual adds and luma)
    conv = an["cnn"]["flops"] - cfg["width"] * (2 * cfg["cnn_layers"] - 1) - (5 if cfg["cnn_input"] == "luma" else 0)
    assert counted["cnn"]["flops"] == pytest.approx(an["cnn"]["flops"] + conv * 2 * (H + W) / (H * W), rel=1e-9)
    if cfg["prior"] == "gtv":
        # the PyTorch edge step materialises a = -1/(2 gamma) (one negation per directed edge and channel)
        KC = cfg["heads"] * 3
        Ed = 2 * cm.undirected_edges_per_pixel(H, W)
        assert counted["solver.admm"]["flops"] == pytest.approx(an["solver.admm"]["flops"] + KC * Ed, rel=1e-9)
        # the softmax runs over all 24 directed slots (out-of-image ones hold +inf) after a negation
        assert counted["graph"]["flops"] == pytest.approx(an["graph"]["flops"], rel=0.05)
    else:
        assert counted["solver.admm"]["flops"] == 0
    for p in cm.PARTS:
        assert counted[p]["bytes"] > 0 or p == "solver.admm"
