"""The native CPU kernels of :mod:`gsprestore.graph.operators` and :mod:`gsprestore.solvers`: plain C++
(``kernels.cpp`` beside this file, no PyTorch headers) compiled into a shared library when the
package is built (``setup.py``) and called through :mod:`ctypes` - no compiler, ninja or build
folder at run time.

Two builds of the same source ship on x86-64: ``_kernels_avx2`` (``-mavx2 -mfma``, used where
``torch.backends.cpu.get_cpu_capability()`` reports AVX2 or AVX512) and ``_kernels`` (the
baseline instruction set, used elsewhere); other architectures build ``_kernels`` only.

:func:`load` returns a :class:`Kernels` object whose methods take tensors, as the
``torch.utils.cpp_extension`` module they replace did: each checks that its tensors are CPU
float32/float64 tensors of one dtype with at most 6 dims and passes them as (data pointer, rank,
sizes, strides) records; the kernels trust the shapes and layouts that the callers in graph.py /
solvers/ establish (contiguous rows, broadcast dims of size 1). Each kernel releases the GIL and
runs on ``torch.get_num_threads()`` threads.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
import platform
import struct
from typing import Optional, Sequence

import torch
from torch import Tensor

__all__ = ["Kernels", "NativeUnavailable", "library_path", "load"]

#: The C interface version this loader speaks (``gsp_abi_version()`` in kernels.cpp).
ABI_VERSION = 4
_MAXD = 6  # kernels.cpp MAXD
_NONE = [0, -1] + [0] * (2 * _MAXD)
_DTYPES = {torch.float32: 0, torch.float64: 1}
_HERE = os.path.dirname(os.path.abspath(__file__))


class NativeUnavailable(RuntimeError):
    """The compiled library is missing or unusable here (the reason is the message)."""


def _variants() -> list[str]:
    """The library names to try, best first, for this CPU."""
    names = ["_kernels"]
    if platform.machine().lower() in ("x86_64", "amd64") and torch.backends.cpu.get_cpu_capability() in (
        "AVX2",
        "AVX512",
    ):
        names.insert(0, "_kernels_avx2")
    return names


def library_path() -> Optional[str]:
    """The shared library :func:`load` would open, or None when none was built."""
    for name in _variants():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(_HERE, name + suffix)
            if os.path.isfile(path):
                return path
    return None


def _rec(t: Optional[Tensor], out: list, dtype: list) -> None:
    if t is None:
        out.extend(_NONE)
        return
    if t.device.type != "cpu" or t.dtype not in _DTYPES:
        raise TypeError(f"native kernels take CPU float32/float64 tensors, got {t.dtype} on {t.device}")
    if dtype[0] is None:
        dtype[0] = t.dtype
    elif t.dtype != dtype[0]:
        raise TypeError(f"native kernels take tensors of one dtype, got {dtype[0]} and {t.dtype}")
    nd = t.dim()
    if nd > _MAXD:
        raise ValueError(f"native kernels take tensors of at most {_MAXD} dims, got {nd}")
    pad = [0] * (_MAXD - nd)
    out.append(t.data_ptr())
    out.append(nd)
    out.extend(t.shape)
    out.extend(pad)
    out.extend(t.stride())
    out.extend(pad)


class Kernels:
    """The kernels of one loaded library; the methods mirror the C entry points of kernels.cpp
    (the output tensors are written in place; those that produce one tensor return it)."""

    def __init__(self, path: str):
        self.path = path
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise NativeUnavailable(f"cannot load {path}: {exc}") from None
        try:
            lib.gsp_abi_version.restype = ctypes.c_int64
            version = lib.gsp_abi_version()
        except AttributeError:
            raise NativeUnavailable(f"{path} is not a gsprestore kernel library") from None
        if version != ABI_VERSION:
            raise NativeUnavailable(f"{path} speaks C interface {version}, this loader {ABI_VERSION} (rebuild it)")
        lib.gsp_last_error.restype = ctypes.c_char_p
        self._lib = lib
        self._fns = {}
        args = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
        for name in (
            "diag_minus_adjacency",
            "diag_minus_adjacency_grad_w",
            "cg_unrolled",
            "cg_unrolled_record",
            "cg_unrolled_backward",
            "incidence_laplacian_weights",
            "degree",
            "admm_edge_step",
            "admm_edge_step_backward",
            "admm_edge_replay",
            "admm_node_update",
            "edge_distances",
            "edge_distances_backward",
            "random_walk_from_distances",
            "project_heads",
            "glr_denoise_cg",
            "head_project",
            "scale_edges",
        ):
            fn = getattr(lib, "gsp_" + name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
            self._fns[name] = fn

    def _call(self, name: str, tensors: Sequence[Optional[Tensor]], ints: Sequence[int] = ()) -> None:
        rec: list = []
        dtype: list = [None]
        for t in tensors:
            _rec(t, rec, dtype)
        if dtype[0] is None:
            raise ValueError(f"{name}: no tensor given")
        ia = (ctypes.c_int64 * max(1, len(ints)))(*ints)
        buf = (ctypes.c_int64 * len(rec))(*rec)
        if self._fns[name](_DTYPES[dtype[0]], torch.get_num_threads(), buf, len(tensors), ia):
            raise RuntimeError(f"native {name}: {self._lib.gsp_last_error().decode(errors='replace')}")

    # models/packed_trunk.py: a block head's features projected by the metric factors, g written in place
    def head_project(self, t, e, w1, b1, w2, g):
        self._call("head_project", (t, e, w1, b1, w2, g))
        return g

    # models/noise_aware.py: the denoiser's damped CG, x (and the buffers r, p, u, q) written in place
    def glr_denoise_cg(self, w, a, s, b, x, r, p, u, q, iters: int, rel_eps: float, abs_eps: float):
        bits = [int.from_bytes(struct.pack("<d", float(e)), "little", signed=True) for e in (rel_eps, abs_eps)]
        self._call("glr_denoise_cg", (w, a, s, b, x, r, p, u, q), (int(iters), *bits))
        return x

    # graph.py: out = a x - W x (a None: identity); its weight gradient
    def diag_minus_adjacency(self, w, a, x, out):
        self._call("diag_minus_adjacency", (w, a, x, out))
        return out

    def diag_minus_adjacency_grad_w(self, g, x, gw):
        self._call("diag_minus_adjacency_grad_w", (g, x, gw))
        return gw

    def incidence_laplacian_weights(self, wbar, s):
        self._call("incidence_laplacian_weights", (wbar, s))
        return s

    def scale_edges(self, w, dis, out):
        self._call("scale_edges", (w, dis, out))
        return out

    def degree(self, w, deg):
        self._call("degree", (w, deg))
        return deg

    def edge_distances(self, f, mf, out, do_exp: bool):
        self._call("edge_distances", (f, mf, out), (int(bool(do_exp)),))
        return out

    def edge_distances_backward(self, g, gd, gg):
        self._call("edge_distances_backward", (g, gd, gg))
        return gg

    def random_walk_from_distances(self, d, wbar):
        self._call("random_walk_from_distances", (d, wbar))
        return wbar

    def project_heads(self, f, a, g):
        self._call("project_heads", (f, a, g))
        return g

    # solvers/: the fused inference CG, the ADMM edge step (forward, backward, replayed), the node update
    def cg_unrolled(self, w, diag, keep, pre, rhs, x, g, v, v2, al, be, mode: int) -> None:
        self._call("cg_unrolled", (w, diag, keep, pre, rhs, x, g, v, v2, al, be), (int(mode),))

    def cg_unrolled_record(self, w, diag, keep, pre, rhs, x, g, vrec, grec, al, be, mode: int) -> None:
        self._call("cg_unrolled_record", (w, diag, keep, pre, rhs, x, g, vrec, grec, al, be), (int(mode),))

    def cg_unrolled_backward(self, w, diag, keep, pre, vrec, grec, x0, xbar, al, be, gw, gd, gp, gb, gx0, ga,
                             gbe) -> None:
        self._call("cg_unrolled_backward", (w, diag, keep, pre, vrec, grec, x0, xbar, al, be, gw, gd, gp, gb, gx0,
                                            ga, gbe))

    def admm_edge_step(self, x, wbar, D, u, v, D2, u2, v2, g, n) -> None:
        self._call("admm_edge_step", (x, wbar, D, u, v, D2, u2, v2, g, n))

    def admm_edge_step_backward(self, x, wbar, D, u, v, g, gD2, gu2, gv2, gn, gx, gw, gD, gu, gv, gg) -> None:
        self._call("admm_edge_step_backward", (x, wbar, D, u, v, g, gD2, gu2, gv2, gn, gx, gw, gD, gu, gv, gg))

    def admm_edge_replay(self, xs, wbar, g, n):
        if not 1 <= len(xs) <= 8:
            raise ValueError(f"admm_edge_replay replays 1 to 8 iterates, got {len(xs)}")
        self._call("admm_edge_replay", (*xs, wbar, g, n))
        return n

    def admm_node_update(self, c, m, x, y, rhs) -> None:
        self._call("admm_node_update", (c, m, x, y, rhs))


def load() -> Kernels:
    """The kernels of the library built for this CPU; raises :class:`NativeUnavailable` (with
    the reason) when none was built (a source install without a C++ compiler) or it cannot load."""
    path = library_path()
    if path is None:
        raise NativeUnavailable(f"no compiled kernel library in {_HERE} (the package was installed without a C++ compiler)")
    return Kernels(path)
