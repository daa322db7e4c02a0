"""An operator-level count of a PyTorch run: the FLOPs, bytes and launches of every ATen operator,
booked to the part of the model that is running.

:class:`Tracker` is a stack of part labels (whoever marks the parts pushes and pops them) with each
part's exclusive wall time; :class:`Counter`, a ``TorchDispatchMode``, books every operator to the
label on top. FLOPs: a multiply-add counts 2, every other arithmetic operation, comparison or
select 1 (exp, rsqrt, reciprocal: 1 each), reductions one per folded element, data movement 0
(:func:`op_flops`; an operator without a formula is counted as 0 and reported). Bytes: each
operator's distinct input elements plus its outputs (an ``out=`` buffer or a filled tensor counts
as written only); views cost nothing. The cost model (:mod:`gsprestore_lab.cost_model`)
counts a forward with it."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class Tracker:
    """A stack of part labels with exclusive wall times, and the time inside native kernels."""

    def __init__(self):
        self.stack: list[list] = [["rest", time.perf_counter(), 0.0]]
        self.time: dict[str, float] = defaultdict(float)
        self.native: dict[str, float] = defaultdict(float)
        self.native_calls = 0

    @property
    def label(self) -> str:
        return self.stack[-1][0]

    def enter(self, label: str) -> None:
        self.stack.append([label, time.perf_counter(), 0.0])

    def exit(self) -> None:
        label, t0, child = self.stack.pop()
        el = time.perf_counter() - t0
        self.time[label] += el - child
        self.stack[-1][2] += el


#: views and metadata-only operators: no kernel, no traffic
FREE = {"view", "_unsafe_view", "reshape", "expand", "as_strided", "permute", "transpose", "t", "unsqueeze",
        "squeeze", "slice", "select", "detach", "alias", "unbind", "split", "split_with_sizes", "chunk",
        "narrow", "diagonal", "lift_fresh", "_to_copy_noop", "empty", "empty_like", "empty_strided", "new_empty",
        "new_empty_strided", "_reshape_alias", "view_as_real", "view_as_complex", "unfold", "movedim", "expand_as",
        "is_nonzero", "detach_", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "_has_compatible_shallow_copy_type"}
#: one operation per output element
ELEMENTWISE = {"add", "sub", "mul", "div", "neg", "relu", "exp", "rsqrt", "reciprocal", "sqrt", "clamp_min",
               "clamp_max", "clamp", "abs", "where", "maximum", "minimum", "gt", "ge", "lt", "le", "eq", "ne",
               "pow", "square", "rsub", "sign", "threshold", "masked_fill", "sigmoid", "log", "logical_not",
               "logical_and", "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "floor", "ceil", "round"}
FMA = {"addcmul", "addcdiv", "lerp"}
#: reductions: one operation per input element that is folded (inputs - outputs)
REDUCE = {"sum", "mean", "any", "all", "amax", "amin", "max", "min", "prod"}
#: data movement only: bytes, no operations
DATA = {"copy", "clone", "cat", "stack", "fill", "zero", "zeros", "zeros_like", "new_zeros", "new_full", "full",
        "full_like", "ones", "ones_like", "new_ones", "constant_pad_nd", "replication_pad2d", "_to_copy",
        "contiguous", "index", "index_select", "lift_fresh_copy", "scalar_tensor", "_local_scalar_dense",
        "masked_select", "alias_copy", "_pad_enum", "pad", "tensor", "arange", "scalar", "to"}
#: operators whose first argument is only written (not read)
WRITE_ONLY_SELF = {"copy_", "fill_", "zero_"}
#: operators that only take their tensor argument's shape, dtype and device (nothing read)
TEMPLATE_ONLY = {"new_zeros", "new_full", "new_ones", "zeros_like", "ones_like", "full_like"}


def _distinct(t: torch.Tensor) -> int:
    """Elements a kernel really touches: broadcast (stride-0) dims count once."""
    n = 1
    for s, st in zip(t.shape, t.stride()):
        if s == 0:
            return 0
        if st != 0:
            n *= s
    return n


def op_flops(name: str, args, kwargs, out_tensors) -> Optional[float]:
    """FLOPs of one ATen operator (None: no formula, the operator is reported)."""
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    n_out = sum(t.numel() for t in out_tensors)
    if base in DATA:
        return 0.0
    if base in ELEMENTWISE:
        alpha = kwargs.get("alpha", 1) if kwargs else 1
        return float(n_out * (2 if base in ("add", "sub") and alpha != 1 else 1))
    if base in FMA:
        return 2.0 * n_out
    if base in REDUCE:
        n_in = args[0].numel() if isinstance(args[0], torch.Tensor) else 0
        return float(max(0, n_in - n_out))
    if base in ("_softmax", "softmax"):  # max, subtract, exp, sum, divide
        return 5.0 * n_out
    if base in ("convolution", "conv2d"):
        x, w = args[0], args[1]
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        transposed = bool(args[6]) if base == "convolution" and len(args) > 6 else False
        kk = w.shape[2] * w.shape[3] if w.dim() == 4 else w[0, 0].numel()
        if transposed:
            f = 2.0 * x.numel() * w.shape[1] * kk
        else:
            f = 2.0 * n_out * w.shape[1] * kk
        return f + (n_out if bias is not None else 0)
    if base == "matmul":
        return 2.0 * n_out * args[0].shape[-1]
    if base in ("mm", "bmm", "addmm", "baddbmm"):
        a, b = (args[1], args[2]) if base in ("addmm", "baddbmm") else (args[0], args[1])
        f = 2.0 * a.numel() * b.shape[-1]
        return f + (n_out if base in ("addmm", "baddbmm") else 0)
    return None


class Counter(TorchDispatchMode):
    """FLOPs, bytes and launches of every ATen operator, by the part running (``tracker``)."""

    def __init__(self, tracker: Tracker):
        super().__init__()
        self.tracker = tracker
        self.flops: dict[str, float] = defaultdict(float)
        self.bytes: dict[str, float] = defaultdict(float)
        self.launches: dict[str, int] = defaultdict(int)
        self.by_op: dict[str, list] = {}
        self.unknown: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in FREE:
            return out
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        ins = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
        ins += [t for k, v in kwargs.items() if k != "out" for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor)]
        if not name.endswith("_") and "out" not in kwargs and outs and all(any(o is i for i in ins) for o in outs):
            return out  # returned an input as it is (e.g. .to() to its own dtype): no kernel
        if name in WRITE_ONLY_SELF and ins:
            ins = ins[1:]
        elif name in TEMPLATE_ONLY:
            ins = []
        moved = sum(_distinct(t) * t.element_size() for t in ins) + sum(_distinct(t) * t.element_size() for t in outs)
        f = op_flops(name, args, kwargs, outs)
        if f is None:
            self.unknown[name] += 1
            f = 0.0
        self.book(name, f, moved)
        return out

    def book(self, name: str, flops: float, moved: float) -> None:
        """One launch of kernel ``name`` with its FLOPs and bytes, to the part running and to
        ``by_op[name]`` (launches, FLOPs, bytes)."""
        label = self.tracker.label
        self.flops[label] += flops
        self.bytes[label] += moved
        self.launches[label] += 1
        rec = self.by_op.setdefault(name, [0, 0.0, 0.0])
        rec[0] += 1
        rec[1] += flops
        rec[2] += moved
