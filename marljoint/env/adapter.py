"""What the parallel and the turn-based PettingZoo adapters share: E env copies, the fixed-shape arrays they are
read into, and writing one agent's observation and action mask into those arrays.

:class:`~marljoint.env.PettingZooJointEnv` holds one adapter (:class:`~marljoint.env.parallel.ParallelAdapter` or
:class:`~marljoint.env.turn_based.TurnBasedAdapter`), which resets and steps one copy at a time; the episode
accounting, the seeds and the snapshots are the joint env's.
"""

from __future__ import annotations

import abc
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from marljoint.env.base import EnvCopyError, JointObs, JointStep
from marljoint.env.spaces import JointSpec, process_observation

__all__ = ["PettingZooAdapter"]


class PettingZooAdapter(abc.ABC):
    """E copies of a PettingZoo env and the arrays of their current state, in the shapes of
    :class:`~marljoint.env.JointStep` (per group ``[E, n_g, ...]``, per agent ``[E, N]``).

    The arrays are allocated once and overwritten in place: the joint env returns them, and snapshots copy into
    them.

    Args:
        envs: the E env copies (what :attr:`envs` holds; a restored snapshot replaces the list).
        spec: their joint spec.
        observation_spaces: the raw observation space of each agent, in ``possible_agents`` order.
        action_spaces: the raw action space of each agent, in ``possible_agents`` order.
        first_copy: the global index of copy 0 (named by errors).
    """

    turn_based = False
    """Whether the copies are played one move per step (AEC)."""

    def __init__(
        self,
        envs: list[Any],
        spec: JointSpec,
        observation_spaces: tuple[gymnasium.Space, ...],
        action_spaces: tuple[gymnasium.Space, ...],
        first_copy: int,
    ) -> None:
        self.envs = envs
        self.spec = spec
        self.observation_spaces = observation_spaces
        self.action_spaces = action_spaces
        self.first_copy = first_copy
        self._index = {a: i for i, a in enumerate(spec.agents)}
        self._slot = [spec.group_of(i) for i in range(spec.num_agents)]
        self._direct_obs = [
            isinstance(space, spaces.Box) and tuple(space.shape) == layout.shape and not layout.has_mask
            for space, layout in zip(observation_spaces, spec.observations)
        ]
        self.masked_groups = [False] * len(spec.groups)
        """Per group, whether its env has shown an action mask; the others skip the per-step mask check."""
        self._allocate(len(envs))

    def _allocate(self, E: int) -> None:
        N, groups = self.spec.num_agents, self.spec.groups
        self.obs = tuple(np.zeros((E, g.size, *g.observation.shape), g.observation.dtype) for g in groups)
        self.final_obs = tuple(np.zeros_like(o) for o in self.obs)
        self.masks = tuple(
            np.ones((E, g.size, g.action.mask_size), bool) if g.action.kind != "box" else None for g in groups
        )
        self.alive = np.zeros((E, N), bool)
        self.acting = np.zeros((E, N), bool)
        self.rewards = np.zeros((E, N), np.float32)
        self.terminated = np.zeros((E, N), bool)
        self.truncated = np.zeros((E, N), bool)
        self.final_waiting = np.zeros((E, N), bool)
        self.reset_envs = np.zeros(E, bool)
        self.returns = np.zeros((E, N), np.float64)
        self.lengths = np.zeros(E, np.int64)
        # AEC agents whose end was already reported but who still wait for their dead step.
        self.ended = np.zeros((E, N), bool)

    # ------------------------------------------------------------------ one copy
    @abc.abstractmethod
    def reset_copy(self, e: int, seed: int | None) -> None:
        """Resets copy e with ``seed`` and reads its first state into the arrays."""

    @abc.abstractmethod
    def step_copy(self, e: int, actions: list[np.ndarray]) -> bool:
        """Steps copy e with its rows of the checked per-group ``actions`` and reads the outcome into the arrays.

        Returns:
            Whether the copy's episode ended (every agent has ended); the caller then resets it.
        """

    # ------------------------------------------------------------------ the step's arrays
    def start_step(self) -> None:
        """Clears what a step reports afresh: rewards, endings and resets."""
        self.rewards[:] = 0.0
        self.terminated[:] = False
        self.truncated[:] = False
        if self.turn_based:
            self.final_waiting[:] = False
        self.reset_envs[:] = False

    def joint_obs(self) -> JointObs:
        """The current state to act on (the arrays themselves)."""
        return JointObs(self.obs, self.alive, self.acting, self.masks)

    def joint_step(self, finished_returns: list[np.ndarray], finished_lengths: list[int]) -> JointStep:
        """The step's outcome (the arrays themselves), with the returns ``[N]`` and lengths of the episodes that
        ended in it."""
        return JointStep(
            obs=self.obs,
            alive=self.alive,
            acting=self.acting,
            action_masks=self.masks,
            rewards=self.rewards,
            terminated=self.terminated,
            truncated=self.truncated,
            final_obs=self.final_obs,
            reset_envs=self.reset_envs,
            episode_returns=np.asarray(finished_returns, np.float64).reshape(-1, self.spec.num_agents),
            episode_lengths=np.asarray(finished_lengths, np.int64),
            final_waiting=self.final_waiting if self.turn_based else None,
        )

    # ------------------------------------------------------------------ observations, masks, actions, errors
    def _clear_copy(self, e: int) -> None:
        self._clear_state(e)
        self.ended[e] = False

    def _clear_state(self, e: int) -> None:
        """Zeroes copy e's observations, allows every action and marks every agent absent, before refilling."""
        for obs in self.obs:
            obs[e] = 0
        for mask in self.masks:
            if mask is not None:
                mask[e] = True
        self.alive[e] = False
        self.acting[e] = False

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
        target[g][e, j] = process_observation(agent, self.observation_spaces[i], self.spec.observations[i], raw)

    def _write_mask(self, e: int, agent: str, raw_obs: Any, info: Any) -> None:
        i = self._index[agent]
        g, j = self._slot[i]
        mask_buf = self.masks[g]
        if mask_buf is None:
            return
        mask = None
        if self.spec.observations[i].has_mask:
            mask = raw_obs["action_mask"]
        elif isinstance(info, dict) and "action_mask" in info:
            mask = info["action_mask"]
        if mask is None:
            return  # the row was reset to all-allowed when the copy's state was cleared
        self.masked_groups[g] = True
        mask = np.asarray(mask).reshape(-1)
        if mask.size != mask_buf.shape[-1]:
            raise ValueError(
                f"agent {agent!r}: action mask of length {mask.size} does not fit its action space "
                f"{self.action_spaces[i]} (expected {mask_buf.shape[-1]} entries, one per choice of every head)"
            )
        mask_buf[e, j] = mask.astype(bool)

    def _env_action(self, i: int, value: np.ndarray) -> Any:
        """Agent i's action as its env takes it, from its checked row ``value`` of the actions."""
        layout = self.spec.actions[i]
        if layout.kind == "discrete":
            return int(value) + layout.start[0]
        space = self.action_spaces[i]
        if layout.kind == "multidiscrete":
            return value.astype(space.dtype) + np.asarray(layout.start, space.dtype)
        # Actions within the check's tolerance of a bound are clipped onto it, so the env always gets a member.
        return np.clip(value.reshape(layout.env_shape).astype(space.dtype), space.low, space.high)

    def _copy_error(self, e: int, call: str, exc: Exception) -> EnvCopyError:
        """The env's own exception from copy e's ``call``, naming the copy and the step of its episode."""
        if isinstance(exc, EnvCopyError):  # a joint env nested in the factory has named its copy already
            return exc
        step = int(self.lengths[e]) + 1 if call == "step" else 0
        return EnvCopyError(self.first_copy + e, call, step, type(exc).__name__, str(exc))
