"""Playing whole episodes with a trainer's policies (evaluation, and evaluation during training)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from marljoint.run.algorithms import Algorithm
from marljoint.run.errors import RunError

__all__ = ["EpisodesInterrupted", "check_step_budget", "play_episodes"]


class EpisodesInterrupted(KeyboardInterrupt):
    """Ctrl-C while :func:`play_episodes` played: the episodes that ended before it.

    A ``KeyboardInterrupt`` still, so that whoever stops at Ctrl-C stops here too; an evaluation catches it to report
    the episodes played.

    Attributes:
        returns: ``[k, N]`` returns of the ``k`` episodes that ended (``k`` may be 0).
        lengths: ``[k]`` their lengths in steps.
        requested: the episodes asked for.
    """

    def __init__(self, returns: np.ndarray, lengths: np.ndarray, requested: int) -> None:
        super().__init__(f"interrupted after {len(returns):,} of {requested:,} episodes")
        self.returns, self.lengths, self.requested = returns, lengths, requested


def check_step_budget(episodes: int, copies: int, max_steps: int) -> None:
    """Refuses ``episodes`` that cannot end within ``max_steps`` joint steps on ``copies`` env copies: each copy
    ends at most one episode per step, so its share of the episodes takes at least that many steps.

    Raises:
        RunError: naming the episodes, the copies, the steps they need at the least and the cap.
    """
    need = int(_quota(episodes, copies)[0])
    if need > max_steps:
        raise RunError(
            f"{episodes:,} episodes on {copies} env copies take at least {need:,} joint steps (a copy ends one episode "
            f"per step at most), more than the cap of {max_steps:,} (--max-steps): lower --episodes, or raise "
            "--max-steps or --num-envs"
        )


def play_episodes(
    trainer: Algorithm,
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
        trainer: an :class:`~marljoint.run.algorithms.Algorithm` (its ``act`` chooses the actions).
        env: a JointEnv with the trainer's agents (any number of copies).
        episodes: episodes to play (>= 1).
        deterministic: take each policy's most likely action; False samples (seeded by ``seed``).
        seed: reset seed of the env and seed of the trainer's sampling generator.
        max_steps: give up after this many joint steps.
        on_step: called with the first :class:`~marljoint.JointObs` and then every :class:`~marljoint.JointStep`;
            once it returns False it is not called again.
        progress: called as ``progress(0, 0)`` once the env is reset, then as ``progress(steps, episodes finished)``
            every 10,000 joint steps (long episodes).

    Returns:
        ``(returns [episodes, N], lengths [episodes])``.

    Raises:
        RunError: for a non-positive ``episodes`` or episodes that do not end within ``max_steps``.
        EpisodesInterrupted: Ctrl-C (``KeyboardInterrupt``) while playing, with the episodes that ended before it.
    """
    quota = _quota(episodes, env.num_envs)
    copies = env.num_envs
    trainer.generator.manual_seed(seed)
    got: list[list[np.ndarray]] = [[] for _ in range(copies)]
    lengths: list[list[int]] = [[] for _ in range(copies)]
    try:
        _play(trainer, env, quota, got, lengths, deterministic, seed, max_steps, on_step, progress)
    except KeyboardInterrupt:
        raise EpisodesInterrupted(*_collected(got, lengths, len(env.spec.agents)), episodes) from None
    return _collected(got, lengths, len(env.spec.agents))


def _collected(got: list[list[np.ndarray]], lengths: list[list[int]], agents: int) -> tuple[np.ndarray, np.ndarray]:
    """``(returns [k, N], lengths [k])`` of the episodes in ``got`` and ``lengths``, copy by copy."""
    returns = [r for g in got for r in g]
    stacked = np.stack(returns) if returns else np.zeros((0, agents))
    return stacked, np.asarray([n for g in lengths for n in g], dtype=np.int64)


def _play(
    trainer: Algorithm,
    env: Any,
    quota: np.ndarray,
    got: list[list[np.ndarray]],
    lengths: list[list[int]],
    deterministic: bool,
    seed: int,
    max_steps: int,
    on_step: Callable[[Any], bool] | None,
    progress: Callable[[int, int], None] | None,
) -> None:
    """:func:`play_episodes`' loop: appends each copy's first ``quota[e]`` episodes to ``got[e]`` and ``lengths[e]``
    as they end (so that an interruption leaves the episodes played so far there)."""
    import torch

    obs = env.reset(seed=seed)
    if on_step is not None and not on_step(obs):
        on_step = None
    if progress is not None:
        progress(0, 0)
    steps = 0
    episodes = int(quota.sum())
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
