"""What a graph model uses on one image: per block and head, the learned edge weights, the
normalised "attention" of a pixel over its 5x5 window, the metric matrix M and the solver's
residuals per iteration (``gsprestore explain``).

Everything is recomputed with the models' public pieces, block by block, exactly as the forward
pass does it: features ``f`` (the CNN of a block, or colour + location for iGLR/iGTV), the metric
``M`` (``A A^T`` per head, or ``1.5 I``), distances ``d_ij = (f_i - f_j)^T M (f_i - f_j)``,
weights ``w_ij = exp(-d_ij)`` (eqs. 25/27), random-walk weights ``wbar`` (eq. 28, a softmax of
``-d`` over the window: the "attention" of Sec. 5.2), then the solver of the block: GLR (eq. 9)
by the solvers' own CG, whose relative residual ``||b - A x_t|| / ||b||`` :func:`cg_trace` reads
from their ``trace`` callback, or GTV by the ADMM of eqs. 19-24 run with ``history``
(:func:`gsprestore.solvers.gtv_admm_reference`, its x-updates through :func:`cg_trace`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..physics.tasks import is_mosaic
from ..core.errors import GspError, UsageError

EXPLAIN_METHODS: tuple[str, ...] = ("igtv", "iglr", "ugtv", "uglr", "ugtv-lite", "uglr-lite")
#: The four nearest-neighbour directions drawn as edge-weight maps: name -> index in graph.OFFSETS.
DIRECTIONS: dict[str, tuple[int, int]] = {
    "horizontal (right)": (0, 1),
    "vertical (down)": (1, 0),
    "diagonal (down-right)": (1, 1),
    "anti-diagonal (down-left)": (1, -1),
}
DEFAULT_CROP = 128


@dataclass
class HeadView:
    """One head of one block: ``w`` (4, H, W) weights to the :data:`DIRECTIONS` neighbours,
    ``attention`` (5, 5) wbar of the chosen pixel (centre NaN), ``metric`` (F, F),
    ``residuals`` name -> per-iteration values, ``mix`` the head's weight in the block output."""

    block: int
    head: int
    w: np.ndarray
    attention: np.ndarray
    metric: np.ndarray
    residuals: dict[str, list[float]]
    mix: float = 1.0


@dataclass
class Explanation:
    method: str
    task: str
    crop: tuple[int, int, int, int]  # (x, y, w, h) in output/reference pixels
    pixel: tuple[int, int]  # (x, y) inside the crop
    reference: np.ndarray | None  # (h, w, C) ground-truth crop, if any
    estimates: list[np.ndarray]  # x^0 (initial), x^1, ... (h, w, C): the estimate each block sees
    heads: list[HeadView] = field(default_factory=list)
    feature_names: list[str] = field(default_factory=list)
    solver: str = ""


# ----------------------------------------------------------------------------------------------
# numerical pieces
# ----------------------------------------------------------------------------------------------


def window_attention(wbar: Tensor, y: int, x: int) -> np.ndarray:
    """The 24 directed weights ``wbar(p -> p + o)`` (eq. 28) of pixel ``p = (y, x)`` as a 5x5
    array indexed by offset (centre NaN, out-of-image neighbours 0). ``wbar`` (24, H, W); the
    in-image entries sum to one (a random-walk row)."""
    from ..graph.operators import DIRECTED_OFFSETS, WINDOW_RADIUS

    r = WINDOW_RADIUS
    a = np.zeros((2 * r + 1, 2 * r + 1))
    a[r, r] = np.nan
    for j, (dy, dx) in enumerate(DIRECTED_OFFSETS):
        a[r + dy, r + dx] = float(wbar[j, y, x])
    return a


def direction_maps(w: Tensor) -> Tensor:
    """``w`` (..., 12, H, W) undirected weights -> (..., 4, H, W): each pixel's weight to its right,
    lower, lower-right and lower-left neighbour (:data:`DIRECTIONS`), 0 where that neighbour is outside."""
    from ..graph.operators import OFFSETS

    idx = [OFFSETS.index(o) for o in DIRECTIONS.values()]
    return w[..., idx, :, :]


def cg_trace(apply_A, b: Tensor, x0: Tensor, cg: Any, iters: int, tol: float = 0.0) -> tuple[Tensor, Tensor]:
    """CG for ``A x = b`` by :func:`gsprestore.solvers.cg_unrolled` (``cg=("unrolled", alphas,
    betas)``) or :func:`~gsprestore.solvers.cg_exact` (``cg="exact"``) itself, reading its
    ``trace``: the relative residual ``||b - A x_t|| / ||b||`` over (C, H, W) for t = 0..T.
    Returns ``(x_T, residuals (T + 1, B, K))``."""
    from ..solvers import cg_exact, cg_unrolled

    dims = (-3, -2, -1)
    nb = b.square().sum(dim=dims).sqrt().clamp_min(1e-30)
    res: list[Tensor] = []

    def trace(t: int, x: Tensor, r: Tensor) -> None:
        res.append(r.detach().square().sum(dim=dims).sqrt() / nb)

    if cg == "exact":
        x = cg_exact(apply_A, b, x0.expand(b.shape), iters=iters, tol=tol, trace=trace)
    else:
        _, alphas, betas = cg
        x = cg_unrolled(apply_A, b, x0, alphas, betas, trace=trace)
    return x, torch.stack(res)


def gtv_trace(wbar: Tensor, known: Tensor, mask: Tensor, *, gamma: Any = 10.0, admm_iters: int = 5,
              cg_iters: int = 10, cg: Any = "exact", mu_init: float = 0.1,
              x0: Tensor | None = None, precondition: bool = False) -> tuple[Tensor, list[dict], Tensor]:
    """:func:`gsprestore.solvers.gtv_admm_reference` (the ADMM of eqs. 19-24, one function per
    equation) with the x-update (eq. 20) run by :func:`cg_trace`: returns ``(x, history,
    cg_residuals)`` where ``history`` is the reference's per-iteration dicts and
    ``cg_residuals`` ``(admm_iters, T + 1, B, K)`` the relative residuals of every x-update.
    ``precondition``: each x-update's CG runs on the Jacobi-scaled system, as learned uGTV does
    (``gtv_precondition``); the residuals are then those of the scaled system CG iterates on."""
    from ..solvers.gtv.reference import make_problem, gtv_admm_reference

    traces: list[Tensor] = []
    sq = None
    if precondition:
        km = known if known.dim() == 5 else known.unsqueeze(1)
        mm = mask if mask.dim() == 5 else mask.unsqueeze(1)
        sq = make_problem(wbar, km, mm).diag.clamp_min(1e-12).sqrt()

    def traced_cg(apply_A, b, x_start, spec):
        if sq is None:
            x, res = cg_trace(apply_A, b, x_start, spec, cg_iters)
        else:  # (P^-1/2 A P^-1/2) z = P^-1/2 b, x = P^-1/2 z
            z, res = cg_trace(lambda v: apply_A(v / sq) / sq, b / sq, x_start * sq, spec, cg_iters)
            x = z / sq
        traces.append(res)
        return x

    history: list[dict] = []
    x = gtv_admm_reference(wbar, known, mask, gamma=gamma, admm_iters=admm_iters, cg_iters=cg_iters, cg=cg,
                           mu_init=mu_init, x0=x0, history=history, x_solver=traced_cg)
    return x, history, torch.stack(traces)


def glr_residuals(w: Tensor, known: Tensor, mask: Tensor, x0: Tensor, cg: Any, iters: int,
                  laplacian: str, tol: float = 0.0) -> Tensor:
    """Relative CG residuals ``(T + 1, B, K)`` of the GLR system of eq. 9 that
    :func:`gsprestore.solvers.glr_solve` solves (same Laplacian form and variable)."""
    from ..graph import operators as G

    known5, mask5, x05 = known.unsqueeze(1), mask.unsqueeze(1), x0.unsqueeze(1)
    if laplacian == "preconditioned":
        s = G.degree(w).clamp_min(1e-12).sqrt()
        known5, x05 = s * known5, s * x05
    if laplacian in ("preconditioned", "normalized"):
        wop, diag = G.normalized_weights(w)
    else:
        wop, diag = w, G.degree(w)
    keep = 1.0 - mask5
    y = mask5 * known5
    B, _, C, H, W = known5.shape
    shape = (B, w.shape[1], C, H, W)

    def apply_A(v: Tensor) -> Tensor:
        return keep * G.diag_minus_adjacency_apply(wop, v, diag)

    b = -(keep * G.diag_minus_adjacency_apply(wop, y, diag)).expand(shape)
    _, res = cg_trace(apply_A, b, (keep * x05).expand(shape), cg, iters, tol)
    return res


# ----------------------------------------------------------------------------------------------
# crops and observations
# ----------------------------------------------------------------------------------------------


def crop_pattern(pattern: str, x: int, y: int) -> str:
    """The Bayer pattern of a crop starting at column ``x``, row ``y`` of a ``pattern`` mosaic."""
    p = pattern.upper()
    return "".join(p[((y + i) % 2) * 2 + (x + j) % 2] for i in (0, 1) for j in (0, 1))


def _ints(text: str, n: int) -> tuple[int, ...]:
    """``"1,2,3"`` -> ``(1, 2, 3)`` if it holds exactly ``n`` integers, else ``()``."""
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        return ()
    return vals if len(vals) == n else ()


def parse_box(text: str | None, what: str = "--crop") -> tuple[int, int, int, int] | None:
    """``"x,y,w,h"`` -> a tuple of four ints (w, h > 0, x, y >= 0)."""
    if text is None:
        return None
    vals = _ints(text, 4)
    if not vals or vals[2] <= 0 or vals[3] <= 0 or vals[0] < 0 or vals[1] < 0:
        raise UsageError(f"{what} must be x,y,w,h with x, y >= 0 and w, h > 0, got {text!r}")
    return vals  # type: ignore[return-value]


def parse_point(text: str | None, what: str = "--pixel") -> tuple[int, int] | None:
    if text is None:
        return None
    vals = _ints(text, 2)
    if not vals or min(vals) < 0:
        raise UsageError(f"{what} must be x,y with x, y >= 0, got {text!r}")
    return vals  # type: ignore[return-value]


def _check_box(box: tuple[int, int, int, int], W: int, H: int, what: str = "--crop") -> None:
    x, y, w, h = box
    if x + w > W or y + h > H:
        raise UsageError(f"{what} {x},{y},{w},{h} leaves the {W}x{H} image")


# ----------------------------------------------------------------------------------------------
# the explanation
# ----------------------------------------------------------------------------------------------


def explain(
    image: np.ndarray,
    method: str,
    task: str = "demosaic",
    *,
    pattern: str = "RGGB",
    crop: tuple[int, int, int, int] | None = None,
    pixel: tuple[int, int] | None = None,
    weights: str | None = None,
    reference: bool = True,
    restorer: Any = None,
) -> Explanation:
    """Explain ``method`` on ``image`` ``(H, W, C)`` float: for ``demosaic``, an RGB reference
    (mosaicked with ``pattern``) or a 1-channel mosaic; for ``upscale2x``, the high-resolution
    reference (sampled at even coordinates), or with ``reference=False`` the low-resolution input.
    ``crop`` (x, y, w, h) in full-resolution pixels (default: a 128x128 crop centred on ``pixel``,
    or on the image without one), ``pixel`` (x, y) in image coordinates inside the crop (default:
    the crop centre). ``restorer`` overrides the
    one built from ``method``/``weights`` (tests)."""
    from ..graph.operators import edge_distances, edge_weights, random_walk_weights_from_distances
    from ..models.estimate import initial_estimate
    from ..methods.registry import get_restorer, method_spec, observation
    from ..physics.sampling import check_pattern, mosaic

    method = method.lower()
    if method not in EXPLAIN_METHODS:
        raise UsageError(f"explain works on the graph methods {', '.join(EXPLAIN_METHODS)}, not {method!r}")
    spec = method_spec(method, task)
    img = np.asarray(image, dtype=np.float32)
    if img.ndim == 2:
        img = img[:, :, None]
    if is_mosaic(task):
        pattern = check_pattern(pattern)
        if img.shape[2] not in (1, 3):
            raise UsageError(f"demosaicking needs an RGB reference or a 1-channel mosaic, got {img.shape[2]} channels")
        has_ref = img.shape[2] == 3
        full_h, full_w = img.shape[:2]
    else:
        has_ref = reference
        scale = 1 if has_ref else 2
        full_h, full_w = img.shape[0] * scale, img.shape[1] * scale
    if crop is None:
        cw, ch = min(DEFAULT_CROP, full_w), min(DEFAULT_CROP, full_h)
        if pixel is None:
            crop = ((full_w - cw) // 2, (full_h - ch) // 2, cw, ch)
        else:  # centred on the pixel, kept inside the image (any photo size)
            if not (0 <= pixel[0] < full_w and 0 <= pixel[1] < full_h):
                raise UsageError(f"--pixel {pixel[0]},{pixel[1]} is outside the {full_w}x{full_h} image")
            crop = (min(max(pixel[0] - cw // 2, 0), full_w - cw), min(max(pixel[1] - ch // 2, 0), full_h - ch), cw, ch)
    _check_box(crop, full_w, full_h)
    x0c, y0c, cw, ch = crop
    # even origins keep the Bayer phase / the 2x sampling grid; learned demosaickers want RGGB
    x0c, y0c = x0c - x0c % 2, y0c - y0c % 2
    ox = oy = 0
    if is_mosaic(task) and spec.kind == "learned":
        for dy in (0, 1):
            for dx in (0, 1):
                if crop_pattern(pattern, x0c + dx, y0c + dy) == "RGGB":  # exactly one (dx, dy)
                    ox, oy = dx, dy
        x0c, y0c = x0c + ox, y0c + oy
        if x0c + cw > full_w:
            cw -= 2
        if y0c + ch > full_h:
            ch -= 2
    if not is_mosaic(task):
        cw, ch = cw - cw % 2, ch - ch % 2
    if min(cw, ch) < 8:
        raise UsageError(f"the explained crop must be at least 8x8 pixels, got {cw}x{ch}")
    crop = (x0c, y0c, cw, ch)
    if pixel is None:
        pixel = (x0c + cw // 2, y0c + ch // 2)
    px, py = pixel
    if not (x0c <= px < x0c + cw and y0c <= py < y0c + ch):
        raise UsageError(f"--pixel {px},{py} is outside the crop {x0c},{y0c},{cw},{ch}")
    pixel = (px - x0c, py - y0c)

    ref_crop = None
    if is_mosaic(task):
        cp = crop_pattern(pattern, x0c, y0c)
        part = torch.from_numpy(np.ascontiguousarray(img[y0c : y0c + ch, x0c : x0c + cw])).permute(2, 0, 1)[None]
        if has_ref:
            ref_crop = img[y0c : y0c + ch, x0c : x0c + cw]
            y = mosaic(part, cp)
        else:
            y = part
    else:
        cp = pattern
        if has_ref:
            ref_crop = img[y0c : y0c + ch, x0c : x0c + cw]
            y = torch.from_numpy(np.ascontiguousarray(ref_crop[0::2, 0::2])).permute(2, 0, 1)[None]
        else:
            lr = img[y0c // 2 : (y0c + ch) // 2, x0c // 2 : (x0c + cw) // 2]
            y = torch.from_numpy(np.ascontiguousarray(lr)).permute(2, 0, 1)[None]

    if restorer is None:
        opts = {"weights": weights} if weights is not None else {}
        restorer = get_restorer(method, task, **opts)
    model = restorer.module.cpu().eval()
    known, mask = observation(task, y, cp)
    mask = mask.expand_as(known)
    ex = Explanation(method=method, task=task, crop=crop, pixel=pixel, reference=ref_crop, estimates=[])
    with torch.no_grad():
        if spec.kind == "learned":
            x = model.initial(known, mask)  # the model's own x^0
        else:
            x = initial_estimate(known, mask)
        ex.estimates.append(_hwc(x))
        if spec.kind == "learned":
            blocks = list(model.blocks)
            cfg = model.config
            ex.feature_names = [f"f{i + 1}" for i in range(cfg["features"])]
            trunk = model.trunk_features(known)
            for t, block in enumerate(blocks):
                f, M = block.head_features(x, trunk), block.metric()
                ex.heads += _views(t, f, M, block.mix_weights(), pixel, edge_distances, edge_weights,
                                   random_walk_weights_from_distances, _residuals_learned(block, f, M, known, mask, x))
                x = block(x, known, mask, trunk=trunk)
                ex.estimates.append(_hwc(x))
            ex.solver = _solver_text(block.prior, cfg.get("admm_iters"), cfg["cg_iters"], "learned unrolled CG")
        else:
            c = model.config
            C = known.shape[1]
            ex.feature_names = (["R", "G", "B"] if C == 3 else [f"c{i}" for i in range(C)]) + ["row", "col"]
            for t in range(int(c["passes"])):
                f = model.features(x)
                M = c["metric_scale"] * torch.eye(f.shape[2], dtype=x.dtype).unsqueeze(0)
                ex.heads += _views(t, f, M, torch.ones(1), pixel, edge_distances, edge_weights,
                                   random_walk_weights_from_distances, _residuals_graph(model, f, M, known, mask, x))
                x = torch.where(mask > 0, known, model.solve(model.graph_weights(x), known, mask, x))
                ex.estimates.append(_hwc(x))
            iters = c["glr_iters"] if model.prior == "glr" else c["cg_iters"]
            ex.solver = _solver_text(model.prior, c["admm_iters"], iters, f"{c['cg']} CG")
    return ex


def _solver_text(prior: str, admm: int | None, cg: int, kind: str) -> str:
    if prior == "glr":
        return f"GLR (eq. 9), {cg} steps of {kind}"
    return f"GTV (eqs. 19-24), {admm} ADMM iterations x {cg} steps of {kind}"


def _hwc(x: Tensor) -> np.ndarray:
    return x[0].permute(1, 2, 0).numpy().copy()


def _views(t, f, M, mix, pixel, edge_distances, edge_weights, rw, residuals) -> list[HeadView]:
    d = edge_distances(f, M)
    w = direction_maps(edge_weights(f, M))[0]  # (K, 4, H, W)
    wbar = rw(d)[0]  # (K, 24, H, W)
    px, py = pixel
    Ms = M if M.dim() == 3 else M.unsqueeze(0)
    out = []
    for k in range(f.shape[1]):
        res = {name: [float(v[k]) for v in vals] for name, vals in residuals.items()}
        out.append(HeadView(block=t, head=k, w=w[k].numpy().copy(), attention=window_attention(wbar[k], py, px),
                            metric=Ms[min(k, Ms.shape[0] - 1)].numpy().copy(), residuals=res, mix=float(mix[k])))
    return out


def _gtv_history(wbar, known, mask, x, **kw) -> dict[str, list]:
    _, hist, cgres = gtv_trace(wbar, known.unsqueeze(1), mask.unsqueeze(1), x0=x.unsqueeze(1), **kw)
    return {
        "ADMM primal residual": [h["primal_residual"][0] for h in hist],
        "constraint ||Hx - y||": [h["constraint"][0] for h in hist],
        "GTV ||C x||_1": [h["objective"][0] for h in hist],
        "CG relative residual of each x-update": list(cgres[:, :, 0].reshape(-1, cgres.shape[-1])),
    }


def _residuals_learned(block, f, M, known, mask, x) -> dict[str, list]:
    from ..graph.operators import edge_distances, edge_weights, random_walk_weights_from_distances

    cg = ("unrolled", block.alpha, block.beta)
    if getattr(block, "signal", "rgb") == "green-difference":  # the block's first solve: the G plane
        known, mask, x = known[:, 1:2], mask[:, 1:2], x[:, 1:2]
    if block.prior == "glr":
        res = glr_residuals(edge_weights(f, M), known, mask, x, cg, block.cg_iters, block.glr_laplacian)
        return {"CG relative residual": [r[0] for r in res]}
    wbar = random_walk_weights_from_distances(edge_distances(f, M))
    return _gtv_history(wbar, known, mask, x, gamma=torch.exp(block.log_gamma), admm_iters=block.admm_iters,
                        cg_iters=block.cg_iters, cg=cg, mu_init=block.mu_init,
                        precondition=getattr(block, "gtv_precondition", False))


def _residuals_graph(model, f, M, known, mask, x) -> dict[str, list]:
    from ..graph.operators import edge_distances, edge_weights, random_walk_weights_from_distances

    c = model.config
    if model.prior == "glr":
        exact = c["cg"] == "exact"
        iters = c["exact_iters"] if exact else c["glr_iters"]
        cg = model._cg((iters,), x)
        res = glr_residuals(edge_weights(f, M), known, mask, x, cg, iters, c["glr_laplacian"],
                            c["tol"] if exact else 0.0)
        return {"CG relative residual": [r[0] for r in res]}
    wbar = random_walk_weights_from_distances(edge_distances(f, M))
    return _gtv_history(wbar, known, mask, x, gamma=c["gamma"], admm_iters=c["admm_iters"], cg_iters=c["cg_iters"],
                        cg=model._cg((c["cg_iters"],), x), mu_init=c["mu_init"])


# ----------------------------------------------------------------------------------------------
# pictures
# ----------------------------------------------------------------------------------------------


def _rgb(a: np.ndarray) -> np.ndarray:
    return np.repeat(a, 3, axis=2) if a.shape[2] == 1 else a


MIN_WEIGHT_SPREAD = 0.01  # of the largest weight: a narrower edge-weight map is drawn on [0, max]


def weight_scale(w: np.ndarray) -> tuple[float, float]:
    """The colour scale of an edge-weight map: its own 1st to 99th percentile, so that a map whose
    weights crowd in a narrow band (near 1 in iGTV's smooth regions; the fixed pixel-distance term
    setting the level of each direction) still shows where the graph cuts. [0, max] when they are
    (nearly) constant, within :data:`MIN_WEIGHT_SPREAD` (stretched, 0.223 to 0.223 is noise)."""
    finite = np.asarray(w, dtype=np.float64)[np.isfinite(w)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = np.percentile(finite, [1.0, 99.0])
    if hi - lo < max(1e-6, MIN_WEIGHT_SPREAD * float(np.abs(finite).max())):
        return 0.0, float(finite.max()) if finite.max() > 0 else 1.0
    return float(lo), float(hi)


def _scale_for(n: int, target: int = 256) -> int:
    return max(1, target // max(1, n))


def write_explanation(ex: Explanation, outdir: str | Path, *, overwrite: bool = False) -> list[Path]:
    """Write the PNGs and ``index.md`` of ``ex`` into ``outdir`` (created; an existing non-empty
    folder needs ``overwrite``). Returns the written paths."""
    from PIL import Image

    from . import drawing as V

    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise GspError("output exists and is not a folder", out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise GspError("output folder exists and is not empty (pass --overwrite to replace its files)", out)
    if not out.parent.is_dir():
        raise GspError("output folder's parent does not exist", out.parent)
    out.mkdir(exist_ok=True)
    written: list[Path] = []

    def figure(alt: str, name: str, rows, title: str | None = None) -> list[str]:  # the tiles, saved and linked
        written.append(V.save_png(V.grid(rows, title=title), out / name, overwrite=True))
        return [f"![{alt}]({name})", ""]

    h, w = ex.estimates[0].shape[:2]
    z = _scale_for(max(h, w))
    px, py = ex.pixel
    mark = (px * z - 2 * z, py * z - 2 * z, 5 * z, 5 * z)
    md = [f"# {ex.method} on a {w}x{h} crop ({ex.task})", "",
          f"Crop x,y,w,h = {','.join(map(str, ex.crop))} of the input; pixel (x, y) = "
          f"({ex.crop[0] + px}, {ex.crop[1] + py}) (red box: its 5x5 window). Solver: {ex.solver}.", ""]
    tiles = []
    if ex.reference is not None:
        tiles.append(V.labelled(V.to_pil(V.zoom(_rgb(ex.reference), z)), ["reference"]))
    tiles.append(V.labelled(V.draw_box(V.to_pil(V.zoom(_rgb(ex.estimates[0]), z)), mark), ["x0: initial estimate"]))
    tiles.append(V.labelled(V.to_pil(V.zoom(_rgb(ex.estimates[-1]), z)), [f"result ({ex.method})"]))
    md += figure("overview", "overview.png", [tiles])

    blocks = sorted({v.block for v in ex.heads})
    for t in blocks:
        views = [v for v in ex.heads if v.block == t]
        md += [f"## Block {t + 1}" if len(blocks) > 1 or ex.method.startswith("u") else "## The graph", ""]
        rows = []
        for v in views:
            row = [V.labelled(V.draw_box(V.to_pil(V.zoom(_rgb(ex.estimates[t]), z)), mark),
                              [f"head {v.head + 1}: input x{t}", f"mix weight {v.mix:.2f}"])]
            for name, m in zip(DIRECTIONS, v.w):
                vmin, vmax = weight_scale(m)
                row.append(V.labelled(Image.fromarray(V.colormap(V.zoom(m, z), vmin, vmax), "RGB"),
                                      [f"w to {name}", f"mean {m.mean():.3f}, colours {vmin:.3g} to {vmax:.3g}"]))
            row.append(V.colorbar(1, 99, 160, "percentile of each map"))
            rows.append(row)
        md += figure("edge weights", f"block{t + 1}_edges.png", rows, f"Block {t + 1}: edge weights w_ij = exp(-d_ij) to four neighbours")

        att_rows = []
        for v in views:
            a = v.attention
            att_rows.append([
                V.labelled(V.heatmap(a, cell=44, vmin=0.0, vmax=float(np.nanmax(a)), fmt="{:.3f}"),
                           [f"head {v.head + 1}: wbar(p -> q), sum {np.nansum(a):.3f}"]),
                V.labelled(V.to_pil(V.zoom(_neighbourhood(ex.estimates[t], px, py), 44)), ["5x5 neighbourhood of p"]),
            ])
        md += figure("attention", f"block{t + 1}_attention.png", att_rows,
                     f"Block {t + 1}: attention of pixel p over its 5x5 window (eq. 28)")

        mrow = []
        for v in views:
            M = v.metric
            ev = np.linalg.eigvalsh(M)[::-1]
            cell = 36 if M.shape[0] <= 6 else 30
            mrow.append(V.labelled(_labelled_matrix(V.heatmap(M, cell=cell, fmt="{:.2f}"), ex.feature_names, cell),
                                   [f"head {v.head + 1}: M", "eigenvalues " + " ".join(f"{e:.2g}" for e in ev[:6])
                                    + (" ..." if len(ev) > 6 else "")]))
        md += figure("metric", f"block{t + 1}_metric.png", [mrow], f"Block {t + 1}: metric matrix M of d_ij = (f_i - f_j)^T M (f_i - f_j)")

        names = list(views[0].residuals)
        plots = []
        for name in names:
            series = {f"head {v.head + 1}": v.residuals[name] for v in views}
            n = len(next(iter(series.values())))
            if name.startswith("CG") and "x-update" in name:  # (admm x (T + 1)) values, ADMM by ADMM
                per = n // max(1, len(views[0].residuals["ADMM primal residual"]))
                xs = [t_ + j / per for t_ in range(1, n // per + 1) for j in range(per)]
                xlabel = f"ADMM iteration (+ CG step / {per})"
            elif name.startswith("CG"):
                xs, xlabel = list(range(n)), "CG step"
            else:
                xs, xlabel = list(range(1, n + 1)), "ADMM iteration"
            plots.append(V.line_plot(series, title=name, xlabel=xlabel, x_values=xs,
                                     log_y=not name.startswith("GTV")))
        md += figure("residuals", f"block{t + 1}_residuals.png", [plots[i : i + 2] for i in range(0, len(plots), 2)],
                     f"Block {t + 1}: solver residuals per iteration")
    md += ["How to read these pictures: see docs/interpretability.md.", ""]
    index = out / "index.md"
    tmp = out / ".index.md.part"
    tmp.write_text("\n".join(md), encoding="utf-8")
    tmp.replace(index)
    written.append(index)
    return written


def _neighbourhood(x: np.ndarray, px: int, py: int) -> np.ndarray:
    """The 5x5 window of ``x`` around (px, py), grey (0.5) outside the image."""
    h, w = x.shape[:2]
    out = np.full((5, 5, 3), 0.5, dtype=np.float32)
    src = _rgb(x)
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            yy, xx = py + dy, px + dx
            if 0 <= yy < h and 0 <= xx < w:
                out[dy + 2, dx + 2] = src[yy, xx]
    return out


def _labelled_matrix(img, names: list[str], cell: int):
    """A heat map with feature names above its columns and left of its rows."""
    from PIL import Image, ImageDraw

    from . import drawing as V

    fnt = V.font(11)
    lw, th = 34, 16
    out = Image.new("RGB", (img.width + lw, img.height + th), V.BACKGROUND)
    out.paste(img, (lw, th))
    d = ImageDraw.Draw(out)
    for i, n in enumerate(names[: img.width // cell]):
        tw, _ = V.text_size(d, n, fnt)
        d.text((lw + i * cell + (cell - tw) // 2, 1), n, fill=V.INK, font=fnt)
        d.text((2, th + i * cell + cell // 2 - 7), n, fill=V.INK, font=fnt)
    return out


__all__ = [
    "DIRECTIONS",
    "EXPLAIN_METHODS",
    "Explanation",
    "HeadView",
    "cg_trace",
    "crop_pattern",
    "direction_maps",
    "explain",
    "glr_residuals",
    "gtv_trace",
    "parse_box",
    "parse_point",
    "window_attention",
    "write_explanation",
]
