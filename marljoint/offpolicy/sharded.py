"""The off-policy trainer on data-parallel ranks: every rank its own env copies and replay shard, every gradient step
a global batch of which each rank samples and differentiates its share.

Rank r of K steps its slice of the ``num_envs`` copies (:meth:`~marljoint.distributed.ranks.RankGroup.slice_of`,
each copy seeded and explored by its global index, so its piece is that slice of a one-process rollout) and stores
ITS OWN transitions in its own replay shard, of ``buffer_size`` × (its copies / E) transitions; no transition
leaves its rank. Per iteration, one small all-gather shares what every rank must agree on: the episodes that ended
(the metrics are the whole run's), the shards' sizes (``learning_starts`` counts the transitions of every shard) and
the team rewards just stored (the ``"auto"`` reward scale observes every rank's, in rank order). The env steps are
counted globally (``rollout_steps`` × E per iteration), so the exploration schedule is the same on every rank.

Per gradient step (:class:`RankShards`):

- rank r draws its share of the global batch, ``batch_size`` × (its copies / E) rows (:func:`copies_share`:
  ``batch_size / K`` where the copies split evenly), from its shard with a generator of its own, seeded from the
  run's seed and the rank (deterministic for a given K): every shard is drawn from in proportion to its copies, as
  a uniform draw from one buffer of every copy's transitions is on average;
- every mean of the loss is taken over the GLOBAL batch (:class:`BatchShare`): a mean over rows is this rank's sum
  divided by ``batch_size``, a per-agent mean over the rows where the agent decided is divided by the whole batch's
  count of such rows (one all-reduce of the counts), so the per-rank losses SUM to the one-process loss of the
  concatenated batch; the loss's sampling noise (MASAC's fresh actions, MADDPG's Gumbel samples) is drawn for the
  whole batch on every rank from the replicated generator and each rank takes its rows';
- a cross-agent auxiliary loss (the redundancy penalty) sees every row's features, gathered with a differentiable
  all-gather (:meth:`~marljoint.distributed.ranks.RankGroup.gather_rows`), so it enters the summed gradient once;
- one backward, then every gradient and the summed statistics in ONE all-reduce, BEFORE the per-network clipping;
  clipping, the optimizer steps, the target networks and MASAC's temperatures then move identically on every rank,
  and :meth:`~marljoint.distributed.ranks.RankGroup.check_identical` verifies the parameters after every iteration.

A checkpoint (every rank calls :meth:`OffPolicyTrainer.state_dict`, rank 0 writes it) holds every shard, every
rank's replay generator and every rank's carried moves (``"ranks"``), gathered to rank 0. Resumed with the same K,
every rank takes back its own: the run continues bit for bit. Resumed with another K (or in one process, or a
one-process checkpoint resumed on ranks), the transitions of every shard are dealt out again: ordered by age across
the shards (newest last), dealt round-robin to the new shards (each keeps its newest ``capacity``), the replay
generators seeded afresh from the seed, the rank and the iteration; the moves still waiting for their agent's next
decision at the checkpoint (turn-based envs, at most one per agent and env copy) are dropped, their episodes go on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from marljoint.distributed.ranks import RankGroup
from marljoint.env.base import split_copies
from marljoint.offpolicy.replay import JointTransitions, ReplayBuffer

__all__ = ["BatchShare", "ROW_STATS", "RankShards", "copies_share", "dealt"]

ROW_STATS = ("td_loss", "q_taken", "td_target", "critic_loss", "actor_loss", "alpha_loss", "q", "entropy")
"""The loss statistics that are means over the batch's rows (by name, or the part before ``/``): on ranks each rank
holds its rows' share of them, summed over the ranks for the metrics. Every other statistic (``reward_scale``,
``alpha/<i>``, ``actor_updated``, the auxiliary loss and its metrics) is the same on every rank."""


class BatchShare(NamedTuple):
    """This rank's rows of a global batch, as the losses of :mod:`marljoint.offpolicy` read them.

    Attributes:
        ranks: the run's process group.
        start: the first of this rank's rows in the global batch.
        total: the rows of the global batch (``batch_size``).
        counts: ``[N]`` float32, each agent's rows in the global batch where it decided (the denominators of the
            per-agent means).
        sizes: every rank's rows of the global batch, in rank order.
    """

    ranks: RankGroup
    start: int
    total: int
    counts: torch.Tensor
    sizes: tuple[int, ...]

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """This rank's share of the mean over the global batch's rows of ``values`` (``[B_r, ...]``): its sum over
        every element divided by the global count of elements."""
        return values.sum() / (self.total * math.prod(values.shape[1:]))

    def padded(self, x: torch.Tensor | None, fill: bool | float = 0.0) -> torch.Tensor | None:
        """``x`` (``[B_r, ...]``) at this rank's rows of a ``[total, ...]`` tensor filled with ``fill``
        (differentiable): noise drawn for the padded tensor is the one-process noise of these rows."""
        if x is None:
            return None
        before = x.new_full((self.start, *x.shape[1:]), fill)
        after = x.new_full((self.total - self.start - x.shape[0], *x.shape[1:]), fill)
        return torch.cat([before, x, after])

    def mine(self, x: torch.Tensor | None, rows: int) -> torch.Tensor | None:
        """This rank's ``rows`` rows of a ``[total, ...]`` tensor."""
        return None if x is None else x[self.start : self.start + rows]

    def gathered(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of ``x`` in global batch order (``[total, ...]``; differentiable: this rank keeps its
        own rows' gradient)."""
        return self.ranks.gather_rows(x, self.sizes)


class RankShards:
    """What the off-policy trainer does differently on data-parallel ranks (see the module docstring).

    Args:
        ranks: the run's process group.
        num_envs: E, the copies of every rank together.
        buffer_size: the run's replay capacity (the shards' together).
        batch_size: the rows of each global batch.
        seed: the run's seed.

    Raises:
        ValueError: if the batch or the buffer cannot give every rank at least one row.
    """

    def __init__(self, ranks: RankGroup, num_envs: int, buffer_size: int, batch_size: int, seed: int) -> None:
        k = ranks.world_size
        slices = split_copies(num_envs, k)
        for name, value in (("batch_size", batch_size), ("buffer_size", buffer_size)):
            if min(stop - start for start, stop in copies_share(value, slices)) < 1:
                needed = next(t for t in range(k, num_envs + 1) if min(b - a for a, b in copies_share(t, slices)) > 0)
                raise ValueError(
                    f"{name}={value} cannot be shared by {k} data-parallel ranks in proportion to their env copies "
                    f"(each needs at least one row); raise {name} to at least {needed} or use fewer ranks"
                )
        self.ranks, self.seed, self.batch_size = ranks, int(seed), int(batch_size)
        self.capacities = [stop - start for start, stop in copies_share(buffer_size, slices)]
        """Every rank's shard of the replay capacity (its copies' share of ``buffer_size``)."""
        self.capacity = self.capacities[ranks.rank]
        """This rank's shard of the replay capacity."""
        self.shares = copies_share(batch_size, slices)
        """Every rank's ``[start, stop)`` rows of every global batch (its copies' share of ``batch_size``)."""
        self.rows = self.shares[ranks.rank]
        """This rank's ``[start, stop)`` rows of every global batch."""
        self.generator = torch.Generator().manual_seed(_seed(seed, 2, ranks.rank))
        """The source of this rank's replay samples."""
        self.sizes = [0] * k
        """Every shard's number of transitions (as of the last :meth:`share_iteration`)."""

    @property
    def stored(self) -> int:
        """The transitions of every shard together."""
        return sum(self.sizes)

    def can_update(self, learning_starts: int) -> bool:
        """Whether every rank takes gradient steps now: ``learning_starts`` transitions in the shards together, and
        at least one in every shard (the same answer on every rank)."""
        return self.stored >= max(learning_starts, 1) and min(self.sizes) > 0

    def share_iteration(
        self, size: int, rewards: torch.Tensor, alive: torch.Tensor, returns: np.ndarray, lengths: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """One all-gather per iteration: this shard's size, the rewards and presence of the transitions just stored
        (``[B_r, N]``) and the episodes that ended here; returns every rank's, concatenated in rank order."""
        pieces = self._gathered("the iteration's transitions", (int(size), rewards, alive, returns, lengths))
        self.sizes = [p[0] for p in pieces]
        return (
            torch.cat([p[1] for p in pieces]),
            torch.cat([p[2] for p in pieces]),
            np.concatenate([p[3] for p in pieces]),
            np.concatenate([p[4] for p in pieces]),
        )

    def sample(self, buffer: ReplayBuffer) -> tuple[JointTransitions, BatchShare]:
        """This rank's rows of a global batch and how they sit in it (one all-reduce of the agents' counts)."""
        start, stop = self.rows
        batch = buffer.sample(stop - start, self.generator)
        counts = batch.deciding.sum(0).to(torch.float32)
        self.ranks.all_reduce_sum_([counts])
        sizes = tuple(b - a for a, b in self.shares)
        return batch, BatchShare(self.ranks, start, self.batch_size, counts, sizes)

    def reduce_(self, stats: dict[str, Any], parameters: Sequence[torch.Tensor]) -> dict[str, Any]:
        """After the backward: every gradient and the statistics of :data:`ROW_STATS` summed over the ranks, in one
        all-reduce; returns the one-process statistics (``total_loss``: the summed rows' part plus the auxiliary
        loss, which every rank computed whole).

        Args:
            stats: this rank's statistics (plain floats; ``aux_metrics`` a mapping).
            parameters: the parameters that got a gradient (the same on every rank).
        """
        summed = [k for k in stats if k.split("/")[0] in ROW_STATS]
        aux = float(stats.get("aux_loss", 0.0))
        values = [float(stats[k]) for k in summed] + [float(stats["total_loss"]) - aux]
        grads = [p.grad for p in parameters]
        buffer = torch.tensor(values, dtype=grads[0].dtype if grads else torch.float32)
        self.ranks.all_reduce_sum_([*grads, buffer])
        out = dict(stats)
        out.update({k: float(v) for k, v in zip(summed, buffer[:-1].tolist())})
        out["total_loss"] = float(buffer[-1]) + aux
        return out

    def state(self, buffer: ReplayBuffer | None, carried: Mapping[str, Any] | None) -> dict[str, Any]:
        """Every rank's shard, replay generator and carried moves (an all-gather: every rank calls it)."""
        mine = (None if buffer is None else buffer.state_dict(), self.generator.get_state(), carried)
        pieces = self._gathered("a checkpoint's replay shards", mine)
        return {
            "world_size": self.ranks.world_size,
            "shards": [p[0] for p in pieces],
            "generators": [p[1] for p in pieces],
            "carried": [p[2] for p in pieces],
        }

    def _gathered(self, what: str, mine: Any) -> list[Any]:
        """Every rank's ``mine``, in rank order, checked to be what every rank gathers now: a rank that left the
        iteration's schedule (an env failed on it, and it checkpoints while the others collect) stops every rank.

        Raises:
            RuntimeError: on every rank, naming the ranks and what each gathered.
        """
        pieces = self.ranks.all_gather_object((what, mine))
        apart = {r: kind for r, (kind, _) in enumerate(pieces) if kind != what}
        if apart:
            raise RuntimeError(
                f"rank {self.ranks.rank} gathered {what} while ranks {sorted(apart)} gathered "
                f"{next(iter(apart.values()))}: a rank left the iteration (its env failed), so its checkpoint cannot "
                "gather the other ranks' replay shards; the newest checkpoint is kept: resume from it"
            )
        return [piece for _, piece in pieces]

    def restored(self, saved: Mapping[str, Any]) -> tuple[dict[str, Any] | None, Any, torch.Tensor]:
        """This rank's shard, carried moves and replay generator state from a checkpoint's trainer state (its
        ``"ranks"`` of a run of ranks, or the one-process ``buffer``); see the module docstring for another K. Every
        rank holds the whole state, so every shard's size is known here without a collective (:attr:`sizes`)."""
        k, rank = self.ranks.world_size, self.ranks.rank
        ranked = saved.get("ranks")
        if ranked is not None and int(ranked["world_size"]) == k:
            self.sizes = [0 if shard is None else int(shard["size"]) for shard in ranked["shards"]]
            return ranked["shards"][rank], ranked["carried"][rank], ranked["generators"][rank]
        fresh = torch.Generator().manual_seed(_seed(self.seed, 2, rank, int(saved["iteration"])))
        shards = ranked["shards"] if ranked is not None else [saved["buffer"]]
        total = sum(int(shard["size"]) for shard in shards if shard is not None)
        self.sizes = [min(capacity, len(range(r, total, k))) for r, capacity in enumerate(self.capacities)]
        return dealt(shards, k, rank, self.capacity), None, fresh.get_state()


def copies_share(total: int, slices: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``total`` units (transitions of capacity, rows of a batch) cut in proportion to the ranks' slices of the env
    copies: rank r gets ``[total · start_r // E, total · stop_r // E)``, so the shares add up to ``total``.

    Example:
        >>> copies_share(16, [(0, 2), (2, 3), (3, 5)])
        [(0, 6), (6, 9), (9, 16)]
    """
    copies = slices[-1][1]
    return [(total * start // copies, total * stop // copies) for start, stop in slices]


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) % 2**63 for p in parts]).generate_state(1)[0])


def _rows(value: Any, index: torch.Tensor) -> Any:
    return tuple(v[index] for v in value) if isinstance(value, (tuple, list)) else value[index]


def _cat(values: Sequence[Any]) -> Any:
    if isinstance(values[0], (tuple, list)):
        return tuple(torch.cat(parts) for parts in zip(*values))
    return torch.cat(values)


def dealt(shards: Sequence[Mapping[str, Any] | None], k: int, rank: int, capacity: int) -> dict[str, Any] | None:
    """Shard ``rank`` of ``k``, of ``capacity`` transitions, dealt from saved shards
    (:meth:`~marljoint.offpolicy.replay.ReplayBuffer.state_dict` output, ``None`` for an empty one): every shard's
    transitions ordered by age across the shards (the newest of every shard last; equal ages in shard order), dealt
    round-robin, the newest ``capacity`` kept; ``None`` when it gets none. ``k = 1`` merges the shards into one buffer.

    Example:
        >>> def shard(values):
        ...     return {"transitions": {"x": torch.tensor(values)}, "position": 0, "size": len(values)}
        >>> dealt([shard([1, 2, 3]), shard([10, 20])], 1, 0, 8)["transitions"]["x"].tolist()
        [1, 2, 10, 3, 20]
        >>> dealt([shard([1, 2, 3]), shard([10, 20])], 2, 1, 8)["transitions"]["x"].tolist()
        [2, 3]
    """
    kept = [s for s in shards if s is not None and int(s["size"]) > 0]
    if not kept:
        return None
    parts, ages = [], []
    for s in kept:
        size = int(s["size"])
        # A full ring buffer's oldest row is at its write position (a filling one's position is its size).
        oldest_first = (torch.arange(size) + int(s["position"])) % size
        parts.append({key: _rows(value, oldest_first) for key, value in s["transitions"].items()})
        ages.append(torch.arange(size - 1, -1, -1))
    order = torch.argsort(-torch.cat(ages), stable=True)[rank::k][-capacity:]
    if order.numel() == 0:
        return None
    transitions = {key: _rows(_cat([p[key] for p in parts]), order) for key in parts[0]}
    return {"transitions": transitions, "position": order.numel() % capacity, "size": order.numel()}
