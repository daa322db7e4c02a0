"""The non-learned graph interpolators iGLR and iGTV (paper appendix "Experimental Details").

Both start from :func:`~gsprestore.models.estimate.initial_estimate` (linear interpolation in the
5x5 window), build one graph from it and solve:

* features f_i = (RGB of the estimate at i, row, column): 5-dim for RGB (C + 2 in general), the
  colours in [0, 1] and the location in pixels (both scales are options); metric M = 1.5 I; edge
  weights w_ij = exp(-(f_i - f_j)^T M (f_i - f_j)) (eq. 27), one graph shared by every channel;
* iGLR: min x^T L_n x s.t. H x = y (Sec. 3 with the normalized Laplacian of Sec. 5.2), i.e. the
  linear system L_{S'S'} x_{S'} = -L_{S'S} y of eq. 9, by CG;
* iGTV: min ||C-bar x||_1 s.t. H x = y (the LP of Sec. 4 with the random-walk normalized
  incidence of eq. 28) by ADMM (eqs. 19-24), gamma = 10, multipliers initialised to 0.1, each
  x-update (eq. 20) by CG.

``cg="unrolled"`` (default, the paper's iGLR/iGTV) runs CG in the unrolled form of the appendix
"Parameters Learning in CG" with the fixed steps alpha = 0.5, beta = 0.3; ``cg="exact"`` computes
the CG step sizes (and, for iGLR, stops at a relative residual of ``tol``).
Iteration counts (paper silent for iGLR) are in :data:`DEFAULTS` and ``docs/architecture.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..solvers import GLR_LAPLACIANS, glr_solve
from .estimate import initial_estimate

GRAPH_METHODS: dict[str, str] = {"iglr": "glr", "igtv": "gtv"}
CG_MODES: tuple[str, ...] = ("unrolled", "exact")

#: Defaults of the non-learned interpolators (appendix "Experimental Details" where it says).
DEFAULTS: dict[str, Any] = {
    "metric_scale": 1.5,  # M = 1.5 I
    "intensity_scale": 1.0,  # colour features in [0, 1] units
    "location_scale": 1.0,  # location features in pixels
    "alpha": 0.5,
    "beta": 0.3,
    "gamma": 10.0,
    "mu_init": 0.1,
    "glr_laplacian": "normalized",  # the paper's x^T L_n x; "preconditioned" = x^T L x via L_n
    "glr_iters": 50,  # unrolled CG steps for iGLR (same CG budget as iGTV's 5 x 10)
    "exact_iters": 300,  # iteration cap of exact CG (iGLR stops earlier at ``tol``)
    "tol": 1e-6,
    "admm_iters": 5,
    "cg_iters": 10,
    "passes": 1,  # graph rebuilt from the current estimate this many times
}


def location_features(height: int, width: int, *, like: Tensor, scale: float = 1.0) -> Tensor:
    """``(2, H, W)`` pixel coordinates (row, column) times ``scale``."""
    rows = torch.arange(height, dtype=like.dtype, device=like.device).view(height, 1).expand(height, width)
    cols = torch.arange(width, dtype=like.dtype, device=like.device).view(1, width).expand(height, width)
    return torch.stack([rows, cols]) * scale


class GraphInterpolator(nn.Module):
    """iGLR (``prior="glr"``) / iGTV (``prior="gtv"``); ``forward(known, mask) -> x``. No
    learned parameters (the constants are buffers of plain floats in :attr:`config`)."""

    def __init__(self, prior: str, *, cg: str = "unrolled", **options: Any):
        super().__init__()
        if prior not in ("glr", "gtv"):
            raise ValueError(f"unknown prior {prior!r}")
        if cg not in CG_MODES:
            raise ValueError(f"unknown CG mode {cg!r}; expected one of {', '.join(CG_MODES)}")
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown i{prior} options: {', '.join(sorted(unknown))}")
        if options.get("glr_laplacian", DEFAULTS["glr_laplacian"]) not in GLR_LAPLACIANS:
            raise ValueError(f"unknown glr_laplacian {options['glr_laplacian']!r}; expected one of {GLR_LAPLACIANS}")
        self.config: dict[str, Any] = {"prior": prior, "cg": cg, **DEFAULTS, **options}

    @property
    def prior(self) -> str:
        return self.config["prior"]

    def receptive_field(self) -> int | None:
        """Radius of dependence in pixels, or None when unbounded (exact CG's dot products)."""
        c = self.config
        if c["cg"] == "exact":
            return None
        per_pass = 4 + (2 * c["glr_iters"] if self.prior == "glr" else c["admm_iters"] * (4 * c["cg_iters"] + 4))
        return 2 + c["passes"] * per_pass

    def features(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` estimate -> ``(B, 1, C + 2, H, W)`` features (colour, location)."""
        c = self.config
        B, _, H, W = x.shape
        loc = location_features(H, W, like=x, scale=c["location_scale"]).expand(B, 2, H, W)
        return torch.cat([x * c["intensity_scale"], loc], dim=1).unsqueeze(1)

    def graph_weights(self, x: Tensor) -> Tensor:
        """The graph built from ``x`` with M = 1.5 I: iGLR, undirected weights ``(B, 1, 12, H, W)``
        (eq. 27); iGTV, random-walk normalized directed weights ``(B, 1, 24, H, W)`` (eq. 28)."""
        from ..graph import operators as graph

        f = self.features(x)
        n = f.shape[2]
        metric = self.config["metric_scale"] * torch.eye(n, dtype=x.dtype, device=x.device).unsqueeze(0)
        if self.prior == "glr":
            return graph.edge_weights(f, metric)
        return graph.random_walk_weights_from_distances(graph.edge_distances(f, metric))

    def _cg(self, iters_shape: tuple[int, ...], like: Tensor) -> Any:
        c = self.config
        if c["cg"] == "exact":
            return "exact"
        alphas = torch.full(iters_shape, c["alpha"], dtype=like.dtype, device=like.device)
        betas = torch.full(iters_shape, c["beta"], dtype=like.dtype, device=like.device)
        return ("unrolled", alphas, betas)

    def solve(self, w: Tensor, known: Tensor, mask: Tensor, x0: Tensor) -> Tensor:
        from .. import solvers

        c = self.config
        known5, mask5, x05 = known.unsqueeze(1), mask.unsqueeze(1), x0.unsqueeze(1)
        if self.prior == "glr":
            exact = c["cg"] == "exact"
            iters = c["exact_iters"] if exact else c["glr_iters"]
            kw = {"tol": c["tol"]} if exact else {}
            x = glr_solve(w, known5, mask5, x05, self._cg((iters,), x0), iters, c["glr_laplacian"], **kw)
        else:
            x = solvers.gtv_interpolate(
                w, known5, mask5, gamma=c["gamma"], admm_iters=c["admm_iters"],
                cg_iters=c["cg_iters"], cg=self._cg((c["cg_iters"],), x0),  # shared by the ADMM iterations
                mu_init=c["mu_init"], x0=x05,
            )
        return x[:, 0]

    def forward(self, known: Tensor, mask: Tensor) -> Tensor:
        """``known = H^T y``, ``mask = H^T 1`` ``(B, C, H, W)`` -> x with H x = y exactly."""
        if known.dim() != 4:
            raise ValueError(f"known must be (B, C, H, W), got shape {tuple(known.shape)}")
        mask = mask.expand_as(known)
        x = initial_estimate(known, mask)
        for _ in range(int(self.config["passes"])):
            x = self.solve(self.graph_weights(x), known, mask, x)
            x = torch.where(mask > 0, known, x)
        return x


def build_interpolator(method: str, task: str | None = None, *, cg: str = "unrolled", **options: Any) -> GraphInterpolator:
    """``build_interpolator("igtv")`` -> iGTV with the paper's constants (task-independent)."""
    prior = GRAPH_METHODS.get(method)
    if prior is None:
        raise ValueError(f"unknown graph method {method!r}; expected one of {', '.join(GRAPH_METHODS)}")
    return GraphInterpolator(prior, cg=cg, **options)
