"""Frozen policies that populations, opponents and exploitability share, and per-episode mixtures of them.

A **frozen policy** acts for one agent (a seat) from that agent's observations and never changes. It follows
the :class:`FrozenPolicy` protocol, which :class:`~marljoint.policies.AgentPolicy` (a trained network taken
from the joint trainer) already satisfies; this module adds the tabular kinds that exact oracles produce:
:class:`UniformPolicy`, :class:`ConstantPolicy` (a fixed distribution, e.g. a matrix-game strategy) and
:class:`KuhnTablePolicy` (a Kuhn poker table of shape ``[6, 2]``).

A :class:`PolicyMixture` is a meta-strategy of one seat: at the start of every episode one member is drawn
with its weight and plays the whole episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from marljoint.best_response.kuhn import KUHN_HISTORIES, KUHN_NUM_ACTIONS, KUHN_NUM_INFOSETS
from marljoint.env.spaces import ActionLayout

__all__ = [
    "FrozenPolicy",
    "UniformPolicy",
    "ConstantPolicy",
    "KuhnTablePolicy",
    "PolicyMixture",
    "masked_head_probs",
    "normalised_weights",
    "policy_device",
    "sample_heads",
]


@runtime_checkable
class FrozenPolicy(Protocol):
    """One seat's fixed policy: batched action probabilities and sampling from its own observations."""

    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Actions for ``[B, *obs_shape]`` observations (``mask``: ``[B, sum(nvec)]`` bool); ``[B, *action_shape]``."""
        ...

    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per head, ``[B, n_k]`` action probabilities."""
        ...


def policy_device(policy: object) -> torch.device:
    """Where a frozen policy computes: the device of its parameters; the CPU for a policy without any (the
    tabular kinds). Callers move a policy's inputs there and read its outputs back to the CPU.

    Example:
        >>> policy_device(UniformPolicy(ActionLayout("discrete", (3,), ())))
        device(type='cpu')
    """
    parameters = getattr(policy, "parameters", None)
    first = next(iter(parameters()), None) if callable(parameters) else None
    return torch.device("cpu") if first is None else first.device


def masked_head_probs(probs: Sequence[torch.Tensor], mask: torch.Tensor | None) -> list[torch.Tensor]:
    """Restricts each head's probabilities to the allowed actions and renormalises.

    A row whose allowed actions all have probability 0 becomes uniform over the allowed actions; a head with
    no allowed action at all (a waiting player's all-zero mask) is left as it is, since its action is ignored.

    Args:
        probs: per head, ``[B, n_k]``.
        mask: ``[B, sum(n_k)]`` bool (True = allowed), or ``None``.

    Returns:
        Per head, ``[B, n_k]`` float probabilities summing to 1.
    """
    if mask is None:
        return [p / p.sum(-1, keepdim=True) for p in probs]
    out = []
    offset = 0
    for head in probs:
        size = head.shape[-1]
        allowed = mask[:, offset : offset + size]
        offset += size
        allowed = allowed | ~allowed.any(-1, keepdim=True)
        kept = head * allowed
        total = kept.sum(-1, keepdim=True)
        uniform = allowed.to(head.dtype) / allowed.sum(-1, keepdim=True)
        out.append(torch.where(total > 0, kept / total.clamp_min(1e-30), uniform))
    return out


def sample_heads(
    probs: Sequence[torch.Tensor], generator: torch.Generator, deterministic: bool, has_head_axis: bool
) -> torch.Tensor:
    """One action per row from per-head probabilities.

    Args:
        probs: per head, ``[B, n_k]``.
        generator: source of randomness.
        deterministic: take each head's most likely choice instead of sampling.
        has_head_axis: True for MultiDiscrete (``[B, K]`` result), False for Discrete (``[B]``).

    Returns:
        int64 actions.
    """
    heads = []
    for head in probs:
        if deterministic:
            heads.append(head.argmax(-1))
        else:
            heads.append(torch.multinomial(head.float(), 1, generator=generator).squeeze(-1))
    actions = torch.stack(heads, dim=-1)
    return actions if has_head_axis else actions[:, 0]


class _TabularBase:
    """Shared ``act``: sample from :meth:`action_probs`."""

    has_head_axis = False

    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        raise NotImplementedError

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Samples (or takes the mode of) actions, ``[B, *action_shape]`` int64."""
        return sample_heads(self.action_probs(obs, mask), generator, deterministic, self.has_head_axis)


class UniformPolicy(_TabularBase):
    """Uniformly random over the allowed choices of every head (categorical actions only).

    Args:
        action: the seat's action layout (``env.spec.actions[seat]``).

    Raises:
        ValueError: for a Box action layout.
    """

    def __init__(self, action: ActionLayout) -> None:
        if action.kind == "box":
            raise ValueError(
                "UniformPolicy needs categorical actions but got a Box layout; start the population from an "
                "untrained network instead (initial_policy='network')"
            )
        self.nvec = tuple(int(n) for n in action.nvec)
        self.has_head_axis = action.kind == "multidiscrete"

    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per head, ``[B, n_k]`` uniform probabilities over the allowed choices."""
        batch = obs.shape[0]
        probs = [torch.full((batch, n), 1.0 / n) for n in self.nvec]
        return masked_head_probs(probs, mask)

    def __repr__(self) -> str:
        return f"UniformPolicy(nvec={self.nvec})"


class ConstantPolicy(_TabularBase):
    """A fixed distribution per head, whatever the observation (e.g. a mixed strategy of a matrix game).

    Args:
        head_probs: per head, a probability vector ``[n_k]`` (renormalised).
        has_head_axis: True when the seat acts in a MultiDiscrete space (actions ``[B, K]``).

    Raises:
        ValueError: an empty list, or a vector that is negative, non-finite or sums to 0.
    """

    def __init__(self, head_probs: Sequence[np.ndarray], has_head_axis: bool = False) -> None:
        if len(head_probs) == 0:
            raise ValueError("head_probs is empty; pass one probability vector per action head")
        checked = []
        for k, probs in enumerate(head_probs):
            vector = np.asarray(probs, dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(vector)) or np.any(vector < 0) or vector.sum() <= 0:
                raise ValueError(f"head_probs[{k}] = {vector} must be non-negative and finite with a positive sum")
            checked.append(vector / vector.sum())
        self.head_probs = checked
        self.has_head_axis = bool(has_head_axis) or len(checked) > 1

    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per head, ``[B, n_k]``: the fixed vectors, masked."""
        batch = obs.shape[0]
        probs = [torch.as_tensor(p, dtype=torch.float32).expand(batch, -1) for p in self.head_probs]
        return masked_head_probs(probs, mask)

    def __repr__(self) -> str:
        return f"ConstantPolicy({[np.round(p, 4).tolist() for p in self.head_probs]})"


# Row offset, within a card's two rows, of each history one-hot index [5:9] for each player.
_KUHN_HISTORY_ROW = {0: {0: 0, 3: 1}, 1: {1: 0, 2: 1}}


class KuhnTablePolicy(_TabularBase):
    """A Kuhn poker tabular policy acting from the env's observations.

    Args:
        table: ``[6, 2]``, rows in :data:`~marljoint.best_response.kuhn.KUHN_INFOSETS` order for ``player``.
        player: 0 or 1.

    Raises:
        ValueError: a table of the wrong shape, or rows that are not distributions; ``player`` not 0 or 1.
    """

    def __init__(self, table: np.ndarray, player: int) -> None:
        array = np.asarray(table, dtype=np.float64)
        if player not in (0, 1):
            raise ValueError(f"player={player!r}; Kuhn poker has players 0 and 1")
        if array.shape != (KUHN_NUM_INFOSETS, KUHN_NUM_ACTIONS):
            raise ValueError(f"table has shape {array.shape}; a Kuhn poker tabular policy has shape (6, 2)")
        if not np.all(np.isfinite(array)) or np.any(array < 0) or np.any(np.abs(array.sum(1) - 1) > 1e-5):
            raise ValueError("every row of a Kuhn poker table must be a distribution over (pass, bet)")
        self.table = array / array.sum(1, keepdims=True)
        self.player = int(player)
        lookup = np.zeros(len(KUHN_HISTORIES), dtype=np.int64)
        for history_index, offset in _KUHN_HISTORY_ROW[self.player].items():
            lookup[history_index] = offset
        self._history_offset = torch.as_tensor(lookup)
        self._table = torch.as_tensor(self.table, dtype=torch.float32)

    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """``[[B, 2]]``: the table rows of the observed information sets (row of the card at ``""``/``"p"`` when
        the observation shows no decision of this player)."""
        card = obs[:, 0:3].argmax(-1)
        history = obs[:, 5:9].argmax(-1)
        rows = card * 2 + self._history_offset[history]
        return masked_head_probs([self._table[rows]], mask)

    def __repr__(self) -> str:
        return f"KuhnTablePolicy(player={self.player}, bet={np.round(self.table[:, 1], 4).tolist()})"


def normalised_weights(weights: np.ndarray | Sequence[float], count: int) -> np.ndarray:
    """Checks ``count`` mixture weights and returns them as float64 summing to 1.

    Raises:
        ValueError: weights of the wrong length, negative, non-finite or summing to 0.
    """
    vector = np.asarray(weights, dtype=np.float64).reshape(-1)
    if vector.shape != (count,):
        raise ValueError(f"weights has {vector.size} entries for {count} members; pass one weight per member")
    if not np.all(np.isfinite(vector)) or np.any(vector < 0) or vector.sum() <= 0:
        raise ValueError(f"weights = {vector} must be non-negative and finite with a positive sum")
    return vector / vector.sum()


class PolicyMixture:
    """A meta-strategy of one seat: each episode, member ``k`` plays with probability ``weights[k]``.

    Args:
        members: the frozen policies.
        weights: ``[K]`` non-negative weights with a positive sum (normalised here); uniform when ``None``.

    Raises:
        ValueError: no members, or weights of the wrong length, negative, non-finite or summing to 0.
    """

    def __init__(self, members: Sequence[FrozenPolicy], weights: np.ndarray | Sequence[float] | None = None) -> None:
        self.members = list(members)
        if not self.members:
            raise ValueError("a PolicyMixture needs at least one member policy")
        self.weights = normalised_weights(np.ones(len(self.members)) if weights is None else weights, len(self.members))

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        return f"PolicyMixture({len(self.members)} members, weights={np.round(self.weights, 4).tolist()})"
