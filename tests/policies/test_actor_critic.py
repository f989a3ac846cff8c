import itertools

import numpy as np
import pytest
import torch

from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies import ActorCritic, Categorical, DiagGaussian, FactoredCategorical, PolicyOutput

FLAT = ObservationLayout("flat", (18,), np.dtype(np.float32))
IMAGE = ObservationLayout("image", (12, 10, 3), np.dtype(np.uint8))
SMALL_CNN = {"cnn_channels": (4, 8), "cnn_kernel_sizes": (3, 3), "cnn_strides": (2, 1), "cnn_features": 16}
DISCRETE = ActionLayout("discrete", (5,), ())
MULTI = ActionLayout("multidiscrete", (3, 2, 4), (3,))
BOX = ActionLayout("box", (), (2,), low=np.full(2, -1.0, np.float32), high=np.ones(2, np.float32))
ACTIONS = {
    "discrete": (DISCRETE, Categorical),
    "multidiscrete": (MULTI, FactoredCategorical),
    "box": (BOX, DiagGaussian),
}


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make(observation=FLAT, action=DISCRETE, num_agents=3, share=False, **kwargs) -> ActorCritic:
    if observation.kind == "image":
        kwargs = {**SMALL_CNN, **kwargs}
    return ActorCritic(observation, action, num_agents, share, generator=generator(0), **kwargs)


def observations(observation, batch, num_agents, seed=1) -> torch.Tensor:
    shape = (batch, num_agents, *observation.shape)
    if observation.kind == "image":
        return torch.randint(0, 256, shape, generator=generator(seed), dtype=torch.uint8)
    return torch.randn(shape, generator=generator(seed))


@pytest.mark.parametrize(
    "observation, action_kind, share, critic_size",
    list(itertools.product([FLAT, IMAGE], ACTIONS, [True, False], [None, 7])),
)
def test_output_shapes(observation, action_kind, share, critic_size):
    action, dist_type = ACTIONS[action_kind]
    batch, agents = 4, 3
    net = make(observation, action, agents, share, hidden_sizes=(16, 8), critic_input_size=critic_size)
    critic_obs = None if critic_size is None else torch.randn(batch, agents, critic_size)
    out = net(observations(observation, batch, agents), critic_obs)
    assert isinstance(out, PolicyOutput)
    assert out.head.shape == (batch, agents, action.logits_size)
    assert out.values.shape == (batch, agents)
    assert out.features.shape == (batch, agents, 8)
    dist = net.distribution(out.head)
    assert type(dist) is dist_type
    actions = dist.sample(generator(2))
    assert actions.shape == (batch, agents, *action.shape)
    assert dist.log_prob(actions).shape == (batch, agents)
    assert dist.entropy().shape == (batch, agents)
    members = 1 if share else agents
    assert net.members == members
    for name, param in net.named_parameters():
        assert param.shape[0] == members, name


def test_sharing_appends_the_agent_id():
    net = make(share=True)
    obs = torch.randn(1, 1, 18, generator=generator(3)).expand(5, 3, 18)
    out = net(obs)
    assert not torch.allclose(out.head[:, 0], out.head[:, 1])
    assert not torch.allclose(out.values[:, 0], out.values[:, 1])
    # Agent j's output is the single network applied to [obs, one_hot(j)].
    for j in range(3):
        x = torch.cat((obs[:, j], torch.eye(3)[j].expand(5, 3)), -1)
        h = x
        for layer in net.encoder.layers:
            h = torch.tanh(h @ layer.weight[0] + layer.bias[0])
        torch.testing.assert_close(out.features[:, j], h)
        torch.testing.assert_close(out.head[:, j], h @ net.actor_head.weight[0] + net.actor_head.bias[0])


def test_image_sharing_appends_the_agent_id_after_the_cnn():
    net = make(IMAGE, share=True)
    assert net.encoder.in_features == SMALL_CNN["cnn_features"] + 3
    obs = observations(IMAGE, 1, 1).expand(2, 3, *IMAGE.shape)
    out = net(obs)
    assert not torch.allclose(out.features[:, 0], out.features[:, 1])


def test_independent_agents_do_not_interact():
    net = make(share=False)
    obs = torch.randn(4, 3, 18, generator=generator(4))
    changed = obs.clone()
    changed[:, 0] += 1.0
    before, after = net(obs), net(changed)
    assert not torch.allclose(before.head[:, 0], after.head[:, 0])
    assert torch.equal(before.head[:, 1:], after.head[:, 1:])
    assert torch.equal(before.values[:, 1:], after.values[:, 1:])


def test_shared_agents_in_the_same_env_do_not_interact():
    net = make(share=True)
    obs = torch.randn(4, 3, 18, generator=generator(5))
    changed = obs.clone()
    changed[:, 2] -= 1.0
    assert torch.equal(net(obs).head[:, :2], net(changed).head[:, :2])


def test_encoder_features_and_value_agree_with_forward():
    net = make(action=MULTI, share=True)
    obs = torch.randn(6, 3, 18, generator=generator(6))
    out = net(obs)
    torch.testing.assert_close(net.encoder_features(obs), out.features)
    torch.testing.assert_close(net.value(obs), out.values)
    central = make(critic_input_size=5)
    critic_obs = torch.randn(6, 3, 5, generator=generator(7))
    torch.testing.assert_close(central.value(obs, critic_obs), central(obs, critic_obs).values)


def test_centralised_critic_reads_only_the_critic_input():
    net = make(critic_input_size=5, share=True)
    obs = torch.randn(4, 3, 18, generator=generator(8))
    critic_obs = torch.randn(4, 3, 5, generator=generator(9))
    values = net(obs, critic_obs).values
    assert torch.equal(net(obs + 1.0, critic_obs).values, values)
    assert net.critic_encoder.in_features == 5 + 3


def test_actor_and_critic_parameters_partition_the_network():
    for net in (make(action=BOX), make(action=BOX, critic_input_size=4, share=True)):
        actor = {id(p) for p in net.actor_parameters()}
        critic = {id(p) for p in net.critic_parameters()}
        assert not actor & critic
        assert actor | critic == {id(p) for p in net.parameters()}
        assert id(net.log_std) in actor
        assert {id(p) for p in net.value_head.parameters()} <= critic
        assert {id(p) for p in net.encoder.parameters()} <= actor
        if net.critic_encoder is not None:
            assert {id(p) for p in net.critic_encoder.parameters()} <= critic


def test_log_std_is_per_member_and_initialised():
    net = make(action=BOX, log_std_init=-0.5)
    assert net.log_std.shape == (3, 2)
    assert torch.equal(net.log_std.detach(), torch.full((3, 2), -0.5))
    out = net(torch.zeros(2, 3, 18))
    torch.testing.assert_close(net.distribution(out.head).entropy()[0, 0], torch.tensor(2 * (1.4189385 - 0.5)))
    assert make(action=BOX, share=True).log_std.shape == (1, 2)
    assert make(action=DISCRETE).log_std is None


def test_mask_passes_through_distribution():
    net = make(action=MULTI)
    out = net(torch.randn(200, 3, 18, generator=generator(10)))
    mask = torch.ones(200, 3, 9, dtype=torch.bool)
    mask[..., 1] = False
    mask[..., 7] = False
    actions = net.distribution(out.head, mask).sample(generator(11))
    assert (actions[..., 0] != 1).all() and (actions[..., 2] != 2).all()


def test_every_parameter_gets_a_gradient():
    net = make(IMAGE, BOX, share=False, critic_input_size=4)
    obs = observations(IMAGE, 3, 3)
    out = net(obs, torch.randn(3, 3, 4))
    dist = net.distribution(out.head)
    loss = dist.log_prob(dist.sample(generator(12))).sum() + dist.entropy().sum() + out.values.square().sum()
    loss.backward()
    for name, param in net.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_member_of_agent():
    assert [make(share=True).member_of_agent(j) for j in range(3)] == [0, 0, 0]
    assert [make(share=False).member_of_agent(j) for j in range(3)] == [0, 1, 2]
    with pytest.raises(IndexError, match="out of range for a group of 3 agents"):
        make().member_of_agent(3)


def test_construction_is_reproducible_from_the_generator():
    a, b = make(IMAGE, MULTI), make(IMAGE, MULTI)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_default_nature_cnn_on_a_36x36_image():
    layout = ObservationLayout("image", (36, 36, 3), np.dtype(np.uint8))
    net = ActorCritic(layout, DISCRETE, num_agents=2, share_parameters=True, generator=generator(0))
    assert net(torch.zeros(2, 2, 36, 36, 3, dtype=torch.uint8)).head.shape == (2, 2, 5)


def test_default_cnn_needs_36_pixels_a_side_and_smaller_images_are_flattened():
    assert ActorCritic(ObservationLayout("image", (36, 40, 1), np.dtype(np.uint8)), DISCRETE, 1, True).cnn is not None
    for shape in ((35, 40, 1), (40, 35, 1)):
        assert ActorCritic(ObservationLayout("image", shape, np.dtype(np.uint8)), DISCRETE, 1, True).cnn is None
    # Any cnn_* setting asks for a CNN; the others keep their defaults.
    net = ActorCritic(IMAGE, DISCRETE, 2, True, cnn_kernel_sizes=(3, 3, 3), cnn_strides=(1, 1, 1))
    assert net.cnn is not None and net.cnn.out_features == 512


def test_small_image_flattened_into_the_mlp_scales_bytes():
    board = ObservationLayout("image", (6, 7, 2), np.dtype(np.uint8))
    net = ActorCritic(board, DISCRETE, 2, share_parameters=False, hidden_sizes=(8,), generator=generator(0))
    assert net.cnn is None and net.encoder.in_features == 6 * 7 * 2
    obs = torch.randint(0, 256, (3, 2, 6, 7, 2), generator=generator(5), dtype=torch.uint8)
    out = net(obs)
    layer = net.encoder.layers[0]
    for j in range(2):
        x = obs[:, j].reshape(3, -1).float() / 255.0
        torch.testing.assert_close(out.features[:, j], torch.tanh(x @ layer.weight[j] + layer.bias[j]))


def test_input_errors():
    net = make()
    with pytest.raises(ValueError, match=r"expected \[B, 3, 18\]"):
        net(torch.zeros(4, 2, 18))
    with pytest.raises(ValueError, match=r"expected \[B, 3, 18\]"):
        net.encoder_features(torch.zeros(4, 3, 17))
    with pytest.raises(ValueError, match="no centralised critic"):
        net(torch.zeros(4, 3, 18), torch.zeros(4, 3, 5))
    central = make(critic_input_size=5)
    with pytest.raises(ValueError, match=r"pass critic_obs of shape \[4, 3, 5\]"):
        central(torch.zeros(4, 3, 18))
    with pytest.raises(ValueError, match=r"expected \[4, 3, 5\]"):
        central.value(torch.zeros(4, 3, 18), torch.zeros(4, 3, 6))
    with pytest.raises(ValueError, match="mask of shape"):
        net.distribution(torch.zeros(4, 3, 5), torch.ones(4, 3, 4, dtype=torch.bool))


def test_construction_errors():
    with pytest.raises(TypeError, match="must be an ObservationLayout"):
        ActorCritic((18,), DISCRETE, 3, True)
    with pytest.raises(TypeError, match="must be an ActionLayout"):
        ActorCritic(FLAT, 5, 3, True)
    with pytest.raises(ValueError, match="num_agents must be a positive int"):
        ActorCritic(FLAT, DISCRETE, 0, True)
    with pytest.raises(ValueError, match="critic_input_size must be a positive int or None"):
        ActorCritic(FLAT, DISCRETE, 2, True, critic_input_size=0)
    with pytest.raises(ValueError, match="hidden_sizes must hold at least one size"):
        ActorCritic(FLAT, DISCRETE, 2, True, hidden_sizes=())
    with pytest.raises(ValueError, match="too small for kernel sizes"):
        ActorCritic(IMAGE, DISCRETE, 2, True, cnn_kernel_sizes=(8, 4, 3))  # explicit settings are not overridden
