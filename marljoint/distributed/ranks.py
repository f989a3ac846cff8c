"""Data-parallel ranks: the torch.distributed process group of a run and the few collectives its trainer uses.

A run of K ranks is K processes (``marljoint train --ranks K``, or ``torchrun --nproc-per-node K ... -m marljoint
train``) that each step their own slice of the run's env copies (:meth:`RankGroup.slice_of`, the one rule that
splits copies: :func:`~marljoint.env.base.split_copies`) and compute the gradient of their share of every
minibatch's rows. What the trainer does with the group (:mod:`marljoint.ppo.sharded`):

- the rollout pieces are all-gathered (:meth:`RankGroup.all_gather_object`), so every rank holds the whole rollout
  and computes GAE, advantage normalisation, the value and observation normalisers and the minibatch order from it
  identically (global statistics without further communication);
- each rank's loss is its rows' share of the one-process loss (every mean divided by the minibatch's global count),
  so the gradients summed over the ranks (:meth:`RankGroup.all_reduce_sum_`, one flat buffer) are the one-process
  gradient; clipping and every optimizer step then run on identical gradients, so the parameters stay bitwise
  identical across ranks, which :meth:`RankGroup.check_identical` verifies with a cheap checksum;
- cross-agent losses see every row's features (:meth:`RankGroup.gather_rows`, differentiable).

The backend is gloo on the CPU and NCCL when the run's device is CUDA (one GPU per local rank, ``cuda:{local_rank}``).
The group is made from torchrun's standard variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) by
:meth:`RankGroup.from_environment`, with a timeout, so that a peer that died or hangs ends every rank's wait in
bounded time. This module imports torch and the env layer's slicing rule only: the collectors and learners import it.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from marljoint.env.base import split_copies

__all__ = ["DEFAULT_TIMEOUT_S", "RANK_VARIABLES", "RankGroup", "RanksDiverged", "prepare_to_join", "row_shares"]

DEFAULT_TIMEOUT_S = 300.0
"""How long a collective waits for the other ranks before it fails (seconds): a rank that died or hangs ends the
others' wait after this long."""

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""The environment variables torchrun sets in every process, read by :meth:`RankGroup.from_environment`."""


class RanksDiverged(RuntimeError):
    """The ranks of a run no longer hold the same values (parameters, optimizer state): their updates would drift
    apart. The one-line message names the ranks, what differs and the iteration.

    Attributes:
        what: what was compared, e.g. ``"parameters"``.
        ranks: the ranks whose values differ from rank 0's.
        names: the tensors that differ (their names, or their positions).
        iteration: the iteration at which it was found, or ``None``.
    """

    def __init__(self, what: str, ranks: Sequence[int], names: Sequence[str], iteration: int | None = None) -> None:
        self.what, self.ranks, self.names, self.iteration = what, list(ranks), list(names), iteration
        shown = ", ".join(self.names[:3]) + (f" and {len(self.names) - 3} more" if len(self.names) > 3 else "")
        when = "" if iteration is None else f" at iteration {iteration}"
        super().__init__(
            f"ranks {self.ranks} hold other {what} than rank 0{when} (differing: {shown}); the ranks' updates were "
            "not identical (a nondeterministic kernel, or a rank changed its copy): restart from the last checkpoint"
        )


def row_shares(count: int, world_size: int) -> list[tuple[int, int]]:
    """``count`` units (rows or sequence chunks of a minibatch) cut into ``world_size`` contiguous ``[start, stop)``
    shares in rank order, as equal as possible (``torch.tensor_split``'s rule; a share may be empty).

    Example:
        >>> row_shares(5, 2)
        [(0, 3), (3, 5)]
    """
    base, extra = divmod(int(count), int(world_size))
    bounds = [0]
    for r in range(world_size):
        bounds.append(bounds[-1] + base + (1 if r < extra else 0))
    return list(zip(bounds[:-1], bounds[1:]))


class RankGroup:
    """The process group of a data-parallel run, as one rank sees it.

    Build it with :meth:`from_environment` (torchrun's variables); the constructor only describes a group that
    ``torch.distributed`` has already joined.

    Args:
        rank: this process's rank, ``0 <= rank < world_size``.
        world_size: K, the ranks of the run.
        local_rank: the rank among the processes of this machine (its GPU index with NCCL).
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (CUDA).
        device: where this rank computes: ``"cpu"`` or ``"cuda:{local_rank}"``.

    Attributes:
        rank, world_size, local_rank, backend, device: as given.
    """

    def __init__(self, rank: int, world_size: int, local_rank: int, backend: str, device: str = "cpu") -> None:
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.local_rank = int(local_rank)
        self.backend = backend
        self.device = torch.device(device)
        self._gathered: tuple[tuple[Any, ...], torch.Tensor] | None = None

    def __repr__(self) -> str:
        return f"RankGroup(rank={self.rank}, world_size={self.world_size}, backend={self.backend!r})"

    @classmethod
    def from_environment(cls, device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> RankGroup | None:
        """Joins the process group torchrun's variables describe; ``None`` when WORLD_SIZE is absent or 1 (one
        process: no group).

        Args:
            device: the run's device: ``"cpu"`` (gloo) or ``"cuda"`` / ``"cuda:N"`` (NCCL, this rank on
                ``cuda:{LOCAL_RANK}``).
            timeout_s: how long a collective waits for the other ranks before it raises.

        Raises:
            ValueError: a variable missing or not a number, a rank out of range, or a CUDA device with fewer GPUs
                than the local ranks (naming the variable or the device and the fix).
        """
        size = os.environ.get("WORLD_SIZE")
        if size is None or size.strip() == "1":
            return None
        values = {name: _variable(name) for name in RANK_VARIABLES}
        rank, world, local = (int(values[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
        if not 0 <= rank < world:
            raise ValueError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world}); launch with torchrun")
        on_cuda = torch.device(device).type == "cuda"
        if on_cuda:
            _check_gpu(local)
            torch.cuda.set_device(local)
        backend = "nccl" if on_cuda else "gloo"
        prepare_to_join()
        if not dist.is_initialized():
            dist.init_process_group(
                backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=float(timeout_s))
            )
        return cls(rank, world, local, backend, f"cuda:{local}" if on_cuda else "cpu")

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes the run's files (rank 0)."""
        return self.rank == 0

    def slice_of(self, num_envs: int) -> tuple[int, int]:
        """This rank's env copies ``[start, stop)`` of ``num_envs`` (:func:`~marljoint.env.base.split_copies`).

        Raises:
            ValueError: if there are fewer copies than ranks.
        """
        return split_copies(num_envs, self.world_size)[self.rank]

    def all_reduce_sum_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Replaces every tensor by its sum over the ranks, in place, with one collective per dtype (the tensors
        flattened into one buffer; a single contiguous tensor is summed where it is). Every rank ends with the same
        bits."""
        if len(tensors) == 1 and tensors[0].is_contiguous():
            self._sum_(tensors[0].detach())
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for group in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            self._sum_(flat)
            offset = 0
            for t in group:
                t.detach().copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()

    def _sum_(self, flat: torch.Tensor) -> None:
        """Sums a contiguous tensor over the ranks in place. Two ranks gather each other's tensor and add the two in
        rank order: the same bytes as the all-reduce's ring, exchanged in one step instead of two (the ring's
        reduce-scatter, then its all-gather), which halves the latency that dominates the small buffers of a
        minibatch step (measured: about 2.9 against 2.0 ms a step on a 2-core machine). More ranks use the
        all-reduce, whose ring sends each rank's bytes once instead of K - 1 times."""
        if self.world_size != 2:
            dist.all_reduce(flat)
            return
        key = (flat.numel(), flat.dtype, flat.device)
        if self._gathered is None or self._gathered[0] != key:
            self._gathered = (key, torch.empty(2 * flat.numel(), dtype=flat.dtype, device=flat.device))
        both, mine = self._gathered[1], flat.view(-1)
        _gather_into()(both, mine)
        torch.add(both[: mine.numel()], both[mine.numel() :], out=mine)

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (the others' ``obj`` is ignored)."""
        box = [obj if self.rank == src else None]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self) -> None:
        """Waits until every rank arrives."""
        dist.barrier()

    def gather_rows(self, x: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
        """Every rank's rows of ``x`` (``[sizes[rank], ...]`` here), concatenated in rank order: ``[sum(sizes), ...]``.

        Differentiable for a function every rank computes identically from the gathered rows (a cross-agent loss
        of every row's features): its gradient with respect to the gathered tensor is then the same on every rank,
        and each rank keeps its own rows' part, so the gradients summed over the ranks are the one-process gradient.
        """
        return _GatherRows.apply(x, self, tuple(int(s) for s in sizes))

    def check_identical(
        self, tensors: Mapping[str, torch.Tensor] | Sequence[torch.Tensor], what: str, iteration: int | None = None
    ) -> None:
        """Compares a checksum of every tensor's bits with rank 0's (one small all-gather).

        Args:
            tensors: the tensors, by name (or in order: named by position).
            what: what they are, for the message (e.g. ``"parameters"``).
            iteration: the iteration, for the message.

        Raises:
            RanksDiverged: on every rank, when any rank's bits differ from rank 0's.
        """
        named = dict(tensors) if isinstance(tensors, Mapping) else {f"#{i}": t for i, t in enumerate(tensors)}
        sums = torch.stack([_checksum(t) for t in named.values()]) if named else torch.zeros(0, 2, dtype=torch.int64)
        sums = sums.to(self._comm_device())  # NCCL gathers device tensors
        gathered = [torch.zeros_like(sums) for _ in range(self.world_size)]
        dist.all_gather(gathered, sums)
        gathered = [g.cpu() for g in gathered]
        ranks = [r for r in range(1, self.world_size) if not torch.equal(gathered[r], gathered[0])]
        if ranks:
            names = list(named)
            differing = {i for r in ranks for i in range(len(names)) if not torch.equal(gathered[r][i], gathered[0][i])}
            raise RanksDiverged(what, ranks, [names[i] for i in sorted(differing)], iteration)

    def close(self) -> None:
        """Leaves the process group (after the last collective)."""
        if dist.is_initialized():
            dist.destroy_process_group()

    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


def _checksum(t: torch.Tensor) -> torch.Tensor:
    """``[2]`` int64: the sum of a tensor's bytes and their sum weighted by position (wrapping arithmetic: the same
    on every rank), a cheap fingerprint of its bits."""
    data = t.detach().contiguous().reshape(-1)
    if data.dtype == torch.bool:
        data = data.to(torch.uint8)
    raw = data.view(torch.uint8).to(torch.int64)
    position = torch.arange(1, raw.numel() + 1, device=raw.device, dtype=torch.int64)
    return torch.stack([raw.sum(), (raw * position).sum()]).cpu()


class _GatherRows(torch.autograd.Function):
    """All-gather of rows of unequal counts (padded to the largest), keeping this rank's rows' gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: RankGroup, sizes: tuple[int, ...]) -> torch.Tensor:
        ctx.rank_rows = (sum(sizes[: group.rank]), sizes[group.rank])
        width = max(sizes)
        padded = x.new_zeros((width, *x.shape[1:]))
        padded[: x.shape[0]] = x.detach()
        pieces = [torch.zeros_like(padded) for _ in sizes]
        dist.all_gather(pieces, padded)
        return torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        start, count = ctx.rank_rows
        return grad[start : start + count], None, None


def _gather_into() -> Any:
    """torch.distributed's all-gather into one tensor (``all_gather_single``; ``all_gather_into_tensor`` before
    torch 2.13, which deprecates that name)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def prepare_to_join() -> None:
    """What a process does before it joins a process group: imports torch._dynamo (which the optimizers import on
    their first step), so that it is not imported while the group exists.

    Imported while a group exists, it keeps references to the group that
    :func:`torch.distributed.destroy_process_group` does not drop, so the group's gloo threads outlive
    :meth:`RankGroup.close` and are torn down with the interpreter, which can end a rank that finished its run with
    SIGABRT ("terminate called without an active exception").
    """
    import torch._dynamo  # noqa: F401


def _variable(name: str) -> str:
    """A torchrun variable's value (ValueError naming it when missing or, for the counts, not an integer)."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        raise ValueError(
            f"environment variable {name} is not set, but WORLD_SIZE={os.environ.get('WORLD_SIZE')} asks for ranks; "
            f"launch with torchrun (which sets {', '.join(RANK_VARIABLES)}) or marljoint train --ranks K"
        )
    if name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT") and not value.strip().isdigit():
        raise ValueError(f"environment variable {name}={value!r} must be a non-negative integer; launch with torchrun")
    return value.strip()


def _check_gpu(local_rank: int) -> None:
    """Refuses (ValueError) a local rank without its GPU."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if local_rank >= count:
        raise ValueError(
            f"LOCAL_RANK={local_rank} needs GPU cuda:{local_rank}, but this machine has {count} CUDA device(s); "
            "start at most as many ranks per machine as it has GPUs, or train on device 'cpu'"
        )
