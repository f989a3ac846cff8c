"""A centralised critic run once per frame (``critic_per_frame``): one trunk pass per joint state, one value per
agent, the same network whatever path evaluates it, and the refusals where it does not exist."""

import numpy as np
import pytest
import torch

from marljoint import JointTrainerConfig
from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies import ActorCritic
from marljoint.policies.description import actor_critic_from_description, describe_actor_critic

FLAT = ObservationLayout("flat", (7,), np.dtype(np.float32))
DISCRETE = ActionLayout("discrete", (4,), ())
JOINT = 3 * 7 + 3  # three agents' observations and the alive mask


def make(**kwargs) -> ActorCritic:
    settings = {"share_parameters": True, "critic_input_size": JOINT, "critic_per_frame": True, **kwargs}
    return ActorCritic(FLAT, DISCRETE, num_agents=3, generator=torch.Generator().manual_seed(0), **settings)


def inputs(batch: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(batch, 3, 7, generator=g)
    joint = torch.randn(batch, JOINT, generator=g)
    return obs, joint.unsqueeze(1).expand(-1, 3, -1)


def test_the_critic_runs_once_per_frame_and_gives_one_value_per_agent() -> None:
    net = make()
    seen = []
    original = net.critic_encoder.forward_member_major

    def counted(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return original(x)

    net.critic_encoder.forward_member_major = counted
    obs, critic_obs = inputs(batch=5)
    values = net(obs, critic_obs).values
    assert seen == [(1, 5, JOINT)]  # one row per frame, no agent ids appended
    assert values.shape == (5, 3)
    # By hand: the critic MLP on the joint state, then a head with one output per agent.
    hidden = critic_obs[:, 0]
    for layer in net.critic_encoder.layers:
        hidden = torch.tanh(hidden @ layer.weight[0] + layer.bias[0])
    expected = hidden @ net.value_head.weight[0] + net.value_head.bias[0]
    torch.testing.assert_close(values, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(values[:, 0], values[:, 1])  # each agent its own output


def test_the_value_of_every_agent_trains_its_own_output() -> None:
    net = make()
    obs, critic_obs = inputs()
    values = net(obs, critic_obs).values
    values[:, 2].sum().backward()
    grad = net.value_head.weight.grad[0]  # [d, n_g]
    assert grad[:, 2].abs().sum() > 0
    assert torch.count_nonzero(grad[:, :2]) == 0


def test_a_described_network_is_built_again_per_frame() -> None:
    net = make(normalize_observations=True)
    obs, critic_obs = inputs()
    net.update_observation_statistics(obs, torch.ones(5, 3, dtype=torch.bool), critic_obs)
    again = actor_critic_from_description(describe_actor_critic(net))
    assert again.critic_per_frame
    torch.testing.assert_close(again(obs, critic_obs).values, net(obs, critic_obs).values, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"critic_input_size": None}, "needs a centralised critic"),
        ({"share_parameters": False}, "needs share_parameters=True"),
        ({"recurrent": "gru"}, "needs a feed-forward network, got recurrent='gru'"),
        ({"critic_per_frame": "yes"}, "critic_per_frame must be True or False, got 'yes'"),
    ],
)
def test_the_network_refuses_a_per_frame_critic_where_there_is_none(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make(**changes)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({}, r"needs centralized_critic = true \(a local critic reads one agent's observation\)"),
        ({"centralized_critic": True, "share_parameters": False}, "needs share_parameters = true"),
        ({"centralized_critic": True, "recurrent": "lstm"}, "needs recurrent = None"),
        ({"centralized_critic": True, "critic_per_frame": 1}, "critic_per_frame must be"),
    ],
)
def test_the_config_refuses_a_per_frame_critic_where_there_is_none(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        JointTrainerConfig(**{"critic_per_frame": True, **changes})


def test_a_run_with_a_per_frame_critic_trains_writes_its_setting_and_acts_again(tmp_path) -> None:
    from marljoint import load_run
    from marljoint.run.train import RunSpec, train_run

    spec = RunSpec.from_dict(
        {"env": "bucket_brigade_v0", "total_steps": 64, "num_envs": 2, "rollout_steps": 16, "minibatch_size": 16,
         "centralized_critic": True, "critic_per_frame": True}
    )  # fmt: skip
    train_run(spec, tmp_path / "run", progress=False)
    assert "critic_per_frame = true" in (tmp_path / "run" / "config.toml").read_text()
    run = load_run(tmp_path / "run")
    try:
        assert all(network.critic_per_frame for network in run.trainer.joint_policy.networks)
        actions = run.act(run.env.reset(seed=0))
        assert len(actions) == len(run.trainer.joint_policy.networks)
    finally:
        run.close()
