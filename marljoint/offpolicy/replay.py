"""The replay buffer of joint transitions: preallocated ``[C, ...]`` storage filled E transitions at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

__all__ = ["JointTransitions", "ReplayBuffer"]


class JointTransitions(NamedTuple):
    """B joint transitions (one per env copy when stored, a sampled batch when read), built from collected
    rollouts (:mod:`marljoint.offpolicy.transitions`).

    Observations, action masks and next observations and action masks are per agent group ``g`` (flattened
    observations); the per-agent fields are over all N agents in ``possible_agents`` order. Action masks are over
    the product of an agent's heads (``A_g = prod(nvec)``, :func:`~marljoint.offpolicy.functional.joint_action_mask`;
    Discrete: its actions; Box: one entry, always True).

    Attributes:
        obs: per group, ``[B, n_g, F_g]`` float32 observations acted on.
        actions: ``[B, N]`` int64 actions taken (meaningless where ``deciding`` is False).
        rewards: ``[B, N]`` rewards of the step.
        terminated: ``[B, N]`` bool, the agent's episode ended in a terminal state.
        truncated: ``[B, N]`` bool, the agent's episode was cut (time limit): its next state is bootstrapped.
        alive: ``[B, N]`` bool, the agent was present at the step.
        deciding: ``[B, N]`` bool, the agent's action was used (present, and in turn-based games its turn).
        next_obs: per group, ``[B, n_g, F_g]``, the next observations (the final one before a reset where the
            agent's episode ended).
        next_masks: per group, ``[B, n_g, A_g]`` bool, the legal actions at the agent's next decision (the next
            state's; all allowed after a truncation, whose final state's mask the env does not report).
        next_present: ``[B, N]`` bool, the agent is in the next state (it continues, or was truncated).
        next_deciding: ``[B, N]`` bool, the agent decides in the next state.
        masks: per group, ``[B, n_g, A_g]`` bool, the legal actions at ``obs`` (those the agent chose from where it
            decided; all allowed for Box actions). Empty (``()``) in transitions made without them, which their
            readers take as every action legal.
    """

    obs: tuple[torch.Tensor, ...]
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    alive: torch.Tensor
    deciding: torch.Tensor
    next_obs: tuple[torch.Tensor, ...]
    next_masks: tuple[torch.Tensor, ...]
    next_present: torch.Tensor
    next_deciding: torch.Tensor
    masks: tuple[torch.Tensor, ...] = ()

    def to(self, device: torch.device | str) -> JointTransitions:
        """The same transitions on ``device``."""
        return JointTransitions(*(_map(field, lambda x: x.to(device)) for field in self))


def _map(field: Any, fn: Any) -> Any:
    return tuple(fn(x) for x in field) if isinstance(field, tuple) else fn(field)


class ReplayBuffer:
    """A ring buffer of :class:`JointTransitions` holding ``capacity`` joint transitions.

    Args:
        capacity: C, the transitions held; the oldest are overwritten.
        example: transitions whose shapes and dtypes (after the batch axis) the storage takes.

    Raises:
        ValueError: for a non-positive capacity.
    """

    def __init__(self, capacity: int, example: JointTransitions) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"buffer_size must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self.storage = JointTransitions(
            *(_map(field, lambda x: torch.zeros((capacity, *x.shape[1:]), dtype=x.dtype)) for field in example)
        )
        self.position = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, transitions: JointTransitions) -> None:
        """Stores B transitions (in order; past the end the buffer wraps around)."""
        rows = transitions.actions.shape[0]
        index = (self.position + torch.arange(rows)) % self.capacity
        for stored, new in zip(self.storage, transitions):
            for s, x in zip(*((stored, new) if isinstance(stored, tuple) else ((stored,), (new,)))):
                s[index] = x.to(s.device)
        self.position = (self.position + rows) % self.capacity
        self.size = min(self.size + rows, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator) -> JointTransitions:
        """``batch_size`` transitions drawn uniformly with replacement from those stored.

        Raises:
            ValueError: if the buffer is empty.
        """
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer; store transitions first")
        index = torch.randint(self.size, (batch_size,), generator=generator)
        return self.gather(index)

    def gather(self, index: torch.Tensor) -> JointTransitions:
        """The transitions at the given buffer rows (``[B]`` int64)."""
        return JointTransitions(*(_map(field, lambda x: x[index]) for field in self.storage))

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions (only the filled rows) and the write position."""
        rows = torch.arange(self.size)
        return {"transitions": self.gather(rows)._asdict(), "position": self.position, "size": self.size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a buffer of the same capacity and shapes.

        Raises:
            ValueError: if the saved transitions do not fit this buffer.
        """
        saved = JointTransitions(**state["transitions"])
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"the saved buffer holds {size} transitions, more than buffer_size={self.capacity}")
        for stored, new in zip(self.storage, saved):
            pairs: Sequence[tuple[torch.Tensor, torch.Tensor]] = (
                list(zip(stored, new)) if isinstance(stored, tuple) else [(stored, new)]
            )
            for s, x in pairs:
                if tuple(s.shape[1:]) != tuple(x.shape[1:]):
                    raise ValueError(f"saved transitions of shape {tuple(x.shape)} do not fit storage {tuple(s.shape)}")
                s[:size] = x
        self.position, self.size = int(state["position"]), size
