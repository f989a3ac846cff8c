"""Where the work of PSRO's steps runs, chosen once when a run is set up (:func:`psro_steps`).

In this process (:class:`InProcessWork`): the oracle answers and the missing meta-game entries are simulated on
one evaluation env. Split into tasks of the task engine (:class:`TaskWork`, :attr:`PsroConfig.task_split` > 0):
the best responses trained side by side, one task per seat (for an oracle that declares it can,
:attr:`Oracle.trains_as_tasks <marljoint.best_response.oracles.Oracle.trains_as_tasks>`), and the missing entries
simulated in chunks, each on a worker of its own. With a known game and exact evaluation the entries are computed
from the policies' tables instead, wherever the rest runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from marljoint.best_response.games import KnownGame
from marljoint.best_response.opponents import simulate_profiles
from marljoint.best_response.oracles import BestResponses, Oracle
from marljoint.best_response.population import FrozenPolicy
from marljoint.collect.config import CollectionConfig
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.ppo.config import JointTrainerConfig

__all__ = ["InProcessWork", "PsroRun", "PsroSteps", "TaskWork", "derived_seed", "psro_steps"]


def derived_seed(seed: int, *path: int) -> int:
    """The seed of one purpose of a run: derived from the run's ``seed`` and a ``path`` of integers (iteration,
    purpose, seat or chunk), so that every random stream is reproducible and independent of the others."""
    return int(np.random.SeedSequence([int(seed) % 2**63, *path]).generate_state(1)[0])


class PsroRun(Protocol):
    """What the steps' work reads of a :class:`~marljoint.best_response.PSRO` run, at the time it runs."""

    config: Any
    trainer_config: JointTrainerConfig
    env: PettingZooJointEnv
    oracle: Oracle
    game: KnownGame | None
    evaluation: str
    populations: list[list[FrozenPolicy]]
    strategies: list[np.ndarray]
    iteration: int
    policy_kwargs: dict[str, Any]
    env_fn: Any


@dataclass(frozen=True)
class PsroSteps:
    """The work of PSRO's steps, as chosen for a run by :func:`psro_steps`.

    Attributes:
        best_responses: ``(learner seats, seed) -> BestResponses``: step 1's new policies.
        meta_game_entries: missing profiles ``[K, P]`` -> ``(values [K, P], episodes simulated)``: step 2's
            estimates of the meta-game entries not known yet.
    """

    best_responses: Callable[[Sequence[int], int], BestResponses]
    meta_game_entries: Callable[[np.ndarray], tuple[np.ndarray, int]]


def psro_steps(run: PsroRun, tables: Sequence[Sequence[np.ndarray]]) -> PsroSteps:
    """The work of ``run``'s steps: in this process, or as tasks with ``run.config.task_split`` > 0 (the best
    responses only with an oracle that :attr:`~marljoint.best_response.oracles.Oracle.trains_as_tasks`); the
    meta-game entries from ``tables`` with exact evaluation.

    Args:
        run: the PSRO run, read when the work runs.
        tables: per seat, its members' tables (a known game's), which the run keeps up to date.
    """
    local = InProcessWork(run)
    work = local if run.config.task_split == 0 else TaskWork(run)
    best_responses = work.best_responses if run.oracle.trains_as_tasks else local.best_responses
    if run.game is not None and run.evaluation == "exact":
        game = run.game
        return PsroSteps(best_responses, lambda missing: (game.profile_values(tables, missing), 0))
    episodes = run.config.episodes_per_entry
    return PsroSteps(best_responses, lambda missing: (work.simulate(missing), len(missing) * episodes))


class InProcessWork:
    """The steps' work in this process: the run's oracle, and simulation on one evaluation env of
    :attr:`PsroConfig.eval_num_envs <marljoint.best_response.PsroConfig.eval_num_envs>` copies (built when first
    needed)."""

    def __init__(self, run: PsroRun) -> None:
        self.run = run
        self._eval_env: PettingZooJointEnv | None = None

    def best_responses(self, learners: Sequence[int], seed: int) -> BestResponses:
        """The oracle's best responses of the ``learners`` to the current meta-strategies."""
        return self.run.oracle(self.run.populations, self.run.strategies, learners, seed)

    def simulate(self, missing: np.ndarray) -> np.ndarray:
        """Mean returns ``[K, P]`` of the ``missing`` profiles ``[K, P]``."""
        run = self.run
        seed = derived_seed(run.config.seed, run.iteration, 2)
        values, _ = simulate_profiles(
            self._evaluation_env(), run.populations, missing, run.config.episodes_per_entry, seed
        )
        return values

    def _evaluation_env(self) -> PettingZooJointEnv:
        if self._eval_env is None:
            config = self.run.config
            self._eval_env = PettingZooJointEnv(
                self.run.env_fn, num_envs=config.eval_num_envs, seed=derived_seed(config.seed, 0, 4)
            )
        return self._eval_env


class TaskWork:
    """The steps' work as tasks of the task engine (:attr:`PsroConfig.engine`, started when first needed)."""

    def __init__(self, run: PsroRun) -> None:
        self.run = run
        self._task_engine: Any = None

    def _engine(self) -> Any:
        from marljoint.distributed.tasks import TaskEngine

        if self._task_engine is None:
            self._task_engine = TaskEngine(self.run.config.engine)
        return self._task_engine

    def best_responses(self, learners: Sequence[int], seed: int) -> BestResponses:
        """One PPO training task per learner seat, each with its own seed derived from the run's (``seed``, the
        in-process oracle's, is not used)."""
        from marljoint.best_response.tasks import train_best_response

        run, config = self.run, self.run.config
        steps = max(1, math.ceil(config.br_steps / len(learners)))
        trainer_config = run.trainer_config.replace(collection=CollectionConfig())
        calls = [
            (
                run.env.env_fn,
                trainer_config,
                steps,
                run.populations,
                run.strategies,
                seat,
                derived_seed(config.seed, run.iteration + 1, 1, seat),
                run.policy_kwargs,
                config.warm_start,
                config.warm_start_policy_scale,
            )
            for seat in learners
        ]
        tick = time.perf_counter()
        results = self._engine().map(train_best_response, calls)
        policies = {seat: policy for seat, (policy, _) in zip(learners, results)}
        metrics: dict[str, float] = {}
        for _, task_metrics in results:
            for key, value in task_metrics.items():
                if key in ("br_env_steps", "br_warm_started"):
                    metrics[key] = metrics.get(key, 0.0) + value
                elif key != "br_seconds":
                    metrics[key] = value
        metrics["br_seconds"] = time.perf_counter() - tick
        return BestResponses(policies, metrics)

    def simulate(self, missing: np.ndarray) -> np.ndarray:
        """Mean returns ``[K, P]`` of the ``missing`` profiles ``[K, P]``, in :attr:`PsroConfig.task_split`
        chunks."""
        from marljoint.best_response.tasks import chunk_envs, simulate_chunk, split_profiles

        run, config = self.run, self.run.config
        chunks = split_profiles(missing, config.task_split)
        num_envs = chunk_envs(config.eval_num_envs, len(chunks))
        calls = [
            (
                run.env.env_fn,
                num_envs,
                run.populations,
                chunk,
                config.episodes_per_entry,
                derived_seed(config.seed, run.iteration, 2, k),
            )
            for k, chunk in enumerate(chunks)
        ]
        return np.concatenate([means for means, _ in self._engine().map(simulate_chunk, calls)])
