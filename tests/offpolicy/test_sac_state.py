"""Target networks follow by Polyak averaging; a saved algorithm resumes exactly where it stopped."""

import pytest
import torch

from ._sac_helpers import BOX, DISCRETE, make_algorithm, make_batch


@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_polyak_update_by_hand(variant):
    algo = make_algorithm(BOX, variant=variant, tau=0.25)
    pairs = [(algo.target_critic, algo.critic)] + (
        [] if algo.target_actor is None else [(algo.target_actor, algo.actor)]
    )
    with torch.no_grad():
        for _, online in pairs:
            for p in online.parameters():
                p.add_(1.0)
    before = [[(t.clone(), o.clone()) for t, o in zip(tgt.parameters(), onl.parameters())] for tgt, onl in pairs]
    algo.update_targets()
    for (target, _), params in zip(pairs, before):
        for p, (t0, o0) in zip(target.parameters(), params):
            assert torch.allclose(p, 0.75 * t0 + 0.25 * o0)
    assert all(not p.requires_grad for target, _ in pairs for p in target.parameters())


def test_targets_start_as_copies_and_are_not_trained():
    algo = make_algorithm(DISCRETE, variant="maddpg")
    for target, online in ((algo.target_critic, algo.critic), (algo.target_actor, algo.actor)):
        assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters()))
    names = [name for name, _ in algo.networks()]
    assert names == ["actor", "critic"] and set(algo.learning_rates()) == set(names)


@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
def test_a_loaded_state_resumes_bit_identically(space):
    algo = make_algorithm(space, actor_update_interval=2)
    batch = make_batch(space)
    algo.loss(batch)
    state = {key: value.clone() if torch.is_tensor(value) else value for key, value in algo.state_dict().items()}
    expected = [algo.loss(batch)[0].item() for _ in range(3)]
    copy = make_algorithm(space, actor_update_interval=2)
    copy.load_state_dict(state)
    assert [copy.loss(batch)[0].item() for _ in range(3)] == expected
