"""Issue 16's cost model: operations and bytes per output pixel and per block of each shipped
model (and of the CPU-size ``-lite`` networks, and of any candidate configuration: ``--opt``),
split into parts, the floors they imply on this CPU and on an H200, and the measured time beside
them.

Parts of one unrolled block (``gsprestore/models/unrolled.py``):

* ``cnn``: the feature CNN (4 3x3 convs, width 48, ReLU, residual shortcuts; 2x: its luma input);
  in the CPU-size networks (``feature_trunk="packed"``, ``models/packed_trunk.py``) the block's
  head instead (``BlockFeatureHead``: a 1x1 conv of the trunk's features to 4 K F at half
  resolution + pixel shuffle, plus a 1x1 conv of the CNN input to K F: K F (width + C_in)
  multiply-adds an output pixel);
* ``graph``: graph learning - M_k = A_k A_k^T, M f, the edge distances of eq. 27 and the weights
  (uGTV: the random-walk softmax of eq. 28, 24 directed edges; uGLR: exp(-d), 12 undirected);
* ``solver``: the interpolation solver, split into ``solver.cg`` (the unrolled CG iterations),
  ``solver.admm`` (uGTV: the ADMM edge step of eqs. 19, 21, 23, 24 and the multiplier / node
  update) and ``solver.setup`` (everything else in ``UnrolledBlock.solve``: Laplacian weights,
  degrees, diagonal and preconditioner, right-hand sides; uGLR: normalised weights, eq. 9's
  right-hand side, the D^1/2 scaling);
* ``rest``: the heads' weighted average, the re-imposed samples and (demosaicking,
  ``signal="green-difference"``) the glue between the G solve and the R-G / B-G solve;

plus, once per forward (not per block), ``trunk``, the CPU-size networks' shared feature trunk
(``UnrolledNet.trunk_features``: the observation packed 2x2, then a ``width`` x ``cnn_layers``
FeatureCNN at half resolution: 9 width (C_packed + (L - 1) width) / 4 multiply-adds an output
pixel; 0 for the paper's networks), and ``estimate``, the initial estimate x^0.

Models: ``method_task`` (:data:`MODELS`). A method without shipped weights (``weights_status``,
e.g. the lite networks while they train) is built untrained with ``build_model(method, task)``:
the cost does not depend on the weights; the report's ``weights:`` line says which. ``--opt
KEY=VALUE`` (JSON value, repeatable) overrides configuration keys of every model priced (a
shipped model: its own configuration with the keys over it, untrained; a lite one:
``build_model(method, task, **opts)``); ``--candidate MODEL:KEY=VALUE,...`` adds one more model
to price with its own keys (over ``--opt``), and several models end with a summary table
(params, CNN MACs/px, FLOP/px, measured s per forward, MP/s, ratios to the first row).

What it reports, per output pixel (per block unless said):

1. FLOPs (a multiply-add counts 2; every other arithmetic operation, comparison or select 1;
   exp, rsqrt, reciprocal 1 each): ``analytic`` from the configuration (:func:`analytic`, the
   arithmetic the PyTorch formulas do, borders exact), cross-checked against an operator-level
   count (``dispatch``: a ``TorchDispatchMode`` with a FLOP formula per ATen operator, on a
   ``--count-size`` image with the PyTorch path, i.e. the native kernels off, in
   ``torch.inference_mode()``).
2. Bytes: ``unfused`` = what that PyTorch path reads and writes operator by operator (each
   operator's distinct input elements plus its outputs; an ``out=`` buffer or a filled tensor
   counts as written only), counted by the same dispatch mode; ``fused`` = the floor if each part
   were one kernel that reads its inputs once and writes its outputs once (fp32) with every
   intermediate in cache (:func:`analytic` says per part what that is); for the solver also
   ``stream`` (an estimate): one kernel per CG step / ADMM pass, its vectors streamed from memory
   each pass.
3. Floors: time = max(FLOPs / peak, bytes / bandwidth) per part, on this CPU (peak FLOP/s of a
   large fp32 matmul and bandwidth of a large copy / add, measured in the same run, on
   ``--threads`` threads) and on an H200 (published spec figures, :data:`H200`); for uGTV
   demosaicking also the H200's MP/s floor (issue target >= 10 MP/s on 24-MP images).
4. Measured: each part's wall time in one forward on a ``--size`` image on this CPU with the native
   kernels (default backend), by wrapping the functions named above (exclusive times; the time
   inside native kernels from ``Kernels._call``), after a warm-up forward; measured / floor.

The command line is ``benchmarks/cost_model.py`` (:func:`jobs`, :func:`price`).
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import IO, Any, Optional

import torch

from gsprestore.core import backend
from gsprestore.graph.window import OFFSETS
from gsprestore_lab.op_count import Counter, Tracker
from gsprestore_lab.timing import DemosaicnetShape, best_of, synthetic_rgb

MODELS = ("ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x",
          "ugtv-lite_demosaic", "uglr-lite_demosaic", "ugtv-lite_upscale2x", "uglr-lite_upscale2x")
#: the parts of a block
BLOCK_PARTS = ("cnn", "graph", "solver.setup", "solver.cg", "solver.admm", "rest")
#: the parts run once per forward, not per block: the packed feature trunk (lite networks; 0 for
#: the paper's per-block CNNs) and the initial estimate
PER_FORWARD = ("trunk", "estimate")
PARTS = BLOCK_PARTS + PER_FORWARD
#: the parts whose convolutions run on TF32 tensor cores on the H200
CNN_PARTS = ("cnn", "trunk")
SOLVER_PARTS = ("solver.setup", "solver.cg", "solver.admm")
#: the rows that get a fused-bytes floor (the solver as one part)
FLOOR_ROWS = ("cnn", "graph", "solver", "rest")
F32 = 4

#: H200 (SXM), published spec figures (NVIDIA H200 datasheet / product page): FP32 (CUDA cores)
#: 67 TFLOP/s, TF32 tensor core 989 TFLOP/s with 2:4 sparsity = ~495 dense, HBM3e 4.8 TB/s peak;
#: ~4.0 TB/s is the achievable stream bandwidth this project assumes (lab/research/count_training_traffic.py).
H200 = {"fp32_flops": 67e12, "tf32_flops": 495e12, "hbm_peak_bytes_per_s": 4.8e12, "hbm_bytes_per_s": 4.0e12,
        "launch_s": 4e-6, "source": "published spec (NVIDIA H200 SXM datasheet); 4.0 TB/s achievable: project assumption"}


# --------------------------------------------------------------------------------------------
# the analytic model
# --------------------------------------------------------------------------------------------


def undirected_edges_per_pixel(H: int, W: int) -> float:
    """In-image undirected edges of the 5x5 window per pixel (12 in the interior)."""
    return sum(max(0, H - abs(dy)) * max(0, W - abs(dx)) for dy, dx in OFFSETS) / (H * W)


def _cg_flops(T: int, stencil: float, precond: bool, keep: bool) -> float:
    """Unrolled CG (``solvers.cg.cg_unrolled``) per (head, channel) plane and pixel, T steps:
    start g = A x - b (and v = P^-1 g), then per step v = P^-1 g + beta v (t > 0), x -= alpha v,
    g -= alpha A v (t < T - 1); A v = diag v - W v (+ keep *)."""
    a = stencil + (1 if keep else 0)
    start = a + 1 + (1 if precond else 0)
    v_upd = 3 if precond else 2
    return start + (T - 1) * v_upd + 2 * T + (T - 1) * (a + 2)


def analytic(cfg: dict, H: int, W: int) -> dict[str, dict[str, float]]:
    """Per output pixel: FLOPs of each part per block (``trunk``, ``estimate``: per forward) as the
    PyTorch formulas compute them (borders exact: only in-image edges; the 3x3 convs' replicate
    border strips not counted), the CNN parts' multiply-adds (``macs``) and the byte floors.

    ``fused`` (fp32 floats x 4) assumes each part is one kernel reading its inputs once and
    writing its outputs once, intermediates in cache: cnn reads x^t (3 channels; 2x computes its
    luma inside; a packed model's head also the trunk's features at half resolution) and writes
    the K x F features; the trunk reads the observation (2x: its low-resolution samples) and
    writes its ``width`` features at half resolution; graph reads the features and writes the
    weights (uGTV 24 directed per head, uGLR 12 undirected); the solver reads the weights, known,
    mask and warm start (3 C) once per solve and writes the K x C head outputs (all CG and ADMM
    vectors in cache: a row wavefront); rest reads the head outputs, known and mask and writes
    x^{t+1}; the estimate reads known and mask and writes x^0. ``stream`` (solver, an estimate):
    each CG step and each ADMM edge pass one kernel that streams its operands (weights 12 per
    head, the per-channel vectors) from memory."""
    K, Fd, width, L = cfg["heads"], cfg["features"], cfg["width"], cfg["cnn_layers"]
    ch = int(cfg["channels"])
    luma = cfg["cnn_input"] == "luma"
    gtv = cfg["prior"] == "gtv"
    T = int(cfg["cg_iters"])
    A = int(cfg.get("admm_iters", 0))
    HW = H * W
    Eu = undirected_edges_per_pixel(H, W)
    Ed = 2 * Eu
    stencil = 1 + 2 * Ed  # diag * v, then one multiply-add per in-image directed neighbour
    out: dict[str, dict[str, float]] = {p: {"flops": 0.0} for p in PARTS}

    cin = 1 if luma else ch
    KF = K * Fd
    if cfg.get("feature_trunk", "per-block") == "packed":
        # the packed trunk (PackedTrunk, once per forward, UnrolledNet.trunk_features): a FeatureCNN on
        # the observation packed 2x2 (odd sizes zero-padded to whole cells) at half resolution, q = its
        # pixels per output pixel (1/4 at even sizes). Packing: demosaic, the mosaic = known summed over
        # its channels (2 adds per padded full-res pixel = 8 per cell) then pixel_unshuffle (data);
        # 2x, the luma of the low-resolution samples (5 per cell). Then per conv 9 C_in MACs per output
        # channel + bias, ReLU, the residual add from the second conv on, per half-res pixel.
        q = ((H + 1) // 2) * ((W + 1) // 2) / HW
        cin_p = 1 if luma else 4
        macs_lr = 9 * width * (cin_p + (L - 1) * width)
        out["trunk"]["macs"] = q * macs_lr
        out["trunk"]["flops"] = q * ((5 if luma else 8) + 2 * macs_lr + width * L * 2 + width * (L - 1))
        # reads the observation (demosaic: known; 2x: its low-resolution samples), writes the features
        obs = ch if not luma else ch * q
        out["trunk"]["fused"] = F32 * (obs + q * width)
        out["trunk"]["fused_per_layer"] = F32 * (obs + q * (cin_p + width + (L - 1) * 2 * width))
        # the block's head (BlockFeatureHead): 1x1 conv width -> 4 K F (+ bias) at half resolution,
        # pixel shuffle (data), 1x1 conv (no bias) of the CNN input (luma: 5) -> K F, their sum
        out["cnn"]["macs"] = q * 4 * width * KF + cin * KF
        out["cnn"]["flops"] = (5 if luma else 0) + q * (8 * width * KF + 4 * KF) + 2 * cin * KF + KF
        out["cnn"]["fused"] = F32 * (q * width + ch + KF)
        # unpack conv (reads the trunk, writes 4 K F at half res), shuffle (a copy), estimate conv, add
        out["cnn"]["fused_per_layer"] = F32 * (q * width + KF + 2 * KF + ch + KF + 3 * KF)
    else:
        # feature CNN (FeatureCNN, as UnrolledBlock.projected_features runs it): luma (3 mul + 2 add), per conv 9 C_in MACs per
        # output channel + bias, ReLU, the residual add from the second conv on
        macs = 9 * width * (cin + (L - 1) * width)
        out["cnn"]["macs"] = macs
        out["cnn"]["flops"] = (5 if luma else 0) + 2 * macs + width * L * 2 + width * (L - 1)
        out["cnn"]["fused"] = F32 * (ch + KF)
        # one kernel per conv (each reads its input once, writes its output once; bias, ReLU and the
        # residual add in the epilogue)
        out["cnn"]["fused_per_layer"] = F32 * (ch + width + (L - 1) * 2 * width)
        out["trunk"].update(macs=0.0, fused=0.0, fused_per_layer=0.0)

    # graph learning: A A^T and its symmetrisation (per block, per image), M f (F x F per head),
    # d = sum_f (f_p - f_q)_f (M f_p - M f_q)_f (2 sub + 1 mul per feature, F - 1 adds), then
    # uGTV eq. 28 as a softmax over the in-image directed edges (min, sub, exp, sum, times 1/sum:
    # 5 per edge, one reciprocal per node) / uGLR w = exp(-d) (neg, exp) clamped (1 per stored weight)
    # (inference applies M = A A^T as its factor: g = A^T f per head, 2 F^2 per pixel, then
    # d = |g_p - g_q|^2, F sub + F mul + F - 1 add per edge)
    g = 2 * K * Fd * Fd + K * Eu * (3 * Fd - 1)
    g += K * (5 * Ed + 1) if gtv else K * (2 * Eu + len(OFFSETS))
    out["graph"]["flops"] = g
    nw = 2 * len(OFFSETS) if gtv else len(OFFSETS)  # weights per head and pixel written by graph
    out["graph"]["fused"] = F32 * (K * Fd + K * nw)

    # the solves of a block: demosaic green-difference G (C = 1) then R-G, B-G (C = 2); else C = ch
    solves = [1, 2] if cfg.get("signal", "rgb") == "green-difference" else [ch]
    setup = cg = admm = fused = 0.0
    st_setup = st_cg = st_admm = 0.0  # streamed bytes (estimate), by sub-part
    # the graph-only part of the system, once per block for all its solves (UnrolledBlock.graph_system):
    # uGTV s = wbar^2 + wbar^2 (3 per undirected edge) and degree(s) (2 per edge); uGLR the degrees
    # (2 per edge), D^-1/2 (clamp, rsqrt), wn = w dis_p dis_q (2 per edge), a = deg dis dis (2)
    setup += K * 5 * Eu if gtv else K * (4 * Eu + 4)
    st_setup += F32 * ((24 + 12) * K if gtv else 12 * K * 2 + 2 * K)
    for C in solves:
        KC = K * C
        fused += F32 * (K * nw + 3 * C + KC)
        if gtv:
            # diag = deg + mask, y = mask known, mu_c = mu0 mask, P^-1 = 1 / clamp(diag) (2),
            # rhs of the first iteration (3)
            setup += KC + 2 * C + 2 * KC + 3 * KC + (A - 1) * 4 * KC  # later rhs: 4 (+ n)
            setup += K / HW  # gamma = exp(log_gamma), per image
            cg += A * KC * _cg_flops(T, stencil, precond=True, keep=False)
            # edge steps (A - 1 of them): the first from the zero state 18 per directed edge
            # (r 2, b 1, u' 2, v' 2, u'-v' 1, D' 4, e 4, scatter 2), later ones 26; mu_c update 4
            steps = max(0, A - 1)
            admm += KC * Ed * (18 * min(steps, 1) + 26 * max(0, steps - 1)) + steps * 4 * KC
            admm += steps * 2 * K / HW  # 0.5 / gamma (a reciprocal and a product), per image
            # stream: setup reads wbar (24 K) writes s (12 K), diag, P^-1; each CG start / step / last
            # x update streams s (12 K) and its vectors; each edge pass reads wbar, the iterates, c, mask, y
            st_setup += F32 * (2 * KC + 3 * C)
            st_cg += F32 * A * ((12 * K + 6 * KC) + (T - 1) * (12 * K + 8 * KC) + 3 * KC)
            st_admm += F32 * sum(24 * K + (s + 3) * KC + 2 * C for s in range(1, A))
        else:
            # preconditioned GLR (solvers.glr.glr_solve) on the block's graph system: s = sqrt(clamp(deg)) (2),
            # s known, s x0, keep = 1 - mask, y = mask known, b = -(keep (a y - Wn y)), xs = keep x0,
            # y + keep xs, z / s
            setup += 2 * K + 2 * KC + C + KC
            setup += KC * (stencil + 2) + KC + 2 * KC + KC
            cg += KC * _cg_flops(T, stencil, precond=False, keep=True)
            st_setup += F32 * (12 * K + 3 * C + 4 * KC)
            st_cg += F32 * ((12 * K + K + C + 4 * KC) + (T - 1) * (12 * K + K + C + 6 * KC) + 3 * KC)
    out["solver.setup"]["flops"] = setup
    out["solver.cg"]["flops"] = cg
    out["solver.admm"]["flops"] = admm
    out["solver.setup"]["stream"] = st_setup
    out["solver.cg"]["stream"] = st_cg
    out["solver.admm"]["stream"] = st_admm
    out["solver"] = {"flops": setup + cg + admm, "fused": fused, "stream": st_setup + st_cg + st_admm}

    # rest: per solve the head mix (K C mul + (K - 1) C add; none for one head at inference, whose
    # weight is exactly 1) and the re-imposed samples (compare, select); green-difference:
    # (known - g) mask, x - g (6), R = d_R + g, B = d_B + g, final select (8)
    mix = (lambda C: K * C + (K - 1) * C + 5 * K / HW) if K > 1 else (lambda C: 0)  # + the softmax of the K logits
    rest = sum(mix(C) + 2 * C for C in solves)
    if len(solves) == 2:
        rest += 6 + 8
    out["rest"]["flops"] = rest
    out["rest"]["fused"] = F32 * (K * sum(solves) + 3 * ch)

    # initial estimate, per plane: y = known m, two separable 3-tap tents (numerator and
    # denominator, 12 each), divide by the clamped denominator (2), the sparse check and its any (2),
    # the known samples re-imposed (2): 31; green-difference: G, then R-G and B-G (+ 4 + 2 + 6 glue)
    ie = 31
    calls = len(solves)  # initial_estimate calls (the any() folds n - 1 values each)
    out["estimate"]["flops"] = 3 * ie + (12 if len(solves) == 2 else 0) - calls / HW
    out["estimate"]["fused"] = F32 * 3 * ch
    if cfg.get("initial_estimate", "bilinear") != "bilinear":
        # Menon's demosaicking / the 2x bicubic as x^0: not modelled (the tent's figures above are
        # a placeholder); the dispatch count and the measured time are the real ones
        out["estimate"]["modelled"] = False
    return out


# --------------------------------------------------------------------------------------------
# labels: which part is running (for the dispatch count and the timers)
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def labelled(tracker: Tracker):
    """Wrap the functions that mark the parts (module globals and methods, restored on exit): each
    is patched from here, in the namespace its caller looks it up in; the product has no hooks."""
    from gsprestore import native
    from gsprestore.models import packed_trunk, unrolled
    from gsprestore.solvers.cg import solver as cgmod
    from gsprestore.solvers.gtv import admm as gtvmod

    targets = [
        (unrolled.UnrolledNet, "initial", "estimate"),  # any initial_estimate (tent, menon, bicubic)
        (unrolled, "green_difference_estimate", "estimate"),
        (unrolled, "initial_estimate", "estimate"),
        (unrolled.UnrolledBlock, "graph_weights", "graph"),
        # the packed trunk (lite networks): the packing, then its FeatureCNN, all "trunk"; a block's
        # head is its "cnn"
        (unrolled.UnrolledNet, "trunk_features", "trunk"),
        (packed_trunk.PackedTrunk, "forward", "trunk"),
        (packed_trunk.BlockFeatureHead, "forward", "cnn"),
        # inside graph_weights: the inner label counts; inside the trunk it stays "trunk"
        (unrolled.FeatureCNN, "features_any_layout", lambda outer: "trunk" if outer == "trunk" else "cnn"),
        (unrolled, "luma", "cnn"),  # the 2x CNN's input
        (unrolled.UnrolledBlock, "graph_system", "solver.setup"),
        (unrolled.UnrolledBlock, "solve", "solver.setup"),
        (cgmod, "cg_unrolled", "solver.cg"),
        (gtvmod, "cg_unrolled", "solver.cg"),
        (gtvmod, "admm_edge_step", "solver.admm"),
        # the names gtv_interpolate calls, patched in gtv's namespace (where it looks them up)
        (gtvmod, "mu_c_update", "solver.admm"),
        (gtvmod, "edge_term_replayed", "solver.admm"),
        (gtvmod, "node_update", "solver.admm"),
    ]
    saved = []

    def wrap(fn, label):
        def inner(*a, **k):
            tracker.enter(label(tracker.label) if callable(label) else label)
            try:
                return fn(*a, **k)
            finally:
                tracker.exit()

        return inner

    for owner, name, label in targets:
        fn = owner.__dict__[name]
        saved.append((owner, name, fn))
        setattr(owner, name, wrap(fn, label))
    call = native.Kernels._call

    def timed_call(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return call(self, *a, **k)
        finally:
            tracker.native[tracker.label] += time.perf_counter() - t0
            tracker.native_calls += 1

    native.Kernels._call = timed_call
    try:
        yield tracker
    finally:
        native.Kernels._call = call
        for owner, name, fn in saved:
            setattr(owner, name, fn)


# --------------------------------------------------------------------------------------------
# inputs, counting, timing
# --------------------------------------------------------------------------------------------


def _inputs(task: str, H: int, W: int):
    from gsprestore.methods.registry import observation
    from gsprestore.physics import sampling

    rgb = synthetic_rgb(H, W)
    y = sampling.mosaic(rgb) if task == "demosaic" else sampling.decimate(rgb)
    return observation(task, y)


def parse_opts(items) -> dict[str, Any]:
    """``["blocks=4", 'feature_trunk="packed"']`` -> ``{"blocks": 4, "feature_trunk": "packed"}``
    (JSON values; a value that is not JSON is taken as a string)."""
    opts: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--opt {item!r}: expected KEY=VALUE")
        try:
            opts[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            opts[key.strip()] = value
    return opts


def opts_label(opts: Optional[dict]) -> str:
    return " ".join(f"{k}={json.dumps(v)}" for k, v in (opts or {}).items())


def priced_model(name: str, opts: Optional[dict] = None):
    """``(model, task)`` for ``"method_task"``: the shipped network; untrained (random weights: the
    cost does not depend on them) when the method has no shipped weights (``build_model``) or when
    ``opts`` override the configuration (a shipped model's own configuration with ``opts`` over it,
    a lite one's ``build_model(method, task, **opts)``). ``model.cost_source`` says which."""
    from gsprestore.methods.weights import load_model, weights_status
    from gsprestore.models import build_model
    from gsprestore.models.unrolled import UnrolledNet

    method, task = name.split("_")
    opts = dict(opts or {})
    status = weights_status(method, task)
    if status == "shipped" and not opts:
        model = load_model(method, task)
        model.cost_source = "shipped weights"
    else:
        torch.manual_seed(0)
        if status == "shipped":
            cfg = dict(load_model(method, task).config)
            prior = cfg.pop("prior")
            cfg.pop("task", None)
            model = UnrolledNet(prior, task, **{**cfg, **opts})
            model.cost_source = f"untrained: the shipped configuration with {opts_label(opts)}"
        else:
            model = build_model(method, task, **opts)
            model.cost_source = (f"untrained (no shipped {method} {task} weights: build_model"
                                 + (f" with {opts_label(opts)})" if opts else ")"))
    return model.eval(), task


def count(name: str, H: int, W: int, opts: Optional[dict] = None) -> dict:
    """One inference forward on the PyTorch path (native kernels off), counted by part: per
    output pixel, block parts per block."""
    model, task = priced_model(name, opts)
    known, mask = _inputs(task, H, W)
    tracker = Tracker()
    with backend.use("torch"), torch.inference_mode(), labelled(tracker), Counter(tracker) as c:
        model(known, mask)
    blocks = model.config["blocks"]
    px = H * W
    res: dict[str, Any] = {"size": [H, W], "parts": {}}
    for p in PARTS:
        div = px * (1 if p in PER_FORWARD else blocks)
        res["parts"][p] = {"flops": c.flops.get(p, 0.0) / div, "bytes": c.bytes.get(p, 0.0) / div,
                           "launches": c.launches.get(p, 0) / (1 if p in PER_FORWARD else blocks)}
    res["launches_per_forward"] = sum(c.launches.values())
    res["unknown_ops"] = dict(c.unknown)
    res["top_ops"] = sorted(((k, v[0], v[1] / px, v[2] / px) for k, v in c.by_op.items()), key=lambda r: -r[3])[:8]
    return res


def count_demosaicnet(H: int = 64, W: int = 64) -> dict:
    """MACs per output pixel of the demosaicnet-shape CNN (:class:`gsprestore_lab.timing.DemosaicnetShape`,
    bench_cpu_target's yardstick; counted)."""
    torch.manual_seed(0)
    net = DemosaicnetShape().eval()
    x = torch.rand(1, 3, H, W)
    tracker = Tracker()
    with torch.inference_mode(), Counter(tracker) as c:
        net(x)
    conv = sum(v[1] for k, v in c.by_op.items() if k in ("convolution", "conv2d"))
    return {"params": sum(p.numel() for p in net.parameters()), "flops_per_px": sum(c.flops.values()) / (H * W),
            "conv_flops_per_px": conv / (H * W), "bytes_per_px": sum(c.bytes.values()) / (H * W)}


def cpu_peaks(threads: int, repeats: int = 5) -> dict:
    """Peak fp32 FLOP/s (2048^2 matmul) and memory bandwidth (64 Mi-float copy and add), best of
    ``repeats``, on ``threads`` threads."""
    torch.manual_seed(0)
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)

    def best(fn):
        fn()  # warm-up
        return best_of(fn, repeats)

    t_mm = best(lambda: torch.mm(a, b, out=c))
    m = 1 << 26  # 64 Mi floats = 256 MiB per tensor
    x, y, z = torch.rand(m), torch.rand(m), torch.empty(m)
    t_copy = best(lambda: z.copy_(x))
    t_add = best(lambda: torch.add(x, y, out=z))
    return {"threads": threads, "matmul_flops": 2 * n**3 / t_mm, "copy_bytes_per_s": 2 * 4 * m / t_copy,
            "add_bytes_per_s": 3 * 4 * m / t_add, "bytes_per_s": max(2 * 4 * m / t_copy, 3 * 4 * m / t_add),
            "note": "bytes counted as read + write (no write-allocate traffic)"}


def measure(name: str, H: int, W: int, repeats: int, opts: Optional[dict] = None) -> dict:
    """Per-part wall time of one forward with the default backend (native kernels), after a
    warm-up forward; the fastest of ``repeats`` forwards."""
    model, task = priced_model(name, opts)
    known, mask = _inputs(task, H, W)
    runs = []
    with torch.inference_mode():
        model(known, mask)  # warm-up (also faults in fresh memory)
        for _ in range(max(1, repeats)):
            tracker = Tracker()
            with labelled(tracker):
                t0 = time.perf_counter()
                model(known, mask)
                total = time.perf_counter() - t0
            parts = {p: tracker.time.get(p, 0.0) for p in PARTS}
            parts["rest"] = total - sum(v for p, v in parts.items() if p != "rest")
            runs.append({"total_s": total, "parts_s": parts, "native_s": dict(tracker.native),
                         "native_calls": tracker.native_calls})
    best = min(runs, key=lambda r: r["total_s"])
    best["all_totals_s"] = [r["total_s"] for r in runs]
    best["native"] = backend.native_available()
    best["threads"] = torch.get_num_threads()
    best["size"] = [H, W]
    return best


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------


def _floor_s(flops: float, nbytes: float, peak: float, bw: float) -> float:
    return max(flops / peak, nbytes / bw)


def model_report(name: str, H: int, W: int, Hc: int, Wc: int, peaks: Optional[dict], timed: Optional[dict],
                 counted: Optional[dict], opts: Optional[dict] = None) -> dict:
    model, task = priced_model(name, opts)
    cfg = dict(model.config)
    blocks = cfg["blocks"]
    an = analytic(cfg, H, W)
    an_c = analytic(cfg, Hc, Wc)
    rows: dict[str, dict] = {}
    for p in PARTS + ("solver",):
        r = {"flops": an[p]["flops"], "fused_bytes": an[p].get("fused"), "stream_bytes": an[p].get("stream")}
        if "macs" in an[p]:
            r["macs"] = an[p]["macs"]
        if "fused_per_layer" in an[p]:
            r["fused_per_layer_bytes"] = an[p]["fused_per_layer"]
        if counted is not None:
            if p == "solver":
                cf = sum(counted["parts"][s]["flops"] for s in SOLVER_PARTS)
                cb = sum(counted["parts"][s]["bytes"] for s in SOLVER_PARTS)
                cl = sum(counted["parts"][s]["launches"] for s in SOLVER_PARTS)
            else:
                cf, cb, cl = (counted["parts"][p][k] for k in ("flops", "bytes", "launches"))
            r.update(analytic_at_count=an_c[p]["flops"], dispatch_flops=cf, unfused_bytes=cb, launches=cl)
        rows[p] = r
    # floors: per pixel per block (trunk, estimate: per forward), seconds
    for p in FLOOR_ROWS + PER_FORWARD:
        r = rows[p]
        fb = r["fused_bytes"]
        r["intensity_fused"] = r["flops"] / fb if fb else None
        h_peak = H200["tf32_flops"] if p in CNN_PARTS else H200["fp32_flops"]
        r["h200_floor_s"] = _floor_s(r["flops"], fb, h_peak, H200["hbm_bytes_per_s"])
        r["h200_bound"] = "compute" if r["flops"] / h_peak >= fb / H200["hbm_bytes_per_s"] else "memory"
        r["h200_floor_fp32_s"] = _floor_s(r["flops"], fb, H200["fp32_flops"], H200["hbm_bytes_per_s"])
        if "unfused_bytes" in r:  # (cuDNN runs fp32 convolutions on TF32 by default)
            r["h200_floor_unfused_s"] = _floor_s(r["flops"], r["unfused_bytes"], h_peak, H200["hbm_bytes_per_s"])
        if peaks:
            r["cpu_floor_s"] = _floor_s(r["flops"], fb, peaks["matmul_flops"], peaks["bytes_per_s"])
            r["cpu_compute_s"] = r["flops"] / peaks["matmul_flops"]
            r["cpu_memory_s"] = fb / peaks["bytes_per_s"]
            r["cpu_bound"] = "compute" if r["cpu_compute_s"] >= r["cpu_memory_s"] else "memory"
            if r.get("stream_bytes"):
                r["cpu_floor_stream_s"] = _floor_s(r["flops"], r["stream_bytes"], peaks["matmul_flops"], peaks["bytes_per_s"])
            if "unfused_bytes" in r:
                r["cpu_floor_unfused_s"] = _floor_s(r["flops"], r["unfused_bytes"], peaks["matmul_flops"], peaks["bytes_per_s"])
    if timed is not None:
        px = timed["size"][0] * timed["size"][1]
        for p in PARTS:
            div = px * (1 if p in PER_FORWARD else blocks)
            rows[p]["measured_s"] = timed["parts_s"][p] / div
            rows[p]["native_s"] = timed["native_s"].get(p, 0.0) / div
        rows["solver"]["measured_s"] = sum(rows[s]["measured_s"] for s in SOLVER_PARTS)
        rows["solver"]["native_s"] = sum(rows[s]["native_s"] for s in SOLVER_PARTS)
    # totals per block and per forward
    tot: dict[str, Any] = {}
    tot["block_flops"] = sum(rows[p]["flops"] for p in FLOOR_ROWS)
    tot["block_fused_bytes"] = sum(rows[p]["fused_bytes"] for p in FLOOR_ROWS)

    def per_forward(key):
        return sum(rows[p][key] for p in PER_FORWARD)

    tot["forward_flops"] = blocks * tot["block_flops"] + per_forward("flops")
    tot["forward_fused_bytes"] = blocks * tot["block_fused_bytes"] + per_forward("fused_bytes")
    # multiply-adds of the CNN parts per output pixel: the trunk (once) and the per-block CNN / head
    tot["block_cnn_macs"] = rows["cnn"]["macs"]
    tot["trunk_macs"] = rows["trunk"]["macs"]
    tot["forward_cnn_macs"] = blocks * rows["cnn"]["macs"] + rows["trunk"]["macs"]
    tot["params"] = model.num_params()
    if counted is not None:
        tot["block_unfused_bytes"] = sum(rows[p]["unfused_bytes"] for p in FLOOR_ROWS)
        tot["forward_unfused_bytes"] = blocks * tot["block_unfused_bytes"] + per_forward("unfused_bytes")
        tot["block_dispatch_flops"] = sum(rows[p]["dispatch_flops"] for p in FLOOR_ROWS)
        tot["launches_per_forward"] = counted["launches_per_forward"]
    for key in ("h200_floor_s", "h200_floor_fp32_s", "h200_floor_unfused_s", "cpu_floor_s", "cpu_floor_unfused_s",
                "measured_s"):
        if all(key in rows[p] for p in FLOOR_ROWS + PER_FORWARD):
            tot["block_" + key] = sum(rows[p][key] for p in FLOOR_ROWS)
            tot["forward_" + key] = blocks * tot["block_" + key] + per_forward(key)
    for key in ("h200_floor_s", "h200_floor_fp32_s", "h200_floor_unfused_s"):
        if "forward_" + key in tot:
            tot["h200_mp_per_s_" + key[len("h200_floor_"):-2] if key != "h200_floor_s" else "h200_mp_per_s"] = \
                1e-6 / tot["forward_" + key]
    if counted is not None:
        # launch floor on a 24-MP image: the unfused path's launches (size-independent on a GPU,
        # where the stencil loops run in one band) at ~4 us each
        t24 = 24e6 * tot["forward_h200_floor_unfused_s"] + tot["launches_per_forward"] * H200["launch_s"]
        tot["h200_mp_per_s_unfused_24mp_with_launches"] = 24.0 / t24
        # what fusing buys on the H200: the listed parts at their fused bytes, the others as counted
        scen = {}
        for label, fused_parts in (("unfused", ()), ("solver fused", ("solver",)),
                                   ("graph + solver fused", ("graph", "solver")),
                                   ("all parts fused", FLOOR_ROWS + PER_FORWARD)):
            t = 0.0
            for p in FLOOR_ROWS + PER_FORWARD:
                r = rows[p]
                nb = r["fused_bytes"] if p in fused_parts else r["unfused_bytes"]
                peak = H200["tf32_flops"] if p in CNN_PARTS else H200["fp32_flops"]
                t += (1 if p in PER_FORWARD else blocks) * _floor_s(r["flops"], nb, peak, H200["hbm_bytes_per_s"])
            scen[label] = {"forward_s_per_px": t, "mp_per_s": 1e-6 / t}
        # this tree on CUDA: the fused Triton kernels (graph_triton: the weights from projected
        # features, after one projection matmul; cg_triton: a kernel per CG step; admm_triton: the
        # replayed edge term) at their fused / streamed bytes, every other part as counted
        t = 0.0
        for p in PARTS:
            r = rows[p]
            if p == "graph":
                K, Fd = cfg["heads"], cfg["features"]
                nb = r["fused_bytes"] + F32 * 2 * K * Fd  # + the projection g = A^T f (reads f, writes g)
            elif p in ("solver.cg", "solver.admm"):
                nb = r["stream_bytes"]
            else:
                nb = r["unfused_bytes"]
            peak = H200["tf32_flops"] if p in CNN_PARTS else H200["fp32_flops"]
            t += (1 if p in PER_FORWARD else blocks) * _floor_s(r["flops"], nb, peak, H200["hbm_bytes_per_s"])
        scen["this tree (Triton: graph, CG, ADMM replay)"] = {"forward_s_per_px": t, "mp_per_s": 1e-6 / t}
        tot["h200_scenarios"] = scen
    if timed is not None:
        tot["measured_forward_s"] = timed["total_s"]
        tot["measured_mp_per_s"] = timed["size"][0] * timed["size"][1] / timed["total_s"] / 1e6
    return {"model": name, "opts": dict(opts or {}), "label": (name + " " + opts_label(opts)).strip(),
            "weights": model.cost_source, "config": cfg, "size": [H, W], "count_size": [Hc, Wc], "rows": rows, "totals": tot,
            "edges_per_pixel": undirected_edges_per_pixel(H, W), "timed": timed,
            "counted": None if counted is None else {k: counted[k] for k in ("unknown_ops", "top_ops", "launches_per_forward")}}


def _fmt(v, unit=""):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e4:
        s = f"{v / 1e3:.1f}k"
    elif a >= 100:
        s = f"{v:.0f}"
    elif a >= 1:
        s = f"{v:.1f}"
    elif a == 0:
        s = "0"
    else:
        s = f"{v:.3f}"
    return s + unit


def report_lines(rep: dict) -> list[str]:
    """The report of one model (:func:`model_report`) as text lines."""
    rows, tot, cfg = rep["rows"], rep["totals"], rep["config"]
    lines = []
    H, W = rep["size"]
    Hc, Wc = rep["count_size"]
    packed = cfg.get("feature_trunk", "per-block") == "packed"
    lines.append(f"\n== {rep['label']}  (blocks {cfg['blocks']}, {cfg['heads']} heads x {cfg['features']}, "
          + (f"packed trunk {cfg['width']} x {cfg['cnn_layers']} at half resolution + 1x1 heads"
             if packed else f"per-block CNN {cfg['width']} x {cfg['cnn_layers']}")
          + f", cg_iters {cfg['cg_iters']}" + (f", admm_iters {cfg['admm_iters']}" if cfg["prior"] == "gtv" else "")
          + f", signal {cfg.get('signal', 'rgb')}; {tot['params']:,} params; {rep['edges_per_pixel']:.3f} "
          f"undirected edges/px at {W}x{H})")
    lines.append(f"weights: {rep['weights']}")
    lines.append(f"per output pixel, per block (trunk, estimate: per forward). FLOPs analytic at {W}x{H}; dispatch = PyTorch path "
          f"counted at {Wc}x{Hc} (analytic there in brackets); bytes: unfused (counted), fused floor, solver streamed "
          "(estimate); times in ns/px; floors: c compute-bound, m memory-bound (fused bytes; H200: CNN on TF32)")
    hdr = (f"{'part':14} {'FLOP':>8} {'dispatch':>17} {'B unfused':>9} {'B fused':>8} {'B stream':>8} "
           f"{'CPU floor':>9} {'H200 floor':>10} {'measured':>9} {'(native)':>8} {'meas/floor':>10}")
    lines.append(hdr)
    for p in ("cnn", "graph", "solver", "solver.setup", "solver.cg", "solver.admm", "rest", "trunk", "estimate"):
        r = rows[p]
        if p == "trunk" and not packed:
            continue  # the paper's networks have no trunk (0)
        disp = "-"
        if "dispatch_flops" in r:
            disp = f"{_fmt(r['dispatch_flops'])} [{_fmt(r['analytic_at_count'])}]"
        cpu_f = r.get("cpu_floor_s")
        meas = r.get("measured_s")
        ratio = (meas / cpu_f) if (meas is not None and cpu_f) else None
        name = ("  " + p[len("solver."):]) if p.startswith("solver.") else p
        if p == "estimate" and cfg.get("initial_estimate", "bilinear") != "bilinear":
            name = "estimate*"
        lines.append(f"{name:14} {_fmt(r['flops']):>8} {disp:>17} {_fmt(r.get('unfused_bytes')):>9} "
              f"{_fmt(r.get('fused_bytes')):>8} {_fmt(r.get('stream_bytes')):>8} "
              f"{_fmt(None if cpu_f is None else cpu_f * 1e9, ' ' + r.get('cpu_bound', ' ')[0]):>9} "
              f"{_fmt(None if 'h200_floor_s' not in r else r['h200_floor_s'] * 1e9, ' ' + r.get('h200_bound', ' ')[0]):>10} "
              f"{_fmt(None if meas is None else meas * 1e9):>9} "
              f"{_fmt(None if meas is None else r['native_s'] * 1e9):>8} {_fmt(ratio, 'x'):>10}")
    b_meas = tot.get("block_measured_s")
    lines.append(f"{'block':14} {_fmt(tot['block_flops']):>8} {_fmt(tot.get('block_dispatch_flops')):>17} "
          f"{_fmt(tot.get('block_unfused_bytes')):>9} {_fmt(tot['block_fused_bytes']):>8} {'':>8} "
          f"{_fmt(tot['block_cpu_floor_s'] * 1e9 if 'block_cpu_floor_s' in tot else None):>9} "
          f"{_fmt(tot['block_h200_floor_s'] * 1e9):>10} {_fmt(None if b_meas is None else b_meas * 1e9):>9}")
    f_meas = tot.get("forward_measured_s")
    lines.append(f"{'forward':14} {_fmt(tot['forward_flops']):>8} {'':>17} {_fmt(tot.get('forward_unfused_bytes')):>9} "
          f"{_fmt(tot['forward_fused_bytes']):>8} {'':>8} "
          f"{_fmt(tot['forward_cpu_floor_s'] * 1e9 if 'forward_cpu_floor_s' in tot else None):>9} "
          f"{_fmt(tot['forward_h200_floor_s'] * 1e9):>10} {_fmt(None if f_meas is None else f_meas * 1e9):>9}")
    lines.append("  CNN MACs/px: " + (f"trunk {_fmt(tot['trunk_macs'])} (once), head {_fmt(tot['block_cnn_macs'])} per block"
                                if packed else f"{_fmt(tot['block_cnn_macs'])} per block")
          + f" -> {_fmt(tot['forward_cnn_macs'])} per forward; total {_fmt(tot['forward_flops'])} FLOP/px per forward"
          + (f"; measured {f_meas * 1e9:.0f} ns/px per forward = {tot['measured_mp_per_s']:.3f} MP/s "
             f"({tot['measured_forward_s']:.2f} s at {W}x{H}, {rep['timed']['threads']} threads)"
             if f_meas is not None else ""))
    if "forward_cpu_floor_s" in tot and f_meas is not None:
        lines.append(f"  CPU: forward measured {tot['measured_forward_s']:.2f} s at {W}x{H}; floor (fused bytes) "
              f"{tot['forward_cpu_floor_s'] * H * W:.3f} s"
              + (f", floor with the unfused bytes {tot['forward_cpu_floor_unfused_s'] * H * W:.3f} s"
                 if "forward_cpu_floor_unfused_s" in tot else ""))
    lines.append(f"  H200 floors (ns/px per forward): fused, CNN on TF32 {tot['forward_h200_floor_s'] * 1e9:.2f} "
          f"({tot['h200_mp_per_s']:.0f} MP/s); fused, all fp32 {tot['forward_h200_floor_fp32_s'] * 1e9:.2f} "
          f"({tot['h200_mp_per_s_fp32']:.0f} MP/s)"
          + (f"; unfused PyTorch bytes {tot['forward_h200_floor_unfused_s'] * 1e9:.1f} "
             f"({tot['h200_mp_per_s_unfused']:.1f} MP/s; 24 MP with {tot['launches_per_forward']} launches x 4 us: "
             f"{tot['h200_mp_per_s_unfused_24mp_with_launches']:.1f} MP/s)" if "forward_h200_floor_unfused_s" in tot else ""))
    if "h200_scenarios" in tot:
        lines.append("  H200 MP/s floor when fusing (CNN on TF32; the other parts' bytes as counted): "
              + "; ".join(f"{k} {v['mp_per_s']:.1f}" for k, v in tot["h200_scenarios"].items()))
    if cfg.get("initial_estimate", "bilinear") != "bilinear":
        lines.append(f"  * initial_estimate {cfg['initial_estimate']!r}: its analytic FLOPs / fused bytes are the tent's "
              "(not modelled); the dispatch count and the measured time are its own")
    if rep.get("counted") and rep["counted"]["unknown_ops"]:
        lines.append(f"  operators without a FLOP formula (counted as 0): {rep['counted']['unknown_ops']}")
    return lines


def summary_lines(reps: list[dict]) -> list[str]:
    """One row per model / candidate; ratios to the first row (measured time, and FLOPs)."""
    lines = []
    timed = all(r["totals"].get("measured_forward_s") for r in reps)
    H, W = reps[0]["size"]
    lines.append(f"\n== summary (per output pixel, per forward; measured at {W}x{H}; x: ratio to the first row)")
    w = max([len("model / candidate")] + [len(r["label"]) for r in reps])
    lines.append(f"{'model / candidate':{w}} {'params':>8} {'CNN MAC/px':>10} {'FLOP/px':>8} {'FLOP x':>6}"
          + (f" {'s/forward':>9} {'ns/px':>7} {'MP/s':>7} {'time x':>6}" if timed else ""))
    t0, f0 = reps[0]["totals"].get("measured_forward_s"), reps[0]["totals"]["forward_flops"]
    for r in reps:
        t = r["totals"]
        line = (f"{r['label']:{w}} {t['params']:>8,} {_fmt(t['forward_cnn_macs']):>10} {_fmt(t['forward_flops']):>8} "
                f"{t['forward_flops'] / f0:>6.2f}")
        if timed:
            line += (f" {t['measured_forward_s']:>9.3f} {t['forward_measured_s'] * 1e9:>7.0f} "
                     f"{t['measured_mp_per_s']:>7.3f} {t['measured_forward_s'] / t0:>6.2f}")
        lines.append(line)
    return lines


# --------------------------------------------------------------------------------------------
# pricing a list of models
# --------------------------------------------------------------------------------------------


def jobs(models: str, opts=(), candidates=()) -> list[tuple[str, dict[str, Any]]]:
    """The ``(model, opts)`` to price: every model of the comma-separated ``models`` with the
    ``KEY=VALUE`` items ``opts`` (:func:`parse_opts`), then each candidate ``MODEL[:KEY=VALUE,...]``
    with its own keys over ``opts``. SystemExit names a model not in :data:`MODELS`."""
    common = parse_opts(opts)
    out = [(m, dict(common)) for m in models.split(",") if m]
    for cand in candidates:
        m, _, kv = cand.partition(":")
        out.append((m.strip(), {**common, **parse_opts([i for i in kv.split(",") if i.strip()])}))
    for n, _ in out:
        if n not in MODELS:
            raise SystemExit(f"unknown model {n!r}; expected some of {','.join(MODELS)}")
    return out


def price(priced: list[tuple[str, dict[str, Any]]], *, size: tuple[int, int] = (512, 768),
          count_size: tuple[int, int] = (128, 128), counted: bool = True, timed: bool = True,
          peaks: Optional[dict] = None, repeats: int = 1, threads: int = 2, command: str = "",
          out: Optional[IO[str]] = None) -> dict:
    """Price each ``(model, opts)`` of ``priced`` (:func:`jobs`): the analytic figures at ``size``
    (H, W), the operator count at ``count_size`` (unless not ``counted``), the timed forwards at
    ``size`` (unless not ``timed``, ``repeats`` each) and the floors on the H200 and on this CPU.
    ``peaks``: the CPU's peak FLOP/s and bandwidth (:func:`cpu_peaks`'s keys ``matmul_flops`` and
    ``bytes_per_s``); measured on ``threads`` threads when not given and ``timed``, none
    otherwise (no CPU floors). The report is written to ``out`` as it comes (each model's
    :func:`report_lines`, then :func:`summary_lines` when there are several). Returns every figure:
    ``{"h200", "cpu_peaks", "demosaicnet_shape", "models": [model_report, ...], "torch", "date",
    "command"}``."""

    def say(lines: list[str]) -> None:
        if out is not None:
            out.write("".join(line + "\n" for line in lines))
            out.flush()

    H, W = size
    Hc, Wc = count_size
    if peaks is None and timed:
        peaks = cpu_peaks(threads)
        say([f"CPU peaks ({threads} threads): fp32 matmul {peaks['matmul_flops'] / 1e9:.1f} GFLOP/s; "
             f"copy {peaks['copy_bytes_per_s'] / 1e9:.1f} GB/s, add {peaks['add_bytes_per_s'] / 1e9:.1f} GB/s "
             f"(read + write)"])
    say([f"H200 ({H200['source']}): fp32 {H200['fp32_flops'] / 1e12:.0f} TFLOP/s, TF32 tensor "
         f"{H200['tf32_flops'] / 1e12:.0f} dense, HBM {H200['hbm_bytes_per_s'] / 1e12:.1f} TB/s achievable "
         f"({H200['hbm_peak_bytes_per_s'] / 1e12:.1f} peak)"])
    dn = count_demosaicnet()
    say([f"demosaicnet-shape CNN (bench_cpu_target.py, {dn['params']:,} params): {dn['flops_per_px'] / 1e3:.1f}k FLOP/px "
         f"({dn['conv_flops_per_px'] / 2e3:.1f}k conv MACs/px), {dn['bytes_per_px'] / 1e3:.1f} kB/px unfused"])
    result: dict[str, Any] = {"h200": H200, "cpu_peaks": peaks, "demosaicnet_shape": dn, "models": [],
                              "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "command": command}
    for n, o in priced:
        counts = count(n, Hc, Wc, o) if counted else None
        times = measure(n, H, W, repeats, o) if timed else None
        rep = model_report(n, H, W, Hc, Wc, peaks, times, counts, o)
        say(report_lines(rep))
        result["models"].append(rep)
    if len(result["models"]) > 1:
        say(summary_lines(result["models"]))
    return result
