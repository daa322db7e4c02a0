"""Graph operators on the 5x5-window pixel graph of the paper (Sec. 2 and Sec. 5.2).

Every pixel is a node connected to the 24 other pixels of its 5x5 window. An undirected edge is
stored once, at its first end ``p``, under one of the 12 :data:`OFFSETS` ``o`` (the other end is
``p + o``); the directed (random-walk normalised) graph of eq. 28 has 24 edges per node, indexed by
:data:`DIRECTED_OFFSETS` (``OFFSETS`` followed by their negatives). Edges that would leave the image
have weight zero, so every operator here is exact at the borders; nothing ever builds a dense
``N x N`` matrix.

Shapes (``K`` heads, ``C`` signal channels, ``F`` feature dims)::

    features  (B, K, F, H, W)      metric (K, F, F) or (F, F), PSD
    w         (B, K, 12, H, W)     undirected weights, w[:, :, k, i, j] = w(p, p + OFFSETS[k])
    wbar      (B, K, 24, H, W)     directed weights, wbar[:, :, j, i, j'] = wbar(p -> p + DIRECTED_OFFSETS[j])
    x         (B, K, C, H, W)      a graph signal per head (the graph is shared across channels)
    e         (B, K, C, 24, H, W)  an edge signal, e.g. C-bar x

A weight tensor may have ``K == 1`` and then broadcasts over the heads of ``x``.

The operators used inside solver loops (:func:`laplacian_apply`, :func:`normalized_laplacian_apply`,
:func:`diag_minus_adjacency_apply`, :func:`incidence_apply`, :func:`incidence_adjoint`,
:func:`edge_weights` / :func:`edge_distances`, :func:`random_walk_weights_from_distances`) are
custom :class:`torch.autograd.Function` s: they save their inputs (or output) only and recompute
what the backward pass needs.

Two implementations, equal to rounding (tested against each other and against dense oracles):

* PyTorch: shifted slices accumulated in place (one fused multiply-accumulate per offset and
  direction), row band by row band so the operands stay in cache; never 24 shifted copies, never
  ``torch.roll``. Used on GPUs, for other dtypes, and whenever the native kernels are unavailable.
* native (CPU, float32/float64): the hottest loops as C++ kernels compiled on first use with
  ``torch.utils.cpp_extension`` (needs a C++ compiler and ninja; about a minute once, cached in
  torch's extension directory) - ``a x - W x`` and its weight gradient, the edge distances of
  eq. 27, eq. 28 from distances, and the fused ADMM edge step of :mod:`gsprestore.solvers`.
  ``GSPRESTORE_NATIVE=0`` turns them off; any build failure falls back silently
  (:func:`native_available`, the reason in ``_native_state["error"]``).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Optional

import torch
from torch import Tensor

__all__ = [
    "OFFSETS",
    "DIRECTED_OFFSETS",
    "WINDOW_RADIUS",
    "edge_distances",
    "edge_weights",
    "degree",
    "laplacian_apply",
    "normalized_weights",
    "normalized_laplacian_apply",
    "diag_minus_adjacency_apply",
    "random_walk_weights",
    "random_walk_weights_from_distances",
    "incidence_apply",
    "incidence_adjoint",
    "incidence_laplacian_weights",
    "graph_laplacian_regularizer",
    "graph_total_variation",
    "native_available",
    "set_band_elements",
]

WINDOW_RADIUS = 2
#: The 12 undirected offsets (dy, dx) of the 5x5 window with dy > 0 or (dy == 0 and dx > 0),
#: in raster order.
OFFSETS: tuple[tuple[int, int], ...] = tuple(
    (dy, dx)
    for dy in range(0, WINDOW_RADIUS + 1)
    for dx in range(-WINDOW_RADIUS, WINDOW_RADIUS + 1)
    if dy > 0 or dx > 0
)
#: The 24 directed offsets: ``OFFSETS`` then their negatives (same order).
DIRECTED_OFFSETS: tuple[tuple[int, int], ...] = OFFSETS + tuple((-dy, -dx) for dy, dx in OFFSETS)
_NU = len(OFFSETS)  # 12

_TINY = 1e-30  # floor for degrees before division (an isolated node then gets weight 0, not NaN)


# --------------------------------------------------------------------------------------------
# index helpers
# --------------------------------------------------------------------------------------------


def _regions(height: int, width: int):
    """For each undirected offset k yield ``(k, P, Q)`` with ``P``/``Q`` pairs of slices such that
    ``x[..., *P]`` holds every pixel ``p`` whose neighbour ``p + o_k`` is inside the image and
    ``x[..., *Q]`` holds those neighbours (same shape). Offsets that leave a tiny image entirely
    are skipped."""
    for k, (dy, dx) in enumerate(OFFSETS):
        h, w = height - abs(dy), width - abs(dx)
        if h <= 0 or w <= 0:
            continue
        py, qy = max(0, -dy), max(0, dy)
        px, qx = max(0, -dx), max(0, dx)
        yield k, (slice(py, py + h), slice(px, px + w)), (slice(qy, qy + h), slice(qx, qx + w))


_BAND_ELEMENTS = 1 << 19  # elements per operand slice when an operator runs in row bands


def set_band_elements(n: int) -> None:
    """Tune the row-band size of the slice-accumulate kernels (elements per band slice; 0 turns
    banding off). Bands keep each fused multiply-accumulate's operands in cache."""
    global _BAND_ELEMENTS
    _BAND_ELEMENTS = int(n)


def _band_rows(numel_per_row: int, height: int, device: Optional[torch.device] = None) -> int:
    if _BAND_ELEMENTS <= 0 or (device is not None and device.type != "cpu"):  # GPUs: fewer, larger ops
        return height
    return max(4, min(height, _BAND_ELEMENTS // max(1, numel_per_row)))


@functools.lru_cache(maxsize=256)
def _directed_regions(height: int, width: int, r0: int, r1: int):
    """The 24 directed edge sets whose tails lie in rows ``[r0, r1)``: tuples
    ``(j, k, tail, head, at)`` of slice pairs, ``tail`` the tails p, ``head`` = p + o_j (inside the
    image), ``k`` the undirected offset and ``at`` where its weight is stored (the tail for
    ``j < 12``, the head for the reversed offsets)."""
    out = []
    for k, (dy, dx) in enumerate(OFFSETS):
        n = width - abs(dx)
        if n <= 0 or height - dy <= 0:
            continue
        px, qx = max(0, -dx), max(0, dx)
        # forward j = k: tails p in rows [0, H - dy), head p + o
        a, b = max(r0, 0), min(r1, height - dy)
        if b > a:
            tail = (slice(a, b), slice(px, px + n))
            head = (slice(a + dy, b + dy), slice(qx, qx + n))
            out.append((k, k, tail, head, tail))
        # reverse j = 12 + k: tails q in rows [dy, H), head q - o
        a, b = max(r0, dy), min(r1, height)
        if b > a:
            tail = (slice(a, b), slice(qx, qx + n))
            head = (slice(a - dy, b - dy), slice(px, px + n))
            out.append((_NU + k, k, tail, head, head))
    return tuple(out)


def _bands(height: int, rows: int):
    return [(r0, min(height, r0 + rows)) for r0 in range(0, height, rows)]


def _sum_to(t: Tensor, shape: torch.Size) -> Tensor:
    """Sum ``t`` over the dimensions in which ``shape`` was broadcast (same number of dims)."""
    dims = [i for i, (a, b) in enumerate(zip(t.shape, shape)) if b == 1 and a != 1]
    if dims:
        t = t.sum(dim=dims, keepdim=True)
    return t


def _check_weights(w: Tensor, n: int, name: str) -> None:
    if w.dim() != 5 or w.shape[2] != n:
        raise ValueError(f"{name} must have shape (B, K, {n}, H, W), got {tuple(w.shape)}")


def _check_signal(w: Tensor, x: Tensor) -> None:
    if x.dim() != 5 or x.shape[-2:] != w.shape[-2:] or x.shape[0] != w.shape[0]:
        raise ValueError(
            f"signal must have shape (B, K, C, H, W) matching weights {tuple(w.shape)}, got {tuple(x.shape)}"
        )


# --------------------------------------------------------------------------------------------
# optional native CPU kernels (C++, built on first use with torch.utils.cpp_extension)
# --------------------------------------------------------------------------------------------
#
# The two hottest loops of the solvers - ``a * x - W x`` (every CG step) and the fused ADMM
# edge step (eqs. 19-24, :func:`solvers.admm_edge_step`) - run through ~25 resp. ~550 PyTorch
# ops per call, each a full pass over memory. The kernels below do the same arithmetic row by
# row in one pass (contiguous rows, auto-vectorised inner loops, threads over rows/planes).
# They are an accelerator only: forward values equal the PyTorch path to rounding (tested),
# gradients always use the PyTorch formulas, CUDA tensors never use them, and if no compiler is
# available (or GSPRESTORE_NATIVE=0) everything silently stays on the PyTorch path.

_NATIVE_SRC = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

// Run f(begin, end) over [0, n) on at::get_num_threads() threads (PyTorch's intra-op setting,
// so torch.set_num_threads applies; no second OpenMP runtime next to PyTorch's).
template <typename F>
static void parallel_chunks(int64_t n, int64_t min_per_thread, const F& f) {
  int64_t nt = std::min<int64_t>(at::get_num_threads(), std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread)));
  if (nt <= 1) { f(0, n); return; }
  std::vector<std::thread> pool;
  const int64_t chunk = (n + nt - 1) / nt;
  for (int64_t t = 1; t < nt; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) pool.emplace_back([&f, b, e] { f(b, e); });
  }
  f(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

static const int NU = 12;
static const int OFF[12][2] = {{0,1},{0,2},{1,-2},{1,-1},{1,0},{1,1},{1,2},{2,-2},{2,-1},{2,0},{2,1},{2,2}};

// max(s, 0) exactly, written without a branch so that the loops vectorise
template <typename T> static inline T relu(T s) { return T(0.5) * (s + std::abs(s)); }

// stride of dim d, 0 where the tensor broadcasts (size 1)
static inline int64_t bst(const at::Tensor& t, int d) { return t.size(d) == 1 ? 0 : t.stride(d); }

// One row segment of the fused ADMM edge step (restrict-qualified parameters let GCC vectorise).
// first: D = u = v = 0. Writes the new state U, V, Dn and e = wbar (Dn/(2g) - (U - V)/2).
template <typename T>
static void edge_row(const T* __restrict__ wr, const T* __restrict__ xt, const T* __restrict__ xh,
                     const T* __restrict__ Dr, const T* __restrict__ ur, const T* __restrict__ vr,
                     T* __restrict__ U, T* __restrict__ V, T* __restrict__ Dn, T* __restrict__ e,
                     int64_t n, T gam, T hi, T inv) {
  for (int64_t t = 0; t < n; ++t) {
    const T r = wr[t] * (xt[t] - xh[t]);
    const T d0 = Dr[t], u0 = ur[t], v0 = vr[t];
    const T a = T(0.5) * (u0 + v0) - hi;
    const T bb = T(0.25) * (d0 * inv + u0 - v0) - T(0.5) * r;
    const T uu = relu(a + bb), vv = relu(a - bb);
    const T diff = uu - vv;
    const T dn = d0 - gam * (T(2) * r + diff);
    U[t] = uu; V[t] = vv; Dn[t] = dn;
    e[t] = wr[t] * (dn * hi - T(0.5) * diff);
  }
}

template <typename T>
static void edge_row_first(const T* __restrict__ wr, const T* __restrict__ xt, const T* __restrict__ xh,
                           T* __restrict__ U, T* __restrict__ V, T* __restrict__ Dn, T* __restrict__ e,
                           int64_t n, T gam, T hi) {
  for (int64_t t = 0; t < n; ++t) {
    const T r = wr[t] * (xt[t] - xh[t]);
    const T a = -hi, bb = T(-0.5) * r;
    const T uu = relu(a + bb), vv = relu(a - bb);
    const T diff = uu - vv;
    const T dn = -gam * (T(2) * r + diff);
    U[t] = uu; V[t] = vv; Dn[t] = dn;
    e[t] = wr[t] * (dn * hi - T(0.5) * diff);
  }
}

template <typename T>
static void scatter_row(T* __restrict__ nt, T* __restrict__ nh, const T* __restrict__ e, int64_t n) {
  for (int64_t t = 0; t < n; ++t) nt[t] += e[t];
  for (int64_t t = 0; t < n; ++t) nh[t] -= e[t];
}

template <typename T>
static void fma_row(T* __restrict__ o, const T* __restrict__ w, const T* __restrict__ x, int64_t n) {
  for (int64_t t = 0; t < n; ++t) o[t] -= w[t] * x[t];
}

template <typename T>
static void grad_w_row(T* __restrict__ gw, const T* __restrict__ gp, const T* __restrict__ xq,
                       const T* __restrict__ gq, const T* __restrict__ xp, int64_t n) {
  for (int64_t t = 0; t < n; ++t) gw[t] -= gp[t] * xq[t] + gq[t] * xp[t];
}

template <typename T>
static void dist_row(T* __restrict__ o, const T* __restrict__ fp, const T* __restrict__ fq,
                     const T* __restrict__ mp, const T* __restrict__ mq, int64_t n) {
  for (int64_t t = 0; t < n; ++t) o[t] += (fp[t] - fq[t]) * (mp[t] - mq[t]);
}

template <typename T>
static void min_row(T* __restrict__ m, const T* __restrict__ d, int64_t n) {
  for (int64_t t = 0; t < n; ++t) m[t] = d[t] < m[t] ? d[t] : m[t];
}

template <typename T>
static void exp_row(T* __restrict__ dst, T* __restrict__ s, const T* __restrict__ d, const T* __restrict__ m, int64_t n) {
  for (int64_t t = 0; t < n; ++t) { const T e = std::exp(m[t] - d[t]); dst[t] = e; s[t] += e; }
}

template <typename T>
static void norm_row(T* __restrict__ dst, const T* __restrict__ s, int64_t n) {
  for (int64_t t = 0; t < n; ++t) dst[t] /= s[t];
}

// out = a * x - W x ; a may be undefined (identity). All tensors (B, K?, C?, H, W) with
// contiguous rows; broadcast dims have stride 0. out is contiguous (B, K, C, H, W).
template <typename T>
static void dma_impl(const at::Tensor& w, const at::Tensor& a, bool has_a, const at::Tensor& x, at::Tensor& out) {
  const int64_t B = out.size(0), K = out.size(1), C = out.size(2), H = out.size(3), W = out.size(4);
  const T* wp = w.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  const T* ap = has_a ? a.data_ptr<T>() : nullptr;
  T* op = out.data_ptr<T>();
  const int64_t wsb = bst(w, 0), wsk = bst(w, 1), wsj = w.stride(2), wsr = w.stride(3);
  const int64_t xsb = bst(x, 0), xsk = bst(x, 1), xsc = bst(x, 2), xsr = x.stride(3);
  int64_t asb = 0, ask = 0, asc = 0, asr = 0;
  if (has_a) { asb = bst(a, 0); ask = bst(a, 1); asc = bst(a, 2); asr = a.stride(3); }
  // threads over (b, k, row); the channels of a row run back to back so the 24 weight rows
  // they share stay in cache
  parallel_chunks(B * K * H, 16, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, k = (idx / H) % K, b = idx / (H * K);
      const T* wb = wp + b * wsb + k * wsk;
      for (int64_t c = 0; c < C; ++c) {
        T* __restrict__ o = op + (((b * K + k) * C + c) * H + i) * W;
        const T* xb = xp + b * xsb + k * xsk + c * xsc;
        const T* __restrict__ xr = xb + i * xsr;
        if (has_a) {
          const T* __restrict__ ar = ap + b * asb + k * ask + c * asc + i * asr;
          for (int64_t j = 0; j < W; ++j) o[j] = ar[j] * xr[j];
        } else {
          for (int64_t j = 0; j < W; ++j) o[j] = xr[j];
        }
        for (int kk = 0; kk < NU; ++kk) {
          const int dy = OFF[kk][0], dx = OFF[kk][1];
          const int64_t n = W - std::abs(dx);
          if (n <= 0) continue;
          const int64_t px = std::max(0, -dx), qx = std::max(0, dx);
          if (i + dy < H) {  // tail p in this row: o[p] -= w_k[p] x[p + o]
            const T* __restrict__ wr = wb + kk * wsj + i * wsr + px;
            const T* __restrict__ xh = xb + (i + dy) * xsr + qx;
            fma_row<T>(o + px, wr, xh, n);
          }
          if (i - dy >= 0) {  // tail q in this row, head p = q - o: o[q] -= w_k[p] x[p]
            const T* __restrict__ wr = wb + kk * wsj + (i - dy) * wsr + px;
            const T* __restrict__ xh = xb + (i - dy) * xsr + px;
            fma_row<T>(o + qx, wr, xh, n);
          }
        }
      }
    }
  });
}

at::Tensor diag_minus_adjacency(at::Tensor w, c10::optional<at::Tensor> a_opt, at::Tensor x, at::Tensor out) {
  const bool has_a = a_opt.has_value() && a_opt->defined();
  at::Tensor a = has_a ? *a_opt : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gsp_dma", [&] { dma_impl<scalar_t>(w, a, has_a, x, out); });
  return out;
}

// Fused ADMM edge step. x (B, K, C, H, W) contiguous, wbar (B, K|1, 24, H, W) contiguous,
// D/u/v and D2/u2/v2 (B, K, C, 24, H, W) contiguous (D2 may alias D etc.), g (K) per head,
// n (B, K, C, H, W) zero-initialised. One thread per (b, k, c) plane: the scatter into n
// stays inside the plane.
template <typename T>
static void edge_impl(const at::Tensor& x, const at::Tensor& wbar, bool first, const at::Tensor& D,
                      const at::Tensor& u, const at::Tensor& v, at::Tensor& D2, at::Tensor& u2,
                      at::Tensor& v2, const at::Tensor& g, at::Tensor& n) {
  const int64_t B = x.size(0), K = x.size(1), C = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t HW = H * W;
  const T* xp = x.data_ptr<T>();
  const T* wp = wbar.data_ptr<T>();
  const int64_t wsb = bst(wbar, 0), wsk = bst(wbar, 1);
  const T* gp = g.data_ptr<T>();
  const bool g_per_head = g.numel() > 1;
  const T* Dp = first ? nullptr : D.data_ptr<T>();
  const T* up = first ? nullptr : u.data_ptr<T>();
  const T* vp = first ? nullptr : v.data_ptr<T>();
  T* D2p = D2.data_ptr<T>();
  T* u2p = u2.data_ptr<T>();
  T* v2p = v2.data_ptr<T>();
  T* np_ = n.data_ptr<T>();
  parallel_chunks(B * K * C, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> buf(4 * W);  // e and copies of the old D, u, v rows (the new ones may overwrite them)
    T* __restrict__ e = buf.data();
    T* __restrict__ d_old = e + W;
    T* __restrict__ u_old = e + 2 * W;
    T* __restrict__ v_old = e + 3 * W;
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t k = (plane / C) % K, b = plane / (C * K);
      const T gam = g_per_head ? gp[k] : gp[0];
      const T hi = T(0.5) / gam, inv = T(1) / gam;
      const T* xb = xp + plane * HW;
      T* nb = np_ + plane * HW;
      const T* wb = wp + b * wsb + k * wsk;
      const int64_t eb = plane * 2 * NU * HW;
      for (int jj = 0; jj < 2 * NU; ++jj) {  // edge plane by edge plane: the state streams
        const int kk = jj % NU;
        const int sgn = jj < NU ? 1 : -1;
        const int dy = sgn * OFF[kk][0], dx = sgn * OFF[kk][1];
        const int64_t n_ = W - std::abs(dx);
        if (n_ <= 0) continue;
        for (int64_t i = std::max(0, -dy); i < std::min<int64_t>(H, H - dy); ++i) {
          const int64_t tx = std::max(0, -dx), hx = std::max(0, dx);
          const int64_t to = eb + jj * HW + i * W + tx;  // edge-tensor offset of the tails
          const T* __restrict__ xt = xb + i * W + tx;
          const T* __restrict__ xh = xb + (i + dy) * W + hx;
          const T* __restrict__ wr = wb + jj * HW + i * W + tx;
          T* __restrict__ U = u2p + to;
          T* __restrict__ V = v2p + to;
          T* __restrict__ Dn = D2p + to;
          if (first) {
            edge_row_first<T>(wr, xt, xh, U, V, Dn, e, n_, gam, hi);
          } else {
            std::copy(Dp + to, Dp + to + n_, d_old);  // D2 may be D (in place)
            std::copy(up + to, up + to + n_, u_old);
            std::copy(vp + to, vp + to + n_, v_old);
            edge_row<T>(wr, xt, xh, d_old, u_old, v_old, U, V, Dn, e, n_, gam, hi, inv);
          }
          scatter_row<T>(nb + i * W + tx, nb + (i + dy) * W + hx, e, n_);
        }
      }
    }
  });
}

void admm_edge_step(at::Tensor x, at::Tensor wbar, c10::optional<at::Tensor> D, c10::optional<at::Tensor> u,
                    c10::optional<at::Tensor> v, at::Tensor D2, at::Tensor u2, at::Tensor v2, at::Tensor g,
                    at::Tensor n) {
  const bool first = !D.has_value();
  at::Tensor Dt = first ? at::Tensor() : *D, ut = first ? at::Tensor() : *u, vt = first ? at::Tensor() : *v;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gsp_edge", [&] {
    edge_impl<scalar_t>(x, wbar, first, Dt, ut, vt, D2, u2, v2, g, n);
  });
}

// Gradient of out = a x - W x with respect to the undirected weights:
// gw[b, k, kk, p] = -sum_c (g_p x_q + g_q x_p), q = p + o_kk. g (B, K, C, H, W) contiguous,
// x broadcastable (contiguous rows), gw (B, K, 12, H, W) zero-initialised. Threads over (b, k).
template <typename T>
static void dma_grad_w_impl(const at::Tensor& g, const at::Tensor& x, at::Tensor& gw) {
  const int64_t B = g.size(0), K = g.size(1), C = g.size(2), H = g.size(3), W = g.size(4);
  const T* gp = g.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  T* wp = gw.data_ptr<T>();
  const int64_t xsb = bst(x, 0), xsk = bst(x, 1), xsc = bst(x, 2), xsr = x.stride(3);
  parallel_chunks(B * K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t b = bk / K, k = bk % K;
      T* wb = wp + bk * NU * H * W;
      for (int64_t c = 0; c < C; ++c) {
        const T* gb = gp + (bk * C + c) * H * W;
        const T* xb = xp + b * xsb + k * xsk + c * xsc;
        for (int kk = 0; kk < NU; ++kk) {
          const int dy = OFF[kk][0], dx = OFF[kk][1];
          const int64_t n = W - std::abs(dx);
          if (n <= 0) continue;
          const int64_t px = std::max(0, -dx), qx = std::max(0, dx);
          for (int64_t i = 0; i + dy < H; ++i) {
            grad_w_row<T>(wb + kk * H * W + i * W + px, gb + i * W + px, xb + (i + dy) * xsr + qx,
                          gb + (i + dy) * W + qx, xb + i * xsr + px, n);
          }
        }
      }
    }
  });
}

at::Tensor diag_minus_adjacency_grad_w(at::Tensor g, at::Tensor x, at::Tensor gw) {
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "gsp_dma_gw", [&] { dma_grad_w_impl<scalar_t>(g, x, gw); });
  return gw;
}

// Backward of the fused ADMM edge step (same arithmetic as the PyTorch formulas in
// solvers._AdmmEdgeStep.backward). Threads over (b, k): gw sums over channels, gx and the
// per-unit gamma partial sums stay private to a unit.
template <typename T>
static void edge_bwd_impl(const at::Tensor& x, const at::Tensor& wbar, bool first, const at::Tensor& D,
                          const at::Tensor& u, const at::Tensor& v, const at::Tensor& g,
                          const at::Tensor& gD2, const at::Tensor& gu2, const at::Tensor& gv2,
                          const at::Tensor& gn, at::Tensor& gx, at::Tensor& gw, at::Tensor& gD,
                          at::Tensor& gu, at::Tensor& gv, at::Tensor& gg) {
  const int64_t B = x.size(0), K = x.size(1), C = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t HW = H * W;
  const T* xp = x.data_ptr<T>();
  const T* wp = wbar.data_ptr<T>();
  const int64_t wsb = bst(wbar, 0), wsk = bst(wbar, 1);
  const T* gp = g.data_ptr<T>();
  const bool g_per_head = g.numel() > 1;
  const T* Dp = first ? nullptr : D.data_ptr<T>();
  const T* up = first ? nullptr : u.data_ptr<T>();
  const T* vp = first ? nullptr : v.data_ptr<T>();
  const T* gD2p = gD2.defined() ? gD2.data_ptr<T>() : nullptr;
  const T* gu2p = gu2.defined() ? gu2.data_ptr<T>() : nullptr;
  const T* gv2p = gv2.defined() ? gv2.data_ptr<T>() : nullptr;
  const T* gnp = gn.defined() ? gn.data_ptr<T>() : nullptr;
  T* gxp = gx.data_ptr<T>();
  T* gwp = gw.data_ptr<T>();
  T* gDp = first ? nullptr : gD.data_ptr<T>();
  T* gup = first ? nullptr : gu.data_ptr<T>();
  T* gvp = first ? nullptr : gv.data_ptr<T>();
  T* ggp = gg.data_ptr<T>();
  parallel_chunks(B * K, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> zeros(W, T(0));
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t b = bk / K, k = bk % K;
      const T gam = g_per_head ? gp[k] : gp[0];
      const T hi = T(0.5) / gam, inv = T(1) / gam;
      const T* wb = wp + b * wsb + k * wsk;
      T* gwb = gwp + bk * 2 * NU * HW;
      double gsum = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t plane = bk * C + c;
        const T* xb = xp + plane * HW;
        T* gxb = gxp + plane * HW;
        const T* gnb = gnp ? gnp + plane * HW : nullptr;
        const int64_t eb = plane * 2 * NU * HW;
        for (int jj = 0; jj < 2 * NU; ++jj) {
          const int kk = jj % NU;
          const int sgn = jj < NU ? 1 : -1;
          const int dy = sgn * OFF[kk][0], dx = sgn * OFF[kk][1];
          const int64_t n_ = W - std::abs(dx);
          if (n_ <= 0) continue;
          const int64_t tx = std::max(0, -dx), hx = std::max(0, dx);
          for (int64_t i = std::max(0, -dy); i < std::min<int64_t>(H, H - dy); ++i) {
            const int64_t to = eb + jj * HW + i * W + tx;
            const T* xt = xb + i * W + tx;
            const T* xh = xb + (i + dy) * W + hx;
            const T* wr = wb + jj * HW + i * W + tx;
            const T* z = zeros.data();
            const T* gD2r = gD2p ? gD2p + to : z;
            const T* gu2r = gu2p ? gu2p + to : z;
            const T* gv2r = gv2p ? gv2p + to : z;
            const T* gnt = gnb ? gnb + i * W + tx : z;
            const T* gnh = gnb ? gnb + (i + dy) * W + hx : z;
            T* gxt = gxb + i * W + tx;
            T* gxh = gxb + (i + dy) * W + hx;
            T* gwr = gwb + jj * HW + i * W + tx;
            for (int64_t t = 0; t < n_; ++t) {
              const T dxv = xt[t] - xh[t];
              const T r = wr[t] * dxv;
              T d0 = 0, a, bb;
              if (first) {
                a = -hi; bb = T(-0.5) * r;
              } else {
                d0 = Dp[to + t];
                const T u0 = up[to + t], v0 = vp[to + t];
                a = T(0.5) * (u0 + v0) - hi;
                bb = T(0.25) * (d0 * inv + u0 - v0) - T(0.5) * r;
              }
              const T sp = a + bb, sm = a - bb;
              const T uu = relu(sp), vv = relu(sm);
              const T diff = uu - vv;
              const T dn = d0 - gam * (T(2) * r + diff);
              const T e0 = dn * hi - T(0.5) * diff;
              const T ggn = gnt[t] - gnh[t];
              const T ge = ggn * wr[t];
              const T gdn = gD2r[t] + ge * hi;
              const T gU = gu2r[t] - T(0.5) * ge - gam * gdn;
              const T gV = gv2r[t] + T(0.5) * ge + gam * gdn;
              const T s1 = sp > T(0) ? gU : T(0);
              const T s2 = sm > T(0) ? gV : T(0);
              const T ga = s1 + s2, gb = s1 - s2;
              const T gr = T(-2) * gam * gdn - T(0.5) * gb;
              gwr[t] += ggn * e0 + gr * dxv;
              gxt[t] += gr * wr[t];
              gxh[t] -= gr * wr[t];
              if (!first) {
                gDp[to + t] = gdn + T(0.25) * gb * inv;
                gup[to + t] = T(0.5) * ga + T(0.25) * gb;
                gvp[to + t] = T(0.5) * ga - T(0.25) * gb;
              }
              T tg = -ge * dn * hi * inv - gdn * (T(2) * r + diff) + ga * hi * inv;
              if (!first) tg -= gb * d0 * T(0.25) * inv * inv;
              gsum += double(tg);
            }
          }
        }
      }
      ggp[bk] = T(gsum);
    }
  });
}

void admm_edge_step_backward(at::Tensor x, at::Tensor wbar, c10::optional<at::Tensor> D,
                             c10::optional<at::Tensor> u, c10::optional<at::Tensor> v, at::Tensor g,
                             c10::optional<at::Tensor> gD2, c10::optional<at::Tensor> gu2,
                             c10::optional<at::Tensor> gv2, c10::optional<at::Tensor> gn, at::Tensor gx,
                             at::Tensor gw, c10::optional<at::Tensor> gD, c10::optional<at::Tensor> gu,
                             c10::optional<at::Tensor> gv, at::Tensor gg) {
  const bool first = !D.has_value();
  auto opt = [](const c10::optional<at::Tensor>& t) { return t.has_value() ? *t : at::Tensor(); };
  at::Tensor gDt = opt(gD), gut = opt(gu), gvt = opt(gv);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gsp_edge_bwd", [&] {
    edge_bwd_impl<scalar_t>(x, wbar, first, opt(D), opt(u), opt(v), g, opt(gD2), opt(gu2), opt(gv2),
                            opt(gn), gx, gw, gDt, gut, gvt, gg);
  });
}

// Squared Mahalanobis distances (eq. 27) d_k[p] = (f_p - f_q)^T (Mf_p - Mf_q), q = p + o_k, and
// optionally w = exp(-d). f (B, K|1, F, H, W), mf (B, K, F, H, W) contiguous; out (B, K, 12, H, W)
// zero-initialised (entries whose neighbour leaves the image stay 0). Threads over (b, k, row).
template <typename T>
static void edge_dist_impl(const at::Tensor& f, const at::Tensor& mf, at::Tensor& out, bool do_exp) {
  const int64_t B = out.size(0), K = out.size(1), H = out.size(3), W = out.size(4), F = mf.size(2);
  const int64_t HW = H * W;
  const T* fp = f.data_ptr<T>();
  const T* mp = mf.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t fsb = bst(f, 0), fsk = bst(f, 1), fsf = f.stride(2);
  const int64_t msb = bst(mf, 0), msk = bst(mf, 1), msf = mf.stride(2);
  parallel_chunks(B * K * H, 16, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, k = (idx / H) % K, b = idx / (H * K);
      const T* fb = fp + b * fsb + k * fsk;
      const T* mb = mp + b * msb + k * msk;
      T* ob = op + ((b * K + k) * NU) * HW;
      for (int kk = 0; kk < NU; ++kk) {
        const int dy = OFF[kk][0], dx = OFF[kk][1];
        const int64_t n = W - std::abs(dx);
        if (n <= 0 || i + dy >= H) continue;
        const int64_t px = std::max(0, -dx), qx = std::max(0, dx);
        T* o = ob + kk * HW + i * W + px;
        for (int64_t c = 0; c < F; ++c)
          dist_row<T>(o, fb + c * fsf + i * W + px, fb + c * fsf + (i + dy) * W + qx,
                      mb + c * msf + i * W + px, mb + c * msf + (i + dy) * W + qx, n);
        if (do_exp)
          for (int64_t t = 0; t < n; ++t) o[t] = std::exp(-o[t]);
      }
    }
  });
}

at::Tensor edge_distances(at::Tensor f, at::Tensor mf, at::Tensor out, bool do_exp) {
  AT_DISPATCH_FLOATING_TYPES(f.scalar_type(), "gsp_edge_dist", [&] { edge_dist_impl<scalar_t>(f, mf, out, do_exp); });
  return out;
}

// Eq. 28 from distances: wbar[j, p] = softmax over the in-image directed edges j of p of -dd,
// dd[j < 12, p] = d_j[p], dd[12 + k, p] = d_k[p - o_k]. d (B, K, 12, H, W) contiguous,
// wbar (B, K, 24, H, W) zero-initialised. Threads over (b, k, row).
template <typename T>
static void rw_dist_impl(const at::Tensor& d, at::Tensor& wbar) {
  const int64_t B = d.size(0), K = d.size(1), H = d.size(3), W = d.size(4);
  const int64_t HW = H * W;
  const T* dp = d.data_ptr<T>();
  T* wp = wbar.data_ptr<T>();
  parallel_chunks(B * K * H, 16, [&](int64_t begin, int64_t end) {
    std::vector<T> mbuf(W), sbuf(W);
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, bk = idx / H;
      const T* db = dp + bk * NU * HW;
      T* wb = wp + bk * 2 * NU * HW;
      T* m = mbuf.data();
      T* s = sbuf.data();
      std::fill(m, m + W, std::numeric_limits<T>::infinity());
      std::fill(s, s + W, T(0));
      // pass 1: minimum; pass 2: exp(-(dd - min)) and sum; pass 3: normalise
      for (int pass = 0; pass < 3; ++pass) {
        for (int jj = 0; jj < 2 * NU; ++jj) {
          const int kk = jj % NU;
          const int sgn = jj < NU ? 1 : -1;
          const int dy = sgn * OFF[kk][0], dx = sgn * OFF[kk][1];
          const int64_t n = W - std::abs(dx);
          if (n <= 0 || i + dy < 0 || i + dy >= H) continue;
          const int64_t tx = std::max(0, -dx);
          // the undirected distance is stored at the tail for j < 12, at the head for the others
          const T* src = jj < NU ? db + kk * HW + i * W + tx : db + kk * HW + (i + dy) * W + std::max(0, dx);
          T* dst = wb + jj * HW + i * W + tx;
          if (pass == 0) min_row<T>(m + tx, src, n);
          else if (pass == 1) exp_row<T>(dst, s + tx, src, m + tx, n);
          else norm_row<T>(dst, s + tx, n);
        }
      }
    }
  });
}

at::Tensor random_walk_from_distances(at::Tensor d, at::Tensor wbar) {
  AT_DISPATCH_FLOATING_TYPES(d.scalar_type(), "gsp_rw", [&] { rw_dist_impl<scalar_t>(d, wbar); });
  return wbar;
}
"""

_native_state: dict = {}
_log = logging.getLogger(__name__)


def _native():
    """The compiled kernels, or None (not built, no compiler, disabled by GSPRESTORE_NATIVE=0)."""
    if "mod" in _native_state:
        return _native_state["mod"]
    mod = None
    if os.environ.get("GSPRESTORE_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        _native_state["error"] = "disabled by GSPRESTORE_NATIVE"
    else:
        try:
            import hashlib
            import warnings

            from torch.utils import cpp_extension

            cap = torch.backends.cpu.get_cpu_capability()  # e.g. "AVX2": the build is specific to it
            flags = ["-O3"] + (["-mavx2", "-mfma"] if cap in ("AVX2", "AVX512") else [])
            tag = hashlib.sha1((_NATIVE_SRC + " ".join(flags) + torch.__version__).encode()).hexdigest()[:10]
            name = f"gsprestore_graph_{cap.lower()}_{tag}"
            build_dir = os.path.join(cpp_extension.get_default_build_root(), name)
            os.makedirs(build_dir, exist_ok=True)
            lock = os.path.join(build_dir, "lock")
            if os.path.exists(lock) and time.time() - os.path.getmtime(lock) > 900:
                os.remove(lock)  # left by a build that was killed: torch would wait on it forever
            if not any(f.endswith(".so") for f in os.listdir(build_dir)):
                _log.info("compiling the native graph kernels into %s (once, about a minute)", build_dir)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = cpp_extension.load_inline(
                    name=name,
                    cpp_sources=[_NATIVE_SRC],
                    functions=["diag_minus_adjacency", "diag_minus_adjacency_grad_w", "admm_edge_step",
                               "admm_edge_step_backward", "edge_distances", "random_walk_from_distances"],
                    extra_cflags=flags,
                    build_directory=build_dir,
                    verbose=False,
                )
        except Exception as exc:  # no compiler / headers: stay on the PyTorch path
            _native_state["error"] = f"{type(exc).__name__}: {exc}"
            mod = None
    _native_state["mod"] = mod
    return mod


def native_available() -> bool:
    """Whether the optional native CPU kernels are in use (builds them on the first call)."""
    return _native() is not None


def _use_native(*tensors: Optional[Tensor]) -> bool:
    for t in tensors:
        if t is not None and (t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64)):
            return False
    return _native() is not None


def _rows_contiguous(t: Tensor) -> Tensor:
    """t with stride 1 along W and W along H (other strides free, broadcast dims stay stride 0)."""
    if t.stride(-1) == 1 and (t.shape[-2] == 1 or t.stride(-2) == t.shape[-1]):
        return t
    return t.contiguous()


# --------------------------------------------------------------------------------------------
# edge weights (eq. 27) from features and a PSD metric
# --------------------------------------------------------------------------------------------


def _metric4(metric: Tensor) -> Tensor:
    """Metric as ``(B' or 1, K' or 1, F, F)``, symmetrised (d only sees the symmetric part)."""
    if metric.dim() == 2:
        metric = metric[None, None]
    elif metric.dim() == 3:
        metric = metric[None]
    elif metric.dim() != 4:
        raise ValueError(f"metric must be (F, F), (K, F, F) or (B, K, F, F), got {tuple(metric.shape)}")
    return 0.5 * (metric + metric.transpose(-1, -2))


def _apply_metric(m4: Tensor, f: Tensor) -> Tensor:
    """``M f`` per pixel: ``(B', K', F, F) x (B, K, F, H, W) -> (B, K, F, H, W)``."""
    B, K, F, H, W = f.shape
    return torch.matmul(m4, f.reshape(B, K, F, H * W)).reshape(B, K, F, H, W)


class _EdgeWeights(torch.autograd.Function):
    """w = exp(-d) (``exp=True``) or d itself, d_pq = (f_p - f_q)^T M (f_p - f_q) (eq. 27)."""

    @staticmethod
    def forward(ctx, features: Tensor, metric: Tensor, exp: bool):  # type: ignore[override]
        B, K, F, H, W = features.shape
        m4 = _metric4(metric)
        mf = _apply_metric(m4, features)
        Kout = max(K, m4.shape[1])
        out = features.new_zeros(B, Kout, _NU, H, W)
        if _use_native(features, mf):
            _native().edge_distances(features.contiguous(), mf.expand(B, Kout, F, H, W).contiguous(), out, exp)
            ctx.exp = exp
            ctx.save_for_backward(features, metric, out if exp else None)
            return out
        for k, P, Q in _regions(H, W):
            diff = features[..., P[0], P[1]] - features[..., Q[0], Q[1]]
            mdiff = mf[..., P[0], P[1]] - mf[..., Q[0], Q[1]]
            d = (diff * mdiff).sum(dim=2)
            if exp:
                torch.exp(d.neg_(), out=out[:, :, k, P[0], P[1]])
            else:
                out[:, :, k, P[0], P[1]] = d
        ctx.exp = exp
        ctx.save_for_backward(features, metric, out if exp else None)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        features, metric, w = ctx.saved_tensors
        B, K, F, H, W = features.shape
        m4 = _metric4(metric)
        mf = _apply_metric(m4, features)
        # dL/dd: for w = exp(-d), dL/dd = -dL/dw * w
        gd = -grad_out * w if ctx.exp else grad_out
        need_f, need_m = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        gf = torch.zeros_like(features) if need_f else None
        Kout = gd.shape[1]
        gm = features.new_zeros(B, Kout, F, F) if need_m else None
        for k, P, Q in _regions(H, W):
            g = gd[:, :, k : k + 1, P[0], P[1]]  # (B, K, 1, h, w)
            diff = features[..., P[0], P[1]] - features[..., Q[0], Q[1]]
            if need_f:
                mdiff = mf[..., P[0], P[1]] - mf[..., Q[0], Q[1]]
                t = _sum_to(2.0 * g * mdiff, gf[..., P[0], P[1]].shape)
                gf[..., P[0], P[1]].add_(t)
                gf[..., Q[0], Q[1]].sub_(t)
            if need_m:
                gdiff = g * diff  # (B, Kout, F, h, w)
                gm += torch.matmul(gdiff.flatten(3), diff.expand_as(gdiff).flatten(3).transpose(-1, -2))
        if need_m:
            gm = 0.5 * (gm + gm.transpose(-1, -2))  # gradient through the symmetrisation
            gm = _sum_to(gm, m4.shape).reshape(metric.shape)
        return gf, gm, None


def edge_distances(features: Tensor, metric: Tensor) -> Tensor:
    """Squared Mahalanobis distances ``d(p, p + o_k) = (f_p - f_q)^T M (f_p - f_q)`` (eq. 27),
    ``(B, K, 12, H, W)``; 0 where ``p + o_k`` is outside the image (those entries are unused)."""
    if features.dim() != 5:
        raise ValueError(f"features must be (B, K, F, H, W), got {tuple(features.shape)}")
    return _EdgeWeights.apply(features, metric, False)


def edge_weights(features: Tensor, metric: Tensor) -> Tensor:
    """Edge weights ``w_pq = exp(-(f_p - f_q)^T M (f_p - f_q))`` of eq. 27 for the 12 undirected
    offsets of the 5x5 window: features ``(B, K, F, H, W)``, metric ``(K, F, F)`` (or ``(F, F)``),
    PSD (the caller parametrises it, e.g. ``M = A A^T``) -> ``(B, K, 12, H, W)``, zero where the
    neighbour ``p + o_k`` is outside the image. Custom autograd: saves features, metric and w."""
    if features.dim() != 5:
        raise ValueError(f"features must be (B, K, F, H, W), got {tuple(features.shape)}")
    return _EdgeWeights.apply(features, metric, True)


# --------------------------------------------------------------------------------------------
# undirected graph: degree, Laplacian L = D - W (Sec. 2.1) and D^-1/2 L D^-1/2 (Sec. 5.2)
# --------------------------------------------------------------------------------------------


def degree(w: Tensor) -> Tensor:
    """Degrees ``D = diag(W 1)`` of the undirected graph ``w`` (B, K, 12, H, W) -> (B, K, 1, H, W)."""
    _check_weights(w, _NU, "w")
    B, K, _, H, W = w.shape
    deg = w.new_zeros(B, K, 1, H, W)
    for k, P, Q in _regions(H, W):
        wk = w[:, :, k : k + 1, P[0], P[1]]
        deg[..., P[0], P[1]].add_(wk)
        deg[..., Q[0], Q[1]].add_(wk)
    return deg


def _diag_minus_adjacency_into(out: Tensor, w: Tensor, a: Optional[Tensor], x: Tensor) -> Tensor:
    """Write ``a * x - W x`` into ``out`` (W: symmetric adjacency of ``w``; ``a=None``: identity),
    band of rows by band of rows: per band one product and 24 fused multiply-accumulates
    ``out[tail] -= w * x[head]`` over the directed offsets, all on views (no shifted copies)."""
    H, W = x.shape[-2:]
    rows = _band_rows(out[..., :1, :].numel(), H, out.device)
    for r0, r1 in _bands(H, rows):
        ob = out[..., r0:r1, :]
        if a is None:
            ob.copy_(x[..., r0:r1, :])
        else:
            torch.mul(a[..., r0:r1, :], x[..., r0:r1, :], out=ob)
        for _, k, tail, head, at in _directed_regions(H, W, r0, r1):
            out[..., tail[0], tail[1]].addcmul_(w[:, :, k : k + 1, at[0], at[1]], x[..., head[0], head[1]], value=-1.0)
    return out


def _diag_minus_adjacency(w: Tensor, a: Optional[Tensor], x: Tensor) -> Tensor:
    """``a * x - W x`` (``a=None`` means the identity)."""
    shape = torch.broadcast_shapes(x.shape, w[:, :, :1].shape, a.shape if a is not None else x.shape)
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    if _use_native(w, a, x):
        if a is not None and a.dim() != 5:
            a = a.expand(shape)
        return _native().diag_minus_adjacency(_rows_contiguous(w), None if a is None else _rows_contiguous(a),
                                              _rows_contiguous(x), out)
    if a is not None and a.shape != shape and x.shape != shape:
        a = a.expand(shape)
    if x.shape != shape and a is None:
        x = x.expand(shape)
    return _diag_minus_adjacency_into(out, w, a, x)


class _DiagMinusAdjacency(torch.autograd.Function):
    """y = a * x - W(w) x for a symmetric adjacency W given by undirected weights w."""

    @staticmethod
    def forward(ctx, w: Tensor, a: Optional[Tensor], x: Tensor):  # type: ignore[override]
        ctx.save_for_backward(w, a, x)
        ctx.has_a = a is not None
        return _diag_minus_adjacency(w, a, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):  # type: ignore[override]
        w, a, x = ctx.saved_tensors
        gw = ga = gx = None
        if ctx.needs_input_grad[2]:  # the operator is symmetric
            gx = _sum_to(_diag_minus_adjacency(w, a, g), x.shape)
        if ctx.has_a and ctx.needs_input_grad[1]:
            ga = _sum_to(g * x, a.shape)
        if ctx.needs_input_grad[0] and _use_native(g, x):
            B, K, C, H, W = g.shape
            g = g.contiguous()
            gw = g.new_zeros(B, K, _NU, H, W)
            _native().diag_minus_adjacency_grad_w(g, _rows_contiguous(x.expand(B, K, C, H, W)), gw)
            gw = _sum_to(gw, w.shape)
        elif ctx.needs_input_grad[0]:
            H, W = x.shape[-2:]
            gw = torch.zeros_like(w)
            for k, P, Q in _regions(H, W):
                t = g[..., P[0], P[1]] * x[..., Q[0], Q[1]]
                t.addcmul_(g[..., Q[0], Q[1]], x[..., P[0], P[1]])
                gw[:, :, k : k + 1, P[0], P[1]].sub_(_sum_to(t.sum(dim=2, keepdim=True), gw[:, :, :1].shape))
        return gw, ga, gx


def diag_minus_adjacency_apply(w: Tensor, x: Tensor, diag: Optional[Tensor] = None) -> Tensor:
    """``diag * x - W x`` (``diag=None``: ``x - W x``) for the symmetric adjacency ``W`` of the
    undirected weights ``w``; ``diag`` broadcasts against ``x`` (e.g. ``(B, K, C, H, W)`` degree
    plus sampling mask, the generalised Laplacian ``L + H^T H`` of eq. 20). Custom autograd."""
    _check_weights(w, _NU, "w")
    _check_signal(w, x)
    return _DiagMinusAdjacency.apply(w, diag, x)


def laplacian_apply(w: Tensor, x: Tensor, deg: Optional[Tensor] = None) -> Tensor:
    """``L x`` for the combinatorial Laplacian ``L = D - W`` (Sec. 2.1) of the undirected weights
    ``w`` (B, K|1, 12, H, W) applied to ``x`` (B, K, C, H, W). ``deg`` may pass a precomputed
    :func:`degree` (reuse it across solver iterations). Custom autograd (saves w, deg, x)."""
    if deg is None:
        deg = degree(w)
    return diag_minus_adjacency_apply(w, x, deg)


def normalized_weights(w: Tensor, deg: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Weights of ``D^-1/2 W D^-1/2`` and the diagonal of ``D^-1/2 D D^-1/2`` (1 except at
    isolated nodes): returns ``(wn, a)`` so that ``L_n x = a * x - Wn x`` (Sec. 5.2)."""
    if deg is None:
        deg = degree(w)
    dis = deg.clamp_min(_TINY).rsqrt()
    H, W = w.shape[-2:]
    wn = torch.zeros_like(w)
    for k, P, Q in _regions(H, W):
        wn[:, :, k : k + 1, P[0], P[1]] = (
            w[:, :, k : k + 1, P[0], P[1]] * dis[..., P[0], P[1]] * dis[..., Q[0], Q[1]]
        )
    return wn, deg * dis * dis


def normalized_laplacian_apply(w: Tensor, x: Tensor) -> Tensor:
    """``D^-1/2 L D^-1/2 x``, the symmetric normalised Laplacian used for GLR (Sec. 5.2)."""
    wn, a = normalized_weights(w)
    return diag_minus_adjacency_apply(wn, x, a)


def graph_laplacian_regularizer(w: Tensor, x: Tensor) -> Tensor:
    """GLR ``x^T L x = sum_(i,j) w_ij (x_i - x_j)^2`` (eq. 1) per (batch, head): ``(B, K)``."""
    H, W = x.shape[-2:]
    total = x.new_zeros(torch.broadcast_shapes(x.shape[:2], w.shape[:2]))
    for k, P, Q in _regions(H, W):
        d = x[..., P[0], P[1]] - x[..., Q[0], Q[1]]
        total = total + (w[:, :, k : k + 1, P[0], P[1]] * d * d).sum(dim=(2, 3, 4))
    return total


# --------------------------------------------------------------------------------------------
# directed, random-walk normalised graph: wbar (eq. 28) and the incidence C-bar (Sec. 5.2)
# --------------------------------------------------------------------------------------------


def random_walk_weights(w: Tensor) -> Tensor:
    """Eq. 28: ``wbar(p -> q) = w_pq / sum_l w_pl`` over the in-image neighbours ``l`` of ``p``;
    ``(B, K, 12, H, W) -> (B, K, 24, H, W)`` indexed by :data:`DIRECTED_OFFSETS`, zero outside the
    image. Each node's outgoing weights sum to one (a node whose weights all underflowed gets 0)."""
    _check_weights(w, _NU, "w")
    B, K, _, H, W = w.shape
    inv = degree(w).clamp_min(_TINY).reciprocal()
    wbar = w.new_zeros(B, K, 2 * _NU, H, W)
    for k, P, Q in _regions(H, W):
        wk = w[:, :, k : k + 1, P[0], P[1]]
        wbar[:, :, k : k + 1, P[0], P[1]] = wk * inv[..., P[0], P[1]]
        wbar[:, :, _NU + k : _NU + k + 1, Q[0], Q[1]] = wk * inv[..., Q[0], Q[1]]
    return wbar


def _rw_softmax(d: Tensor) -> Tensor:
    """Eq. 28 as a softmax of -d over each node's in-image directed edges (PyTorch path)."""
    B, K, _, H, W = d.shape
    dd = d.new_full((B, K, 2 * _NU, H, W), float("inf"))
    for k, P, Q in _regions(H, W):
        dk = d[:, :, k : k + 1, P[0], P[1]]
        dd[:, :, k : k + 1, P[0], P[1]] = dk
        dd[:, :, _NU + k : _NU + k + 1, Q[0], Q[1]] = dk
    return torch.softmax(-dd, dim=2)


class _RandomWalkFromDistances(torch.autograd.Function):
    """wbar = softmax(-dd) over each node's window (eq. 28); saves its output only."""

    @staticmethod
    def forward(ctx, d: Tensor):  # type: ignore[override]
        if _use_native(d):
            B, K, _, H, W = d.shape
            wbar = _native().random_walk_from_distances(d.contiguous(), d.new_zeros(B, K, 2 * _NU, H, W))
        else:
            wbar = _rw_softmax(d)
        ctx.save_for_backward(wbar)
        return wbar

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):  # type: ignore[override]
        (wbar,) = ctx.saved_tensors
        gdd = -wbar * (g - (wbar * g).sum(dim=2, keepdim=True))  # softmax backward, d(-dd)/d(dd) = -1
        H, W = wbar.shape[-2:]
        gd = gdd.new_zeros(gdd.shape[0], gdd.shape[1], _NU, H, W)
        for k, P, Q in _regions(H, W):
            torch.add(gdd[:, :, k, P[0], P[1]], gdd[:, :, _NU + k, Q[0], Q[1]], out=gd[:, :, k, P[0], P[1]])
        return gd


def random_walk_weights_from_distances(d: Tensor) -> Tensor:
    """Eq. 28 computed stably from distances ``d`` (B, K, 12, H, W) (:func:`edge_distances`):
    a softmax of ``-d`` over each node's in-image one-hop window, so it never underflows to 0/0.
    Custom autograd (saves wbar)."""
    _check_weights(d, _NU, "d")
    B, K, _, H, W = d.shape
    if H * W == 1:
        return d.new_zeros(B, K, 2 * _NU, H, W) + 0 * d.sum()
    return _RandomWalkFromDistances.apply(d)


def _zero_outside(e: Tensor, H: int, W: int) -> None:
    """Zero the entries of an edge tensor (..., 24, H, W) whose directed edge leaves the image."""
    for j, (dy, dx) in enumerate(DIRECTED_OFFSETS):
        ej = e[..., j, :, :]
        if dy > 0:
            ej[..., H - dy :, :] = 0
        elif dy < 0:
            ej[..., : -dy, :] = 0
        if dx > 0:
            ej[..., :, W - dx :] = 0
        elif dx < 0:
            ej[..., :, : -dx] = 0


def _incidence(wbar: Tensor, x: Tensor) -> Tensor:
    B, _, C, H, W = x.shape
    K = max(wbar.shape[1], x.shape[1])
    e = x.new_empty(B, K, C, 2 * _NU, H, W)
    _zero_outside(e, H, W)
    for k, P, Q in _regions(H, W):
        d = x[..., P[0], P[1]] - x[..., Q[0], Q[1]]
        torch.mul(wbar[:, :, k : k + 1, P[0], P[1]], d, out=e[:, :, :, k, P[0], P[1]])
        torch.mul(wbar[:, :, _NU + k : _NU + k + 1, Q[0], Q[1]].neg(), d, out=e[:, :, :, _NU + k, Q[0], Q[1]])
    return e


def _incidence_t(wbar: Tensor, e: Tensor) -> Tensor:
    B, K, C, _, H, W = e.shape
    out = e.new_zeros(B, K, C, H, W)
    for k, P, Q in _regions(H, W):
        t = wbar[:, :, k : k + 1, P[0], P[1]] * e[:, :, :, k, P[0], P[1]]
        t.addcmul_(wbar[:, :, _NU + k : _NU + k + 1, Q[0], Q[1]], e[:, :, :, _NU + k, Q[0], Q[1]], value=-1.0)
        out[..., P[0], P[1]].add_(t)
        out[..., Q[0], Q[1]].sub_(t)
    return out


class _Incidence(torch.autograd.Function):
    """e = C-bar(wbar) x: e[p, j] = wbar[p, j] (x_p - x_{p + o_j})."""

    @staticmethod
    def forward(ctx, wbar: Tensor, x: Tensor):  # type: ignore[override]
        ctx.save_for_backward(wbar, x)
        return _incidence(wbar, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, ge: Tensor):  # type: ignore[override]
        wbar, x = ctx.saved_tensors
        gw = gx = None
        if ctx.needs_input_grad[1]:
            gx = _sum_to(_incidence_t(wbar, ge), x.shape)
        if ctx.needs_input_grad[0]:
            H, W = x.shape[-2:]
            gw = torch.zeros(ge.shape[0], ge.shape[1], 2 * _NU, H, W, dtype=ge.dtype, device=ge.device)
            for k, P, Q in _regions(H, W):
                d = x[..., P[0], P[1]] - x[..., Q[0], Q[1]]
                gw[:, :, k, P[0], P[1]] = (ge[:, :, :, k, P[0], P[1]] * d).sum(dim=2)
                gw[:, :, _NU + k, Q[0], Q[1]] = -(ge[:, :, :, _NU + k, Q[0], Q[1]] * d).sum(dim=2)
            gw = _sum_to(gw, wbar.shape)
        return gw, gx


class _IncidenceT(torch.autograd.Function):
    """x = C-bar(wbar)^T e, the exact transpose of :class:`_Incidence`."""

    @staticmethod
    def forward(ctx, wbar: Tensor, e: Tensor):  # type: ignore[override]
        ctx.save_for_backward(wbar, e)
        return _incidence_t(wbar, e)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):  # type: ignore[override]
        wbar, e = ctx.saved_tensors
        gw = ge = None
        if ctx.needs_input_grad[1]:
            ge = _sum_to(_incidence(wbar, g), e.shape)
        if ctx.needs_input_grad[0]:
            H, W = g.shape[-2:]
            gw = torch.zeros(e.shape[0], e.shape[1], 2 * _NU, H, W, dtype=e.dtype, device=e.device)
            for k, P, Q in _regions(H, W):
                d = g[..., P[0], P[1]] - g[..., Q[0], Q[1]]
                gw[:, :, k, P[0], P[1]] = (e[:, :, :, k, P[0], P[1]] * d).sum(dim=2)
                gw[:, :, _NU + k, Q[0], Q[1]] = -(e[:, :, :, _NU + k, Q[0], Q[1]] * d).sum(dim=2)
            gw = _sum_to(gw, wbar.shape)
        return gw, ge


def incidence_apply(wbar: Tensor, x: Tensor) -> Tensor:
    """``C-bar x`` (Sec. 5.2, 2M directed edges): ``e[:, :, c, j, p] = wbar[p, j] (x_p - x_{p+o_j})``
    with ``o_j = DIRECTED_OFFSETS[j]``; wbar (B, K|1, 24, H, W), x (B, K, C, H, W) ->
    e (B, K, C, 24, H, W), zero for edges leaving the image. Custom autograd (saves wbar, x)."""
    _check_weights(wbar, 2 * _NU, "wbar")
    _check_signal(wbar, x)
    return _Incidence.apply(wbar, x)


def incidence_adjoint(wbar: Tensor, e: Tensor) -> Tensor:
    """``C-bar^T e``, the exact transpose of :func:`incidence_apply` (borders included):
    e (B, K, C, 24, H, W) -> (B, K, C, H, W). Custom autograd (saves wbar, e)."""
    _check_weights(wbar, 2 * _NU, "wbar")
    if e.dim() != 6 or e.shape[3] != 2 * _NU or e.shape[-2:] != wbar.shape[-2:]:
        raise ValueError(f"edge signal must be (B, K, C, 24, H, W), got {tuple(e.shape)}")
    return _IncidenceT.apply(wbar, e)


def incidence_laplacian_weights(wbar: Tensor) -> Tensor:
    """Undirected weights ``s`` with ``C-bar^T C-bar = L(s)`` (the Laplacian L-bar of Sec. 5.2):
    ``s_pq = wbar(p -> q)^2 + wbar(q -> p)^2``; (B, K, 24, H, W) -> (B, K, 12, H, W)."""
    _check_weights(wbar, 2 * _NU, "wbar")
    B, K, _, H, W = wbar.shape
    s = wbar.new_zeros(B, K, _NU, H, W)
    for k, P, Q in _regions(H, W):
        s[:, :, k, P[0], P[1]] = wbar[:, :, k, P[0], P[1]].square() + wbar[:, :, _NU + k, Q[0], Q[1]].square()
    return s


def graph_total_variation(wbar: Tensor, x: Tensor) -> Tensor:
    """GTV ``||C-bar x||_1`` (Sec. 2.2 with the normalised incidence) per (batch, head): ``(B, K)``,
    without materialising the edge signal."""
    H, W = x.shape[-2:]
    total = x.new_zeros(torch.broadcast_shapes(x.shape[:2], wbar.shape[:2]))
    for k, P, Q in _regions(H, W):
        d = (x[..., P[0], P[1]] - x[..., Q[0], Q[1]]).abs()
        ws = wbar[:, :, k : k + 1, P[0], P[1]] + wbar[:, :, _NU + k : _NU + k + 1, Q[0], Q[1]]
        total = total + (ws * d).sum(dim=(2, 3, 4))
    return total
