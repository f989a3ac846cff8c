"""The redundancy penalty runs with VDN and QMIX: one backward of the joint loss reaches every agent's encoder."""

import pytest
import torch

from marljoint.redundancy import RedundancyPenalty

from ._helpers import tiny_trainer


@pytest.mark.parametrize("algorithm", ["vdn", "qmix"])
@pytest.mark.parametrize("kind", ["xcorr", "cka"])
def test_the_penalty_gradient_reaches_every_agents_encoder(algorithm, kind):
    trainer = tiny_trainer(algorithm=algorithm, share_parameters=False)
    trainer.collect()
    trainer.collect()
    penalty = RedundancyPenalty(kind=kind, coef=1.0)
    seen = []

    def aux_fn(features, alive):
        out = penalty(features, alive)
        seen.append(out.loss)
        return out

    batch = trainer.buffer.sample(16, torch.Generator().manual_seed(0))
    loss, stats = trainer.algorithm.loss(batch, aux_fn)
    encoder = trainer.algorithm.groups[0].encoder.layers[0].weight  # [members = one per agent, in, out]
    (from_penalty,) = torch.autograd.grad(seen[0], encoder, retain_graph=True)
    assert all(from_penalty[agent].abs().sum() > 0 for agent in range(2))
    loss.backward()  # the one backward of the joint loss
    assert all(encoder.grad[agent].abs().sum() > 0 for agent in range(2))
    assert stats["aux_loss"] == pytest.approx(float(seen[0].detach()))
    assert stats["total_loss"] == pytest.approx(stats["td_loss"] + stats["aux_loss"], rel=1e-5)


def test_training_with_the_penalty_logs_it():
    trainer = tiny_trainer(algorithm="qmix")
    rows = trainer.train(48, aux_fn=RedundancyPenalty(kind="xcorr", coef=0.1))
    assert rows[-1]["offpolicy/aux_loss"] != 0.0
