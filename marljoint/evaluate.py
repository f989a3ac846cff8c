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
from marljoint.episodes import play_episodes
from marljoint.train import CHECKPOINT_DIR, RunError, RunSpec, build_trainer, load_run_spec, make_env, refuse_diverged

__all__ = [
    "EvalResult",
    "TrainedRun",
    "confidence_interval",
    "evaluate_run",
    "load_run",
    "play_episodes",
    "write_gif",
    "write_video",
]


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
        video: the video written, if any.
    """

    agents: tuple[str, ...]
    returns: np.ndarray
    lengths: np.ndarray
    checkpoint: Path
    deterministic: bool
    gif: Path | None = None
    video: Path | None = None

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
        if self.video is not None:
            lines.append(f"video written to {self.video}")
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


@dataclass
class TrainedRun:
    """A trained run loaded for acting (:func:`load_run`).

    Attributes:
        trainer: a :class:`~marljoint.JointMultiAgentTrainer` holding the checkpoint's networks and normaliser.
        env: ``num_envs`` in-process copies of the run's env (on the CPU).
        spec: the run's settings (``config.toml``), with the in-process, CPU collection used here.
        checkpoint: the checkpoint file loaded.
    """

    trainer: Any
    env: Any
    spec: RunSpec
    checkpoint: Path

    def act(self, obs: Any, deterministic: bool = True) -> list[np.ndarray]:
        """Actions of every agent for a :class:`~marljoint.JointObs` of ``env`` (per group ``[E, n_g, ...]``,
        ready for ``env.step``); the policies' most likely actions unless ``deterministic`` is False."""
        return self.trainer.act(obs, deterministic=deterministic)

    def agent_policy(self, agent: int | str) -> Any:
        """One agent's frozen policy (:class:`~marljoint.policies.AgentPolicy`), for play outside the env."""
        return self.trainer.agent_policy(agent)

    def close(self) -> None:
        """Closes the env copies."""
        self.env.close()


def load_run(
    run_dir: str | os.PathLike[str],
    checkpoint: str | os.PathLike[str] | None = None,
    num_envs: int = 1,
    seed: int | None = None,
    **env_kwargs: Any,
) -> TrainedRun:
    """A trained run's policies, ready to act: the networks (and value normaliser) of its newest checkpoint, over
    ``num_envs`` in-process copies of its env, on the CPU.

    Example:
        >>> run = load_run("runs/spread")  # doctest: +SKIP
        >>> state = run.env.reset(seed=0)  # doctest: +SKIP
        >>> out = run.env.step(run.act(state))  # doctest: +SKIP
        >>> run.close()  # doctest: +SKIP

    Args:
        run_dir: a run directory written by ``marljoint train``.
        checkpoint: a checkpoint file instead of the newest one.
        num_envs: env copies of ``trainer.env``.
        seed: seed of the env's first reset (the run's seed when ``None``).
        **env_kwargs: extra keyword arguments of the env (e.g. ``render_mode="rgb_array"``).

    Returns:
        A :class:`TrainedRun` (close it when done). The checkpoint's env snapshot is not unpickled.

    Raises:
        RunError: for a directory without a run or checkpoint, or a checkpoint that is damaged, crafted or does not
            fit the run's env.
    """
    run_dir = Path(run_dir)
    spec = load_run_spec(run_dir)
    path = _checkpoint_file(run_dir, checkpoint)
    try:
        state = load_checkpoint(path)
    except CheckpointError as exc:
        raise RunError(str(exc)) from None
    refuse_diverged(state.get("trainer", state), path)
    # In-process copies on the CPU: a GIF reads frames from the first copy, acting needs no workers, and a run
    # trained on a GPU loads anywhere.
    trainer_config = spec.trainer.replace(collection=CollectionConfig(), num_envs=num_envs, device="cpu")
    spec = dataclasses.replace(spec, trainer=trainer_config)
    env = make_env(spec, num_envs=num_envs, seed=seed, **env_kwargs)
    trainer = build_trainer(spec, env)
    try:
        trainer.load_state_dict(state.get("trainer", state))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        env.close()
        raise RunError(f"checkpoint {path} does not fit the run's env ({type(exc).__name__}: {exc})") from None
    return TrainedRun(trainer, env, spec, path)


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
    video: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
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
        video: record the first episode to this video (``.mp4``, ``.webm``, ...; needs ``imageio-ffmpeg``).
        progress: called as ``progress(steps, episodes finished)`` every 10,000 joint steps.

    Returns:
        An :class:`EvalResult`.

    Raises:
        RunError: for a directory without a run or checkpoint, a corrupted checkpoint, an env that cannot
            render, or episodes that do not end within ``max_steps``.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise RunError(f"episodes must be a positive integer, got {episodes!r}")
    recording = gif is not None or video is not None
    copies = 1 if recording else (num_envs or min(episodes, 8))
    extra = {"render_mode": "rgb_array"} if recording else {}
    run = load_run(run_dir, checkpoint, num_envs=copies, seed=seed, **extra)
    trainer, env, path = run.trainer, run.env, run.checkpoint
    frames: list[np.ndarray] = []
    on_step = None
    if recording:

        def on_step(out: Any) -> bool:
            # The first call brings the reset observation; recording stops when the first episode ends.
            if getattr(out, "reset_envs", None) is not None and out.reset_envs.any():
                return False
            frames.append(_frame(env))
            return True

    try:
        returns, lengths = play_episodes(
            trainer,
            env,
            episodes,
            deterministic=deterministic,
            seed=seed,
            max_steps=max_steps,
            on_step=on_step,
            progress=progress,
        )
    finally:
        env.close()
    written = write_gif(frames, gif, fps=gif_fps) if gif is not None else None
    written_video = write_video(frames, video, fps=gif_fps) if video is not None else None
    return EvalResult(
        agents=tuple(trainer.spec.agents),
        returns=returns,
        lengths=lengths,
        checkpoint=path,
        deterministic=deterministic,
        gif=written,
        video=written_video,
    )


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


def write_video(frames: Sequence[np.ndarray], path: str | os.PathLike[str], fps: int = 10) -> Path:
    """Writes ``[H, W, 3]`` uint8 frames as a video (H.264 for ``.mp4``; the format follows the suffix) with the
    ffmpeg that ``imageio-ffmpeg`` ships.

    Raises:
        RunError: if there are no frames, or ``imageio-ffmpeg`` is not installed.
    """
    if not frames:
        raise RunError("no frames to write")
    try:
        import imageio_ffmpeg
    except ImportError:
        raise RunError('writing a video needs imageio-ffmpeg: pip install "marljoint[video]"') from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [np.ascontiguousarray(np.asarray(f)[..., :3]).astype(np.uint8) for f in frames]
    height, width = images[0].shape[:2]
    writer = imageio_ffmpeg.write_frames(str(path), (width, height), fps=fps, macro_block_size=1, quality=7)
    writer.send(None)  # starts ffmpeg
    try:
        for image in images:
            writer.send(image)
    finally:
        writer.close()
    return path


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
