"""The cost model (gsprestore_lab.cost_model; benchmarks/cost_model.py is its command line):
the analytic FLOP model agrees with the operator-level count of the PyTorch path, part by part, up
to the differences the docs name (issue 16's cost model); the CPU-size networks' packed trunk and
per-block heads (issue 39) too; ``--opt`` prices candidates."""

from __future__ import annotations

import sys

import pytest

from gsprestore_lab import cost_model as cm


def _conv_strips(flops_per_px: float, H: int, W: int) -> float:
    """The replicate-padded 3x3 convs' border strips: each conv recomputes one row / column per side."""
    return flops_per_px * 2 * (H + W) / (H * W)


@pytest.mark.parametrize("name,opts,H,W", [
    ("ugtv_demosaic", None, 24, 40),
    ("uglr_upscale2x", None, 24, 40),
    # the CPU-size networks (untrained: the cost does not depend on the weights), small candidates
    # (the tent x^0: the analytic count models it; the shipped -lite start from Menon / the bicubic)
    ("ugtv-lite_demosaic", {"blocks": 2, "width": 16, "initial_estimate": "bilinear"}, 24, 40),
    ("uglr-lite_upscale2x", {"blocks": 2, "heads": 1, "width": 16, "cg_iters": 4, "initial_estimate": "bilinear"},
     24, 40),
    ("uglr-lite_demosaic", {"blocks": 1, "width": 8, "cnn_layers": 2, "cg_iters": 3, "initial_estimate": "bilinear"},
     23, 37),  # odd: padded trunk
])
def test_analytic_flops_match_the_dispatch_count(name, opts, H, W):
    counted = cm.count(name, H, W, opts)["parts"]
    model, _ = cm.priced_model(name, opts)
    cfg = model.config
    if opts:
        paper = {"initial_estimate": "bilinear", "feature_trunk": "per-block"}  # left out of stored configs
        assert {k: cfg.get(k, paper.get(k)) for k in opts} == opts
    an = cm.analytic(cfg, H, W)
    exact = ("solver.setup", "solver.cg", "rest", "estimate") + (("graph",) if cfg["prior"] == "glr" else ())
    for p in exact:
        assert counted[p]["flops"] == pytest.approx(an[p]["flops"], rel=1e-9), p
    luma = cfg["cnn_input"] == "luma"
    L, width = cfg["cnn_layers"], cfg["width"]
    if cfg.get("feature_trunk", "per-block") == "packed":
        # the head (1x1 convs, pixel shuffle): exact
        assert counted["cnn"]["flops"] == pytest.approx(an["cnn"]["flops"], rel=1e-9)
        KF = cfg["heads"] * cfg["features"]
        cin = 1 if luma else cfg["channels"]
        q = ((H + 1) // 2) * ((W + 1) // 2) / (H * W)
        assert an["cnn"]["macs"] == pytest.approx(q * 4 * width * KF + cin * KF)
        # the trunk at half resolution, per output pixel: exact but for its convs' border strips
        Hh, Wh = (H + 1) // 2, (W + 1) // 2
        cin_p = 1 if luma else 4
        macs_lr = 9 * width * (cin_p + (L - 1) * width)
        assert an["trunk"]["macs"] == pytest.approx(q * macs_lr)
        conv_lr = 2 * macs_lr + width * L  # MACs x 2 + bias, per half-res pixel
        assert counted["trunk"]["flops"] == pytest.approx(an["trunk"]["flops"] + q * _conv_strips(conv_lr, Hh, Wh),
                                                          rel=1e-9)
        assert counted["trunk"]["bytes"] > 0
        # per forward, not per block: the same per-pixel count whatever the depth
        assert counted["trunk"]["launches"] == cm.count(name, H, W, {**(opts or {}), "blocks": 1})["parts"]["trunk"]["launches"]
    else:
        # conv = MACs x 2 + bias: the CNN's FLOPs less its ReLUs, residual adds and luma
        conv = an["cnn"]["flops"] - width * (2 * L - 1) - (5 if luma else 0)
        assert counted["cnn"]["flops"] == pytest.approx(an["cnn"]["flops"] + _conv_strips(conv, H, W), rel=1e-9)
        assert an["trunk"]["flops"] == 0 and counted["trunk"]["flops"] == 0
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
        assert counted[p]["bytes"] > 0 or p == "solver.admm" or (p == "trunk" and cfg.get("feature_trunk", "per-block") == "per-block")


def test_opt_prices_a_candidate_configuration(capsys):
    args = {"timed": False, "counted": False, "size": (16, 24), "out": sys.stdout}
    base = cm.price(cm.jobs("ugtv-lite_demosaic"), **args)["models"][0]
    res = cm.price(cm.jobs("ugtv-lite_demosaic,ugtv_demosaic", ["blocks=2"],
                           ["ugtv-lite_demosaic:heads=2", 'uglr-lite_upscale2x:blocks=1,width=32,feature_trunk="packed"']),
                   **args)
    lite, paper, lite1, cand = res["models"]
    # the shipped CPU-size network (1 block x 1 head), priced with its weights: the width its file records
    from gsprestore.methods.weights import read_manifest

    shipped = next(e for e in read_manifest()["models"] if e["file"] == "ugtv-lite_demosaic.pt")
    assert (base["config"]["blocks"], base["config"]["heads"]) == (1, 1)
    assert base["config"]["width"] == shipped["config"]["width"] > 32
    assert "untrained" not in base["weights"]
    assert (lite["config"]["blocks"], lite["config"]["heads"]) == (2, 1) and lite["label"] == "ugtv-lite_demosaic blocks=2"
    assert (lite1["config"]["blocks"], lite1["config"]["heads"]) == (2, 2)
    assert lite1["config"]["feature_trunk"] == "packed" and lite1["label"] == "ugtv-lite_demosaic blocks=2 heads=2"
    assert base["totals"]["forward_flops"] < lite["totals"]["forward_flops"] < lite1["totals"]["forward_flops"]
    assert base["totals"]["params"] < lite["totals"]["params"] < lite1["totals"]["params"]
    # a shipped model with --opt: its own configuration (not the paper defaults) with the keys over it, untrained
    assert paper["config"]["blocks"] == 2
    assert paper["config"]["signal"] == "green-difference" and paper["config"]["admm_iters"] == 2
    assert "untrained" in paper["weights"]
    # --candidate: its keys over --opt's
    assert (cand["config"]["blocks"], cand["config"]["heads"], cand["config"]["width"]) == (1, 1, 32)
    an = cm.analytic(cand["config"], 16, 24)
    assert cand["totals"]["forward_cnn_macs"] == pytest.approx(an["trunk"]["macs"] + an["cnn"]["macs"])
    out = capsys.readouterr().out
    assert "== summary" in out and 'uglr-lite_upscale2x blocks=1 width=32 feature_trunk="packed"' in out
    with pytest.raises(SystemExit):
        cm.parse_opts(["blocks"])
    assert cm.parse_opts(["feature_trunk=packed", "cg_iters=3"]) == {"feature_trunk": "packed", "cg_iters": 3}
