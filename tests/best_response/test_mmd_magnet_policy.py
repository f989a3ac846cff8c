"""The magnet of MMD self-play scored as a policy of its own: ``MmdRegularizer.magnet_policy``, the tracker's
``exploit/magnet_*`` columns and ``openspiel_magnet_policy.json``."""

from __future__ import annotations

import csv

import pytest
from _kuhn_tables import column, openspiel_exploitability

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import KuhnGame, MmdConfig, kuhn_exploitability, mmd_regularizer
from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.run.evaluate import load_run
from marljoint.run.train import RunSpec, train_run
from marljoint_envs import kuhn_poker_v0

TINY = {"num_envs": 4, "rollout_steps": 16, "n_epochs": 2, "hidden_sizes": [16], "minibatch_size": 32}


def _spec(magnet):
    values = {"env": "kuhn_poker_v0", "env_kwargs": {}, "total_steps": 4 * 64, "checkpoint_every": 1, **TINY}
    values.update(learning_rate=0.05, exploitability_every=2, self_play="mmd")
    return RunSpec.from_dict({**values, "mmd": {"magnet": magnet, "magnet_rate": 0.5}})


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("magnet") / "run"
    train_run(_spec("ema"), run_dir, progress=False)
    return run_dir, _rows(run_dir)


def _magnet_tables_by_hand(run_dir):
    """The newest checkpoint's magnet weights loaded into its run's networks, tabulated."""
    checkpoint = list_checkpoints(run_dir / "checkpoints")[-1]
    run = load_run(run_dir, checkpoint)
    try:
        run.trainer.joint_policy.load_weights(load_checkpoint(checkpoint)["trainer"]["regularizer"]["magnet"])
        return KuhnGame().tables([run.agent_policy(0), run.agent_policy(1)])
    finally:
        run.close()


def test_the_logged_magnet_is_the_checkpoints_ema_magnet_scored_exactly(ema_run):
    run_dir, rows = ema_run
    logged = column(rows, "exploit/magnet_exploitability")
    assert len(logged) == 2  # measured after iterations 2 and 4
    assert logged[-1] == pytest.approx(kuhn_exploitability(_magnet_tables_by_hand(run_dir)), abs=1e-9)
    assert column(rows, "exploit/magnet_nash_conv") == pytest.approx([2 * v for v in logged])
    assert logged[-1] != pytest.approx(column(rows, "exploit/exploitability")[-1], abs=1e-6)  # not the last iterate


def test_openspiel_reads_the_magnet_policy_with_the_logged_exploitability(ema_run):
    run_dir, rows = ema_run
    assert openspiel_exploitability(run_dir / "openspiel_magnet_policy.json") == pytest.approx(
        column(rows, "exploit/magnet_exploitability")[-1], abs=1e-9
    )


def test_a_uniform_magnet_has_no_magnet_column_nor_file(tmp_path):
    train_run(_spec("uniform"), tmp_path / "uniform", progress=False)
    rows = _rows(tmp_path / "uniform")
    assert column(rows, "exploit/exploitability") and not any("magnet" in name for name in rows[0])
    assert not (tmp_path / "uniform" / "openspiel_magnet_policy.json").exists()


def _kuhn_trainer(mmd):
    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=4, seed=0)
    config = JointTrainerConfig(num_envs=4, rollout_steps=8, minibatch_size=16, n_epochs=1, hidden_sizes=(8,))
    return JointMultiAgentTrainer.from_env(env, config, regularizer=mmd_regularizer(mmd))


def test_magnet_policy_is_a_frozen_copy_that_starts_as_the_initial_policy():
    trainer = _kuhn_trainer(MmdConfig(magnet="ema", magnet_rate=0.5, alpha=0.1))
    regularizer = trainer.regularizer
    game = KuhnGame()
    initial = game.tables([trainer.agent_policy(0), trainer.agent_policy(1)])
    frozen = [regularizer.magnet_policy(seat) for seat in range(2)]
    for _ in range(3):
        trainer.iterate()
    for seat in range(2):
        assert (game.table(frozen[seat], seat) == initial[seat]).all()  # later magnet steps leave the copy alone
    moved = game.tables([regularizer.magnet_policy(seat) for seat in range(2)])
    assert any((moved[seat] != initial[seat]).any() for seat in range(2))


def test_a_uniform_magnet_has_no_policy_to_hand_out():
    regularizer = _kuhn_trainer(MmdConfig(magnet="uniform")).regularizer
    with pytest.raises(ValueError, match="a uniform magnet has no network .*use magnet='ema' or 'moving'"):
        regularizer.magnet_policy(0)
