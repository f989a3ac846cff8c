"""Training through the run's build path on two ranks: four iterations end where one process ends (to float
rounding), and a run saved on two ranks resumes in one process, and one saved in one process on two ranks."""

import copy

import pytest
from rank_harness import run_ranks

from marljoint import JointTrainerConfig
from marljoint.run.build import build_trainer, make_env
from marljoint.run.errors import RunError
from marljoint.run.spec import RunSpec

CONFIG = {"num_envs": 4, "rollout_steps": 16, "minibatch_size": 32, "n_epochs": 2, "seed": 5, "torch_threads": 1}


def _spec(**changes):
    trainer = JointTrainerConfig(**{**CONFIG, **changes})
    return RunSpec(env="mpe2.simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 10}, trainer=trainer)


def _gap(a, b):
    """The largest parameter difference relative to the largest parameter magnitude of its network."""
    worst = 0.0
    for p, q in zip(a.policies, b.policies):
        scale = max(float(t.detach().abs().max()) for t in q.parameters())
        for (_, x), (_, y) in zip(p.state_dict().items(), q.state_dict().items()):
            worst = max(worst, float((x.double() - y.double()).abs().max()) / scale)
    return worst


def _train(group):
    spec = _spec()
    one = build_trainer(spec, make_env(spec))
    ranked = build_trainer(spec, make_env(spec, ranks=group), ranks=group)
    halfway = {}
    for iteration in range(4):
        one.iterate()
        ranked.iterate()
        if iteration == 1:
            halfway = copy.deepcopy(  # a checkpoint: the state dicts hold the live tensors
                {"ranked": (ranked.state_dict(), ranked.env_state()), "one": (one.state_dict(), one.env_state())}
            )
    # Resumed with the other number of processes: the ranks' state in one process, one process's on the ranks.
    resumed_one = build_trainer(spec, make_env(spec))
    resumed_one.load_state_dict(halfway["ranked"][0])
    resumed_one.load_env_state(halfway["ranked"][1])
    resumed_ranked = build_trainer(spec, make_env(spec, ranks=group), ranks=group)
    resumed_ranked.load_state_dict(halfway["one"][0])
    resumed_ranked.load_env_state(halfway["one"][1])
    for _ in range(2):
        resumed_one.iterate()
        resumed_ranked.iterate()
    return {
        "gap": _gap(ranked, one),
        "resumed_one_gap": _gap(resumed_one, one),
        "resumed_ranked_gap": _gap(resumed_ranked, one),
        "env_steps": (one.env_steps, ranked.env_steps, resumed_ranked.env_steps),
        "refusals": _refusals(group),
        "recurrent_resume": _recurrent_resume(group),
    }


def _recurrent_resume(group):
    """A recurrent run's env copies, noise generators and hidden states saved on two ranks continue in one process
    with the very rollout the ranks collect next, and the other way round."""
    from rollout_checks import assert_same_rollout

    spec = RunSpec(env="mock_v0", env_kwargs={}, trainer=JointTrainerConfig(**{**CONFIG, "recurrent": "gru"}))
    ranked = build_trainer(spec, make_env(spec, ranks=group), ranks=group)
    ranked.iterate()
    state, env_state = copy.deepcopy((ranked.state_dict(), ranked.env_state()))
    one = build_trainer(spec, make_env(spec))
    one.load_state_dict(state)
    one.load_env_state(env_state)
    assert env_state is not None and "memory" in env_state["workers"][0]
    assert_same_rollout(ranked.collect_rollout(), one.collect_rollout())
    # And back: the one process's state restored on two ranks.
    state, env_state = copy.deepcopy((one.state_dict(), one.env_state()))
    again = build_trainer(spec, make_env(spec, ranks=group), ranks=group)
    again.load_state_dict(state)
    again.load_env_state(env_state)
    assert_same_rollout(again.collect_rollout(), one.collect_rollout())
    return True


def _refusals(group):
    messages = []
    for spec in (_spec(collection={"backend": "subprocess", "workers": 2}), _spec(num_envs=1, minibatch_size=16)):
        try:
            make_env(spec, ranks=group)
        except RunError as exc:
            messages.append(str(exc))
    psro = RunSpec.from_dict({"algorithm": "psro", "num_envs": 4})
    try:
        build_trainer(psro, None, ranks=group)
    except RunError as exc:
        messages.append(str(exc))
    return messages


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return run_ranks(_train, tmp_path_factory.mktemp("ranks"))


def test_four_iterations_on_two_ranks_end_where_one_process_ends(trained):
    assert trained[0]["gap"] <= 1e-4
    assert trained[0]["env_steps"] == (4 * 16 * 4,) * 3


def test_a_run_resumes_with_another_number_of_ranks(trained):
    assert trained[0]["resumed_one_gap"] <= 1e-4
    assert trained[0]["resumed_ranked_gap"] <= 1e-4
    assert trained[0]["recurrent_resume"] and trained[1]["recurrent_resume"]


def test_what_ranks_cannot_combine_with_is_refused_in_one_line(trained):
    workers, few, psro = trained[0]["refusals"]
    assert workers.startswith("2 ranks each step their own env copies in-process, so the collection backend")
    assert few.startswith("num_envs = 1 env copies cannot be split over 2 ranks")
    assert psro.startswith("algorithm 'psro' does not train on data-parallel ranks: its best responses are PPO runs")
    assert all("\n" not in m for m in (workers, few, psro))
