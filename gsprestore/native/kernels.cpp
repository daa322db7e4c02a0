// Native CPU kernels of gsprestore (graph.py / solvers.py): plain C++ on raw float pointers,
// no PyTorch headers. Built into a shared library when the package is built (setup.py, one
// copy per instruction set: baseline x86-64 and AVX2+FMA) and called through ctypes by
// gsprestore/native/__init__.py, which checks devices, dtypes and ranks and passes each tensor
// as (data pointer, rank, sizes, strides). They do the arithmetic of the PyTorch formulas in
// graph.py / solvers.py row by row in one pass (contiguous rows, vectorised inner loops,
// threads over rows/planes); forward values equal the PyTorch path to rounding (tested).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// A strided view of a tensor that the caller owns (what the kernels read of a torch.Tensor).
// Undefined (an optional argument that was None) where nd < 0.
static constexpr int MAXD = 6;
struct Ten {
  void* p = nullptr;
  int64_t nd = -1;
  int64_t sz[MAXD] = {};
  int64_t st[MAXD] = {};
  bool defined() const { return nd >= 0; }
  int64_t size(int d) const { return sz[d < 0 ? d + nd : d]; }
  int64_t stride(int d) const { return st[d < 0 ? d + nd : d]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < nd; ++d) n *= sz[d];
    return n;
  }
  template <typename T> T* data_ptr() const { return static_cast<T*>(p); }
};

// the thread count of the current call (the caller passes torch.get_num_threads(), so
// torch.set_num_threads applies)
static thread_local int64_t g_threads = 1;

// Run f(begin, end) over [0, n) on g_threads threads (std::thread: no second OpenMP runtime
// next to PyTorch's).
template <typename F>
static void parallel_chunks(int64_t n, int64_t min_per_thread, const F& f) {
  int64_t nt = std::min<int64_t>(g_threads, std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread)));
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

static constexpr int NU = 12;
static constexpr int OFF[12][2] = {{0,1},{0,2},{1,-2},{1,-1},{1,0},{1,1},{1,2},{2,-2},{2,-1},{2,0},{2,1},{2,2}};

// max(s, 0) exactly, written without a branch so that the loops vectorise
template <typename T> static inline T relu(T s) { return T(0.5) * (s + std::abs(s)); }

// stride of dim d, 0 where the tensor broadcasts (size 1)
static inline int64_t bst(const Ten& t, int d) { return t.size(d) == 1 ? 0 : t.stride(d); }

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
static void sq_dist_row(T* __restrict__ o, const T* __restrict__ fp, const T* __restrict__ fq, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    const T e = fp[t] - fq[t];
    o[t] += e * e;
  }
}

template <typename T>
static void min_row(T* __restrict__ m, const T* __restrict__ d, int64_t n) {
  for (int64_t t = 0; t < n; ++t) m[t] = d[t] < m[t] ? d[t] : m[t];
}

// exp of 8 floats (Cephes expf: exp(x) = 2^n exp(r), |r| <= ln2/2, a degree-7 polynomial;
// relative error ~1e-7, like std::exp's ~0.5 ulp to within 2 ulp). Arguments below -87.3 give
// exp(-87.3) ~ 1e-38 instead of a denormal or 0.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
static inline v8f exp8(v8f x) {
  x = x < -87.3f ? v8f{} - 87.3f : x;
  x = x > 88.3f ? v8f{} + 88.3f : x;
  const v8f fx = x * 1.44269504088896341f + 0.5f;
  v8i n = __builtin_convertvector(fx, v8i);            // truncation ...
  n += (v8i)(__builtin_convertvector(n, v8f) > fx);     // ... to floor (the mask is -1 where true)
  const v8f nf = __builtin_convertvector(n, v8f);
  const v8f r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
  v8f y = r * 1.9875691500E-4f + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * (r * r) + r + 1.0f;
  const v8i bits = (n + 127) << 23;
  v8f p2;
  __builtin_memcpy(&p2, &bits, sizeof(p2));
  return y * p2;
}

// o = exp(-o) in place (exp8 for float vectors, as in exp_row)
template <typename T>
static void neg_exp_row(T* __restrict__ o, int64_t n) {
  int64_t t = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; t + 8 <= n; t += 8) {
      v8f v;
      __builtin_memcpy(&v, o + t, sizeof(v));
      v = exp8(-v);
      __builtin_memcpy(o + t, &v, sizeof(v));
    }
  }
  for (; t < n; ++t) o[t] = std::exp(-o[t]);
}

template <typename T>
static void exp_row(T* __restrict__ dst, T* __restrict__ s, const T* __restrict__ d, const T* __restrict__ m, int64_t n) {
  int64_t t = 0;
  if constexpr (std::is_same_v<T, float>) {  // the vectorised exp (std::exp does not vectorise)
    for (; t + 8 <= n; t += 8) {
      v8f mv, dv, sv;
      __builtin_memcpy(&mv, m + t, sizeof(mv));
      __builtin_memcpy(&dv, d + t, sizeof(dv));
      __builtin_memcpy(&sv, s + t, sizeof(sv));
      const v8f e = exp8(mv - dv);
      sv += e;
      __builtin_memcpy(dst + t, &e, sizeof(e));
      __builtin_memcpy(s + t, &sv, sizeof(sv));
    }
  }
  for (; t < n; ++t) { const T e = std::exp(m[t] - d[t]); dst[t] = e; s[t] += e; }
}

template <typename T>
static void norm_row(T* __restrict__ dst, const T* __restrict__ s_inv, int64_t n) {
  for (int64_t t = 0; t < n; ++t) dst[t] *= s_inv[t];
}

// ---- the stencil a x - W x of the 5x5-window graph, one output row at a time -------------
//
// o[j] = a[j] x[i, j] - sum over the in-image directed neighbours q of p = (i, j) of w(p, q) x[q].
// The undirected weight of offset kk is stored at its tail: w_kk[p] for q = p + o_kk and
// w_kk[q] for q = p - o_kk. The terms of an output row are accumulated in registers six at a
// time; the columns [2, W - 2) run in branch-free vectorised loops (every term whose row is
// inside the image is inside it there), the border pixels check each term.

// o[j] -= sum_{t < 6} w_t[j] x_t[j]: six terms per pass, so the twelve row pointers stay in
// registers (one pass with all 24 terms spills them and runs slower than 24 passes)
template <typename T>
static void fma_rows6(T* __restrict__ o, const T* const* wr, const T* const* xr, int64_t j0, int64_t j1) {
  const T* __restrict__ w0 = wr[0]; const T* __restrict__ w1 = wr[1]; const T* __restrict__ w2 = wr[2];
  const T* __restrict__ w3 = wr[3]; const T* __restrict__ w4 = wr[4]; const T* __restrict__ w5 = wr[5];
  const T* __restrict__ x0 = xr[0]; const T* __restrict__ x1 = xr[1]; const T* __restrict__ x2 = xr[2];
  const T* __restrict__ x3 = xr[3]; const T* __restrict__ x4 = xr[4]; const T* __restrict__ x5 = xr[5];
#pragma GCC ivdep
  for (int64_t j = j0; j < j1; ++j)
    o[j] -= (w0[j] * x0[j] + w1[j] * x1[j]) + (w2[j] * x2[j] + w3[j] * x3[j]) + (w4[j] * x4[j] + w5[j] * x5[j]);
}

// One row i of one (b, k, c) plane: xb/wb plane bases, xsr/wsr row strides, wsj the stride
// between the 12 weight planes; ar the row of a (unused without HAS_A).
template <typename T, bool HAS_A>
static void stencil_row(T* __restrict__ o, const T* __restrict__ ar, const T* xb, int64_t xsr, const T* wb,
                        int64_t wsj, int64_t wsr, int64_t i, int64_t H, int64_t W) {
  const T* wr[2 * NU];
  const T* xr[2 * NU];
  int64_t cd[2 * NU];
  int n = 0;
  for (int kk = 0; kk < NU; ++kk) {
    const int dy = OFF[kk][0], dx = OFF[kk][1];
    // pointers are only dereferenced at in-image neighbours (checked below at border columns)
    if (i + dy < H) {  // q = p + o: weight at p
      wr[n] = wb + kk * wsj + i * wsr; xr[n] = xb + (i + dy) * xsr + dx; cd[n] = dx; ++n;
    }
    if (i - dy >= 0) {  // q = p - o: weight at q
      wr[n] = wb + kk * wsj + (i - dy) * wsr - dx; xr[n] = xb + (i - dy) * xsr - dx; cd[n] = -dx; ++n;
    }
  }
  const T* xc = xb + i * xsr;
  auto border_pixel = [&](int64_t j) {
    T s = T(0);
    for (int t = 0; t < n; ++t) {
      const int64_t q = j + cd[t];
      if (q >= 0 && q < W) s += wr[t][j] * xr[t][j];
    }
    o[j] = (HAS_A ? ar[j] * xc[j] : xc[j]) - s;
  };
  const int64_t j0 = std::min<int64_t>(2, W), j1 = std::max<int64_t>(j0, W - 2);
  for (int64_t j = 0; j < j0; ++j) border_pixel(j);
  for (int64_t j = j1; j < W; ++j) border_pixel(j);
  if (j1 <= j0) return;
  for (int64_t j = j0; j < j1; ++j) o[j] = HAS_A ? ar[j] * xc[j] : xc[j];
  int t = 0;
  for (; t + 6 <= n; t += 6) fma_rows6<T>(o, wr + t, xr + t, j0, j1);
  for (; t < n; ++t) fma_row<T>(o + j0, wr[t] + j0, xr[t] + j0, j1 - j0);  // border rows
}

// stencil_row for NC channels that share the weights, on a row i with 2 <= i < H - 2 (all 24
// terms in the image) of contiguous planes (row stride W): o_c = a_c x_c - W x_c for c < NC.
// The interior columns run in explicit vectors (GCC vector extensions) with the NC sums in
// registers, so each weight vector is loaded once for all channels and no partial sum goes
// through memory; the 4 border columns and the remainder run the scalar per-term check.
template <typename T, int NC>
static void stencil_row_multi(T* const* o, const T* const* ar, const T* const* xb, const T* wb, int64_t wsj,
                              int64_t wsr, int64_t i, int64_t W) {
  typedef T vec __attribute__((vector_size(32)));
  constexpr int64_t V = 32 / sizeof(T);
  const T* wr[2 * NU];
  int64_t xo[2 * NU];
  int cd[2 * NU];
  for (int kk = 0; kk < NU; ++kk) {
    const int dy = OFF[kk][0], dx = OFF[kk][1];
    wr[2 * kk] = wb + kk * wsj + i * wsr; xo[2 * kk] = dy * W + dx; cd[2 * kk] = dx;
    wr[2 * kk + 1] = wb + kk * wsj + (i - dy) * wsr - dx; xo[2 * kk + 1] = -dy * W - dx; cd[2 * kk + 1] = -dx;
  }
  const int64_t row = i * W;
  auto ld = [](const T* p) __attribute__((always_inline)) { vec v; __builtin_memcpy(&v, p, sizeof(vec)); return v; };
  auto scalar_pixel = [&](int64_t j) {
    T sum[NC];
    for (int c = 0; c < NC; ++c) sum[c] = T(0);
    for (int t = 0; t < 2 * NU; ++t) {
      const int64_t q = j + cd[t];
      if (q < 0 || q >= W) continue;
      const T wt = wr[t][j];
      for (int c = 0; c < NC; ++c) sum[c] += wt * xb[c][row + j + xo[t]];
    }
    for (int c = 0; c < NC; ++c) o[c][j] = ar[c][j] * xb[c][row + j] - sum[c];
  };
  const int64_t j0 = std::min<int64_t>(2, W), j1 = std::max<int64_t>(j0, W - 2);
  for (int64_t j = 0; j < j0; ++j) scalar_pixel(j);
  for (int64_t j = j1; j < W; ++j) scalar_pixel(j);
  // the columns [j0, j1) in vectors; a last, overlapping vector covers the remainder (it
  // rewrites some columns with the same values)
  // the 24 terms unrolled with their offsets as constants: no per-term pointer loads, each
  // weight vector loaded once for the NC channels
  const T* w0 = wb + i * wsr;  // plane 0, row i
  const int64_t sy[3] = {0, W, 2 * W}, wy[3] = {0, wsr, 2 * wsr};
  auto vector_at = [&](int64_t j) __attribute__((always_inline)) {
    vec acc[NC], acb[NC];  // two sums per channel: shorter FMA dependency chains
    for (int c = 0; c < NC; ++c) acc[c] = acb[c] = vec{};
    const T* wj = w0 + j;
    auto term = [&](auto kc) __attribute__((always_inline)) {
      constexpr int kk = decltype(kc)::value;
      constexpr int dy = OFF[kk][0], dx = OFF[kk][1];
      const vec wf = ld(wj + kk * wsj);                   // weight at p (q = p + o)
      const vec wbk = ld(wj + kk * wsj - wy[dy] - dx);    // weight at q = p - o
      for (int c = 0; c < NC; ++c) {
        const T* xc = xb[c] + row + j;
        acc[c] += wf * ld(xc + sy[dy] + dx);
        acb[c] += wbk * ld(xc - sy[dy] - dx);
      }
    };
    [&]<int... K>(std::integer_sequence<int, K...>) __attribute__((always_inline)) { (term(std::integral_constant<int, K>{}), ...); }
        (std::make_integer_sequence<int, NU>{});
    for (int c = 0; c < NC; ++c) {
      const vec r = ld(ar[c] + j) * ld(xb[c] + row + j) - (acc[c] + acb[c]);
      __builtin_memcpy(o[c] + j, &r, sizeof(vec));
    }
  };
  if (j1 - j0 < V) {
    for (int64_t j = j0; j < j1; ++j) scalar_pixel(j);
    return;
  }
  for (int64_t j = j0; j + V <= j1; j += V) vector_at(j);
  if ((j1 - j0) % V) vector_at(j1 - V);
}
// stencil_row_multi for nc = 1..4 channels given at run time
template <typename T>
static void stencil_row_channels(int64_t nc, T* const* o, const T* const* ar, const T* const* xb, const T* wb,
                                 int64_t wsj, int64_t wsr, int64_t i, int64_t W) {
  switch (nc) {
    case 1: stencil_row_multi<T, 1>(o, ar, xb, wb, wsj, wsr, i, W); break;
    case 2: stencil_row_multi<T, 2>(o, ar, xb, wb, wsj, wsr, i, W); break;
    case 3: stencil_row_multi<T, 3>(o, ar, xb, wb, wsj, wsr, i, W); break;
    default: stencil_row_multi<T, 4>(o, ar, xb, wb, wsj, wsr, i, W); break;
  }
}
// a * x - W x on row i of C planes: out(c), a_row(c) give that row of plane c of the output and of
// a, x_plane(c) the base of plane c of x (row stride xsr). Four planes at a time in registers
// (stencil_row_multi) where the row has two rows of context on each side and the rows of x are
// contiguous, else each plane on its own with the border's taps (stencil_row). dma_impl, the
// unrolled CG's adjoint and the denoiser's CG run their rows through it (the unrolled CG's
// forward, whose scratch is one row per channel elsewhere, makes the same choice in stencil_all).
template <typename T, typename Out, typename ARow, typename XPlane>
static void stencil_rows(int64_t C, const Out& out, const ARow& a_row, const XPlane& x_plane, int64_t xsr,
                         const T* wb, int64_t wsj, int64_t wsr, int64_t i, int64_t H, int64_t W) {
  const bool interior = i >= 2 && i + 2 < H && xsr == W;
  for (int64_t c0 = 0; c0 < C; c0 += 4) {
    const int64_t nc = std::min<int64_t>(4, C - c0);
    T* o[4];
    const T* ar[4];
    const T* xb[4];
    for (int64_t c = 0; c < nc; ++c) {
      o[c] = out(c0 + c);
      ar[c] = a_row(c0 + c);
      xb[c] = x_plane(c0 + c);
    }
    if (interior)
      stencil_row_channels<T>(nc, o, ar, xb, wb, wsj, wsr, i, W);
    else
      for (int64_t c = 0; c < nc; ++c) stencil_row<T, true>(o[c], ar[c], xb[c], xsr, wb, wsj, wsr, i, H, W);
  }
}

// out = a * x - W x ; a may be undefined (identity). All tensors (B, K?, C?, H, W) with
// contiguous rows; broadcast dims have stride 0. out is contiguous (B, K, C, H, W).
template <typename T>
static void dma_impl(const Ten& w, const Ten& a, bool has_a, const Ten& x, Ten& out) {
  const int64_t B = out.size(0), K = out.size(1), C = out.size(2), H = out.size(3), W = out.size(4);
  const T* wp = w.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  const T* ap = has_a ? a.data_ptr<T>() : nullptr;
  T* op = out.data_ptr<T>();
  const int64_t wsb = bst(w, 0), wsk = bst(w, 1), wsj = w.stride(2), wsr = w.stride(3);
  const int64_t xsb = bst(x, 0), xsk = bst(x, 1), xsc = bst(x, 2), xsr = x.stride(3);
  int64_t asb = 0, ask = 0, asc = 0, asr = 0;
  if (has_a) { asb = bst(a, 0); ask = bst(a, 1); asc = bst(a, 2); asr = a.stride(3); }
  // threads over (b, k, row); the channels of a row run back to back so the weight rows
  // they share stay in cache
  parallel_chunks(B * K * H, 16, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, k = (idx / H) % K, b = idx / (H * K);
      const T* wb = wp + b * wsb + k * wsk;
      if (!has_a) {
        for (int64_t c = 0; c < C; ++c)
          stencil_row<T, false>(op + (((b * K + k) * C + c) * H + i) * W, nullptr, xp + b * xsb + k * xsk + c * xsc,
                                xsr, wb, wsj, wsr, i, H, W);
        continue;
      }
      // up to 4 channels at a time (stencil_rows), each weight vector loaded once for all of them
      stencil_rows<T>(
          C, [&](int64_t c) { return op + (((b * K + k) * C + c) * H + i) * W; },
          [&](int64_t c) { return ap + b * asb + k * ask + c * asc + i * asr; },
          [&](int64_t c) { return xp + b * xsb + k * xsk + c * xsc; }, xsr, wb, wsj, wsr, i, H, W);
    }
  });
}

// Unrolled CG with learned step sizes (solvers.cg_unrolled, inference only), in place. Given
// x = x^0 and buffers g, v, v2 (all (B, K, C, H, W) with the same strides: contiguous rows,
// planes x.stride(2) apart, contiguous over (b, k, c)) and the right-hand side rhs
// (broadcastable, contiguous rows), it starts with g = A x^0 - rhs, v = pre * g; then
// steps t = 0 .. T-2 are:
//   Av = keep * (diag * v - S v);  x -= a_t v;  g -= a_t Av;  v' = pre * g + b_{t+1} v  (v' into the other buffer)
// and the last step is x -= a_{T-1} v. S (B, K|1, 12, H, W), diag, keep, pre broadcastable with
// contiguous rows (keep, pre may be undefined: 1; pre is a diagonal preconditioner, the caller
// starts with v = pre * g); al, be (T, K) contiguous. mode 0: threads over (b, k, row) within a
// step, the steps one after the other (v' needs the neighbours' v); mode 1: the wavefront below,
// threads over planes (b, k); mode -1: the wavefront when there are at least as many planes as
// threads.
template <typename T>
static void cg_unrolled_impl(const Ten& w, const Ten& diag, const Ten& keep, bool has_keep,
                             const Ten& pre, bool has_pre, const Ten& rhs,
                             Ten& x, Ten& g, Ten& v, Ten& v2,
                             const Ten& al, const Ten& be, int64_t mode,
                             T* vrec = nullptr, T* grec = nullptr, int64_t rec_stride = 0) {
  const int64_t B = x.size(0), K = x.size(1), C = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t Tn = al.size(0);
  const int64_t HW = x.stride(2);  // plane stride of x, g, v, v2 (H * W, or padded: graph._padded_planes)
  const T* wp = w.data_ptr<T>();
  const T* dp = diag.data_ptr<T>();
  const T* kp = has_keep ? keep.data_ptr<T>() : nullptr;
  const T* alp = al.data_ptr<T>();
  const T* bep = be.data_ptr<T>();
  T* xp = x.data_ptr<T>();
  T* gp = g.data_ptr<T>();
  // recording (training: cg_adjoint.py's forward): v^t into vrec + t * rec_stride (every step
  // its own buffer, nothing overwritten) and, with grec, g^t before step t updates it
  T* bufs[2] = {vrec ? nullptr : v.data_ptr<T>(), vrec ? nullptr : v2.data_ptr<T>()};
  auto vbuf = [&](int64_t t) -> T* { return vrec ? vrec + t * rec_stride : bufs[t % 2]; };
  const int64_t wsb = bst(w, 0), wsk = bst(w, 1), wsj = w.stride(2), wsr = w.stride(3);
  const int64_t dsb = bst(diag, 0), dsk = bst(diag, 1), dsc = bst(diag, 2), dsr = diag.stride(3);
  int64_t ksb = 0, ksk = 0, ksc = 0, ksr = 0;
  if (has_keep) { ksb = bst(keep, 0); ksk = bst(keep, 1); ksc = bst(keep, 2); ksr = keep.stride(3); }
  const T* pp = has_pre ? pre.data_ptr<T>() : nullptr;
  int64_t psb = 0, psk = 0, psc = 0, psr = 0;
  if (has_pre) { psb = bst(pre, 0); psk = bst(pre, 1); psc = bst(pre, 2); psr = pre.stride(3); }
  const T* rp = rhs.data_ptr<T>();
  const int64_t rsb = bst(rhs, 0), rsk = bst(rhs, 1), rsc = bst(rhs, 2), rsr = rhs.stride(3);
  // the start on row i, all channels: g = keep * (diag * x - S x) - rhs, v = pre * g
  // The stencil diag * u - S u on row i of all channels of plane (b, k) of the buffer u into
  // av + c * W at once (stencil_row_multi) where the row is interior and C <= 4; returns false
  // (nothing done) elsewhere, where the caller runs stencil_row per channel.
  auto stencil_all = [&](int64_t b, int64_t k, int64_t i, const T* u, T* av) -> bool {
    if (!(i >= 2 && i + 2 < H && C <= 4)) return false;
    const T* wb = wp + b * wsb + k * wsk;
    T* o[4];
    const T* ar[4];
    const T* xb[4];
    for (int64_t c = 0; c < C; ++c) {
      o[c] = av + c * W;
      ar[c] = dp + b * dsb + k * dsk + c * dsc + i * dsr;
      xb[c] = u + ((b * K + k) * C + c) * HW;
    }
    stencil_row_channels<T>(C, o, ar, xb, wb, wsj, wsr, i, W);
    return true;
  };
  auto init_row = [&](int64_t b, int64_t k, int64_t i, T* __restrict__ av) {
    const T* wb = wp + b * wsb + k * wsk;
    const bool multi = stencil_all(b, k, i, xp, av);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t plane = (b * K + k) * C + c;
      if (!multi)
        stencil_row<T, true>(av, dp + b * dsb + k * dsk + c * dsc + i * dsr, xp + plane * HW, W, wb, wsj, wsr,
                             i, H, W);
      const T* __restrict__ avr = multi ? av + c * W : av;
      T* __restrict__ gr = gp + plane * HW + i * W;
      T* __restrict__ vr = vbuf(0) + plane * HW + i * W;
      const T* __restrict__ rr = rp + b * rsb + k * rsk + c * rsc + i * rsr;
      const T* __restrict__ kr = has_keep ? kp + b * ksb + k * ksk + c * ksc + i * ksr : nullptr;
      const T* __restrict__ pr = has_pre ? pp + b * psb + k * psk + c * psc + i * psr : nullptr;
      for (int64_t j = 0; j < W; ++j) {
        const T gj = (has_keep ? kr[j] * avr[j] : avr[j]) - rr[j];
        gr[j] = gj;
        vr[j] = has_pre ? pr[j] * gj : gj;
      }
    }
  };
  // step t on row i of plane (b, k), all channels; av a scratch row
  auto row_step = [&](int64_t b, int64_t k, int64_t i, int64_t t, T* __restrict__ av) {
    const bool last = t + 1 == Tn;
    const T* vp = vbuf(t);
    T* vn = last ? nullptr : vbuf(t + 1);
    if (grec)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t off = ((b * K + k) * C + c) * HW + i * W;
        std::copy(gp + off, gp + off + W, grec + t * rec_stride + off);
      }
    const T a = alp[t * K + k];
    const T bn = last ? T(0) : bep[(t + 1) * K + k];
    const T* wb = wp + b * wsb + k * wsk;
    const T* av_c = av;
    const bool multi = !last && stencil_all(b, k, i, vp, av);  // all channels at once where it can
    for (int64_t c = 0; c < C; ++c) {
      const int64_t plane = (b * K + k) * C + c;
      T* __restrict__ xr = xp + plane * HW + i * W;
      const T* __restrict__ vr = vp + plane * HW + i * W;
      if (last) {
        for (int64_t j = 0; j < W; ++j) xr[j] -= a * vr[j];
        continue;
      }
      if (multi) {
        av_c = av + c * W;
      } else {
        av_c = av;
        stencil_row<T, true>(av, dp + b * dsb + k * dsk + c * dsc + i * dsr, vp + plane * HW, W, wb, wsj, wsr,
                             i, H, W);
      }
      const T* __restrict__ avr = av_c;
      T* __restrict__ gr = gp + plane * HW + i * W;
      T* __restrict__ vnr = vn + plane * HW + i * W;
      const T* __restrict__ kr = has_keep ? kp + b * ksb + k * ksk + c * ksc + i * ksr : nullptr;
      if (has_pre) {
        const T* __restrict__ pr = pp + b * psb + k * psk + c * psc + i * psr;
        for (int64_t j = 0; j < W; ++j) {
          const T vj = vr[j];
          xr[j] -= a * vj;
          const T gj = gr[j] - a * (has_keep ? kr[j] * avr[j] : avr[j]);
          gr[j] = gj;
          vnr[j] = pr[j] * gj + bn * vj;
        }
      } else if (has_keep) {
        for (int64_t j = 0; j < W; ++j) {
          const T vj = vr[j];
          xr[j] -= a * vj;
          const T gj = gr[j] - a * (kr[j] * avr[j]);
          gr[j] = gj;
          vnr[j] = gj + bn * vj;
        }
      } else {
        for (int64_t j = 0; j < W; ++j) {
          const T vj = vr[j];
          xr[j] -= a * vj;
          const T gj = gr[j] - a * avr[j];
          gr[j] = gj;
          vnr[j] = gj + bn * vj;
        }
      }
    }
  };
  const bool wavefront = mode == 1 || (mode < 0 && B * K >= g_threads);
  if (wavefront) {
    // One thread per plane sweeps its rows once for all T steps: step t runs on row i - LAG t, so
    // the rows a step reads (its v within the stencil's 2 rows, g and x of its own row) were
    // written by step t - 1 in this or an earlier sweep position, and the v row it overwrites
    // (v^{t+1} over v^{t-1}) is no longer read by step t - 1. The steps in flight touch a window
    // of about 2 T + 5 rows, which stays in cache: memory is read about once per solve.
    // The start (g, v from x) runs as step -1 in the same sweep: it reads x on rows i - 2 .. i + 2
    // before step 0 (on row i - 2 at this position, on rows below i - 2 earlier) changes them.
    const int64_t LAG = 2;
    parallel_chunks(B * K, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> buf(4 * W);
      for (int64_t pl = begin; pl < end; ++pl) {
        const int64_t k = pl % K, b = pl / K;
        for (int64_t i = 0; i < H + LAG * Tn; ++i) {
          if (i < H) init_row(b, k, i, buf.data());
          for (int64_t t = 0; t < Tn; ++t) {
            const int64_t r = i - LAG * (t + 1);
            if (r < 0) break;
            if (r < H) row_step(b, k, r, t, buf.data());
          }
        }
      }
    });
    return;
  }
  parallel_chunks(B * K * H, 16, [&](int64_t begin, int64_t end) {
    std::vector<T> buf(4 * W);
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, k = (idx / H) % K, b = idx / (H * K);
      init_row(b, k, i, buf.data());
    }
  });
  for (int64_t t = 0; t < Tn; ++t) {
    parallel_chunks(B * K * H, 16, [&](int64_t begin, int64_t end) {
      std::vector<T> buf(4 * W);
      for (int64_t idx = begin; idx < end; ++idx) {
        const int64_t i = idx % H, k = (idx / H) % K, b = idx / (H * K);
        row_step(b, k, i, t, buf.data());
      }
    });
  }
}

// f.template operator()<b...>() with the run-time flags as template arguments (each combination
// compiles its own branch-free loop)
template <bool... Bs, typename F>
static void dispatch_bools(F&& f) { f.template operator()<Bs...>(); }
template <bool... Bs, typename F, typename... R>
static void dispatch_bools(F&& f, bool b, R... rest) {
  if (b) dispatch_bools<Bs..., true>(f, rest...);
  else dispatch_bools<Bs..., false>(f, rest...);
}

// One row of one channel of a step of cg_backward_impl (the pointwise part; S1: s >= 1, PRE / KEEP
// / GP: a preconditioner / keep / the preconditioner's gradient, TP: t > 0). The terms of the two
// inner products go to da / db (summed by the caller).
template <typename T, bool S1, bool PRE, bool KEEP, bool GP, bool TP>
static void cg_bwd_row(int64_t W, T a, T bt, const T* __restrict__ xb, const T* __restrict__ v,
                       const T* __restrict__ vprev, const T* __restrict__ u, const T* __restrict__ y,
                       T* __restrict__ vb, T* __restrict__ gbar, T* __restrict__ ynr, T* __restrict__ gdr,
                       const T* __restrict__ pr, const T* __restrict__ kr, const T* __restrict__ gt,
                       T* __restrict__ gpr, T* __restrict__ da, T* __restrict__ db) {
  for (int64_t j = 0; j < W; ++j) {
    T vbar = -a * xb[j];
    T dot = xb[j] * v[j];
    if constexpr (S1) {
      vbar += vb[j] - a * u[j];
      dot += u[j] * v[j];
      gdr[j] -= a * y[j] * v[j];
    } else {
      gdr[j] = T(0);
    }
    da[j] = dot;
    T pv = vbar;
    if constexpr (PRE) pv = pr[j] * vbar;
    T gn = pv;
    if constexpr (S1) gn += gbar[j];
    gbar[j] = gn;
    if constexpr (KEEP) ynr[j] = kr[j] * gn; else ynr[j] = gn;
    vb[j] = bt * vbar;
    if constexpr (TP) db[j] = vbar * vprev[j];
    if constexpr (GP) {
      if constexpr (S1) gpr[j] += vbar * gt[j]; else gpr[j] = vbar * gt[j];
    }
  }
}

// Backward of the unrolled CG (solvers/cg_adjoint.py, the adjoint recurrence of its module
// docstring) for A = keep * (diag - W), keep without a gradient, in one sweep per plane (b, k):
// for s = 0 .. T-1 (t = T-1-s) and a last step s = T, each on row r = i - 2 s at sweep position i,
// as in cg_unrolled_impl's wavefront. Per row (all channels c):
//   u      = A^T gbar^{t+1} = diag * y - W y,  y = keep * gbar^{t+1}          (s >= 1)
//   vbar   = -a_t xbar + beta_{t+1} vbar^{t+1} - a_t u
//   ga_t  -= <xbar, v^t> + <u, v^t>;   gd += -a_t y v^t;   gw -= -a_t (y_p v^t_q + y_q v^t_p)
//   gbar^t = gbar^{t+1} + P vbar;  gp += vbar g^t;  gbe_t += <vbar, v^{t-1}>
// and at s = T: gb = -gbar^0, gx0 = xbar + A^T gbar^0, gd += y x0, gw -= (y_p x0_q + y_q x0_p).
// y lives in two buffers (y^{t+1} read by step s within 2 rows, y^t written: step s + 1 writes
// the buffer step s - 1 wrote, at rows step s no longer reads); gbar and vbar are pointwise, one
// buffer each. The per-plane buffers are the thread's own; gw, gd, gp, gb, gx0 are written
// (not accumulated into): every (b, k) plane of them belongs to one thread. ga / gbe: one sum per
// plane and step, (B * K, T). Tensors: w (B, K|1, 12, H, W) rows contiguous; diag, keep?, pre?,
// x0 (B, K, C, H, W) broadcast strides, rows contiguous; vrec, grec? (T, B, K, C, H, W) and xbar,
// gd, gp?, gb, gx0 (B, K, C, H, W) contiguous; gw (B, K, 12, H, W) contiguous.
template <typename T>
static void cg_backward_impl(const Ten& w, const Ten& diag, const Ten& keep, const Ten& pre, const Ten& vrec,
                             const Ten& grec, const Ten& x0, const Ten& xbar, const Ten& al, const Ten& be,
                             Ten& gw, Ten& gd, Ten& gp, Ten& gb, Ten& gx0, Ten& ga, Ten& gbe) {
  const int64_t Tn = vrec.size(0), B = vrec.size(1), K = vrec.size(2), C = vrec.size(3), H = vrec.size(4),
                W = vrec.size(5);
  const int64_t HW = H * W, rs = vrec.stride(0);
  const bool has_keep = keep.defined(), has_pre = pre.defined(), want_gp = gp.defined();
  const T* wp = w.data_ptr<T>();
  const int64_t wsb = bst(w, 0), wsk = bst(w, 1), wsj = w.stride(2), wsr = w.stride(3);
  auto strides = [](const Ten& t, int64_t* s) {
    s[0] = bst(t, 0); s[1] = bst(t, 1); s[2] = bst(t, 2); s[3] = t.stride(3);
  };
  int64_t ds[4], ks[4] = {}, ps[4] = {}, xs[4];
  strides(diag, ds);
  if (has_keep) strides(keep, ks);
  if (has_pre) strides(pre, ps);
  strides(x0, xs);
  const T* dp = diag.data_ptr<T>();
  const T* kp = has_keep ? keep.data_ptr<T>() : nullptr;
  const T* pp = has_pre ? pre.data_ptr<T>() : nullptr;
  const T* xp0 = x0.data_ptr<T>();
  const T* vp = vrec.data_ptr<T>();
  const T* grp = want_gp ? grec.data_ptr<T>() : nullptr;
  const T* xbp = xbar.data_ptr<T>();
  const T* alp = al.data_ptr<T>();
  const T* bep = be.data_ptr<T>();
  T* gwp = gw.data_ptr<T>();
  T* gdp = gd.data_ptr<T>();
  T* gpp = want_gp ? gp.data_ptr<T>() : nullptr;
  T* gbp = gb.data_ptr<T>();
  T* gxp = gx0.data_ptr<T>();
  T* gap = ga.data_ptr<T>();
  T* gbep = gbe.data_ptr<T>();
  const int64_t LAG = 2;
  parallel_chunks(B * K, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> buf(4 * C * HW + C * W + 2 * W);
    T* Y[2] = {buf.data(), buf.data() + C * HW};
    T* G = buf.data() + 2 * C * HW;   // gbar, pointwise
    T* VB = buf.data() + 3 * C * HW;  // beta_{t+1} vbar^{t+1}, pointwise
    T* U = buf.data() + 4 * C * HW;   // scratch rows: the stencil of y (C rows)
    T* DA = U + C * W;                // scratch rows: the terms of the step sizes' inner products
    T* DB = DA + W;
    std::vector<double> dga(Tn), dgbe(Tn);
    for (int64_t pl = begin; pl < end; ++pl) {
      const int64_t b = pl / K, k = pl % K;
      const T* wb = wp + b * wsb + k * wsk;
      std::fill(dga.begin(), dga.end(), 0.0);
      std::fill(dgbe.begin(), dgbe.end(), 0.0);
      auto rowp = [&](const T* base, const int64_t* s, int64_t c, int64_t r) { return base + b * s[0] + k * s[1] + c * s[2] + r * s[3]; };
      // u rows = diag * y - W y on row r of the C planes of y (plane stride HW, row stride W)
      auto stencil = [&](const T* y, int64_t r) {
        stencil_rows<T>(
            C, [&](int64_t c) { return U + c * W; }, [&](int64_t c) { return rowp(dp, ds, c, r); },
            [&](int64_t c) { return y + c * HW; }, W, wb, wsj, wsr, r, H, W);
      };
      // gw row r -= coef * sum_c (y_p x_q + y_q x_p); x given by plane bases xq(c) with row stride xr
      T* gwb = gwp + pl * NU * HW;
      auto grad_w = [&](const T* y, auto xplane, int64_t xr, T coef, int64_t r) {
        for (int kk = 0; kk < NU; ++kk) {
          const int dy = OFF[kk][0], dx = OFF[kk][1];
          const int64_t n = W - std::abs(dx);
          if (n <= 0 || r + dy >= H) continue;
          const int64_t px = std::max(0, -dx), qx = std::max(0, dx);
          T* __restrict__ o = gwb + kk * HW + r * W + px;
          for (int64_t c = 0; c < C; ++c) {
            const T* __restrict__ yp = y + c * HW + r * W + px;
            const T* __restrict__ yq = y + c * HW + (r + dy) * W + qx;
            const T* xb = xplane(c);
            const T* __restrict__ xpp = xb + r * xr + px;
            const T* __restrict__ xq = xb + (r + dy) * xr + qx;
            for (int64_t j = 0; j < n; ++j) o[j] -= coef * (yp[j] * xq[j] + yq[j] * xpp[j]);
          }
        }
      };
      auto step = [&](int64_t s, int64_t r) {
        const int64_t t = Tn - 1 - s;
        const T a = alp[t * K + k];
        const T* yo = Y[(s + 1) % 2];  // y^{t+1} (written by step s - 1)
        T* yn = Y[s % 2];
        if (s >= 1) stencil(yo, r);
        double sa = 0.0, sb = 0.0;
        const T bt = t > 0 ? bep[t * K + k] : T(0);
        for (int64_t c = 0; c < C; ++c) {
          const int64_t off = pl * C * HW + c * HW + r * W;  // (b, k, c, r) in the contiguous tensors
          const T* __restrict__ xb = xbp + off;
          const T* __restrict__ v = vp + t * rs + off;
          const T* __restrict__ u = U + c * W;
          const T* __restrict__ y = yo + c * HW + r * W;
          T* __restrict__ vb = VB + c * HW + r * W;
          T* __restrict__ gbar = G + c * HW + r * W;
          T* __restrict__ ynr = yn + c * HW + r * W;
          T* __restrict__ gdr = gdp + off;
          const T* __restrict__ pr = has_pre ? rowp(pp, ps, c, r) : nullptr;
          const T* __restrict__ kr = has_keep ? rowp(kp, ks, c, r) : nullptr;
          const T* __restrict__ vprev = t > 0 ? v - rs : nullptr;
          const T* __restrict__ gt = want_gp ? grp + t * rs + off : nullptr;
          T* __restrict__ gpr = want_gp ? gpp + off : nullptr;
          dispatch_bools([&]<bool S1, bool PRE, bool KEEP, bool GP, bool TP>() {
            cg_bwd_row<T, S1, PRE, KEEP, GP, TP>(W, a, bt, xb, v, vprev, u, y, vb, gbar, ynr, gdr, pr, kr, gt, gpr,
                                                 DA, DB);
          }, s >= 1, has_pre, has_keep, want_gp, t > 0);
          double da = 0.0, db = 0.0;
          for (int64_t j = 0; j < W; ++j) da += double(DA[j]);
          if (t > 0)
            for (int64_t j = 0; j < W; ++j) db += double(DB[j]);
          sa += da;
          sb += db;
        }
        dga[t] -= sa;
        if (t > 0) dgbe[t] += sb;
        if (s == 0)
          for (int kk = 0; kk < NU; ++kk) std::fill(gwb + kk * HW + r * W, gwb + kk * HW + (r + 1) * W, T(0));
        if (s >= 1) grad_w(yo, [&](int64_t c) { return vp + t * rs + pl * C * HW + c * HW; }, W, -a, r);
      };
      auto finish = [&](int64_t r) {  // s = T: gbar^0 in G, y^0 in Y[(T - 1) % 2]
        const T* y = Y[(Tn - 1) % 2];
        stencil(y, r);
        for (int64_t c = 0; c < C; ++c) {
          const int64_t off = pl * C * HW + c * HW + r * W;
          const T* __restrict__ gbar = G + c * HW + r * W;
          const T* __restrict__ xb = xbp + off;
          const T* __restrict__ u = U + c * W;
          const T* __restrict__ yr = y + c * HW + r * W;
          const T* __restrict__ x0r = rowp(xp0, xs, c, r);
          for (int64_t j = 0; j < W; ++j) {
            gbp[off + j] = -gbar[j];
            gxp[off + j] = xb[j] + u[j];
            gdp[off + j] += yr[j] * x0r[j];
          }
        }
        grad_w(y, [&](int64_t c) { return rowp(xp0, xs, c, 0); }, xs[3], T(1), r);
      };
      for (int64_t i = 0; i < H + LAG * Tn; ++i) {
        for (int64_t s = 0; s <= Tn; ++s) {
          const int64_t r = i - LAG * s;
          if (r < 0) break;
          if (r >= H) continue;
          if (s < Tn) step(s, r); else finish(r);
        }
      }
      for (int64_t t = 0; t < Tn; ++t) {
        gap[pl * Tn + t] = T(dga[t]);
        gbep[pl * Tn + t] = T(dgbe[t]);
      }
    }
  });
}

// Weights of L-bar = C-bar^T C-bar (graph.incidence_laplacian_weights):
// s_kk[p] = wbar_kk[p]^2 + wbar_{12+kk}[p + o_kk]^2 where p + o_kk is inside the image, else 0.
// wbar (B, K, 24, H, W) contiguous, s (B, K, 12, H, W) with contiguous rows (its planes may be
// padded apart: graph._padded_planes). Threads over (b, k, row).
template <typename T>
static void ilw_impl(const Ten& wbar, Ten& s) {
  const int64_t K = s.size(1), H = s.size(3), W = s.size(4), HW = H * W;
  const int64_t BK = s.size(0) * K;
  const int64_t ss0 = s.stride(0), ss1 = s.stride(1), ssj = s.stride(2), ssr = s.stride(3);
  const T* wp = wbar.data_ptr<T>();
  T* sp = s.data_ptr<T>();
  parallel_chunks(BK * H, 16, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, bk = idx / H;
      for (int kk = 0; kk < NU; ++kk) {
        const int dy = OFF[kk][0], dx = OFF[kk][1];
        T* __restrict__ o = sp + (bk / K) * ss0 + (bk % K) * ss1 + kk * ssj + i * ssr;
        const int64_t j0 = std::max(0, -dx), j1 = std::max<int64_t>(j0, std::min<int64_t>(W, W - dx));
        if (i + dy >= H || j1 <= j0) { std::fill(o, o + W, T(0)); continue; }
        const T* __restrict__ f = wp + (bk * 2 * NU + kk) * HW + i * W;
        const T* __restrict__ r = wp + (bk * 2 * NU + NU + kk) * HW + (i + dy) * W + dx;
        std::fill(o, o + j0, T(0));
        for (int64_t j = j0; j < j1; ++j) o[j] = f[j] * f[j] + r[j] * r[j];
        std::fill(o + j1, o + W, T(0));
      }
    }
  });
}

// Degrees (graph.degree): deg[p] = sum_kk w_kk[p] [p + o_kk inside] + w_kk[p - o_kk] [p - o_kk inside].
// w (B, K, 12, H, W) with contiguous rows (planes may be padded apart), deg (B, K, 1, H, W)
// contiguous. Threads over (b, k, row).
template <typename T>
static void degree_impl(const Ten& w, Ten& deg) {
  const int64_t K = w.size(1), H = w.size(3), W = w.size(4), HW = H * W;
  const int64_t BK = w.size(0) * K;
  const int64_t ws0 = w.stride(0), ws1 = w.stride(1), wsj = w.stride(2), wsr = w.stride(3);
  const T* wp = w.data_ptr<T>();
  T* dp = deg.data_ptr<T>();
  parallel_chunks(BK * H, 16, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, bk = idx / H;
      T* __restrict__ o = dp + bk * HW + i * W;
      std::fill(o, o + W, T(0));
      for (int kk = 0; kk < NU; ++kk) {
        const int dy = OFF[kk][0], dx = OFF[kk][1];
        const int64_t n = W - std::abs(dx);
        if (n <= 0) continue;
        const int64_t px = std::max(0, -dx), qx = std::max(0, dx);
        const T* wk = wp + (bk / K) * ws0 + (bk % K) * ws1 + kk * wsj;
        if (i + dy < H) {  // p in this row, its edge to p + o
          const T* __restrict__ r = wk + i * wsr + px;
          T* __restrict__ q = o + px;
          for (int64_t t = 0; t < n; ++t) q[t] += r[t];
        }
        if (i - dy >= 0) {  // q = p + o in this row, the edge stored at p = q - o
          const T* __restrict__ r = wk + (i - dy) * wsr + px;
          T* __restrict__ q = o + qx;
          for (int64_t t = 0; t < n; ++t) q[t] += r[t];
        }
      }
    }
  });
}

// Fused ADMM edge step. x (B, K, C, H, W) contiguous, wbar (B, K|1, 24, H, W) contiguous,
// D/u/v and D2/u2/v2 (B, K, C, 24, H, W) contiguous (D2 may alias D etc.), g (K) per head,
// n (B, K, C, H, W) zero-initialised. One thread per (b, k, c) plane: the scatter into n
// stays inside the plane.
template <typename T>
static void edge_impl(const Ten& x, const Ten& wbar, bool first, const Ten& D,
                      const Ten& u, const Ten& v, Ten& D2, Ten& u2,
                      Ten& v2, const Ten& g, Ten& n) {
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

// One row segment of the replayed edge state (edge_replay_impl) for both directed edges of the
// undirected edges (p, q = p + o): the forward edge p -> q (weight wf at p, r = wf (x_p - x_q))
// and the reverse edge q -> p (weight wr at q, r = -wr (x_p - x_q)) share the loads of x. Each
// runs the S edge steps of edge_row in the scaled variables ps = u + v, ms = u - v, dl = D / (4g),
// with rho = r / 2:
//   c = dl - rho, a = ps/2 - 1/(2g), b = c + ms/4, u' = relu(a + b), v' = relu(a - b),
//   ps' = u' + v' = a + (|a + b| + |a - b|)/2, ms' = u' - v' = b + (|a + b| - |a - b|)/2,
//   dl' = c - ms'/4
// (edge_row's a and b, and D' = D - g (2 r + u' - v') divided by 4g); the states stay in
// registers (the S steps unrolled, so the column loop vectorises). With e = wbar (D'/(2g) -
// (u' - v')/2) = 2 wbar (dl' - ms'/4) of each edge, n_p gets e_f - e_r and n_q gets e_r - e_f:
// added directly (ADD: p and q in different rows, so the two never overlap) or written to e.
// one edge step of one directed edge in the scaled variables above (rho = r / 2)
template <typename T>
static inline __attribute__((always_inline)) void replay_step(T& ps, T& ms, T& dl, T rho, T hi) {
  const T c = dl - rho;
  const T a = T(0.5) * ps - hi;
  const T b = c + T(0.25) * ms;
  const T p = std::abs(a + b), q = std::abs(a - b);
  ps = a + T(0.5) * (p + q);
  ms = b + T(0.5) * (p - q);
  dl = c - T(0.25) * ms;
}

template <typename T, int S, bool ADD>
static void replay_pair_row(const T* __restrict__ wf, const T* __restrict__ wr, const T* const* xp,
                            const T* const* xq, T* __restrict__ e, T* __restrict__ np, T* __restrict__ nq,
                            int64_t n, T hi) {
  static_assert(S >= 1 && S <= 8, "1 to 8 steps");
  const T* p0 = xp[0]; const T* p1 = xp[S > 1 ? 1 : 0]; const T* p2 = xp[S > 2 ? 2 : 0]; const T* p3 = xp[S > 3 ? 3 : 0];
  const T* p4 = xp[S > 4 ? 4 : 0]; const T* p5 = xp[S > 5 ? 5 : 0]; const T* p6 = xp[S > 6 ? 6 : 0]; const T* p7 = xp[S > 7 ? 7 : 0];
  const T* q0 = xq[0]; const T* q1 = xq[S > 1 ? 1 : 0]; const T* q2 = xq[S > 2 ? 2 : 0]; const T* q3 = xq[S > 3 ? 3 : 0];
  const T* q4 = xq[S > 4 ? 4 : 0]; const T* q5 = xq[S > 5 ? 5 : 0]; const T* q6 = xq[S > 6 ? 6 : 0]; const T* q7 = xq[S > 7 ? 7 : 0];
#pragma GCC ivdep
  for (int64_t j = 0; j < n; ++j) {
    const T hf = T(0.5) * wf[j], hr = T(-0.5) * wr[j];
    T psf = T(0), msf = T(0), dlf = T(0), psr = T(0), msr = T(0), dlr = T(0);
    auto step = [&](T d) __attribute__((always_inline)) {
      replay_step(psf, msf, dlf, hf * d, hi);
      replay_step(psr, msr, dlr, hr * d, hi);
    };
    step(p0[j] - q0[j]);
    if constexpr (S > 1) step(p1[j] - q1[j]);
    if constexpr (S > 2) step(p2[j] - q2[j]);
    if constexpr (S > 3) step(p3[j] - q3[j]);
    if constexpr (S > 4) step(p4[j] - q4[j]);
    if constexpr (S > 5) step(p5[j] - q5[j]);
    if constexpr (S > 6) step(p6[j] - q6[j]);
    if constexpr (S > 7) step(p7[j] - q7[j]);
    const T ej = T(2) * wf[j] * (dlf - T(0.25) * msf) - T(2) * wr[j] * (dlr - T(0.25) * msr);
    if (ADD) {
      np[j] += ej;
      nq[j] -= ej;
    } else {
      e[j] = ej;
    }
  }
}

template <typename T>
using replay_fn = void (*)(const T*, const T*, const T* const*, const T* const*, T*, T*, T*, int64_t, T);

template <typename T, bool ADD>
static replay_fn<T> replay_kernel(int64_t S) {
  switch (S) {
    case 1: return replay_pair_row<T, 1, ADD>; case 2: return replay_pair_row<T, 2, ADD>;
    case 3: return replay_pair_row<T, 3, ADD>; case 4: return replay_pair_row<T, 4, ADD>;
    case 5: return replay_pair_row<T, 5, ADD>; case 6: return replay_pair_row<T, 6, ADD>;
    case 7: return replay_pair_row<T, 7, ADD>; case 8: return replay_pair_row<T, 8, ADD>;
    default: return nullptr;
  }
}

// The edge term n of the x-update after the ADMM iterates xs = (x^1, ..., x^S), S <= 8
// (inference): the edge state (D, u, v) of every directed edge is replayed from the zero state
// through the S edge steps in registers (an edge's state depends only on its own
// r^s = wbar (x^s_tail - x^s_head)), so no edge tensor is read or written; then
// n = C-bar^T e. xs (B, K, C, H, W) with contiguous rows and the same strides, contiguous over
// their planes (xs[0].stride(2) apart), n likewise, wbar (B, K|1, 24, H, W) contiguous, g (K)
// per head or (1), n (B, K, C, H, W) to add to (zeros, or the node part of the right-hand side).
// Threads over (b, k); a row's 24 edges and
// C channels run back to back so the rows they read (x^s at rows i - 2 .. i + 2, the wbar row)
// stay in cache.
template <typename T>
static void edge_replay_impl(const std::vector<Ten>& xs, const Ten& wbar, const Ten& g,
                             Ten& n) {
  const int64_t B = n.size(0), K = n.size(1), C = n.size(2), H = n.size(3), W = n.size(4);
  const int64_t HW = H * W, S = static_cast<int64_t>(xs.size());
  const int64_t XPS = xs[0].stride(2), NPS = n.stride(2);  // plane strides (padded or H * W)
  const replay_fn<T> row_add = replay_kernel<T, true>(S), row_e = replay_kernel<T, false>(S);
  if (row_add == nullptr) throw std::invalid_argument("admm_edge_replay replays 1 to 8 iterates");
  std::vector<const T*> xp(S);
  for (int64_t s = 0; s < S; ++s) xp[s] = xs[s].data_ptr<T>();
  const T* wp = wbar.data_ptr<T>();
  const int64_t wsb = bst(wbar, 0), wsk = bst(wbar, 1);
  const T* gp = g.data_ptr<T>();
  const bool g_per_head = g.numel() > 1;
  T* np_ = n.data_ptr<T>();
  parallel_chunks(B * K, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> e(W);
    const T* xt[8];
    const T* xh[8];
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t k = bk % K, b = bk / K;
      const T gam = g_per_head ? gp[k] : gp[0];
      const T hi = T(0.5) / gam;
      const T* wb = wp + b * wsb + k * wsk;
      for (int64_t i = 0; i < H; ++i) {
        for (int kk = 0; kk < NU; ++kk) {  // the undirected edges (p, p + o) with p in row i
          const int dy = OFF[kk][0], dx = OFF[kk][1];
          const int64_t n_ = W - std::abs(dx);
          if (n_ <= 0 || i + dy >= H) continue;
          const int64_t px = std::max(0, -dx), qx = std::max(0, dx);
          const T* wf = wb + kk * HW + i * W + px;              // p -> q, stored at its tail p
          const T* wrv = wb + (NU + kk) * HW + (i + dy) * W + qx;  // q -> p, stored at its tail q
          for (int64_t c = 0; c < C; ++c) {
            const int64_t xo_p = (bk * C + c) * XPS + i * W + px, xo_q = (bk * C + c) * XPS + (i + dy) * W + qx;
            T* n_p = np_ + (bk * C + c) * NPS + i * W + px;
            T* n_q = np_ + (bk * C + c) * NPS + (i + dy) * W + qx;
            for (int64_t s = 0; s < S; ++s) { xt[s] = xp[s] + xo_p; xh[s] = xp[s] + xo_q; }
            if (dy != 0) {
              row_add(wf, wrv, xt, xh, nullptr, n_p, n_q, n_, hi);
            } else {  // p and q in the same row: through e
              row_e(wf, wrv, xt, xh, e.data(), nullptr, nullptr, n_, hi);
              scatter_row<T>(n_p, n_q, e.data(), n_);
            }
          }
        }
      }
    }
  });
}

// The node part of one ADMM iteration (solvers.gtv_interpolate, replay form), one pass:
// c += m (m x - y) (eq. 24, block c, divided by gamma: c = H^T mu_c / gamma) and rhs = y - c (eq. 20's
// node part, to which admm_edge_replay adds the edge term). c, rhs (B, K, C, H, W) contiguous;
// x (B, K, C, H, W) with contiguous rows, planes x.stride(2) apart and contiguous over them;
// m, y broadcastable with contiguous rows. Threads over (b, k, c, row).
template <typename T>
static void node_update_impl(Ten& c, const Ten& m, const Ten& x, const Ten& y,
                             Ten& rhs) {
  const int64_t B = c.size(0), K = c.size(1), C = c.size(2), H = c.size(3), W = c.size(4), HW = H * W;
  const int64_t XPS = x.stride(2);
  const int64_t msb = bst(m, 0), msk = bst(m, 1), msc = bst(m, 2), msr = m.stride(3);
  const int64_t ysb = bst(y, 0), ysk = bst(y, 1), ysc = bst(y, 2), ysr = y.stride(3);
  T* cp = c.data_ptr<T>();
  T* rp = rhs.data_ptr<T>();
  const T* mp = m.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  const T* yp = y.data_ptr<T>();
  parallel_chunks(B * K * C * H, 64, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, pl = idx / H, ch = pl % C, k = (pl / C) % K, b = pl / (C * K);
      T* __restrict__ cr = cp + pl * HW + i * W;
      T* __restrict__ rr = rp + pl * HW + i * W;
      const T* __restrict__ xr = xp + pl * XPS + i * W;
      const T* __restrict__ mr = mp + b * msb + k * msk + ch * msc + i * msr;
      const T* __restrict__ yr = yp + b * ysb + k * ysk + ch * ysc + i * ysr;
      for (int64_t j = 0; j < W; ++j) {
        const T cj = cr[j] + mr[j] * (mr[j] * xr[j] - yr[j]);
        cr[j] = cj;
        rr[j] = yr[j] - cj;
      }
    }
  });
}

// Gradient of out = a x - W x with respect to the undirected weights:
// gw[b, k, kk, p] = -sum_c (g_p x_q + g_q x_p), q = p + o_kk. g (B, K, C, H, W) contiguous,
// x broadcastable (contiguous rows), gw (B, K, 12, H, W) zero-initialised. Threads over (b, k).
template <typename T>
static void dma_grad_w_impl(const Ten& g, const Ten& x, Ten& gw) {
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

// One row segment of edge_bwd_impl (the same arithmetic, restrict-qualified so that it
// vectorises): writes the edge state's gradients (not FIRST), adds to gw, and leaves the node
// gradient contribution gr * wbar in sc (scattered by the caller: tail +, head -) and the gamma
// term of each edge in tg (summed by the caller).
template <typename T, bool FIRST>
static void edge_bwd_row(int64_t n, T gam, T hi, T inv, const T* __restrict__ xt, const T* __restrict__ xh,
                         const T* __restrict__ wr, const T* __restrict__ Dr, const T* __restrict__ ur,
                         const T* __restrict__ vr, const T* __restrict__ gD2r, const T* __restrict__ gu2r,
                         const T* __restrict__ gv2r, const T* __restrict__ gnt, const T* __restrict__ gnh,
                         T* __restrict__ gwr, T* __restrict__ gDr, T* __restrict__ gur, T* __restrict__ gvr,
                         T* __restrict__ sc, T* __restrict__ tgr) {
  for (int64_t t = 0; t < n; ++t) {
    const T dxv = xt[t] - xh[t];
    const T r = wr[t] * dxv;
    T d0 = 0, a, bb;
    if constexpr (FIRST) {
      a = -hi; bb = T(-0.5) * r;
    } else {
      d0 = Dr[t];
      const T u0 = ur[t], v0 = vr[t];
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
    const T s1 = T(sp > T(0)) * gU;  // (as products: the loop stays branch-free and vectorises)
    const T s2 = T(sm > T(0)) * gV;
    const T ga = s1 + s2, gb = s1 - s2;
    const T gr = T(-2) * gam * gdn - T(0.5) * gb;
    gwr[t] += ggn * e0 + gr * dxv;
    sc[t] = gr * wr[t];
    if constexpr (!FIRST) {
      gDr[t] = gdn + T(0.25) * gb * inv;
      gur[t] = T(0.5) * ga + T(0.25) * gb;
      gvr[t] = T(0.5) * ga - T(0.25) * gb;
    }
    T tg = -ge * dn * hi * inv - gdn * (T(2) * r + diff) + ga * hi * inv;
    if constexpr (!FIRST) tg -= gb * d0 * T(0.25) * inv * inv;
    tgr[t] = tg;
  }
}

// Backward of the fused ADMM edge step (same arithmetic as the PyTorch formulas in
// solvers._AdmmEdgeStep.backward). Threads over (b, k): gw sums over channels, gx and the
// per-unit gamma partial sums stay private to a unit.
template <typename T>
static void edge_bwd_impl(const Ten& x, const Ten& wbar, bool first, const Ten& D,
                          const Ten& u, const Ten& v, const Ten& g,
                          const Ten& gD2, const Ten& gu2, const Ten& gv2,
                          const Ten& gn, Ten& gx, Ten& gw, Ten& gD,
                          Ten& gu, Ten& gv, Ten& gg) {
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
    std::vector<T> zeros(W, T(0)), sc(W), tg(W);
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
            const T* Dr = first ? z : Dp + to;
            const T* ur = first ? z : up + to;
            const T* vr = first ? z : vp + to;
            T* gDr = first ? sc.data() : gDp + to;
            T* gur = first ? sc.data() : gup + to;
            T* gvr = first ? sc.data() : gvp + to;
            if (first)
              edge_bwd_row<T, true>(n_, gam, hi, inv, xt, xh, wr, Dr, ur, vr, gD2r, gu2r, gv2r, gnt, gnh, gwr,
                                    gDr, gur, gvr, sc.data(), tg.data());
            else
              edge_bwd_row<T, false>(n_, gam, hi, inv, xt, xh, wr, Dr, ur, vr, gD2r, gu2r, gv2r, gnt, gnh, gwr,
                                     gDr, gur, gvr, sc.data(), tg.data());
            scatter_row<T>(gxt, gxh, sc.data(), n_);
            double rs = 0.0;
            for (int64_t t = 0; t < n_; ++t) rs += double(tg[t]);
            gsum += rs;
          }
        }
      }
      ggp[bk] = T(gsum);
    }
  });
}

// Squared Mahalanobis distances (eq. 27) d_k[p] = (f_p - f_q)^T (Mf_p - Mf_q), q = p + o_k, and
// optionally w = exp(-d). f (B, K|1, F, H, W), mf (B, K, F, H, W) contiguous; out (B, K, 12, H, W)
// zero-initialised (entries whose neighbour leaves the image stay 0; the others are overwritten,
// so a reused output stays valid). mf may be f itself (projected features g = A^T f, M = A A^T):
// then d = |g_p - g_q|^2, one subtraction per feature. Threads over (b, k, row).
template <typename T>
static void edge_dist_impl(const Ten& f, const Ten& mf, Ten& out, bool do_exp) {
  const int64_t B = out.size(0), K = out.size(1), H = out.size(3), W = out.size(4), F = mf.size(2);
  const int64_t HW = H * W;
  const T* fp = f.data_ptr<T>();
  const T* mp = mf.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t fsb = bst(f, 0), fsk = bst(f, 1), fsf = f.stride(2);
  const int64_t msb = bst(mf, 0), msk = bst(mf, 1), msf = mf.stride(2);
  const bool same = fp == mp && fsb == msb && fsk == msk && fsf == msf;
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
        std::fill(o, o + n, T(0));  // (the entries of a reused output hold the previous call's values)
        for (int64_t c = 0; c < F; ++c) {
          if (same)  // projected features (mf is f): |g_p - g_q|^2
            sq_dist_row<T>(o, fb + c * fsf + i * W + px, fb + c * fsf + (i + dy) * W + qx, n);
          else
            dist_row<T>(o, fb + c * fsf + i * W + px, fb + c * fsf + (i + dy) * W + qx,
                        mb + c * msf + i * W + px, mb + c * msf + (i + dy) * W + qx, n);
        }
        if (do_exp) neg_exp_row<T>(o, n);
      }
    }
  });
}

// Gradient of the distances d_k[p] = |g_p - g_q|^2 (q = p + o_k, edge_dist_impl with mf = f) for
// the projected features g: given gd = dL/dd (B, K, 12, H, W) contiguous,
//   gg[p] = 2 sum_k (gd_k[p] (g_p - g_{p+o_k}) + gd_k[p - o_k] (g_p - g_{p-o_k}))
// over the in-image neighbours (each pixel gathers its 24 directed terms: no scatter, no race).
// g, gg (B, K, F, H, W) contiguous; gg is overwritten. Threads over (b, k, row).
template <typename T>
static void edge_dist_backward_impl(const Ten& g, const Ten& gd, Ten& gg) {
  const int64_t B = g.size(0), K = g.size(1), F = g.size(2), H = g.size(3), W = g.size(4);
  const int64_t HW = H * W;
  const T* gp = g.data_ptr<T>();
  const T* dp = gd.data_ptr<T>();
  T* op = gg.data_ptr<T>();
  parallel_chunks(B * K * H, 16, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, bk = idx / H;
      const T* gb = gp + bk * F * HW;
      const T* db = dp + bk * NU * HW;
      T* ob = op + bk * F * HW;
      for (int64_t c = 0; c < F; ++c) std::fill(ob + c * HW + i * W, ob + c * HW + (i + 1) * W, T(0));
      for (int kk = 0; kk < NU; ++kk) {
        const int dy = OFF[kk][0], dx = OFF[kk][1];
        const int64_t n = W - std::abs(dx);
        if (n <= 0) continue;
        // forward term: p = (i, j) tail, q = (i + dy, j + dx); j in [max(0, -dx), max(0, -dx) + n)
        if (i + dy < H) {
          const int64_t px = std::max(0, -dx), qx = std::max(0, dx);
          const T* __restrict__ w = db + kk * HW + i * W + px;
          for (int64_t c = 0; c < F; ++c) {
            T* __restrict__ o = ob + c * HW + i * W + px;
            const T* __restrict__ a = gb + c * HW + i * W + px;
            const T* __restrict__ q = gb + c * HW + (i + dy) * W + qx;
            for (int64_t j = 0; j < n; ++j) o[j] += T(2) * w[j] * (a[j] - q[j]);
          }
        }
        // reverse term: p = (i, j) head, tail t = (i - dy, j - dx) holds the weight
        if (i - dy >= 0) {
          const int64_t px = std::max(0, dx), tx = std::max(0, -dx);
          const T* __restrict__ w = db + kk * HW + (i - dy) * W + tx;
          for (int64_t c = 0; c < F; ++c) {
            T* __restrict__ o = ob + c * HW + i * W + px;
            const T* __restrict__ a = gb + c * HW + i * W + px;
            const T* __restrict__ t = gb + c * HW + (i - dy) * W + tx;
            for (int64_t j = 0; j < n; ++j) o[j] += T(2) * w[j] * (a[j] - t[j]);
          }
        }
      }
    }
  });
}

// Eq. 28 from distances: wbar[j, p] = softmax over the in-image directed edges j of p of -dd,
// dd[j < 12, p] = d_j[p], dd[12 + k, p] = d_k[p - o_k]. d (B, K, 12, H, W) contiguous,
// wbar (B, K, 24, H, W) zero-initialised. Threads over (b, k, row).
template <typename T>
static void rw_dist_impl(const Ten& d, Ten& wbar) {
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
      // pass 1: minimum; pass 2: exp(-(dd - min)) and sum; pass 3: normalise (times 1 / sum)
      for (int pass = 0; pass < 3; ++pass) {
        if (pass == 2)
          for (int64_t t = 0; t < W; ++t) s[t] = T(1) / s[t];
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


// Per-head projection g = A_k^T f (the factor of the metric M_k = A_k A_k^T of eq. 27), read from
// any layout and written planar: f (B, K * F, H, W) with any strides (channels-last: the K F
// values of a pixel adjacent), a (K, F, F) contiguous (a[k][e][c] = A_k[e, c]), g (B, K * F, H, W)
// with contiguous rows: g[k F + c][p] = sum_e A_k[e, c] f[k F + e][p]. Chunks of PX pixels are
// transposed into a planar scratch block (cache-resident), then each output row segment is a
// sum of F scaled scratch rows (vectorised over pixels). Threads over (b, row).
template <typename T>
static void project_impl(const Ten& f, const Ten& a, Ten& g) {
  constexpr int64_t PX = 64;
  const int64_t B = f.size(0), KF = f.size(1), H = f.size(2), W = f.size(3);
  const int64_t K = a.size(0), F = a.size(1);
  if (K * F != KF || a.size(2) != F) throw std::invalid_argument("project: f has K * F channels, a is (K, F, F)");
  const T* fp = f.data_ptr<T>();
  const T* ap = a.data_ptr<T>();
  T* gp = g.data_ptr<T>();
  const int64_t fsb = f.stride(0), fsc = f.stride(1), fsr = f.stride(2), fsx = f.stride(3);
  const int64_t gsb = g.stride(0), gsc = g.stride(1), gsr = g.stride(2);
  parallel_chunks(B * H, 8, [&](int64_t begin, int64_t end) {
    std::vector<T> tmp(KF * PX);
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, b = idx / H;
      const T* frow = fp + b * fsb + i * fsr;
      for (int64_t j0 = 0; j0 < W; j0 += PX) {
        const int64_t n = std::min(PX, W - j0);
        for (int64_t t = 0; t < n; ++t) {
          const T* px = frow + (j0 + t) * fsx;
          for (int64_t e = 0; e < KF; ++e) tmp[e * PX + t] = px[e * fsc];
        }
        for (int64_t k = 0; k < K; ++k) {
          const T* ak = ap + k * F * F;
          for (int64_t c = 0; c < F; ++c) {
            T* __restrict__ o = gp + b * gsb + (k * F + c) * gsc + i * gsr + j0;
            T acc[PX];
            const T a0 = ak[c];
            const T* __restrict__ r0 = tmp.data() + (k * F) * PX;
            for (int64_t t = 0; t < PX; ++t) acc[t] = a0 * r0[t];
            for (int64_t e = 1; e < F; ++e) {
              const T ae = ak[e * F + c];
              const T* __restrict__ re = tmp.data() + (k * F + e) * PX;
              for (int64_t t = 0; t < PX; ++t) acc[t] += ae * re[t];
            }
            for (int64_t t = 0; t < n; ++t) o[t] = acc[t];
          }
        }
      }
    }
  });
}

// The denoiser's conjugate gradient (models/noise_aware.py glr_denoise / damped_cg, inference
// only): iters steps of CG from x = b for (I + S (a - W) S) x = b, S = diag(s), in place. All of
// s, b, x and the buffers r, p, u, q are (B, 1, C, H, W) with contiguous rows (any plane and batch
// strides: padded planes keep the C planes a stencil reads together out of one L1 cache set), w
// the normalized weights (B, 1, 12, H, W) and a the diagonal (B, 1, 1, H, W), rows contiguous. Each
// step is three sweeps over the rows: q = A p and <p, q> (the stencil on u = s p), then
// x += alpha p, r -= alpha q and <r, r>, then p = r + beta p and u = s p; the ratios are damped
// as in damped_cg (eps = rel_eps |b|^2 + abs_eps added to each denominator). The threads are
// started once for the whole solve, each keeps its rows through every sweep and they meet at a
// barrier between sweeps (the stencil reads the neighbours' rows). The inner products are summed
// per row in double and the rows in order (every thread sums them alike), so the result does not
// depend on the thread count.
// <a, b> over n values in double, the products summed in 8 lanes (so the loop vectorises
// without reassociation flags) and the lanes in order
template <typename T>
static double dot_row(const T* __restrict__ a, const T* __restrict__ b, int64_t n) {
  T lanes[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += a[j + l] * b[j + l];
  double acc = 0;
  for (int l = 0; l < 8; ++l) acc += lanes[l];
  for (; j < n; ++j) acc += double(a[j] * b[j]);
  return acc;
}

// A barrier for the nt threads of one kernel call, spinning (the threads are all busy with the
// same kernel) and yielding now and then (in case one of them was descheduled).
class SpinBarrier {
 public:
  explicit SpinBarrier(int64_t n) : n_(n) {}
  void wait() {
    if (n_ <= 1) return;
    const int64_t gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (int64_t spins = 1; gen_.load(std::memory_order_acquire) == gen; ++spins)
      if (spins % 256 == 0) std::this_thread::yield();
  }

 private:
  const int64_t n_;
  std::atomic<int64_t> count_{0}, gen_{0};
};

template <typename T>
static void glr_denoise_cg_impl(const Ten& w, const Ten& a, const Ten& s, const Ten& b, Ten& x, Ten& r, Ten& p,
                                Ten& u, Ten& q, int64_t iters, double rel_eps, double abs_eps) {
  const int64_t B = x.size(0), C = x.size(2), H = x.size(3), W = x.size(4);
  if (C > 4) throw std::invalid_argument("glr_denoise_cg: at most 4 channels");
  auto base = [&](const Ten& t, int64_t bb, int64_t c, int64_t i) {
    return t.data_ptr<T>() + bb * t.stride(0) + c * t.stride(2) + i * t.stride(3);
  };
  const T* wp = w.data_ptr<T>();
  const int64_t wsb = bst(w, 0), wsj = w.stride(2), wsr = w.stride(3);
  // per-row partial sums, two buffers: a sweep writes one while a thread may still be reading
  // the totals of the sweep before from the other
  std::vector<double> rows[2] = {std::vector<double>(B * H), std::vector<double>(B * H)};
  auto total = [&](int buf, int64_t bb) {
    double acc = 0;
    for (int64_t i = 0; i < H; ++i) acc += rows[buf][bb * H + i];
    return acc;
  };
  // q = v + s (a u - W u) on row i, rows[buf][b, i] = <v, q> there (v: the vector u = s v was made from)
  auto apply_row = [&](const Ten& v, int buf, int64_t bb, int64_t i) {
    stencil_rows<T>(
        C, [&](int64_t c) { return base(q, bb, c, i); }, [&](int64_t) { return base(a, bb, 0, i); },
        [&](int64_t c) { return u.data_ptr<T>() + bb * u.stride(0) + c * u.stride(2); }, u.stride(3),
        wp + bb * wsb, wsj, wsr, i, H, W);
    double acc = 0;
    for (int64_t c = 0; c < C; ++c) {
      T* __restrict__ qc = base(q, bb, c, i);
      const T* __restrict__ vc = base(v, bb, c, i);
      const T* __restrict__ sc = base(s, bb, c, i);
      for (int64_t j = 0; j < W; ++j) qc[j] = vc[j] + sc[j] * qc[j];
      acc += dot_row<T>(vc, qc, W);
    }
    rows[buf][bb * H + i] = acc;
  };
  const int64_t n = B * H;
  const int64_t nt = std::min<int64_t>(g_threads, std::max<int64_t>(1, n / 8));
  const int64_t chunk = (n + nt - 1) / nt, workers = (n + chunk - 1) / chunk;
  SpinBarrier barrier(workers);
  auto solve = [&](int64_t begin, int64_t end) {
    auto sweep = [&](const auto& f) {
      for (int64_t idx = begin; idx < end; ++idx) f(idx / H, idx % H);
      barrier.wait();
    };
    std::vector<double> eps(B), rr(B), alpha(B), beta(B);
    // x = b, u = s b, |b|^2
    sweep([&](int64_t bb, int64_t i) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) {
        const T* __restrict__ bc = base(b, bb, c, i);
        const T* __restrict__ sc = base(s, bb, c, i);
        T* __restrict__ xc = base(x, bb, c, i);
        T* __restrict__ uc = base(u, bb, c, i);
        for (int64_t j = 0; j < W; ++j) {
          xc[j] = bc[j];
          uc[j] = sc[j] * bc[j];
        }
        acc += dot_row<T>(bc, bc, W);
      }
      rows[0][bb * H + i] = acc;
    });
    for (int64_t bb = 0; bb < B; ++bb) eps[bb] = rel_eps * total(0, bb) + abs_eps;
    // q = A x; then r = b - q, p = r, u = s p, rr = |r|^2
    sweep([&](int64_t bb, int64_t i) { apply_row(x, 1, bb, i); });
    sweep([&](int64_t bb, int64_t i) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) {
        const T* __restrict__ bc = base(b, bb, c, i);
        const T* __restrict__ qc = base(q, bb, c, i);
        const T* __restrict__ sc = base(s, bb, c, i);
        T* __restrict__ rc = base(r, bb, c, i);
        T* __restrict__ pc = base(p, bb, c, i);
        T* __restrict__ uc = base(u, bb, c, i);
        for (int64_t j = 0; j < W; ++j) {
          const T rv = bc[j] - qc[j];
          rc[j] = rv;
          pc[j] = rv;
          uc[j] = sc[j] * rv;
        }
        acc += dot_row<T>(rc, rc, W);
      }
      rows[0][bb * H + i] = acc;
    });
    for (int64_t bb = 0; bb < B; ++bb) rr[bb] = total(0, bb);
    for (int64_t t = 0; t < iters; ++t) {
      sweep([&](int64_t bb, int64_t i) { apply_row(p, 1, bb, i); });
      for (int64_t bb = 0; bb < B; ++bb) alpha[bb] = rr[bb] / (total(1, bb) + eps[bb]);
      sweep([&](int64_t bb, int64_t i) {
        const T al = T(alpha[bb]);
        double acc = 0;
        for (int64_t c = 0; c < C; ++c) {
          const T* __restrict__ pc = base(p, bb, c, i);
          const T* __restrict__ qc = base(q, bb, c, i);
          T* __restrict__ xc = base(x, bb, c, i);
          T* __restrict__ rc = base(r, bb, c, i);
          for (int64_t j = 0; j < W; ++j) {
            xc[j] += al * pc[j];
            rc[j] -= al * qc[j];
          }
          acc += dot_row<T>(rc, rc, W);
        }
        rows[0][bb * H + i] = acc;
      });
      if (t + 1 == iters) break;  // the last direction would not be used
      for (int64_t bb = 0; bb < B; ++bb) {
        const double rn = total(0, bb);
        beta[bb] = rn / (rr[bb] + eps[bb]);
        rr[bb] = rn;
      }
      sweep([&](int64_t bb, int64_t i) {
        const T be = T(beta[bb]);
        for (int64_t c = 0; c < C; ++c) {
          const T* __restrict__ rc = base(r, bb, c, i);
          const T* __restrict__ sc = base(s, bb, c, i);
          T* __restrict__ pc = base(p, bb, c, i);
          T* __restrict__ uc = base(u, bb, c, i);
          for (int64_t j = 0; j < W; ++j) {
            const T pv = rc[j] + be * pc[j];
            pc[j] = pv;
            uc[j] = sc[j] * pv;
          }
        }
      });
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < workers; ++t) pool.emplace_back([&solve, t, chunk, n] { solve(t * chunk, std::min(n, (t + 1) * chunk)); });
  solve(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

// The packed trunk's block head and the metric's projection in one pass (models/packed_trunk.py
// BlockFeatureHead then graph.project_features, inference): g = A^T (shuffle(W_1 t + b_1) + W_2 e)
// with A^T folded into the weights by the caller. t (B, Ct, h, w) the trunk's features (any
// layout), e (B, Ce, H, W) the block's estimate input (rows contiguous), w1 (4, KF, Ct) and b1
// (4, KF) per 2x2 phase (di * 2 + dj), w2 (KF, Ce), all contiguous; g (B, KF, H, W) with
// contiguous rows, written whole: g[o][2i + di][2j + dj] = b1[ph][o] + sum_c w1[ph][o][c] t[c][i][j]
// + sum_c w2[o][c] e[c][2i + di][2j + dj] (H, W may be odd: the trunk covers ceil(H/2) rows).
// Chunks of PX trunk pixels are transposed into a planar scratch block, each phase's output a sum
// of scaled scratch rows (vectorised over pixels), interleaved into the two output rows. Threads
// over (b, half-resolution row).
// res[q][u] = bias[q] + sum_c w[q][c] tmp[c][u] for NQ outputs q (weight rows wq[q], bias bq[q])
// over PX pixels: NQ x 2 accumulator vectors in registers, so each broadcast weight serves two
// FMAs and each loaded pixel vector NQ
template <typename T, int NQ>
static void head_rows(T* const* res, const T* const* wq, const T* bq, const T* tmp, int64_t Ct, int64_t PX) {
  typedef T vec __attribute__((vector_size(32)));
  constexpr int64_t V = 32 / sizeof(T);
  for (int64_t u = 0; u < PX; u += 2 * V) {
    vec a0[NQ], a1[NQ];
    for (int q = 0; q < NQ; ++q) a0[q] = a1[q] = vec{} + bq[q];
    for (int64_t c = 0; c < Ct; ++c) {
      vec r0, r1;
      __builtin_memcpy(&r0, tmp + c * PX + u, sizeof(vec));
      __builtin_memcpy(&r1, tmp + c * PX + u + V, sizeof(vec));
      for (int q = 0; q < NQ; ++q) {
        const T wv = wq[q][c];
        a0[q] += r0 * wv;
        a1[q] += r1 * wv;
      }
    }
    for (int q = 0; q < NQ; ++q) {
      __builtin_memcpy(res[q] + u, &a0[q], sizeof(vec));
      __builtin_memcpy(res[q] + u + V, &a1[q], sizeof(vec));
    }
  }
}

template <typename T>
static void head_project_impl(const Ten& t, const Ten& e, const Ten& w1, const Ten& b1, const Ten& w2, Ten& g) {
  constexpr int64_t PX = 64;  // a multiple of two vectors of every width
  const int64_t B = g.size(0), KF = g.size(1), H = g.size(2), W = g.size(3);
  const int64_t Ct = t.size(1), h = t.size(2), w = t.size(3), Ce = e.size(1);
  if (w1.size(0) != 4 || w1.size(1) != KF || w1.size(2) != Ct || w2.size(0) != KF || w2.size(1) != Ce)
    throw std::invalid_argument("head_project: weight shapes do not match the features");
  if (h < (H + 1) / 2 || w < (W + 1) / 2 || e.size(2) != H || e.size(3) != W)
    throw std::invalid_argument("head_project: the trunk does not cover the estimate");
  const T* tp = t.data_ptr<T>();
  const T* ep = e.data_ptr<T>();
  const T* w1p = w1.data_ptr<T>();
  const T* b1p = b1.data_ptr<T>();
  const T* w2p = w2.data_ptr<T>();
  T* gp = g.data_ptr<T>();
  const int64_t tsb = t.stride(0), tsc = t.stride(1), tsr = t.stride(2), tsx = t.stride(3);
  const int64_t esb = e.stride(0), esc = e.stride(1), esr = e.stride(2);
  const int64_t gsb = g.stride(0), gsc = g.stride(1), gsr = g.stride(2);
  const int64_t hr = (H + 1) / 2, wc = (W + 1) / 2;
  parallel_chunks(B * hr, 4, [&](int64_t begin, int64_t end) {
    std::vector<T> tmp(Ct * PX, T(0)), res(4 * KF * PX);
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % hr, b = idx / hr;
      const T* trow = tp + b * tsb + i * tsr;
      for (int64_t j0 = 0; j0 < wc; j0 += PX) {
        const int64_t n = std::min(PX, wc - j0);
        for (int64_t u = 0; u < n; ++u) {
          const T* px = trow + (j0 + u) * tsx;
          for (int64_t c = 0; c < Ct; ++c) tmp[c * PX + u] = px[c * tsc];
        }
        // every phase's KF outputs over the chunk, six at a time
        for (int64_t ph = 0; ph < 4; ++ph) {
          for (int64_t o0 = 0; o0 < KF; o0 += 6) {
            const int nq = int(std::min<int64_t>(6, KF - o0));
            T* rq[6];
            const T* wq[6];
            for (int q = 0; q < nq; ++q) {
              rq[q] = res.data() + ((ph * KF) + o0 + q) * PX;
              wq[q] = w1p + (ph * KF + o0 + q) * Ct;
            }
            const T* bq = b1p + ph * KF + o0;
            switch (nq) {
              case 1: head_rows<T, 1>(rq, wq, bq, tmp.data(), Ct, PX); break;
              case 2: head_rows<T, 2>(rq, wq, bq, tmp.data(), Ct, PX); break;
              case 3: head_rows<T, 3>(rq, wq, bq, tmp.data(), Ct, PX); break;
              case 4: head_rows<T, 4>(rq, wq, bq, tmp.data(), Ct, PX); break;
              case 5: head_rows<T, 5>(rq, wq, bq, tmp.data(), Ct, PX); break;
              default: head_rows<T, 6>(rq, wq, bq, tmp.data(), Ct, PX); break;
            }
          }
        }
        // interleaved into the two full-resolution rows, plus the estimate's term
        const int64_t x0 = 2 * j0, x1 = std::min(W, 2 * (j0 + n));
        for (int64_t di = 0; di < 2; ++di) {
          const int64_t y = 2 * i + di;
          if (y >= H) break;
          for (int64_t o = 0; o < KF; ++o) {
            T* __restrict__ orow = gp + b * gsb + o * gsc + y * gsr;
            const T* __restrict__ r0 = res.data() + ((di * 2) * KF + o) * PX;
            const T* __restrict__ r1 = res.data() + ((di * 2 + 1) * KF + o) * PX;
            T* __restrict__ o2 = orow + x0;
            const int64_t m = x1 - x0, pairs = m / 2;
            for (int64_t u = 0; u < pairs; ++u) {
              o2[2 * u] = r0[u];
              o2[2 * u + 1] = r1[u];
            }
            if (m & 1) o2[m - 1] = r0[pairs];
            for (int64_t c = 0; c < Ce; ++c) {
              const T wv = w2p[o * Ce + c];
              const T* __restrict__ erow = ep + b * esb + c * esc + y * esr + x0;
              for (int64_t xx = 0; xx < m; ++xx) o2[xx] += wv * erow[xx];
            }
          }
        }
      }
    }
  });
}

// The normalized graph's weights (graph.normalized_weights, inference): out[k][p] = w[k][p] dis[p]
// dis[p + o_k] on the in-image edges (the others left as they are: 0 in the caller's buffer).
// w (B, K, 12, H, W) and out with contiguous rows (any plane strides), dis (B, K|1, 1, H, W)
// with contiguous rows. Threads over (b, k, offset, row).
template <typename T>
static void scale_edges_impl(const Ten& w, const Ten& dis, Ten& out) {
  const int64_t B = w.size(0), K = w.size(1), H = w.size(3), W = w.size(4);
  const T* wp = w.data_ptr<T>();
  const T* dp = dis.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t dsb = bst(dis, 0), dsk = bst(dis, 1), dsr = dis.stride(3);
  parallel_chunks(B * K * NU * H, 64, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t i = idx % H, kk = (idx / H) % NU, k = (idx / (H * NU)) % K, b = idx / (H * NU * K);
      const int dy = OFF[kk][0], dx = OFF[kk][1];
      if (i + dy >= H) continue;
      const int64_t j0 = std::max<int64_t>(0, -dx), j1 = std::min<int64_t>(W, W - dx);
      const T* __restrict__ wr = wp + b * w.stride(0) + k * w.stride(1) + kk * w.stride(2) + i * w.stride(3);
      T* __restrict__ orow = op + b * out.stride(0) + k * out.stride(1) + kk * out.stride(2) + i * out.stride(3);
      const T* __restrict__ dpr = dp + b * dsb + k * dsk + i * dsr;
      const T* __restrict__ dqr = dp + b * dsb + k * dsk + (i + dy) * dsr + dx;
      for (int64_t j = j0; j < j1; ++j) orow[j] = wr[j] * dpr[j] * dqr[j];
    }
  });
}

// ---- the C interface (gsprestore/native/__init__.py) ---------------------------------------
//
// Every entry point has the same signature: the dtype (0 float32, 1 float64), the thread count,
// the tensors as n records of 2 + 2 * MAXD int64 (data pointer, rank or -1 for None, sizes,
// strides; unused dims 0) and the integer arguments. Returns 0, or 1 with the message in
// gsp_last_error().

static thread_local char g_err[256];

static Ten ten_at(const int64_t* rec, int64_t i) {
  const int64_t* r = rec + i * (2 + 2 * MAXD);
  Ten t;
  t.p = reinterpret_cast<void*>(static_cast<intptr_t>(r[0]));
  t.nd = r[1];
  for (int d = 0; d < MAXD; ++d) { t.sz[d] = r[2 + d]; t.st[d] = r[2 + MAXD + d]; }
  return t;
}

template <typename F>
static int guarded(int64_t nthreads, const F& f) {
  g_threads = std::max<int64_t>(1, nthreads);
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(g_err, sizeof(g_err), "%s", e.what());
  } catch (...) {
    std::snprintf(g_err, sizeof(g_err), "unknown C++ exception");
  }
  return 1;
}

#define GSP_DISPATCH(DTYPE, ...)                                     \
  do {                                                               \
    if ((DTYPE) == 0) { using scalar_t = float; __VA_ARGS__; }       \
    else if ((DTYPE) == 1) { using scalar_t = double; __VA_ARGS__; } \
    else throw std::invalid_argument("dtype must be float32 or float64"); \
  } while (0)

#define GSP_ENTRY(NAME) \
  extern "C" __attribute__((visibility("default"))) int NAME(int64_t dtype, int64_t nthreads, const int64_t* rec, int64_t n, const int64_t* ia)

static void need(int64_t n, int64_t want) {
  if (n != want) throw std::invalid_argument("wrong number of tensors");
}

extern "C" __attribute__((visibility("default"))) const char* gsp_last_error() { return g_err; }

// bumped whenever an entry point's arguments change (the loader refuses another version)
extern "C" __attribute__((visibility("default"))) int64_t gsp_abi_version() { return 4; }

// (w, dis, out)
GSP_ENTRY(gsp_scale_edges) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 3);
    Ten w = ten_at(rec, 0), dis = ten_at(rec, 1), out = ten_at(rec, 2);
    GSP_DISPATCH(dtype, scale_edges_impl<scalar_t>(w, dis, out));
  });
}

// (t, e, w1, b1, w2, g)
GSP_ENTRY(gsp_head_project) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 6);
    Ten t = ten_at(rec, 0), e = ten_at(rec, 1), w1 = ten_at(rec, 2), b1 = ten_at(rec, 3), w2 = ten_at(rec, 4),
        g = ten_at(rec, 5);
    GSP_DISPATCH(dtype, head_project_impl<scalar_t>(t, e, w1, b1, w2, g));
  });
}

// (w, a, s, b, x, r, p, u, q) ; ia: iters, rel_eps and abs_eps as the bits of two doubles
GSP_ENTRY(gsp_glr_denoise_cg) {
  return guarded(nthreads, [&] {
    need(n, 9);
    Ten w = ten_at(rec, 0), a = ten_at(rec, 1), s = ten_at(rec, 2), b = ten_at(rec, 3), x = ten_at(rec, 4),
        r = ten_at(rec, 5), p = ten_at(rec, 6), u = ten_at(rec, 7), q = ten_at(rec, 8);
    double rel_eps, abs_eps;
    std::memcpy(&rel_eps, &ia[1], sizeof(double));
    std::memcpy(&abs_eps, &ia[2], sizeof(double));
    GSP_DISPATCH(dtype, glr_denoise_cg_impl<scalar_t>(w, a, s, b, x, r, p, u, q, ia[0], rel_eps, abs_eps));
  });
}

// (w, a?, x, out)
GSP_ENTRY(gsp_diag_minus_adjacency) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 4);
    Ten w = ten_at(rec, 0), a = ten_at(rec, 1), x = ten_at(rec, 2), out = ten_at(rec, 3);
    GSP_DISPATCH(dtype, dma_impl<scalar_t>(w, a, a.defined(), x, out));
  });
}

// (g, x, gw)
GSP_ENTRY(gsp_diag_minus_adjacency_grad_w) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 3);
    Ten g = ten_at(rec, 0), x = ten_at(rec, 1), gw = ten_at(rec, 2);
    GSP_DISPATCH(dtype, dma_grad_w_impl<scalar_t>(g, x, gw));
  });
}

// (w, diag, keep?, pre?, rhs, x, g, v, v2, al, be), ia = {mode}
GSP_ENTRY(gsp_cg_unrolled) {
  return guarded(nthreads, [&] {
    need(n, 11);
    Ten t[11];
    for (int i = 0; i < 11; ++i) t[i] = ten_at(rec, i);
    GSP_DISPATCH(dtype, cg_unrolled_impl<scalar_t>(t[0], t[1], t[2], t[2].defined(), t[3], t[3].defined(), t[4],
                                                   t[5], t[6], t[7], t[8], t[9], t[10], ia[0]));
  });
}

// (w, diag, keep?, pre?, rhs, x, g, vrec, grec?, al, be): the fused CG recording v^t (and g^t)
// of every step into vrec / grec (T, B, K, C, H, W), contiguous like x and g
GSP_ENTRY(gsp_cg_unrolled_record) {
  return guarded(nthreads, [&] {
    need(n, 11);
    Ten t[11];
    for (int i = 0; i < 11; ++i) t[i] = ten_at(rec, i);
    Ten none;
    none.nd = -1;
    GSP_DISPATCH(dtype, cg_unrolled_impl<scalar_t>(t[0], t[1], t[2], t[2].defined(), t[3], t[3].defined(), t[4],
                                                   t[5], t[6], none, none, t[9], t[10], ia[0],
                                                   t[7].data_ptr<scalar_t>(),
                                                   t[8].defined() ? t[8].data_ptr<scalar_t>() : nullptr,
                                                   t[7].stride(0)));
  });
}

// (w, diag, keep?, pre?, vrec, grec?, x0, xbar, al, be, gw, gd, gp?, gb, gx0, ga, gbe)
GSP_ENTRY(gsp_cg_unrolled_backward) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 17);
    Ten t[17];
    for (int i = 0; i < 17; ++i) t[i] = ten_at(rec, i);
    GSP_DISPATCH(dtype, cg_backward_impl<scalar_t>(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9],
                                                   t[10], t[11], t[12], t[13], t[14], t[15], t[16]));
  });
}

// (wbar, s)
GSP_ENTRY(gsp_incidence_laplacian_weights) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 2);
    Ten wbar = ten_at(rec, 0), s = ten_at(rec, 1);
    GSP_DISPATCH(dtype, ilw_impl<scalar_t>(wbar, s));
  });
}

// (w, deg)
GSP_ENTRY(gsp_degree) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 2);
    Ten w = ten_at(rec, 0), deg = ten_at(rec, 1);
    GSP_DISPATCH(dtype, degree_impl<scalar_t>(w, deg));
  });
}

// (x, wbar, D?, u?, v?, D2, u2, v2, g, n): D = u = v = None is the zero initial state
GSP_ENTRY(gsp_admm_edge_step) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 10);
    Ten t[10];
    for (int i = 0; i < 10; ++i) t[i] = ten_at(rec, i);
    const bool first = !t[2].defined();
    GSP_DISPATCH(dtype, edge_impl<scalar_t>(t[0], t[1], first, t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9]));
  });
}

// (x, wbar, D?, u?, v?, g, gD2?, gu2?, gv2?, gn?, gx, gw, gD?, gu?, gv?, gg)
GSP_ENTRY(gsp_admm_edge_step_backward) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 16);
    Ten t[16];
    for (int i = 0; i < 16; ++i) t[i] = ten_at(rec, i);
    const bool first = !t[2].defined();
    GSP_DISPATCH(dtype, edge_bwd_impl<scalar_t>(t[0], t[1], first, t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9],
                                                t[10], t[11], t[12], t[13], t[14], t[15]));
  });
}

// (x^1, ..., x^S, wbar, g, n)
GSP_ENTRY(gsp_admm_edge_replay) {
  (void)ia;
  return guarded(nthreads, [&] {
    if (n < 4) throw std::invalid_argument("admm_edge_replay needs at least one iterate");
    std::vector<Ten> xs;
    for (int64_t i = 0; i + 3 < n; ++i) xs.push_back(ten_at(rec, i));
    Ten wbar = ten_at(rec, n - 3), g = ten_at(rec, n - 2), nn = ten_at(rec, n - 1);
    GSP_DISPATCH(dtype, edge_replay_impl<scalar_t>(xs, wbar, g, nn));
  });
}

// (c, m, x, y, rhs)
GSP_ENTRY(gsp_admm_node_update) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 5);
    Ten c = ten_at(rec, 0), m = ten_at(rec, 1), x = ten_at(rec, 2), y = ten_at(rec, 3), rhs = ten_at(rec, 4);
    GSP_DISPATCH(dtype, node_update_impl<scalar_t>(c, m, x, y, rhs));
  });
}

// (f, mf, out), ia = {do_exp}
GSP_ENTRY(gsp_edge_distances) {
  return guarded(nthreads, [&] {
    need(n, 3);
    Ten f = ten_at(rec, 0), mf = ten_at(rec, 1), out = ten_at(rec, 2);
    GSP_DISPATCH(dtype, edge_dist_impl<scalar_t>(f, mf, out, ia[0] != 0));
  });
}

// (g, gd, gg)
GSP_ENTRY(gsp_edge_distances_backward) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 3);
    Ten g = ten_at(rec, 0), gd = ten_at(rec, 1), gg = ten_at(rec, 2);
    GSP_DISPATCH(dtype, edge_dist_backward_impl<scalar_t>(g, gd, gg));
  });
}

// (d, wbar)
GSP_ENTRY(gsp_random_walk_from_distances) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 2);
    Ten d = ten_at(rec, 0), wbar = ten_at(rec, 1);
    GSP_DISPATCH(dtype, rw_dist_impl<scalar_t>(d, wbar));
  });
}

// (f, a, g)
GSP_ENTRY(gsp_project_heads) {
  (void)ia;
  return guarded(nthreads, [&] {
    need(n, 3);
    Ten f = ten_at(rec, 0), a = ten_at(rec, 1), g = ten_at(rec, 2);
    GSP_DISPATCH(dtype, project_impl<scalar_t>(f, a, g));
  });
}
