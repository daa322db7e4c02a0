"""The fused Triton kernels, run by Triton's interpreter on CPU tensors (no GPU needed): the
unrolled CG (gsprestore/solvers/cg/triton_kernels.py) against the PyTorch recurrence, the learned graphs
(gsprestore/graph/triton_kernels.py) against the PyTorch formulas of eqs. 27-28, the replayed ADMM edge
term (gsprestore/solvers/gtv/triton_kernels.py) against the stateful edge steps, and whole uGTV / uGLR
forwards in which every CG solve, graph and edge term goes through them (the dispatch a CUDA
forward takes).

Skipped where Triton is not installed (the CPU wheel of PyTorch does not bring it:
``pip install triton`` adds it)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")

SCRIPT = r"""
import json, torch
from gsprestore.core import backend
from gsprestore.graph import operators as G, triton_kernels as GT
from gsprestore.physics import sampling
from gsprestore.models import build_model
from gsprestore.solvers.cg import solver as cg, triton_kernels as cg_triton
from gsprestore.solvers.gtv import edge_step as admm_edge, triton_kernels as admm_triton
from gsprestore.physics.tasks import observation

torch.manual_seed(0)
res = {"kernel": []}

def weights(B, K, H, W):
    w = torch.rand(B, K, 12, H, W)
    for kk, (dy, dx) in enumerate(G.OFFSETS):  # zero on edges that leave the image
        if dy > 0: w[..., kk, H - dy:, :] = 0
        if dx > 0: w[..., kk, :, W - dx:] = 0
        if dx < 0: w[..., kk, :, :-dx] = 0
    return w

# (B, K, KW, C, H, W, keep, pre): one and several 512-pixel blocks, a shared graph, no keep / P
for B, K, KW, C, H, W, with_keep, with_pre in [(1, 2, 2, 2, 9, 11, True, True), (2, 3, 1, 1, 23, 29, False, True),
                                                  (1, 1, 1, 3, 5, 130, True, False), (1, 2, 2, 1, 7, 7, False, False)]:
    w = weights(B, KW, H, W)
    diag = G.degree(w) + 0.5
    keep = (torch.rand(B, 1, C, H, W) > 0.3).float() if with_keep else None
    pre = 1 / diag if with_pre else None
    b = torch.randn(B, K, C, H, W)
    x0 = torch.randn(B, 1, C, H, W)
    al, be = torch.rand(5, K) * 0.5, torch.rand(5, K) * 0.3
    with torch.no_grad():
        with backend.use("torch"):
            ref = cg.cg_unrolled(cg.StencilOperator(w, diag, keep), b, x0, al, be, precond=pre)
        out = cg_triton.cg_unrolled_triton(w, diag, keep, b, x0, al, be, precond=pre)
    res["kernel"].append([float((out - ref).abs().max()), float(ref.abs().max())])

res["graphs"] = []
for B, K, F, H, W in [(1, 2, 3, 9, 11), (1, 1, 12, 3, 90), (1, 1, 2, 1, 5)]:  # 3 x 90: two 256-pixel blocks
    g = torch.randn(B, K, F, H, W) * 0.5
    with torch.no_grad(), backend.use("torch"):
        w_ref = G.edge_weights(g, None)
        rw_ref = G.random_walk_weights_from_distances(G.edge_distances(g, None))
    w, rw = GT.edge_weights_from_projected(g), GT.random_walk_weights_from_projected(g)
    res["graphs"].append([float((w - w_ref).abs().max()), float((rw - rw_ref).abs().max()),
                          float((rw.sum(2) - 1).abs().max())])

res["replay"] = []
for B, K, KW, C, H, W, S in [(1, 2, 2, 2, 9, 11, 1), (1, 3, 1, 1, 3, 180, 2), (2, 1, 1, 3, 5, 7, 4)]:
    wbar = G.random_walk_weights(G.edge_weights(torch.randn(B, KW, 3, H, W), torch.eye(3) * 0.5))
    xs = [torch.randn(B, K, C, H, W) for _ in range(S)]
    gamma, base = torch.rand(K) * 5 + 1, torch.randn(B, K, C, H, W)
    with torch.no_grad(), backend.use("torch"):  # the stateful steps from the zero state
        D = u = v = None
        for x in xs:
            D, u, v, n = admm_edge._edge_step_forward(x, wbar, D, u, v, admm_edge.gamma_tensor(gamma, x), inplace=False)
    out = admm_triton.edge_term_replayed_triton(xs, wbar, gamma, base=base)
    res["replay"].append([float(((out - base) - n).abs().max()), float(n.abs().max())])

calls = {"cg": 0, "graph": 0, "replay": 0}
def spy(module, name, key):
    real = getattr(module, name)
    def wrapped(*a, **k):
        calls[key] += 1
        return real(*a, **k)
    setattr(module, name, wrapped)
spy(cg_triton, "cg_unrolled_triton", "cg")
spy(GT, "edge_weights_from_projected", "graph")
spy(GT, "random_walk_weights_from_projected", "graph")
spy(admm_triton, "edge_term_replayed_triton", "replay")
gt = torch.rand(1, 3, 12, 14)
known, mask = observation("demosaic", sampling.mosaic(gt))
res["models"] = {}
for method in ("ugtv", "uglr"):
    model = build_model(method, "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=3,
                        signal="green-difference", **(dict(admm_iters=2) if method == "ugtv" else {})).eval()
    calls.update(cg=0, graph=0, replay=0)
    with torch.no_grad():
        fused = model(known, mask)
        n = dict(calls)
        with backend.use("torch"):
            plain = model(known, mask)
    res["models"][method] = {"calls": n, "diff": float((fused - plain).abs().max()),
                             "moved": float((plain - known).abs().max())}
# a Triton that cannot compile: each kernel failing in turn, the forward still equals the
# PyTorch path (the fallback), and the fused kernels are switched off for the rest of the run
res["fallback"] = {}
def boom(*a, **k):
    raise RuntimeError("no compiler here")
for module, name in ((GT, "random_walk_weights_from_projected"), (cg_triton, "cg_unrolled_triton"),
                     (admm_triton, "edge_term_replayed_triton")):
    model = build_model("ugtv", "demosaic", blocks=2, heads=2, features=3, width=6, cg_iters=3,
                        signal="green-difference", admm_iters=2).eval()
    saved = getattr(module, name)
    setattr(module, name, boom)
    backend.settings.gpu_fused = 1
    with torch.no_grad():
        fused = model(known, mask)
        with backend.use("torch"):
            plain = model(known, mask)
    res["fallback"][name] = {"diff": float((fused - plain).abs().max()), "gpu_fused": backend.settings.gpu_fused}
    setattr(module, name, saved)
print("RESULT" + json.dumps(res))
"""


def _interpreted(script: str):
    """Run ``script`` in a child process under Triton's interpreter (CPU tensors take the fused
    paths, the native kernels off): (the finished process, the JSON it printed after RESULT)."""
    env = dict(os.environ, TRITON_INTERPRET="1", GSPRESTORE_NATIVE="0", GSPRESTORE_TRITON="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.mark.slow
def test_triton_kernels_equal_the_pytorch_path_and_serve_the_models():
    proc, res = _interpreted(SCRIPT)
    for diff, scale in res["kernel"]:
        assert scale > 0.1 and diff <= 2e-5 * scale, (diff, scale)
    for w_diff, rw_diff, row_sum in res["graphs"]:
        assert w_diff <= 1e-6 and rw_diff <= 1e-6 and row_sum <= 1e-6, res["graphs"]
    assert set(res["fallback"]) == {"random_walk_weights_from_projected", "cg_unrolled_triton",
                                    "edge_term_replayed_triton"}
    for name, r in res["fallback"].items():
        assert r["diff"] <= 1e-5 and r["gpu_fused"] == 0, (name, r)
        assert "the fused Triton" in proc.stderr  # said in one line
    for diff, scale in res["replay"]:
        assert scale > 0.1 and diff <= 2e-6 * scale, res["replay"]
    for method, r in res["models"].items():
        # every CG solve of the forward went through the kernel: 2 blocks x 2 solves (G, then
        # R - G and B - G), times 2 ADMM x-updates for uGTV; each block's graph; uGTV's edge
        # term between its two x-updates, once per solve
        want = {"cg": 8, "graph": 2, "replay": 4} if method == "ugtv" else {"cg": 4, "graph": 2, "replay": 0}
        assert r["calls"] == want, (method, r)
        assert r["moved"] > 0.01 and r["diff"] <= 1e-5, (method, r)


#: random undirected weights (B, K, 12, H, W) in [0.1, 1.1), 0 on edges that leave the image (for
#: the child scripts below; needs torch and gsprestore.graph.operators as G)
WEIGHTS = r"""
def weights(B, K, H, W):
    w = torch.rand(B, K, 12, H, W) + 0.1
    for kk, (dy, dx) in enumerate(G.OFFSETS):  # zero on edges that leave the image
        if dy > 0: w[..., kk, H - dy:, :] = 0
        if dx > 0: w[..., kk, :, W - dx:] = 0
        if dx < 0: w[..., kk, :, :-dx] = 0
    return w
"""

TRAIN_SCRIPT = r"""
import json, torch
from gsprestore.core import backend
from gsprestore.graph import operators as G
from gsprestore.solvers.cg import adjoint as cg_adjoint, solver as cg

torch.manual_seed(0)
""" + WEIGHTS + r"""
calls = []
real = cg_adjoint._backward_triton
cg_adjoint._backward_triton = lambda *a: calls.append(1) or real(*a)
out = []
# (B, K, KW, C, H, W, keep, P^-1, one step size per head): two pixel blocks, a shared graph,
# three channels, no keep / P
for B, K, KW, C, H, W, with_keep, with_pre, per_head in [(1, 2, 2, 2, 9, 11, True, True, True),
                                                          (2, 2, 1, 1, 23, 29, False, True, False),
                                                          (1, 1, 1, 3, 6, 7, True, False, True)]:
    w = weights(B, KW, H, W)
    diag = G.degree(w.expand(B, K, 12, H, W)) + 0.5
    keep = (torch.rand(B, 1, C, H, W) > 0.3).float() if with_keep else None
    vals = dict(w=w, diag=diag, pre=1 / diag if with_pre else None, b=torch.randn(B, K, C, H, W),
                x0=torch.randn(B, 1, C, H, W), al=torch.rand(*((4, K) if per_head else (4,))) * 0.5,
                be=torch.rand(*((4, K) if per_head else (4,))) * 0.3)
    names = [n for n, v in vals.items() if v is not None]
    res = {}
    # the Triton training kernels (float32), plain autograd through every CG step in float64 (the
    # reference) and in float32 (what float32 resolves)
    for label, dtype, adjoint in (("triton", torch.float32, 1), ("plain64", torch.float64, 0),
                                  ("plain32", torch.float32, 0)):
        leaves = {n: vals[n].to(dtype).clone().requires_grad_(True) for n in names}
        with backend.configure(cg_adjoint=adjoint):
            x = cg.cg_unrolled(cg.StencilOperator(leaves["w"], leaves["diag"], None if keep is None else keep.to(dtype)),
                               leaves["b"], leaves["x0"], leaves["al"], leaves["be"], precond=leaves.get("pre"))
        seed = torch.linspace(-1, 1, x.numel(), dtype=dtype).reshape(x.shape)
        grads = torch.autograd.grad((x * seed).sum(), [leaves[n] for n in names])
        res[label] = dict(zip(names, (g.double() for g in grads)), x=x.detach().double())
    out.append({n: [float((res[l][n] - ref).norm() / ref.norm()) for l in ("triton", "plain32")]
                for n, ref in res["plain64"].items()})
n_calls = len(calls)
# a Triton whose backward kernel cannot compile: the PyTorch adjoint takes over (said once) and
# the fused kernels are off for the rest of the run
from gsprestore.solvers.cg import triton_adjoint as cg_adjoint_triton
def boom(*a, **k):
    raise RuntimeError("no compiler here")
cg_adjoint_triton.backward = boom
backend.settings.gpu_fused = 1
w = weights(1, 2, 8, 9); diag = G.degree(w) + 0.5
b, x0 = torch.randn(1, 2, 1, 8, 9), torch.randn(1, 1, 1, 8, 9)
grads = []
for adjoint in (1, 0):
    ww = w.clone().requires_grad_(True)
    with backend.configure(cg_adjoint=adjoint):
        x = cg.cg_unrolled(cg.StencilOperator(ww, diag, None), b, x0, torch.full((3,), 0.4), torch.full((3,), 0.2))
    grads.append(torch.autograd.grad(x.sum(), ww)[0])
fallback = {"diff": float((grads[0] - grads[1]).abs().max() / grads[1].abs().max()), "gpu_fused": backend.settings.gpu_fused}
print("RESULT" + json.dumps({"calls": n_calls, "errors": out, "fallback": fallback}))
"""


@pytest.mark.slow
def test_triton_training_kernels_give_the_adjoint_gradients():
    """The unrolled CG's training form on a GPU (:mod:`gsprestore.solvers.cg.triton_adjoint`: the
    forward recording every step, the adjoint recurrence one kernel per step), run in Triton's
    interpreter: used for every solve (counted), and its float32 values and gradients of every
    input as close to plain float64 autograd as plain float32 autograd's own."""
    proc, res = _interpreted(TRAIN_SCRIPT)
    assert res["calls"] == 3
    assert res["fallback"]["diff"] <= 1e-5 and res["fallback"]["gpu_fused"] == 0, res["fallback"]
    assert "the fused Triton CG training kernel failed" in proc.stderr
    for case in res["errors"]:
        assert set(case) >= {"w", "diag", "b", "x0", "al", "be", "x"}, case
        for name, (triton_err, plain32_err) in case.items():
            assert triton_err <= 3 * plain32_err + 2e-6, (name, case)


def test_gpu_fused_path_is_refused_for_cpu_tensors_without_the_interpreter(monkeypatch):
    import torch

    from gsprestore.core import backend

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    t = torch.zeros(2)
    assert not backend.gpu_fused_usable(t)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert backend.gpu_fused_usable(t)
    assert not backend.gpu_fused_usable(t.double())  # float32 only
    with backend.configure(gpu_fused=0):
        assert not backend.gpu_fused_usable(t)
    with backend.use("torch"):
        assert not backend.gpu_fused_usable(t)
    monkeypatch.setenv("GSPRESTORE_TRITON", "0")
    assert not backend.gpu_fused_usable(t)


EDGE_SCRIPT = r"""
import json, torch
from gsprestore.core import backend
from gsprestore.graph import operators as G
from gsprestore.solvers.gtv import admm as gtv, triton_adjoint as AT

torch.manual_seed(0)
def weights(B, K, H, W):
    # random-walk weights of the 24 directed edges (tail p, head p + o), 0 on edges leaving the image
    w = torch.rand(B, K, 24, H, W) + 0.1
    ii, jj = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    for j, (dy, dx) in enumerate(list(G.OFFSETS) + [(-dy, -dx) for dy, dx in G.OFFSETS]):
        w[..., j, :, :] *= ((ii + dy >= 0) & (ii + dy < H) & (jj + dx >= 0) & (jj + dx < W))
    return w

def rel(res):
    return {k: [float((res[l][k] - ref).norm() / ref.norm()) for l in ("triton", "plain32")] for k, ref in res["plain64"].items()}

out = {"edge": [], "calls": 0}
real = AT._EdgeTerm.apply
def counted(*a):
    out["calls"] += 1
    return real(*a)
AT._EdgeTerm.apply = counted
# the op alone: (B, K, KW, C, H, W, S, gamma per head): two pixel blocks (17 x 16), a shared graph,
# iterates shared by the heads (K = 1) and not, 1 and 2 edge steps (the state replayed in registers)
for B, K, KW, C, H, W, S, per_head in [(1, 2, 1, 1, 17, 16, 1, False), (1, 2, 2, 2, 5, 6, 2, True)]:
    vals = dict(w=weights(B, KW, H, W), g=torch.rand(1, K, 1, 1, 1) * 5 + 2 if per_head else torch.full((1, 1, 1, 1, 1), 6.0))
    for s in range(S):
        vals[f"x{s}"] = torch.randn(B, K if s % 2 == 0 else 1, C, H, W) * 0.3
    res = {}
    for label, dtype, fused in (("triton", torch.float32, True), ("plain64", torch.float64, False), ("plain32", torch.float32, False)):
        lv = {k: v.to(dtype).clone().requires_grad_(True) for k, v in vals.items()}
        xs = [lv[f"x{s}"] for s in range(S)]
        if fused:
            n = AT.edge_term(xs, lv["w"], lv["g"])
        else:
            with backend.use("torch"):
                n = AT._stateful([x.expand(B, K, C, H, W) for x in xs], lv["w"], lv["g"])
        seed = torch.linspace(-1, 1, n.numel(), dtype=dtype).reshape(n.shape)
        res[label] = dict(zip(lv, (g.double() for g in torch.autograd.grad((n * seed).sum(), list(lv.values())))),
                          n=n.detach().double())
    out["edge"].append(rel(res))
# inside the GTV solver (3 ADMM iterations: edge terms of 1 and 2 steps), with learned steps and
# per-head gamma, against the PyTorch path: every input's gradient
B, K, C, H, W = 1, 2, 1, 5, 5
vals = dict(w=weights(B, K, H, W) * 0.5, known=torch.rand(B, 1, C, H, W), g=torch.tensor([3.0, 8.0]),
            al=torch.rand(2, 2) * 0.5 + 0.2, be=torch.rand(2, 2) * 0.3)
mask = (torch.rand(B, 1, C, H, W) > 0.5).float()
res = {}
for label, dtype, fused in (("triton", torch.float32, True), ("plain64", torch.float64, False), ("plain32", torch.float32, False)):
    lv = {k: v.to(dtype).clone().requires_grad_(True) for k, v in vals.items()}
    with (backend.configure(gpu_fused=1) if fused else backend.use("torch")):
        x = gtv.gtv_interpolate(lv["w"], lv["known"] * mask.to(dtype), mask.to(dtype), gamma=lv["g"], admm_iters=3,
                                cg_iters=2, cg=("unrolled", lv["al"], lv["be"]), precondition=True)
    seed = torch.linspace(-1, 1, x.numel(), dtype=dtype).reshape(x.shape)
    res[label] = dict(zip(lv, (g.double() for g in torch.autograd.grad((x * seed).sum(), list(lv.values())))),
                      x=x.detach().double())
out["solver"] = rel(res)
out["calls_fused"] = out["calls"]
# a Triton whose kernels cannot compile: the stateful PyTorch steps take over (said once) and
# the fused kernels are off for the rest of the run; forward, then backward
def boom(*a, **k):
    raise RuntimeError("no compiler here")
out["fallback"] = {}
w, g = weights(1, 2, 5, 6), torch.tensor([[[[[4.0]]]]]).requires_grad_(True)
xs = [torch.randn(1, 2, 1, 5, 6, requires_grad=True) for _ in range(2)]
with backend.use("torch"):
    ref = torch.autograd.grad(AT._stateful(xs, w, g).square().sum(), [g, *xs])
for name in ("edge_term_replayed_triton", "backward"):
    saved = getattr(AT, name)
    setattr(AT, name, boom)
    backend.settings.gpu_fused = 1
    got = torch.autograd.grad(AT.edge_term(xs, w, g).square().sum(), [g, *xs])
    out["fallback"][name] = {"diff": max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got, ref)),
                             "gpu_fused": backend.settings.gpu_fused}
    setattr(AT, name, saved)
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow
def test_triton_admm_edge_training_kernel_gives_the_stateful_gradients():
    """The ADMM edge term's training form on a GPU (:mod:`gsprestore.solvers.gtv.triton_adjoint`:
    the replay kernel forward, one fused adjoint kernel backward), run in Triton's interpreter:
    the term and the gradients of every input (iterates, weights, gamma) as close to the stateful
    steps in float64 as those steps in float32; inside the GTV solver, where it serves every
    edge term (counted); and the PyTorch steps when a kernel fails."""
    proc, res = _interpreted(EDGE_SCRIPT)
    assert res["calls_fused"] == 2 + 2  # the two op cases, then the solver's two edge terms
    for case in res["edge"] + [res["solver"]]:
        for name, (triton_err, plain32_err) in case.items():
            assert triton_err <= 3 * plain32_err + 2e-6, (name, case)
    assert set(res["solver"]) == {"w", "known", "g", "al", "be", "x"}
    for name, r in res["fallback"].items():
        assert r["diff"] <= 1e-5 and r["gpu_fused"] == 0, (name, r)
    assert "the fused Triton ADMM edge training kernel failed" in proc.stderr


GRAPH_SCRIPT = r"""
import json, torch
from gsprestore.core import backend
from gsprestore.graph import operators as G, triton_kernels as GT

torch.manual_seed(0)
calls = {"edge_weights": 0, "random_walk": 0}
real = GT.trained_or_none
def counted(kind, g, reference):
    out = real(kind, g, reference)
    calls[kind] += out is not None
    return out
GT.trained_or_none = counted
out = []
# (B, K, F, H, W): one and two pixel blocks (17 x 16), a one-row image
for B, K, F, H, W in [(1, 2, 3, 9, 11), (2, 1, 4, 17, 16), (1, 1, 2, 1, 5)]:
    g0 = torch.randn(B, K, F, H, W) * 0.5
    for kind in ("edge_weights", "random_walk"):
        res = {}
        for label, dtype, fused in (("triton", torch.float32, True), ("plain64", torch.float64, False),
                                    ("plain32", torch.float32, False)):
            g = g0.to(dtype).clone().requires_grad_(True)
            with (backend.configure(gpu_fused=1) if fused else backend.use("torch")):
                w = G.edge_weights(g, None) if kind == "edge_weights" else G.random_walk_weights_from_projected(g)
            seed = torch.linspace(-1, 1, w.numel(), dtype=dtype).reshape(w.shape)
            res[label] = {"g": torch.autograd.grad((w * seed).sum(), g)[0].double(), "w": w.detach().double()}
        out.append({k: [float((res[l][k] - ref).norm() / ref.norm()) for l in ("triton", "plain32")]
                    for k, ref in res["plain64"].items()})
calls_fused = dict(calls)
# a backward kernel that cannot compile: the PyTorch formulas take over (said once)
def boom(*a, **k):
    raise RuntimeError("no compiler here")
GT.distances_backward = boom
fallback = {}
g0 = torch.randn(1, 2, 3, 6, 7)
for kind in ("edge_weights", "random_walk"):
    grads = []
    for fused in (1, 0):
        backend.settings.gpu_fused = fused
        g = g0.clone().requires_grad_(True)
        w = G.edge_weights(g, None) if kind == "edge_weights" else G.random_walk_weights_from_projected(g)
        grads.append(torch.autograd.grad(w.square().sum(), g)[0])
    fallback[kind] = float((grads[0] - grads[1]).abs().max() / grads[1].abs().max())
print("RESULT" + json.dumps({"calls": calls_fused, "errors": out, "fallback": fallback}))
"""


@pytest.mark.slow
def test_triton_graph_training_kernels_give_the_pytorch_gradients():
    """The learned graphs' training form on a GPU (:func:`gsprestore.graph.triton_kernels.trained_or_none`:
    uGLR's edge weights, eq. 27, and uGTV's random-walk weights, eq. 28, forward by the inference
    kernels, backward by two more), run in Triton's interpreter: used for every graph (counted),
    the weights and the features' gradient as close to the PyTorch formulas in float64 as those
    formulas in float32; the PyTorch formulas when a kernel fails."""
    proc, res = _interpreted(GRAPH_SCRIPT)
    assert res["calls"] == {"edge_weights": 3, "random_walk": 3}
    for case in res["errors"]:
        for name, (triton_err, plain32_err) in case.items():
            assert triton_err <= 3 * plain32_err + 2e-6, (name, case)
    for kind, diff in res["fallback"].items():
        assert diff <= 1e-5, (kind, diff)
    assert "the fused Triton graph training kernel failed" in proc.stderr


def test_gpu_training_ops_follow_the_setting(monkeypatch):
    """``backend.settings.gpu_training`` (``GSPRESTORE_GPU_TRAINING``; the GPU job turns it off
    when the device's gradients differ from the CPU's) gates the ADMM edge and graph training
    ops; without autograd, or where the native CPU kernels run, they are never chosen."""
    import torch

    from gsprestore.core import backend
    from gsprestore.graph import triton_kernels as graph_triton
    from gsprestore.solvers.gtv import triton_adjoint as admm_adjoint_triton

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.zeros(1, 1, 1, 4, 4, requires_grad=True)
    wbar = torch.zeros(1, 1, 24, 4, 4)
    assert admm_adjoint_triton.usable(x, wbar, 2.0, 1) == (not backend.usable(x, wbar))
    monkeypatch.setattr(backend, "usable", lambda *a: False)  # as on a GPU
    assert admm_adjoint_triton.usable(x, wbar, 2.0, 1)
    assert not admm_adjoint_triton.usable(x, wbar, 2.0, admm_adjoint_triton.MAX_STEPS + 1)
    assert not admm_adjoint_triton.usable(x.detach(), wbar, 2.0, 1)  # nothing to differentiate
    with torch.no_grad():
        assert not admm_adjoint_triton.usable(x, wbar, 2.0, 1)
    with backend.configure(gpu_training=0):
        assert not admm_adjoint_triton.usable(x, wbar, 2.0, 1)
        assert graph_triton.trained_or_none("edge_weights", torch.zeros(1, 1, 2, 4, 4, requires_grad=True), abs) is None


MODEL_TRAIN_SCRIPT = r"""
import json, torch
from gsprestore.core import backend
from gsprestore.graph import triton_kernels as GT
from gsprestore.models import build_model
from gsprestore.solvers.cg import adjoint as cg_adjoint
from gsprestore.solvers.gtv import triton_adjoint as AT
from gsprestore.physics.tasks import network_input

calls = {"edge": 0, "graph": 0, "cg": 0}
real_edge, real_graph, real_cg = AT._EdgeTerm.apply, GT.trained_or_none, cg_adjoint._backward_triton
def edge(*a):
    calls["edge"] += 1
    return real_edge(*a)
def graph(*a):
    out = real_graph(*a)
    calls["graph"] += out is not None
    return out
def cg(*a):
    calls["cg"] += 1
    return real_cg(*a)
AT._EdgeTerm.apply, GT.trained_or_none, cg_adjoint._backward_triton = edge, graph, cg
torch.manual_seed(0)
# a small uGTV demosaicker (one block, two heads, 2 ADMM x 2 CG, green-difference)
model = build_model("ugtv", "demosaic", blocks=1, heads=2, width=8, features=4, admm_iters=2, cg_iters=2)
gt = torch.rand(1, 3, 10, 10)
grads = {}
for label, mode, dtype in (("fused", lambda: backend.configure(gpu_fused=1), torch.float32),
                           ("torch64", lambda: backend.use("torch"), torch.float64),
                           ("torch32", lambda: backend.use("torch"), torch.float32)):
    model.to(dtype).zero_grad(set_to_none=True)
    with mode():
        (model(*network_input("demosaic", gt.to(dtype))) - gt.to(dtype)).abs().mean().backward()
    grads[label] = {n: p.grad.double() for n, p in model.named_parameters() if p.grad is not None}
ref = grads["torch64"]
err = {n: [float((grads[l][n] - r).norm() / r.norm()) for l in ("fused", "torch32")] for n, r in ref.items()}
print("RESULT" + json.dumps({"calls": calls, "err": err, "params": sum(1 for _ in model.parameters())}))
"""


@pytest.mark.slow
def test_a_uGTV_training_step_through_every_triton_training_op_equals_the_pytorch_path():
    """One training step of a small uGTV demosaicker the way a CUDA step takes it (the graph, the
    unrolled CG solves and the ADMM edge term through their Triton training ops, in Triton's
    interpreter): every parameter's gradient as close to the PyTorch path's in float64 as that
    path's in float32 (the head mixture's, a difference of near-equal terms, is the loosest)."""
    proc, res = _interpreted(MODEL_TRAIN_SCRIPT)
    assert res["calls"] == {"edge": 1, "graph": 1, "cg": 2}, res["calls"]  # one block: its graph, 2 x-updates
    assert len(res["err"]) == res["params"], res  # every parameter got a gradient
    for name, (fused_err, plain32_err) in res["err"].items():
        assert fused_err <= 3 * plain32_err + 1e-5, (name, res["err"])


STENCIL_SCRIPT = r"""
import json, torch
from gsprestore.core import backend
from gsprestore.graph import operators as G, triton_kernels as GT

torch.manual_seed(0)
""" + WEIGHTS + r"""
calls = {"diag_minus_adjacency": 0, "adjacency_grad_w_accumulate": 0}
for name in calls:
    def counted(*a, _real=getattr(GT, name), _name=name):
        calls[_name] += 1
        return _real(*a)
    setattr(GT, name, counted)
out = []
# (B, K, KW, C, H, W, diag, x shared by the heads): two pixel blocks of 512 (23 x 29), a shared graph
for B, K, KW, C, H, W, with_a, shared_x in [(1, 2, 1, 3, 23, 29, True, True), (2, 1, 1, 2, 5, 6, False, False),
                                            (1, 2, 2, 1, 7, 9, True, False)]:
    vals = dict(w=weights(B, KW, H, W), x=torch.randn(B, 1 if shared_x else K, C, H, W))
    if with_a:
        vals["a"] = torch.rand(B, K, 1, H, W) + 1
    res = {}
    for label, dtype, fused in (("triton", torch.float32, True), ("plain64", torch.float64, False), ("plain32", torch.float32, False)):
        lv = {k: v.to(dtype).clone().requires_grad_(True) for k, v in vals.items()}
        with (backend.configure(gpu_fused=1) if fused else backend.use("torch")):
            y = G.diag_minus_adjacency_apply(lv["w"], lv["x"], lv.get("a"))
            seed = torch.linspace(-1, 1, y.numel(), dtype=dtype).reshape(y.shape)
            grads = torch.autograd.grad((y * seed).sum(), list(lv.values()))
        res[label] = dict(zip(lv, (g.double() for g in grads)), y=y.detach().double())
    out.append({k: [float((res[l][k] - ref).norm() / ref.norm()) for l in ("triton", "plain32")] for k, ref in res["plain64"].items()})
print("RESULT" + json.dumps({"errors": out, "calls": calls}))
"""


@pytest.mark.slow
def test_triton_stencil_operator_and_its_weight_gradient():
    """``a x - W x`` (uGLR's right-hand side, eq. 9) and its backward on a GPU
    (:func:`gsprestore.graph.triton_kernels.diag_minus_adjacency`, :func:`~gsprestore.graph.triton_kernels.adjacency_grad_w_accumulate`),
    run in Triton's interpreter: the value and the gradients of w, a and x as close to float64 as
    the PyTorch formulas' in float32, for shared graphs and iterates shared by the heads."""
    proc, res = _interpreted(STENCIL_SCRIPT)
    # each case: the forward and the input gradient (the operator is symmetric), the weights' gradient
    assert res["calls"] == {"diag_minus_adjacency": 6, "adjacency_grad_w_accumulate": 3}, res["calls"]
    for case in res["errors"]:
        assert {"w", "x", "y"} <= set(case), case
        for name, (triton_err, plain32_err) in case.items():
            assert triton_err <= 3 * plain32_err + 2e-6, (name, case)


def test_cpu_inference_never_imports_triton():
    """Triton (installed with every CUDA build of PyTorch) takes a fifth of a second to import and
    runs nothing without a GPU: a CPU job of each learned kind leaves it unimported."""
    code = ("import sys, torch\n"
            "from gsprestore.methods.registry import get_restorer\n"
            "get_restorer('ugtv-lite', 'demosaic')(torch.rand(1, 1, 32, 32))\n"
            "get_restorer('uglr-lite', 'upscale2x')(torch.rand(1, 3, 16, 16))\n"
            "get_restorer('ugtv', 'demosaic')(torch.rand(1, 1, 32, 32))\n"
            "assert 'triton' not in sys.modules, 'triton imported'\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
