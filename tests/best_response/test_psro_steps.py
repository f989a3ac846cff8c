"""Where PSRO's step work runs is chosen once, at setup: in this process, or as tasks (task_split > 0), the best
responses as tasks only for an oracle that declares it can train as tasks."""

import numpy as np
import pytest

from marljoint import JointTrainerConfig
from marljoint.best_response import PSRO, KuhnGame, PsroConfig
from marljoint.best_response.oracles import ExactOracle, PPOOracle
from marljoint.best_response.psro_tasks import InProcessWork, TaskWork
from marljoint_envs import kuhn_poker_v0

SMALL_PPO = JointTrainerConfig(num_envs=4, rollout_steps=8, n_epochs=1, minibatch_size=32, hidden_sizes=(8,))


def _psro(**changes):
    settings = dict(iterations=1, trainer=SMALL_PPO, episodes_per_entry=2, eval_num_envs=4, engine="local", seed=1)
    return PSRO(kuhn_poker_v0.raw_env, PsroConfig(**{**settings, **changes}), game=KuhnGame())


def test_the_oracles_declare_whether_they_train_as_tasks():
    assert ExactOracle.trains_as_tasks is False
    assert PPOOracle.trains_as_tasks is True


@pytest.mark.parametrize(
    "changes,best_responses,simulates",
    [
        ({"oracle": "ppo", "evaluation": "simulation"}, InProcessWork, True),
        ({"oracle": "ppo", "evaluation": "simulation", "task_split": 2}, TaskWork, True),
        # the exact oracle answers in this process whatever the split; the entries are simulated as tasks
        ({"oracle": "exact", "evaluation": "simulation", "task_split": 2}, InProcessWork, True),
        ({"oracle": "exact", "evaluation": "exact", "task_split": 2}, InProcessWork, False),
    ],
)
def test_the_work_of_the_steps_is_chosen_once_at_setup(changes, best_responses, simulates):
    psro = _psro(**changes)
    assert isinstance(psro._steps.best_responses.__self__, best_responses)
    entries = psro.history[0]
    # The initial 1x1 meta-game: one entry, simulated with episodes_per_entry episodes, or computed exactly.
    assert entries["meta_game_entries"] == 1.0
    assert entries["eval_episodes"] == (2.0 if simulates else 0.0)
    assert np.isfinite(psro.meta_game.payoffs[0]).all()
