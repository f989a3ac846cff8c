"""The checks both PettingZoo adapters share, and their messages: what builds the env copies, whether the copies
agree, the actions handed to a step, and the rewards and observations an env returns.

Every message names the agent, the env copy and the value where there is one, and the fix.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from pettingzoo.utils.env import AECEnv, ParallelEnv

from marljoint.env.base import NonFiniteEnvError
from marljoint.env.spaces import ActionLayout, JointSpec

__all__ = [
    "check_actions",
    "check_copy_counts",
    "check_finite",
    "check_identical_copies",
    "check_pettingzoo_env",
    "resolve_factory",
]

_BOX_TOLERANCE = 1e-6
"""How far outside its bounds a Box action may be (it is clipped onto them before the env sees it)."""


def resolve_factory(env_fn: Any) -> Callable[[], Any]:
    """Accepts a factory, or a PettingZoo env module (uses its ``parallel_env``, else its ``env``).

    Raises:
        TypeError: for a module with neither, an env instance, or anything else not callable.
    """
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


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_copy_counts(num_envs: Any, first_copy: Any) -> None:
    """Raises ValueError unless ``num_envs`` is a positive integer and ``first_copy`` an integer >= 0."""
    if not _is_count(num_envs) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if not _is_count(first_copy) or first_copy < 0:
        raise ValueError(f"first_copy must be an integer >= 0, got {first_copy!r}")


def check_pettingzoo_env(env: Any) -> None:
    """Raises TypeError unless ``env`` (what the factory built) is a PettingZoo ``ParallelEnv`` or ``AECEnv``."""
    if not isinstance(env, (ParallelEnv, AECEnv)):
        raise TypeError(
            f"env_fn returned {type(env).__name__}, which is neither a PettingZoo ParallelEnv nor an AECEnv"
        )


def check_identical_copies(
    envs: Sequence[Any],
) -> tuple[tuple[str, ...], tuple[gymnasium.Space, ...], tuple[gymnasium.Space, ...]]:
    """The agents and spaces of the env copies, which must all agree with copy 0's.

    Returns:
        ``(possible_agents, observation spaces, action spaces)``, the spaces in ``possible_agents`` order.

    Raises:
        ValueError: if there is no agent, or a copy has other agents or other spaces than copy 0.
    """
    first = envs[0]
    agents = tuple(first.possible_agents)
    if not agents:
        raise ValueError("the env has no possible_agents; marljoint needs at least one agent")
    for e, env in enumerate(envs[1:], start=1):
        if tuple(env.possible_agents) != agents:
            raise ValueError(
                f"env copy {e} has possible_agents {list(env.possible_agents)}, copy 0 has {list(agents)}; "
                "env_fn must build identical envs"
            )
    obs_spaces = tuple(first.observation_space(a) for a in agents)
    act_spaces = tuple(first.action_space(a) for a in agents)
    for e, env in enumerate(envs[1:], start=1):
        for a, obs_space, act_space in zip(agents, obs_spaces, act_spaces):
            if env.observation_space(a) != obs_space or env.action_space(a) != act_space:
                raise ValueError(
                    f"env copy {e} gives agent {a!r} the spaces {env.observation_space(a)} / "
                    f"{env.action_space(a)}, "
                    f"copy 0 gives {obs_space} / {act_space}; env_fn must build identical envs"
                )
    return agents, obs_spaces, act_spaces


def check_actions(
    actions: Sequence[Any],
    spec: JointSpec,
    acting: np.ndarray,
    masks: Sequence[np.ndarray | None],
    masked_groups: Sequence[bool],
) -> list[np.ndarray]:
    """The actions of one step as numpy arrays, checked where they are used.

    Args:
        actions: per group, ``[E, n_g, *action_shape_g]`` (numpy arrays or torch tensors).
        spec: the env's spec.
        acting: ``[E, N]``, the agents whose action is used (the others' may be anything).
        masks: per group, ``[E, n_g, mask_size_g]`` action masks (``None`` for Box groups).
        masked_groups: per group, whether its env has shown a mask (else its masks allow everything).

    Returns:
        Per group, the actions as ``[E, n_g, *action_shape_g]`` arrays (integers for categorical groups).

    Raises:
        ValueError: wrong number of groups, wrong shape or dtype, out-of-range or masked-out actions, non-finite
            Box actions; each names the agent and the value.
    """
    groups = spec.groups
    if isinstance(actions, np.ndarray) or len(actions) != len(groups):
        count = "an array" if isinstance(actions, np.ndarray) else f"{len(actions)} arrays"
        raise ValueError(
            f"step() needs one action array per agent group ({len(groups)} groups: "
            f"{[list(g.agents) for g in groups]}), got {count}; see env.spec.groups"
        )
    checked = []
    for g, (group, raw) in enumerate(zip(groups, actions)):
        arr = raw.detach().cpu().numpy() if hasattr(raw, "detach") else np.asarray(raw)
        expected = (acting.shape[0], group.size, *group.action.shape)
        if arr.shape != expected:
            raise ValueError(
                f"actions for group {list(group.agents)} have shape {arr.shape}, expected {expected} "
                f"([num_envs, agents in group, *action_shape] for {group.action.kind} actions)"
            )
        used = acting[:, list(group.agent_indices)]
        if group.action.kind == "box":
            _check_box(group.agents, group.action, arr, used)
        else:
            mask = masks[g] if masked_groups[g] else None
            arr = _check_categorical(group.agents, group.action, arr, used, mask)
        checked.append(arr)
    return checked


def _check_box(agents: tuple[str, ...], layout: ActionLayout, arr: np.ndarray, used: np.ndarray) -> None:
    flat = arr.reshape(arr.shape[0], arr.shape[1], -1)
    bad = used & ~np.isfinite(flat).all(-1)
    if bad.any():
        e, j = np.argwhere(bad)[0]
        raise ValueError(f"agent {agents[j]!r} (env copy {e}): action {flat[e, j]} is not finite")
    tol = _BOX_TOLERANCE
    outside = used & ((flat < layout.low - tol) | (flat > layout.high + tol)).any(-1)
    if outside.any():
        e, j = np.argwhere(outside)[0]
        raise ValueError(
            f"agent {agents[j]!r} (env copy {e}): action {flat[e, j]} is outside its Box bounds "
            f"[{layout.low}, {layout.high}]; clip it first (np.clip(action, low, high))"
        )


def _check_categorical(
    agents: tuple[str, ...], layout: ActionLayout, arr: np.ndarray, used: np.ndarray, mask: np.ndarray | None
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
    if mask is not None:
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


def check_finite(
    spec: JointSpec,
    rewards: np.ndarray,
    obs: Sequence[np.ndarray],
    final_obs: Sequence[np.ndarray],
    first_copy: int = 0,
) -> None:
    """Raises :class:`~marljoint.env.base.NonFiniteEnvError` (a ValueError) naming the agent and the copy if the
    env returned a non-finite reward or observation.

    Args:
        spec: the env's spec.
        rewards: ``[E, N]``.
        obs: per group, ``[E, n_g, *obs_shape_g]``.
        final_obs: per group, ``[E, n_g, *obs_shape_g]``.
        first_copy: global index of the first of these copies (a worker's slice of a larger set), for the message.
    """
    if not np.isfinite(rewards).all():
        e, i = np.argwhere(~np.isfinite(rewards))[0]
        raise NonFiniteEnvError(
            f"agent {spec.agents[i]!r} (env copy {first_copy + e}): the env returned a non-finite reward "
            f"({rewards[e, i]}); fix the env, or clip rewards with supersuit.clip_reward_v0"
        )
    for g, group in enumerate(spec.groups):
        # Final-observation rows are only written for agents that end, and each write is checked here, so
        # a non-finite value anywhere in either buffer arrived with this step.
        for values in (obs[g], final_obs[g]):
            if values.dtype.kind != "f" or np.isfinite(values).all():
                continue
            bad = ~np.isfinite(values.reshape(values.shape[0], values.shape[1], -1)).all(-1)
            e, j = np.argwhere(bad)[0]
            raise NonFiniteEnvError(
                f"agent {group.agents[j]!r} (env copy {first_copy + e}): the env returned a non-finite observation "
                "(NaN or inf); fix the env, or clean it with supersuit.observation_lambda_v0(env, np.nan_to_num)"
            )
