"""Transitions for the replay buffer, built from collected rollouts (:class:`~marljoint.collect.JointRollout`
with :meth:`~marljoint.collect.JointRollout.keep_successors`): one team transition per joint step
(:func:`rollout_transitions`, the value methods), or each agent's moves from one of its decisions to the next
(:func:`rollout_moves`, the per-agent learners), credited as PPO credits turn-based games and carried across
rollouts by the same code (:func:`~marljoint.collect.carry_pending_moves`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from marljoint.collect.rollout import JointRollout, carry_pending_moves
from marljoint.env.spaces import JointSpec
from marljoint.offpolicy.functional import encode_actions, joint_action_mask
from marljoint.offpolicy.replay import JointTransitions

__all__ = ["Moves", "check_saved_transitions", "rollout_moves", "rollout_transitions", "transition_layout"]


def rollout_transitions(spec: JointSpec, rollout: JointRollout) -> JointTransitions:
    """The ``T · E`` team transitions of a rollout, one per joint step and copy, in step-then-copy order.

    Step t's next state is step t + 1's (the rollout's state after its last step for the last). An agent whose
    episode ended at the step has its final observation as next observation; a terminated agent is absent from
    the next state (nothing bootstrapped from it), a truncated one present in it (bootstrapped, with all actions
    legal since the env does not report its final mask) and deciding there unless it ended while another agent
    was to move. In turn-based games an agent decides in the next state only on its own turn.

    Args:
        spec: the env's agents and groups.
        rollout: a rollout that kept its successors (:meth:`~marljoint.collect.JointRollout.keep_successors`).

    Returns:
        :class:`JointTransitions` of ``T · E`` rows, on the CPU.

    Raises:
        ValueError: if the rollout did not keep its successors.
    """
    team = _team_fields(spec, rollout)
    return JointTransitions(*(_rows_of(field, lambda x: x.flatten(0, 1)) for field in team))


class Moves(NamedTuple):
    """What :func:`rollout_moves` returns.

    Attributes:
        transitions: the moves completed in the rollout (:class:`JointTransitions`).
        carried: the moves to put before the next rollout (:attr:`~marljoint.collect.JointRollout.carried`), or
            ``None``.
        deferred: ``[T', E, N]`` bool over the rows of :meth:`~marljoint.collect.JointRollout.extended`: the moves
            carried on or left out (``None``: none).
    """

    transitions: JointTransitions
    carried: JointRollout | None
    deferred: torch.Tensor | None


def rollout_moves(spec: JointSpec, rollout: JointRollout) -> Moves:
    """Each agent's moves of a rollout, from one of its decisions to its next: the turn-based credit of
    per-agent learners, PPO's rule (:func:`~marljoint.collect.carry_pending_moves`,
    :func:`~marljoint.ppo.compute_gae`).

    A move's reward is everything its agent receives from the move's step until the step after which it decides
    again, summed without discounting (the rewards paid while it waits for other agents' moves belong to its
    previous move); the move then bootstraps, discounted once, at that decision (next observations, legal
    actions, who is present and who decides come from that step's team transition, :func:`rollout_transitions`).
    A move ends earlier with its episode: a termination stops the bootstrap, a truncation bootstraps from the
    final observation where the agent was to move there; a move whose episode is truncated while its agent waits
    is left out (its target would need the value of a state the agent does not move in), as PPO leaves it out.
    A move whose agent still waits after the rollout's last step is carried into the next rollout (set the
    returned ``carried`` as the next rollout's :attr:`~marljoint.collect.JointRollout.carried`).

    The moves whose next decision is their step's next state (every move in simultaneous-move envs) share their
    step's team row, deciding together; each other move is a row of its own, in which only its agent decides.
    Rows are in the order of the steps that complete them (a step's own row after the earlier moves it completes).

    Args:
        spec: the env's agents and groups.
        rollout: a rollout that kept its successors, with the moves carried from the previous one as its
            :attr:`~marljoint.collect.JointRollout.carried` (or ``None``).

    Returns:
        :class:`Moves`: the completed moves, the moves to carry on, and the deferred rows.

    Raises:
        ValueError: if the rollout did not keep its successors.
    """
    extended = rollout.extended()
    deferred, carried = carry_pending_moves(extended)
    team = _team_fields(spec, rollout)
    steps, copies, agents = rollout.rewards.shape
    first = extended.steps - steps  # carried rows before the rollout's own
    decided = extended.valid if deferred is None else extended.valid & ~deferred
    trainable = decided[first:]
    completed, received = _completion(rollout)
    parts, keys = _rollout_moves(team, trainable, completed, received)
    if rollout.carried is not None and first:
        # Row j of the carried rows: agent j's move, waiting when this rollout began.
        waiting = decided[:first].diagonal(dim1=0, dim2=2).T & (completed[0] < steps).T  # [N, E]
        agent, copy_index = waiting.nonzero(as_tuple=True)
        if len(agent):
            decision = _carried_decisions(spec, rollout.carried, agent, copy_index)
            reward = rollout.carried.rewards[agent, copy_index, agent] + received[0, copy_index, agent]
            done = completed[0, copy_index, agent]
            parts.append(_own_move(decision, team, done, copy_index, agent, reward))
            keys.append(_order(done, 0, copy_index, agent, copies, agents))
    return Moves(_in_order(parts, keys, team), carried, deferred)


def _rollout_moves(
    team: JointTransitions, trainable: torch.Tensor, completed: torch.Tensor, received: torch.Tensor
) -> tuple[list[JointTransitions], list[torch.Tensor]]:
    """The moves made in the rollout's own steps (``trainable``: ``[T, E, N]``): those completed at their own step
    share its team row, the others are rows of their own; with their sort keys (:func:`_order`)."""
    steps, copies, agents = trainable.shape
    row = torch.arange(steps).view(steps, 1, 1)
    own = trainable & (completed == row)
    later = trainable & (completed > row) & (completed < steps)
    parts, keys = [], []
    step_index, copy_index = (own.any(-1)).nonzero(as_tuple=True)
    if len(step_index):
        shared = _select(team, step_index, copy_index)
        parts.append(shared._replace(deciding=own[step_index, copy_index]))
        keys.append(_order(step_index, 1, copy_index, torch.zeros_like(copy_index), copies, agents))
    step_index, copy_index, agent = later.nonzero(as_tuple=True)
    if len(step_index):
        decision = _select(team, step_index, copy_index)
        done = completed[step_index, copy_index, agent]
        parts.append(_own_move(decision, team, done, copy_index, agent, received[step_index, copy_index, agent]))
        keys.append(_order(done, 0, copy_index, agent, copies, agents))
    return parts, keys


def _completion(rollout: JointRollout) -> tuple[torch.Tensor, torch.Tensor]:
    """For each step t and agent: the step that completes a move the agent made at t or waits through at t
    (``T``: none in this rollout) and the rewards it receives from t to that step, summed (``[T, E, N]`` each).

    A step completes the move when the agent's episode ends there, or after it the agent is absent or decides.
    """
    steps = rollout.steps
    valid_after = torch.cat((rollout.valid[1:], (rollout.next_alive & rollout.next_acting)[None]))
    alive_after = torch.cat((rollout.alive[1:], rollout.next_alive[None]))
    completes = rollout.terminated | rollout.truncated | ~alive_after | valid_after
    completed = torch.empty(rollout.rewards.shape, dtype=torch.int64)
    received = torch.empty_like(rollout.rewards)
    later_step = torch.full(completed.shape[1:], steps, dtype=torch.int64)
    later_reward = torch.zeros_like(received[0])
    for t in range(steps - 1, -1, -1):
        completed[t] = torch.where(completes[t], t, later_step)
        received[t] = rollout.rewards[t] + torch.where(completes[t], 0.0, later_reward)
        later_step, later_reward = completed[t], received[t]
    return completed, received


def _order(
    step: torch.Tensor, kind: int, copy: torch.Tensor, agent: torch.Tensor, copies: int, agents: int
) -> torch.Tensor:
    """Sort keys: by completing step, the moves completed before the step's own row, then by copy and agent."""
    return ((step * 2 + kind) * copies + copy) * agents + agent


def _in_order(parts: list[JointTransitions], keys: list[torch.Tensor], team: JointTransitions) -> JointTransitions:
    """The rows of ``parts`` one after another, sorted by ``keys``; no rows: an empty batch of ``team``'s layout."""
    if not parts:
        return JointTransitions(*(_rows_of(field, lambda x: x.flatten(0, 1)[:0]) for field in team))
    fields = []
    for values in zip(*parts):
        if isinstance(values[0], tuple):
            fields.append(tuple(torch.cat(group) for group in zip(*values)))
        else:
            fields.append(torch.cat(values))
    order = torch.argsort(torch.cat(keys), stable=True)
    return JointTransitions(*(_rows_of(field, lambda x: x[order]) for field in fields))


def _own_move(
    decision: JointTransitions,
    team: JointTransitions,
    done: torch.Tensor,
    copy: torch.Tensor,
    agent: torch.Tensor,
    reward: torch.Tensor,
) -> JointTransitions:
    """Rows of one move each (only its agent deciding, its reward the ``[B]`` ``reward``), completed by the team
    transitions at (``done``, ``copy``)."""
    outcome = _select(team, done, copy)
    alone = torch.nn.functional.one_hot(agent, decision.rewards.shape[1]).bool()
    return decision._replace(
        rewards=torch.where(alone, reward[:, None], 0.0),
        deciding=alone,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        next_obs=outcome.next_obs,
        next_masks=outcome.next_masks,
        next_present=outcome.next_present,
        next_deciding=outcome.next_deciding,
    )


def _carried_decisions(
    spec: JointSpec, carried: JointRollout, agent: torch.Tensor, copy: torch.Tensor
) -> JointTransitions:
    """The decision side (observations, actions, masks, who was present) of carried moves: row ``agent`` of
    copy ``copy`` of the carried rows; the outcome side is filled by :func:`_own_move`."""
    obs, actions, masks = _decisions(spec, carried)
    alive = carried.alive[agent, copy]
    return JointTransitions(
        obs=tuple(o[agent, copy] for o in obs),
        actions=actions[agent, copy],
        rewards=torch.zeros(alive.shape),
        terminated=torch.zeros_like(alive),
        truncated=torch.zeros_like(alive),
        alive=alive,
        deciding=torch.zeros_like(alive),
        masks=tuple(m[agent, copy] for m in masks),
        next_obs=tuple(o[agent, copy] for o in obs),
        next_masks=tuple(m[agent, copy] for m in masks),
        next_present=torch.zeros_like(alive),
        next_deciding=torch.zeros_like(alive),
    )


def _team_fields(spec: JointSpec, ro: JointRollout) -> JointTransitions:
    """:func:`rollout_transitions` before its rows are flattened: every field ``[T, E, ...]``."""
    if ro.final_obs is None or ro.resets is None or ro.next_obs is None or ro.next_action_masks is None:
        raise ValueError(
            "the rollout holds no final observations or state after its last step; collect it with an off-policy "
            "acting policy (a StepActing), or call rollout.keep_successors() before it is played"
        )
    ended = ro.terminated | ro.truncated
    reset = ro.resets[..., None]
    alive_after = torch.cat((ro.alive[1:], ro.next_alive[None]))
    acting_after = torch.cat((ro.acting[1:], ro.next_acting[None]))
    next_present = ro.truncated | (~ro.terminated & ~reset & alive_after)
    # A truncated agent decides in its final state unless it ended while another agent was to move.
    next_deciding = next_present & torch.where(ended, ~ro.truncated_waiting, acting_after)
    obs, actions, masks = _decisions(spec, ro)
    next_obs, next_masks = [], []
    for g, group in enumerate(spec.groups):
        columns = list(group.agent_indices)
        shape = ended[..., columns].shape + (1,) * (ro.obs[g].dim() - 3)
        after = torch.cat((ro.obs[g][1:], ro.next_obs[g][None]))
        next_obs.append(_flat(torch.where(ended[..., columns].view(shape), ro.final_obs[g], after)))
        mask = ro.action_masks[g]
        nvec = group.action.nvec
        allowed = torch.ones((*ended.shape[:2], len(columns), int(np.prod(nvec))), dtype=torch.bool)
        if mask is not None:
            fresh = (ended[..., columns] | reset)[..., None]
            mask_after = torch.cat((mask[1:], ro.next_action_masks[g][None]))
            allowed = torch.where(fresh, allowed, joint_action_mask(mask_after, nvec))
        next_masks.append(allowed)
    return JointTransitions(
        obs=obs,
        actions=actions,
        rewards=ro.rewards.clone(),
        terminated=ro.terminated.clone(),
        truncated=ro.truncated.clone(),
        alive=ro.alive.clone(),
        deciding=ro.valid,
        masks=masks,
        next_obs=tuple(next_obs),
        next_masks=tuple(next_masks),
        next_present=next_present,
        next_deciding=next_deciding,
    )


def _decisions(
    spec: JointSpec, ro: JointRollout
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor, tuple[torch.Tensor, ...]]:
    """The rollout's observations (per group ``[T, E, n_g, F_g]`` float32), actions (``[T, E, N]`` indices of
    the product of the heads, or ``[T, E, N, D]`` float32 where every agent acts in a Box) and legal actions (per
    group ``[T, E, n_g, prod(nvec)]`` bool) as transitions store them."""
    steps, copies = ro.rewards.shape[:2]
    all_actions = torch.from_numpy(_action_storage(spec, steps * copies)).view(steps, copies, *_action_tail(spec))
    obs, masks = [], []
    for g, group in enumerate(spec.groups):
        columns = list(group.agent_indices)
        nvec = group.action.nvec
        played = ro.actions[g]
        if group.action.kind == "box":
            all_actions[:, :, columns] = played.to(torch.float32).reshape(steps, copies, len(columns), -1)
        else:
            all_actions[:, :, columns] = played if group.action.kind == "discrete" else encode_actions(played, nvec)
        obs.append(_flat(ro.obs[g]))
        mask = ro.action_masks[g]
        legal = torch.ones((steps, copies, len(columns), int(np.prod(nvec))), dtype=torch.bool)
        masks.append(legal if mask is None else joint_action_mask(mask, nvec))
    return tuple(obs), all_actions, tuple(masks)


def _action_tail(spec: JointSpec) -> tuple[int, ...]:
    """The shape of one step's actions after the copy axis (``(N,)`` or ``(N, D)``)."""
    return tuple(_action_storage(spec, 1).shape[1:])


def _select(team: JointTransitions, step: torch.Tensor, copy: torch.Tensor) -> JointTransitions:
    """The team transitions at (``step``, ``copy``) (``[B]`` int64 each)."""
    return JointTransitions(*(_rows_of(field, lambda x: x[step, copy]) for field in team))


def _rows_of(field: Any, fn: Any) -> Any:
    return tuple(fn(x) for x in field) if isinstance(field, tuple) else fn(field)


def _flat(obs: torch.Tensor) -> torch.Tensor:
    """``[..., n_g, *shape]`` observations → float32 ``[..., n_g, F]`` (``[T, E, n_g, ...]`` in; uint8 scaled to
    [0, 1])."""
    flat = obs.reshape(*obs.shape[:3], -1)
    if flat.dtype == torch.uint8:
        return flat.to(torch.float32) / 255.0
    return flat.to(torch.float32, copy=True)


def transition_layout(spec: JointSpec) -> dict[str, Any]:
    """What one stored joint transition of ``spec``'s env holds: per field of :class:`JointTransitions`, the
    ``(shape after the batch axis, dtype)`` (a list of them, one per agent group, for the per-group fields)."""
    n = spec.num_agents
    actions = _action_storage(spec, 1)
    layout: dict[str, Any] = {
        "obs": [((g.size, g.observation.size), torch.float32) for g in spec.groups],
        "actions": (tuple(actions.shape[1:]), torch.from_numpy(actions).dtype),
        "rewards": ((n,), torch.float32),
        "masks": [((g.size, int(np.prod(g.action.nvec))), torch.bool) for g in spec.groups],
        "next_obs": [((g.size, g.observation.size), torch.float32) for g in spec.groups],
        "next_masks": [((g.size, int(np.prod(g.action.nvec))), torch.bool) for g in spec.groups],
    }
    for name in ("terminated", "truncated", "alive", "deciding", "next_present", "next_deciding"):
        layout[name] = ((n,), torch.bool)
    return layout


def check_saved_transitions(spec: JointSpec, saved: Mapping[str, Any]) -> None:
    """Refuses saved transitions (a checkpoint's replay buffer) that another env's steps made: each field's shape
    and dtype must be those this env's steps give (:func:`transition_layout`).

    Raises:
        ValueError: naming the first field (and agent group) that differs, the saved and the expected layout.
    """
    for name, expected in transition_layout(spec).items():
        value = saved.get(name)
        per_group = isinstance(expected, list)
        values = list(value) if per_group and isinstance(value, (tuple, list)) else [value]
        if per_group and len(values) != len(expected):
            raise ValueError(
                f"the checkpoint's replay buffer holds {name} of {len(values)} agent groups, but this env has "
                f"{len(expected)}; it was saved from another env: resume with that env, or start a new run"
            )
        for g, (tensor, (shape, dtype)) in enumerate(zip(values, expected if per_group else [expected])):
            ok = isinstance(tensor, torch.Tensor) and tuple(tensor.shape[1:]) == shape and tensor.dtype == dtype
            if not ok:
                what = f"{name} of group {spec.groups[g].name!r}" if per_group else name
                held = f"{tuple(tensor.shape[1:])} {tensor.dtype}" if isinstance(tensor, torch.Tensor) else repr(tensor)
                raise ValueError(
                    f"the checkpoint's replay buffer holds {what} of shape {held} per transition, but this env's "
                    f"are {shape} {dtype}; it was saved from another env: resume with that env, or start a new run"
                )


def _action_storage(spec: JointSpec, num_envs: int) -> np.ndarray:
    """Zeros for the actions of one step: ``[E, N]`` int64, or ``[E, N, D]`` float32 where every agent acts in a
    Box of D entries."""
    if all(layout.kind == "box" for layout in spec.actions):
        return np.zeros((num_envs, spec.num_agents, spec.actions[0].shape[0]), np.float32)
    return np.zeros((num_envs, spec.num_agents), np.int64)
