"""Recurrent policies in the trainer: hidden states in the rollout, truncated BPTT over chunks, learning a task that
needs memory, determinism and an exact resume, and the combinations refused for now."""

import functools

import pytest
import torch

from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.redundancy import RedundancyPenalty
from marljoint_envs import identity_v0, kuhn_poker_v0, memory_v0, mock_v0, variable_agents_v0

MEMORY = functools.partial(memory_v0.parallel_env, num_agents=2, num_cues=4, delay=3)


def make(env_fn=MEMORY, **cfg):
    settings = {
        "num_envs": 16,
        "rollout_steps": 32,
        "minibatch_size": 256,
        "n_epochs": 4,
        "learning_rate": 3e-3,
        "rnn_hidden_size": 32,
        "bptt_length": 8,
        "hidden_sizes": (32,),
        "seed": 0,
        **cfg,
    }
    config = JointTrainerConfig(**settings)
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=0), config)


def _mean_return(trainer, iterations):
    returns = []
    for _ in range(iterations):
        rollout = trainer.collect_rollout()
        trainer.update(rollout)
        returns.extend(rollout.episode_returns.mean(1).tolist())
    return sum(returns[-100:]) / len(returns[-100:])


@pytest.mark.slow  # a learning run of many updates: unit tests cover its mechanics in the default run
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_recurrent_policy_solves_the_memory_env_where_the_mlp_stays_at_chance(kind):
    assert _mean_return(make(recurrent=kind), 50) >= 0.95 * memory_v0.optimal_return()
    assert _mean_return(make(recurrent=None), 50) <= memory_v0.chance_return(num_cues=4) + 0.15


def test_the_rollout_stores_the_state_each_agent_acted_from_and_its_resets():
    trainer = make(recurrent="gru", rollout_steps=10)
    rollout = trainer.collect_rollout()
    starts = rollout.starts
    # memory_v0 episodes last delay + 1 = 4 steps: a new episode, and a reset, every 4th step.
    assert starts[:, :, 0].tolist() == [[t % 4 == 0] * 16 for t in range(10)]
    (states,) = rollout.states
    assert states.shape == (10, 16, 2, trainer.policies[0].state_size)
    assert not states[starts[:, :, 0]].any() and states[~starts[:, :, 0]].abs().sum() > 0
    # The stored state is what the network acted from: recomputing step 1 from it gives the stored values.
    policy = trainer.joint_policy
    outputs = policy.forward([rollout.obs[0][1]], rollout.alive[1], [states[1]])
    torch.testing.assert_close(policy.values(outputs), rollout.values[1], rtol=1e-5, atol=1e-5)
    # ... and the next step's state is the network's output from it.
    torch.testing.assert_close(policy.group_states.stepped(outputs)[0], states[2], rtol=1e-6, atol=1e-6)


def test_absent_agents_keep_their_state_and_a_returning_agent_starts_afresh():
    trainer = make(variable_agents_v0.parallel_env, recurrent="lstm", rollout_steps=24, num_envs=4)
    rollout = trainer.collect_rollout()
    (states,) = [s for s in rollout.states if s.shape[2] > 0][:1]
    group = trainer.spec.groups[0]
    alive = rollout.alive[:, :, list(group.agent_indices)]
    starts = rollout.starts[:, :, list(group.agent_indices)]
    appearances = absences = 0
    for t in range(1, 24):
        appeared = alive[t] & ~alive[t - 1]
        assert bool((starts[t] | ~appeared).all())  # who appears starts afresh
        kept = ~alive[t - 1] & ~starts[t]
        assert torch.equal(states[t][kept], states[t - 1][kept])  # who is absent keeps its state
        appearances += int(appeared.sum())
        absences += int(kept.sum())
    assert appearances > 0 and absences > 0  # the env has agents that leave and join


def test_same_seed_same_bits_and_an_exact_resume():
    def run(iterations, resume_at=None):
        trainer = make(recurrent="gru", seed=4)
        for k in range(iterations):
            if k == resume_at:
                saved = (trainer.state_dict(), trainer.env_state())
                trainer = make(recurrent="gru", seed=9)
                trainer.load_state_dict(saved[0])
                trainer.load_env_state(saved[1])
            trainer.update(trainer.collect_rollout())
        return [p.detach().clone() for p in trainer.policies[0].parameters()]

    straight = run(3)
    assert all(torch.equal(a, b) for a, b in zip(straight, run(3)))
    assert all(torch.equal(a, b) for a, b in zip(straight, run(3, resume_at=2)))


def test_a_chunk_length_that_does_not_divide_the_rollout_pads_its_last_chunk():
    trainer = make(recurrent="gru", rollout_steps=10, bptt_length=4, minibatch_size=8)
    stats = trainer.update(trainer.collect_rollout())
    # 16 copies x 3 chunks (4 + 4 + 2 steps) = 48 chunks, 2 per minibatch: 24 minibatches per epoch.
    assert stats.num_mb_steps == 4 * 24
    assert all(torch.isfinite(torch.tensor(stats.policy_loss)))


def _backend_run(collection, iterations=3, resume=None, env_fn=variable_agents_v0.parallel_env):
    """(rollout log-probs and states, parameters) after ``iterations`` with ``collection``; ``resume``: the
    collection of a second trainer that takes over from a checkpoint after 2 iterations."""

    def build(coll, seed):
        config = JointTrainerConfig(
            num_envs=4,
            rollout_steps=12,
            minibatch_size=24,
            n_epochs=2,
            recurrent="lstm",
            rnn_hidden_size=8,
            bptt_length=4,
            hidden_sizes=(16,),
            seed=seed,
            collection=coll,
        )
        return JointMultiAgentTrainer.from_env(coll.make_env(env_fn, config.num_envs, seed), config)

    trainer = build(collection, 2)
    try:
        for k in range(iterations):
            if resume is not None and k == 2:
                saved = (trainer.state_dict(), trainer.env_state())
                trainer.close()
                trainer = build(resume, 7)
                trainer.load_state_dict(saved[0])
                trainer.load_env_state(saved[1])
            rollout = trainer.collect_rollout()
            trainer.update(rollout)
        states = [x.clone() for x in rollout.states]
        return rollout.log_probs.clone(), states, [p.detach().clone() for p in trainer.policies[0].parameters()]
    finally:
        trainer.close()


def _same(a, b):
    assert torch.equal(a[0], b[0])
    assert all(torch.equal(x, y) for x, y in zip(a[1], b[1]))
    assert all(torch.equal(x, y) for x, y in zip(a[2], b[2]))


@pytest.mark.parametrize("backend", ["subprocess", "ray"])
def test_worker_collection_gives_the_bits_of_one_process_and_resumes_across_backends(backend):
    if backend == "ray":
        pytest.importorskip("ray")
    local = _backend_run(CollectionConfig())
    workers = CollectionConfig(backend, workers=2)
    _same(local, _backend_run(workers))
    _same(local, _backend_run(workers, resume=CollectionConfig()))  # saved in workers, resumed in-process
    _same(local, _backend_run(CollectionConfig(), resume=workers))  # and the other way round


def test_unsupported_combinations_and_bad_settings_are_refused():
    with pytest.raises(ValueError, match=r"rollout_steps \(16\).*got 17.*lower bptt_length or raise rollout_steps"):
        JointTrainerConfig(recurrent="gru", rollout_steps=16, bptt_length=17)
    with pytest.raises(ValueError, match=r"recurrent must be one of \['gru', 'lstm'\]"):
        JointTrainerConfig(recurrent="transformer")


def test_acting_carries_each_agents_state_through_an_episode():
    from marljoint.run.episodes import play_episodes

    trainer = make(recurrent="gru")
    # trained as long as the solving test above (after 40 iterations the greedy return can still be 0.9)
    assert _mean_return(trainer, 50) >= 0.95 * memory_v0.optimal_return()
    env = PettingZooJointEnv(MEMORY, num_envs=3, seed=1)
    returns, lengths = play_episodes(trainer, env, episodes=30, seed=5)
    assert (lengths == 4).all() and returns.mean() >= 0.95  # greedy, from a state carried over 3 steps
    # A new reset forgets: the state act() starts from is zero, whatever came before.
    state = env.reset(seed=2)
    assert all(not s.any() for s in trainer.joint_policy.group_states.acting(state, trainer.joint_policy.device))
    env.close()


@pytest.mark.parametrize(
    ("env_fn", "cfg"),
    [
        (functools.partial(identity_v0.parallel_env, nvec=(3, 2)), {"share_parameters": False}),
        (functools.partial(identity_v0.parallel_env, action_type="box"), {"centralized_critic": True}),
        (functools.partial(mock_v0.parallel_env, num_agents=3), {"share_trunk": True}),
    ],
    ids=["multidiscrete-per-agent", "box-centralised", "shared-trunk"],
)
def test_every_kind_of_space_and_critic_trains_recurrently(env_fn, cfg):
    trainer = make(env_fn, recurrent="gru", rollout_steps=16, **cfg)
    for _ in range(2):
        stats = trainer.update(trainer.collect_rollout(), aux_fn=RedundancyPenalty(coef=0.1))
    assert all(torch.isfinite(torch.tensor(stats.policy_loss + stats.value_loss)))
    assert stats.aux_loss != 0.0  # the penalty saw the recurrent features of every agent on the same rows


def test_a_frozen_recurrent_agent_keeps_its_weights_bit_identical():
    trainer = make(recurrent="lstm", share_parameters=False)
    before = [p.detach().clone() for p in trainer.policies[0].parameters()]
    trainer.update(trainer.collect_rollout(), active=[True, False])
    after = list(trainer.policies[0].parameters())
    assert all(torch.equal(b[1], a[1]) for b, a in zip(before, after))  # member 1 = agent_1, frozen
    assert any(not torch.equal(b[0], a[0]) for b, a in zip(before, after))


# ------------------------------------------------------------------ turn-based games
KUHN = dict(num_envs=4, rollout_steps=5, bptt_length=2, minibatch_size=4096, n_epochs=1)
"""Rollouts of 5 steps cut Kuhn's 2-3 move hands, so moves wait for the next rollout; one minibatch of every
chunk makes the reported KL the replay's agreement with collection (measured before the step)."""


def test_turn_based_states_advance_only_on_the_agents_own_turns():
    trainer = make(kuhn_poker_v0.env, recurrent="gru", **KUHN)
    for _ in range(3):
        ro = trainer.collect_rollout()
        trainer.update(ro)
        for t in range(ro.steps - 1):
            for agent in range(2):
                waited = ro.alive[t, :, agent] & ~ro.acting[t, :, agent] & ~ro.starts[t + 1, :, agent]
                acted = ro.acting[t, :, agent] & ~ro.starts[t + 1, :, agent]
                state, after = ro.states[0][t, :, agent], ro.states[0][t + 1, :, agent]
                assert torch.equal(state[waited], after[waited])  # a waiting player's state is kept
                assert not torch.isclose(state[acted], after[acted]).all(-1).any()  # a move changes it


def test_turn_based_moves_carried_into_the_next_rollout_replay_from_the_states_they_were_taken_in():
    trainer = make(kuhn_poker_v0.env, recurrent="gru", **KUHN)
    trainer.update(trainer.collect_rollout())  # weights that are not the initial ones
    frozen = [False, False]
    trainer.update(trainer.collect_rollout(), active=frozen)  # its pending moves are taken by these weights
    carried = 0
    for _ in range(6):
        ro = trainer.collect_rollout()
        if ro.carried is not None:
            carried += int(ro.carried.valid.sum())
            assert ro.carried.states is not None and ro.carried.starts is not None
        # Both agents frozen, so the weights that took the carried moves are the ones replaying them: then the
        # replay must give every trained row, carried moves included, the log-prob it was sampled with (the KL is
        # measured before the step). A carried move replayed from any other state would show as a ratio away from 1.
        stats = trainer.update(ro, active=frozen)
        assert max(abs(k) for k in stats.approx_kl) == 0.0
        assert max(stats.clip_fraction) == 0.0
    assert carried > 0  # the rollouts did cut hands, and their pending moves were carried


def test_a_recurrent_turn_based_run_is_deterministic_and_resumes_exactly():
    settings = {**KUHN, "n_epochs": 2, "minibatch_size": 8}

    def run(resume_at=None):
        trainer = make(kuhn_poker_v0.env, recurrent="lstm", seed=4, **settings)
        for k in range(4):
            if k == resume_at:  # moves pending, states in the collector's memory
                saved = (trainer.state_dict(), trainer.env_state())
                trainer = make(kuhn_poker_v0.env, recurrent="lstm", seed=9, **settings)
                trainer.load_state_dict(saved[0])
                trainer.load_env_state(saved[1])
            trainer.update(trainer.collect_rollout())
        return [p.detach().clone() for network in trainer.policies for p in network.parameters()]

    straight = run()
    assert all(torch.equal(a, b) for a, b in zip(straight, run()))
    assert all(torch.equal(a, b) for a, b in zip(straight, run(resume_at=2)))


def test_worker_collection_of_a_turn_based_game_gives_the_bits_of_one_process_and_resumes_in_it():
    local = _backend_run(CollectionConfig(), env_fn=kuhn_poker_v0.env)
    workers = CollectionConfig("subprocess", workers=2)
    _same(local, _backend_run(workers, env_fn=kuhn_poker_v0.env))
    _same(local, _backend_run(workers, resume=CollectionConfig(), env_fn=kuhn_poker_v0.env))


def test_marljoint_train_checks_chunks_against_its_own_default_rollout():
    from marljoint.run.defaults import DEFAULT_TRAINER
    from marljoint.run.train import RunError, RunSpec

    steps = DEFAULT_TRAINER["rollout_steps"]
    assert RunSpec.from_dict({"recurrent": "gru", "bptt_length": steps}).trainer.chunk_length == steps
    with pytest.raises(RunError, match=rf"rollout_steps \({steps}\).*got {steps + 1}.*lower bptt_length or raise"):
        RunSpec.from_dict({"recurrent": "gru", "bptt_length": steps + 1})
