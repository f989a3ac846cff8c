"""PSRO's steps as tasks of the task engine (:attr:`PsroConfig.task_split` > 0): the best responses trained side by
side, and the missing meta-game entries simulated in chunks, each on a worker of its own."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from marljoint.best_response.oracles import BestResponses
from marljoint.best_response.population import FrozenPolicy
from marljoint.collect.config import CollectionConfig
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.ppo.config import JointTrainerConfig

__all__ = ["PsroTasks", "derived_seed"]


def derived_seed(seed: int, *path: int) -> int:
    """The seed of one purpose of a run: derived from the run's ``seed`` and a ``path`` of integers (iteration,
    purpose, seat or chunk), so that every random stream is reproducible and independent of the others."""
    return int(np.random.SeedSequence([int(seed) % 2**63, *path]).generate_state(1)[0])


class PsroTasks:
    """The task-engine steps of :class:`~marljoint.best_response.PSRO`, which sets the attributes below."""

    config: Any
    trainer_config: JointTrainerConfig
    env: PettingZooJointEnv
    populations: list[list[FrozenPolicy]]
    strategies: list[np.ndarray]
    iteration: int
    policy_kwargs: dict[str, Any]

    def _engine(self) -> Any:
        from marljoint.distributed.tasks import TaskEngine

        if getattr(self, "_task_engine", None) is None:
            self._task_engine = TaskEngine(self.config.engine)
        return self._task_engine

    def _best_responses_as_tasks(self, learners: Sequence[int]) -> BestResponses:
        from marljoint.best_response.tasks import train_best_response

        steps = max(1, math.ceil(self.config.br_steps / len(learners)))
        trainer_config = self.trainer_config.replace(collection=CollectionConfig())
        calls = [
            (
                self.env.env_fn,
                trainer_config,
                steps,
                self.populations,
                self.strategies,
                seat,
                derived_seed(self.config.seed, self.iteration + 1, 1, seat),
                self.policy_kwargs,
                self.config.warm_start,
                self.config.warm_start_policy_scale,
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

    def _simulate_as_tasks(self, missing: np.ndarray) -> np.ndarray:
        from marljoint.best_response.tasks import chunk_envs, simulate_chunk, split_profiles

        chunks = split_profiles(missing, self.config.task_split)
        num_envs = chunk_envs(self.config.eval_num_envs, len(chunks))
        calls = [
            (
                self.env.env_fn,
                num_envs,
                self.populations,
                chunk,
                self.config.episodes_per_entry,
                derived_seed(self.config.seed, self.iteration, 2, k),
            )
            for k, chunk in enumerate(chunks)
        ]
        return np.concatenate([means for means, _ in self._engine().map(simulate_chunk, calls)])
