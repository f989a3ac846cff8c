"""Collection on data-parallel ranks: each rank plays its slice of the env copies, and every rank holds the whole
rollout.

Rank r of K holds copies ``[start, stop)`` of E (:meth:`~marljoint.distributed.ranks.RankGroup.slice_of`, the one
slicing rule of every multi-process collection) in this process, each seeded and sampled by its global index and
evaluated at its rows of an E-row batch (:class:`~marljoint.collect.padded.PaddedPolicy`), so its piece is exactly
that slice of a one-process rollout. The pieces are all-gathered and written side by side
(:func:`~marljoint.collect.slices.assemble`): every rank ends with the one-process rollout, bit for bit, from which it
computes the same update. The saved state is every rank's slice in the Ray collector's format (one snapshot per
slice), so a run saved with any number of ranks, workers or actors resumes with any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marljoint.collect.base import ActingPolicy, rollout_storage
from marljoint.collect.local import LocalCollector
from marljoint.collect.rollout import JointRollout
from marljoint.collect.slices import assemble, rollout_piece
from marljoint.collect.snapshots import cut_memory, read_memory, read_state, resliced
from marljoint.distributed.ranks import RankGroup
from marljoint.env.base import JointEnv, split_copies
from marljoint.policies.distributions import BehaviourPolicy

__all__ = ["RankCollector"]


class RankCollector:
    """A :class:`~marljoint.collect.Collector` of one rank: plays this rank's slice, returns the whole rollout.

    Args:
        env: this rank's copies (``first_copy`` = the slice's start, as
            :func:`~marljoint.run.build.make_env` builds them with ranks).
        seed: the collection seed (env resets, the copies' noise generators).
        num_envs: E, the copies of all ranks together.
        ranks: the run's process group.

    Raises:
        ValueError: if ``env`` does not hold exactly this rank's slice of the ``num_envs`` copies.
    """

    def __init__(self, env: JointEnv, seed: int, num_envs: int, ranks: RankGroup) -> None:
        self.slices = split_copies(num_envs, ranks.world_size)
        start, stop = self.slices[ranks.rank]
        first = int(getattr(env, "first_copy", 0))
        if (first, first + env.num_envs) != (start, stop):
            raise ValueError(
                f"rank {ranks.rank} of {ranks.world_size} steps env copies [{start}, {stop}) of num_envs={num_envs}, "
                f"but its env holds copies [{first}, {first + env.num_envs}); build it with "
                f"PettingZooJointEnv(env_fn, num_envs={stop - start}, seed=seed, first_copy={start}) "
                "(marljoint.run.build.make_env(spec, ranks=ranks) does)"
            )
        self.ranks = ranks
        self.num_envs = int(num_envs)
        self.local = LocalCollector(env, seed, first_copy=start, batch_rows=self.num_envs)
        """The collector of this rank's copies."""
        self._storage: JointRollout | None = None

    def collect(self, policy: ActingPolicy, steps: int, behaviour: BehaviourPolicy | None = None) -> JointRollout:
        """Plays ``steps`` joint steps of this rank's copies, then gathers every rank's piece: the rollout of all E
        copies (every rank calls it together; its storage is reused by the next call)."""
        piece = rollout_piece(self.local.collect(policy, steps, behaviour))
        pieces = self.ranks.all_gather_object(piece)
        self._storage = rollout_storage(self._storage, self.local.env.spec, steps, self.num_envs, policy.device)
        assemble(self._storage, pieces, self.slices)
        return self._storage

    def state(self) -> dict[str, Any] | None:
        """Every rank's copies and noise generators, ``{"workers": [snapshot per rank]}`` on every rank (the Ray
        collector's format, readable by any collector); ``None`` before the first rollout.

        A rank whose copies cannot be saved still takes part in the gather, with its error: every rank then raises,
        so that no rank waits for it (and every rank leaves the checkpoint the same way).

        Raises:
            TypeError: on every rank, when a rank's env has no ``get_state()`` or cannot be pickled.
            RuntimeError: on the other ranks, when a rank failed otherwise (that rank raises its own error).
        """
        try:
            mine: tuple[str, Any] = ("ok", self.local.state())
        except Exception as exc:  # reported to every rank by the gather below
            mine = ("error", (isinstance(exc, TypeError), " ".join(str(exc).split()) or type(exc).__name__), exc)
        gathered = self.ranks.all_gather_object(mine[:2])
        failed = [(rank, what) for rank, (kind, what) in enumerate(gathered) if kind == "error"]
        if failed:
            _raise_state_failure(mine, failed, self.ranks.rank)
        snapshots = [what for _, what in gathered]
        if all(s is None for s in snapshots):
            return None
        return {"workers": snapshots}

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores any collector's saved state over the same E copies (every rank is given the whole state and
        restores its slice); ``None`` resets the copies at the next rollout.

        Raises:
            ValueError: for a state that is unreadable or holds another number of copies.
        """
        if state is None:
            self.local.load_state(None)
            return
        env, generators = resliced(read_state(state), self.slices)[self.ranks.rank]
        mine: dict[str, Any] = {"env": env} if generators is None else {"env": env, "copy_generators": generators}
        memory = read_memory(state)
        if memory is not None:
            mine["memory"] = cut_memory(memory, *self.slices[self.ranks.rank])
        self.local.load_state(mine)

    def close(self) -> None:
        """Nothing to release: the env belongs to the caller, the process group to the run."""


def _raise_state_failure(mine: tuple[Any, ...], failed: list[tuple[int, Any]], rank: int) -> None:
    """Raises, on every rank, the failure of the ranks ``failed`` to save their copies (``[(rank, (is a TypeError,
    message))]``): the failing rank its own error, every other rank a TypeError where the first failing rank's was
    one, else a RuntimeError, naming that rank and its message."""
    if mine[0] == "error":
        raise mine[2]
    first, (type_error, message) = failed[0]
    text = f"rank {first} could not save its env copies' state: {message}"
    if type_error:
        raise TypeError(text)
    raise RuntimeError(f"{text}; the newest checkpoint is kept: resume from it once the env is fixed")
