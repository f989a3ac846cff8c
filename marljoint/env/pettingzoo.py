"""The adapter from any PettingZoo environment (parallel or turn-based AEC) to a :class:`~marljoint.env.JointEnv`."""

from __future__ import annotations

import copyreg
import io
import pickle
import types
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import EzPickle
from pettingzoo.utils.conversions import turn_based_aec_to_parallel_wrapper
from pettingzoo.utils.env import AECEnv, ParallelEnv

from marljoint.env.base import EnvCopyError, JointObs, JointStep
from marljoint.env.spaces import (
    ActionLayout,
    JointSpec,
    action_layout,
    group_agents,
    observation_layout,
    process_observation,
)
from marljoint.trust import sign, verify

__all__ = ["EPISODE_LIMIT_NAMES", "PettingZooJointEnv", "episode_limit"]

EnvFactory = Callable[[], "ParallelEnv | AECEnv"]

def _set_attributes(obj: Any, attributes: dict[str, Any]) -> None:
    obj.__dict__.update(attributes)


class _StatePickler(cloudpickle.Pickler):
    """Pickles env objects with their current attributes.

    Gymnasium's and PettingZoo's ``EzPickle`` pickles an env as its constructor arguments, which rebuilds a fresh
    env: the episode in progress would be lost. Here such objects are pickled attribute by attribute instead.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, EzPickle) and not isinstance(obj, type) and hasattr(obj, "__dict__"):
            return copyreg.__newobj__, (type(obj),), obj.__dict__, None, None, _set_attributes
        return super().reducer_override(obj)

    def persistent_id(self, obj: Any) -> Any:
        # pygame surfaces and fonts only serve rendering and cannot be pickled: they are left out, and set_state
        # takes them from the env copies it replaces.
        if type(obj).__module__.partition(".")[0] == "pygame":
            return "render-resource"
        return None


class _LeftOut:
    """Stands for an object :class:`_StatePickler` left out, until :func:`_transplant` replaces it."""


class _StateUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        if pid != "render-resource":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return _LeftOut()


def _transplant(restored: Any, live: Any, seen: set[int]) -> int:
    """Replaces the left-out attributes of ``restored`` (and of the objects it holds) with ``live``'s.

    Returns:
        How many were replaced.
    """
    if id(restored) in seen or not hasattr(restored, "__dict__") or type(restored) is not type(live):
        return 0
    seen.add(id(restored))
    replaced = 0
    for name, value in list(vars(restored).items()):
        counterpart = vars(live).get(name)
        if isinstance(value, _LeftOut):
            restored.__dict__[name] = counterpart
            replaced += 1
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            replaced += _transplant(value, counterpart, seen)
    return replaced


# The adapter's arrays that carry over between steps (get_state / set_state).
_STATE_BUFFERS = (
    "_obs",
    "_final_obs",
    "_masks",
    "_alive",
    "_acting",
    "_rewards",
    "_terminated",
    "_truncated",
    "_reset_envs",
    "_returns",
    "_lengths",
    "_ended",
)


_MISSING = object()
"""Marks a key missing from an env's dict (an observation may legitimately be ``None``)."""


def _resolve_factory(env_fn: Any) -> Callable[[], Any]:
    """Accepts a factory, or a PettingZoo env module (uses its ``parallel_env``, else its ``env``)."""
    if isinstance(env_fn, types.ModuleType):
        for name in ("parallel_env", "env"):
            factory = getattr(env_fn, name, None)
            if callable(factory):
                return factory
        raise TypeError(
            f"module {env_fn.__name__!r} has neither parallel_env() nor env(); pass a function that builds the env"
        )
    if isinstance(env_fn, (ParallelEnv, AECEnv)):
        raise TypeError(
            "PettingZooJointEnv needs a function that builds a new env (one per copy), not an env instance; "
            "pass e.g. `lambda: simple_spread_v3.parallel_env()` or the env module itself"
        )
    if not callable(env_fn):
        raise TypeError(f"env_fn must be callable and return a PettingZoo env, got {type(env_fn).__name__}")
    return env_fn


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


def _playable(env: Any) -> Any:
    """Returns the env to step: PettingZoo's turn-based parallel conversion is played as the AEC env it wraps."""
    # That conversion asks every agent for an action but uses only the mover's; stepped as a parallel env, every
    # agent would count as acting, and the waiting one would carry an all-zero action mask.
    if isinstance(env, turn_based_aec_to_parallel_wrapper):
        return env.aec_env
    return env


class PettingZooJointEnv:
    """E copies of a PettingZoo env stepped together, as fixed-shape arrays (a :class:`JointEnv`).

    Agents keep ``possible_agents`` order. Agents with identical spaces form a group; observations, actions and masks
    are arrays per group. Parallel envs move all agents at once; turn-based (AEC) envs, and PettingZoo's turn-based
    parallel conversions of them, are played one move per step, with ``acting`` marking the agent to move and
    rewards credited to every agent on the step they arrive.

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
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if not isinstance(first_copy, (int, np.integer)) or isinstance(first_copy, bool) or first_copy < 0:
            raise ValueError(f"first_copy must be an integer >= 0, got {first_copy!r}")
        self.first_copy = int(first_copy)
        """Global index of this env's first copy (0 unless it holds one slice of a larger set)."""
        factory = _resolve_factory(env_fn)
        self.env_fn: Callable[[], Any] = factory
        """The factory building one env copy (what remote rollout workers rebuild the copies with)."""
        self.num_envs = int(num_envs)
        self._seed = seed
        self._envs = [_playable(factory()) for _ in range(self.num_envs)]
        first = self._envs[0]
        if not isinstance(first, (ParallelEnv, AECEnv)):
            raise TypeError(
                f"env_fn returned {type(first).__name__}, which is neither a PettingZoo ParallelEnv nor an AECEnv"
            )
        self._turn_based = isinstance(first, AECEnv)
        agents = tuple(first.possible_agents)
        if not agents:
            raise ValueError("the env has no possible_agents; marljoint needs at least one agent")
        for e, env in enumerate(self._envs[1:], start=1):
            if tuple(env.possible_agents) != agents:
                raise ValueError(
                    f"env copy {e} has possible_agents {list(env.possible_agents)}, copy 0 has {list(agents)}; "
                    "env_fn must build identical envs"
                )
        self._obs_spaces: tuple[gymnasium.Space, ...] = tuple(first.observation_space(a) for a in agents)
        self._act_spaces: tuple[gymnasium.Space, ...] = tuple(first.action_space(a) for a in agents)
        for e, env in enumerate(self._envs[1:], start=1):
            for a, obs_space, act_space in zip(agents, self._obs_spaces, self._act_spaces):
                if env.observation_space(a) != obs_space or env.action_space(a) != act_space:
                    raise ValueError(
                        f"env copy {e} gives agent {a!r} the spaces {env.observation_space(a)} / "
                        f"{env.action_space(a)}, "
                        f"copy 0 gives {obs_space} / {act_space}; env_fn must build identical envs"
                    )
        obs_layouts = tuple(observation_layout(a, s) for a, s in zip(agents, self._obs_spaces))
        act_layouts = tuple(action_layout(a, s) for a, s in zip(agents, self._act_spaces))
        self.spec = JointSpec(
            agents=agents,
            observations=obs_layouts,
            actions=act_layouts,
            groups=group_agents(agents, obs_layouts, act_layouts),
            turn_based=self._turn_based,
            episode_limit=episode_limit(first),
        )
        self._index = {a: i for i, a in enumerate(agents)}
        self._episode_seeds: list[np.random.Generator] = []
        self.episode_seed_source: Callable[[int], int | None] | None = None
        """Called with a copy's index each time that copy is reset (by :meth:`reset`, or by :meth:`step` when its
        episode ends), before the reset: an ``int`` it returns seeds that reset in place of the copy's own seed
        stream (which advances all the same), ``None`` keeps the stream's. ``None`` (the default): no hook. For
        callers that choose the episodes, e.g. the same chance outcomes for every meta-game profile
        (:func:`~marljoint.best_response.simulate_profiles` with ``episode_seeds``)."""
        self._slot = [self.spec.group_of(i) for i in range(len(agents))]
        self._direct_obs = [
            isinstance(space, spaces.Box) and tuple(space.shape) == layout.shape and not layout.has_mask
            for space, layout in zip(self._obs_spaces, obs_layouts)
        ]
        # Groups whose env has shown an action mask; the others skip the per-step mask check.
        self._masked_groups = [False] * len(self.spec.groups)
        # Whether a step that keeps the same agents may just overwrite their observations (see _refill_in_place).
        self._plain_obs = all(self._direct_obs)
        self._allocate()

    # ------------------------------------------------------------------ buffers
    def _allocate(self) -> None:
        E, N = self.num_envs, self.spec.num_agents
        groups = self.spec.groups
        self._obs = tuple(np.zeros((E, g.size, *g.observation.shape), g.observation.dtype) for g in groups)
        self._final_obs = tuple(np.zeros_like(o) for o in self._obs)
        self._masks = tuple(
            np.ones((E, g.size, g.action.mask_size), bool) if g.action.kind != "box" else None for g in groups
        )
        self._alive = np.zeros((E, N), bool)
        self._acting = np.zeros((E, N), bool)
        self._rewards = np.zeros((E, N), np.float32)
        self._terminated = np.zeros((E, N), bool)
        self._truncated = np.zeros((E, N), bool)
        self._final_waiting = np.zeros((E, N), bool)
        self._reset_envs = np.zeros(E, bool)
        self._returns = np.zeros((E, N), np.float64)
        self._lengths = np.zeros(E, np.int64)
        # AEC agents whose end was already reported but who still wait for their dead step.
        self._ended = np.zeros((E, N), bool)

    # ------------------------------------------------------------------ public API
    @property
    def envs(self) -> list[Any]:
        """The wrapped PettingZoo env copies (read them, do not step them)."""
        return list(self._envs)

    @property
    def observation_spaces(self) -> tuple[gymnasium.Space, ...]:
        """The raw PettingZoo observation space of each agent, in ``possible_agents`` order."""
        return self._obs_spaces

    @property
    def action_spaces(self) -> tuple[gymnasium.Space, ...]:
        """The raw PettingZoo action space of each agent, in ``possible_agents`` order."""
        return self._act_spaces

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
        for e in range(self.num_envs):
            first_seed = int(self._episode_seeds[e].integers(2**31)) if seed is None else int(seed) + offset + e
            self._reset_copy(e, self._chosen_seed(e, first_seed))
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._terminated[:] = False
        self._truncated[:] = False
        self._check_finite()
        return JointObs(self._obs, self._alive, self._acting, self._masks)

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
        actions = self._check_actions(actions)
        self._rewards[:] = 0.0
        self._terminated[:] = False
        self._truncated[:] = False
        if self._turn_based:
            self._final_waiting[:] = False
        self._reset_envs[:] = False
        finished_returns: list[np.ndarray] = []
        finished_lengths: list[int] = []
        step_copy = self._step_aec if self._turn_based else self._step_parallel
        done = [e for e in range(self.num_envs) if step_copy(e, actions)]
        self._returns += self._rewards
        self._lengths += 1
        for e in done:
            finished_returns.append(self._returns[e].copy())
            finished_lengths.append(int(self._lengths[e]))
            self._returns[e] = 0.0
            self._lengths[e] = 0
            self._reset_copy(e, self._chosen_seed(e, int(self._episode_seeds[e].integers(2**31))))
            self._reset_envs[e] = True
        self._check_finite()
        N = self.spec.num_agents
        return JointStep(
            obs=self._obs,
            alive=self._alive,
            acting=self._acting,
            action_masks=self._masks,
            rewards=self._rewards,
            terminated=self._terminated,
            truncated=self._truncated,
            final_obs=self._final_obs,
            reset_envs=self._reset_envs,
            episode_returns=np.asarray(finished_returns, np.float64).reshape(-1, N),
            episode_lengths=np.asarray(finished_lengths, np.int64),
            final_waiting=self._final_waiting if self._turn_based else None,
        )

    def close(self) -> None:
        """Closes every copy."""
        for env in self._envs:
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
            "envs": self._envs,
            "episode_seeds": self._episode_seeds,
            "buffers": {name: getattr(self, name) for name in _STATE_BUFFERS},
        }
        try:
            return _dump_snapshot(state)
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
        snapshot = _load_snapshot(state)
        if snapshot["num_envs"] != self.num_envs or tuple(snapshot["agents"]) != self.spec.agents:
            raise ValueError(
                f"the env state holds {snapshot['num_envs']} copies of agents {list(snapshot['agents'])}, this env "
                f"has {self.num_envs} copies of {list(self.spec.agents)}; restore it into the same env"
            )
        restored = list(snapshot["envs"])
        for old_env, new_env in zip(self._envs, restored):
            # An env whose render resources were handed over stays open: closing it could release them.
            if not _transplant(new_env, old_env, set()):
                old_env.close()
        self._envs = restored
        self._seed = snapshot["seed"]
        self._episode_seeds = list(snapshot["episode_seeds"])
        for name, value in snapshot["buffers"].items():
            target = getattr(self, name)
            if isinstance(target, tuple):
                for dst, src in zip(target, value):
                    if dst is not None:
                        np.copyto(dst, src)
            else:
                np.copyto(target, value)
        return JointObs(self._obs, self._alive, self._acting, self._masks)

    @staticmethod
    def split_state(state: bytes, slices: Sequence[tuple[int, int]]) -> list[bytes]:
        """Cuts a :meth:`get_state` snapshot of E copies into snapshots of the copies ``[start, stop)`` of each
        slice, each restorable into an adapter of that many copies (a collection worker's, for instance).

        Raises:
            ValueError: if the snapshot is unreadable or the slices leave its copies.
        """
        snapshot = _load_snapshot(state)
        total = snapshot["num_envs"]
        if any(not 0 <= a < b <= total for a, b in slices):
            raise ValueError(f"slices {list(slices)} do not fit the snapshot's {total} copies")
        return [_dump_snapshot(_slice_snapshot(snapshot, a, b)) for a, b in slices]

    @staticmethod
    def state_copies(state: bytes) -> int:
        """How many env copies a :meth:`get_state` snapshot holds.

        Raises:
            ValueError: if the snapshot is unreadable.
        """
        return int(_load_snapshot(state)["num_envs"])

    @staticmethod
    def join_states(states: Sequence[bytes]) -> bytes:
        """Joins snapshots of consecutive slices of copies (:meth:`split_state`, or each worker's
        :meth:`get_state`) into one snapshot of all their copies, in order.

        Raises:
            ValueError: if a snapshot is unreadable or they hold different agents.
        """
        parts = [_load_snapshot(s) for s in states]
        if not parts:
            raise ValueError("join_states needs at least one snapshot")
        if any(tuple(p["agents"]) != tuple(parts[0]["agents"]) for p in parts):
            raise ValueError("the snapshots hold different agents; they are not slices of one set of copies")
        try:
            buffers = {name: _join_buffers([p["buffers"][name] for p in parts]) for name in parts[0]["buffers"]}
        except (KeyError, ValueError) as exc:
            raise ValueError(f"the snapshots hold copies of different envs ({exc}); join slices of one set") from None
        joined = {
            "num_envs": sum(p["num_envs"] for p in parts),
            "agents": parts[0]["agents"],
            "seed": parts[0]["seed"],
            "envs": [env for p in parts for env in p["envs"]],
            "episode_seeds": [g for p in parts for g in p["episode_seeds"]],
            "buffers": buffers,
        }
        return _dump_snapshot(joined)

    def __repr__(self) -> str:
        kind = "AEC" if self._turn_based else "parallel"
        return f"PettingZooJointEnv({kind}, num_envs={self.num_envs}, agents={list(self.spec.agents)})"

    # ------------------------------------------------------------------ observations and masks
    def _clear_copy(self, e: int) -> None:
        self._clear_state(e)
        self._ended[e] = False

    def _clear_state(self, e: int) -> None:
        """Zeroes copy e's observations, allows every action and marks every agent absent, before refilling."""
        for obs in self._obs:
            obs[e] = 0
        for mask in self._masks:
            if mask is not None:
                mask[e] = True
        self._alive[e] = False
        self._acting[e] = False

    def _write_obs(self, e: int, agent: str, raw: Any, target: tuple[np.ndarray, ...]) -> None:
        i = self._index[agent]
        g, j = self._slot[i]
        if self._direct_obs[i]:
            # Hot path: a Box observation already in its processed shape is copied straight into the buffer.
            try:
                target[g][e, j] = raw
                return
            except (ValueError, TypeError):
                pass  # fall through to the checked path, which explains the problem
        target[g][e, j] = process_observation(agent, self._obs_spaces[i], self.spec.observations[i], raw)

    def _write_mask(self, e: int, agent: str, raw_obs: Any, info: Any) -> None:
        i = self._index[agent]
        g, j = self._slot[i]
        mask_buf = self._masks[g]
        if mask_buf is None:
            return
        mask = None
        if self.spec.observations[i].has_mask:
            mask = raw_obs["action_mask"]
        elif isinstance(info, dict) and "action_mask" in info:
            mask = info["action_mask"]
        if mask is None:
            return  # the row was reset to all-allowed when the copy's state was cleared
        self._masked_groups[g] = True
        mask = np.asarray(mask).reshape(-1)
        if mask.size != mask_buf.shape[-1]:
            raise ValueError(
                f"agent {agent!r}: action mask of length {mask.size} does not fit its action space "
                f"{self._act_spaces[i]} (expected {mask_buf.shape[-1]} entries, one per choice of every head)"
            )
        mask_buf[e, j] = mask.astype(bool)

    def _check_finite(self) -> None:
        if not np.isfinite(self._rewards).all():
            e, i = np.argwhere(~np.isfinite(self._rewards))[0]
            raise ValueError(
                f"agent {self.spec.agents[i]!r} (env copy {e}): the env returned a non-finite reward "
                f"({self._rewards[e, i]}); fix the env, or clip rewards with supersuit.clip_reward_v0"
            )
        for g, group in enumerate(self.spec.groups):
            # Final-observation rows are only written for agents that end, and each write is checked here, so
            # a non-finite value anywhere in either buffer arrived with this step.
            for obs in (self._obs[g], self._final_obs[g]):
                if obs.dtype.kind != "f" or np.isfinite(obs).all():
                    continue
                bad = ~np.isfinite(obs.reshape(obs.shape[0], obs.shape[1], -1)).all(-1)
                e, j = np.argwhere(bad)[0]
                raise ValueError(
                    f"agent {group.agents[j]!r} (env copy {e}): the env returned a non-finite observation "
                    "(NaN or inf); fix the env, or clean it with supersuit.observation_lambda_v0(env, np.nan_to_num)"
                )

    # ------------------------------------------------------------------ actions
    def _check_actions(self, actions: Sequence[Any]) -> list[np.ndarray]:
        groups = self.spec.groups
        if isinstance(actions, np.ndarray) or len(actions) != len(groups):
            count = "an array" if isinstance(actions, np.ndarray) else f"{len(actions)} arrays"
            raise ValueError(
                f"step() needs one action array per agent group ({len(groups)} groups: "
                f"{[list(g.agents) for g in groups]}), got {count}; see env.spec.groups"
            )
        checked = []
        counts = self._acting
        for g, (group, raw) in enumerate(zip(groups, actions)):
            arr = raw.detach().cpu().numpy() if hasattr(raw, "detach") else np.asarray(raw)
            expected = (self.num_envs, group.size, *group.action.shape)
            if arr.shape != expected:
                raise ValueError(
                    f"actions for group {list(group.agents)} have shape {arr.shape}, expected {expected} "
                    f"([num_envs, agents in group, *action_shape] for {group.action.kind} actions)"
                )
            used = counts[:, list(group.agent_indices)]
            if group.action.kind == "box":
                self._check_box(group.agents, group.action, arr, used)
            else:
                arr = self._check_categorical(g, group.agents, group.action, arr, used)
            checked.append(arr)
        return checked

    def _check_box(self, agents: tuple[str, ...], layout: ActionLayout, arr: np.ndarray, used: np.ndarray) -> None:
        flat = arr.reshape(arr.shape[0], arr.shape[1], -1)
        bad = used & ~np.isfinite(flat).all(-1)
        if bad.any():
            e, j = np.argwhere(bad)[0]
            raise ValueError(f"agent {agents[j]!r} (env copy {e}): action {flat[e, j]} is not finite")
        tol = 1e-6
        outside = used & ((flat < layout.low - tol) | (flat > layout.high + tol)).any(-1)
        if outside.any():
            e, j = np.argwhere(outside)[0]
            raise ValueError(
                f"agent {agents[j]!r} (env copy {e}): action {flat[e, j]} is outside its Box bounds "
                f"[{layout.low}, {layout.high}]; clip it first (np.clip(action, low, high))"
            )

    def _check_categorical(
        self, g: int, agents: tuple[str, ...], layout: ActionLayout, arr: np.ndarray, used: np.ndarray
    ) -> np.ndarray:
        if arr.dtype.kind not in "iu":
            if arr.dtype.kind == "f" and np.array_equal(arr, np.round(arr)):
                arr = arr.astype(np.int64)
            else:
                raise ValueError(
                    f"actions for group {list(agents)} have dtype {arr.dtype}; {layout.kind} actions must be integers"
                )
        heads = arr.reshape(arr.shape[0], arr.shape[1], -1)
        nvec = np.asarray(layout.nvec)
        outside = used[..., None] & ((heads < 0) | (heads >= nvec))
        if outside.any():
            e, j, k = np.argwhere(outside)[0]
            raise ValueError(
                f"agent {agents[j]!r} (env copy {e}): action {heads[e, j].tolist()} is out of range for head {k} "
                f"with {nvec[k]} choices (valid: 0..{nvec[k] - 1})"
            )
        mask = self._masks[g]
        if mask is not None and self._masked_groups[g]:
            offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            allowed = np.take_along_axis(mask, np.where(used[..., None], heads, 0) + offsets, axis=-1)
            forbidden = used[..., None] & ~allowed
            if forbidden.any():
                e, j, k = np.argwhere(forbidden)[0]
                raise ValueError(
                    f"agent {agents[j]!r} (env copy {e}): action {heads[e, j].tolist()} is forbidden by its action "
                    f"mask (head {k}); sample from the masked distribution"
                )
        return arr

    def _env_action(self, i: int, value: np.ndarray) -> Any:
        layout = self.spec.actions[i]
        if layout.kind == "discrete":
            return int(value) + layout.start[0]
        if layout.kind == "multidiscrete":
            return value.astype(self._act_spaces[i].dtype) + np.asarray(layout.start, self._act_spaces[i].dtype)
        space = self._act_spaces[i]
        # Actions within the check's tolerance of a bound are clipped onto it, so the env always gets a member.
        return np.clip(value.reshape(layout.env_shape).astype(space.dtype), space.low, space.high)

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

    def _copy_error(self, e: int, call: str, exc: Exception) -> EnvCopyError:
        """The env's own exception from copy e's ``call``, naming the copy and the step of its episode."""
        if isinstance(exc, EnvCopyError):  # a joint env nested in the factory has named its copy already
            return exc
        step = int(self._lengths[e]) + 1 if call == "step" else 0
        return EnvCopyError(self.first_copy + e, call, step, type(exc).__name__, str(exc))

    # ------------------------------------------------------------------ parallel envs
    def _reset_copy(self, e: int, seed: int | None) -> None:
        self._clear_copy(e)
        env = self._envs[e]
        if self._turn_based:
            try:
                env.reset(seed=seed)
            except Exception as exc:
                raise self._copy_error(e, "reset", exc) from exc
            self._observe_aec(e, moves=0)
            if not self._acting[e].any():
                raise ValueError(f"env copy {e}: the AEC env has no agent to act right after reset")
            return
        try:
            result = env.reset(seed=seed)
        except Exception as exc:
            raise self._copy_error(e, "reset", exc) from exc
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                "ParallelEnv.reset() must return (observations, infos); this env returns "
                f"{type(result).__name__} (an old PettingZoo API)"
            )
        observations, infos = result
        for agent in env.agents:
            self._enter(e, agent, observations, infos)
        if not self._alive[e].any():
            raise ValueError(f"env copy {e}: reset() returned no live agent")

    def _enter(self, e: int, agent: str, observations: dict, infos: dict) -> None:
        i = self._index.get(agent)
        if i is None:
            raise ValueError(f"agent {agent!r} is not in possible_agents {list(self.spec.agents)}")
        raw = observations.get(agent, _MISSING)
        if raw is _MISSING:
            raise ValueError(f"env copy {e}: agent {agent!r} is in env.agents but has no observation")
        self._write_obs(e, agent, raw, self._obs)
        if self._masks[self._slot[i][0]] is not None:
            self._write_mask(e, agent, raw, infos.get(agent) if infos else None)
        self._alive[e, i] = True
        self._acting[e, i] = True

    def _step_parallel(self, e: int, actions: list[np.ndarray]) -> bool:
        # The hot path of every rollout: the copy's agent list is read once before and once after the step (a
        # wrapped env resolves each read through its wrapper chain), and flags live in Python locals.
        env = self._envs[e]
        index, slots, names = self._index, self._slot, self.spec.agents
        alive_row = self._alive[e]
        alive_before = [i for i in range(len(names)) if alive_row[i]]
        action_dict = {}
        for agent in env.agents:
            i = index[agent]
            if alive_row[i]:
                g, j = slots[i]
                action_dict[agent] = self._env_action(i, actions[g][e, j])
        try:
            observations, rewards, terminations, truncations, infos = env.step(action_dict)
        except Exception as exc:
            raise self._copy_error(e, "step", exc) from exc
        reward_row = self._rewards[e]
        for agent, reward in rewards.items():
            reward_row[index[agent]] = reward
        present = env.agents
        ended = set()
        for i in alive_before:
            agent = names[i]
            ended_term = bool(terminations.get(agent, False))
            ended_trunc = bool(truncations.get(agent, False))
            if not (ended_term or ended_trunc) and agent not in present:
                # The agent left without a flag (an API slip of the env): treat it as a terminal exit.
                ended_term = True
            if ended_term or ended_trunc:
                ended.add(i)
                self._terminated[e, i] = ended_term
                self._truncated[e, i] = ended_trunc and not ended_term
                if agent in observations:
                    self._write_obs(e, agent, observations[agent], self._final_obs)
                else:
                    g, j = slots[i]
                    self._final_obs[g][e, j] = self._obs[g][e, j]
        live_next = [a for a in present if index[a] not in ended] if ended else present
        if not live_next:
            return True
        if not ended and len(present) == len(alive_before) and self._refill_in_place(e, present, observations, infos):
            return False
        self._clear_state(e)
        for agent in live_next:
            self._enter(e, agent, observations, infos)
        return False

    def _refill_in_place(self, e: int, present: list[str], observations: dict, infos: dict) -> bool:
        """The common parallel step: the agents alive before it are the agents present after it.

        When every observation is a Box in its processed shape and no action mask has ever been seen (so every mask
        row is all-allowed), clearing the copy and re-entering each agent would only rewrite the same flags: the new
        observations are written over the old ones instead. Returns False when the step needs the full refill
        (which then rewrites everything this wrote).
        """
        if not self._plain_obs or any(self._masked_groups):
            return False
        index, slots, alive_row, obs = self._index, self._slot, self._alive[e], self._obs
        check_masks = any(mask is not None for mask in self._masks) and bool(infos)
        for agent in present:
            i = index.get(agent)
            if i is None or not alive_row[i]:
                return False
            raw = observations.get(agent, _MISSING)
            if raw is _MISSING:
                return False
            if check_masks:
                info = infos.get(agent)
                if isinstance(info, dict) and "action_mask" in info:
                    return False
            g, j = slots[i]
            try:
                obs[g][e, j] = raw
            except (ValueError, TypeError):
                return False
        return True

    # ------------------------------------------------------------------ AEC envs
    def _observe_aec(self, e: int, moves: int) -> None:
        """Reads copy e's observations and the mask of the agent to move, ``moves`` moves into its episode."""
        env = self._envs[e]
        self._clear_state(e)
        selected = env.agent_selection
        for agent in env.agents:
            i = self._index[agent]
            if env.terminations.get(agent, False) or env.truncations.get(agent, False) or self._ended[e, i]:
                continue
            raw = env.observe(agent)
            self._write_obs(e, agent, raw, self._obs)
            if agent == selected:
                self._write_mask(e, agent, raw, env.infos.get(agent))
                self._check_some_action_allowed(e, agent, moves)
            else:
                # Games often give waiting players an all-zero mask; their action is ignored, and an empty mask
                # would break a masked distribution evaluated over the whole group.
                g, j = self._slot[i]
                if self._masks[g] is not None:
                    self._masks[g][e, j] = True
            self._alive[e, i] = True
        if selected is not None and selected in self._index and self._alive[e, self._index[selected]]:
            self._acting[e, self._index[selected]] = True

    def _check_some_action_allowed(self, e: int, agent: str, moves: int) -> None:
        """The agent to move must have a legal choice in every head: the policy's masked distribution would
        otherwise sample a forbidden action, reported far from the env that caused it. Checked once per AEC move,
        where the mask arrives, never in the loss."""
        i = self._index[agent]
        g, j = self._slot[i]
        if self._masks[g] is None:
            return
        row = self._masks[g][e, j]
        if row.all():
            return
        nvec = self.spec.actions[i].nvec
        for k, head in enumerate(np.split(row, np.cumsum(nvec)[:-1])):
            if not head.any():
                unwrapped = getattr(self._envs[e], "unwrapped", self._envs[e])
                name = (getattr(unwrapped, "metadata", None) or {}).get("name", type(unwrapped).__name__)
                where = "right after reset" if moves == 0 else f"after move {moves} of its episode"
                head_text = f" (head {k} of {len(nvec)})" if len(nvec) > 1 else ""
                raise ValueError(
                    f"env {name!r} (env copy {e + self.first_copy}, {where}): the agent to move, {agent!r}, has an "
                    f"action mask that allows no action{head_text}; the env must leave the agent to move at least "
                    "one legal action (or end its episode)"
                )

    def _step_aec(self, e: int, actions: list[np.ndarray]) -> bool:
        env = self._envs[e]
        i = int(self._acting[e].argmax())  # the one acting agent
        g, j = self._slot[i]
        action = self._env_action(i, actions[g][e, j])
        try:
            env.step(action)
        except Exception as exc:
            raise self._copy_error(e, "step", exc) from exc
        self._collect_aec_rewards(e)
        self._record_aec_endings(e)
        # Agents that ended are stepped out with None actions (PettingZoo's dead steps).
        while env.agents and (
            env.terminations.get(env.agent_selection, False) or env.truncations.get(env.agent_selection, False)
        ):
            try:
                env.step(None)
            except Exception as exc:
                raise self._copy_error(e, "step", exc) from exc
        if not env.agents or not any(
            not (env.terminations.get(a, False) or env.truncations.get(a, False)) for a in env.agents
        ):
            return True
        self._observe_aec(e, moves=int(self._lengths[e]) + 1)
        if not self._acting[e].any():
            raise ValueError(
                f"env copy {e}: after a step the AEC env selects {env.agent_selection!r}, which is not a live agent"
            )
        return False

    def _collect_aec_rewards(self, e: int) -> None:
        for agent, reward in self._envs[e].rewards.items():
            self._rewards[e, self._index[agent]] += reward

    def _record_aec_endings(self, e: int) -> None:
        env = self._envs[e]
        for agent in env.agents:
            i = self._index[agent]
            if self._ended[e, i]:
                continue
            term = bool(env.terminations.get(agent, False))
            trunc = bool(env.truncations.get(agent, False))
            if term or trunc:
                self._ended[e, i] = True
                self._terminated[e, i] = term
                self._truncated[e, i] = trunc and not term
                # After a step, agent_selection names the agent to move next: everyone else ends waiting.
                self._final_waiting[e, i] = agent != env.agent_selection
                self._write_obs(e, agent, env.observe(agent), self._final_obs)


def _dump_snapshot(snapshot: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    _StatePickler(buffer).dump(snapshot)
    return sign(buffer.getvalue())


def _load_snapshot(state: bytes) -> dict[str, Any]:
    payload = verify(state)  # before unpickling: bytes that are not this user's could run code
    try:
        return _StateUnpickler(io.BytesIO(payload)).load()
    except Exception as exc:  # unpickling damaged bytes raises many types
        raise ValueError(f"the env state cannot be unpickled ({type(exc).__name__}: {exc})") from exc


def _slice_snapshot(snapshot: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    """The part of a snapshot that holds copies ``[start, stop)``: every per-copy entry cut along its first axis."""

    def cut(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(None if v is None else v[start:stop].copy() for v in value)
        return value[start:stop].copy()

    return {
        **snapshot,
        "num_envs": stop - start,
        "envs": list(snapshot["envs"][start:stop]),
        "episode_seeds": list(snapshot["episode_seeds"][start:stop]),
        "buffers": {name: cut(value) for name, value in snapshot["buffers"].items()},
    }


def _join_buffers(values: list[Any]) -> Any:
    if isinstance(values[0], tuple):
        return tuple(
            None if parts[0] is None else np.concatenate(parts) for parts in zip(*values)
        )
    return np.concatenate(values)
