"""A conformance check for JointEnvs, shipped so users can test their own environments."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from marljoint.env.base import JointEnv, JointObs, JointStep
from marljoint.env.spaces import JointSpec

__all__ = [
    "BlankImageWarning",
    "JointEnvCheckError",
    "blank_image_agents",
    "blank_image_message",
    "check_joint_env",
    "random_actions",
]


class JointEnvCheckError(AssertionError):
    """Raised by :func:`check_joint_env` when an env breaks the JointEnv contract; the message says how."""


class BlankImageWarning(UserWarning):
    """Warned when an agent's image observations hold one value at every step of a rollout: nothing to learn from.

    The trainer checks its first rollout (:func:`blank_image_agents`). A PettingZoo env that draws its screen only
    when it renders gives such frames without a render mode (``cooperative_pong_v6`` returns black frames with
    ``render_mode=None``).
    """


def blank_image_agents(spec: JointSpec, obs: Sequence[np.ndarray], alive: np.ndarray) -> dict[str, float]:
    """The agents that observe images and saw one value in every pixel of every image while present.

    Flat observations are never reported: a constant vector is a legitimate observation (a matrix game's agents
    observe nothing that changes), a constant image over a whole rollout is not.

    Args:
        spec: the env's agents and layouts.
        obs: per group, ``[T, E, n_g, *obs_shape]`` observations (a rollout's ``obs``; CPU tensors convert).
        alive: ``[T, E, N]`` bool, the agent was present at step t.

    Returns:
        ``{agent name: the one value}``, for each image-observing agent that was present at least once and saw
        nothing else; empty when every image changed.
    """
    present = np.asarray(alive, dtype=bool)
    found: dict[str, float] = {}
    for group, group_obs in zip(spec.groups, obs):
        if group.observation.kind != "image":
            continue
        images = np.asarray(group_obs)
        for member, (agent, index) in enumerate(zip(group.agents, group.agent_indices)):
            seen = images[:, :, member][present[:, :, index]]
            if seen.size and bool((seen == seen.flat[0]).all()):
                found[agent] = float(seen.flat[0])
    return found


def blank_image_message(found: dict[str, float], spec: JointSpec, steps: int) -> str:
    """The warning for :func:`blank_image_agents`' findings: who, what they saw, and the usual fix.

    Args:
        found: :func:`blank_image_agents`' result (not empty).
        spec: the env's agents and layouts (for the image shapes).
        steps: how many steps of every env copy the check looked at.

    Returns:
        One message naming every agent found.
    """
    shapes = {agent: spec.observations[spec.agents.index(agent)].shape for agent in found}
    seen = "; ".join(f"{agent!r} {shapes[agent]}, every pixel {value:g}" for agent, value in found.items())
    return (
        f"the image observations of {seen} were the same at every one of the first {steps} steps of every env "
        f"copy, so no policy can learn from them. Some PettingZoo envs draw their screen only when they render "
        f"(cooperative_pong_v6 gives black frames with render_mode=None): build the env with "
        f"render_mode='rgb_array' (marljoint train: --env-kwargs '{{\"render_mode\": \"rgb_array\"}}'), or check "
        f"the observation wrappers"
    )


def random_actions(env: JointEnv, state: JointObs, rng: np.random.Generator) -> list[np.ndarray]:
    """Samples uniformly random actions that respect the action masks.

    Args:
        env: the JointEnv whose ``spec`` gives the layouts.
        state: the observation to act on (its masks are respected).
        rng: the generator to draw from.

    Returns:
        Per group, ``[E, n_g, *action_shape_g]`` actions.
    """
    E = env.num_envs
    out = []
    for group, mask in zip(env.spec.groups, state.action_masks):
        layout = group.action
        if layout.kind == "box":
            low, high = layout.low, layout.high
            out.append(rng.uniform(low, high, size=(E, group.size, *layout.shape)).astype(np.float32))
            continue
        heads = []
        offset = 0
        for n in layout.nvec:
            allowed = mask[..., offset : offset + n] if mask is not None else np.ones((E, group.size, n), bool)
            weights = allowed / np.maximum(allowed.sum(-1, keepdims=True), 1)
            cdf = np.cumsum(weights, -1)
            u = rng.random((E, group.size, 1))
            # Rounding can leave the cdf's last entry just below 1, so a draw can pass every allowed choice:
            # clamp to the last allowed one. Rows with nothing allowed (absent agents) get choice 0, which the
            # env ignores.
            last_allowed = n - 1 - np.argmax(allowed[..., ::-1], -1)
            choice = np.minimum((u > cdf).sum(-1), last_allowed)
            heads.append(np.where(allowed.any(-1), choice, 0))
            offset += n
        actions = np.stack(heads, -1).astype(np.int64)
        out.append(actions[..., 0] if layout.kind == "discrete" else actions)
    return out


def _fail(message: str) -> None:
    raise JointEnvCheckError(message)


def _check_state(env: JointEnv, state: JointObs, where: str) -> None:
    E, N = env.num_envs, env.spec.num_agents
    groups = env.spec.groups
    if len(state.obs) != len(groups) or len(state.action_masks) != len(groups):
        _fail(f"{where}: expected one observation and mask array per group ({len(groups)})")
    for name, arr in (("alive", state.alive), ("acting", state.acting)):
        if arr.shape != (E, N) or arr.dtype != bool:
            _fail(f"{where}: {name} must be a bool array of shape {(E, N)}, got {arr.dtype} {arr.shape}")
    if (state.acting & ~state.alive).any():
        _fail(f"{where}: an agent is marked acting but not alive")
    if not state.acting.any(axis=1).all():
        _fail(f"{where}: some env copy has no acting agent")
    if env.spec.turn_based and (state.acting.sum(axis=1) != 1).any():
        _fail(f"{where}: a turn-based env must have exactly one acting agent per copy")
    for g, group in enumerate(groups):
        idx = list(group.agent_indices)
        obs = state.obs[g]
        shape = (E, group.size, *group.observation.shape)
        if obs.shape != shape or obs.dtype != group.observation.dtype:
            _fail(f"{where}: group {group.agents} observations are {obs.dtype} {obs.shape}, expected {shape}")
        dead = ~state.alive[:, idx]
        if (obs[dead] != 0).any():
            _fail(f"{where}: absent agents of group {group.agents} must have zero observations")
        mask = state.action_masks[g]
        if group.action.kind == "box":
            if mask is not None:
                _fail(f"{where}: Box-action group {group.agents} must have no action mask")
            continue
        if mask is None or mask.shape != (E, group.size, group.action.mask_size) or mask.dtype != bool:
            _fail(f"{where}: group {group.agents} needs a bool action mask of shape {(E, group.size)} + heads")
        offset = 0
        acting = state.acting[:, idx]
        for n in group.action.nvec:
            empty = acting & ~mask[..., offset : offset + n].any(-1)
            if empty.any():
                e, j = np.argwhere(empty)[0]
                _fail(f"{where}: acting agent {group.agents[j]!r} (copy {e}) has a head with no allowed action")
            offset += n


def _check_step(env: JointEnv, alive_before: np.ndarray, out: JointStep, where: str) -> None:
    E, N = env.num_envs, env.spec.num_agents
    _check_state(env, out, where)
    for name in ("rewards", "terminated", "truncated"):
        arr = getattr(out, name)
        if arr.shape != (E, N):
            _fail(f"{where}: {name} must have shape {(E, N)}, got {arr.shape}")
    if not np.isfinite(out.rewards).all():
        _fail(f"{where}: rewards must be finite")
    if (out.terminated & out.truncated).any():
        _fail(f"{where}: an agent is both terminated and truncated; terminated must take precedence")
    if ((out.terminated | out.truncated) & ~alive_before).any():
        _fail(f"{where}: an agent that was not alive was reported as terminated or truncated")
    waiting = getattr(out, "final_waiting", None)
    if waiting is not None and (waiting.shape != (E, N) or waiting.dtype != np.bool_):
        _fail(
            f"{where}: final_waiting must be None or a bool array of shape {(E, N)}, got {waiting.dtype} "
            f"{waiting.shape}"
        )
    if out.reset_envs.shape != (E,):
        _fail(f"{where}: reset_envs must have shape {(E,)}")
    if out.episode_returns.shape != (int(out.reset_envs.sum()), N):
        _fail(f"{where}: one episode return row is expected per reset copy")


def _snapshot(state: JointObs | JointStep) -> list[np.ndarray]:
    arrays = [*state.obs, state.alive, state.acting, *(m for m in state.action_masks if m is not None)]
    if isinstance(state, JointStep):
        arrays += [state.rewards, state.terminated, state.truncated, state.reset_envs]
    return [np.array(a, copy=True) for a in arrays]


def check_joint_env(env: JointEnv, num_steps: int = 200, seed: int = 0) -> None:
    """Checks that an env keeps the JointEnv contract: shapes, dtypes, masks, flags, and seeded determinism.

    Plays ``num_steps`` random (mask-respecting) steps twice from ``reset(seed=seed)`` and compares the streams.

    Example:
        >>> from marljoint import PettingZooJointEnv
        >>> from marljoint_envs import counter_v0
        >>> check_joint_env(PettingZooJointEnv(counter_v0.parallel_env, num_envs=2))

    Args:
        env: the env to check (it is reset and stepped).
        num_steps: steps per pass.
        seed: the reset seed.

    Raises:
        JointEnvCheckError: naming the first broken rule.
    """
    if not isinstance(env, JointEnv):
        raise TypeError(f"{type(env).__name__} does not implement the JointEnv protocol (spec, num_envs, reset, step)")
    streams = []
    for _ in range(2):
        rng = np.random.default_rng(seed)
        state = env.reset(seed=seed)
        _check_state(env, state, "reset()")
        stream = _snapshot(state)
        for t in range(num_steps):
            actions = random_actions(env, state, rng)
            alive_before = state.alive.copy()
            out = env.step(actions)
            _check_step(env, alive_before, out, f"step {t}")
            stream += _snapshot(out)
            state = JointObs(out.obs, out.alive, out.acting, out.action_masks)
        streams.append(stream)
    for k, (a, b) in enumerate(zip(*streams)):
        if not np.array_equal(a, b):
            _fail(
                f"two runs from reset(seed={seed}) with the same actions diverged (array {k}); "
                "the env uses randomness not seeded by reset(seed=...)"
            )
