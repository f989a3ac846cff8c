"""A reservoir buffer: a uniform sample of everything ever added, in fixed memory (Vitter's algorithm R)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["ReservoirBuffer", "ReservoirBatch"]


class ReservoirBatch(NamedTuple):
    """A minibatch drawn from a :class:`ReservoirBuffer`.

    Attributes:
        obs: ``[B, *obs_shape]``.
        actions: ``[B, *action_shape]``.
        masks: ``[B, mask_size]`` bool, or ``None`` when the buffer stores no masks.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    masks: torch.Tensor | None


class ReservoirBuffer:
    """Keeps a uniform random sample of at most ``capacity`` of all the (observation, action, mask) rows added.

    Row number ``t`` (counting from 0 over the buffer's life) is stored in slot ``t`` while the buffer is not
    full; afterwards it replaces slot ``j ~ U{0..t}`` when ``j < capacity``. Every row ever added is then in the
    buffer with probability ``capacity / seen``. A batch of rows is inserted in one vectorised step with the same
    result as inserting them one by one (when two rows of a batch draw the same slot, the later one wins).

    NFSP keeps one per agent: its rows are the agent's own best-response actions, and its average policy is
    trained by supervised learning on uniform minibatches from it.

    Args:
        capacity: maximum number of rows.
        obs_shape: one observation's shape.
        action_shape: one action's shape (``()`` for Discrete).
        mask_size: action-mask length, or ``None`` to store no masks.
        obs_dtype: torch dtype of the observations.
        action_dtype: torch dtype of the actions.
        seed: seeds the slot draws.

    Example:
        >>> buffer = ReservoirBuffer(3, obs_shape=(1,), action_shape=(), seed=0)
        >>> buffer.add(torch.arange(5.0).reshape(5, 1), torch.arange(5))
        >>> len(buffer), buffer.seen
        (3, 5)

    Raises:
        ValueError: a capacity below 1.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        mask_size: int | None = None,
        obs_dtype: torch.dtype = torch.float32,
        action_dtype: torch.dtype = torch.int64,
        seed: int = 0,
    ) -> None:
        if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r} (e.g. 100_000)")
        self.capacity = int(capacity)
        self.obs = torch.zeros((self.capacity, *obs_shape), dtype=obs_dtype)
        self.actions = torch.zeros((self.capacity, *action_shape), dtype=action_dtype)
        self.masks = None if mask_size is None else torch.ones((self.capacity, mask_size), dtype=torch.bool)
        self.seen = 0
        self._rng = np.random.default_rng(np.random.SeedSequence([int(seed) % 2**63, 0x726573]))

    def __len__(self) -> int:
        return min(self.seen, self.capacity)

    def add(self, obs: torch.Tensor, actions: torch.Tensor, masks: torch.Tensor | None = None) -> None:
        """Offers ``k`` rows to the reservoir.

        Args:
            obs: ``[k, *obs_shape]``.
            actions: ``[k, *action_shape]``.
            masks: ``[k, mask_size]`` bool (required when the buffer stores masks, ignored otherwise).

        Raises:
            ValueError: rows of the wrong shape, or a missing mask.
        """
        count = int(obs.shape[0])
        obs_shape, action_shape = tuple(self.obs.shape[1:]), tuple(self.actions.shape[1:])
        if tuple(obs.shape[1:]) != obs_shape or tuple(actions.shape) != (count, *action_shape):
            expected_obs = ", ".join(["k", *map(str, obs_shape)])
            expected_actions = ", ".join(["k", *map(str, action_shape)])
            raise ValueError(
                f"got obs {tuple(obs.shape)} and actions {tuple(actions.shape)}; expected [{expected_obs}] and "
                f"[{expected_actions}]"
            )
        if self.masks is not None and (masks is None or tuple(masks.shape) != (count, self.masks.shape[1])):
            raise ValueError(f"this buffer stores action masks: pass masks of shape [{count}, {self.masks.shape[1]}]")
        if count == 0:
            return
        positions = self.seen + np.arange(count)
        slots = positions.copy()
        full = positions >= self.capacity
        if full.any():
            draws = np.floor(self._rng.random(int(full.sum())) * (positions[full] + 1)).astype(np.int64)
            slots[full] = draws
        kept = slots < self.capacity
        # Later rows overwrite earlier ones that drew the same slot: keep each slot's last row.
        rows = np.flatnonzero(kept)
        reversed_slots = slots[rows][::-1]
        _, first_in_reversed = np.unique(reversed_slots, return_index=True)
        rows = rows[::-1][first_in_reversed]
        index = torch.as_tensor(rows)
        target = torch.as_tensor(slots[rows])
        self.obs[target] = obs[index].to(self.obs.dtype)
        self.actions[target] = actions[index].to(self.actions.dtype)
        if self.masks is not None and masks is not None:
            self.masks[target] = masks[index].bool()
        self.seen += count

    def sample(self, batch_size: int, generator: torch.Generator) -> ReservoirBatch:
        """A uniform minibatch (with replacement) of the stored rows.

        Raises:
            ValueError: an empty buffer.
        """
        size = len(self)
        if size == 0:
            raise ValueError("the reservoir is empty; add rows before sampling")
        index = torch.randint(0, size, (int(batch_size),), generator=generator)
        return ReservoirBatch(self.obs[index], self.actions[index], None if self.masks is None else self.masks[index])

    def state_dict(self) -> dict[str, Any]:
        """The stored rows, the count and the generator state."""
        size = len(self)
        return {
            "capacity": self.capacity,
            "obs": self.obs[:size].clone(),
            "actions": self.actions[:size].clone(),
            "masks": None if self.masks is None else self.masks[:size].clone(),
            "seen": self.seen,
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a buffer of the same capacity and shapes.

        Raises:
            ValueError: a different capacity.
        """
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"the saved buffer has capacity {state['capacity']}, this one {self.capacity}")
        size = state["obs"].shape[0]
        self.obs[:size] = state["obs"]
        self.actions[:size] = state["actions"]
        if self.masks is not None and state["masks"] is not None:
            self.masks[:size] = state["masks"]
        self.seen = int(state["seen"])
        self._rng.bit_generator.state = state["rng"]

    def __repr__(self) -> str:
        return f"ReservoirBuffer(capacity={self.capacity}, size={len(self)}, seen={self.seen})"
