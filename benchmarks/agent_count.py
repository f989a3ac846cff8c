"""Learning against the number of agents: marljoint's defaults beside SB3 + SuperSuit and BenchMARL's MAPPO.

Three env families whose agent count is a parameter, each at 3 and at 6 agents (``--agents``):

* ``simple_spread``: mpe2's cooperative navigation, ``simple_spread_v3.parallel_env(N=..., max_cycles=25)``
  (discrete actions, the env of the generalization suite);
* ``pursuit``: SISL's ``pursuit_v5.parallel_env(n_pursuers=...)`` (its other settings at their defaults: 30
  evaders on a 16 × 16 grid, two pursuers to catch one, 500 steps). It is SISL's family with an agent-count
  parameter that PettingZoo 1.27 still ships (``waterworld`` is gone); its 7 × 7 × 3 observations are flattened by
  every method (too small for a CNN). It is the slowest env here (a few hundred env steps per second on one core at
  six pursuers), so its runs take the longest;
* ``bucket_brigade``: the bundled ``bucket_brigade_v0.parallel_env(scenario="easy", num_agents=...)``
  (``MultiDiscrete`` actions; ten houses, so at most ten agents).

Methods, all at the same budget of env steps (one joint step of one env copy; SB3 counts agent steps, so its budget
is env steps × agents):

* ``marljoint``: exactly ``marljoint train --env ENV --env-kwargs ... --total-steps BUDGET --seed S`` (its plain
  defaults, no preset, through :func:`marljoint.run.train.train_run`), with ``--set KEY=VALUE`` applied as
  ``marljoint train --set`` does, so a single-change ablation runs with the same program; its method column is then
  ``marljoint[KEY=VALUE,...]``. The run directory's ``metrics.csv`` (entropy, explained variance, approx KL, clip
  fraction, gradient norms per iteration: ``docs/metrics.md``) and ``config.toml`` are kept under ``--runs``;
  the checkpoints are deleted once the run is evaluated. The run stops at each checkpoint with a checkpoint file and
  is resumed from it, which gives the same bits as an uninterrupted run;
* ``sb3``: Stable-Baselines3 PPO with its defaults on PettingZoo's SuperSuit recipe
  (:func:`generalization.train_sb3`, 16 env copies);
* ``benchmarl``: BenchMARL's MAPPO with BenchMARL's own default experiment, algorithm and model configs
  (``ExperimentConfig``, ``MappoConfig``, ``MlpConfig`` ``get_from_yaml()``: 6,000 frames per batch from 10 env
  copies, 45 passes of 400-frame minibatches, lr 5e-5), except what the benchmark must set: the budget, no BenchMARL
  logging, evaluation or checkpoints (the benchmark evaluates), ``prefer_continuous_actions = False`` (the envs
  here are the discrete ones every other method trains on). ``simple_spread`` uses BenchMARL's own task config
  (``PettingZooTask.SIMPLE_SPREAD``) with the family's ``N`` and ``max_cycles``; BenchMARL has no config of
  ``pursuit_v5`` or the bucket brigade, so their tasks are built here from the PettingZoo env
  (:class:`FactoryTask`, torchrl's ``PettingZooWrapper``) and trained with the same MAPPO defaults; the bucket
  brigade's ``MultiDiscrete([10, 2, 2])`` actions become one ``Discrete(40)`` for BenchMARL (its MAPPO takes
  one categorical per agent), unravelled when acting;
* ``random``: uniformly random actions (one row per env and agent count, at env step 0).

At every checkpoint (``--checkpoints``, env steps; and at the budget ``--steps``) the policy plays ``--episodes``
fresh episodes greedily (its most likely action; BenchMARL's deterministic action), the same episodes (reset seeds)
for every method and seed (:func:`generalization.evaluate`). Each evaluation is one CSV row in ``--out``
(:data:`FIELDS`): the env, the agent count, the method, the seed, the checkpoint and the env steps actually trained
(each method stops at the first whole rollout past it), the training's wall and CPU seconds so far (this process
and its worker processes; evaluation excluded) and the mean greedy return per agent. A run whose rows are all in
the CSV is not trained again. ``--report`` prints a table per env and agent count (mean ± 95% CI over seeds at
each checkpoint) and, with ``--plot``, draws the learning curves.

torchrl's ``PettingZooEnv`` (which BenchMARL's PettingZoo tasks build) looks task names up in
``pettingzoo.utils.all_modules``, which fails to import without PettingZoo's Atari extra, and then in
``pettingzoo.mpe``, which PettingZoo 1.27 removed: :func:`mpe2_lookup` adds mpe2's envs to that fallback (in this
benchmark only).

Usage::

    pip install -e ".[bench]"     # SB3, BenchMARL; then, to keep the CPU build of torch:
    pip install "torch==2.13.*" "benchmarl==1.5.2"
    # the full benchmark (hours: 3 envs x 2 agent counts x 3 trained methods x 3 seeds of 1M env steps):
    python benchmarks/agent_count.py --out benchmarks/results/agent-count/runs.csv
    # one family, one change of marljoint's defaults (an ablation, its own method column):
    python benchmarks/agent_count.py --envs simple_spread --methods marljoint --set n_epochs=4 \\
        --out benchmarks/results/agent-count/runs.csv
    python benchmarks/agent_count.py --report --out benchmarks/results/agent-count/runs.csv \\
        --plot docs/img/agent_count.png
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import functools
import importlib
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generalization  # noqa: E402  (the peers, the evaluation and the CSV of the generalization benchmark)

BASE_SEED = 1_000_000
"""Episode ``k`` of every evaluation resets with seed ``BASE_SEED + k``: the same episodes for every method."""
METHODS = ("random", "marljoint", "sb3", "benchmarl")
FIELDS = (
    "env",
    "agents",
    "method",
    "seed",
    "checkpoint",
    "env_steps",
    "train_seconds",
    "cpu_seconds",
    "episodes",
    "return_mean",
    "return_std",
)
OWN_SETTINGS = ("env", "env_kwargs", "total_steps", "seed", "checkpoint_every")
"""Settings the benchmark sets itself, which ``--set`` may not change."""


def make_parallel_env(module: str, kwargs: dict[str, Any]) -> Any:
    """``<module>.parallel_env(**kwargs)``."""
    return importlib.import_module(module).parallel_env(**kwargs)


@dataclass(frozen=True)
class Family:
    """An env family whose agent count is the keyword argument ``count``."""

    env: str
    """What ``marljoint train --env`` takes (a bundled name or a module path)."""
    module: str
    """The module whose ``parallel_env`` builds it."""
    count: str
    """The keyword argument that sets the number of agents."""
    kwargs: dict[str, Any]
    """Its other keyword arguments."""
    max_steps: int
    """The longest episode (BenchMARL's tasks need it)."""
    what: str
    benchmarl_task: str | None = None
    """BenchMARL's ``PettingZooTask`` of this env, or ``None`` where BenchMARL has no config of it."""


FAMILIES: dict[str, Family] = {
    "simple_spread": Family(
        "mpe2.simple_spread_v3", "mpe2.simple_spread_v3", "N", {"max_cycles": 25}, 25,
        "cooperative navigation (MPE)", "SIMPLE_SPREAD",
    ),
    "pursuit": Family(
        "pettingzoo.sisl.pursuit_v5", "pettingzoo.sisl.pursuit_v5", "n_pursuers", {}, 500,
        "pursuit-evasion on a grid (SISL), 7 × 7 × 3 views",
    ),
    "bucket_brigade": Family(
        "bucket_brigade_v0", "marljoint_envs.bucket_brigade_v0", "num_agents", {"scenario": "easy"}, 100,
        "firefighting social dilemma (bundled), MultiDiscrete",
    ),
}


@dataclass(frozen=True)
class Case:
    """One env of a family at one agent count."""

    name: str
    agents: int

    @property
    def family(self) -> Family:
        return FAMILIES[self.name]

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return {**self.family.kwargs, self.family.count: self.agents}

    @property
    def task(self) -> generalization.Task:
        """The generalization benchmark's :class:`~generalization.Task` of this env (its factory is picklable)."""
        factory = functools.partial(make_parallel_env, self.family.module, self.env_kwargs)
        return generalization.Task(factory, 0, self.family.what)


@dataclass(frozen=True)
class Plan:
    """What every run of one benchmark does: its budget, where it evaluates, how many episodes."""

    steps: int
    checkpoints: tuple[int, ...]
    episodes: int

    @property
    def points(self) -> tuple[int, ...]:
        """The checkpoints and the budget, in order."""
        return tuple(sorted({*self.checkpoints, self.steps}))


def plan_from(steps: int, checkpoints: Sequence[int], episodes: int) -> Plan:
    """A :class:`Plan`, checked.

    Raises:
        ValueError: for a budget or episodes below 1, or a checkpoint outside ``1..steps``.
    """
    if steps < 1 or episodes < 1:
        raise ValueError(f"--steps {steps} and --episodes {episodes} must be at least 1")
    outside = [c for c in checkpoints if not 1 <= c <= steps]
    if outside:
        raise ValueError(f"--checkpoints {outside} lie outside 1..--steps {steps}; give checkpoints up to the budget")
    return Plan(steps, tuple(sorted(set(checkpoints))), episodes)


def parse_changes(items: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as ``marljoint train --set`` reads them (values as TOML), checked against
    :class:`~marljoint.run.spec.RunSpec`.

    Raises:
        ValueError: for an item without ``=``, a value TOML cannot read, an unknown key or an invalid value (the
            message is marljoint's, one line), or a setting the benchmark sets itself.
    """
    import tomllib

    from marljoint.run.spec import RunSpec

    changes: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
        try:
            changes[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            raise ValueError(f"--set {item}: the value is not TOML (quote a string: {key}='\"{value}\"')") from None
    own = sorted(set(changes) & set(OWN_SETTINGS))
    if own:
        raise ValueError(f"--set {', '.join(own)}: the benchmark sets these itself (use --envs, --agents, --steps, "
                         "--seeds, --checkpoints)")
    try:
        RunSpec.from_dict(changes, given=changes)
    except ValueError as exc:
        raise ValueError(f"--set: {exc}") from None
    return changes


# ------------------------------------------------------------------ timing
def _cpu_seconds() -> float:
    """User + system seconds of this process and of its children that have ended (env workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Clock:
    """Wall and CPU seconds of training alone: runs between :meth:`start` and :meth:`stop` (or inside ``with``)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self._since: tuple[float, float] | None = None

    def start(self) -> None:
        self._since = (time.perf_counter(), _cpu_seconds())

    def stop(self) -> None:
        if self._since is not None:
            wall, cpu = self._since
            self.wall += time.perf_counter() - wall
            self.cpu += _cpu_seconds() - cpu
            self._since = None

    def __enter__(self) -> Clock:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


Emit = Callable[[int, int, np.ndarray], None]
"""``emit(checkpoint, env_steps, returns)``: one evaluation of a run (the runner's clock is read by the caller)."""


def result_row(
    case: Case, method: str, seed: int, checkpoint: int, env_steps: int, clock: Clock, returns: np.ndarray
) -> dict[str, Any]:
    """One CSV row (:data:`FIELDS`)."""
    return {
        "env": case.name,
        "agents": case.agents,
        "method": method,
        "seed": seed,
        "checkpoint": checkpoint,
        "env_steps": env_steps,
        "train_seconds": round(clock.wall, 1),
        "cpu_seconds": round(clock.cpu, 1),
        "episodes": len(returns),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
    }


def row_key(row: dict[str, Any]) -> tuple[str, int, str, int, int]:
    """What identifies a row: (env, agents, method, seed, checkpoint)."""
    return row["env"], int(row["agents"]), row["method"], int(row["seed"]), int(row["checkpoint"])


def _crossed(points: Sequence[int], done: int, env_steps: int) -> list[int]:
    """The points in ``(done, env_steps]``: the checkpoints a rollout that ends at ``env_steps`` has passed."""
    return [p for p in points if done < p <= env_steps]


# ------------------------------------------------------------------ the runners
def run_random(case: Case, seed: int, plan: Plan, emit: Emit, clock: Clock) -> None:
    """Uniformly random actions, evaluated once (checkpoint 0)."""
    emit(0, 0, generalization.evaluate(case.task, generalization.random_actor(seed), plan.episodes, BASE_SEED))


def run_marljoint(
    case: Case, seed: int, plan: Plan, emit: Emit, clock: Clock, changes: dict[str, Any], run_dir: Path
) -> None:
    """``marljoint train`` on the case (its defaults with ``changes``), stopped and evaluated at every checkpoint;
    ``run_dir`` keeps its ``config.toml`` and ``metrics.csv``."""
    from marljoint.run.evaluate import load_run
    from marljoint.run.spec import RunSpec, resume_spec
    from marljoint.run.train import train_run

    values = {"env": case.family.env, "env_kwargs": case.env_kwargs, "total_steps": plan.steps, "seed": seed}
    spec = RunSpec.from_dict({**values, **changes}, given={**values, **changes})
    per_iteration = spec.trainer.num_envs * spec.trainer.rollout_steps
    done = 0
    for point in plan.points:
        stop = -(-point // per_iteration)
        if stop * per_iteration <= done:
            continue  # the last rollout already passed this checkpoint
        with clock:  # checkpoint_every = stop: the run writes a checkpoint where it stops, to resume from
            if done == 0:
                spec = dataclasses.replace(spec, checkpoint_every=stop)
                train_run(spec, run_dir, force=True, progress=False, stop_after=stop)
            else:
                train_run(resume_spec(run_dir, {"checkpoint_every": stop}), run_dir, resume=True, progress=False,
                          stop_after=stop)
        run = load_run(run_dir)
        try:
            returns = generalization.evaluate_marljoint(run.trainer, case.task, True, plan.episodes, BASE_SEED)
        finally:
            run.close()
        for crossed in _crossed(plan.points, done, stop * per_iteration):
            emit(crossed, stop * per_iteration, returns)
        done = stop * per_iteration
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)


def run_sb3(case: Case, seed: int, plan: Plan, emit: Emit, clock: Clock) -> None:
    """SB3 + SuperSuit (:func:`generalization.train_sb3`), evaluated at every checkpoint."""
    from marljoint.run.defaults import DEFAULT_TRAINER

    done = 0

    def at_checkpoint(model: Any, env_steps: int) -> None:
        nonlocal done
        clock.stop()
        crossed = _crossed(plan.points, done, env_steps)
        if crossed:
            actor = generalization.sb3_actor(case.task, model, True)
            returns = generalization.evaluate(case.task, actor, plan.episodes, BASE_SEED)
            for point in crossed:
                emit(point, env_steps, returns)
        done = max(done, env_steps)
        clock.start()

    with clock:
        generalization.train_sb3(case.task, seed, plan.steps, DEFAULT_TRAINER["num_envs"], plan.points, at_checkpoint)


# ------------------------------------------------------------------ BenchMARL
def mpe2_lookup() -> None:
    """Lets torchrl's ``PettingZooEnv`` find mpe2's envs by task name (``"simple_spread_v3"``).

    torchrl looks names up in ``pettingzoo.utils.all_modules``, which needs PettingZoo's Atari extra, and when that
    fails in each family's ``all_modules`` (``_load_available_envs``), starting with ``pettingzoo.mpe``, which
    PettingZoo 1.27 moved to the ``mpe2`` package: importing it raises an ``ImportError`` that torchrl does not
    catch. This replaces that fallback by one that reads mpe2's ``mpe_environments`` and PettingZoo's other families;
    applied by this benchmark only.
    """
    from torchrl.envs.libs import pettingzoo as torchrl_pettingzoo

    torchrl_pettingzoo._load_available_envs = _available_envs


def _available_envs() -> dict[str, Any]:
    """torchrl's table of PettingZoo envs by name, with mpe2's envs as ``mpe/<name>``."""
    found: dict[str, Any] = {}
    for family in ("sisl", "classic", "butterfly"):
        with contextlib.suppress(ImportError):
            module = importlib.import_module(f"pettingzoo.{family}.all_modules")
            found.update(getattr(module, f"{family}_environments"))
    found.update(importlib.import_module("mpe2.all_modules").mpe_environments)
    return found


def _joint_discrete(env: Any) -> Any:
    """``env`` with each ``MultiDiscrete`` action space replaced by one ``Discrete`` over its joint actions."""
    from gymnasium import spaces
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    class JointDiscrete(BaseParallelWrapper):
        def action_space(self, agent: str) -> Any:
            space = self.env.action_space(agent)
            return spaces.Discrete(int(np.prod(space.nvec))) if isinstance(space, spaces.MultiDiscrete) else space

        def step(self, actions: dict[str, Any]) -> Any:
            return self.env.step({a: unravel(self.env.action_space(a), x) for a, x in actions.items()})

    return JointDiscrete(env)


def unravel(space: Any, action: Any) -> Any:
    """A joint ``Discrete`` action of :func:`_joint_discrete` as the ``MultiDiscrete`` action of ``space``."""
    from gymnasium import spaces

    if isinstance(space, spaces.MultiDiscrete):
        return np.array(np.unravel_index(int(action), tuple(space.nvec)), dtype=space.dtype)
    return action


def _flat_observations(case: Case) -> bool:
    env = case.task.factory()
    flat = all(len(env.observation_space(a).shape) == 1 for a in env.possible_agents)
    env.close()
    return flat


def _factory_task_class() -> type:
    """:class:`FactoryTask`, defined once BenchMARL is imported."""
    from benchmarl.environments.pettingzoo.common import PettingZooClass

    class FactoryTask(PettingZooClass):
        """A BenchMARL task built from a PettingZoo env factory (for envs BenchMARL has no config of): torchrl's
        ``PettingZooWrapper`` around the env, ``MultiDiscrete`` actions joined (:func:`_joint_discrete`),
        observations of more than one dimension flattened for BenchMARL's MLP."""

        def __init__(self, case: Case) -> None:
            super().__init__(name=case.name.upper(), config={})
            self.case = case

        def __reduce__(self) -> tuple[Any, ...]:
            return benchmarl_task, (self.case,)  # BenchMARL pickles its task; a class made here has no import path

        def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None, device: Any) -> Any:
            from torchrl.envs.libs.pettingzoo import PettingZooWrapper

            factory = self.case.task.factory
            return lambda: PettingZooWrapper(
                env=_joint_discrete(factory()), categorical_actions=True, seed=seed, device=device, return_state=False
            )

        def supports_continuous_actions(self) -> bool:
            return False

        def supports_discrete_actions(self) -> bool:
            return True

        def has_state(self) -> bool:
            return False

        def max_steps(self, env: Any) -> int:
            return self.case.family.max_steps

        def get_env_transforms(self, env: Any) -> list[Any]:
            if _flat_observations(self.case):
                return []
            from torchrl.envs import FlattenObservation

            keys = [(group, "observation") for group in self.group_map(env)]
            return [FlattenObservation(-3, -1, in_keys=keys, out_keys=keys)]

    return FactoryTask


def benchmarl_task(case: Case) -> Any:
    """BenchMARL's task of ``case``: its own PettingZoo task config where it has one (the family's env keyword
    arguments applied), else a :class:`FactoryTask`."""
    if case.family.benchmarl_task is None:
        return _factory_task_class()(case)
    from benchmarl.environments import PettingZooTask

    mpe2_lookup()
    task = PettingZooTask[case.family.benchmarl_task].get_from_yaml()
    task.config.update(case.env_kwargs)
    return task


def benchmarl_actor(experiment: Any) -> generalization.Actor:
    """Acts with a BenchMARL experiment's policy, deterministically (its distribution's mode), on raw PettingZoo
    observations: stacked per agent group in the group's order, flattened, joint actions unravelled."""
    import torch
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    def act(obs: dict[str, Any], env: Any) -> dict[str, Any]:
        groups = {}
        for group, agents in experiment.group_map.items():
            x = np.stack([np.asarray(obs[a], dtype=np.float32).reshape(-1) for a in agents])
            groups[group] = TensorDict({"observation": torch.as_tensor(x)}, batch_size=[len(agents)])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            out = experiment.policy(TensorDict(groups, batch_size=[]))
        actions = {}
        for group, agents in experiment.group_map.items():
            chosen = out[group, "action"].cpu().numpy()
            for agent, action in zip(agents, chosen):
                actions[agent] = unravel(env.action_space(agent), action)
        return actions

    return act


def _benchmarl_config(steps: int, folder: str) -> Any:
    """BenchMARL's default experiment config with what the benchmark sets (the module docstring lists it)."""
    from benchmarl.experiment import ExperimentConfig

    config = ExperimentConfig.get_from_yaml()
    config.max_n_frames = steps
    config.prefer_continuous_actions = False
    config.loggers = []
    config.create_json = False
    config.evaluation = False
    config.render = False
    config.checkpoint_interval = 0
    config.checkpoint_at_end = False
    config.save_folder = folder
    return config


def run_benchmarl(case: Case, seed: int, plan: Plan, emit: Emit, clock: Clock) -> None:
    """BenchMARL's MAPPO with its defaults on the case, evaluated at every checkpoint (after the update of the
    batch that passes it)."""
    from benchmarl.algorithms import MappoConfig
    from benchmarl.experiment import Callback, Experiment
    from benchmarl.models.mlp import MlpConfig

    class AtCheckpoints(Callback):
        done = 0

        def on_train_end(self, training_td: Any, group: str) -> None:
            experiment = self.experiment
            if group != list(experiment.train_group_map)[-1]:
                return
            crossed = _crossed(plan.points, self.done, experiment.total_frames)
            if crossed:
                clock.stop()
                returns = generalization.evaluate(case.task, benchmarl_actor(experiment), plan.episodes, BASE_SEED)
                for point in crossed:
                    emit(point, experiment.total_frames, returns)
                clock.start()
            self.done = experiment.total_frames

        def __reduce__(self) -> tuple[Any, ...]:
            return _never_restored, ()  # BenchMARL pickles its callbacks into the experiment folder

    with tempfile.TemporaryDirectory() as folder, clock:
        experiment = Experiment(
            task=benchmarl_task(case),
            algorithm_config=MappoConfig.get_from_yaml(),
            model_config=MlpConfig.get_from_yaml(),
            critic_model_config=MlpConfig.get_from_yaml(),
            seed=seed,
            config=_benchmarl_config(plan.steps, folder),
            callbacks=[AtCheckpoints()],
        )
        experiment.run()


def _never_restored() -> None:
    """What a pickled checkpoint callback of :func:`run_benchmarl` becomes: nothing (its runs are never restored)."""


# ------------------------------------------------------------------ the benchmark
def run_label(method: str, changes: dict[str, Any]) -> str:
    """The method column: ``marljoint[k=v,...]`` for marljoint with changes (:func:`generalization.variant_label`)."""
    return generalization.variant_label(changes) if method == "marljoint" else method


def run_dir_name(case: Case, label: str, seed: int) -> str:
    """The folder of a marljoint run under ``--runs``: ``<env>-n<agents>-<label>-seed<seed>``, file-name safe."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", f"{case.name}-n{case.agents}-{label}-seed{seed}")


def run_one(
    case: Case, method: str, seed: int, plan: Plan, out: Path, runs: Path, changes: dict[str, Any]
) -> list[dict[str, Any]]:
    """Trains one (case, method, seed) and appends a row to ``out`` at every checkpoint not already there;
    returns the rows written."""
    label = run_label(method, changes)
    done = generalization.done_runs(out, key=row_key)
    written: list[dict[str, Any]] = []
    clock = Clock()

    def emit(checkpoint: int, env_steps: int, returns: np.ndarray) -> None:
        row = result_row(case, label, seed, checkpoint, env_steps, clock, returns)
        if row_key(row) not in done:
            generalization.append(out, [row], FIELDS)
            written.append(row)

    if method == "marljoint":
        run_marljoint(case, seed, plan, emit, clock, changes, runs / run_dir_name(case, label, seed))
    else:
        {"random": run_random, "sb3": run_sb3, "benchmarl": run_benchmarl}[method](case, seed, plan, emit, clock)
    return written


def wanted(case: Case, label: str, seed: int, plan: Plan) -> set[tuple[str, int, str, int, int]]:
    """The row keys a run writes."""
    points = (0,) if label == "random" else plan.points
    return {(case.name, case.agents, label, seed, p) for p in points}


# ------------------------------------------------------------------ the report
def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _methods(rows: list[dict[str, str]]) -> list[str]:
    """The trained methods of the rows: marljoint, its variants, sb3, benchmarl, in that order."""
    found = {r["method"] for r in rows} - {"random"}
    order = ["marljoint", *sorted(m for m in found if m.startswith("marljoint[")), "sb3", "benchmarl"]
    return [m for m in order if m in found] + sorted(found - set(order))


def rise(rows: list[dict[str, str]], method: str, first: int, last: int) -> tuple[float, float, int]:
    """A method's rise from checkpoint ``first`` to ``last``, paired by seed (the seeds that reached both): mean,
    95% CI half-width (``nan`` for one seed) and the number of seeds. No plateau means the mean exceeds the
    half-width: the interval lies above 0.

    Example:
        >>> rows = [{"method": "m", "seed": str(s), "checkpoint": str(c), "return_mean": str(v)}
        ...         for s, (a, b) in enumerate([(-30.0, -29.0), (-29.5, -28.6), (-29.8, -28.7)])
        ...         for c, v in ((250, a), (1000, b))]
        >>> mean, half, n = rise(rows, "m", 250, 1000)
        >>> round(mean, 3), round(half, 3), n
        (1.0, 0.248, 3)
    """
    from marljoint.run.stats import confidence_interval

    at: dict[int, dict[int, float]] = {first: {}, last: {}}
    for r in rows:
        if r["method"] == method and int(r["checkpoint"]) in at:
            at[int(r["checkpoint"])][int(r["seed"])] = float(r["return_mean"])
    seeds = sorted(at[first].keys() & at[last].keys())
    mean, half = confidence_interval([at[last][s] - at[first][s] for s in seeds])
    return mean, half, len(seeds)


def _rise_cell(rows: list[dict[str, str]], method: str, points: list[int]) -> str:
    if len(points) < 2:
        return "–"
    mean, half, n = rise(rows, method, points[0], points[-1])
    if n == 0:
        return "–"
    if n < 2:
        return f"{mean:+.3g} (1)"
    verdict = "rises" if mean > half else "flat"
    return f"{mean:+.3g} ± {half:.2g} ({n}): {verdict}"


def report(paths: Sequence[Path]) -> str:
    """Markdown: per env and agent count, a table of each method's mean greedy return ± 95% CI over seeds at each
    checkpoint (the number of seeds in brackets), its rise from the first checkpoint to the last paired by seed
    (:func:`rise`; "rises" when the interval lies above 0), its training seconds per run at the last, and the
    random return. ``paths``: the CSVs of one or more runs of the benchmark, read as one."""
    rows = [row for path in paths for row in _read(path)]
    cases = sorted({(r["env"], int(r["agents"])) for r in rows}, key=lambda c: (list(FAMILIES).index(c[0]), c[1]))
    out = []
    for env, agents in cases:
        mine = [r for r in rows if (r["env"], int(r["agents"])) == (env, agents)]
        points = sorted({int(r["checkpoint"]) for r in mine if r["method"] != "random"})
        randoms = [float(r["return_mean"]) for r in mine if r["method"] == "random"]
        out.append(f"### {env}, {agents} agents\n")
        if randoms:
            out.append(f"uniformly random: {generalization._number(float(np.mean(randoms)))}\n")
        rise_head = f"rise {points[0]:,} → {points[-1]:,}" if len(points) > 1 else "rise"
        out.append("| method | " + " | ".join(f"{p:,} steps" for p in points) + f" | {rise_head} | s/run | CPU s/run |")
        out.append("|---" * (len(points) + 4) + "|")
        for method in _methods(mine):
            cells = []
            for p in points:
                values = [float(r["return_mean"]) for r in mine if (r["method"], int(r["checkpoint"])) == (method, p)]
                cells.append(generalization.seeds_cell(values, generalization._number))
            cells.append(_rise_cell(mine, method, points))
            last = [r for r in mine if r["method"] == method and int(r["checkpoint"]) == max(points)]
            for column in ("train_seconds", "cpu_seconds"):
                cells.append(f"{np.mean([float(r[column]) for r in last]):.0f}" if last else "–")
            out.append(f"| {method} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def curves(rows: list[dict[str, str]], env: str, agents: int, method: str) -> tuple[np.ndarray, ...]:
    """One method's curve: checkpoints, mean return over seeds and 95% CI half-widths (0 for one seed)."""
    from marljoint.run.stats import confidence_interval

    mine = [r for r in rows if (r["env"], int(r["agents"]), r["method"]) == (env, agents, method)]
    points = sorted({int(r["checkpoint"]) for r in mine})
    means, halves = [], []
    for p in points:
        values = [float(r["return_mean"]) for r in mine if int(r["checkpoint"]) == p]
        mean, half = confidence_interval(values)
        means.append(mean)
        halves.append(half if len(values) > 1 else 0.0)
    return np.array(points), np.array(means), np.array(halves)


def plot(paths: Sequence[Path], out: Path) -> None:
    """One panel per env (rows) and agent count (columns): each method's mean greedy return against env steps with
    its 95% CI band, and the uniformly random return as a dashed line. ``paths`` as :func:`report`'s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for path in paths for row in _read(path)]
    envs = [n for n in FAMILIES if any(r["env"] == n for r in rows)]
    counts = sorted({int(r["agents"]) for r in rows})
    fig, axes = plt.subplots(len(envs), len(counts), figsize=(3.6 * len(counts), 2.8 * len(envs)), squeeze=False)
    colours = {"marljoint": "tab:blue", "sb3": "tab:orange", "benchmarl": "tab:green"}
    others = ["tab:purple", "tab:brown", "tab:red", "tab:pink", "tab:olive", "tab:cyan", "tab:grey"]
    for k, method in enumerate(m for m in _methods(rows) if m not in colours):  # one colour per method, every panel
        colours[method] = others[k % len(others)]
    for i, env in enumerate(envs):
        for j, agents in enumerate(counts):
            ax = axes[i, j]
            mine = [r for r in rows if (r["env"], int(r["agents"])) == (env, agents)]
            if not mine:
                ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, fontsize=8)
            for method in _methods(mine):
                x, mean, half = curves(rows, env, agents, method)
                line = ax.plot(x, mean, marker="o", markersize=3, label=method, color=colours.get(method))[0]
                ax.fill_between(x, mean - half, mean + half, color=line.get_color(), alpha=0.2)
            randoms = [float(r["return_mean"]) for r in mine if r["method"] == "random"]
            if randoms:
                ax.axhline(float(np.mean(randoms)), color="grey", linestyle="--", linewidth=1)
            ax.set_title(f"{env}, {agents} agents", fontsize=9)
            ax.set_xlabel("env steps", fontsize=8)
            ax.tick_params(labelsize=7)
    legend: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", fontsize=8, ncol=3)
    fig.suptitle("mean greedy episode return per agent (95% CI over seeds; dashed: random)", fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 0.96))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


DIAGNOSTICS = {
    "episode_return_mean": "training return per agent (sampled)",
    "entropy": "policy entropy",
    "explained_var": "explained variance",
    "approx_kl": "approx KL",
    "clip_fraction": "clip fraction",
    "advantage_std": "advantage scale (std before normalisation)",
}
"""The columns of a run's ``metrics.csv`` that :func:`diagnostics` draws (per-agent ones averaged over agents)."""


def diagnostic_curves(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{column: (env steps, value)}`` of one ``metrics.csv``: each of :data:`DIAGNOSTICS`, the per-agent columns
    (``entropy/<agent>``) averaged over the agents; a column the file lacks is left out."""
    rows = _read(path)
    steps = np.array([float(r["env_steps"]) for r in rows])
    found: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in DIAGNOSTICS:
        columns = [c for c in rows[0] if c == name or c.startswith(f"{name}/")] if rows else []
        if columns:
            found[name] = (steps, np.array([np.mean([float(r[c]) for c in columns]) for r in rows]))
    return found


def diagnostics(paths: Sequence[Path], out: Path, smooth: int = 10) -> None:
    """One panel per :data:`DIAGNOSTICS` column against env steps, one line per ``metrics.csv`` (named by its
    file or its run directory), each a running mean over ``smooth`` iterations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(11, 5.6))
    for path in paths:
        label = path.parent.name if path.name == "metrics.csv" else path.stem
        curves = diagnostic_curves(path)
        for ax, name in zip(axes.flat, DIAGNOSTICS):
            if name not in curves:
                continue
            x, y = curves[name]
            window = min(smooth, len(y))
            y = np.convolve(y, np.ones(window) / window, mode="valid")
            ax.plot(x[window - 1:], y, label=label, linewidth=1)
    for ax, title in zip(axes.flat, DIAGNOSTICS.values()):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("env steps", fontsize=8)
        ax.tick_params(labelsize=7)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", fontsize=7, ncol=2)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------ the command
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agent_count.py", description=__doc__.splitlines()[0])
    p.add_argument("--envs", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--agents", nargs="+", type=int, default=[3, 6], help="agent counts of every env")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps of every run (the budget)")
    p.add_argument("--checkpoints", nargs="+", type=int, default=[250_000, 500_000, 1_000_000],
                   help="env steps at which each run is evaluated (and at --steps)")
    p.add_argument("--episodes", type=int, default=200, help="greedy evaluation episodes per checkpoint")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/agent-count/runs.csv"))
    p.add_argument("--runs", type=Path, help="where marljoint's run directories go (default: runs/ beside --out)")
    p.add_argument("--set", dest="changes", nargs="+", default=[], metavar="KEY=VALUE",
                   help="marljoint's defaults with these settings changed, as marljoint train --set (the method "
                   "column becomes marljoint[KEY=VALUE,...])")
    p.add_argument("--report", action="store_true", help="print the tables of --out instead of training")
    p.add_argument("--csv", type=Path, nargs="+", help="with --report: the CSVs to read as one (default: --out)")
    p.add_argument("--plot", type=Path, help="with --report: also draw the learning curves into this PNG; with "
                   "--diagnostics: the curves of the runs' metrics")
    p.add_argument("--diagnostics", type=Path, nargs="+", metavar="METRICS_CSV",
                   help="draw these runs' entropy, explained variance, approx KL, clip fraction and advantage scale "
                   "against env steps into --plot")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    if args.diagnostics:
        if args.plot is None:
            p.error("--diagnostics draws into --plot PNG; give it")
        diagnostics(args.diagnostics, args.plot)
        return
    if args.report:
        paths = args.csv or [args.out]
        print(report(paths))
        if args.plot is not None:
            plot(paths, args.plot)
        return
    try:
        plan = plan_from(args.steps, args.checkpoints, args.episodes)
        changes = parse_changes(args.changes)
        cases = [Case(name, n) for name in args.envs for n in args.agents]
        for case in cases:
            case.task.factory().close()  # an agent count the env refuses stops here, before any training
    except ValueError as exc:
        p.error(str(exc).splitlines()[0])
    import torch

    runs = args.runs if args.runs is not None else args.out.parent / "runs"
    for case, method, seed in _schedule(cases, args.methods, args.seeds):
        label = run_label(method, changes)
        if wanted(case, label, seed, plan) <= generalization.done_runs(args.out, key=row_key):
            continue
        torch.set_num_threads(1)  # the peers' threads: marljoint's own rule when it collects in-process
        tick = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # BenchMARL's progress bar
            rows = run_one(case, method, seed, plan, args.out, runs, changes)
        print(f"{case.name} N={case.agents} {label} seed {seed}: "
              + ", ".join(f"{r['checkpoint']:,}: {r['return_mean']:.3g}" for r in rows)
              + f" ({time.perf_counter() - tick:.0f} s)", flush=True)


def _schedule(cases: list[Case], methods: Sequence[str], seeds: Sequence[int]) -> Iterator[tuple[Case, str, int]]:
    """Every (case, method, seed) to run, the random policy once per case (first seed)."""
    for case in cases:
        for method in methods:
            for seed in seeds if method != "random" else seeds[:1]:
                yield case, method, seed


if __name__ == "__main__":
    main()
