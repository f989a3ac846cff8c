"""Joint transitions from the env adapter's steps: what each agent saw, did and sees next; and, for learners that
credit each agent's own moves, those transitions joined into decision-to-decision moves (:class:`PendingMoves`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from marljoint.env.base import JointObs, JointStep
from marljoint.env.spaces import JointSpec
from marljoint.offpolicy.functional import encode_actions, joint_action_mask
from marljoint.offpolicy.replay import JointTransitions, _map

__all__ = ["PendingMoves", "check_saved_transitions", "joint_transitions", "transition_layout"]


def joint_transitions(
    spec: JointSpec, before: JointObs, actions: Sequence[np.ndarray], step: JointStep
) -> JointTransitions:
    """The E joint transitions of one env step.

    An agent whose episode ended on the step (terminated or truncated) has its final observation as next
    observation; a terminated agent is absent from the next state (nothing bootstrapped from it), a truncated one
    present in it (bootstrapped, with all actions legal since the env does not report its final mask). In
    turn-based games an agent decides in the next state only on its own turn.

    Args:
        spec: the env's agents and groups.
        before: the observations the actions were chosen on.
        actions: per group ``[E, n_g]`` (Discrete) or ``[E, n_g, K]`` (MultiDiscrete) int64, the actions played,
            stored as indices of the product of the heads' choices; or, where every agent acts in a Box,
            ``[E, n_g, D]`` float32, stored as they are (``[E, N, D]`` float32 actions).
        step: the env's outcome.

    Returns:
        :class:`JointTransitions` of E rows, on the CPU.
    """
    ended = step.terminated | step.truncated
    reset = step.reset_envs[:, None]
    next_present = step.truncated | (~step.terminated & ~reset & step.alive)
    final_acting = np.ones_like(ended) if step.final_waiting is None else ~step.final_waiting
    next_deciding = next_present & np.where(ended, final_acting, step.acting)
    num_envs = ended.shape[0]
    all_actions = _action_storage(spec, num_envs)
    obs, next_obs, next_masks = [], [], []
    for g, group in enumerate(spec.groups):
        columns = list(group.agent_indices)
        nvec = group.action.nvec
        if group.action.kind == "box":
            all_actions[:, columns] = np.asarray(actions[g], np.float32).reshape(num_envs, len(columns), -1)
        else:
            played = torch.as_tensor(np.asarray(actions[g], np.int64))
            categorical = played if group.action.kind == "discrete" else encode_actions(played, nvec)
            all_actions[:, columns] = categorical.numpy()
        obs.append(_flat(before.obs[g]))
        shape = (num_envs, len(columns)) + (1,) * (step.obs[g].ndim - 2)
        next_obs.append(_flat(np.where(ended[:, columns].reshape(shape), step.final_obs[g], step.obs[g])))
        mask = step.action_masks[g]
        allowed = torch.ones((num_envs, len(columns), int(np.prod(nvec))), dtype=torch.bool)
        if mask is not None:
            fresh = torch.from_numpy(ended[:, columns] | reset)[..., None]
            allowed = torch.where(fresh, allowed, joint_action_mask(torch.from_numpy(mask.copy()), nvec))
        next_masks.append(allowed)
    return JointTransitions(
        obs=tuple(obs),
        actions=torch.from_numpy(all_actions),
        rewards=torch.from_numpy(np.array(step.rewards, np.float32)),  # a copy: the env reuses its arrays
        terminated=torch.from_numpy(step.terminated.copy()),
        truncated=torch.from_numpy(step.truncated.copy()),
        alive=torch.from_numpy(before.alive.copy()),
        deciding=torch.from_numpy(before.alive & before.acting),
        next_obs=tuple(next_obs),
        next_masks=tuple(next_masks),
        next_present=torch.from_numpy(next_present),
        next_deciding=torch.from_numpy(next_deciding),
    )


def transition_layout(spec: JointSpec) -> dict[str, Any]:
    """What one stored joint transition of ``spec``'s env holds: per field of :class:`JointTransitions`, the
    ``(shape after the batch axis, dtype)`` (a list of them, one per agent group, for the per-group fields)."""
    n = spec.num_agents
    actions = _action_storage(spec, 1)
    layout: dict[str, Any] = {
        "obs": [((g.size, g.observation.size), torch.float32) for g in spec.groups],
        "actions": (tuple(actions.shape[1:]), torch.from_numpy(actions).dtype),
        "rewards": ((n,), torch.float32),
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


def _flat(obs: np.ndarray) -> torch.Tensor:
    """``[E, n_g, *shape]`` → float32 ``[E, n_g, F]`` (a copy: the env may reuse its arrays)."""
    flat = np.asarray(obs).reshape(obs.shape[0], obs.shape[1], -1)
    if flat.dtype == np.uint8:
        return torch.from_numpy(flat.astype(np.float32) / np.float32(255.0))
    return torch.from_numpy(flat.astype(np.float32, copy=True))


class PendingMoves:
    """Each agent's moves from one of its decisions to the next: the turn-based credit of per-agent learners.

    The rule is PPO's (:func:`~marljoint.collect.carry_pending_moves`, :func:`~marljoint.ppo.compute_gae`): the
    rewards an agent receives while it waits for another agent's move belong to its previous move, undiscounted,
    and that move bootstraps at the agent's next decision. So a move after which its agent waits is held back
    until the agent decides again, gathering the agent's rewards of the steps in between, and is then completed
    with the state of that decision (next observations, legal actions, who is present and who decides), or with
    its episode's end: a termination stops the bootstrap, a truncation bootstraps from the final observation where
    the agent was to move there. A move whose episode is truncated while its agent waits is left out (its target
    would need the value of a state the agent does not move in, which its critic does not learn), as PPO leaves it
    out.

    Simultaneous-move envs have no held moves (every present agent decides in every state): their transitions pass
    through :meth:`complete` unchanged. A transition of several deciders of which some wait is split: the others'
    row is stored at once, each waiting agent's held as a row in which only it decides.
    """

    def __init__(self) -> None:
        self.held: JointTransitions | None = None
        """The held moves, ``E · N`` rows (row ``e · N + j``: agent j's move in copy e; only agent j decides)."""
        self.waiting: torch.Tensor | None = None
        """``[E, N]`` bool: agent j of copy e has a held move."""

    def complete(self, step: JointTransitions) -> JointTransitions | None:
        """The transitions to store after one env step: the held moves this step completes, then the step's own
        transitions whose deciders do not wait; ``None`` when there are none.

        Args:
            step: the step's :class:`JointTransitions` (E rows, one per env copy), from :func:`joint_transitions`.

        Raises:
            ValueError: if the step's number of copies or agents differs from the previous steps'.
        """
        copies, agents = step.rewards.shape
        if self.held is None or self.waiting is None:
            rows = copies * agents
            self.held = JointTransitions(*(_map(f, lambda x: x.new_zeros((rows, *x.shape[1:]))) for f in step))
            self.waiting = torch.zeros((copies, agents), dtype=torch.bool)
        elif tuple(self.waiting.shape) != (copies, agents):
            raise ValueError(
                f"a step of {copies} env copies and {agents} agents follows steps of {tuple(self.waiting.shape)}; "
                "use one PendingMoves per env"
            )
        parts = [] if not bool(self.waiting.any()) else [self._finish_held(step)]
        ended_or_continues = step.terminated | ~step.next_present | step.next_deciding
        waits = step.deciding & ~ended_or_continues  # held, or left out where truncated while waiting
        if not bool(waits.any()):
            parts.append(step)
        else:
            self._hold(step, waits & ~step.truncated)
            stored = step.deciding & ~waits
            keep = stored.any(-1) | ~step.deciding.any(-1)
            parts.append(_rows(step._replace(deciding=stored), keep.nonzero().flatten()))
        parts = [p for p in parts if p.actions.shape[0] > 0]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else _concat(parts)

    def _finish_held(self, step: JointTransitions) -> JointTransitions:
        """Credits the step's rewards to the held moves and takes out those the step completes (its rows, in
        copy-then-agent order; those truncated while their agent waits are dropped)."""
        agents = step.rewards.shape[1]
        waiting = self.waiting
        per_move = self.held.rewards.view(-1, agents, agents)
        torch.diagonal(per_move, dim1=1, dim2=2).add_(torch.where(waiting, step.rewards, 0.0))
        done = waiting & (step.terminated | step.truncated | ~step.next_present | step.next_deciding)
        dropped = done & step.truncated & ~step.terminated & ~step.next_deciding
        self.waiting = waiting & ~done
        copy, agent = (done & ~dropped).nonzero(as_tuple=True)
        rows = copy * agents + agent
        outcome = {
            name: getattr(step, name)[copy] for name in ("terminated", "truncated", "next_present", "next_deciding")
        }
        finished = _rows(self.held, rows)._replace(
            next_obs=tuple(x[copy] for x in step.next_obs),
            next_masks=tuple(x[copy] for x in step.next_masks),
            **outcome,
        )
        return finished

    def _hold(self, step: JointTransitions, moves: torch.Tensor) -> None:
        """Holds the ``[E, N]`` bool ``moves`` of the step: agent j's row of copy e with only j deciding."""
        agents = step.rewards.shape[1]
        copy, agent = moves.nonzero(as_tuple=True)
        own = torch.nn.functional.one_hot(agent, agents).bool()
        rows = copy * agents + agent
        for held, new in zip(self.held, _rows(step, copy)._replace(deciding=own)):
            for h, x in zip(*((held, new) if isinstance(held, tuple) else ((held,), (new,)))):
                h[rows] = x
        self.waiting = self.waiting | moves

    def clear(self) -> None:
        """Forgets the held moves (their episodes end unseen: the env copies restart)."""
        self.held, self.waiting = None, None

    def state_dict(self) -> dict[str, Any] | None:
        """The held moves (``None`` before the first step)."""
        if self.held is None or self.waiting is None:
            return None
        held = _rows(self.held, torch.arange(self.held.actions.shape[0]))  # a copy: the held rows change in place
        return {"held": held._asdict(), "waiting": self.waiting.clone()}

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Restores :meth:`state_dict` output (``None``: nothing held)."""
        if state is None:
            self.clear()
            return
        saved = JointTransitions(**state["held"])
        self.held = _rows(saved, torch.arange(saved.actions.shape[0]))  # a copy: the held rows change in place
        self.waiting = state["waiting"].clone().bool()


def _rows(transitions: JointTransitions, index: torch.Tensor) -> JointTransitions:
    """The transitions at ``index`` (``[B]`` int64), copied."""
    return JointTransitions(*(_map(field, lambda x: x[index]) for field in transitions))


def _concat(parts: Sequence[JointTransitions]) -> JointTransitions:
    """The transitions of ``parts`` one after another."""
    fields = []
    for values in zip(*parts):
        if isinstance(values[0], tuple):
            fields.append(tuple(torch.cat(group) for group in zip(*values)))
        else:
            fields.append(torch.cat(values))
    return JointTransitions(*fields)
