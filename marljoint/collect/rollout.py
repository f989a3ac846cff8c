"""Preallocated rollout storage, ``[T, E, N, ...]``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from marljoint.env.spaces import JointSpec

__all__ = ["JointRollout", "PER_AGENT_FIELDS", "carry_pending_moves"]

PER_AGENT_FIELDS = (
    "log_probs",
    "values",
    "rewards",
    "terminated",
    "truncated",
    "alive",
    "acting",
    "final_values",
    "truncated_waiting",
)
"""The rollout fields of shape ``[T, E, N]``."""


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype)).dtype


@dataclass
class JointRollout:
    """One rollout of T steps in E env copies for N agents.

    Per-agent scalars are ``[T, E, N]``; observations, actions and masks are held per agent group ``g`` as
    ``[T, E, n_g, ...]`` (agents of a group share shapes; ``spec.groups[g].agent_indices`` maps them to N).

    Attributes:
        spec: the env's agents, layouts and groups.
        obs: per group, ``[T, E, n_g, *obs_shape]``, the observations acted on.
        actions: per group, ``[T, E, n_g, *action_shape]`` (int64 heads, or float32 unclipped Gaussian samples).
        action_masks: per group, ``[T, E, n_g, sum(nvec)]`` bool, or ``None`` for Box actions.
        log_probs: ``[T, E, N]`` log-probability of the taken action (joint over heads).
        values: ``[T, E, N]`` value estimates (in return units, i.e. denormalised).
        rewards: ``[T, E, N]``.
        terminated: ``[T, E, N]`` bool.
        truncated: ``[T, E, N]`` bool.
        alive: ``[T, E, N]`` bool, the agent was present at step t.
        acting: ``[T, E, N]`` bool, its action was used at step t (equals ``alive`` in simultaneous-move envs).
        final_values: ``[T, E, N]`` value of the final state of truncated rows (0 elsewhere).
        truncated_waiting: ``[T, E, N]`` bool, the episode was truncated while the agent waited for another agent's
            move (turn-based envs; see :func:`carry_pending_moves`).
        bootstrap_values: ``[E, N]`` value of the state after the last step (0 for absent agents).
        next_alive: ``[E, N]`` bool, the agent is present in the state after the last step.
        next_acting: ``[E, N]`` bool, the agent moves in the state after the last step (equals ``next_alive`` in
            simultaneous-move envs).
        episode_returns: ``[k, N]`` float64 returns of the episodes that finished during the rollout.
        episode_lengths: ``[k]`` their lengths.
        episode_steps: ``[k]`` the step t at which each of them finished (episodes finishing at the same step are
            listed in env-copy order).
        carried: the moves carried in from the previous rollout, as a rollout of N rows ``[N, E, ...]`` (row j
            holds agent j's pending move: the whole row it was taken in, with only agent j acting, and as agent
            j's reward everything it received from that move until this rollout began), or ``None``. They come
            before row 0: :meth:`extended` puts them there.
        deferred: ``[T', E, N]`` bool over the rows of :meth:`extended`: moves whose outcome lies beyond this
            rollout, so they are trained with the next one (``None``: none).
        states: recurrent policies only (else ``None``): per group, ``[T, E, n_g, S_g]``, the hidden state each
            agent acted from at step t (zeros where its episode started). An agent's state advances only on the
            rows where it decides (:attr:`valid`: present, and in turn-based games on its own turns).
        starts: recurrent policies only: ``[T, E, N]`` bool, the agent's state was reset before step t (its
            episode began, or it appeared in this env copy).
        final_obs: kept for a learner of observation pairs (:meth:`keep_successors`, else ``None``): per group,
            ``[T, E, n_g, *obs_shape]``, the final observation of the agents that ended at step t (the env's
            ``final_obs``; meaningless where the agent did not end).
        resets: with ``final_obs``: ``[T, E]`` bool, the copy finished its episode at step t and was reset.
        next_obs: with ``final_obs``: per group, ``[E, n_g, *obs_shape]``, the observations of the state after the
            last step.
        next_action_masks: with ``final_obs``: per group, ``[E, n_g, sum(nvec)]`` bool legal actions of the state
            after the last step, or ``None`` for Box actions.

    Turn-based games: when a rollout ends while an agent waits for its turn, the value of that waiting state is
    not one the critic learns (it is trained on the states where the agent moves). So the agent's last move is not
    bootstrapped from it: :meth:`~marljoint.JointMultiAgentTrainer.collect_rollout` marks it ``deferred`` and
    carries it into the next rollout, whose GAE then reaches it through the rewards and the next move exactly as
    an uninterrupted rollout would. No reward is lost across the boundary.
    """

    spec: JointSpec
    obs: tuple[torch.Tensor, ...]
    actions: tuple[torch.Tensor, ...]
    action_masks: tuple[torch.Tensor | None, ...]
    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    alive: torch.Tensor
    acting: torch.Tensor
    final_values: torch.Tensor
    bootstrap_values: torch.Tensor
    truncated_waiting: torch.Tensor
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    episode_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    next_alive: torch.Tensor | None = None
    next_acting: torch.Tensor | None = None
    carried: JointRollout | None = None
    deferred: torch.Tensor | None = None
    states: tuple[torch.Tensor, ...] | None = None
    starts: torch.Tensor | None = None
    final_obs: tuple[torch.Tensor, ...] | None = None
    resets: torch.Tensor | None = None
    next_obs: tuple[torch.Tensor, ...] | None = None
    next_action_masks: tuple[torch.Tensor | None, ...] | None = None

    @classmethod
    def allocate(cls, spec: JointSpec, steps: int, num_envs: int, device: torch.device | str = "cpu") -> JointRollout:
        """Preallocates zeroed storage for ``steps`` steps of ``num_envs`` copies.

        Raises:
            MemoryError: if the storage does not fit in memory, saying how large it is and what to lower.
        """
        try:
            return cls._allocate(spec, steps, num_envs, device)
        except (RuntimeError, MemoryError) as exc:
            if not isinstance(exc, MemoryError) and "alloc" not in str(exc).lower():
                raise
            size = storage_bytes(spec, steps, num_envs) / 2**30
            raise MemoryError(
                f"the rollout storage of {steps} steps x {num_envs} env copies x {spec.num_agents} agents needs "
                f"{size:.1f} GiB, more than {device} can allocate; lower rollout_steps or num_envs (or shrink the "
                "observations, e.g. with supersuit.resize_v1)"
            ) from None

    @classmethod
    def _allocate(cls, spec: JointSpec, steps: int, num_envs: int, device: torch.device | str) -> JointRollout:
        T, E, N = steps, num_envs, spec.num_agents
        groups = spec.groups

        def per_agent(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((T, E, N), dtype=dtype, device=device)

        return cls(
            spec=spec,
            obs=tuple(
                torch.zeros(
                    (T, E, g.size, *g.observation.shape), dtype=_torch_dtype(g.observation.dtype), device=device
                )
                for g in groups
            ),
            actions=tuple(
                torch.zeros((T, E, g.size, *g.action.shape), dtype=_torch_dtype(g.action.dtype), device=device)
                for g in groups
            ),
            action_masks=tuple(
                torch.ones((T, E, g.size, g.action.mask_size), dtype=torch.bool, device=device)
                if g.action.kind != "box"
                else None
                for g in groups
            ),
            log_probs=per_agent(torch.float32),
            values=per_agent(torch.float32),
            rewards=per_agent(torch.float32),
            terminated=per_agent(torch.bool),
            truncated=per_agent(torch.bool),
            alive=per_agent(torch.bool),
            acting=per_agent(torch.bool),
            final_values=per_agent(torch.float32),
            truncated_waiting=per_agent(torch.bool),
            bootstrap_values=torch.zeros((E, N), dtype=torch.float32, device=device),
            episode_returns=np.zeros((0, N)),
            episode_lengths=np.zeros(0, np.int64),
            next_alive=torch.zeros((E, N), dtype=torch.bool, device=device),
            next_acting=torch.zeros((E, N), dtype=torch.bool, device=device),
        )

    def keep_successors(self) -> None:
        """Allocates :attr:`final_obs`, :attr:`resets`, :attr:`next_obs` and :attr:`next_action_masks` (zeroed,
        beside the other fields) unless they are: what a learner of ``(observation, next observation)`` pairs
        needs beyond what the rollout holds for PPO."""
        if self.final_obs is not None:
            return
        device = self.rewards.device
        self.final_obs = tuple(torch.zeros_like(o) for o in self.obs)
        self.resets = torch.zeros(self.rewards.shape[:2], dtype=torch.bool, device=device)
        self.next_obs = tuple(torch.zeros_like(o[0]) for o in self.obs)
        self.next_action_masks = tuple(None if m is None else torch.ones_like(m[0]) for m in self.action_masks)

    @property
    def steps(self) -> int:
        """T."""
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        """E."""
        return int(self.rewards.shape[1])

    @property
    def num_agents(self) -> int:
        """N."""
        return int(self.rewards.shape[2])

    @property
    def valid(self) -> torch.Tensor:
        """``[T, E, N]`` rows that carry a decision: the agent was present and its action was used."""
        return self.alive & self.acting

    @property
    def trainable(self) -> torch.Tensor:
        """``[T', E, N]`` rows that carry a decision trained with this rollout: :attr:`valid` less
        :attr:`deferred` (over the rows of :meth:`extended` when moves were carried in)."""
        valid = self.valid
        return valid if self.deferred is None else valid & ~self.deferred

    def extended(self) -> JointRollout:
        """This rollout with the :attr:`carried` moves as its first rows (itself when none were carried).

        The result has ``T' = N + T`` rows (``T`` without carried moves); :attr:`deferred`, when set, already
        covers those rows. Everything after the last row (bootstrap values, next flags, episode records) is this
        rollout's.
        """
        carried = self.carried
        if carried is None:
            return self

        def cat(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
            return None if a is None or b is None else torch.cat((a, b))

        return JointRollout(
            spec=self.spec,
            obs=tuple(cat(a, b) for a, b in zip(carried.obs, self.obs)),
            actions=tuple(cat(a, b) for a, b in zip(carried.actions, self.actions)),
            action_masks=tuple(cat(a, b) for a, b in zip(carried.action_masks, self.action_masks)),
            **{name: cat(getattr(carried, name), getattr(self, name)) for name in PER_AGENT_FIELDS},
            bootstrap_values=self.bootstrap_values,
            episode_returns=self.episode_returns,
            episode_lengths=self.episode_lengths,
            episode_steps=self.episode_steps,
            next_alive=self.next_alive,
            next_acting=self.next_acting,
            deferred=self.deferred,
            states=None if self.states is None or carried.states is None else tuple(
                torch.cat((a, b)) for a, b in zip(carried.states, self.states)
            ),
            starts=cat(carried.starts, self.starts),
            final_obs=None if self.final_obs is None or carried.final_obs is None else tuple(
                torch.cat((a, b)) for a, b in zip(carried.final_obs, self.final_obs)
            ),
            resets=cat(carried.resets, self.resets),
            next_obs=self.next_obs,
            next_action_masks=self.next_action_masks,
        )

    def fields(self) -> dict[str, Any]:
        """Every field but the spec, as ``JointRollout(spec=spec, **fields)`` takes them (for a checkpoint: the
        spec is rebuilt from the env)."""
        return {name: value for name, value in vars(self).items() if name != "spec"}

    def to(self, device: torch.device | str) -> JointRollout:
        """A copy of this rollout with every tensor on ``device`` (the carried moves too)."""

        def move(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x.to(device)

        return JointRollout(
            spec=self.spec,
            obs=tuple(move(o) for o in self.obs),
            actions=tuple(move(a) for a in self.actions),
            action_masks=tuple(move(m) for m in self.action_masks),
            **{name: move(getattr(self, name)) for name in (*PER_AGENT_FIELDS, "bootstrap_values")},
            episode_returns=self.episode_returns,
            episode_lengths=self.episode_lengths,
            episode_steps=self.episode_steps,
            next_alive=move(self.next_alive),
            next_acting=move(self.next_acting),
            carried=None if self.carried is None else self.carried.to(device),
            deferred=move(self.deferred),
            states=None if self.states is None else tuple(move(x) for x in self.states),
            starts=move(self.starts),
            final_obs=None if self.final_obs is None else tuple(move(x) for x in self.final_obs),
            resets=move(self.resets),
            next_obs=None if self.next_obs is None else tuple(move(x) for x in self.next_obs),
            next_action_masks=None
            if self.next_action_masks is None
            else tuple(move(m) for m in self.next_action_masks),
        )

    def validate(self) -> None:
        """Checks that every tensor agrees on T, E and N.

        Raises:
            ValueError: naming the field, its shape and the expected one.
        """
        T, E, N = self.steps, self.num_envs, self.num_agents
        if N != self.spec.num_agents:
            raise ValueError(f"rollout has {N} agents but its spec lists {self.spec.num_agents}")
        for name in PER_AGENT_FIELDS:
            shape = tuple(getattr(self, name).shape)
            if shape != (T, E, N):
                raise ValueError(f"rollout.{name} has shape {shape}, expected {(T, E, N)} like rollout.rewards")
        if tuple(self.bootstrap_values.shape) != (E, N):
            raise ValueError(
                f"rollout.bootstrap_values has shape {tuple(self.bootstrap_values.shape)}, expected {(E, N)}"
            )
        if len(self.obs) != len(self.spec.groups) or len(self.actions) != len(self.spec.groups):
            raise ValueError(
                f"rollout holds {len(self.obs)} observation and {len(self.actions)} action arrays for "
                f"{len(self.spec.groups)} agent groups"
            )
        for g, group in enumerate(self.spec.groups):
            expected_obs = (T, E, group.size, *group.observation.shape)
            if tuple(self.obs[g].shape) != expected_obs:
                raise ValueError(
                    f"rollout.obs[{g}] (agents {list(group.agents)}) has shape {tuple(self.obs[g].shape)}, "
                    f"expected {expected_obs}"
                )
            expected_act = (T, E, group.size, *group.action.shape)
            if tuple(self.actions[g].shape) != expected_act:
                raise ValueError(
                    f"rollout.actions[{g}] (agents {list(group.agents)}) has shape {tuple(self.actions[g].shape)}, "
                    f"expected {expected_act}"
                )
        if (self.states is None) != (self.starts is None):
            raise ValueError("a recurrent rollout holds both states and starts; this one holds only one of them")
        if self.states is not None:
            if self.starts is not None and tuple(self.starts.shape) != (T, E, N):
                raise ValueError(f"rollout.starts has shape {tuple(self.starts.shape)}, expected {(T, E, N)}")
            for g, group in enumerate(self.spec.groups):
                if tuple(self.states[g].shape[:3]) != (T, E, group.size) or self.states[g].dim() != 4:
                    raise ValueError(
                        f"rollout.states[{g}] (agents {list(group.agents)}) has shape {tuple(self.states[g].shape)}, "
                        f"expected {(T, E, group.size)} + (state size,)"
                    )


def carry_pending_moves(
    rollout: JointRollout, bootstrap_truncation: bool = True
) -> tuple[torch.Tensor | None, JointRollout | None]:
    """Finds the moves whose target this rollout cannot complete, and the rows that carry some into the next one.

    A move is pending when it is its agent's last move in the rollout (after the agent's last episode end) and
    the agent is alive but waiting in the state after the last step (``next_alive & ~next_acting``): its target
    needs the agent's next decision, which the next rollout holds, so it is carried there. Simultaneous-move envs
    have none (every alive agent moves in every state).

    A move is orphaned when its agent's episode is then truncated while the agent waits (``truncated_waiting``):
    its target would bootstrap from the value of a state the agent does not move in, which the critic does not
    learn, and no later decision exists. It is left out of training (``deferred``, not carried). With
    ``bootstrap_truncation=False`` truncation is termination and no move is orphaned.

    Args:
        rollout: the :meth:`JointRollout.extended` rollout (``T'`` rows), with ``next_alive`` / ``next_acting``.
        bootstrap_truncation: as :attr:`~marljoint.JointTrainerConfig.bootstrap_truncation`.

    Returns:
        ``(deferred, carried)``: the ``[T', E, N]`` bool mask of pending and orphaned moves (``None``: none), and
        the :class:`JointRollout` of N rows to put before the next rollout (see :attr:`JointRollout.carried`;
        ``None``: nothing to carry).
    """
    orphaned = _orphaned_moves(rollout) if bootstrap_truncation else None
    if rollout.next_alive is None or rollout.next_acting is None:
        return orphaned, None
    pending_agents = rollout.next_alive & ~rollout.next_acting
    if not bool(pending_agents.any()):
        return orphaned, None
    device = rollout.rewards.device
    rows = torch.arange(rollout.steps, device=device).view(rollout.steps, 1, 1)
    none = torch.full((), -1, device=device)
    last_move = torch.where(rollout.valid, rows, none).amax(0)  # [E, N]
    last_end = torch.where(rollout.terminated | rollout.truncated, rows, none).amax(0)
    pending = pending_agents & (last_move > last_end)
    if not bool(pending.any()):
        return orphaned, None
    deferred = pending & (rows == last_move)
    if orphaned is not None:
        deferred = deferred | orphaned
    return deferred, _carried_rows(rollout, pending, last_move)


def _carried_rows(rollout: JointRollout, pending: torch.Tensor, last_move: torch.Tensor) -> JointRollout:
    """The N rows :func:`carry_pending_moves` puts before the next rollout: row j holds, for every copy, agent j's
    pending move (``pending``: ``[E, N]`` bool) taken at row ``last_move`` (``[E, N]``) of ``rollout``."""
    steps, num_envs, n = rollout.steps, rollout.num_envs, rollout.num_agents
    device = rollout.rewards.device
    rows = torch.arange(steps, device=device).view(steps, 1, 1)
    source = last_move.clamp_min(0).T  # [N, E]: the row of agent j's pending move in copy e
    copies = torch.arange(num_envs, device=device)

    def gather(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x[source, copies]  # [N, E, ...]: row source[j, e] of copy e

    pending_rows = pending.T  # [N, E]
    own = torch.eye(n, dtype=torch.bool, device=device).unsqueeze(1)  # [N, 1, N]: agent j's own column
    # Everything agent j received from its pending move on (the move's own step included, nothing after an end).
    received = (rollout.rewards * (rows >= last_move.clamp_min(0))).sum(0)  # [E, N]
    return JointRollout(
        spec=rollout.spec,
        obs=tuple(gather(o) for o in rollout.obs),
        actions=tuple(gather(a) for a in rollout.actions),
        action_masks=tuple(gather(m) for m in rollout.action_masks),
        log_probs=gather(rollout.log_probs),
        values=gather(rollout.values),
        rewards=torch.where(own & pending_rows.unsqueeze(-1), received.T.unsqueeze(-1), 0.0).to(rollout.rewards.dtype),
        terminated=torch.zeros((n, num_envs, n), dtype=torch.bool, device=device),
        truncated=torch.zeros((n, num_envs, n), dtype=torch.bool, device=device),
        # A row without a pending move is left out entirely (its agents count as absent).
        alive=gather(rollout.alive) & pending_rows.unsqueeze(-1),
        acting=own & pending_rows.unsqueeze(-1),
        final_values=torch.zeros((n, num_envs, n), dtype=rollout.final_values.dtype, device=device),
        truncated_waiting=torch.zeros((n, num_envs, n), dtype=torch.bool, device=device),
        bootstrap_values=torch.zeros((num_envs, n), dtype=rollout.bootstrap_values.dtype, device=device),
        episode_returns=np.zeros((0, n)),
        episode_lengths=np.zeros(0, np.int64),
        # A recurrent agent's pending move is replayed from the state it acted from.
        states=None if rollout.states is None else tuple(gather(x) for x in rollout.states),
        starts=gather(rollout.starts),
        # A carried row ends nothing: its final observations are never read.
        final_obs=None if rollout.final_obs is None else tuple(gather(x) for x in rollout.final_obs),
        resets=None if rollout.resets is None else torch.zeros((n, num_envs), dtype=torch.bool, device=device),
    )


def _orphaned_moves(rollout: JointRollout) -> torch.Tensor | None:
    """``[T', E, N]``: each agent's last move before a truncation that found it waiting (``None``: none)."""
    cut = rollout.truncated_waiting
    if not bool(cut.any()):
        return None
    valid, ended = rollout.valid, rollout.terminated | rollout.truncated
    orphaned = torch.zeros_like(valid)
    # Backwards: after a waiting truncation at row t, the agent's first move found at or before t is orphaned.
    waiting_cut = torch.zeros_like(valid[0])
    for t in range(rollout.steps - 1, -1, -1):
        waiting_cut = torch.where(ended[t], cut[t], waiting_cut)
        orphaned[t] = valid[t] & waiting_cut
        waiting_cut = waiting_cut & ~valid[t]
    return orphaned


def storage_bytes(spec: JointSpec, steps: int, num_envs: int) -> int:
    """Bytes of a :class:`JointRollout` of ``steps`` steps of ``num_envs`` copies (observations, actions, masks and
    the per-agent fields)."""
    rows = steps * num_envs
    total = rows * spec.num_agents * (4 * 4 + 5)  # four float32 and five bool fields per agent
    for g in spec.groups:
        obs = int(np.prod(g.observation.shape, dtype=np.int64)) * np.dtype(g.observation.dtype).itemsize
        act = int(np.prod(g.action.shape, dtype=np.int64)) * np.dtype(g.action.dtype).itemsize
        mask = g.action.mask_size if g.action.kind != "box" else 0
        total += rows * g.size * (obs + act + mask)
    return int(total)
