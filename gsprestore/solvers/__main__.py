"""``python -m gsprestore.solvers [--threads N] [--size HxW] [--no-native]``: times the graph
operators and one GTV / GLR solver block (:func:`benchmark`)."""

from __future__ import annotations

import torch

from ..core import backend
from ..graph import operators as G
from .glr import glr_interpolate
from .gtv import admm_edge_step, gtv_interpolate


def benchmark(height: int = 512, width: int = 768, heads: int = 4, channels: int = 3, repeats: int = 3) -> dict:
    """Time the graph operators and one GTV / GLR solver block (paper settings: 5 ADMM x 10
    unrolled CG; 10 CG) on a ``(1, heads, channels, height, width)`` signal, next to one
    48-to-48-channel 3x3 convolution at the same resolution. Returns milliseconds (best of
    ``repeats``); no autograd."""
    import time

    def best(fn, n=repeats):
        fn()
        t_best = float("inf")
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            t_best = min(t_best, time.perf_counter() - t0)
        return 1e3 * t_best

    B, K, C, H, W = 1, heads, channels, height, width
    gen = torch.Generator().manual_seed(0)
    out: dict = {"native": backend.native_available(), "threads": torch.get_num_threads()}
    with torch.no_grad():
        conv = torch.nn.Conv2d(48, 48, 3, padding=1)
        xc = torch.randn(1, 48, H, W, generator=gen)
        out["conv48_ms"] = best(lambda: conv(xc))
        xc = None  # type: ignore[assignment]  # free it (the lambdas above have run)
        w = G.edge_weights(torch.randn(B, K, 12, H, W, generator=gen), torch.eye(12) * 0.05)
        deg = G.degree(w)
        wbar = G.random_walk_weights(w)
        x = torch.randn(B, K, C, H, W, generator=gen)
        out["laplacian_apply_ms"] = best(lambda: G.laplacian_apply(w, x, deg))
        out["incidence_apply_ms"] = best(lambda: G.incidence_apply(wbar, x))
        e = G.incidence_apply(wbar, x)
        out["incidence_adjoint_ms"] = best(lambda: G.incidence_adjoint(wbar, e))
        e = None  # type: ignore[assignment]
        gamma = torch.full((K,), 10.0)
        D, u, v = admm_edge_step(x, wbar, None, None, None, gamma)[:3]
        out["admm_edge_step_ms"] = best(lambda: admm_edge_step(x, wbar, D, u, v, gamma))
        D = u = v = None
        mask = torch.zeros(B, 1, C, H, W)
        mask[..., 0::2, 0::2] = 1
        known = torch.rand(B, 1, C, H, W, generator=gen) * mask
        al, be = torch.full((10, K), 0.5), torch.full((10, K), 0.3)
        run = lambda ws=None: gtv_interpolate(wbar, known, mask, gamma=gamma, admm_iters=5,  # noqa: E731
                                              cg_iters=10, cg=("unrolled", al, be), x0=x, workspace=ws)
        out["gtv_block_ms"] = best(run, 1)
        ws: dict = {}
        out["gtv_block_workspace_ms"] = best(lambda: run(ws), 1)  # as in a network: buffers reused
        ws = {}
        out["glr_block_ms"] = best(lambda: glr_interpolate(w, known, mask, cg=("unrolled", al, be), x0=x), 1)
    out["gtv_block_in_convs"] = out["gtv_block_ms"] / out["conv48_ms"]
    out["gtv_block_workspace_in_convs"] = out["gtv_block_workspace_ms"] / out["conv48_ms"]
    out["glr_block_in_convs"] = out["glr_block_ms"] / out["conv48_ms"]
    return out


if __name__ == "__main__":  # pragma: no cover
    import argparse
    import json

    ap = argparse.ArgumentParser(description=benchmark.__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--size", default="512x768", help="HxW")
    ap.add_argument("--no-native", action="store_true", help="PyTorch path only")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.no_native:
        backend.use("torch")
    h, w = (int(v) for v in args.size.lower().split("x"))
    print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in benchmark(h, w).items()}, indent=1))
