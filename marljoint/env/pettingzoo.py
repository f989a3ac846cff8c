"""The adapter from any PettingZoo environment (parallel or turn-based AEC) to a :class:`~marljoint.env.JointEnv`.

:class:`PettingZooJointEnv` builds the env copies, checks them (:mod:`~marljoint.env.validation`), seeds their
episodes, keeps each episode's return and length, and takes snapshots (:mod:`~marljoint.env.snapshots`); one copy
is reset and stepped by the adapter of its kind, :class:`~marljoint.env.parallel.ParallelAdapter` or
:class:`~marljoint.env.turn_based.TurnBasedAdapter`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from pettingzoo.utils.env import AECEnv

from marljoint.env.adapter import PettingZooAdapter
from marljoint.env.base import JointObs, JointStep
from marljoint.env.parallel import ParallelAdapter
from marljoint.env.snapshots import (
    dump_snapshot,
    join_snapshots,
    load_snapshot,
    restore_buffers,
    snapshot_buffers,
    split_snapshot,
    transplant,
)
from marljoint.env.spaces import JointSpec, action_layout, group_agents, observation_layout
from marljoint.env.turn_based import TurnBasedAdapter, playable
from marljoint.env.validation import (
    check_actions,
    check_copy_counts,
    check_finite,
    check_identical_copies,
    check_pettingzoo_env,
    resolve_factory,
)
from marljoint.trust import TrustKeyError

__all__ = ["EPISODE_LIMIT_NAMES", "PettingZooJointEnv", "episode_limit"]


EPISODE_LIMIT_NAMES = ("max_cycles", "max_steps", "max_episode_steps")
"""Attributes that state an env's step limit, in the order they are looked for (``max_cycles`` is PettingZoo's)."""


def episode_limit(env: Any) -> int | None:
    """The most steps an episode of ``env`` lasts, when the env states it.

    Looks for :data:`EPISODE_LIMIT_NAMES` on the env, then on what it wraps (``env``, ``aec_env``, ``unwrapped``:
    SuperSuit's and PettingZoo's wrappers and conversions), and takes the first positive integer found.

    Args:
        env: a PettingZoo ``ParallelEnv`` or ``AECEnv``, possibly wrapped.

    Returns:
        The limit in steps (an AEC env's counts cycles of moves, as its ``max_cycles`` does), or ``None`` when no
        layer states one.
    """
    seen: set[int] = set()
    layers = [env]
    while layers:
        layer = layers.pop(0)
        if layer is None or id(layer) in seen or len(seen) >= 64:
            continue
        seen.add(id(layer))
        for name in EPISODE_LIMIT_NAMES:
            value = _attribute(layer, name)
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1:
                return int(value)
        layers.extend(_attribute(layer, name) for name in ("env", "aec_env", "unwrapped"))
    return None


def _attribute(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)``, also when reading it raises (a property of a closed env, a wrapper refusing)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


class PettingZooJointEnv:
    """E copies of a PettingZoo env stepped together, as fixed-shape arrays (a :class:`JointEnv`).

    Agents keep ``possible_agents`` order. Agents with identical spaces form a group; observations, actions and masks
    are arrays per group. Parallel envs move all agents at once; turn-based (AEC) envs, and PettingZoo's turn-based
    parallel conversions of them, are played one move per step, with ``acting`` marking the agent to move and
    rewards credited to every agent on the step they arrive. Both kinds are this one class, which resets and steps
    each copy through the adapter of its kind (:class:`~marljoint.env.parallel.ParallelAdapter`,
    :class:`~marljoint.env.turn_based.TurnBasedAdapter`).

    Example:
        >>> from marljoint_envs import counter_v0
        >>> env = PettingZooJointEnv(counter_v0.parallel_env, num_envs=2, seed=0)
        >>> first = env.reset()
        >>> first.obs[0].shape  # [E, n_g, obs_size]
        (2, 2, 1)
        >>> out = env.step([np.ones((2, 2), dtype=np.int64)])
        >>> out.rewards.tolist()
        [[1.0, 1.0], [1.0, 1.0]]

    Args:
        env_fn: a function returning a new ``ParallelEnv`` or ``AECEnv`` each call, or a PettingZoo env module.
        num_envs: number of copies E.
        seed: seed used by the first :meth:`reset` when it is given none. Copy e is seeded with ``seed + e``.
        first_copy: the global index of the first copy, for an env that holds copies ``[first_copy, first_copy + E)``
            of a larger set (a collection worker's slice): copy e is seeded as copy ``first_copy + e`` of the set.

    Raises:
        ValueError: for unsupported spaces (naming the agent, the space and the fix), or copies that disagree.
        TypeError: if ``env_fn`` does not build PettingZoo envs.
    """

    def __init__(self, env_fn: Any, num_envs: int = 1, seed: int | None = None, first_copy: int = 0) -> None:
        check_copy_counts(num_envs, first_copy)
        self.first_copy = int(first_copy)
        """Global index of this env's first copy (0 unless it holds one slice of a larger set)."""
        factory = resolve_factory(env_fn)
        self.env_fn: Callable[[], Any] = factory
        """The factory building one env copy (what remote rollout workers rebuild the copies with)."""
        self.num_envs = int(num_envs)
        self._seed = seed
        envs = [playable(factory()) for _ in range(self.num_envs)]
        check_pettingzoo_env(envs[0])
        agents, obs_spaces, act_spaces = check_identical_copies(envs)
        turn_based = isinstance(envs[0], AECEnv)
        obs_layouts = tuple(observation_layout(a, s) for a, s in zip(agents, obs_spaces))
        act_layouts = tuple(action_layout(a, s) for a, s in zip(agents, act_spaces))
        self.spec = JointSpec(
            agents=agents,
            observations=obs_layouts,
            actions=act_layouts,
            groups=group_agents(agents, obs_layouts, act_layouts),
            turn_based=turn_based,
            episode_limit=episode_limit(envs[0]),
        )
        adapter = TurnBasedAdapter if turn_based else ParallelAdapter
        self._adapter: PettingZooAdapter = adapter(envs, self.spec, obs_spaces, act_spaces, self.first_copy)
        self._episode_seeds: list[np.random.Generator] = []
        self.episode_seed_source: Callable[[int], int | None] | None = None
        """Called with a copy's index each time that copy is reset (by :meth:`reset`, or by :meth:`step` when its
        episode ends), before the reset: an ``int`` it returns seeds that reset in place of the copy's own seed
        stream (which advances all the same), ``None`` keeps the stream's. ``None`` (the default): no hook. For
        callers that choose the episodes, e.g. the same chance outcomes for every meta-game profile
        (:func:`~marljoint.best_response.simulate_profiles` with ``episode_seeds``)."""

    # ------------------------------------------------------------------ public API
    @property
    def envs(self) -> list[Any]:
        """The wrapped PettingZoo env copies (read them, do not step them)."""
        return list(self._adapter.envs)

    @property
    def observation_spaces(self) -> tuple[gymnasium.Space, ...]:
        """The raw PettingZoo observation space of each agent, in ``possible_agents`` order."""
        return self._adapter.observation_spaces

    @property
    def action_spaces(self) -> tuple[gymnasium.Space, ...]:
        """The raw PettingZoo action space of each agent, in ``possible_agents`` order."""
        return self._adapter.action_spaces

    def reset(self, seed: int | None = None) -> JointObs:
        """Resets every copy.

        Args:
            seed: copy e is reset with ``seed + e``; ``None`` uses the constructor's seed on the first reset, and
                fresh entropy after that. Each later episode of copy e is reset with a seed drawn from a generator
                derived from ``(seed, e)``, so the whole stream is reproducible.

        Returns:
            The first :class:`JointObs` (arrays owned by the env, overwritten on the next call).
        """
        if seed is None:
            seed, self._seed = self._seed, None
        # Every later episode of copy e is seeded from this generator: some envs reseed from entropy when reset
        # with seed=None, which would make the stream irreproducible.
        root = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed) % 2**63, 0x6A6F696E74])
        # Children are addressed by the copy's global index, so a worker holding copies [a, b) of a larger set
        # draws exactly the streams those copies would draw in one process.
        offset = self.first_copy
        self._episode_seeds = [
            np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=(offset + e,)))
            for e in range(self.num_envs)
        ]
        adapter = self._adapter
        for e in range(self.num_envs):
            first_seed = int(self._episode_seeds[e].integers(2**31)) if seed is None else int(seed) + offset + e
            adapter.reset_copy(e, self._chosen_seed(e, first_seed))
        adapter.returns[:] = 0.0
        adapter.lengths[:] = 0
        adapter.terminated[:] = False
        adapter.truncated[:] = False
        check_finite(self.spec, adapter.rewards, adapter.obs, adapter.final_obs, self.first_copy)
        return adapter.joint_obs()

    def step(self, actions: Sequence[np.ndarray]) -> JointStep:
        """Steps every copy once (see :class:`~marljoint.env.JointStep` for the exact semantics).

        Args:
            actions: per group, ``[E, n_g, *action_shape_g]``; torch tensors are accepted.

        Raises:
            ValueError: wrong number of groups, wrong shape, out-of-range or masked-out actions, non-finite Box
                actions, or non-finite observations from the env; each names the agent and the value.
        """
        if not self._episode_seeds:
            raise RuntimeError("step() was called before reset(); call env.reset(seed=...) first")
        adapter = self._adapter
        actions = check_actions(actions, self.spec, adapter.acting, adapter.masks, adapter.masked_groups)
        adapter.start_step()
        finished_returns: list[np.ndarray] = []
        finished_lengths: list[int] = []
        done = [e for e in range(self.num_envs) if adapter.step_copy(e, actions)]
        adapter.returns += adapter.rewards
        adapter.lengths += 1
        for e in done:
            finished_returns.append(adapter.returns[e].copy())
            finished_lengths.append(int(adapter.lengths[e]))
            adapter.returns[e] = 0.0
            adapter.lengths[e] = 0
            adapter.reset_copy(e, self._chosen_seed(e, int(self._episode_seeds[e].integers(2**31))))
            adapter.reset_envs[e] = True
        check_finite(self.spec, adapter.rewards, adapter.obs, adapter.final_obs, self.first_copy)
        return adapter.joint_step(finished_returns, finished_lengths)

    def close(self) -> None:
        """Closes every copy."""
        for env in self._adapter.envs:
            env.close()

    def get_state(self) -> bytes:
        """Snapshot of every copy mid-episode, for resuming training bit-identically.

        Holds the pickled PettingZoo env copies (with their random generators; ``EzPickle`` envs are pickled
        attribute by attribute, not rebuilt from their constructor arguments), the per-copy episode-seed generators
        and the adapter's buffers (current observations, masks, running returns). pygame surfaces and fonts, which
        only serve rendering, are left out. The bytes are signed with the user's key (:mod:`marljoint.trust`), so
        that only this user's snapshots are ever unpickled.

        Returns:
            Bytes for :meth:`set_state`.

        Raises:
            TypeError: if an env copy cannot be pickled (e.g. it holds a physics engine or an open window); the
                message names the env and the reason.
        """
        state = {
            "num_envs": self.num_envs,
            "agents": self.spec.agents,
            "seed": self._seed,
            "envs": self._adapter.envs,
            "episode_seeds": self._episode_seeds,
            "buffers": snapshot_buffers(self._adapter),
        }
        try:
            return dump_snapshot(state)
        except TrustKeyError:
            raise  # the user's key file, not the env: reported as itself
        except Exception as exc:  # pickling raises TypeError, PicklingError, AttributeError, ...
            raise TypeError(f"{self!r} cannot be pickled ({type(exc).__name__}: {exc})") from exc

    def set_state(self, state: bytes) -> JointObs:
        """Restores a :meth:`get_state` snapshot taken from an adapter of the same env and ``num_envs``.

        The current env copies are replaced by the snapshot's (and closed, unless the snapshot's copies take over
        their pygame render resources, which snapshots leave out).

        Returns:
            The restored current :class:`JointObs` (arrays owned by the env), where the next step starts.

        Raises:
            marljoint.trust.SnapshotTrustError: if the snapshot is not signed with this user's key (checked before
                anything is unpickled); :func:`marljoint.trust.resign` vouches for a snapshot you trust.
            ValueError: if the snapshot is unreadable or was taken with other agents or another ``num_envs``.
        """
        snapshot = load_snapshot(state)
        if snapshot["num_envs"] != self.num_envs or tuple(snapshot["agents"]) != self.spec.agents:
            raise ValueError(
                f"the env state holds {snapshot['num_envs']} copies of agents {list(snapshot['agents'])}, this env "
                f"has {self.num_envs} copies of {list(self.spec.agents)}; restore it into the same env"
            )
        restored = list(snapshot["envs"])
        for old_env, new_env in zip(self._adapter.envs, restored):
            # An env whose render resources were handed over stays open: closing it could release them.
            if not transplant(new_env, old_env, set()):
                old_env.close()
        self._adapter.envs = restored
        self._seed = snapshot["seed"]
        self._episode_seeds = list(snapshot["episode_seeds"])
        restore_buffers(self._adapter, snapshot["buffers"])
        return self._adapter.joint_obs()

    @staticmethod
    def split_state(state: bytes, slices: Sequence[tuple[int, int]]) -> list[bytes]:
        """Cuts a :meth:`get_state` snapshot of E copies into snapshots of the copies ``[start, stop)`` of each
        slice, each restorable into an adapter of that many copies (a collection worker's, for instance).

        Raises:
            ValueError: if the snapshot is unreadable or the slices leave its copies.
        """
        return split_snapshot(state, slices)

    @staticmethod
    def state_copies(state: bytes) -> int:
        """How many env copies a :meth:`get_state` snapshot holds.

        Raises:
            ValueError: if the snapshot is unreadable.
        """
        return int(load_snapshot(state)["num_envs"])

    @staticmethod
    def join_states(states: Sequence[bytes]) -> bytes:
        """Joins snapshots of consecutive slices of copies (:meth:`split_state`, or each worker's
        :meth:`get_state`) into one snapshot of all their copies, in order.

        Raises:
            ValueError: if a snapshot is unreadable or they hold different agents.
        """
        return join_snapshots(states)

    def __repr__(self) -> str:
        kind = "AEC" if self.spec.turn_based else "parallel"
        return f"PettingZooJointEnv({kind}, num_envs={self.num_envs}, agents={list(self.spec.agents)})"

    def _chosen_seed(self, e: int, own: int) -> int:
        """The seed of copy e's next reset: :attr:`episode_seed_source`'s when it gives one, else ``own``."""
        if self.episode_seed_source is None:
            return own
        chosen = self.episode_seed_source(e)
        if chosen is None:
            return own
        if not isinstance(chosen, (int, np.integer)) or isinstance(chosen, bool):
            raise TypeError(f"episode_seed_source returned {chosen!r} for copy {e}; return an int or None")
        return int(chosen)
