"""The redundancy penalty on the actors' encoders joins the SAC loss: one backward reaches every agent's encoder."""

import pytest

from marljoint.redundancy import RedundancyPenalty

from ._sac_helpers import BOX, DISCRETE, N, make_algorithm, make_batch


def _encoder_grads(algo, batch, aux_fn):
    algo.zero_grad(set_to_none=True)
    algo.generator.manual_seed(0)
    loss, stats = algo.loss(batch, aux_fn=aux_fn)
    loss.backward()
    return [layer.weight.grad.clone() for layer in algo.actor.encoder.layers], stats


@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_the_penalty_gradient_reaches_every_agents_encoder_in_one_backward(space, variant):
    algo = make_algorithm(space, variant=variant)
    batch = make_batch(space, batch=64)
    plain, _ = _encoder_grads(algo, batch, None)
    penalised, stats = _encoder_grads(algo, batch, RedundancyPenalty(kind="xcorr", coef=10.0))
    assert stats["aux_loss"] > 0 and f"redundancy/xcorr/0-{N - 1}" in stats
    assert stats["total_loss"] == pytest.approx(
        stats["critic_loss"] + stats["actor_loss"] + stats["alpha_loss"] + stats["aux_loss"], rel=1e-5
    )
    for before, after in zip(plain, penalised):
        change = (after - before).flatten(1).abs().sum(1)  # per member: one per agent
        assert change.shape == (N,) and (change > 0).all()


def test_a_shared_encoder_gets_the_penalty_gradient_too():
    algo = make_algorithm(BOX, share_parameters=True)
    batch = make_batch(BOX, batch=64)
    plain, _ = _encoder_grads(algo, batch, None)
    penalised, _ = _encoder_grads(algo, batch, RedundancyPenalty(kind="cka", coef=10.0))
    assert plain[0].shape[0] == 1 and (penalised[0] - plain[0]).abs().sum() > 0


def test_between_actor_updates_only_the_penalty_trains_the_encoders():
    algo = make_algorithm(BOX, actor_update_interval=2)
    batch = make_batch(BOX, batch=64)
    algo.loss(batch)  # the first call updates the actors; the second does not
    loss, stats = algo.loss(batch, aux_fn=RedundancyPenalty(coef=1.0))
    loss.backward()
    assert stats["actor_updated"] == 0.0 and "actor_loss" not in stats
    assert all(layer.weight.grad.abs().sum() > 0 for layer in algo.actor.encoder.layers)
    assert algo.actor.head.weight.grad is None and algo.temperature.log_alpha.grad is None
