import pytest
import torch
from torch import nn

from marljoint.policies import StackedAdam, StackedLinear, clip_member_grads_, member_grad_norms

MEMBERS = 3


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def stacked_and_copies(seed: int = 0):
    """A stacked layer of 3 members and, per member, separate copies of its (weight, bias)."""
    layer = StackedLinear(MEMBERS, 4, 3, generator=generator(seed))
    copies = [[nn.Parameter(p[m].detach().clone()) for p in layer.parameters()] for m in range(MEMBERS)]
    return layer, copies


def set_grads(layer, copies, seed):
    """Random, different gradients per member, identical on the stacked layer and the copies."""
    rng = generator(seed)
    for p in layer.parameters():
        p.grad = torch.randn(p.shape, generator=rng) * torch.tensor([1.0, 10.0, 0.01]).view(-1, *[1] * (p.dim() - 1))
    for m, params in enumerate(copies):
        for p, stacked in zip(params, layer.parameters()):
            p.grad = stacked.grad[m].clone()


def assert_members_equal(layer, copies, members=range(MEMBERS)):
    for m in members:
        for stacked, p in zip(layer.parameters(), copies[m]):
            assert torch.equal(stacked[m], p), f"member {m} differs"


def test_equals_separate_adams_bit_for_bit():
    layer, copies = stacked_and_copies()
    stacked = StackedAdam(layer.parameters(), lr=3e-3, members=MEMBERS)
    separate = [torch.optim.Adam(params, lr=3e-3) for params in copies]
    for step in range(12):
        set_grads(layer, copies, seed=100 + step)
        stacked.step()
        for optimizer in separate:
            optimizer.step()
        assert_members_equal(layer, copies)


def test_frozen_member_is_untouched_and_resumes_like_an_adam_that_skipped():
    layer, copies = stacked_and_copies(1)
    stacked = StackedAdam(layer.parameters(), lr=1e-2, betas=(0.8, 0.99), members=MEMBERS)
    separate = [torch.optim.Adam(params, lr=1e-2, betas=(0.8, 0.99)) for params in copies]
    frozen_steps = {3, 4, 5, 8}
    for step in range(12):
        set_grads(layer, copies, seed=200 + step)
        active = torch.tensor([True, step not in frozen_steps, True])
        before = {
            name: t[1].clone()
            for name, t in [("weight", layer.weight), ("bias", layer.bias)]
            + [(f"{key}{i}", stacked.state[p][key]) for i, p in enumerate(layer.parameters()) if stacked.state[p]
               for key in ("exp_avg", "exp_avg_sq", "step")]
        }  # fmt: skip
        stacked.step(active=active)
        for m, optimizer in enumerate(separate):
            if active[m]:
                optimizer.step()
        assert_members_equal(layer, copies)
        if not active[1]:
            after = {"weight": layer.weight[1], "bias": layer.bias[1]}
            after.update(
                {
                    f"{key}{i}": stacked.state[p][key][1]
                    for i, p in enumerate(layer.parameters())
                    for key in ("exp_avg", "exp_avg_sq", "step")
                }
            )
            for name, value in before.items():
                assert torch.equal(after[name], value), name
    counts = stacked.state[layer.weight]["step"]
    assert counts.tolist() == [12.0, 12.0 - len(frozen_steps), 12.0]
    for m in range(MEMBERS):
        torch.testing.assert_close(
            stacked.state[layer.weight]["exp_avg"][m], separate[m].state[copies[m][0]]["exp_avg"], rtol=0, atol=0
        )


def test_no_active_member_changes_nothing():
    layer, copies = stacked_and_copies(2)
    stacked = StackedAdam(layer.parameters(), lr=1e-2, members=MEMBERS)
    set_grads(layer, copies, seed=1)
    before = [p.clone() for p in layer.parameters()]
    stacked.step(active=torch.zeros(MEMBERS, dtype=torch.bool))
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
    assert not stacked.state[layer.weight]


def test_per_member_learning_rates_and_set_lr():
    layer, copies = stacked_and_copies(3)
    lrs = [1e-3, 5e-3, 2e-2]
    stacked = StackedAdam(layer.parameters(), lr=torch.tensor(lrs, dtype=torch.float64), members=MEMBERS)
    separate = [torch.optim.Adam(params, lr=lr) for params, lr in zip(copies, lrs)]
    for step in range(8):
        if step == 4:
            lrs = [lr / 2 for lr in lrs]
            stacked.set_lr(lrs)
            for optimizer, lr in zip(separate, lrs):
                optimizer.param_groups[0]["lr"] = lr
        set_grads(layer, copies, seed=300 + step)
        stacked.step()
        for optimizer in separate:
            optimizer.step()
        assert_members_equal(layer, copies)


def test_state_dict_round_trip_continues_identically():
    layer, copies = stacked_and_copies(4)
    stacked = StackedAdam(layer.parameters(), lr=1e-2, members=MEMBERS)
    for step in range(3):
        set_grads(layer, copies, seed=400 + step)
        stacked.step(active=torch.tensor([True, step != 1, True]))
    twin = StackedLinear(MEMBERS, 4, 3)
    twin.load_state_dict(layer.state_dict())
    restored = StackedAdam(twin.parameters(), lr=0.5, members=MEMBERS)
    restored.load_state_dict(stacked.state_dict())
    assert restored.param_groups[0]["lr"] == 1e-2
    for step in range(3):
        set_grads(layer, copies, seed=500 + step)
        for p, q in zip(layer.parameters(), twin.parameters()):
            q.grad = p.grad.clone()
        stacked.step()
        restored.step()
    for p, q in zip(layer.parameters(), twin.parameters()):
        assert torch.equal(p, q)


def test_parameters_without_gradient_are_skipped():
    layer, _ = stacked_and_copies(5)
    stacked = StackedAdam(layer.parameters(), members=MEMBERS)
    layer.weight.grad = torch.ones_like(layer.weight)
    bias = layer.bias.clone()
    stacked.step()
    assert torch.equal(layer.bias, bias) and not stacked.state[layer.bias]


def test_optimizer_errors():
    layer = StackedLinear(MEMBERS, 4, 3)
    with pytest.raises(ValueError, match="no member axis of size 2 first"):
        StackedAdam(layer.parameters(), members=2)
    with pytest.raises(ValueError, match=r"one value per member \(shape \(3,\)\)"):
        StackedAdam(layer.parameters(), lr=[1e-3, 1e-3], members=MEMBERS)
    with pytest.raises(ValueError, match="lr must be >= 0"):
        StackedAdam(layer.parameters(), lr=-1.0, members=MEMBERS)
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0, 1\)"):
        StackedAdam(layer.parameters(), betas=(0.9, 1.0), members=MEMBERS)
    with pytest.raises(ValueError, match="members must be a positive int"):
        StackedAdam(layer.parameters(), members=0)
    optimizer = StackedAdam(layer.parameters(), members=MEMBERS)
    with pytest.raises(ValueError, match=r"active must be a bool tensor of shape \(3,\)"):
        optimizer.step(active=torch.ones(MEMBERS))
    with pytest.raises(ValueError, match=r"active must be a bool tensor of shape \(3,\)"):
        optimizer.step(active=torch.ones(2, dtype=torch.bool))


def grads_of_norms(norms):
    """Two stacked parameters whose member gradients have the given global norms."""
    a = nn.Parameter(torch.zeros(MEMBERS, 4))
    b = nn.Parameter(torch.zeros(MEMBERS, 2, 3))
    ga = torch.randn(MEMBERS, 4, generator=generator(6))
    gb = torch.randn(MEMBERS, 2, 3, generator=generator(7))
    total = (ga.square().sum(1) + gb.square().sum((1, 2))).sqrt()
    scale = torch.tensor(norms) / total
    a.grad, b.grad = ga * scale[:, None], gb * scale[:, None, None]
    return [a, b]


def test_member_grad_norms_match_torch_per_member():
    params = grads_of_norms([0.5, 3.0, 10.0])
    norms = member_grad_norms(params)
    for m in range(MEMBERS):
        expected = torch.nn.utils.get_total_norm([p.grad[m] for p in params])
        torch.testing.assert_close(norms[m], expected)
    torch.testing.assert_close(norms, torch.tensor([0.5, 3.0, 10.0]))


def test_clip_scales_members_above_the_cap_and_leaves_the_others():
    params = grads_of_norms([0.5, 3.0, 10.0])
    before = [p.grad.clone() for p in params]
    norms = clip_member_grads_(params, max_norm=2.0)
    torch.testing.assert_close(norms, torch.tensor([0.5, 3.0, 10.0]))
    for p, g in zip(params, before):
        assert torch.equal(p.grad[0], g[0])  # below the cap: bit-identical
        torch.testing.assert_close(p.grad[1], g[1] * 2.0 / (3.0 + 1e-6))  # direction kept
        torch.testing.assert_close(p.grad[2], g[2] * 2.0 / (10.0 + 1e-6))
    torch.testing.assert_close(member_grad_norms(params), torch.tensor([0.5, 2.0, 2.0]))


def test_clip_matches_clip_grad_norm_on_separate_copies():
    params = grads_of_norms([0.5, 3.0, 10.0])
    copies = [[nn.Parameter(p[m].detach().clone()) for p in params] for m in range(MEMBERS)]
    for m in range(MEMBERS):
        for c, p in zip(copies[m], params):
            c.grad = p.grad[m].clone()
    clip_member_grads_(params, 1.5)
    for m in range(MEMBERS):
        torch.nn.utils.clip_grad_norm_(copies[m], 1.5)
        for c, p in zip(copies[m], params):
            torch.testing.assert_close(p.grad[m], c.grad)


def test_grad_norm_errors_and_missing_grads():
    with pytest.raises(ValueError, match="params is empty"):
        member_grad_norms([])
    with pytest.raises(ValueError, match="member axis of size 3 first"):
        member_grad_norms([torch.zeros(3, 2), torch.zeros(2, 2)])
    with pytest.raises(ValueError, match="max_norm must be > 0"):
        clip_member_grads_([torch.zeros(3, 2)], 0.0)
    assert torch.equal(member_grad_norms([nn.Parameter(torch.zeros(3, 2))]), torch.zeros(3))


def test_load_state_dict_rejects_another_member_count():
    layer, copies = stacked_and_copies(8)
    stacked = StackedAdam(layer.parameters(), members=MEMBERS)
    set_grads(layer, copies, seed=1)
    stacked.step()
    other = StackedLinear(2, 4, 3)
    with pytest.raises(ValueError, match="StackedAdam with members=3"):
        StackedAdam(other.parameters(), members=2).load_state_dict(stacked.state_dict())


def test_learning_rate_edited_in_param_groups_is_honoured():
    layer, copies = stacked_and_copies(9)
    stacked = StackedAdam(layer.parameters(), lr=torch.tensor([1e-2, 2e-2, 3e-2], dtype=torch.float64), members=MEMBERS)
    separate = [torch.optim.Adam(params, lr=lr) for params, lr in zip(copies, [5e-3, 1e-2, 1.5e-2])]
    stacked.param_groups[0]["lr"] = stacked.param_groups[0]["lr"] * 0.5  # what an annealing loop does
    set_grads(layer, copies, seed=3)
    stacked.step()
    for optimizer in separate:
        optimizer.step()
    assert_members_equal(layer, copies)
    stacked.param_groups[0]["lr"] = torch.ones(2)
    with pytest.raises(ValueError, match="lr holds 2 values but the optimizer has 3 members"):
        stacked.step()
