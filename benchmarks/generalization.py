"""Defaults on envs without a preset: marljoint's plain defaults against Stable-Baselines3 + SuperSuit.

For every env of a suite of PettingZoo envs from different families and every seed, it trains

* **marljoint** with its plain defaults (what ``marljoint train --env <env>`` uses, no preset), and
* **SB3 + SuperSuit** with PettingZoo's documented recipe: padding wrappers where agents differ
  (``pad_observations_v0``, ``pad_action_space_v0``), ``black_death_v3`` where agents leave,
  ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` with the same number of env copies, and SB3's PPO with
  its default hyperparameters (one policy shared by all agents, as the recipe has it),

for the same budget of env steps (one joint step of one env copy; SB3 counts agent steps, so its budget is the
env steps × agents), then plays the same fresh episodes with every trained policy, greedy and sampled, beside a
uniformly random policy. Each finished run is one CSV row in ``--out`` (a run already there is not trained again,
so the benchmark resumes and two processes may share the suite with ``--envs``); ``--report`` writes the table
(mean ± 95% CI over seeds) and a plot.

Usage::

    pip install -e ".[bench]"
    python benchmarks/generalization.py --out benchmarks/results/generalization/runs.csv      # the whole suite
    python benchmarks/generalization.py --envs simple_reference multiwalker --seeds 0 1 2 --out runs.csv
    python benchmarks/generalization.py --report --out benchmarks/results/generalization/runs.csv \
        --plot docs/img/generalization.png
"""

from __future__ import annotations

import argparse
import csv
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def _mpe(name: str, **kwargs: Any) -> Any:
    import importlib

    return importlib.import_module(f"mpe2.{name}").parallel_env(**kwargs)


def _sisl(name: str, **kwargs: Any) -> Any:
    import importlib

    return importlib.import_module(f"pettingzoo.sisl.{name}").parallel_env(**kwargs)


def _butterfly(name: str, **kwargs: Any) -> Any:
    import importlib

    return importlib.import_module(f"pettingzoo.butterfly.{name}").parallel_env(**kwargs)


def _bucket_brigade(**kwargs: Any) -> Any:
    from marljoint_envs import bucket_brigade_v0

    return bucket_brigade_v0.parallel_env(**kwargs)


def _pixels(env: Any) -> Any:
    """Grey, 48 × 48, three frames stacked: the same preprocessing for both methods (the CNN needs >= 36 px)."""
    import supersuit

    env = supersuit.color_reduction_v0(env, mode="full")
    env = supersuit.resize_v1(env, x_size=48, y_size=48)
    return supersuit.frame_stack_v1(env, stack_size=3)


def _pong() -> Any:
    # cooperative_pong_v6 draws its screen only when it renders: with render_mode=None every observation is black.
    return _pixels(_butterfly("cooperative_pong_v6", render_mode="rgb_array"))


@dataclass(frozen=True)
class Task:
    """One env of the suite: its factory, budget and what makes it a different case."""

    factory: Callable[[], Any]
    env_steps: int
    what: str
    agents_leave: bool = False
    image: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)


SUITE: dict[str, Task] = {
    "simple_spread": Task(
        functools.partial(_mpe, "simple_spread_v3", N=3, max_cycles=25), 1_000_000, "cooperative MPE (the preset's)"
    ),
    "bucket_brigade": Task(
        functools.partial(_bucket_brigade, scenario="easy"), 1_000_000, "MultiDiscrete, bundled (the preset's)"
    ),
    "simple_reference": Task(
        functools.partial(_mpe, "simple_reference_v3", max_cycles=25), 1_000_000, "cooperative MPE, communication"
    ),
    "speaker_listener": Task(
        functools.partial(_mpe, "simple_speaker_listener_v4", max_cycles=25),
        1_000_000,
        "heterogeneous agents (different spaces), communication",
    ),
    "multiwalker": Task(
        functools.partial(_sisl, "multiwalker_v9", n_walkers=3, max_cycles=500),
        2_000_000,
        "Box actions (SISL), walkers that fall end the episode",
    ),
    "kaz": Task(
        functools.partial(_butterfly, "knights_archers_zombies_v11", max_cycles=300),
        1_000_000,
        "agents that die and leave (butterfly)",
        agents_leave=True,
    ),
    # The env itself steps at about 100-150 env steps/s on one core here (it renders every frame), so 1M env steps
    # would take 2-3 hours per run before any training; 200k is the budget that fits six runs in a working day.
    "cooperative_pong": Task(_pong, 200_000, "image observations (grey 48 × 48 × 3)", image=True),
}

FIELDS = ("env", "method", "seed", "env_steps", "train_seconds", "mode", "episodes", "return_mean", "return_std")


# ------------------------------------------------------------------ training
def train_marljoint(
    task: Task,
    seed: int,
    env_steps: int,
    changes: dict[str, Any] | None = None,
    callback: Callable[[Any, dict[str, Any]], None] | None = None,
) -> tuple[Any, float]:
    """marljoint's plain defaults (``marljoint train``'s, without a preset), with ``changes`` (``--set``) applied;
    returns (the trainer, seconds). ``callback(trainer, metrics)``, if given, runs after every iteration (inside the
    seconds)."""
    from marljoint import JointMultiAgentTrainer, PettingZooJointEnv
    from marljoint.run.train import RunSpec

    # The defaults marljoint train uses (DEFAULT_TRAINER), with a candidate change when one is measured.
    config = RunSpec().trainer.replace(seed=seed, **(changes or {}))
    env = PettingZooJointEnv(task.factory, num_envs=config.num_envs, seed=seed)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    start = time.perf_counter()
    trainer.train(env_steps, keep_history=False, callback=None if callback is None else lambda m: callback(trainer, m))
    seconds = time.perf_counter() - start
    env.close()
    return trainer, seconds


def _sb3_env(task: Task, num_envs: int) -> Any:
    """PettingZoo's SB3 recipe around the task's env: padding where agents differ, black death where they leave."""
    import supersuit as ss

    env = task.factory()
    spaces = {str(env.observation_space(a)) for a in env.possible_agents}
    actions = {str(env.action_space(a)) for a in env.possible_agents}
    if len(spaces) > 1:
        env = ss.pad_observations_v0(env)
    if len(actions) > 1:
        env = ss.pad_action_space_v0(env)
    if task.agents_leave:
        env = ss.black_death_v3(env)
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    return ss.concat_vec_envs_v1(vec, num_envs, num_cpus=1, base_class="stable_baselines3"), env


def train_sb3(
    task: Task,
    seed: int,
    env_steps: int,
    num_envs: int,
    checkpoints: Sequence[int] = (),
    on_checkpoint: Callable[[Any, int], None] | None = None,
) -> tuple[Any, float]:
    """SB3 PPO with its defaults on the SuperSuit-vectorised env; returns (the model, seconds).

    With ``on_checkpoint``, learning pauses at each of ``checkpoints`` (env steps, then at ``env_steps``) to call
    ``on_checkpoint(model, env steps so far)``, outside the seconds; SB3 stops at the first whole rollout past each
    one, and a learning continued this way is the one of a single ``learn`` call (constant schedules)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed

    vec, _ = _sb3_env(task, num_envs)
    agents = len(task.factory().possible_agents)
    # SuperSuit's vec env takes no SB3 seed(): seed torch/numpy, and the env copies by one seeded reset (later
    # resets without a seed continue their generators).
    set_random_seed(seed)
    vec.venv.reset(seed=seed)
    model = PPO("CnnPolicy" if task.image else "MlpPolicy", vec, device="cpu", verbose=0)
    seconds = 0.0
    for target in [*sorted(c for c in set(checkpoints) if c < env_steps), env_steps]:
        start = time.perf_counter()
        model.learn(target * agents - model.num_timesteps, reset_num_timesteps=False)  # SB3 counts agent steps
        seconds += time.perf_counter() - start
        if on_checkpoint is not None:
            on_checkpoint(model, model.num_timesteps // agents)
    vec.close()
    return model, seconds


# ------------------------------------------------------------------ evaluation on the same episodes
Actor = Callable[[dict[str, Any], Any], dict[str, Any]]


def evaluate(task: Task, act: Actor, episodes: int, base_seed: int) -> np.ndarray:
    """Mean return over agents of each episode ``k`` (reset with seed ``base_seed + k``), acting with ``act``.

    ``act(observations, env)`` maps each live agent's observation to its action.
    """
    returns = np.zeros(episodes)
    for k in range(episodes):
        env = task.factory()
        obs, _ = env.reset(seed=base_seed + k)
        total = {a: 0.0 for a in env.possible_agents}
        while env.agents:
            obs, rewards, _, _, _ = env.step(act(obs, env))
            for agent, reward in rewards.items():
                total[agent] += float(reward)
        env.close()
        returns[k] = np.mean(list(total.values()))
    return returns


def evaluate_marljoint(trainer: Any, task: Task, deterministic: bool, episodes: int, base_seed: int) -> np.ndarray:
    """The same episodes as :func:`evaluate`, played through marljoint's adapter (its observation layouts, masks
    and agents that leave), with the trainer's policies."""
    from marljoint import PettingZooJointEnv

    env = PettingZooJointEnv(task.factory, num_envs=1)
    returns = np.zeros(episodes)
    trainer.generator.manual_seed(base_seed)
    for k in range(episodes):
        state = env.reset(seed=base_seed + k)
        while True:
            step = env.step(trainer.act(state, deterministic=deterministic))
            if step.reset_envs[0]:
                returns[k] = float(step.episode_returns[0].mean())
                break
            state = step
    env.close()
    return returns


def sb3_actor(task: Task, model: Any, deterministic: bool) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """Acts with the SB3 model on the recipe's padded observations, un-padding the actions for the raw env."""
    probe = task.factory()
    pad_obs = len({str(probe.observation_space(a)) for a in probe.possible_agents}) > 1
    width = max(int(np.prod(probe.observation_space(a).shape)) for a in probe.possible_agents)

    def act(obs: dict[str, Any], env: Any) -> dict[str, Any]:
        out = {}
        for agent, value in obs.items():
            x = np.asarray(value, dtype=np.float32)
            if pad_obs:
                x = np.pad(x.reshape(-1), (0, width - x.size))
            action, _ = model.predict(x, deterministic=deterministic)
            space = env.action_space(agent)
            if hasattr(space, "n"):
                action = int(action) if int(action) < space.n else 0  # a padded action: a no-op
            out[agent] = action
        return out

    return act


def random_actor(seed: int) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """Uniformly random actions (each agent's action space, seeded)."""
    counter = {"k": seed}

    def act(obs: dict[str, Any], env: Any) -> dict[str, Any]:
        out = {}
        for agent in obs:
            space = env.action_space(agent)
            space.seed(counter["k"])
            counter["k"] += 1
            out[agent] = space.sample()
        return out

    return act


# ------------------------------------------------------------------ the suite
def done_runs(path: Path, key: Callable[[dict[str, str]], tuple[Any, ...]] | None = None) -> set[tuple[Any, ...]]:
    """``(env, method, seed)`` of the runs already in the CSV (or ``key(row)`` of each row)."""
    if not path.is_file():
        return set()
    key = key or (lambda r: (r["env"], r["method"], int(r["seed"])))
    with path.open(newline="") as f:
        return {key(r) for r in csv.DictReader(f)}


def append(path: Path, rows: list[dict[str, Any]], fields: Sequence[str] = FIELDS) -> None:
    """Appends finished rows (the header first if the file is new) with the columns ``fields``."""
    new = not path.is_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fields)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def run_one(
    name: str, method: str, seed: int, scale: float, episodes: int, changes: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Trains one (env, method, seed) and evaluates it greedy and sampled (the random policy: once)."""
    task = SUITE[name]
    steps = max(1, int(task.env_steps * scale))
    base_seed = 1_000_000  # the same evaluation episodes for every method and seed
    seconds = 0.0
    label = method
    if method == "marljoint":
        trainer, seconds = train_marljoint(task, seed, steps, changes)
        label = variant_label(changes)
        actors = {
            m: functools.partial(evaluate_marljoint, trainer, task, m == "greedy") for m in ("greedy", "sampled")
        }
    elif method == "sb3":
        from marljoint.run.defaults import DEFAULT_TRAINER

        model, seconds = train_sb3(task, seed, steps, DEFAULT_TRAINER["num_envs"])
        actors = {
            m: functools.partial(evaluate, task, sb3_actor(task, model, m == "greedy")) for m in ("greedy", "sampled")
        }
    else:
        actors = {"sampled": functools.partial(evaluate, task, random_actor(seed))}
    trained_steps = steps if method != "random" else 0
    return [
        result_row(name, label, seed, trained_steps, seconds, mode, play(episodes, base_seed))
        for mode, play in actors.items()
    ]


def result_row(
    env: str, method: str, seed: int, env_steps: int, seconds: float, mode: str, returns: np.ndarray
) -> dict[str, Any]:
    """One CSV row (:data:`FIELDS`): a trained policy's evaluation returns in one mode."""
    return {
        "env": env,
        "method": method,
        "seed": seed,
        "env_steps": env_steps,
        "train_seconds": round(seconds, 1),
        "mode": mode,
        "episodes": len(returns),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
    }


def variant_label(changes: dict[str, Any] | None) -> str:
    """The method column of a marljoint run: ``marljoint``, or ``marljoint[k=v,...]`` for a candidate change."""
    if not changes:
        return "marljoint"
    return "marljoint[" + ",".join(f"{k}={v}" for k, v in sorted(changes.items())) + "]"


def parse_changes(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` settings (values read as TOML) for ``--set``."""
    import tomllib

    changes = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes KEY=VALUE, got {item!r}")
        changes[key.strip()] = tomllib.loads(f"v = {value}")["v"]
    return changes


def report(path: Path) -> str:
    """The markdown table of a runs CSV: per env and method, the mean over seeds ± 95% CI (greedy and sampled; the
    number of seeds in brackets, no CI for one seed)."""

    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    envs = [n for n in SUITE if any(r["env"] == n for r in rows)]
    lines = [
        "| env | what | marljoint greedy | SB3 greedy | marljoint sampled | SB3 sampled | random | "
        "marljoint s/run | SB3 s/run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in envs:
        cells = []
        for method, mode in (("marljoint", "greedy"), ("sb3", "greedy"), ("marljoint", "sampled"), ("sb3", "sampled")):
            key = (name, method, mode)
            values = [float(r["return_mean"]) for r in rows if (r["env"], r["method"], r["mode"]) == key]
            cells.append(seeds_cell(values, _number))
        randoms = [float(r["return_mean"]) for r in rows if (r["env"], r["method"]) == (name, "random")]
        cells.append(_number(float(np.mean(randoms))) if randoms else "–")
        for method in ("marljoint", "sb3"):
            times = {r["seed"]: float(r["train_seconds"]) for r in rows if (r["env"], r["method"]) == (name, method)}
            cells.append(f"{np.mean(list(times.values())):.0f}" if times else "–")
        lines.append(f"| {name} | {SUITE[name].what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seeds_cell(values: list[float], number: Callable[[float], str]) -> str:
    """A table cell of per-seed results: ``mean ± 95% CI (seeds)`` (no CI for one seed, ``–`` for none)."""
    from marljoint.run.stats import confidence_interval

    if not values:
        return "–"
    mean, half = confidence_interval(values)
    spread = f" ± {number(half)}" if len(values) > 1 else ""
    return f"{number(mean)}{spread} ({len(values)})"


def _number(x: float) -> str:
    """Three significant digits, thousands written out (5,900 rather than 5.9e+03)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def plot(path: Path, out: Path) -> None:
    """One panel per env of a runs CSV: each method's greedy and sampled mean over seeds with its 95% CI, and the
    uniformly random return as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from marljoint.run.stats import confidence_interval

    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    envs = [n for n in SUITE if any(r["env"] == n for r in rows)]
    cols = min(4, max(1, len(envs)))
    fig, axes = plt.subplots(
        (len(envs) + cols - 1) // cols, cols, figsize=(3.2 * cols, 2.8 * ((len(envs) + cols - 1) // cols)),
        squeeze=False,
    )
    bars = [("marljoint", "greedy"), ("sb3", "greedy"), ("marljoint", "sampled"), ("sb3", "sampled")]
    colours = {"marljoint": "tab:blue", "sb3": "tab:orange"}
    for ax, name in zip(axes.flat, envs):
        for k, (method, mode) in enumerate(bars):
            key = (name, method, mode)
            values = [float(r["return_mean"]) for r in rows if (r["env"], r["method"], r["mode"]) == key]
            if not values:
                continue
            mean, half = confidence_interval(values)
            ax.bar(k, mean, yerr=half if len(values) > 1 else None, color=colours[method],
                   alpha=1.0 if mode == "greedy" else 0.5, capsize=3)
        randoms = [float(r["return_mean"]) for r in rows if (r["env"], r["method"]) == (name, "random")]
        if randoms:
            ax.axhline(float(np.mean(randoms)), color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(bars)), ["mj", "SB3", "mj s.", "SB3 s."])
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    fig.suptitle("mean episode return per agent, 200 episodes (greedy; s. = sampled; dashed: random)", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(SUITE), choices=list(SUITE))
    methods = ["random", "marljoint", "sb3"]
    parser.add_argument("--methods", nargs="+", default=methods, choices=methods)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every env's budget (e.g. 0.01 to try)")
    parser.add_argument("--episodes", type=int, default=200, help="evaluation episodes per policy and mode")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/generalization/runs.csv"))
    parser.add_argument(
        "--set", dest="changes", nargs="+", default=[], metavar="KEY=VALUE",
        help="measure marljoint's defaults with these settings changed (a candidate default; recorded as the method "
        "marljoint[KEY=VALUE,...])",
    )
    parser.add_argument("--report", action="store_true", help="print the table of --out instead of training")
    parser.add_argument("--plot", type=Path, help="with --report: also draw the results into this PNG")
    args = parser.parse_args()
    if args.report:
        print(report(args.out))
        if args.plot is not None:
            plot(args.out, args.plot)
        return
    import torch

    torch.set_num_threads(1)
    done = done_runs(args.out)
    changes = parse_changes(args.changes)
    for name in args.envs:
        for method in args.methods:
            for seed in args.seeds if method != "random" else args.seeds[:1]:
                label = variant_label(changes) if method == "marljoint" else method
                if (name, label, seed) in done:
                    continue
                tick = time.perf_counter()
                rows = run_one(name, method, seed, args.scale, args.episodes, changes)
                append(args.out, rows)
                print(f"{name} {method} seed {seed}: " + ", ".join(f"{r['mode']} {r['return_mean']:.3g}" for r in rows)
                      + f" ({time.perf_counter() - tick:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
