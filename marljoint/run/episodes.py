"""Playing whole episodes with a trainer's policies (evaluation, and evaluation during training)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from marljoint.run.errors import RunError

__all__ = ["play_episodes"]


def play_episodes(
    trainer: Any,
    env: Any,
    episodes: int,
    deterministic: bool = True,
    seed: int = 12345,
    max_steps: int = 1_000_000,
    on_step: Callable[[Any], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Plays ``episodes`` episodes of ``trainer``'s policies on ``env`` (the env is reset with ``seed``).

    Episodes are spread evenly over the env copies and each copy contributes its first episodes, so short
    episodes are not over-represented.

    Args:
        trainer: a :class:`~marljoint.JointMultiAgentTrainer` (its ``act`` chooses the actions).
        env: a JointEnv with the trainer's agents (any number of copies).
        episodes: episodes to play (>= 1).
        deterministic: take each policy's most likely action; False samples (seeded by ``seed``).
        seed: reset seed of the env and seed of the trainer's sampling generator.
        max_steps: give up after this many joint steps.
        on_step: called with the first :class:`~marljoint.JointObs` and then every :class:`~marljoint.JointStep`;
            once it returns False it is not called again.
        progress: called as ``progress(steps, episodes finished)`` every 10,000 joint steps (long episodes).

    Returns:
        ``(returns [episodes, N], lengths [episodes])``.

    Raises:
        RunError: for a non-positive ``episodes`` or episodes that do not end within ``max_steps``.
    """
    import torch

    quota = _quota(episodes, env.num_envs)
    copies = env.num_envs
    trainer.generator.manual_seed(seed)
    got: list[list[np.ndarray]] = [[] for _ in range(copies)]
    lengths: list[list[int]] = [[] for _ in range(copies)]
    obs = env.reset(seed=seed)
    if on_step is not None and not on_step(obs):
        on_step = None
    steps = 0
    with torch.no_grad():
        while any(len(g) < q for g, q in zip(got, quota)):
            if steps >= max_steps:
                raise _too_long(sum(len(g) for g in got), episodes, max_steps)
            out = env.step(trainer.act(obs, deterministic=deterministic))
            steps += 1
            if progress is not None and steps % 10_000 == 0:
                progress(steps, sum(len(g) for g in got))
            for row, e in enumerate(np.flatnonzero(out.reset_envs)):
                if len(got[e]) < quota[e]:
                    got[e].append(out.episode_returns[row].copy())
                    lengths[e].append(int(out.episode_lengths[row]))
            if on_step is not None and not on_step(out):
                on_step = None
            obs = out
    return np.stack([r for g in got for r in g]), np.asarray([n for g in lengths for n in g])


def _quota(episodes: Any, copies: int) -> np.ndarray:
    """``[copies]`` episodes each copy contributes: ``episodes`` spread evenly, the first copies taking one more.

    Raises:
        RunError: for a non-positive ``episodes``.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise RunError(f"episodes must be a positive integer, got {episodes!r}")
    quota = np.full(copies, episodes // copies)
    quota[: episodes % copies] += 1
    return quota


def _too_long(done: int, episodes: int, max_steps: int) -> RunError:
    return RunError(
        f"only {done} of {episodes} episodes ended within {max_steps} steps; does the env ever end its "
        "episodes? (raise --max-steps)"
    )
