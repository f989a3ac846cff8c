"""The table of algorithms drives the run: which row a run trains, what its name implies, the command line's
choices and help, and the refusal of per-agent policies where a trainer acts with something else."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.cli import build_parser, main
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.policies import NoActingPolicy
from marljoint.run.algorithms import (
    ALGORITHMS,
    Algorithm,
    ExportRefused,
    acting_policy_of,
    agent_policies,
    algorithm_entry,
    run_entry,
    train_choices,
    with_algorithm_defaults,
)
from marljoint.run.errors import RunError
from marljoint.run.spec import RunSpec
from marljoint_envs import mock_v0


def _mock(num_envs=2):
    return PettingZooJointEnv(mock_v0.parallel_env, num_envs=num_envs, seed=0)


def test_a_run_trains_the_row_its_settings_select():
    assert run_entry(RunSpec()).name == ("mappo" if RunSpec().trainer.centralized_critic else "ippo")
    assert run_entry(RunSpec.from_dict({"algorithm": "ippo"})).name == "ippo"
    assert run_entry(RunSpec.from_dict({"centralized_critic": True})).name == "mappo"
    assert run_entry(RunSpec.from_dict({"self_play": "mmd", "algorithm": "ippo"})).name == "mmd"
    assert run_entry(RunSpec.from_dict({"algorithm": "vdn", "offpolicy": {"learning_starts": 8}})).name == "vdn"


def test_a_run_that_selects_no_row_is_refused():
    spec = SimpleNamespace(self_play=None, algorithm=None, trainer=SimpleNamespace(centralized_critic="maybe"))
    with pytest.raises(RunError, match=r"the run names no algorithm; set algorithm to one of \['mappo', 'ippo'"):
        run_entry(spec)


def test_an_unknown_name_is_refused_listing_the_table():
    with pytest.raises(RunError, match=r"algorithm must be one of \['mappo', 'ippo', 'mmd', .*got 'dqn'"):
        algorithm_entry("dqn")
    with pytest.raises(RunError, match=r"algorithm must be one of \['mappo', 'ippo', 'vdn'.*got 'mmd'"):
        RunSpec.from_dict({"algorithm": "mmd"})  # selected by --self-play mmd, not by name


def test_a_name_implies_its_settings_unless_given():
    assert with_algorithm_defaults({"algorithm": "mappo"})["centralized_critic"] is True
    assert with_algorithm_defaults({"algorithm": "ippo", "centralized_critic": True})["centralized_critic"] is True
    assert with_algorithm_defaults({"algorithm": "vdn"}) == {"algorithm": "vdn"}


def test_the_command_line_offers_the_rows_that_train_selects_by_name_with_their_summaries():
    assert train_choices() == [n for n, row in ALGORITHMS.items() if row.command[:2] == ("train", "--algorithm")]
    train = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    option = next(action for action in train._actions if "--algorithm" in action.option_strings)
    assert list(option.choices) == train_choices()
    for row in ALGORITHMS.values():
        if row.command[0] == "train":
            assert row.summary in option.help, row.name


def test_every_trainer_is_an_algorithm():
    ppo = JointMultiAgentTrainer.from_env(_mock(), JointTrainerConfig(num_envs=2, rollout_steps=4, minibatch_size=8))
    value = OffPolicyTrainer(_mock(), OffPolicyConfig(num_envs=2, rollout_steps=4, learning_starts=8))
    assert isinstance(ppo, Algorithm) and isinstance(value, Algorithm)
    assert acting_policy_of(ppo) is ppo.joint_policy and ppo.regularizer is None
    assert len(agent_policies(ppo, ["agent_0", 1])) == 2


def test_a_trainer_that_acts_with_its_q_networks_refuses_its_acting_policy_with_the_reason():
    value = OffPolicyTrainer(_mock(), OffPolicyConfig(num_envs=2, rollout_steps=4, learning_starts=8))
    with pytest.raises(NoActingPolicy, match=r"^a vdn run acts greedily on its Q networks"):
        value.acting_policy()
    with pytest.raises(ExportRefused, match=r"export supports mappo and ippo runs; use marljoint eval, or load_run"):
        acting_policy_of(value)
    with pytest.raises(ExportRefused, match=r"a vdn run acts greedily"):
        agent_policies(value, [0])


def test_playing_the_seats_of_an_offpolicy_run_against_a_reference_is_refused_in_one_line(tmp_path, capsys):
    args = ["train", "--env", "mock_v0", "--env-kwargs", '{"max_cycles": 5}', "--algorithm", "vdn", "--num-envs", "2"]
    args += ["--rollout-steps", "4"]
    args += ["--total-steps", "8", "--set", "offpolicy={learning_starts=8, batch_size=8}", "--set", "hidden_sizes=[8]"]
    assert main([*args, "--quiet", "--out", str(tmp_path / "vdn")]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_status:
        main(["eval", str(tmp_path / "vdn"), "--episodes", "2", "--against", "random"])
    err = capsys.readouterr().err
    assert exit_status.value.code == 2 and err.count("\n") == 1
    assert "a vdn run acts greedily on its Q networks" in err


def test_what_the_run_does_for_each_family_is_read_from_its_row():
    import marljoint
    from marljoint.run.algorithms import family_of
    from marljoint.run.collection import with_auto_workers

    assert marljoint.ALGORITHMS is ALGORITHMS and marljoint.Algorithm is Algorithm
    replaying = {name for name, row in ALGORITHMS.items() if row.replays}
    assert replaying == {"vdn", "qmix", "masac", "maddpg"}
    assert {name for name, row in ALGORITHMS.items() if row.scores_seats} == {"mappo", "ippo", "mmd"}
    assert {name for name, row in ALGORITHMS.items() if row.abandons_iterations} == {"psro", "nfsp"}
    assert family_of(None) == "ppo" and family_of("qmix") == "value"
    with pytest.raises(RunError, match="algorithm must be one of .*got 'sarsa'"):
        family_of("sarsa")
    # Replaying runs act with the newest weights at every step: their env workers get no policy lag.
    for name, lag in (("vdn", 0), ("ippo", 1)):
        spec = RunSpec.from_dict({"algorithm": name, "num_envs": 4})
        assert with_auto_workers(spec, cores=4).trainer.collection.policy_lag == lag
