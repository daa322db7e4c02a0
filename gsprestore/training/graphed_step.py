"""One training step's forward, loss and backward captured in a CUDA graph (issue #12).

The unrolled solvers run as ~14k-40k small PyTorch operators per training step
(``lab/research/count_training_traffic.py``); eagerly, each costs a Python dispatch and a kernel
launch, several microseconds of CPU time, so the GPU waits on the CPU. Captured once in a
``torch.cuda.CUDAGraph``, the whole forward + backward is replayed with one launch; a new batch is
copied into the graph's static input first. The optimizer step, gradient clipping and the
non-finite checks stay eager (a few fused kernels), so the training loop keeps its semantics.

Capture follows PyTorch's whole-network recipe: warm-up iterations on a side stream, gradients
set to ``None`` before capture so that the backward allocates them from the graph's pool (each
replay then *overwrites* ``param.grad``; never ``zero_grad(set_to_none=True)`` afterwards, which
would detach them). :func:`capture_training_step` checks the replayed gradients against an eager
step on the same batch and returns ``None`` (with the reason) when capture fails or they differ,
so a caller falls back to eager steps. Only CUDA; batches of another size run eagerly.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

NetworkInput = Callable[[str, Tensor], tuple[Tensor, Tensor]]


class GraphedStep:
    """``step(gt) -> loss``: replays the captured forward + loss + backward on ``gt`` (same shape
    as the capture batch); afterwards each parameter's ``.grad`` holds this batch's gradient."""

    def __init__(self, model: nn.Module, task: str, loss_fn: Callable, gt: Tensor, network_input: NetworkInput,
                 warmup: int = 3):
        if gt.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.shape = tuple(gt.shape)
        self.static_gt = gt.detach().clone()
        params = [p for p in model.parameters() if p.requires_grad]
        side = torch.cuda.Stream(device=gt.device)
        side.wait_stream(torch.cuda.current_stream(gt.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                for p in params:
                    p.grad = None
                loss_fn(model(*network_input(task, self.static_gt)), self.static_gt).backward()
        torch.cuda.current_stream(gt.device).wait_stream(side)
        for p in params:
            p.grad = None
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_loss = loss_fn(model(*network_input(task, self.static_gt)), self.static_gt)
            self.static_loss.backward()
        self.grads = [p.grad for p in params]

    def __call__(self, gt: Tensor) -> Tensor:
        self.static_gt.copy_(gt)
        self.graph.replay()
        return self.static_loss


def _eager_grads(model: nn.Module, task: str, loss_fn: Callable, gt: Tensor, network_input: NetworkInput) -> tuple[
        float, list[Tensor]]:
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    loss = loss_fn(model(*network_input(task, gt)), gt)
    loss.backward()
    out = float(loss), [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]
    for p in params:
        p.grad = None
    return out


#: The smallest scale a gradient tensor is compared at, as a fraction of the model's largest
#: gradient entry: some tensors' gradients are zero but for rounding (e.g. a bias added to features
#: that only enter through their differences, as the 2x models' first CNN output biases, ~1e-8 of
#: the largest), and their rounding noise is not a difference between two correct steps.
GRAD_SCALE_FLOOR = 1e-3


def grad_mismatch(grads: list[Tensor | None], refs: list[Tensor]) -> float:
    """The largest difference of ``grads`` from ``refs``, per tensor relative to that tensor's
    largest reference magnitude, but never to less than :data:`GRAD_SCALE_FLOOR` of the largest
    reference magnitude of all (a ``None`` gradient counts as zero)."""
    top = max((float(r.abs().max()) for r in refs if r.numel()), default=0.0)
    worst = 0.0
    for g, ref in zip(grads, refs):
        if not ref.numel():
            continue
        scale = max(float(ref.abs().max()), GRAD_SCALE_FLOOR * top) or 1.0
        diff = ref.abs() if g is None else (g - ref).abs()
        worst = max(worst, float(diff.max()) / scale)
    return worst


#: How many times the eager steps' own run-to-run difference a replayed step may differ by (atomic
#: additions in the fused backward kernels sum in a different order each run; a 2x model's step
#: on an H100 differed from the eager one by 2.2e-3 with identical losses) ...
NOISE_FACTOR = 4.0
#: ... but never by more than this (of each gradient's largest magnitude), whatever the noise.
MAX_RTOL = 2e-2


def replay_matches(loss: float, loss_ref: float, worst: float, noise: float, rtol: float = 2e-3) -> bool:
    """Whether a replayed step (loss ``loss``, gradients ``worst`` away from an eager step's:
    :func:`grad_mismatch`) is the eager step (loss ``loss_ref``): the losses agree within ``rtol``
    and the gradients within ``rtol`` or, where two eager steps on the same batch already differ
    by ``noise``, within :data:`NOISE_FACTOR` x ``noise``, capped at :data:`MAX_RTOL`."""
    tol = min(max(rtol, NOISE_FACTOR * noise), MAX_RTOL)
    return abs(loss - loss_ref) <= rtol * max(abs(loss_ref), 1e-12) and worst <= tol


def capture_training_step(model: nn.Module, task: str, loss_fn: Callable, gt: Tensor, network_input: NetworkInput,
                          *, rtol: float = 2e-3) -> tuple[GraphedStep | None, dict[str, Any]]:
    """Capture the training step for batches shaped like ``gt`` and check it: the replayed loss and
    gradients must match an eager step on ``gt`` (:func:`replay_matches`: within ``rtol`` of each
    gradient's largest magnitude, at least :data:`GRAD_SCALE_FLOOR` of the model's largest:
    :func:`grad_mismatch`; or within a few times the difference between two eager steps, the
    nondeterminism of atomic sums). Returns ``(step, info)``; ``step`` is None when capture failed
    or did not match (``info["reason"]`` says why) and the parameters' gradients are then left
    ``None``."""
    info: dict[str, Any] = {"batch": int(gt.shape[0])}
    if gt.device.type != "cuda":
        return None, {**info, "reason": "not a CUDA device"}
    loss_ref, grads_ref = _eager_grads(model, task, loss_fn, gt, network_input)
    _, grads_again = _eager_grads(model, task, loss_fn, gt, network_input)
    noise = grad_mismatch(grads_again, grads_ref)
    try:
        step = GraphedStep(model, task, loss_fn, gt, network_input)
        loss = float(step(gt))
    except Exception as exc:  # noqa: BLE001 - any capture failure means: run eagerly
        for p in model.parameters():
            p.grad = None
        return None, {**info, "reason": f"capture failed: {type(exc).__name__}: {str(exc)[:300]}"}
    worst = grad_mismatch(step.grads, grads_ref)
    info.update({"loss_eager": loss_ref, "loss_graph": loss, "max_rel_grad_diff": worst,
                 "eager_rel_grad_noise": noise})
    if not replay_matches(loss, loss_ref, worst, noise, rtol):
        for p in model.parameters():
            p.grad = None
        return None, {**info, "reason": "replayed step differs from the eager step"}
    return step, {**info, "reason": None}
