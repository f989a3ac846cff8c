"""The JointEnv protocol: N agents in E env copies, stepped together, as fixed-shape arrays.

Shape convention (used across marljoint): ``E`` env copies, ``N`` agents in ``possible_agents`` order, and per
agent group ``g`` its ``n_g`` members. Observations and actions are held per group (the members share a shape);
everything scalar per agent (rewards, flags, masks) is ``[E, N]``.

Semantics of one :meth:`JointEnv.step`, for every env copy ``e`` and agent ``i``:

- ``rewards[e, i]``: the reward agent ``i`` received during this step (0 for absent agents).
- ``terminated[e, i]`` / ``truncated[e, i]``: agent ``i``'s episode ended during this step, by reaching a terminal
  state / by a time limit or other cut. They are never merged: terminated stops bootstrapping, truncated does not.
- ``final_obs``: for agents that ended this step, the observation they ended in (before any auto-reset); the
  trainer bootstraps truncated agents from it. Rows of agents that did not end hold stale values.
- ``final_waiting[e, i]`` (turn-based envs; ``None`` elsewhere): agent ``i`` ended while another agent was to
  move, so its final state is not one it moves in; the trainer does not bootstrap a move from such a state.
- ``obs``, ``alive``, ``acting``, ``action_masks``: the state to act on next. When every agent of a copy has ended,
  that copy is reset at once and these describe the first state of the new episode (``reset_envs[e]`` is True).
  Absent agents (dead, or not yet joined) have ``alive`` False and zero observations.
- ``acting[e, i]``: whether agent ``i``'s next action is used. In simultaneous-move envs ``acting == alive``; in
  turn-based (AEC) envs exactly one agent of each copy acts.

Arrays returned by ``reset``/``step`` belong to the env and are overwritten by the next call: copy what you keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from marljoint.env.spaces import JointSpec

__all__ = [
    "EnvCopyError",
    "JointEnv",
    "JointObs",
    "JointStep",
    "NonFiniteEnvError",
    "join_obs",
    "join_steps",
    "split_copies",
]


class EnvCopyError(RuntimeError):
    """An env copy, or a wrapper around it, raised inside its ``reset()`` or ``step()``.

    Raised by :class:`~marljoint.env.PettingZooJointEnv` (and, from its worker processes, by
    :class:`~marljoint.env.SubprocessJointEnv`) in place of the env's own exception, which it names; in the same
    process that exception is the ``__cause__``. The env copy is left mid-call: close the env.

    Attributes:
        copy: the copy's global index (in ``[0, E)`` of the whole set, also when a worker holds a slice).
        call: ``"reset"`` or ``"step"``.
        step: the step of the copy's episode that raised (1 for its first step); 0 for ``reset``.
        error_type: the name of the exception's type (``"RuntimeError"``).
        error_message: the exception's message.
        traceback: the traceback as text where the exception was raised in a worker process, else ``""``.

    Example:
        >>> str(EnvCopyError(3, "step", 12, "RuntimeError", "boom"))
        'env copy 3 raised RuntimeError: boom (in step(), at step 12 of its episode)'
    """

    def __init__(
        self, copy: int, call: str, step: int, error_type: str, error_message: str, traceback: str = ""
    ) -> None:
        # All fields go to the base class, so the error crosses a pipe from a worker process intact (pickle).
        super().__init__(copy, call, step, error_type, error_message, traceback)
        self.copy, self.call, self.step = copy, call, step
        self.error_type, self.error_message, self.traceback = error_type, error_message, traceback

    def __str__(self) -> str:
        where = f"at step {self.step} of its episode" if self.call == "step" else "when starting an episode"
        return f"env copy {self.copy} raised {self.error_type}: {self.error_message} (in {self.call}(), {where})"


class NonFiniteEnvError(ValueError):
    """The env returned a non-finite reward or observation (NaN or inf); the message names the agent, the env copy,
    the value and the fix. Raised where the step is checked, in this process or (re-raised here) in a worker."""


class JointObs(NamedTuple):
    """What the agents see before acting.

    Attributes:
        obs: per group, ``[E, n_g, *obs_shape_g]`` (float32, or uint8 for byte images).
        alive: ``[E, N]`` bool, the agent is present in the env.
        acting: ``[E, N]`` bool, the agent's action is used on the next step.
        action_masks: per group, ``[E, n_g, sum(nvec_g)]`` bool (True = allowed), or ``None`` for Box actions.
            Every categorical head of an alive agent has at least one allowed choice.
    """

    obs: tuple[np.ndarray, ...]
    alive: np.ndarray
    acting: np.ndarray
    action_masks: tuple[np.ndarray | None, ...]


class JointStep(NamedTuple):
    """The outcome of one joint step (see the module docstring for the exact semantics).

    Attributes:
        obs: per group, ``[E, n_g, *obs_shape_g]``, the next observations (after auto-reset).
        alive: ``[E, N]`` bool, presence in the next state.
        acting: ``[E, N]`` bool, whose next action is used.
        action_masks: per group, ``[E, n_g, sum(nvec_g)]`` bool or ``None``.
        rewards: ``[E, N]`` float32.
        terminated: ``[E, N]`` bool.
        truncated: ``[E, N]`` bool.
        final_obs: per group, ``[E, n_g, *obs_shape_g]``, valid where ``terminated | truncated``.
        reset_envs: ``[E]`` bool, the copy finished an episode and was reset.
        episode_returns: ``[k, N]`` float64, undiscounted returns of the k episodes that finished this step.
        episode_lengths: ``[k]`` int64, their lengths in steps.
        final_waiting: ``[E, N]`` bool, valid where ``terminated | truncated``: the agent ended while another agent
            was to move, so its final state is not one it moves in (turn-based envs). ``None``: never (every agent
            moves in every state, as in simultaneous-move envs).
    """

    obs: tuple[np.ndarray, ...]
    alive: np.ndarray
    acting: np.ndarray
    action_masks: tuple[np.ndarray | None, ...]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: tuple[np.ndarray, ...]
    reset_envs: np.ndarray
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    final_waiting: np.ndarray | None = None


@runtime_checkable
class JointEnv(Protocol):
    """E copies of an N-agent environment as fixed-shape arrays.

    Attributes:
        spec: agents, their observation/action layouts and groups.
        num_envs: E.
    """

    spec: JointSpec
    num_envs: int

    def reset(self, seed: int | None = None) -> JointObs:
        """Resets every copy; copy ``e`` is seeded deterministically from ``seed`` (``seed + e``)."""
        ...

    def step(self, actions: Sequence[np.ndarray]) -> JointStep:
        """Steps every copy.

        Args:
            actions: per group, ``[E, n_g, *action_shape_g]`` (int64 for categorical heads, float32 for Box).
                Actions of agents that are not ``acting`` are ignored.
        """
        ...

    def close(self) -> None:
        """Releases the env copies."""
        ...


def split_copies(num_envs: int, parts: int) -> list[tuple[int, int]]:
    """Env copies ``0..E-1`` cut into ``parts`` contiguous ``[start, stop)`` slices, as equal as possible.

    The one rule every multi-process collection follows (subprocess workers, Ray actors), so a slice's copies are
    seeded and sampled by their global index the same way whichever backend holds them.

    Example:
        >>> split_copies(5, 2)
        [(0, 2), (2, 5)]

    Args:
        num_envs: E, the copies of the whole set.
        parts: the number of slices (each gets at least one copy).

    Raises:
        ValueError: if ``parts`` is not a positive integer, or larger than ``num_envs``.
    """
    if not isinstance(parts, (int, np.integer)) or isinstance(parts, bool) or parts < 1:
        raise ValueError(f"the copies must be split into a positive number of slices, got {parts!r}")
    if parts > num_envs:
        raise ValueError(
            f"{parts} workers need at least as many env copies, got num_envs={num_envs}; raise num_envs or use "
            "fewer workers"
        )
    bounds = np.linspace(0, num_envs, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def join_obs(pieces: Sequence[JointObs]) -> JointObs:
    """The :class:`JointObs` of consecutive slices of the copies, side by side along the env axis (new arrays).

    Args:
        pieces: one per slice, in copy order; per group ``[E_k, n_g, ...]``, flags ``[E_k, N]``.

    Returns:
        The state of all ``E = sum(E_k)`` copies, as one env holding them all would return it.
    """
    groups = range(len(pieces[0].obs))
    return JointObs(
        obs=tuple(np.concatenate([p.obs[g] for p in pieces]) for g in groups),
        alive=np.concatenate([p.alive for p in pieces]),
        acting=np.concatenate([p.acting for p in pieces]),
        action_masks=tuple(_join_optional([p.action_masks[g] for p in pieces]) for g in groups),
    )


def join_steps(pieces: Sequence[JointStep]) -> JointStep:
    """The :class:`JointStep` of consecutive slices of the copies, side by side along the env axis (new arrays).

    Finished episodes are listed slice by slice, which is copy order: the order one env holding every copy lists
    them in.

    Args:
        pieces: one per slice, in copy order; per group ``[E_k, n_g, ...]``, flags ``[E_k, N]``, episodes ``[k_j, N]``.

    Returns:
        The step of all ``E = sum(E_k)`` copies, as one env holding them all would return it.
    """
    joined = join_obs([JointObs(p.obs, p.alive, p.acting, p.action_masks) for p in pieces])
    groups = range(len(pieces[0].obs))
    return JointStep(
        *joined,
        rewards=np.concatenate([p.rewards for p in pieces]),
        terminated=np.concatenate([p.terminated for p in pieces]),
        truncated=np.concatenate([p.truncated for p in pieces]),
        final_obs=tuple(np.concatenate([p.final_obs[g] for p in pieces]) for g in groups),
        reset_envs=np.concatenate([p.reset_envs for p in pieces]),
        episode_returns=np.concatenate([p.episode_returns for p in pieces]),
        episode_lengths=np.concatenate([p.episode_lengths for p in pieces]),
        final_waiting=_join_optional([p.final_waiting for p in pieces]),
    )


def _join_optional(arrays: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """Arrays joined along the env axis; ``None`` where the slices have none (Box actions, simultaneous moves)."""
    return None if arrays[0] is None else np.concatenate(arrays)
