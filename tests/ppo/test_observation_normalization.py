"""Observation normalisation: the running statistics, the rule that turns it on from the env's spaces, and how the
statistics travel with the networks (rollout workers, checkpoints, frozen agents, config.toml)."""

import functools

import numpy as np
import pytest
import torch
from gymnasium import spaces
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.env.spaces import observation_layout
from marljoint.policies import ObservationNormalizer
from marljoint.ppo.derived import derive_settings
from marljoint_envs import mock_v0


class _Unbounded(BaseParallelWrapper):
    """mock_v0 with observations 100 x + 50 in a Box without bounds (as MPE and SISL declare theirs)."""

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, self.env.observation_space(agent).shape, np.float32)

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._scale(obs), infos

    def step(self, actions):
        obs, *rest = self.env.step(actions)
        return (self._scale(obs), *rest)

    @staticmethod
    def _scale(obs):
        return {a: (100.0 * o + 50.0).astype(np.float32) for a, o in obs.items()}


def unbounded_env(**kwargs):
    return _Unbounded(mock_v0.parallel_env(**kwargs))


def make(env_fn=unbounded_env, **cfg):
    base = {"num_envs": 2, "rollout_steps": 8, "minibatch_size": 8, "n_epochs": 1, "torch_threads": 1}
    config = JointTrainerConfig(**{**base, **cfg})
    env = config.collection.make_env(env_fn, num_envs=config.num_envs, seed=config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


# ------------------------------------------------------------------ the statistics
def test_the_statistics_merge_batches_exactly_and_per_member():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(60, 2, 5))
    weights = rng.random((60, 2)) > 0.3
    norm = ObservationNormalizer(5, members=2)
    for chunk in np.array_split(np.arange(60), 4):
        norm.update(torch.tensor(data[chunk]), torch.tensor(weights[chunk]))
    for m in range(2):
        rows = data[weights[:, m], m]
        np.testing.assert_allclose(norm.mean[m].numpy(), rows.mean(0), rtol=1e-12)
        np.testing.assert_allclose(norm.var[m].numpy(), rows.var(0), rtol=1e-10)
        assert norm.count[m, 0] == weights[:, m].sum()
    standardised = norm(torch.tensor(data, dtype=torch.float32))
    assert standardised.dtype == torch.float32
    expected = (data - norm.mean.numpy()) / np.sqrt(norm.var.numpy() + 1e-8)
    np.testing.assert_allclose(standardised.numpy(), np.clip(expected, -10, 10), rtol=1e-5, atol=1e-5)


def test_a_member_without_rows_keeps_its_statistics_and_outliers_are_clipped():
    norm = ObservationNormalizer(1, members=2)
    norm.update(torch.tensor([[[1.0], [5.0]], [[3.0], [7.0]]]), torch.tensor([[True, False], [True, False]]))
    assert norm.mean.tolist() == [[2.0], [0.0]] and norm.var.tolist() == [[1.0], [1.0]]
    assert norm.count.tolist() == [[2.0], [0.0]]
    assert norm(torch.tensor([[[1e6], [0.0]]])).tolist() == [[[10.0], [0.0]]]


def test_bad_statistics_arguments_are_refused():
    with pytest.raises(ValueError, match="size must be a positive int"):
        ObservationNormalizer(0)
    with pytest.raises(ValueError, match="clip must be > 0"):
        ObservationNormalizer(3, clip=0.0)
    with pytest.raises(ValueError, match=r"update takes x \[R, 1, 3\] and weights \[R, 1\]"):
        ObservationNormalizer(3).update(torch.zeros(4, 3), torch.ones(4))


# ------------------------------------------------------------------ the rule
@pytest.mark.parametrize(
    ("space", "unbounded"),
    [
        (spaces.Box(-np.inf, np.inf, (3,)), True),
        (spaces.Box(0.0, np.finfo(np.float32).max, (3,)), True),
        (spaces.Box(-1.0, 1.0, (3,)), False),
        (spaces.Box(0, 255, (40, 40, 3), np.uint8), False),
        (spaces.Discrete(4), False),
        (spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-np.inf, 0.0, (2,))}), True),
        (spaces.Dict({"observation": spaces.Box(-np.inf, np.inf, (2,)), "action_mask": spaces.MultiBinary(3)}), True),
    ],
)
def test_which_observation_spaces_count_as_unbounded(space, unbounded):
    assert observation_layout("a", space).unbounded is unbounded


def test_the_rule_turns_normalisation_on_for_unbounded_boxes_only_and_an_explicit_value_wins():
    unbounded = PettingZooJointEnv(unbounded_env, num_envs=1)
    bounded = PettingZooJointEnv(mock_v0.parallel_env, num_envs=1)
    config, why = derive_settings(unbounded.spec, JointTrainerConfig(num_envs=1))
    assert config.normalize_observations is True
    assert "agents 'agent_0', 'agent_1' observe a Box with unbounded bounds" in why["normalize_observations"]
    config, why = derive_settings(bounded.spec, JointTrainerConfig(num_envs=1))
    assert config.normalize_observations is False and why["normalize_observations"].startswith("off")
    config, why = derive_settings(unbounded.spec, JointTrainerConfig(num_envs=1, normalize_observations=False))
    assert config.normalize_observations is False and "normalize_observations" not in why
    trainer = JointMultiAgentTrainer.from_env(bounded, JointTrainerConfig(num_envs=1, normalize_observations=True))
    assert trainer.config.normalize_observations is True and "normalize_observations" not in trainer.derived
    assert trainer.policies[0].obs_normalizer is not None


def test_bad_values_and_disagreeing_policies_are_refused():
    with pytest.raises(ValueError, match="normalize_observations must be true, false or None"):
        JointTrainerConfig(normalize_observations="yes")
    trainer = make(num_envs=1)
    single = trainer.policies[0]
    env = PettingZooJointEnv(unbounded_env, num_envs=1)
    from marljoint.policies import ActorCritic

    nets = [
        ActorCritic(env.spec.groups[0].observation, env.spec.groups[0].action, 1, True, normalize_observations=False)
        for _ in range(2)
    ]
    optimizers = [torch.optim.Adam(n.parameters()) for n in nets]
    with pytest.raises(ValueError, match=r"normalize_observations=True, but the policies of agents \[0, 1\]"):
        JointMultiAgentTrainer(env, JointTrainerConfig(num_envs=1, normalize_observations=True), nets, optimizers)
    plain = JointMultiAgentTrainer(env, JointTrainerConfig(num_envs=1), nets, optimizers)
    assert plain.config.normalize_observations is False
    assert "do not normalise" in plain.derived["normalize_observations"]
    assert single.obs_normalizer is not None
    with pytest.raises(ValueError, match="standardises flat observations, but this group observes images"):
        from marljoint.env.spaces import ActionLayout, ObservationLayout

        ActorCritic(
            ObservationLayout("image", (40, 40, 3), np.dtype(np.uint8)),
            ActionLayout("discrete", (3,), ()),
            1,
            True,
            normalize_observations=True,
        )


# ------------------------------------------------------------------ in training
def test_statistics_are_updated_after_the_update_from_the_alive_rows():
    trainer = make()
    norm = trainer.policies[0].obs_normalizer
    rollout = trainer.collect_rollout()
    assert norm.count.item() == 0  # collected with the identity statistics
    trainer.update(rollout)
    rows = rollout.obs[0].reshape(-1, rollout.obs[0].shape[-1]).double()
    assert norm.count.item() == rows.shape[0]
    torch.testing.assert_close(norm.mean[0], rows.mean(0))
    torch.testing.assert_close(norm.var[0], rows.var(0, unbiased=False))
    # The next rollout is evaluated on standardised features: |x| ≤ 10 and about unit scale.
    standardised = norm(rows.float())
    assert standardised.abs().max() <= 10 and standardised.std(0).mean() == pytest.approx(1.0, abs=0.05)


def test_a_frozen_agent_keeps_its_statistics():
    trainer = make(share_parameters=False)
    norm = trainer.policies[0].obs_normalizer
    trainer.update(trainer.collect_rollout(), active=[True, False])
    assert norm.count[:, 0].tolist() == [16.0, 0.0]
    assert norm.mean[1].abs().sum() == 0


def test_statistics_are_saved_and_loaded_with_the_networks(tmp_path):
    trainer = make()
    trainer.update(trainer.collect_rollout())
    trainer.save(tmp_path / "ckpt.pt")
    other = make(seed=3)
    other.load(tmp_path / "ckpt.pt")
    torch.testing.assert_close(other.policies[0].obs_normalizer.mean, trainer.policies[0].obs_normalizer.mean)
    plain = make(normalize_observations=False)
    with pytest.raises(ValueError, match="normalise observations, this trainer's do not; build the trainer with"):
        plain.load(tmp_path / "ckpt.pt")


def test_workers_collect_with_the_learners_statistics_bit_identically():
    runs = []
    for collection in (CollectionConfig(), CollectionConfig(backend="subprocess", workers=2)):
        trainer = make(collection=collection)
        try:
            for _ in range(3):
                rollout = trainer.collect_rollout()
                trainer.update(rollout)
            runs.append((rollout.log_probs.clone(), rollout.values.clone()))
        finally:
            trainer.close()
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_config_toml_holds_the_derived_value_with_its_reason_and_old_runs_load_without_it(tmp_path):
    from marljoint.run.train import RunSpec, load_run_spec, train_run

    spec = RunSpec.from_dict(
        {
            "env": "mpe2.simple_spread_v3",
            "env_kwargs": {"N": 2, "max_cycles": 25},
            "total_steps": 256,
            "num_envs": 2,
            "rollout_steps": 64,
            "minibatch_size": 64,
        }
    )
    train_run(spec, tmp_path / "run", progress=False)
    text = (tmp_path / "run" / "config.toml").read_text()
    assert "# derived from the env (on: agents 'agent_0', 'agent_1' observe a Box" in text
    assert "\nnormalize_observations = true\n" in text
    assert load_run_spec(tmp_path / "run").trainer.normalize_observations is True
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.toml").write_text(text.replace("\nnormalize_observations = true\n", "\n"))
    assert load_run_spec(old).trainer.normalize_observations is False
    assert RunSpec.from_dict({}).trainer.normalize_observations is None


def test_bounded_envs_train_exactly_as_before_normalisation_existed():
    # A bounded env derives "off": its networks hold no statistics and its bits are those of an explicit False.
    a = make(functools.partial(mock_v0.parallel_env), seed=5)
    b = make(functools.partial(mock_v0.parallel_env), seed=5, normalize_observations=False)
    assert a.policies[0].obs_normalizer is None
    for trainer in (a, b):
        trainer.update(trainer.collect_rollout())
    states = [t.policies[0].state_dict() for t in (a, b)]
    assert all(torch.equal(x, y) for x, y in zip(states[0].values(), states[1].values()))


def test_saved_configs_that_predate_the_setting_load_with_it_off():
    from marljoint.run.migrations import migrate_saved_config

    assert migrate_saved_config({"gamma": 0.9}) == {"gamma": 0.9, "normalize_observations": False}
    assert migrate_saved_config({"normalize_observations": None}) == {"normalize_observations": None}
    nested = migrate_saved_config({"iterations": 3, "trainer": {"seed": 1}})  # a PSRO/NFSP checkpoint's config
    assert nested == {"iterations": 3, "trainer": {"seed": 1, "normalize_observations": False}}
