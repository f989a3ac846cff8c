"""How PettingZoo spaces map onto the fixed-shape arrays marljoint trains on.

Every agent gets an :class:`ObservationLayout` (how its raw observation becomes one array of a fixed shape) and an
:class:`ActionLayout` (how the policy's head output becomes an env action). Agents whose two layouts are equal form
one group (:class:`GroupSpec`) and are evaluated in one batched forward.

Supported observation spaces: ``Box`` (rank 1 kept flat, rank 3 kept as an image ``[H, W, C]``, any other rank
flattened), ``Discrete`` and ``MultiDiscrete`` (one-hot), ``MultiBinary``, and ``Dict``/``Tuple`` of those (flattened
with :func:`gymnasium.spaces.flatten`). A ``Dict`` holding ``"observation"`` and ``"action_mask"`` is PettingZoo's
masked-action convention: the mask is split off and the observation part is processed alone.

Supported action spaces: ``Discrete`` (one categorical head), ``MultiDiscrete`` (factored categorical heads, one per
component) and bounded ``Box`` (diagonal Gaussian, clipped to the bounds when stepping the env).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces

__all__ = [
    "ActionLayout",
    "ObservationLayout",
    "GroupSpec",
    "JointSpec",
    "action_layout",
    "observation_layout",
    "group_agents",
    "process_observation",
]

ActionKind = Literal["discrete", "multidiscrete", "box"]
ObservationKind = Literal["flat", "image"]

UNBOUNDED_LIMIT = 1e6
"""A Box bound at least this large in magnitude counts as unbounded (:attr:`ObservationLayout.unbounded`)."""

_SUPPORTED_OBS = "Box, Discrete, MultiDiscrete, MultiBinary, or a Dict/Tuple of those"
_SUPPORTED_ACT = "Discrete, MultiDiscrete or a bounded Box"


@dataclass(frozen=True)
class ObservationLayout:
    """How one agent's raw observation becomes a fixed-shape array.

    Attributes:
        kind: ``"flat"`` (a vector of ``shape[0]`` floats) or ``"image"`` (``[H, W, C]``, kept as given).
        shape: shape of the processed observation of one agent.
        dtype: dtype of the processed observation (``float32``, or ``uint8`` for byte images).
        has_mask: whether the raw space is PettingZoo's ``Dict(observation=..., action_mask=...)``.
        unbounded: whether some bound of the raw space is infinite, or of magnitude >= 1e6 (a ``Box`` alone or
            inside a ``Dict``/``Tuple``): nothing tells the scale of such observations before training, which is
            what the ``normalize_observations`` default reads. Not compared: agents whose layouts differ only
            here still form one group.
    """

    kind: ObservationKind
    shape: tuple[int, ...]
    dtype: np.dtype
    has_mask: bool = False
    unbounded: bool = field(default=False, compare=False)

    @property
    def size(self) -> int:
        """Number of scalars in one processed observation."""
        return int(math.prod(self.shape))


@dataclass(frozen=True)
class ActionLayout:
    """How one agent's policy head maps onto its env action space.

    Attributes:
        kind: ``"discrete"``, ``"multidiscrete"`` or ``"box"``.
        nvec: number of choices per categorical head (``(n,)`` for Discrete); empty for Box.
        shape: shape of one agent's action as stored in a rollout: ``()`` for Discrete, ``(K,)`` for
            MultiDiscrete with K heads, ``(D,)`` for a Box of D dimensions.
        low: Box lower bounds, shape ``(D,)``; ``None`` for categorical layouts.
        high: Box upper bounds, shape ``(D,)``; ``None`` for categorical layouts.
        start: per-head offsets of MultiDiscrete/Discrete spaces (gymnasium's ``start``); zeros when unused.
        env_shape: the action shape the env expects (a Box of shape (2, 3) is stored flat as (6,)).
    """

    kind: ActionKind
    nvec: tuple[int, ...]
    shape: tuple[int, ...]
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    start: tuple[int, ...] = ()
    env_shape: tuple[int, ...] = ()

    @property
    def mask_size(self) -> int:
        """Length of this agent's action mask: ``sum(nvec)`` for categorical heads, 0 for Box."""
        return int(sum(self.nvec))

    @property
    def logits_size(self) -> int:
        """Number of outputs of the action head: ``sum(nvec)``, or D means for a Box."""
        return self.mask_size if self.kind != "box" else int(self.shape[0])

    @property
    def dtype(self) -> np.dtype:
        """Rollout dtype of actions: ``int64`` for categorical heads, ``float32`` for Box."""
        return np.dtype(np.float32) if self.kind == "box" else np.dtype(np.int64)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ActionLayout):
            return NotImplemented
        same_bounds = (self.low is None and other.low is None) or (
            self.low is not None
            and other.low is not None
            and np.array_equal(self.low, other.low)
            and np.array_equal(self.high, other.high)
        )
        return (
            self.kind == other.kind
            and self.nvec == other.nvec
            and self.shape == other.shape
            and self.start == other.start
            and self.env_shape == other.env_shape
            and same_bounds
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.nvec, self.shape, self.start, self.env_shape))


@dataclass(frozen=True)
class GroupSpec:
    """Agents with identical observation and action layouts, batched together.

    Attributes:
        name: a readable group name (the first member's agent name).
        agent_indices: indices of the members in ``possible_agents`` order.
        agents: the members' names.
        observation: the members' shared observation layout.
        action: the members' shared action layout.
    """

    name: str
    agent_indices: tuple[int, ...]
    agents: tuple[str, ...]
    observation: ObservationLayout
    action: ActionLayout

    @property
    def size(self) -> int:
        """Number of agents in the group (``n_g``)."""
        return len(self.agent_indices)


@dataclass(frozen=True)
class JointSpec:
    """Static description of a JointEnv: agents, their layouts, and the groups.

    Attributes:
        agents: agent names in ``possible_agents`` order (the agent axis N of every tensor).
        observations: one :class:`ObservationLayout` per agent.
        actions: one :class:`ActionLayout` per agent.
        groups: the agent groups, ordered by their first member.
        turn_based: whether only the ``acting`` agent's action counts on each step (AEC games).
        episode_limit: the most steps an episode lasts, when the env states it (PettingZoo's ``max_cycles``, or a
            ``max_steps`` / ``max_episode_steps`` attribute); ``None`` when it states none.
    """

    agents: tuple[str, ...]
    observations: tuple[ObservationLayout, ...]
    actions: tuple[ActionLayout, ...]
    groups: tuple[GroupSpec, ...]
    turn_based: bool = False
    episode_limit: int | None = None

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self.agents)

    def group_of(self, agent_index: int) -> tuple[int, int]:
        """Returns ``(group index, position within the group)`` of an agent."""
        for g, group in enumerate(self.groups):
            if agent_index in group.agent_indices:
                return g, group.agent_indices.index(agent_index)
        raise IndexError(f"agent index {agent_index} is out of range for {self.num_agents} agents")


def observation_layout(agent: str, space: gymnasium.Space) -> ObservationLayout:
    """Derives the processed observation layout of one agent.

    Args:
        agent: the agent's name, used in error messages.
        space: the agent's PettingZoo observation space.

    Returns:
        The layout; :func:`process_observation` turns a raw observation into an array of that layout.

    Raises:
        ValueError: for spaces that cannot become a fixed-shape array (Text, Graph, Sequence, unbounded nests).
    """
    if isinstance(space, spaces.Dict) and "observation" in space.spaces and "action_mask" in space.spaces:
        inner = observation_layout(agent, space.spaces["observation"])
        return ObservationLayout(inner.kind, inner.shape, inner.dtype, has_mask=True, unbounded=inner.unbounded)
    if isinstance(space, spaces.Box):
        if len(space.shape) == 3:
            dtype = np.dtype(np.uint8) if space.dtype == np.uint8 else np.dtype(np.float32)
            return ObservationLayout("image", tuple(int(s) for s in space.shape), dtype, unbounded=_unbounded(space))
        return ObservationLayout(
            "flat", (int(math.prod(space.shape)),), np.dtype(np.float32), unbounded=_unbounded(space)
        )
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict, spaces.Tuple)):
        try:
            flat = spaces.flatten_space(space)
        except NotImplementedError as exc:
            raise _obs_error(agent, space) from exc
        if not isinstance(flat, spaces.Box):
            raise _obs_error(agent, space)
        _check_nested(agent, space)
        return ObservationLayout("flat", (int(flat.shape[0]),), np.dtype(np.float32), unbounded=_unbounded(space))
    raise _obs_error(agent, space)


def _unbounded(space: gymnasium.Space) -> bool:
    """Whether a Box of ``space`` (itself, or one nested in a Dict/Tuple) has an infinite bound, or one so large
    (``|bound| >= 1e6``, such as float32's largest number standing in for infinity) that it says nothing of the
    scale."""
    if isinstance(space, spaces.Box):
        bounds = np.concatenate((np.ravel(space.low), np.ravel(space.high))).astype(np.float64)
        return bool(np.any(~np.isfinite(bounds)) or np.any(np.abs(bounds) >= UNBOUNDED_LIMIT))
    if isinstance(space, spaces.Dict):
        return any(_unbounded(sub) for sub in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return any(_unbounded(sub) for sub in space.spaces)
    return False


def _check_nested(agent: str, space: gymnasium.Space) -> None:
    if isinstance(space, spaces.Dict):
        for sub in space.spaces.values():
            _check_nested(agent, sub)
    elif isinstance(space, spaces.Tuple):
        for sub in space.spaces:
            _check_nested(agent, sub)
    elif not isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        raise _obs_error(agent, space)


def _obs_error(agent: str, space: gymnasium.Space) -> ValueError:
    return ValueError(
        f"agent {agent!r}: observation space {space} is not supported; marljoint accepts {_SUPPORTED_OBS}. "
        "Convert it first, e.g. with a supersuit observation wrapper (supersuit.observation_lambda_v0) "
        "that maps it to a Box."
    )


def action_layout(agent: str, space: gymnasium.Space) -> ActionLayout:
    """Derives the action-head layout of one agent.

    Args:
        agent: the agent's name, used in error messages.
        space: the agent's PettingZoo action space.

    Returns:
        The layout of the policy head that acts in ``space``.

    Raises:
        ValueError: for unsupported spaces (Dict, Tuple, MultiBinary, unbounded Box), naming the agent and the fix.
    """
    if isinstance(space, spaces.Discrete):
        return ActionLayout("discrete", (int(space.n),), (), start=(int(space.start),))
    if isinstance(space, spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise ValueError(
                f"agent {agent!r}: action space {space} has a {space.nvec.ndim}-D nvec; marljoint needs a 1-D "
                "MultiDiscrete. Flatten it with a supersuit action_lambda_v1 wrapper."
            )
        nvec = tuple(int(n) for n in space.nvec)
        start = tuple(int(s) for s in np.broadcast_to(space.start, space.nvec.shape))
        return ActionLayout("multidiscrete", nvec, (len(nvec),), start=start)
    if isinstance(space, spaces.Box):
        low = np.asarray(space.low, dtype=np.float32).reshape(-1)
        high = np.asarray(space.high, dtype=np.float32).reshape(-1)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(
                f"agent {agent!r}: action space {space} is unbounded; the Gaussian head needs finite bounds to "
                "clip to. Give the env a bounded Box (e.g. supersuit.clip_actions_v0 on a bounded copy)."
            )
        return ActionLayout("box", (), (low.size,), low=low, high=high, env_shape=tuple(space.shape))
    raise ValueError(
        f"agent {agent!r}: action space {space} is not supported; marljoint accepts {_SUPPORTED_ACT}. "
        "Map it onto one of those with a supersuit action_lambda_v1 wrapper."
    )


def group_agents(
    agents: tuple[str, ...],
    observations: tuple[ObservationLayout, ...],
    actions: tuple[ActionLayout, ...],
) -> tuple[GroupSpec, ...]:
    """Partitions agents into groups of identical observation and action layouts.

    Groups keep ``possible_agents`` order inside and are ordered by their first member.
    """
    groups: list[list[int]] = []
    for i in range(len(agents)):
        for members in groups:
            j = members[0]
            if observations[j] == observations[i] and actions[j] == actions[i]:
                members.append(i)
                break
        else:
            groups.append([i])
    return tuple(
        GroupSpec(
            name=agents[m[0]],
            agent_indices=tuple(m),
            agents=tuple(agents[i] for i in m),
            observation=observations[m[0]],
            action=actions[m[0]],
        )
        for m in groups
    )


def process_observation(agent: str, space: gymnasium.Space, layout: ObservationLayout, raw: Any) -> np.ndarray:
    """Turns one raw observation into an array of ``layout.shape`` (the mask part of a Dict is dropped).

    Non-finite values are not checked here: the adapter checks whole batches at once.

    Raises:
        ValueError: if the observation has the wrong number of values for its space.
    """
    if layout.has_mask:
        space = space.spaces["observation"]
        raw = raw["observation"]
    if isinstance(space, spaces.Box):
        arr = np.asarray(raw)
        if arr.size != layout.size:
            raise ValueError(
                f"agent {agent!r}: observation of shape {arr.shape} does not match its space {space} "
                f"(expected {layout.size} values); the env returns observations outside its declared space."
            )
        arr = arr.reshape(layout.shape)
    else:
        arr = spaces.flatten(space, raw)
    return arr
