"""Two data-parallel ranks against one process: the same rollout bit for bit, the same update to float rounding
(feed-forward MAPPO and IPPO, recurrent, value normalisation, the redundancy penalty, uniform_mix, the decoupled
update of policy lag 1, MMD self-play), parameters bitwise equal across ranks after every update."""

import pytest
import torch
from rank_harness import run_ranks

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.ppo.metrics import PER_AGENT_STATS

BASE = {"num_envs": 4, "rollout_steps": 8, "minibatch_size": 16, "n_epochs": 2, "seed": 3, "torch_threads": 1}


def spread():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, max_cycles=6)


def _env_fn(name):
    from marljoint_envs import kuhn_poker_v0, mock_v0, variable_agents_v0

    envs = {"spread": spread, "mock": mock_v0.parallel_env, "kuhn": kuhn_poker_v0.env}
    return {**envs, "variable": variable_agents_v0.parallel_env}[name]


# name -> (env, trainer settings, extras): aux = the redundancy penalty, lag = the decoupled update of policy lag 1
# (the second update on a rollout one update old), mmd = MMD self-play's regulariser.
CASES = {
    "mappo": ("spread", {"centralized_critic": True}, {}),
    "mappo_critic_per_frame": (
        "spread",
        {"centralized_critic": True, "critic_per_frame": True, "normalize_observations": True},
        {},
    ),
    "ippo_no_value_norm": ("spread", {"value_normalization": False, "normalize_observations": True}, {}),
    "recurrent": ("mock", {"recurrent": "gru", "rollout_steps": 12, "minibatch_size": 12, "bptt_length": 4}, {}),
    "recurrent_uniform_mix": (
        "mock",
        {"recurrent": "gru", "rollout_steps": 12, "minibatch_size": 12, "bptt_length": 4, "uniform_mix": 0.2},
        {},
    ),
    # One chunk per minibatch: rank 1 has no share of it and takes part with gradients of zero.
    "recurrent_fewer_chunks_than_ranks": (
        "mock",
        {"recurrent": "lstm", "rollout_steps": 8, "minibatch_size": 4, "bptt_length": 4, "n_epochs": 1},
        {"aux": True},
    ),
    "redundancy": ("spread", {"share_parameters": False}, {"aux": True}),
    # Agents that leave mid-episode: masked rows, counted over the whole minibatch.
    "agents_leaving": ("variable", {"centralized_critic": True}, {"aux": True}),
    "uniform_mix_target_kl": ("spread", {"uniform_mix": 0.2, "target_kl": 1e-5, "n_epochs": 4}, {}),
    "policy_lag_1": ("spread", {}, {"lag": True}),
    "mmd_turn_based": ("kuhn", {"rollout_steps": 5, "minibatch_size": 8}, {"mmd": True}),
}


def _trainer(name, env, ranks=None):
    env_name, settings, extras = CASES[name]
    config = JointTrainerConfig(**{**BASE, **settings})
    regularizer = None
    if extras.get("mmd"):
        from marljoint.best_response.mmd import MmdConfig, mmd_regularizer

        mmd = MmdConfig(alpha_units="advantage_std", magnet="ema", opponent_reach=True)
        regularizer = mmd_regularizer(mmd)
    return JointMultiAgentTrainer.from_env(env, config, regularizer=regularizer, ranks=ranks)


def _weights(trainer):
    return {f"{k}.{n}": v.clone() for k, u in enumerate(trainer.policies) for n, v in u.state_dict().items()}


def _relative_gap(ranked, one):
    """The largest ``|a - b|`` over every parameter and buffer of a network, relative to the largest magnitude among
    the network's parameters (rounding, which Adam amplifies in gradients near 0 into absolute errors of about
    1e-9, stays far below 1e-6 of it; a term counted wrongly moves parameters by about the learning rate)."""
    worst = 0.0
    for k, policy in enumerate(one.policies):
        scale = max(float(p.detach().abs().max()) for p in policy.parameters())
        a, b = _weights(ranked), _weights(one)
        for key in (key for key in b if key.startswith(f"{k}.")):
            gap = float((a[key].double() - b[key].double()).abs().max()) if b[key].numel() else 0.0
            worst = max(worst, gap / scale)
    return worst


def _one_case(group, name, rollouts=3, updates=2):
    """``rollouts`` rollouts of both trainers compared bit for bit (no update between them: the moves a turn-based
    rollout carries into the next included), then ``updates`` updates of both on the same rollouts (the last one,
    then the one process's next ones), compared after each."""
    from rollout_checks import assert_same_rollout

    env_name, _, extras = CASES[name]
    env_fn = _env_fn(env_name)
    start, stop = group.slice_of(BASE["num_envs"])
    one = _trainer(name, PettingZooJointEnv(env_fn, num_envs=BASE["num_envs"], seed=BASE["seed"]))
    ranked = _trainer(
        name, PettingZooJointEnv(env_fn, num_envs=stop - start, seed=BASE["seed"], first_copy=start), group
    )
    for _ in range(rollouts):
        rollout, rollout_ranked = one.collect_rollout(), ranked.collect_rollout()
        assert_same_rollout(rollout_ranked, rollout)
    aux = None
    if extras.get("aux"):
        from marljoint.redundancy import RedundancyPenalty

        aux = RedundancyPenalty(kind="xcorr", coef=0.5)
    gaps, stats, weights = [], [], []
    for update in range(updates):
        if update and extras.get("lag"):  # policy lag 1: the second update trains on a rollout one update old
            one.learner.decoupled = ranked.learner.decoupled = True
        elif update:
            rollout = one.collect_rollout()  # every rank updates on the whole rollout
        s_one = one.update(rollout, aux_fn=aux)
        s_ranked = ranked.update(rollout, aux_fn=aux)
        gaps.append(_relative_gap(ranked, one))
        stats.append((s_one, s_ranked))
        weights.append(_weights(ranked))
    metrics = [t.regularizer.metrics() if t.regularizer is not None else {} for t in (one, ranked)]
    return {"gaps": gaps, "stats": stats, "weights": weights, "regularizer_metrics": metrics}


def _all_cases(group):
    outcomes = {name: _one_case(group, name) for name in CASES}
    outcomes["perturbed"] = _perturbed(group)
    outcomes["mismatch"] = _slices_mismatch(group)
    outcomes["diverged"] = _diverging(group)
    return outcomes


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every case run once in two ranks (one spawn for all of them: starting the processes takes most of the time)."""
    return run_ranks(_all_cases, tmp_path_factory.mktemp("ranks"))


@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks_update_like_one_process_and_stay_bitwise_equal(outcomes, name):
    first, second = outcomes[0][name], outcomes[1][name]
    assert max(first["gaps"]) <= 1e-6, first["gaps"]
    for w0, w1 in zip(first["weights"], second["weights"]):  # after every update
        assert w0.keys() == w1.keys()
        assert all(torch.equal(w0[k], w1[k]) for k in w0)
    for s_one, s_ranked in first["stats"]:
        assert s_ranked.num_mb_steps == s_one.num_mb_steps
        if name == "uniform_mix_target_kl":  # the early stop was taken, at the same minibatch on every rank
            assert s_one.num_mb_steps < 4 * BASE["num_envs"] * BASE["rollout_steps"] // BASE["minibatch_size"]
        for field in PER_AGENT_STATS:
            assert getattr(s_ranked, field) == pytest.approx(getattr(s_one, field), rel=1e-5, abs=1e-6), field
        assert s_ranked.total_loss == pytest.approx(s_one.total_loss, rel=1e-5, abs=1e-6)
        assert s_ranked.aux_loss == pytest.approx(s_one.aux_loss, rel=1e-5, abs=1e-6)
        assert s_ranked.grad_norm == pytest.approx(s_one.grad_norm, rel=1e-5)
    one_metrics, ranked_metrics = first["regularizer_metrics"]  # mmd/kl and the others: the whole minibatch's
    assert ranked_metrics == pytest.approx(one_metrics, rel=1e-5, abs=1e-7)


def _perturbed(group):
    from marljoint.distributed.ranks import RanksDiverged

    start, stop = group.slice_of(BASE["num_envs"])
    env = PettingZooJointEnv(spread, num_envs=stop - start, seed=3, first_copy=start)
    trainer = _trainer("mappo", env, group)
    rollout = trainer.collect_rollout()
    if group.rank == 1:
        with torch.no_grad():
            next(trainer.policies[0].parameters()).view(-1)[0] += 1e-3
    try:
        trainer.update(rollout)
    except RanksDiverged as exc:
        return str(exc)
    return None


def test_a_rank_whose_parameter_was_changed_stops_the_run_with_ranks_diverged(outcomes):
    messages = [got["perturbed"] for got in outcomes]
    assert messages[0] == messages[1] and messages[0] is not None
    assert "\n" not in messages[0]
    assert messages[0].startswith("ranks [1] hold other parameters than rank 0 at iteration 1 (differing: ")


def _diverging(group):
    from marljoint import DivergenceError

    start, stop = group.slice_of(BASE["num_envs"])
    trainer = _trainer("mappo", PettingZooJointEnv(spread, num_envs=stop - start, seed=3, first_copy=start), group)
    rollout = trainer.collect_rollout()
    rollout.rewards[:, 3] = float("nan")  # env copy 3 only: its rows may fall to one rank's share of a minibatch
    try:
        trainer.update(rollout)
    except DivergenceError as exc:
        return str(exc)
    return None


def test_a_non_finite_loss_on_some_rows_stops_every_rank_alike(outcomes):
    messages = [got["diverged"] for got in outcomes]
    assert messages[0] is not None and messages[0] == messages[1]
    assert "iteration 1" in messages[0]


def _slices_mismatch(group):
    messages = []
    start, stop = group.slice_of(BASE["num_envs"])
    for env, settings in (
        (PettingZooJointEnv(spread, num_envs=4, seed=3), {}),
        (
            PettingZooJointEnv(spread, num_envs=stop - start, seed=3, first_copy=start),
            {"collection": {"backend": "subprocess", "workers": 2}},
        ),
    ):
        try:
            JointMultiAgentTrainer.from_env(env, JointTrainerConfig(**{**BASE, **settings}), ranks=group)
        except ValueError as exc:
            messages.append(str(exc))
    return messages


def test_a_rank_given_every_copy_or_env_workers_is_refused(outcomes):
    every_copy, workers = outcomes[0]["mismatch"]
    assert every_copy.startswith("rank 0 of 2 steps env copies [0, 2) of num_envs=4, but its env holds copies [0, 4)")
    assert workers.startswith(
        "data-parallel ranks step their own env copies in-process; collection backend 'subprocess'"
    )
    assert "\n" not in every_copy + workers
