"""The learned, unrolled networks uGLR and uGTV (paper Sec. 5.3 "Deep Algorithm Unrolling" and
appendix "Experimental Details").

``UnrolledNet`` = initial estimate (:func:`~gsprestore.models.estimate.initial_estimate`) followed
by ``blocks`` (5) :class:`UnrolledBlock` in sequence; block t maps the estimate x^t to x^{t+1}:

1. graph learning (the "self-attention" of Sec. 5.2): a shallow :class:`FeatureCNN` on x^t gives
   ``heads x features`` (4 x 12) maps; head k has a PSD metric M_k = A_k A_k^T (A_k 12 x 12,
   learned) and edge weights w_ij = exp(-(f_i - f_j)^T M_k (f_i - f_j)) (eq. 27) on the 5x5
   window graph;
2. per head, the interpolation solver on that graph (all image channels share the graph):
   GLR (eq. 9 with the normalized Laplacian, Sec. 5.2) by unrolled CG with learned alpha_t,
   beta_t (appendix "Parameters Learning in CG"), or GTV (the LP of Sec. 4 with the random-walk
   normalized incidence of eq. 28) by ``admm_iters`` ADMM iterations (eqs. 19-24) whose x-update (eq. 20) is
   ``cg_iters`` unrolled CG steps, with a learned gamma;
3. a learned weighted average of the heads (softmax of ``heads`` logits, "a simple weighted
   average scheme was then used to combine the outputs");
4. the known samples re-imposed (H x = y holds exactly after every block).

Choices where the paper is silent are listed, with their reasons, in ``docs/architecture.md``;
every one is a key of :attr:`UnrolledNet.config`.

The CPU-size networks ``uglr-lite`` / ``ugtv-lite`` (issue 39, :func:`lite_config`) are the same
blocks with two of those keys changed: ``feature_trunk="packed"`` replaces the per-block CNN of
step 1 by one trunk shared by the blocks (at half resolution on the packed observation) and a
1x1 head per block (:mod:`.packed_trunk`), and ``initial_estimate`` starts the blocks from a
classical method (Menon 2007 / the aligned bicubic) instead of the tent interpolation. Steps 1-4
(metric, edge weights, solvers, head mix, known samples) are unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..physics.tasks import TASKS, is_mosaic
from .feature_cnn import LUMA_WEIGHTS, FeatureCNN, luma  # noqa: F401 (LUMA_WEIGHTS: re-exported)
from ..solvers import GLR_LAPLACIANS, glr_graph, glr_solve, gtv_laplacian
from .estimate import initial_estimate
from .packed_trunk import BlockFeatureHead, PackedTrunk, packed_observation

PRIORS: tuple[str, ...] = ("glr", "gtv")
#: The learned methods and their priors: the paper-size uGLR / uGTV, and their CPU-size variants
#: ``uglr-lite`` / ``ugtv-lite`` (``feature_trunk="packed"``, :mod:`.packed_trunk`; issue 39).
METHOD_PRIOR: dict[str, str] = {"uglr": "glr", "ugtv": "gtv", "uglr-lite": "glr", "ugtv-lite": "gtv",
                                "ugtv-lite-denoise": "gtv"}
#: The suffix of a noise-aware network's name (``noise_input``, :mod:`.noise_aware`).
DENOISE_SUFFIX = "-denoise"
#: The suffix of a learned method's name that says its feature trunk.
TRUNK_SUFFIX: dict[str, str] = {"per-block": "", "packed": "-lite"}


def method_name(prior: str, feature_trunk: str = "per-block", noise_input: bool = False) -> str:
    """``("gtv", "packed")`` -> ``"ugtv-lite"``: the learned method a configuration is
    (``noise_input``: the noise-aware ``"ugtv-lite-denoise"``)."""
    return "u" + prior + TRUNK_SUFFIX.get(feature_trunk, "") + (DENOISE_SUFFIX if noise_input else "")


def method_trunk(method: str) -> str:
    """``"ugtv-lite"`` -> ``"packed"``, ``"ugtv"`` -> ``"per-block"``."""
    return "packed" if method.removesuffix(DENOISE_SUFFIX).endswith(TRUNK_SUFFIX["packed"]) else "per-block"

#: Parameter counts reported in the paper (Tables 1 and 3).
PAPER_PARAMS: dict[tuple[str, str], int] = {
    ("uglr", "demosaic"): 323_410,
    ("ugtv", "demosaic"): 323_435,
    ("uglr", "upscale2x"): 319_090,
    ("ugtv", "upscale2x"): 319_115,
}

CNN_INPUTS: tuple[str, ...] = ("estimate", "luma")
#: Where each block's graph-learning features come from: its own feature CNN on the estimate x^t
#: (``"per-block"``, the paper's networks) or one trunk shared by the blocks, on the packed 2x2
#: observation at half resolution, with a 1x1 head per block (``"packed"``, :mod:`.packed_trunk`:
#: the CPU-size networks of issue 39).
FEATURE_TRUNKS: tuple[str, ...] = ("per-block", "packed")
#: The initial estimate x^0: the tent interpolation of :mod:`.estimate` (``"bilinear"``; in colour
#: differences with ``signal="green-difference"``), or Menon et al. 2007's demosaicking
#: (``"menon"``, :func:`gsprestore.classical.demosaic.demosaic_menon`; RGGB demosaicking only),
#: which the blocks then refine (issue 39: a better start for the CPU-size networks); for 2x the
#: grid-aligned bicubic (``"bicubic"``, :func:`gsprestore.classical.upscale.upscale_bicubic`).
INITIAL_ESTIMATES: tuple[str, ...] = ("bilinear", "menon", "bicubic")
#: Smallest learned GLR edge weight (exp(-18.4)): keeps every degree >= ~1e-7, so the normalised
#: Laplacian's D^-1/2 and its gradient stay finite when a sharp metric makes exp(-d) underflow.
GLR_MIN_WEIGHT: float = 1e-8
CHECKPOINT_MODES: tuple[str, ...] = ("", "head", "block", "block+head")
#: What the graph solvers interpolate (demosaicking only, see :func:`green_difference_estimate`):
#: the R, G, B planes themselves (``"rgb"``, the paper's appendix for iGLR / iGTV), or G and then
#: the colour differences R - G, B - G on the same graph (``"green-difference"``).
SIGNALS: tuple[str, ...] = ("rgb", "green-difference")


#: What the architecture is built for, with room to grow (the paper's networks: 5 blocks, 4 heads
#: x 12 features = a 48-wide 4-layer CNN, 5 ADMM x 10 CG or 50 CG iterations): a configuration
#: outside these bounds, from a weights file or the ``train`` options, is refused before a single
#: tensor is allocated (a 4096-wide network or 10^7 ADMM iterations are not a model, but gigabytes).
CONFIG_BOUNDS: dict[str, tuple[int, int]] = {
    "blocks": (1, 32), "heads": (1, 64), "features": (1, 256), "width": (1, 512), "cnn_layers": (1, 32),
    "cg_iters": (1, 500), "admm_iters": (1, 100), "channels": (1, 4), "denoise_stages": (1, 8),
    "denoise_iters": (1, 64),
}
#: Configuration keys that switch a part on (absent from the stored configuration when off).
OPTIONAL_KEYS: tuple[str, ...] = ("noise_input", "denoise_stages", "denoise_iters", "clean_anchor")


def check_config(cfg: dict[str, Any]) -> None:
    """Raise :class:`ValueError` (one line naming the option, its value and the bounds) for a
    size option of ``cfg`` outside :data:`CONFIG_BOUNDS` or not a whole number."""
    for key, (lo, hi) in CONFIG_BOUNDS.items():
        if key not in cfg:
            continue
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"model option {key} must be a whole number, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"model option {key} = {value} is outside what the architecture supports ({lo}..{hi})")


def default_config(prior: str, task: str) -> dict[str, Any]:
    """The paper-size configuration of ``prior`` ("glr" | "gtv") for ``task``."""
    if prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}")
    cfg: dict[str, Any] = {
        "prior": prior,
        "task": task,
        "blocks": 5,
        "heads": 4,
        "features": 12,
        "width": 48,
        "cnn_layers": 4,
        # demosaicking: the CNN sees the RGB estimate; 2x: the luma of the estimate, and the
        # graph it learns is shared by every channel (so any channel count works).
        "cnn_input": "estimate" if is_mosaic(task) else "luma",
        "channels": 3,
        "metric_init": 0.5,
        "alpha_init": 0.5,
        "beta_init": 0.3,
        "signal": "rgb",
        "feature_trunk": "per-block",
        "initial_estimate": "bilinear",
    }
    if prior == "glr":
        cfg.update(cg_iters=50, glr_laplacian="preconditioned")
    else:
        cfg.update(admm_iters=5, cg_iters=10, gamma_init=10.0, mu_init=0.1, gtv_precondition=True)
    return cfg


def green_difference_estimate(known: Tensor, mask: Tensor) -> Tensor:
    """Bilinear demosaicking in colour differences: G by the tent interpolation of the G samples,
    then R - G and B - G (known where R / B are) by the same interpolation, plus G. The classical
    start of colour-difference demosaickers; known samples are returned exactly."""
    g = initial_estimate(known[:, 1:2], mask[:, 1:2])
    rb_mask = mask[:, 0::2]
    diff = initial_estimate((known[:, 0::2] - g) * rb_mask, rb_mask)
    out = torch.cat([diff[:, :1] + g, g, diff[:, 1:] + g], dim=1)
    return torch.where(mask > 0, known, out)


class UnrolledBlock(nn.Module):
    """One graph-learning module + solver block (Fig. 2 of the paper), ``heads`` heads wide.

    Learned parameters besides the CNN: ``metric_factor`` (K, F, F) with M_k = A_k A_k^T (PSD by
    construction, eq. 27), the unrolled-CG step sizes ``alpha``/``beta`` per head and per CG step
    (GLR: ``(cg_iters, K)``; GTV: ``(admm_iters, cg_iters, K)``, one set per ADMM iteration),
    for GTV ``log_gamma`` (K,) (gamma = exp(log_gamma) > 0, the ADMM penalty of Sec. 4.2), and ``mix_logits`` (K,).
    """

    def __init__(
        self,
        prior: str,
        *,
        cnn_in: int,
        heads: int = 4,
        features: int = 12,
        width: int = 48,
        cnn_layers: int = 4,
        cnn_input: str = "estimate",
        cg_iters: int = 10,
        glr_laplacian: str = "preconditioned",
        admm_iters: int = 5,
        metric_init: float = 0.5,
        alpha_init: float = 0.5,
        beta_init: float = 0.3,
        gamma_init: float = 10.0,
        mu_init: float = 0.1,
        gtv_precondition: bool = False,
        signal: str = "rgb",
        feature_trunk: str = "per-block",
    ):
        super().__init__()
        if feature_trunk not in FEATURE_TRUNKS:
            raise ValueError(f"unknown feature_trunk {feature_trunk!r}; expected one of {FEATURE_TRUNKS}")
        self.feature_trunk = feature_trunk
        if signal not in SIGNALS:
            raise ValueError(f"unknown signal {signal!r}; expected one of {SIGNALS}")
        self.signal = signal
        self.gtv_precondition = bool(gtv_precondition)
        if prior not in PRIORS:
            raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")
        if cnn_input not in CNN_INPUTS:
            raise ValueError(f"unknown cnn_input {cnn_input!r}; expected one of {CNN_INPUTS}")
        if feature_trunk == "per-block" and heads * features != width:
            raise ValueError(f"heads x features ({heads} x {features}) must equal the CNN width {width}")
        if glr_laplacian not in GLR_LAPLACIANS:
            raise ValueError(f"unknown glr_laplacian {glr_laplacian!r}; expected one of {GLR_LAPLACIANS}")
        self.prior, self.heads, self.features, self.glr_laplacian = prior, heads, features, glr_laplacian
        self.cnn_input, self.cg_iters, self.admm_iters, self.mu_init = cnn_input, cg_iters, admm_iters, mu_init
        if feature_trunk == "per-block":
            self.cnn = FeatureCNN(cnn_in, width, cnn_layers)
        else:  # the trunk (width, cnn_layers) belongs to the network; the block has a head
            self.head = BlockFeatureHead(width, cnn_in, heads * features)
        # metric_init * I per head, written on the diagonal: torch.eye on the meta device (the
        # weights loader's shape check) would import torch._dynamo, seconds at every start
        metric = torch.zeros(heads, features, features)
        metric.diagonal(dim1=-2, dim2=-1).fill_(metric_init)
        self.metric_factor = nn.Parameter(metric)
        steps = (cg_iters, heads) if prior == "glr" else (admm_iters, cg_iters, heads)
        self.alpha = nn.Parameter(torch.full(steps, float(alpha_init)))
        self.beta = nn.Parameter(torch.full(steps, float(beta_init)))
        if prior == "gtv":
            self.log_gamma = nn.Parameter(torch.full((heads,), math.log(gamma_init)))
        self.mix_logits = nn.Parameter(torch.zeros(heads))

    # -- graph learning -------------------------------------------------------------------
    def metric(self) -> Tensor:
        """M_k = A_k A_k^T, ``(K, F, F)``, PSD for any A_k (eq. 27)."""
        A = self.metric_factor
        return A @ A.transpose(-1, -2)

    def _cnn_input(self, x: Tensor) -> Tensor:
        return luma(x) if self.cnn_input == "luma" else x

    def feature_maps(self, x: Tensor, trunk: Tensor | None = None) -> Tensor:
        """The block's features ``(B, K * F, H, W)`` (any memory layout) from its estimate x^t
        and, with ``feature_trunk="packed"``, the network's trunk features ``trunk``."""
        if self.feature_trunk == "per-block":
            return self.cnn.features_any_layout(self._cnn_input(x))
        if trunk is None:
            raise ValueError("a block with feature_trunk='packed' needs the trunk's features")
        return self.head(trunk, self._cnn_input(x))

    def head_features(self, x: Tensor, trunk: Tensor | None = None) -> Tensor:
        """``(B, C, H, W)`` estimate -> ``(B, K, F, H, W)`` per-head feature vectors f_i."""
        f = self.feature_maps(x, trunk).contiguous()
        B, _, H, W = f.shape
        return f.view(B, self.heads, self.features, H, W)

    def projected_features(self, x: Tensor, workspace: dict | None = None, trunk: Tensor | None = None) -> Tensor:
        """``(B, K, F, H, W)``: g_i = A_k^T f_i per head, so that the distance of eq. 27 is
        ``(f_i - f_j)^T A_k A_k^T (f_i - f_j) = |g_i - g_j|^2`` (inference). The projection
        reads the CNN's channels-last output in place and writes the planar layout the distance
        kernel reads: no separate layout change, no M f product. ``workspace``: the output
        buffer is kept there (see :meth:`graph_weights`)."""
        from ..graph import operators as graph

        if self.feature_trunk == "packed" and trunk is not None:
            g = self.head.projected(trunk, x, self.metric_factor, workspace, luma_input=self.cnn_input == "luma")
            if g is not None:  # inference on the CPU: head and projection in one native pass
                return g
        g = graph.project_features(self.feature_maps(x, trunk), self.metric_factor, workspace=workspace)
        # under autocast (bf16 / fp16 on a GPU) only the CNN runs in reduced precision: the graph
        # and the solvers stay in the estimate's precision
        return g if g.dtype == x.dtype else g.to(x.dtype)

    def graph_weights(self, x: Tensor, workspace: dict | None = None, trunk: Tensor | None = None) -> Tensor:
        """The learned graphs of the heads from the estimate ``x``: GLR, undirected weights
        w_ij = exp(-d_ij) ``(B, K, 12, H, W)`` (eq. 27); GTV, the random-walk normalized directed
        weights ``(B, K, 24, H, W)`` of eq. 28, computed as a softmax of -d over each node's
        window (same value, but it cannot underflow to 0/0 when all distances are large).
        ``workspace`` (inference): a dict kept across the blocks of one forward, whose output
        buffers the graph functions reuse."""
        from ..graph import operators as graph

        # the metric applied as its factor: g = A_k^T f, d = |g_p - g_q|^2 (the same d as
        # (f_p - f_q)^T M_k (f_p - f_q)); under autograd A_k's gradient comes through the
        # projection, and the distances' backward is the features' gradient alone
        g = self.projected_features(x, workspace, trunk)
        if self.prior == "glr":
            # floor: a node whose every weight underflows to 0 would be isolated, and the
            # normalisation D^-1/2 (eq. 9, Sec. 5.2) would send inf * 0 = NaN into the gradients
            return graph.edge_weights(g, None, workspace=workspace).clamp_min(GLR_MIN_WEIGHT)
        return graph.random_walk_weights_from_projected(g, workspace=workspace)

    def mix_weights(self) -> Tensor:
        """Head weights pi_k = softmax(mix_logits) (sum to one)."""
        return torch.softmax(self.mix_logits, dim=0)

    # -- solver ----------------------------------------------------------------------------
    def graph_system(self, w: Tensor):
        """The graph-only part of the solver's linear system (GLR: :func:`~gsprestore.solvers.glr_graph`,
        the Laplacian of eq. 9; GTV: :func:`~gsprestore.solvers.gtv_laplacian`, L-bar of eq. 20),
        computed once per block and shared by its solves (G, then R - G and B - G)."""
        return glr_graph(w, self.glr_laplacian) if self.prior == "glr" else gtv_laplacian(w)

    def solve(self, w: Tensor, known: Tensor, mask: Tensor, x0: Tensor, heads: slice | None = None,
              workspace: dict | None = None, system: Any = None) -> Tensor:
        """Per-head interpolation on the graphs ``w`` of :meth:`graph_weights`, warm-started at
        ``x0``: ``(B, K, C, H, W)``. ``heads`` restricts it to a slice of the heads (``w`` is
        then already that slice). ``workspace``: a dict kept across the blocks of one
        inference forward, so the GTV solver reuses its edge buffers. ``system``:
        :meth:`graph_system` of ``w``, if already computed."""
        from .. import solvers

        hs = slice(None) if heads is None else heads
        known5, mask5, x05 = known.unsqueeze(1), mask.unsqueeze(1), x0.unsqueeze(1)
        # one step size per head: (T, K) for GLR, (admm, T, K) for GTV
        cg = ("unrolled", self.alpha[..., hs], self.beta[..., hs])
        if self.prior == "glr":
            return glr_solve(w, known5, mask5, x05, cg, self.cg_iters, self.glr_laplacian, graph=system)
        gamma = torch.exp(self.log_gamma[hs])  # (K,)
        return solvers.gtv_interpolate(
            w, known5, mask5, gamma=gamma, admm_iters=self.admm_iters, cg_iters=self.cg_iters,
            cg=cg, mu_init=self.mu_init, x0=x05, precondition=self.gtv_precondition, laplacian=system,
            **({"workspace": workspace} if workspace is not None else {}),
        )

    def _solve_head(self, k: int, w: Tensor, known: Tensor, mask: Tensor, x0: Tensor) -> Tensor:
        return self.solve(w[:, k : k + 1], known, mask, x0, heads=slice(k, k + 1))

    def forward(self, x: Tensor, known: Tensor, mask: Tensor, *, checkpoint_heads: bool = False,
                workspace: dict | None = None, trunk: Tensor | None = None) -> Tensor:
        """x^t ``(B, C, H, W)`` -> x^{t+1}; ``known``/``mask`` as from ``restorers.observation``.
        ``checkpoint_heads``: solve head by head, each recomputed in the backward pass instead of
        keeping its solver's intermediates (training memory: one head's solver at a time).
        ``trunk``: the network's shared trunk features (``feature_trunk="packed"``)."""
        w = self.graph_weights(x, None if workspace is None else workspace.setdefault("graph", {}), trunk)
        # head checkpointing solves head by head on slices of w: each slice builds its own system
        system = None if (checkpoint_heads and torch.is_grad_enabled()) else self.graph_system(w)
        if self.signal == "rgb":
            return self._interpolate(w, known, mask, x, checkpoint_heads, workspace, system)
        # green-difference: G on the learned graphs, then R - G and B - G on the same graphs
        # (the two solves have different channel counts: each keeps its own solver buffers)
        ws_g, ws_d = (None, None) if workspace is None else (workspace.setdefault("g", {}), workspace.setdefault("d", {}))
        g = self._interpolate(w, known[:, 1:2], mask[:, 1:2], x[:, 1:2], checkpoint_heads, ws_g, system)
        rb_mask = mask[:, 0::2]
        diff = self._interpolate(w, (known[:, 0::2] - g) * rb_mask, rb_mask, x[:, 0::2] - g,
                                 checkpoint_heads, ws_d, system)
        out = torch.cat([diff[:, :1] + g, g, diff[:, 1:] + g], dim=1)
        return torch.where(mask > 0, known, out)

    def _interpolate(self, w: Tensor, known: Tensor, mask: Tensor, x: Tensor, checkpoint_heads: bool,
                     workspace: dict | None, system: Any = None) -> Tensor:
        """Every head's solver on its graph, the heads' weighted average, known samples re-imposed."""
        if checkpoint_heads and torch.is_grad_enabled():
            xk = torch.cat([checkpoint(self._solve_head, k, w, known, mask, x, use_reentrant=False)
                            for k in range(self.heads)], dim=1)
        else:
            xk = self.solve(w, known, mask, x, workspace=workspace, system=system)
        if self.heads == 1 and not torch.is_grad_enabled():
            out = xk[:, 0]  # pi = softmax of one logit = 1 exactly: the same values without two passes
        else:
            pi = self.mix_weights().view(1, -1, 1, 1, 1)
            out = (pi * xk).sum(dim=1)
        return torch.where(mask.expand_as(out) > 0, known.expand_as(out), out)


class UnrolledNet(nn.Module):
    """uGLR (``prior="glr"``) or uGTV (``prior="gtv"``) for ``task``; ``forward(known, mask) -> x``.

    ``config`` is a JSON-able dict with every architectural choice; ``UnrolledNet(**config)``
    rebuilds the same network (that is what weight files store).

    ``checkpoint`` (training memory; not part of the architecture, settable any time):
    ``False`` keeps every intermediate; ``True`` or ``"block"`` recomputes whole blocks in the
    backward pass (one block's intermediates at a time); ``"head"`` recomputes each head's solver
    only; ``"block+head"`` both. Measured peaks for one uGTV step on 16 x 64x64 patches are in
    ``docs/architecture.md`` ("block" is the one that pays with the current solvers).
    """

    def __init__(self, prior: str, task: str, *, checkpoint: bool | str = False, **overrides: Any):
        super().__init__()
        cfg = default_config(prior, task)
        unknown = set(overrides) - set(cfg) - set(OPTIONAL_KEYS)
        if unknown:
            raise TypeError(f"unknown {prior} model options: {', '.join(sorted(unknown))}")
        cfg.update(overrides)
        cfg["prior"], cfg["task"] = prior, task
        check_config(cfg)
        if cfg["cnn_input"] not in CNN_INPUTS:
            raise ValueError(f"unknown cnn_input {cfg['cnn_input']!r}; expected one of {CNN_INPUTS}")
        self.config: dict[str, Any] = cfg
        self.checkpoint = checkpoint
        cfg.setdefault("signal", "rgb")
        if cfg["signal"] not in SIGNALS:
            raise ValueError(f"unknown signal {cfg['signal']!r}; expected one of {SIGNALS}")
        if cfg["signal"] != "rgb" and (not is_mosaic(task) or int(cfg["channels"]) != 3):
            raise ValueError(f"signal {cfg['signal']!r} is for 3-channel demosaicking only")
        cfg.setdefault("initial_estimate", "bilinear")
        if cfg["initial_estimate"] not in INITIAL_ESTIMATES:
            raise ValueError(f"unknown initial_estimate {cfg['initial_estimate']!r}; expected one of {INITIAL_ESTIMATES}")
        if cfg["initial_estimate"] == "menon" and (not is_mosaic(task) or int(cfg["channels"]) != 3):
            raise ValueError("initial_estimate 'menon' is for 3-channel demosaicking only")
        if cfg["initial_estimate"] == "bicubic" and is_mosaic(task):
            raise ValueError("initial_estimate 'bicubic' is for 2x interpolation only")
        cnn_in = 1 if cfg["cnn_input"] == "luma" else int(cfg["channels"])
        cfg.setdefault("feature_trunk", "per-block")
        if cfg["feature_trunk"] not in FEATURE_TRUNKS:
            raise ValueError(f"unknown feature_trunk {cfg['feature_trunk']!r}; expected one of {FEATURE_TRUNKS}")
        block_kw = {k: cfg[k] for k in ("heads", "features", "width", "cnn_layers", "cnn_input",
                                        "cg_iters", "metric_init", "alpha_init", "beta_init", "signal",
                                        "feature_trunk")}
        if prior == "glr":
            block_kw.update(glr_laplacian=cfg["glr_laplacian"])
        if prior == "gtv":
            block_kw.update(admm_iters=cfg["admm_iters"], gamma_init=cfg["gamma_init"], mu_init=cfg["mu_init"],
                            gtv_precondition=cfg["gtv_precondition"])
        self.blocks = nn.ModuleList(UnrolledBlock(prior, cnn_in=cnn_in, **block_kw) for _ in range(cfg["blocks"]))
        if cfg.get("noise_input") and not (cfg["feature_trunk"] == "packed" and is_mosaic(task)
                                           and int(cfg["channels"]) == 3):
            raise ValueError("noise_input is for the 3-channel demosaicking networks with the packed trunk")
        if cfg["feature_trunk"] == "packed":
            packed_in = 1 if cfg["cnn_input"] == "luma" else 4
            if cfg.get("noise_input"):  # the packed noise map beside the packed mosaic
                packed_in += 4
            self.trunk = PackedTrunk(packed_in, int(cfg["width"]), int(cfg["cnn_layers"]))
        if cfg.get("noise_input"):
            from .noise_aware import DENOISE_ITERS, GraphDenoiser

            # denoise_iters: the CG steps of each denoising pass (absent: what they were trained with)
            self.denoiser = GraphDenoiser(int(cfg["width"]), stages=int(cfg.get("denoise_stages", 1)),
                                          iters=int(cfg.get("denoise_iters", DENOISE_ITERS)))
        else:
            if cfg.get("clean_anchor"):
                raise ValueError("clean_anchor is for noise-aware networks (noise_input)")
            cfg.pop("noise_input", None)
            cfg.pop("denoise_stages", None)
            cfg.pop("denoise_iters", None)
        if cfg.get("clean_anchor"):  # the clean network's weights beside these (noise_aware.CleanAnchor)
            from .noise_aware import CleanAnchor

            self.clean_anchor = CleanAnchor(self)
        else:
            cfg.pop("clean_anchor", None)
        # the paper's choices are left out of the stored configuration, so the weights files and
        # manifest records made before these keys existed describe the same network
        for key, paper in (("feature_trunk", "per-block"), ("initial_estimate", "bilinear")):
            if cfg.get(key) == paper:
                del cfg[key]

    @property
    def prior(self) -> str:
        return self.config["prior"]

    @property
    def task(self) -> str:
        return self.config["task"]

    @property
    def method(self) -> str:
        return method_name(self.prior, self.config.get("feature_trunk", "per-block"), bool(self.config.get("noise_input")))

    def initial(self, known: Tensor, mask: Tensor) -> Tensor:
        """x^0 (``initial_estimate``): the tent interpolation (in colour differences for the
        green-difference signal), or Menon's demosaicking of the RGGB mosaic (not differentiated:
        it depends on the observation only); the known samples exact either way."""
        if self.config.get("initial_estimate", "bilinear") == "menon":
            from ..classical.demosaic import demosaic_menon

            with torch.no_grad():
                x = demosaic_menon(known.sum(dim=1, keepdim=True), "RGGB")
            return torch.where(mask > 0, known, x)
        if self.config.get("initial_estimate") == "bicubic":
            from ..classical.upscale import upscale_bicubic

            with torch.no_grad():  # known = H^T y (y = known[0::2, 0::2]); the aligned bicubic keeps y
                x = upscale_bicubic(known[..., 0::2, 0::2])[..., : known.shape[-2], : known.shape[-1]]
            return torch.where(mask > 0, known, x)
        if self.config["signal"] == "green-difference":
            return green_difference_estimate(known, mask)
        return initial_estimate(known, mask)

    def trunk_features(self, known: Tensor, sigma: Tensor | None = None) -> Tensor | None:
        """The shared trunk's features ``(B, width, ceil(H/2), ceil(W/2))`` of the observation
        ``known`` (``feature_trunk="packed"``; None for the paper's per-block CNNs) and, for a
        noise-aware network, the packed noise map ``sigma`` of :meth:`noise_map`. Odd sizes are
        zero-padded at the bottom / right to whole 2x2 cells (the heads crop back)."""
        if self.config.get("feature_trunk", "per-block") != "packed":
            return None
        H, W = known.shape[-2:]
        if H % 2 or W % 2:
            known = F.pad(known, (0, W % 2, 0, H % 2))
        packed = packed_observation(known, self.config["cnn_input"])
        if self.config.get("noise_input"):
            from .noise_aware import SIGMA_INPUT_SCALE

            s = packed.new_zeros(packed.shape) if sigma is None else sigma * SIGMA_INPUT_SCALE
            packed = torch.cat([packed, s], dim=1)
        return self.trunk(packed)

    def noise_map(self, known: Tensor, mask: Tensor, noise: Tensor | None) -> Tensor:
        """The noise-aware network's noise deviation at every site in the values it reads, packed
        2x2 like the trunk's input (``(B, 4, ceil(H/2), ceil(W/2))``; odd sizes replicate-padded to
        whole cells), from ``noise`` ``(B, 3, 2)`` (:func:`gsprestore.physics.noise.packed_std_map`)."""
        from ..physics.noise import packed_std_map

        H, W = known.shape[-2:]
        if H % 2 or W % 2:
            known = F.pad(known, (0, W % 2, 0, H % 2), mode="replicate")
            mask = F.pad(mask, (0, W % 2, 0, H % 2), mode="replicate")
        return packed_std_map(known, mask, noise)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def receptive_field(self) -> int:
        """Exact radius (pixels) of the output's dependence on the input: an upper bound, since
        unrolled CG has no global reduction. Large (hundreds of pixels): see :func:`effective_halo`."""
        cfg = self.config
        # CNN (the packed trunk: 2 px a layer, once), then features of neighbours (2) and degrees (2)
        packed = cfg.get("feature_trunk", "per-block") == "packed"
        per_block = (0 if packed else cfg["cnn_layers"]) + 4
        if self.prior == "glr":
            per_block += 2 * cfg["cg_iters"]  # each normalized-Laplacian product reaches 2 px
        else:  # each CG step applies C^T C (4 px); each ADMM iteration one C x for q (2 px)
            per_block += cfg["admm_iters"] * (4 * cfg["cg_iters"] + 4)
        start = {"menon": 8, "bicubic": 4}.get(cfg.get("initial_estimate"), 2)  # Menon's halo, 4x4 taps, 5x5 tent
        if cfg.get("noise_input"):  # the noise map's 3x3 phase mean (2 px), the denoiser's CG (4 px a step)
            start += (2 + 4 * self.denoiser.iters) * (1 + len(self.denoiser.stages))
        return start + (2 * cfg["cnn_layers"] + 2 if packed else 0) + cfg["blocks"] * per_block

    def _check_input(self, known: Tensor, mask: Tensor) -> None:
        if known.dim() != 4:
            raise ValueError(f"known must be (B, C, H, W), got shape {tuple(known.shape)}")
        C = known.shape[1]
        if self.config["cnn_input"] == "estimate" and C != self.config["channels"]:
            raise ValueError(
                f"this {self.method} model takes {self.config['channels']} channels, got shape {tuple(known.shape)}"
            )

    def forward(self, known: Tensor, mask: Tensor, *, noise: Tensor | None = None,
                return_all: bool = False, _anchored: bool = False) -> Tensor | list[Tensor]:
        """Interpolate: ``known = H^T y``, ``mask = H^T 1`` (``(B, C, H, W)``) -> x ``(B, C, H, W)``
        with ``H x = y``. ``return_all`` gives ``[x^0, x^1, ..., x^T]``. ``noise``: a
        noise-aware network's ``(B, 3, 2)`` Poisson-Gaussian ``(a, b)`` per colour channel of the
        sRGB-decoded observation (:mod:`.noise_aware`; None: clean); then ``H x`` is the denoised
        observation. With a clean anchor, the weights are first blended for the level
        (:func:`.noise_aware.anchor_blend`; ``_anchored``: they are)."""
        if not _anchored and getattr(self, "clean_anchor", None) is not None:
            anchored = self._anchored_forward(known, mask, noise, return_all)
            if anchored is not None:
                return anchored
        self._check_input(known, mask)
        mask = mask.expand_as(known)
        if noise is not None and not self.config.get("noise_input"):
            raise ValueError(f"this {self.method} model is not noise-aware (it takes no noise level)")
        trunk = None
        workspace = None if torch.is_grad_enabled() else self._inference_workspace()
        if self.config.get("noise_input"):
            sigma = self.noise_map(known, mask, noise)
            trunk = self.trunk_features(known, sigma)
            if noise is not None:
                known = self.denoiser(trunk, known, mask, sigma,
                                      None if workspace is None else workspace.setdefault("denoiser", {}))
        x = self.initial(known, mask)
        xs = [x]
        mode = {False: "", None: "", True: "block"}.get(self.checkpoint, self.checkpoint)
        if mode not in CHECKPOINT_MODES:
            raise ValueError(f"unknown checkpoint mode {self.checkpoint!r}; expected one of {CHECKPOINT_MODES}")
        heads = "head" in mode
        if trunk is None:
            trunk = self.trunk_features(known)
        for block in self.blocks:
            if "block" in mode and torch.is_grad_enabled():
                x = checkpoint(block, x, known, mask, checkpoint_heads=heads, use_reentrant=False, trunk=trunk)
            else:
                x = block(x, known, mask, checkpoint_heads=heads, workspace=workspace, trunk=trunk)
            xs.append(x)
        return xs if return_all else x

    def _inference_workspace(self) -> dict:
        """The buffers the graph functions and solvers reuse in an inference forward
        (:func:`gsprestore.graph.operators.edge_weights`' ``workspace``), kept with the network
        from one forward to the next: the tiles of a job have one size, so their graph buffers are
        allocated and zeroed once instead of at every forward (a buffer of another size, dtype or
        device is replaced), and the restore engine frees them when the job ends
        (:meth:`release_workspace`). One forward at a time per network object, as for any module
        with state."""
        ws = self.__dict__.get("_workspace")
        if ws is None:
            ws = self.__dict__["_workspace"] = {}
        return ws

    def release_workspace(self) -> None:
        """Free :meth:`_inference_workspace`'s buffers (the restore engine does at the end of a job)."""
        self.__dict__.pop("_workspace", None)

    def _anchored_forward(self, known: Tensor, mask: Tensor, noise: Tensor | None,
                          return_all: bool) -> Tensor | list[Tensor] | None:
        """:meth:`forward` with the weights blended toward the clean anchor for ``noise``'s level,
        one call per distinct share in the batch (a training batch of drawn levels: the clean
        ones together, those above the ramp together); None where every element's share is 1
        (the network's own weights)."""
        from .noise_aware import anchor_blend

        g = anchor_blend(noise, known.shape[0])
        if bool((g >= 1).all()):
            return None
        shares = torch.unique(g).tolist()
        if len(shares) == 1:  # one level for the batch (inference: every tile of a frame)
            return self._forward_at_share(shares[0], known, mask, noise, return_all)
        mask = mask.expand(known.shape[0], *mask.shape[1:])
        noise = None if noise is None else noise.expand(known.shape[0], *noise.shape[1:])
        parts: dict[int, Tensor | list[Tensor]] = {}
        for share in shares:
            rows = (g == share).nonzero().flatten()
            out = self._forward_at_share(share, known[rows], mask[rows], None if noise is None else noise[rows],
                                         return_all)
            for j, i in enumerate(rows.tolist()):
                parts[i] = [step[j:j + 1] for step in out] if return_all else out[j:j + 1]
        ordered = [parts[i] for i in range(known.shape[0])]
        if return_all:
            return [torch.cat(step) for step in zip(*ordered)]
        return torch.cat(ordered)  # type: ignore[arg-type]

    def _forward_at_share(self, share: float, known: Tensor, mask: Tensor, noise: Tensor | None,
                          return_all: bool) -> Tensor | list[Tensor]:
        """:meth:`forward` with the anchored weights at ``share`` (1: the network's own).
        Gradient checkpointing is off in a blended call: its recomputation would run after the
        blended weights are gone."""
        from torch.func import functional_call

        kwargs = {"noise": noise, "return_all": return_all, "_anchored": True}
        if share >= 1:
            return self.forward(known, mask, **kwargs)
        saved, self.checkpoint = self.checkpoint, False
        try:
            return functional_call(self, self.clean_anchor.weights(self, share), (known, mask), kwargs)
        finally:
            self.checkpoint = saved


#: parameter-name endings of the unrolled-CG step sizes (each block's ``alpha`` and ``beta``)
STEP_SIZE_SUFFIXES = (".alpha", ".beta")


def added_steps(stored_shape: tuple[int, ...], shape: tuple[int, ...]) -> Tensor:
    """Bool mask of ``shape`` (``([A,] T, K)`` step sizes): True at the steps a network unrolled to
    ``shape`` has beyond one unrolled to ``stored_shape`` (a later ADMM iteration or CG step; the
    last axis, the heads, is not an iteration)."""
    added = torch.zeros(shape, dtype=torch.bool)
    for axis, m in enumerate(stored_shape[:-1]):
        view = [1] * len(shape)
        view[axis] = shape[axis]
        added |= (torch.arange(shape[axis]) >= m).view(view)
    return added


def regrown_step_sizes(name: str, stored: Tensor, shape: tuple[int, ...]) -> Tensor | None:
    """The unrolled-CG step sizes ``stored`` (``alpha`` / ``beta`` of a block: ``(T, K)`` for GLR,
    ``(A, T, K)`` for GTV, A ADMM iterations of T CG steps, K heads) for a network unrolled to
    ``shape``: a curriculum over the iterations (``--init`` from shallower weights). None when
    they do not correspond (another parameter, another head count, another layout).

    Every step the two networks share keeps its learned value. An added step gets ``alpha = 0``
    and its nearest stored step's ``beta``: the unrolled CG update ``x^{t+1} = x^t + alpha_t p^t``,
    ``r^{t+1} = r^t - alpha_t A p^t`` (appendix "Parameters Learning in CG") leaves x and r as
    they were when ``alpha_t = 0``, and each ADMM x-update (eq. 20) starts from the previous x, so
    added CG steps (after the stored ones of their ADMM iteration) and added ADMM iterations (all
    their steps 0) change nothing: the deeper network returns what the stored one did, and
    training starts from its accuracy instead of from step sizes that never ran at that depth.
    The added alphas still get gradients (``dL/d alpha_t = <adjoint, p^t>``), so training can grow
    them. With fewer iterations the leading steps are kept."""
    if not name.endswith(STEP_SIZE_SUFFIXES) or stored.ndim != len(shape) or stored.shape[-1] != shape[-1]:
        return None
    index = torch.meshgrid(*[torch.arange(n).clamp_max(m - 1) for n, m in zip(shape, stored.shape)], indexing="ij")
    grown = stored[index].clone()
    if name.endswith(".alpha"):
        grown[added_steps(tuple(stored.shape), shape)] = 0.0
    return grown


def build_model(method: str, task: str, **overrides: Any) -> UnrolledNet:
    """``build_model("ugtv", "demosaic")`` -> the paper-size uGTV for demosaicking (untrained).
    ``overrides`` change any :func:`default_config` key (e.g. ``blocks=1``)."""
    prior = METHOD_PRIOR.get(method)
    if prior is None:
        raise ValueError(f"unknown learned method {method!r}; expected one of {', '.join(METHOD_PRIOR)}")
    if method_trunk(method) == "packed":
        overrides = {**lite_config(prior, task), **overrides}
    if method.endswith(DENOISE_SUFFIX):
        overrides = {**overrides, "noise_input": True}
    return UnrolledNet(prior, task, **overrides)


def lite_config(prior: str, task: str) -> dict[str, Any]:
    """The CPU-size network's options over :func:`default_config` (``uglr-lite`` / ``ugtv-lite``,
    issue 39; the shape of the shipped weights, chosen by the cost model, the ablation and the
    recipe trials in ``docs/cpu-networks.md``): one packed trunk (``width`` x ``cnn_layers`` at half
    resolution) instead of five per-block CNNs, one block of one head (the size the CPU's time
    budget allows: docs/cpu-networks.md), started from Menon's estimate (demosaicking) or the
    grid-aligned bicubic (2x); the solvers' depth as the shipped paper-size networks use it."""
    cfg: dict[str, Any] = {"feature_trunk": "packed", "blocks": 1, "heads": 1, "features": 12, "width": 32,
                           "cnn_layers": 4}
    if is_mosaic(task):
        cfg.update(signal="green-difference", initial_estimate="menon")
    else:
        cfg["initial_estimate"] = "bicubic"
    cfg.update(cg_iters=15) if prior == "glr" else cfg.update(admm_iters=2, cg_iters=5)
    return cfg
