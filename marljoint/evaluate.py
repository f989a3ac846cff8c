"""Evaluation of a trained run: per-agent episode returns with 95% confidence intervals, and optional GIFs."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marljoint.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from marljoint.collect.config import CollectionConfig
from marljoint.train import CHECKPOINT_DIR, RunError, build_trainer, load_run_spec, make_env

__all__ = ["EvalResult", "confidence_interval", "evaluate_run", "write_gif"]


@dataclass
class EvalResult:
    """Returns of the evaluation episodes.

    Attributes:
        agents: agent names in ``possible_agents`` order.
        returns: ``[episodes, N]`` undiscounted episode returns.
        lengths: ``[episodes]`` episode lengths in steps.
        checkpoint: the checkpoint evaluated.
        deterministic: whether actions were the policies' modes (else sampled).
        gif: the GIF written, if any.
    """

    agents: tuple[str, ...]
    returns: np.ndarray
    lengths: np.ndarray
    checkpoint: Path
    deterministic: bool
    gif: Path | None = None

    def summary(self) -> dict[str, tuple[float, float]]:
        """Per agent (and ``"mean"`` over agents): ``(mean return, half-width of the 95% CI)``."""
        out = {a: confidence_interval(self.returns[:, i]) for i, a in enumerate(self.agents)}
        out["mean"] = confidence_interval(self.returns.mean(axis=1))
        return out

    def format(self) -> str:
        """A table of the summary, one line per agent."""
        width = max(len(a) for a in (*self.agents, "mean over agents"))
        mode = "deterministic" if self.deterministic else "sampled"
        lines = [
            f"{len(self.returns)} episodes, {mode} actions, {self.checkpoint.name}, "
            f"mean length {self.lengths.mean():.1f} steps",
            f"{'agent':<{width}}  return (mean ± 95% CI)",
        ]
        for name, (mean, half) in self.summary().items():
            label = "mean over agents" if name == "mean" else name
            lines.append(f"{label:<{width}}  {mean:.4g} ± {half:.3g}")
        if self.gif is not None:
            lines.append(f"GIF written to {self.gif}")
        return "\n".join(lines)


def confidence_interval(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% Student-t confidence interval (half-width ``nan`` for n < 2).

    Example:
        >>> mean, half = confidence_interval([1.0, 2.0, 3.0])
        >>> mean, round(half, 3)
        (2.0, 2.484)
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = float(values.mean())
    if n < 2:
        return mean, math.nan
    from scipy import stats

    half = float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return mean, half


def _checkpoint_file(run_dir: Path, checkpoint: str | os.PathLike[str] | None) -> Path:
    if checkpoint is not None:
        return Path(checkpoint)
    paths = list_checkpoints(run_dir / CHECKPOINT_DIR)
    if not paths:
        raise RunError(f"{run_dir} has no checkpoint in {CHECKPOINT_DIR}/; train it first")
    return paths[-1]


def evaluate_run(
    run_dir: str | os.PathLike[str],
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 12345,
    num_envs: int | None = None,
    gif: str | os.PathLike[str] | None = None,
    gif_fps: int = 10,
    checkpoint: str | os.PathLike[str] | None = None,
    max_steps: int = 1_000_000,
) -> EvalResult:
    """Plays ``episodes`` episodes with a run's newest (or a given) checkpoint.

    Episodes are spread evenly over the env copies and each copy contributes its first episodes, so short
    episodes are not over-represented.

    Args:
        run_dir: a run directory written by ``marljoint train``.
        episodes: episodes to play (>= 1).
        deterministic: take each policy's most likely action; False samples.
        seed: seed of the evaluation episodes (and of sampling).
        num_envs: env copies (``min(episodes, 8)`` when ``None``; 1 when recording a GIF).
        gif: record the first episode, rendered as ``rgb_array``, to this GIF.
        gif_fps: frames per second of the GIF.
        checkpoint: a checkpoint file instead of the newest one.
        max_steps: give up after this many joint steps (an env whose episodes never end).

    Returns:
        An :class:`EvalResult`.

    Raises:
        RunError: for a directory without a run or checkpoint, a corrupted checkpoint, an env that cannot
            render, or episodes that do not end within ``max_steps``.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise RunError(f"episodes must be a positive integer, got {episodes!r}")
    run_dir = Path(run_dir)
    spec = load_run_spec(run_dir)
    path = _checkpoint_file(run_dir, checkpoint)
    try:
        state = load_checkpoint(path)
    except CheckpointError as exc:
        raise RunError(str(exc)) from None
    copies = 1 if gif is not None else (num_envs or min(episodes, 8))
    # In-process copies on the CPU: a GIF reads frames from the first copy, evaluation is too short to need workers,
    # and a run trained on a GPU evaluates anywhere.
    trainer_config = spec.trainer.replace(collection=CollectionConfig(), num_envs=copies, device="cpu")
    spec = dataclasses.replace(spec, trainer=trainer_config)
    extra = {"render_mode": "rgb_array"} if gif is not None else {}
    env = make_env(spec, num_envs=copies, seed=seed, **extra)
    trainer = build_trainer(spec, env)
    try:
        trainer.load_state_dict(state.get("trainer", state))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise RunError(f"checkpoint {path} does not fit the run's env ({type(exc).__name__}: {exc})") from None
    frames: list[np.ndarray] = []
    on_step = None
    if gif is not None:

        def on_step(out: Any) -> bool:
            # The first call brings the reset observation; recording stops when the first episode ends.
            if getattr(out, "reset_envs", None) is not None and out.reset_envs.any():
                return False
            frames.append(_frame(env))
            return True

    returns, lengths = play_episodes(
        trainer, env, episodes, deterministic=deterministic, seed=seed, max_steps=max_steps, on_step=on_step
    )
    env.close()
    written = write_gif(frames, gif, fps=gif_fps) if gif is not None else None
    return EvalResult(
        agents=tuple(trainer.spec.agents),
        returns=returns,
        lengths=lengths,
        checkpoint=path,
        deterministic=deterministic,
        gif=written,
    )


def play_episodes(
    trainer: Any,
    env: Any,
    episodes: int,
    deterministic: bool = True,
    seed: int = 12345,
    max_steps: int = 1_000_000,
    on_step: Callable[[Any], bool] | None = None,
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

    Returns:
        ``(returns [episodes, N], lengths [episodes])``.

    Raises:
        RunError: for a non-positive ``episodes`` or episodes that do not end within ``max_steps``.
    """
    import torch

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise RunError(f"episodes must be a positive integer, got {episodes!r}")
    copies = env.num_envs
    trainer.generator.manual_seed(seed)
    quota = np.full(copies, episodes // copies)
    quota[: episodes % copies] += 1
    got: list[list[np.ndarray]] = [[] for _ in range(copies)]
    lengths: list[list[int]] = [[] for _ in range(copies)]
    obs = env.reset(seed=seed)
    if on_step is not None and not on_step(obs):
        on_step = None
    steps = 0
    with torch.no_grad():
        while any(len(g) < q for g, q in zip(got, quota)):
            if steps >= max_steps:
                done = sum(len(g) for g in got)
                raise RunError(
                    f"only {done} of {episodes} episodes ended within {max_steps} steps; does the env ever end its "
                    "episodes? (raise --max-steps)"
                )
            out = env.step(trainer.act(obs, deterministic=deterministic))
            steps += 1
            for row, e in enumerate(np.flatnonzero(out.reset_envs)):
                if len(got[e]) < quota[e]:
                    got[e].append(out.episode_returns[row].copy())
                    lengths[e].append(int(out.episode_lengths[row]))
            if on_step is not None and not on_step(out):
                on_step = None
            obs = out
    return np.stack([r for g in got for r in g]), np.asarray([n for g in lengths for n in g])


def _frame(env: Any) -> np.ndarray:
    copy = env.envs[0]
    try:
        frame = copy.render()
    except Exception as exc:  # renderers fail in many ways (no display, missing pygame, ...)
        raise RunError(f"the env cannot render an rgb_array frame ({type(exc).__name__}: {exc})") from None
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[-1] not in (3, 4):
        kind = type(frame).__name__ if not isinstance(frame, np.ndarray) else f"an array of shape {frame.shape}"
        raise RunError(
            f"the env does not render rgb_array frames (render() returned {kind}); a GIF needs an env whose "
            "render_mode='rgb_array' returns [H, W, 3] images"
        )
    return frame


def write_gif(frames: Sequence[np.ndarray], path: str | os.PathLike[str], fps: int = 10) -> Path:
    """Writes ``[H, W, 3]`` uint8 frames as an animated GIF (with Pillow, else imageio).

    Raises:
        RunError: if there are no frames, or neither Pillow nor imageio is installed.
    """
    if not frames:
        raise RunError("no frames to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [np.ascontiguousarray(np.asarray(f)[..., :3]).astype(np.uint8) for f in frames]
    duration = int(round(1000 / max(fps, 1)))
    try:
        from PIL import Image
    except ImportError:
        try:
            import imageio.v2 as imageio
        except ImportError:
            raise RunError("writing a GIF needs Pillow or imageio: pip install pillow") from None
        imageio.mimsave(path, images, duration=duration / 1000, loop=0)
        return path
    first, *rest = [Image.fromarray(f) for f in images]
    first.save(path, save_all=True, append_images=rest, duration=duration, loop=0)
    return path
