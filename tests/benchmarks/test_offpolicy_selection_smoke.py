"""benchmarks/offpolicy_learning.py ``--select-every``: the selection scores each trained method's greedy policy at
the marks, reports the best one as ``METHOD@best`` and leaves the training bits as they are without it."""

import math

import pytest

from tests.benchmarks._benchmark_module import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("offpolicy_learning") as module:
        yield module


@pytest.mark.slow  # a whole benchmark command end to end
@pytest.mark.parametrize("method, steps, every", [("ppo", 8192, 3000), ("vdn", 1600, 800)])
def test_selection_keeps_the_training_bits_and_adds_a_best_row(bench, method, steps, every):
    plain = bench.run_one("bucket_brigade", method, 0, steps, 2, {}, (0, 0))
    selected = bench.run_one("bucket_brigade", method, 0, steps, 2, {}, (every, 2))
    assert [row["method"] for row in plain] == [method]
    assert [row["method"] for row in selected] == [method, f"{method}@best"]
    # Scoring the greedy policy along the run restores the trainer's generator: the last policy is the same.
    assert selected[0]["return_mean"] == plain[0]["return_mean"]
    assert selected[0]["return_std"] == plain[0]["return_std"]
    assert math.isfinite(selected[1]["return_mean"])


def test_ppo_selection_scores_at_the_first_iteration_past_each_mark(bench, monkeypatch):
    task = bench.TASKS["bucket_brigade"]
    selection = bench.Selection(every=3000, episodes=1)
    scores = iter([-5.0, 7.0, 1.0])
    monkeypatch.setattr(bench.Selection, "consider", _fake_consider(scores))
    bench.suite.train_marljoint(task, 0, 4 * 4096, callback=bench.ppo_selection(selection, task, 4 * 4096))
    # Iterations end at 4096, 8192, 12288 and 16384 env steps; marks at 3000, 6000, 9000, 12000, 15000 and the end
    # (16384): 4096 passes 3000, 8192 passes 6000, 12288 passes 9000 and 12000, 16384 passes 15000 and the end.
    assert [steps for steps, _ in selection.curve] == [4096, 8192, 12288, 16384]
    assert selection.env_steps == 8192 and selection.score == 7.0
    assert bench.ppo_selection(None, task, 100) is None


def _fake_consider(scores):
    def consider(self, trainer, weights, task):
        score = next(scores, -100.0)
        self.curve.append((trainer.env_steps, score))
        if score > self.score:
            self.env_steps, self.score, self.state = trainer.env_steps, score, weights()

    return consider
