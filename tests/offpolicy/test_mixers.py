"""Mixers: VDN is the sum of the present agents' utilities; QMIX is monotone in every agent's utility."""

import torch

from marljoint.offpolicy import QmixMixer, VdnMixer


def test_vdn_is_the_sum_of_the_present_agents_utilities():
    utilities = torch.tensor([[1.0, 2.0, 4.0], [-1.0, 0.5, 3.0]])
    present = torch.tensor([[True, True, True], [True, False, True]])
    assert torch.equal(VdnMixer()(utilities, present, torch.zeros(2, 0)), torch.tensor([7.0, 2.0]))


def test_qmix_is_monotone_in_every_agent_utility():
    generator = torch.Generator().manual_seed(0)
    mixer = QmixMixer(4, 6, embed_dim=8, hypernet_hidden=16, generator=generator)
    utilities = torch.randn(256, 4, generator=generator, requires_grad=True)
    state = torch.randn(256, 6, generator=generator) * 3
    q_tot = mixer(utilities, torch.ones(256, 4, dtype=torch.bool), state)
    (gradient,) = torch.autograd.grad(q_tot.sum(), utilities)
    assert (gradient >= 0).all()
    assert (gradient > 0).any()  # not monotone by being constant


def test_qmix_ignores_an_absent_agents_utility():
    mixer = QmixMixer(2, 3, generator=torch.Generator().manual_seed(1))
    state = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    present = torch.tensor([[True, False]] * 5)
    a = mixer(torch.tensor([[1.0, -7.0]] * 5), present, state)
    b = mixer(torch.tensor([[1.0, 9.0]] * 5), present, state)
    assert torch.equal(a, b)


def test_the_mixer_weights_come_from_the_given_generator():
    a = QmixMixer(3, 4, generator=torch.Generator().manual_seed(5))
    b = QmixMixer(3, 4, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
