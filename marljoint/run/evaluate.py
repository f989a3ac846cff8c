"""Evaluation of a trained run: per-agent episode returns with 95% confidence intervals, and optional GIFs."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marljoint.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from marljoint.collect.config import CollectionConfig
from marljoint.run import migrations
from marljoint.run.algorithms import Algorithm, agent_policies
from marljoint.run.episodes import EpisodesInterrupted, check_step_budget, play_episodes
from marljoint.run.exploitability import game_facts
from marljoint.run.stats import confidence_interval
from marljoint.run.train import (
    CHECKPOINT_DIR,
    RunError,
    RunInterrupted,
    RunSpec,
    build_trainer,
    load_run_spec,
    make_env,
    refuse_diverged,
)

__all__ = [
    "EvalInterrupted",
    "EvalResult",
    "VIDEO_BLOCK",
    "TrainedRun",
    "evaluate_run",
    "evaluation_copies",
    "load_run",
    "pad_frames",
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
        zero_sum: whether the game is zero-sum (:func:`~marljoint.run.exploitability.game_facts`): the mean over
            agents is then 0 by construction, and :meth:`format` leaves it out.
        requested: the episodes asked for, when fewer ended because the evaluation was interrupted (a partial
            result); ``None`` when every episode asked for was played.
    """

    agents: tuple[str, ...]
    returns: np.ndarray
    lengths: np.ndarray
    checkpoint: Path
    deterministic: bool
    gif: Path | None = None
    video: Path | None = None
    zero_sum: bool = False
    requested: int | None = None

    @property
    def partial(self) -> bool:
        """Whether the evaluation was interrupted before all the episodes asked for ended."""
        return self.requested is not None

    def summary(self) -> dict[str, tuple[float, float]]:
        """Per agent (and ``"mean"`` over agents): ``(mean return, half-width of the 95% CI)``."""
        out = {a: confidence_interval(self.returns[:, i]) for i, a in enumerate(self.agents)}
        out["mean"] = confidence_interval(self.returns.mean(axis=1))
        return out

    def format(self) -> str:
        """A table of the summary, one line per agent."""
        width = max(len(a) for a in (*self.agents, "mean over agents"))
        mode = "deterministic" if self.deterministic else "sampled"
        played = f"{len(self.returns)} episodes"
        if self.requested is not None:
            played = f"PARTIAL result (interrupted): {len(self.returns):,} of {self.requested:,} episodes"
        lines = [
            f"{played}, {mode} actions, {self.checkpoint.name}, mean length {self.lengths.mean():.1f} steps",
            f"{'agent':<{width}}  return (mean ± 95% CI)",
        ]
        for name, (mean, half) in self.summary().items():
            if name == "mean" and self.zero_sum:
                lines.append("(a zero-sum game: the mean over agents is 0 by construction; see the per-seat rows)")
                continue
            label = "mean over agents" if name == "mean" else name
            lines.append(f"{label:<{width}}  {mean:.4g} ± {half:.3g}")
        if self.gif is not None:
            lines.append(f"GIF written to {self.gif}")
        if self.video is not None:
            lines.append(f"video written to {self.video}")
        return "\n".join(lines)


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
        trainer: the run's trainer (an :class:`~marljoint.run.algorithms.Algorithm`: a
            :class:`~marljoint.JointMultiAgentTrainer`, an :class:`~marljoint.offpolicy.OffPolicyTrainer`, ...)
            holding the checkpoint's networks.
        env: ``num_envs`` in-process copies of the run's env (on the CPU).
        spec: the run's settings (``config.toml``), with the in-process, CPU collection used here.
        checkpoint: the checkpoint file loaded.
    """

    trainer: Algorithm
    env: Any
    spec: RunSpec
    checkpoint: Path

    def act(self, obs: Any, deterministic: bool = True) -> list[np.ndarray]:
        """Actions of every agent for a :class:`~marljoint.JointObs` of ``env`` (per group ``[E, n_g, ...]``,
        ready for ``env.step``); the policies' most likely actions unless ``deterministic`` is False."""
        return self.trainer.act(obs, deterministic=deterministic)

    def agent_policy(self, agent: int | str) -> Any:
        """One agent's frozen policy (:class:`~marljoint.policies.AgentPolicy`), for play outside the env.

        Raises:
            ExportRefused: for an algorithm that acts with something else (its Q networks, its own actors).
        """
        return agent_policies(self.trainer, [agent])[0]

    def close(self) -> None:
        """Closes the env copies."""
        self.env.close()


def load_run(
    run_dir: str | os.PathLike[str],
    checkpoint: str | os.PathLike[str] | None = None,
    num_envs: int = 1,
    seed: int | None = None,
    *,
    trust_run: bool = False,
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
        trust_run: load a run whose ``config.toml`` is not signed with your key even if its env is a function to
            call (``package.module:function``): only for runs you trust (:mod:`marljoint.run.config_trust`).
        **env_kwargs: extra keyword arguments of the env (e.g. ``render_mode="rgb_array"``).

    Returns:
        A :class:`TrainedRun` (close it when done). The checkpoint's env snapshot is not unpickled.

    Raises:
        RunError: for a directory without a run or checkpoint, or a checkpoint that is damaged, crafted or does not
            fit the run's env (one trained on another env names both envs and what differs).
        UntrustedConfigError: an unsigned ``config.toml`` names a function as its env (without ``trust_run``).
    """
    run_dir = Path(run_dir)
    spec = load_run_spec(run_dir, trust_run)
    path = _checkpoint_file(run_dir, checkpoint)
    try:
        state = migrations.migrate_checkpoint(load_checkpoint(path))
    except CheckpointError as exc:
        raise RunError(str(exc)) from None
    refuse_diverged(state.get("trainer", state), path)
    # In-process copies on the CPU: a GIF reads frames from the first copy, acting needs no workers, and a run
    # trained on a GPU loads anywhere.
    trainer_config = spec.trainer.replace(
        collection=CollectionConfig(), num_envs=num_envs, device="cpu", acting_device="cpu"
    )
    spec = dataclasses.replace(spec, trainer=trainer_config)
    env = make_env(spec, num_envs=num_envs, seed=seed, **env_kwargs)
    trainer = build_trainer(spec, env)
    try:
        trainer.load_state_dict(state.get("trainer", state))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        env.close()
        mismatch = _env_mismatch(path, state, spec, trainer)
        if mismatch is not None:
            raise RunError(mismatch) from None
        raise RunError(f"checkpoint {path} does not fit the run's env ({type(exc).__name__}: {exc})") from None
    return TrainedRun(trainer, env, spec, path)


# What a parameter's shape says about the env: (parameter, axis, meaning); weights are [groups, in, out].
_PARAMETER_MEANINGS = (
    ("obs_normalizer.mean", -1, "observation size"),
    ("encoder.layers.0.weight", -2, "actor input (observation + agent id)"),
    ("critic_encoder.layers.0.weight", -2, "critic input"),
    ("actor_head.weight", -1, "action outputs"),
)


def _env_mismatch(path: Path, state: dict[str, Any], spec: RunSpec, trainer: Any) -> str | None:
    """Why a checkpoint trained on another env does not load: which env it was trained on, which env the run
    has, and what differs (agents, then the shapes of the networks' inputs and outputs). ``None`` when the
    checkpoint names no env, or the same env as the run."""
    trained = (state.get("run") or {}).get("spec") or {}
    if "env" not in trained:
        return None
    setup = (trained["env"], trained.get("env_kwargs") or {}, list(trained.get("wrappers") or []))
    if setup == (spec.env, dict(spec.env_kwargs or {}), list(spec.wrappers or [])):
        return None
    theirs, ours = state.get("trainer", state), trainer.state_dict()
    differences = []
    if list(theirs.get("agents", [])) != list(ours["agents"]):
        differences.append(f"agents {list(theirs.get('agents', []))} vs {list(ours['agents'])}")
    for n, (their_net, our_net) in enumerate(zip(theirs.get("policies", []), ours.get("policies", []))):
        for key, axis, meaning in _PARAMETER_MEANINGS:
            if key in their_net and key in our_net and their_net[key].shape[axis] != our_net[key].shape[axis]:
                differences.append(
                    f"{meaning} of network {n}: {their_net[key].shape[axis]} vs {our_net[key].shape[axis]}"
                )
    what = "; ".join(differences[:4]) or "the settings derived from the env (e.g. normalize_observations)"
    home = path.parent.parent
    fix = (
        f"evaluate it with its own run, marljoint eval {home}"
        if (home / "config.toml").is_file()
        else ("evaluate it with a run directory of that env")
    )
    return (
        f"checkpoint {path} was trained on env {_env_text(*setup)}, but this run's env is "
        f"{_env_text(spec.env, dict(spec.env_kwargs or {}), list(spec.wrappers or []))}; they differ in {what} "
        f"(checkpoint vs this run); {fix}"
    )


def _env_text(name: str, kwargs: dict[str, Any], wrappers: list[Any]) -> str:
    text = repr(name)
    if kwargs:
        text += f" {kwargs}"
    if wrappers:
        text += f" wrapped {wrappers}"
    return text


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
    trust_run: bool = False,
) -> EvalResult:
    """Plays ``episodes`` episodes with a run's newest (or a given) checkpoint.

    Episodes are spread evenly over the env copies, each playing its first ones: short ones are not over-represented.

    Args:
        run_dir: a run directory written by ``marljoint train``.
        episodes: episodes to play (>= 1).
        deterministic: take each policy's most likely action; False samples.
        seed: seed of the evaluation episodes (and of sampling).
        num_envs: env copies (``min(episodes, 8)`` when ``None``; 1 when recording a GIF).
        gif: record the first episode, rendered as ``rgb_array``, to this GIF (``gif_fps`` frames per second).
        checkpoint: a checkpoint file instead of the newest one.
        max_steps: give up after this many joint steps (an env whose episodes never end).
        video: record the first episode to this video (``.mp4``, ``.webm``, ...; needs ``imageio-ffmpeg``).
        progress: called as ``progress(0, 0)`` when the episodes start (the run loaded), then as
            ``progress(steps, episodes finished)`` every 10,000 joint steps.
        trust_run: evaluate a run whose ``config.toml`` is not signed with your key (see :func:`load_run`).

    Returns:
        An :class:`EvalResult`.

    Raises:
        RunError: for a directory without a run or checkpoint, a corrupted checkpoint, an env that cannot
            render, episodes that cannot end within ``max_steps`` on the env copies (refused before the run is
            loaded), or episodes that do not end within ``max_steps``.
        EvalInterrupted: Ctrl-C while playing; it holds the episodes that ended before it (a partial result).
    """
    recording = gif is not None or video is not None
    copies = evaluation_copies(episodes, num_envs, recording)
    check_step_budget(episodes, copies, max_steps)
    extra = {"render_mode": "rgb_array"} if recording else {}
    run = load_run(run_dir, checkpoint, num_envs=copies, seed=seed, trust_run=trust_run, **extra)
    frames: list[np.ndarray] = []
    recorder = frames if recording else None
    try:
        returns, lengths = _play_and_close(run, episodes, deterministic, seed, max_steps, progress, recorder)
    except EpisodesInterrupted as stop:
        raise EvalInterrupted.of(_result(run, stop.returns, stop.lengths, deterministic, stop.requested)) from None
    result = _result(run, returns, lengths, deterministic)
    result.gif = write_gif(frames, gif, fps=gif_fps) if gif is not None else None
    result.video = write_video(frames, video, fps=gif_fps) if video is not None else None
    return result


def evaluation_copies(episodes: int, num_envs: int | None, recording: bool) -> int:
    """The env copies an evaluation of ``episodes`` plays on: ``num_envs``, else ``min(episodes, 8)``; 1 when it
    records a GIF or video.

    Raises:
        RunError: for a non-positive ``episodes``.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise RunError(f"episodes must be a positive integer, got {episodes!r}")
    return 1 if recording else (num_envs or min(episodes, 8))


def _result(
    run: TrainedRun, returns: np.ndarray, lengths: np.ndarray, deterministic: bool, requested: int | None = None
) -> EvalResult:
    """The :class:`EvalResult` of ``run``'s episodes (``requested``: the episodes asked for, when interrupted)."""
    agents = tuple(run.trainer.spec.agents)
    facts = game_facts(run.spec.env, run.spec.env_kwargs, run.spec.wrappers, len(agents))
    return EvalResult(
        agents, returns, lengths, run.checkpoint, deterministic, zero_sum=facts.zero_sum, requested=requested
    )


class EvalInterrupted(RunInterrupted):
    """Ctrl-C during :func:`evaluate_run` (exit status 130).

    Attributes:
        result: the episodes that ended before it, as a partial :class:`EvalResult`; ``None`` when none had.
    """

    def __init__(self, message: str, result: EvalResult | None) -> None:
        super().__init__(message, 130)
        self.result = result

    @classmethod
    def of(cls, result: EvalResult) -> EvalInterrupted:
        """The interruption of an evaluation that got as far as ``result``."""
        played, asked = len(result.returns), result.requested
        if played == 0:
            return cls(f"interrupted before any of the {asked:,} episodes ended; there is nothing to report", None)
        return cls(
            f"interrupted after {played:,} of {asked:,} episodes; the partial result covers those {played:,}", result
        )


def _play_and_close(
    run: Any,
    episodes: int,
    deterministic: bool,
    seed: int,
    max_steps: int,
    progress: Callable[[int, int], None] | None,
    frames: list[np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`play_episodes` with a loaded run's trainer on its env, which is closed afterwards; with ``frames`` a
    list, the first episode's frames are appended to it."""
    env = run.env
    on_step = None
    if frames is not None:
        recorded = frames

        def on_step(out: Any) -> bool:
            # The first call brings the reset observation; recording stops when the first episode ends.
            if getattr(out, "reset_envs", None) is not None and out.reset_envs.any():
                return False
            recorded.append(_frame(env))
            return True

    try:
        return play_episodes(
            run.trainer,
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


VIDEO_BLOCK = 2
"""Frames are padded to multiples of this many pixels: H.264 and most codecs store colour at half resolution
(yuv420p), so a frame of odd width or height cannot be encoded."""

_H264_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv")


def write_video(frames: Sequence[np.ndarray], path: str | os.PathLike[str], fps: int = 10) -> Path:
    """Writes ``[H, W, 3]`` uint8 frames as a video (H.264 for ``.mp4``; the format follows the suffix) with the
    ffmpeg that ``imageio-ffmpeg`` ships.

    Frames of any size are padded with black on the right and bottom to a multiple of :data:`VIDEO_BLOCK`
    pixels (and to the largest frame). ffmpeg's own output is captured; the video is written to a hidden file
    beside ``path`` and renamed when complete, so a failure leaves no file behind.

    Example:
        >>> write_video([np.zeros((5, 7, 3), np.uint8)] * 3, "episode.mp4")  # doctest: +SKIP
        PosixPath('episode.mp4')

    Args:
        frames: ``[H, W, 3]`` (or ``[H, W, 4]``, alpha dropped) images, one per step.
        path: the video file; its suffix chooses the container (``.mp4``, ``.webm``, ...).
        fps: frames per second.

    Returns:
        ``path``.

    Raises:
        RunError: if there are no frames, ``imageio-ffmpeg`` is not installed, or ffmpeg fails (naming the file and
            ffmpeg's first error line).
    """
    if not frames:
        raise RunError("no frames to write")
    try:
        import imageio_ffmpeg
    except ImportError:
        raise RunError('writing a video needs imageio-ffmpeg: pip install "marljoint[video]"') from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = pad_frames(frames, VIDEO_BLOCK)
    height, width = images[0].shape[:2]
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(descriptor)
    try:
        _run_ffmpeg(imageio_ffmpeg.get_ffmpeg_exe(), images, (width, height), fps, Path(temporary), path)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def pad_frames(frames: Sequence[np.ndarray], block: int) -> list[np.ndarray]:
    """Frames as ``[H, W, 3]`` uint8 arrays of one size: the largest height and width, rounded up to ``block``,
    with black on the right and bottom.

    Example:
        >>> pad_frames([np.ones((5, 7, 3), np.uint8)], 2)[0].shape
        (6, 8, 3)

    Args:
        frames: ``[H, W, 3]`` or ``[H, W, 4]`` images (alpha dropped), of any sizes.
        block: the multiple every side is rounded up to (>= 1).

    Returns:
        ``[H', W', 3]`` uint8 arrays, ``H'`` and ``W'`` multiples of ``block``.
    """
    images = [np.asarray(f)[..., :3].astype(np.uint8, copy=False) for f in frames]
    height = -(-max(i.shape[0] for i in images) // block) * block
    width = -(-max(i.shape[1] for i in images) // block) * block
    out = []
    for image in images:
        padded = np.zeros((height, width, 3), np.uint8)
        padded[: image.shape[0], : image.shape[1]] = image
        out.append(padded)
    return out


def _run_ffmpeg(
    exe: str, images: list[np.ndarray], size: tuple[int, int], fps: int, temporary: Path, path: Path
) -> None:
    """Encodes ``images`` into ``temporary`` (which keeps ``path``'s suffix, from which ffmpeg chooses the
    container); ffmpeg's messages go to a file read only when it fails."""
    codec = ["-vcodec", "libx264", "-crf", "15"] if path.suffix.lower() in _H264_SUFFIXES else []
    command = [exe, "-y", "-v", "error", "-f", "rawvideo", "-vcodec", "rawvideo", "-s", f"{size[0]}x{size[1]}"]
    command += ["-pix_fmt", "rgb24", "-r", str(fps), "-i", "-", "-an", *codec, "-pix_fmt", "yuv420p"]
    command.append(str(temporary))
    # stderr goes to a file, not a pipe: a pipe nobody reads while frames are written can fill and hang ffmpeg.
    with tempfile.TemporaryFile() as messages:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=messages)
        try:
            for image in images:
                process.stdin.write(image.tobytes())
        except BrokenPipeError:
            pass  # ffmpeg stopped early; its exit status and messages say why
        finally:
            try:
                process.stdin.close()
            except BrokenPipeError:
                pass
            status = process.wait()
        if status != 0:
            messages.seek(0)
            reason = _ffmpeg_error(messages.read(), status).replace(str(temporary), str(path))
            raise RunError(f"ffmpeg could not write the video {path}: {reason}")


def _ffmpeg_error(output: bytes, status: int) -> str:
    """The first line of ffmpeg's messages, without its ``[component @ 0x...]`` prefix."""
    for line in output.decode("utf-8", "replace").splitlines():
        line = re.sub(r"^\[[^\]]*@ 0x[0-9a-f]+\]\s*", "", line.strip())
        if line:
            return line
    return f"ffmpeg exited with status {status}"


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
