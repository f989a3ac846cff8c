"""Recurrent policies on partially observable PettingZoo tasks: GRU against an MLP and an MLP with frame stacking.

Five tasks (``--task``), PettingZoo MPE envs with part of an agent's observation taken away by a wrapper:

* ``spread_landmarks_at_start`` (the default; ``simple_spread_v3``, 3 agents, 25 steps): the landmarks' positions
  are shown on the first observation of an episode only and zeroed after it. An agent sees its own position and
  velocity and the others throughout, so it can find the landmarks again only by remembering where they were: a
  policy without memory, or with the last 4 frames, loses them after the first steps;
* ``speaker_listener_goal_at_start``: ``simple_speaker_listener_v4`` (25 steps) whose speaker is shown the goal's
  colour on the first observation of an episode only (zeros after it). The listener hears the speaker's word one
  step later and must reach the goal; to keep guiding it, either the speaker must remember the goal or the listener
  must remember the first word. Without memory the word is heard once; with 4 stacked frames, for 4 steps;
* ``spread_no_velocity``: each agent's own velocity is taken out (SuperSuit's ``observation_lambda_v0``), the
  multi-agent form of the "no velocity" control tasks that recurrent PPO is usually measured on; four stacked
  frames recover the velocity, so this is the task where frame stacking is the fair fix;
* ``spread_landmarks_every_8``: ``simple_spread_v3`` whose landmarks are shown on every 8th observation of an
  episode only (steps 0, 8, 16, 24; zeroed on the others), a sensor that reports now and then (the "flickering"
  tasks recurrent Q-learning was first measured on). Without memory an agent knows where the landmarks are on one
  step in 8; with 4 stacked frames on half the steps; a policy that keeps the last sighting knows on every step;
* ``speaker_listener_word_once``: ``simple_speaker_listener_v4`` (25 steps) with a scripted speaker that names
  the goal once: the listener, the one agent trained, hears the goal's index (one-hot, in its word slot) on the
  reset observation and silence after it, while it sees the landmarks throughout. A discrete cue to keep for 25
  steps, what a teammate said: without memory the listener knows the goal on the first step only, with 4 stacked
  frames on the first 4. ``speaker_listener_word_always``, the same listener hearing the word on every step, is
  its full-information reference.

Three policies train with marljoint's plain defaults (what ``marljoint train`` uses, no preset) for the same
env-step budget:

* ``mlp``: the default feed-forward policy on the observation as it is;
* ``mlp+stack4``: the same MLP on the last 4 observations (SuperSuit's ``frame_stack_v1``), the usual fix;
* ``gru``: the defaults with ``recurrent="gru"`` (the hidden state carries what the agent saw);
* ``gru[bptt_length=16]`` (``--methods``): the same with truncated BPTT over chunks of 16 steps;
* ``gru[normalize_observations=false]`` (``--methods``): the GRU on raw observations (features that are zero on
  most steps get large standardised values on the others).

Each trained policy plays the same 200 fresh episodes, greedy and sampled (the recurrent one carrying its state
through each episode). Each finished run is one CSV row per mode in ``--out``; a run already there is not trained
again. ``--report`` prints the table (mean ± 95% CI over seeds) of one task.

Usage::

    python benchmarks/recurrent_po.py --seeds 0 1 2 --out benchmarks/results/recurrent/po_landmarks.csv
    python benchmarks/recurrent_po.py --report --out benchmarks/results/recurrent/po_landmarks.csv
"""

from __future__ import annotations

import argparse
import csv
import functools
import time
from pathlib import Path
from typing import Any

import numpy as np
from generalization import Task, append, done_runs, evaluate_marljoint, result_row, seeds_cell, train_marljoint

VELOCITY = 2
"""simple_spread's observation starts with the agent's own velocity (2 numbers), then its position."""


def _without_velocity(obs: np.ndarray, space: Any) -> np.ndarray:
    return obs[VELOCITY:]


def spread_without_velocity(stack: int = 1) -> Any:
    """``simple_spread_v3`` (N=3, 25 steps) without each agent's velocity; the last ``stack`` observations
    concatenated when ``stack > 1``."""
    import supersuit
    from mpe2 import simple_spread_v3

    env = supersuit.observation_lambda_v0(simple_spread_v3.parallel_env(N=3, max_cycles=25), _without_velocity)
    return supersuit.frame_stack_v1(env, stack_size=stack) if stack > 1 else env


LANDMARKS = slice(4, 10)
"""Where simple_spread (N=3) puts the landmarks' positions relative to the agent: after its velocity and position."""


def _landmarks_shown_wrapper(period: int | None) -> type:
    """A wrapper class showing the landmarks on observations 0, P, 2P, ... of an episode (P = ``period``; the
    reset observation only when ``None``) and zeroing them on every other."""
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    class LandmarksShown(BaseParallelWrapper):
        def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, Any], ...]:
            self._t = 0
            return self.env.reset(seed=seed, options=options)

        def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
            obs, *rest = self.env.step(actions)
            self._t += 1
            if period is not None and self._t % period == 0:
                return (obs, *rest)
            hidden = {}
            for agent, o in obs.items():
                o = np.array(o, copy=True)
                o[LANDMARKS] = 0.0
                hidden[agent] = o
            return (hidden, *rest)

    return LandmarksShown


def spread_landmarks_at_start(stack: int = 1) -> Any:
    """``simple_spread_v3`` (N=3, 25 steps) whose landmarks are seen on the first observation of an episode only;
    the last ``stack`` observations concatenated when ``stack > 1``."""
    import supersuit
    from mpe2 import simple_spread_v3

    env = _landmarks_shown_wrapper(None)(simple_spread_v3.parallel_env(N=3, max_cycles=25))
    return supersuit.frame_stack_v1(env, stack_size=stack) if stack > 1 else env


LANDMARK_PERIOD = 8
"""``spread_landmarks_every_8`` shows the landmarks on every 8th observation of an episode only."""


def spread_landmarks_every_8(stack: int = 1) -> Any:
    """``simple_spread_v3`` (N=3, 25 steps) whose landmarks are seen on every 8th observation of an episode (steps
    0, 8, 16 and 24) only; the last ``stack`` observations concatenated when ``stack > 1``."""
    import supersuit
    from mpe2 import simple_spread_v3

    env = _landmarks_shown_wrapper(LANDMARK_PERIOD)(simple_spread_v3.parallel_env(N=3, max_cycles=25))
    return supersuit.frame_stack_v1(env, stack_size=stack) if stack > 1 else env


SPEAKER = "speaker_0"
"""The agent of ``simple_speaker_listener_v4`` that sees the goal's colour (its whole observation) and speaks."""


def _goal_at_start_wrapper() -> type:
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    class GoalAtStart(BaseParallelWrapper):
        """Shows the speaker the goal on the reset observation only; every later observation of it is zeros."""

        def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
            obs, *rest = self.env.step(actions)
            if SPEAKER in obs:
                obs = {**obs, SPEAKER: np.zeros_like(obs[SPEAKER])}
            return (obs, *rest)

    return GoalAtStart


def speaker_listener_goal_at_start(stack: int = 1) -> Any:
    """``simple_speaker_listener_v4`` (25 steps) whose speaker is told the goal on the first observation of an
    episode only; the last ``stack`` observations concatenated when ``stack > 1``."""
    import supersuit
    from mpe2 import simple_speaker_listener_v4

    env = _goal_at_start_wrapper()(simple_speaker_listener_v4.parallel_env(max_cycles=25))
    return supersuit.frame_stack_v1(env, stack_size=stack) if stack > 1 else env


LISTENER = "listener_0"
"""The agent of ``simple_speaker_listener_v4`` that moves; its observation ends with the word it hears."""
WORD = slice(-3, None)
"""Where the listener's observation holds the speaker's word (one of 3, one-hot): its last 3 numbers."""


def _scripted_speaker_env(once: bool) -> type:
    from pettingzoo import ParallelEnv

    class ScriptedSpeaker(ParallelEnv):
        """``simple_speaker_listener_v4`` with a scripted speaker that names the goal: the listener (the one agent)
        hears the goal's index, one-hot, on the reset observation, then silence (zeros) when ``once`` is True or
        the same word on every step when it is False."""

        metadata = {
            "name": "speaker_listener_word_once" if once else "speaker_listener_word_always",
            "render_modes": [],
            "is_parallelizable": True,
        }

        def __init__(self) -> None:
            from mpe2 import simple_speaker_listener_v4

            self.env = simple_speaker_listener_v4.parallel_env(max_cycles=25)
            self.possible_agents = [LISTENER]
            self.agents: list[str] = []
            self._word = 0

        def observation_space(self, agent: str) -> Any:
            return self.env.observation_space(agent)

        def action_space(self, agent: str) -> Any:
            return self.env.action_space(agent)

        def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, Any], ...]:
            obs, infos = self.env.reset(seed=seed, options=options)
            self._word = int(np.argmax(obs[SPEAKER]))  # the goal's colour is the landmark's, by index
            heard = np.array(obs[LISTENER], copy=True)
            heard[WORD] = np.eye(3, dtype=heard.dtype)[self._word]
            self.agents = [LISTENER]
            return {LISTENER: heard}, {LISTENER: infos[LISTENER]}

        def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
            obs, rewards, terms, truncs, infos = self.env.step({SPEAKER: 0, LISTENER: actions[LISTENER]})
            heard = np.array(obs[LISTENER], copy=True)
            heard[WORD] = 0.0 if once else np.eye(3, dtype=heard.dtype)[self._word]
            self.agents = [LISTENER] if not (terms[LISTENER] or truncs[LISTENER]) else []
            return ({LISTENER: heard}, {LISTENER: rewards[LISTENER]}, {LISTENER: terms[LISTENER]},
                    {LISTENER: truncs[LISTENER]}, {LISTENER: infos[LISTENER]})

        def close(self) -> None:
            self.env.close()

    return ScriptedSpeaker


def speaker_listener_word_once(stack: int = 1) -> Any:
    """``simple_speaker_listener_v4`` (25 steps) whose speaker is scripted to name the goal once, before the first
    step: the listener hears the word on its first observation only and must remember it to reach the goal; the
    last ``stack`` observations concatenated when ``stack > 1``."""
    import supersuit

    env = _scripted_speaker_env(once=True)()
    return supersuit.frame_stack_v1(env, stack_size=stack) if stack > 1 else env


def speaker_listener_word_always(stack: int = 1) -> Any:
    """The reference for ``speaker_listener_word_once``: the same scripted speaker naming the goal on every step,
    so that the listener needs no memory; the last ``stack`` observations concatenated when ``stack > 1``."""
    import supersuit

    env = _scripted_speaker_env(once=False)()
    return supersuit.frame_stack_v1(env, stack_size=stack) if stack > 1 else env


TASKS: dict[str, tuple[Any, str]] = {
    "spread_landmarks_at_start": (spread_landmarks_at_start, "spread, landmarks seen at the start only"),
    "speaker_listener_goal_at_start": (
        speaker_listener_goal_at_start, "speaker-listener, the goal told to the speaker at the start only"
    ),
    "spread_no_velocity": (spread_without_velocity, "spread without velocities"),
    "spread_landmarks_every_8": (spread_landmarks_every_8, "spread, landmarks seen on every 8th step only"),
    "speaker_listener_word_once": (
        speaker_listener_word_once, "speaker-listener, the goal named to the listener once, at the start"
    ),
    "speaker_listener_word_always": (
        speaker_listener_word_always, "speaker-listener, the goal named to the listener on every step (reference)"
    ),
}
"""Each task: (its env factory taking the frames to stack, what it is)."""
METHODS: dict[str, tuple[int, dict[str, Any]]] = {
    "mlp": (1, {}),
    "mlp+stack4": (4, {}),
    "gru": (1, {"recurrent": "gru"}),
    "gru[bptt_length=16]": (1, {"recurrent": "gru", "bptt_length": 16}),
    "gru[normalize_observations=false]": (1, {"recurrent": "gru", "normalize_observations": False}),
}
"""Each method: (frames stacked, changes to the defaults)."""


def run_one(name: str, method: str, seed: int, env_steps: int, episodes: int) -> list[dict[str, Any]]:
    """Trains one (method, seed) on task ``name`` and evaluates it greedy and sampled on the same episodes as
    every other."""
    stack, changes = METHODS[method]
    factory, what = TASKS[name]
    task = Task(functools.partial(factory, stack), env_steps, what)
    trainer, seconds = train_marljoint(task, seed, env_steps, changes)
    return [
        result_row(
            name, method, seed, env_steps, seconds, mode,
            evaluate_marljoint(trainer, task, mode == "greedy", episodes, base_seed=1_000_000),
        )
        for mode in ("greedy", "sampled")
    ]


def report(path: Path, name: str) -> str:
    """The markdown table of task ``name`` in a runs CSV: per method, mean over seeds ± 95% CI (greedy and sampled;
    the number of seeds in brackets) and the mean training seconds."""
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["env"] == name]
    lines = ["| policy | greedy | sampled | s/run |", "|---|---|---|---|"]
    for method in [m for m in METHODS if any(r["method"] == m for r in rows)]:
        cells = [
            seeds_cell([float(r["return_mean"]) for r in rows if (r["method"], r["mode"]) == (method, mode)],
                       lambda x: f"{x:.2f}")
            for mode in ("greedy", "sampled")
        ]
        times = [float(r["train_seconds"]) for r in rows if (r["method"], r["mode"]) == (method, "greedy")]
        cells.append(f"{np.mean(times):.0f}" if times else "–")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="spread_landmarks_at_start", choices=list(TASKS))
    parser.add_argument("--methods", nargs="+", default=["mlp", "mlp+stack4", "gru"], choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--env-steps", type=int, default=500_000)
    parser.add_argument("--episodes", type=int, default=200, help="evaluation episodes per policy and mode")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/recurrent/po_landmarks.csv"))
    parser.add_argument("--report", action="store_true", help="print the table of --out instead of training")
    args = parser.parse_args()
    if args.report:
        print(report(args.out, args.task))
        return
    import torch

    torch.set_num_threads(1)
    done = done_runs(args.out)
    for seed in args.seeds:  # seed by seed, so that an interrupted run has every method on its first seeds
        for method in args.methods:
            if (args.task, method, seed) in done:
                continue
            tick = time.perf_counter()
            rows = run_one(args.task, method, seed, args.env_steps, args.episodes)
            append(args.out, rows)
            print(f"{method} seed {seed}: " + ", ".join(f"{r['mode']} {r['return_mean']:.3g}" for r in rows)
                  + f" ({time.perf_counter() - tick:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
