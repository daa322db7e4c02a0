"""The noise-aware CPU-size network (``noise_input=True``, issue 49): the noise level is an input
of the features that build the graphs and of the solver's weights.

A noisy Bayer mosaic breaks the interpolation networks' premise, ``H x = y`` (the known samples
are re-imposed after every block): the noise would stay on a third of the pixels and spread into
the rest. The noise-aware network first *denoises the samples on a learned graph* and then
interpolates from them as before:

1. the noise model's standard deviation at every site (:func:`gsprestore.physics.noise.packed_std_map`,
   from the Poisson-Gaussian ``(a, b)`` per colour channel), packed 2x2 like the observation, is
   read by the shared trunk next to it (4 more input channels), so every graph the network
   learns (eq. 27's edge weights) sees how noisy each pixel is;
2. :class:`GraphDenoiser` solves the graph Laplacian regularized problem of the paper's Sec. 2.2
   (``min_z ||y - z||^2 + mu z^T L z``, eq. 3 with H = I) on the packed planes of the mosaic, the
   four Bayer phases sharing one graph learned from the trunk (a 5x5-window graph at half
   resolution, eq. 27's metric ``M = A A^T`` on a 1x1 projection of the trunk). The
   regularization weight is per pixel and proportional to the noise variance there:
   ``(I + lambda S L_n S) z = y`` with ``S = diag(sigma_i)`` and ``L_n`` the normalized Laplacian
   (symmetric positive definite, eigenvalues in ``[1, 1 + 2 lambda max sigma^2]``), solved by
   ``iters`` steps of conjugate gradient (eq. 9's solver). Where sigma is 0 the system is the
   identity and the samples stay exactly what they were: the clean network is a special case,
   and one model serves every level including zero;
3. the denoised samples are the network's known samples from then on: Menon's initial estimate
   and the unrolled GTV / GLR blocks run on them unchanged.

**The clean anchor** (``clean_anchor``). Trained on noisy pairs, the trunk and the interpolating
block restore a clean or nearly clean mosaic worse than the clean network they started from
(the pack's held-out crops: 33.14 against 33.34 dB at zero noise). A network with the anchor keeps
the clean network's weights beside its own (:class:`CleanAnchor`) and runs, for a frame of noise
level ``s`` (:func:`anchor_blend`), the weights ``W_clean + g(s) (W - W_clean)``: deep network
interpolation (Wang et al., "Deep Network Interpolation for Continuous Imagery Effect
Transition", CVPR 2019), with ``g`` a ramp in the frame's noise deviation at mid-grey
(:data:`ANCHOR_RAMP`, chosen on held-out crops by lab/research/noise_blend_trial.py). At zero
noise it is the clean network exactly; the denoising passes keep their own weights (their
strength already follows the noise level).

The trunk's noise channels start at zero weights and the denoiser at any weights, so a clean
network's weights give a noise-aware network that restores clean input exactly as they did
(:func:`load_clean_weights`), and training on noisy pairs starts from there.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: The noise map enters the trunk multiplied by this (encoded deviations of 0.01-0.2 become
#: inputs of order 0.1-2, the range of the observation's own channels).
SIGMA_INPUT_SCALE = 10.0
#: The CG steps of each denoising pass when the network's configuration has no ``denoise_iters``
#: (what the passes were trained with).
DENOISE_ITERS = 8


#: The linear signal level at which a frame's noise is read for the clean anchor's blend (a mid-grey).
MID_GREY = 0.18
#: The clean anchor's ramp (:func:`anchor_blend`): the noise deviation at :data:`MID_GREY` (linear,
#: RMS over the colour channels) below which the clean network's weights run, and from which the
#: noise-aware ones run alone. Set on held-out crops (docs/training.md, "The clean anchor").
ANCHOR_RAMP: tuple[float, float] = (0.006, 0.016)


def anchor_blend(noise: Tensor | None, batch: int) -> Tensor:
    """The noise-aware weights' share ``g`` in ``[0, 1]`` per batch element (``(batch,)``) for the
    Poisson-Gaussian level ``noise`` ``(B, 3, 2)`` (None: clean, 0): a linear ramp over
    :data:`ANCHOR_RAMP` in the deviation ``sqrt(mean_c(a_c MID_GREY + b_c))``."""
    if noise is None:
        return torch.zeros(batch)
    std = (noise[..., 0] * MID_GREY + noise[..., 1]).mean(dim=-1).clamp_min(0).sqrt().reshape(-1).float().cpu()
    lo, hi = ANCHOR_RAMP
    return ((std - lo) / (hi - lo)).clamp(0, 1).expand(batch)


class CleanAnchor(nn.Module):
    """The clean network's weights beside a noise-aware network's (``clean_anchor``; see the
    module docstring): one buffer for each parameter outside the denoiser, under the parameter's
    name with ``.`` as ``__`` (buffers: saved in the weights file, never trained)."""

    def __init__(self, aware: nn.Module):
        super().__init__()
        self.names = [n for n, _ in aware.named_parameters() if not n.startswith("denoiser.")]
        for name, p in aware.named_parameters():
            if not name.startswith("denoiser."):
                self.register_buffer(name.replace(".", "__"), torch.zeros_like(p.detach()))

    def weights(self, aware: nn.Module, g: float) -> dict[str, Tensor]:
        """``aware``'s anchored parameters at share ``g``: the clean ones themselves at 0,
        ``W_clean + g (W - W_clean)`` above."""
        anchors = {n: getattr(self, n.replace(".", "__")) for n in self.names}
        if g <= 0:
            return anchors
        own = dict(aware.named_parameters())
        return {n: a + g * (own[n] - a) for n, a in anchors.items()}

    def set_clean(self, clean_state: dict[str, Tensor], template: nn.Module) -> None:
        """Store a clean network's ``state_dict`` as the anchor, laid out as :func:`load_clean_weights`
        lays it into the noise-aware ``template`` (the trunk's noise channels at zero)."""
        import copy

        shaped = copy.deepcopy(template)
        load_clean_weights(shaped, clean_state)
        own = dict(shaped.named_parameters())
        for n in self.names:
            getattr(self, n.replace(".", "__")).copy_(own[n].detach())


def load_clean_weights(aware: nn.Module, clean_state: dict[str, Tensor]) -> None:
    """Load a clean CPU-size network's ``state_dict`` into the noise-aware network ``aware`` built
    with the same configuration plus ``noise_input``: every tensor is kept, the trunk's first
    convolution gets zero weights from the added noise-map channels, and the denoiser keeps
    ``aware``'s own values. On clean input (no noise level) ``aware`` then restores exactly as the
    clean network did."""
    state = aware.state_dict()
    for name, t in clean_state.items():
        if name.startswith("clean_anchor."):
            continue
        if name == "trunk.cnn.convs.0.weight":
            w = torch.zeros_like(state[name])
            w[:, : t.shape[1]] = t
            state[name] = w
        else:
            state[name] = t
    aware.load_state_dict(state)


class GraphDenoiser(nn.Module):
    """GLR denoising of the packed mosaic on a graph learned from the trunk (see the module
    docstring): ``features`` per pixel by a 1x1 convolution of the trunk, the metric factor
    ``A`` (``features x features``, eq. 27), the log of the regularization weight lambda, and
    ``iters`` conjugate-gradient steps."""

    def __init__(self, trunk_width: int, features: int = 8, iters: int = DENOISE_ITERS, strength_init: float = 30.0,
                 metric_init: float = 0.5, stages: int = 1):
        super().__init__()
        self.iters = int(iters)
        self.features = int(features)
        self.project = nn.Conv2d(trunk_width, features, 1)
        metric = torch.zeros(1, features, features)
        metric.diagonal(dim1=-2, dim2=-1).fill_(metric_init)
        self.metric_factor = nn.Parameter(metric)
        self.log_strength = nn.Parameter(torch.tensor(math.log(strength_init)))
        self.stages = nn.ModuleList(RefineStage(trunk_width, features, metric_init) for _ in range(int(stages) - 1))

    def forward(self, trunk: Tensor, known: Tensor, mask: Tensor, sigma: Tensor,
                workspace: dict | None = None) -> Tensor:
        """The denoised known samples ``(B, 3, H, W)`` (zero where ``mask`` is) from the trunk's
        features ``(B, width, ceil(H/2), ceil(W/2))``, the observation ``known`` / ``mask`` and the
        packed noise map ``sigma`` ``(B, 4, ceil(H/2), ceil(W/2))`` (``UnrolledNet.noise_map``).
        ``workspace`` (inference): a dict whose buffers the graph functions reuse
        (:func:`gsprestore.graph.operators.edge_weights`)."""
        H, W = known.shape[-2:]
        mos = known.sum(dim=1, keepdim=True)
        if H % 2 or W % 2:  # whole 2x2 cells, as the trunk saw them
            mos = F.pad(mos, (0, W % 2, 0, H % 2), mode="replicate")
        y = F.pixel_unshuffle(mos, 2).unsqueeze(1)  # (B, 1, 4, h, w): one graph, four signals
        sd = sigma.unsqueeze(1)
        # every pass's projection of the trunk in one convolution
        gs = projected_conv(trunk, [self.project] + [st.project for st in self.stages],
                            [self.metric_factor] + [st.metric_factor for st in self.stages])
        z = glr_denoise(y, gs[0], sd * torch.exp(0.5 * self.log_strength), self.iters, workspace)
        for stage, g in zip(self.stages, gs[1:]):  # re-learn the graph from the denoised planes, denoise again
            g = g + projected_conv(F.pad(z.squeeze(1), (1, 1, 1, 1), mode="replicate"), [stage.refine],
                                   [stage.metric_factor])[0]
            z = glr_denoise(z, g, sd * torch.exp(0.5 * stage.log_strength), self.iters, workspace)
        z = F.pixel_shuffle(z.squeeze(1), 2)[..., :H, :W]
        return mask * z


class RefineStage(nn.Module):
    """A further GLR denoising pass (``denoise_stages`` > 1): its graph's features come from the
    trunk and from the planes the previous pass denoised (a 3x3 convolution), so the graph is
    learned from a cleaner signal, as iterative graph denoisers re-estimate theirs. Its strength
    starts at 1e-4 (the pass is then close to the identity: adding one leaves a trained network
    nearly unchanged)."""

    def __init__(self, trunk_width: int, features: int, metric_init: float = 0.5):
        super().__init__()
        self.project = nn.Conv2d(trunk_width, features, 1)
        self.refine = nn.Conv2d(4, features, 3)
        metric = torch.zeros(1, features, features)
        metric.diagonal(dim1=-2, dim2=-1).fill_(metric_init)
        self.metric_factor = nn.Parameter(metric)
        self.log_strength = nn.Parameter(torch.tensor(math.log(1e-4)))


def projected_conv(x: Tensor, convs: list[nn.Conv2d], factors: list[Tensor]) -> list[Tensor]:
    """``[A_i^T conv_i(x)]`` (each ``(B, F, h, w)``) for the metric factors ``factors[i]``
    ``(1, F, F)`` (``M = A A^T`` of eq. 27) in one convolution, each ``A_i^T`` folded into its
    convolution's weights and bias: the projected features ``g`` whose distances
    ``|g_p - g_q|^2`` are the metric's ``(f_p - f_q)^T M (f_p - f_q)`` of the features
    ``f = conv(x)``, as the blocks compute them, without a pass over ``f``. The convolutions share
    their shape (kernel, stride, padding)."""
    weights, biases = [], []
    for conv, factor in zip(convs, factors):
        at = factor[0].transpose(0, 1)  # at[c, e] = A[e, c]
        weights.append(torch.einsum("ce,e...->c...", at, conv.weight))
        biases.append(at @ conv.bias if conv.bias is not None else conv.weight.new_zeros(at.shape[0]))
    g = F.conv2d(x, torch.cat(weights), torch.cat(biases), convs[0].stride, convs[0].padding)
    return list(g.split([w.shape[0] for w in weights], dim=1))


def glr_denoise(y: Tensor, g: Tensor, s: Tensor, iters: int, workspace: dict | None = None) -> Tensor:
    """``(I + S L_n S) z = y`` (eq. 3 of the paper with H = I, the regulariser weighted per pixel)
    by ``iters`` CG steps from ``z = y``: ``y`` ``(B, 1, C, h, w)``, the graph of eq. 27 from the
    projected features ``g`` ``(B, F, h, w)`` (:func:`projected_conv`: ``d = |g_p - g_q|^2``), ``s``
    the per-pixel weights ``(B, 1, C, h, w)``. ``workspace`` (inference): the graph's buffers are
    kept there for the next call of the same size."""
    from ..core import backend
    from ..graph import operators as graph

    w = graph.edge_weights(g.contiguous().unsqueeze(1), None, workspace=workspace)
    wn, diag = graph.normalized_weights(w, workspace=workspace)
    if backend.no_grad_usable(wn, diag, s, y) and y.shape[2] <= 4 and y.shape[1] == 1:
        return _native_cg(wn, diag, s, y, iters)

    def apply_A(v: Tensor) -> Tensor:  # (I + S L_n S) v
        return v + s * graph.diag_minus_adjacency_apply(wn, s * v, diag)

    return damped_cg(apply_A, y, y, iters)


#: :func:`damped_cg`'s damping of its ratios: ``REL_EPS * |b|^2 + ABS_EPS``.
REL_EPS, ABS_EPS = 1e-12, 1e-30


def _native_cg(wn: Tensor, diag: Tensor, s: Tensor, y: Tensor, iters: int) -> Tensor:
    """:func:`damped_cg` of :func:`glr_denoise`'s system in one native kernel (inference): three
    sweeps over the planes a step instead of about fourteen element-wise tensor operations. The
    buffers have padded planes (:func:`gsprestore.core.backend.padded_planes`): the stencil reads the
    C planes of a pixel together."""
    from ..core import backend

    shape = tuple(y.shape)
    x, r, p, u, q = (backend.padded_planes(y, *shape) for _ in range(5))
    b = backend.rows_contiguous(y)
    s = backend.rows_contiguous(s.expand(shape))
    backend.native().glr_denoise_cg(backend.rows_contiguous(wn), backend.rows_contiguous(diag), s, b, x, r, p,
                                    u, q, iters, REL_EPS, ABS_EPS)
    return x


def damped_cg(apply_A, b: Tensor, x: Tensor, iters: int, rel_eps: float = REL_EPS) -> Tensor:
    """``iters`` conjugate-gradient steps for ``A x = b`` (every system over the last three
    dimensions), differentiable by autograd, with ``rel_eps * |b|^2`` added to each denominator:
    the denoiser's systems are near the identity at low noise, where CG converges in a few steps
    and the residuals underflow; the plain ratios ``r.r / p.Ap`` then have gradients of
    ``r.r / (p.Ap)^2`` that overflow to inf * 0 = NaN, the damped ones stay finite (and the
    iterates are the same to rounding while the residual is above that floor)."""
    dims = (-3, -2, -1)
    eps = rel_eps * (b * b).sum(dim=dims, keepdim=True) + ABS_EPS
    r = b - apply_A(x)
    p = r
    rr = (r * r).sum(dim=dims, keepdim=True)
    for _ in range(iters):
        Ap = apply_A(p)
        alpha = rr / ((p * Ap).sum(dim=dims, keepdim=True) + eps)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_new = (r * r).sum(dim=dims, keepdim=True)
        p = r + (rr_new / (rr + eps)) * p
        rr = rr_new
    return x
