"""More than one process: the ranks that ``torchrun`` (or any launcher setting its environment
variables) starts, on :mod:`torch.distributed` (NCCL on GPUs, gloo on CPUs), and the batch
scheduler's array jobs (``--shard K/N``). gsprestore writes no scheduler, no sockets and no
process pool of its own: everything below is ``torch.distributed``'s.

* :func:`ranks_from_env` reads ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (torchrun's variables);
  without them a process is rank 0 of 1 and nothing here does anything.
* :func:`start` joins the process group (``init_process_group`` with the ``env://`` rendezvous
  torchrun prepares, and a timeout on every collective: :func:`timeout_s`, from
  ``GSPRESTORE_DIST_TIMEOUT``), :func:`finish` leaves it.
* Small agreements between the ranks (:func:`all_max`, :func:`all_sum`, :func:`from_rank0`,
  :func:`gather_to_rank0`): a collective that fails because another rank died (its connection
  closed, or the timeout passed) is a one-line :class:`~gsprestore.core.errors.GspError`, so the
  survivors exit non-zero instead of hanging.
* :func:`split` and :func:`parse_shard`: a rank's share of a global batch or of a list of files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from ..core.errors import GspError, UsageError

#: Seconds a collective waits for the other ranks before it fails (``GSPRESTORE_DIST_TIMEOUT``).
#: It must exceed the longest time one rank works alone while the others wait: rank 0's
#: validation and checkpoints between epochs.
DEFAULT_TIMEOUT_S = 1800.0


def timeout_s() -> float:
    """The collective timeout: ``GSPRESTORE_DIST_TIMEOUT`` seconds, else :data:`DEFAULT_TIMEOUT_S`."""
    raw = os.environ.get("GSPRESTORE_DIST_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"GSPRESTORE_DIST_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise UsageError(f"GSPRESTORE_DIST_TIMEOUT must be positive, got {raw!r}")
    return value


@dataclass
class Ranks:
    """This process's place among the ranks: ``rank`` of ``world``, ``local_rank`` on its node
    (the GPU it takes). ``owns_group``: :func:`start` created the process group (and
    :func:`finish` destroys it); ``backend``: the group's backend."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owns_group: bool = False
    backend: str | None = None

    @property
    def active(self) -> bool:
        """More than one rank: collectives are needed."""
        return self.world > 1

    @property
    def main(self) -> bool:
        """Rank 0: the one writer of the run folder, the one progress display."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not an integer (set by torchrun or the launcher)") from None


def ranks_from_env() -> Ranks:
    """``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` from the environment (torchrun sets them);
    rank 0 of 1 without them. Nothing is joined yet (:func:`start`)."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", rank if world > 1 else 0)
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"RANK={rank} and WORLD_SIZE={world} do not describe a rank of the job")
    return Ranks(rank=rank, world=world, local_rank=local)


def start(ranks: Ranks, backend: str) -> Ranks:
    """Join the process group of ``ranks`` (``backend`` ``nccl`` or ``gloo``), unless there is
    one rank only or the caller already joined one (then it is used as it is)."""
    if not ranks.active:
        return ranks
    import datetime

    import torch.distributed as dist

    if dist.is_initialized():
        ranks.backend = dist.get_backend()
        return ranks
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise UsageError(f"WORLD_SIZE={ranks.world} but no MASTER_ADDR / MASTER_PORT: start the ranks with torchrun")
    try:
        dist.init_process_group(backend, rank=ranks.rank, world_size=ranks.world,
                                timeout=datetime.timedelta(seconds=timeout_s()))
    except (RuntimeError, ValueError) as exc:
        raise GspError(f"rank {ranks.rank} of {ranks.world} could not join the others "
                       f"({first_line(exc)})") from None
    ranks.owns_group, ranks.backend = True, backend
    return ranks


def finish(ranks: Ranks) -> None:
    """Leave the process group :func:`start` created."""
    if ranks.owns_group:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        ranks.owns_group = False


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _collective(ranks: Ranks, fn: Callable[[], Any], what: str) -> Any:
    """Run a collective; if another rank has gone (closed connection, timeout), a one-line error."""
    try:
        return fn()
    except (RuntimeError, ConnectionError, OSError) as exc:  # DistBackendError is a RuntimeError
        raise GspError(f"rank {ranks.rank} of {ranks.world}: another rank stopped answering during {what} "
                       f"({first_line(exc)}); the job cannot go on") from None


def _reduce(ranks: Ranks, values: list[float], op_name: str, device, what: str) -> list[float]:
    if not ranks.active:
        return [float(v) for v in values]
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    op = dist.ReduceOp.MAX if op_name == "max" else dist.ReduceOp.SUM
    _collective(ranks, lambda: dist.all_reduce(t, op=op), what)
    return [float(v) for v in t.cpu().tolist()]


def all_max(ranks: Ranks, values: list[float], device=None, what: str = "an agreement") -> list[float]:
    """The element-wise maximum of ``values`` over the ranks (the same on every rank)."""
    return _reduce(ranks, values, "max", device, what)


def all_sum(ranks: Ranks, values: list[float], device=None, what: str = "a sum") -> list[float]:
    """The element-wise sum of ``values`` over the ranks (the same on every rank)."""
    return _reduce(ranks, values, "sum", device, what)


def barrier(ranks: Ranks, what: str = "a barrier") -> None:
    """Wait until every rank is here."""
    if ranks.active:
        import torch.distributed as dist

        _collective(ranks, dist.barrier, what)


def from_rank0(ranks: Ranks, fn: Callable[[], Any], what: str = "setting up") -> Any:
    """``fn()`` run on rank 0 only, its result given to every rank; if it raised a
    :class:`GspError` (or :class:`UsageError`), every rank raises the same one."""
    if not ranks.active:
        return fn()
    import torch.distributed as dist

    box: list[Any] = [None]
    if ranks.main:
        try:
            box[0] = ("ok", fn())
        except GspError as exc:
            box[0] = ("error", type(exc).__name__, exc.reason, None if exc.path is None else str(exc.path))
    _collective(ranks, lambda: dist.broadcast_object_list(box, src=0), what)
    if box[0][0] == "ok":
        return box[0][1]
    _, kind, reason, path = box[0]
    cls = UsageError if kind == "UsageError" else GspError
    raise cls(reason, path)


def gather_to_rank0(ranks: Ranks, obj: Any, what: str = "the summary") -> list[Any] | None:
    """Every rank's ``obj``, in rank order, on rank 0 (None on the others)."""
    if not ranks.active:
        return [obj]
    import torch.distributed as dist

    out: list[Any] | None = [None] * ranks.world if ranks.main else None
    _collective(ranks, lambda: dist.gather_object(obj, out, dst=0), what)
    return out


def rank_device(device: str, ranks: Ranks) -> str:
    """Under torchrun, ``--device auto`` / ``cuda`` mean this rank's GPU, ``cuda:LOCAL_RANK``
    (``auto`` without a GPU: the CPU); an explicit ``cuda:N`` or ``cpu`` is kept."""
    if not ranks.active or device not in ("auto", "cuda"):
        return device
    import torch

    if torch.cuda.is_available():
        return f"cuda:{ranks.local_rank % max(1, torch.cuda.device_count())}"
    return "cpu" if device == "auto" else device


def split(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share ``[lo, hi)`` of ``n`` items: sizes differ by at most one,
    the first ``n % world`` ranks take one more; together disjoint and complete."""
    q, r = divmod(n, world)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (1 if rank < r else 0)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``--shard K/N``: this process does share ``K`` (0 to N-1) of ``N``; None for no option."""
    if text is None:
        return None
    k, sep, n = str(text).partition("/")
    try:
        index, count = int(k), int(n)
    except ValueError:
        index, count = -1, 0
    if not sep or count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard takes K/N with 0 <= K < N (e.g. --shard 0/4 ... 3/4, "
                         f"or $SLURM_ARRAY_TASK_ID/N), got {text!r}")
    return index, count
