"""The fused replay of recurrent chunks (torch's GRU/LSTM kernel over episode segments) against the stacked cells:
the same outputs, final states and gradients for every way a chunk can reset or skip steps, the setting that
chooses it, and training that learns alike with either."""

import functools

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.policies.recurrent import RECURRENT_REPLAYS, StackedRecurrentCell, resolve_replay
from marljoint_envs import kuhn_poker_v0, memory_v0, mock_v0
from tests.product._product_helpers import resume_args, run_cli, tiny_config, train_args

LENGTH, BATCH, IN, HIDDEN = 7, 4, 5, 6


def _pattern(name, members, generator):
    """``(starts, advance)`` ``[L, M, B]`` of one way a chunk can reset or skip steps."""
    shape = (LENGTH, members, BATCH)
    starts = torch.zeros(shape, dtype=torch.bool)
    advance = torch.ones(shape, dtype=torch.bool)
    if name == "first":
        starts[0] = True
    elif name == "inside":
        starts[3, :, ::2] = True
        starts[5, :, 1] = True
    elif name == "consecutive":
        starts[2:5, :, :3] = True
    elif name == "padded":  # the learner's padding: reset and never advancing, at the end of a chunk
        starts[4, :, 1] = True
        starts[5:, :, 2:] = True
        advance[5:, :, 2:] = False
    elif name == "random":
        starts = torch.rand(shape, generator=generator) < 0.3
    elif name == "skips":  # absent agents and players waiting their turn, with resets anywhere
        starts = torch.rand(shape, generator=generator) < 0.25
        advance = torch.rand(shape, generator=generator) < 0.6
        advance[:, :, 0] = False  # a row that never advances
    return starts, advance


def _replayed(cells, replay, xs, states, starts, advance):
    """Outputs, final states and the gradients of one loss w.r.t. inputs, states and every parameter."""
    results = StackedRecurrentCell.forward_sequences(cells, xs, states, starts, advance, replay=replay)
    weights = [torch.linspace(-1, 1, out.numel()).view_as(out) for out, _ in results]
    loss = sum((out * w).sum() + (final**2).sum() for (out, final), w in zip(results, weights))
    leaves = [*xs, *states, *(p for c in cells for p in c.parameters())]
    return results, torch.autograd.grad(loss, leaves)


def _inputs(cells, members, generator):
    xs = [torch.randn(LENGTH, members, BATCH, IN, generator=generator, requires_grad=True) for _ in cells]
    states = [torch.randn(members, BATCH, c.state_size, generator=generator, requires_grad=True) for c in cells]
    return xs, states


@pytest.mark.parametrize("pattern", ["none", "first", "inside", "consecutive", "padded", "random", "skips"])
@pytest.mark.parametrize("members", [1, 3])
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_the_fused_replay_computes_what_the_cells_compute(kind, members, pattern):
    generator = torch.Generator().manual_seed(members * 10 + len(pattern))
    cell = StackedRecurrentCell(members, IN, HIDDEN, kind, generator=generator)
    # Trained weights are not the orthogonal start: bias the gates so resets and kept states matter.
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))
    starts, advance = _pattern(pattern, members, generator)
    xs, states = _inputs([cell], members, generator)
    ((cells_out, cells_final),), cells_grads = _replayed([cell], "cells", xs, states, starts, advance)
    ((fused_out, fused_final),), fused_grads = _replayed([cell], "fused", xs, states, starts, advance)
    torch.testing.assert_close(fused_out, cells_out, rtol=0, atol=1e-5)
    torch.testing.assert_close(fused_final, cells_final, rtol=0, atol=1e-5)
    for fused, cells in zip(fused_grads, cells_grads):
        torch.testing.assert_close(fused, cells, rtol=0, atol=1e-4)


def test_an_actor_and_a_critic_core_replay_fused_side_by_side():
    generator = torch.Generator().manual_seed(3)
    cells = [StackedRecurrentCell(2, IN, HIDDEN, "gru", generator=generator) for _ in range(2)]
    starts, advance = _pattern("skips", 2, generator)
    xs, states = _inputs(cells, 2, generator)
    by_cells, cells_grads = _replayed(cells, "cells", xs, states, starts, advance)
    fused, fused_grads = _replayed(cells, "fused", xs, states, starts, advance)
    for (out_a, final_a), (out_b, final_b) in zip(fused, by_cells):
        torch.testing.assert_close(out_a, out_b, rtol=0, atol=1e-5)
        torch.testing.assert_close(final_a, final_b, rtol=0, atol=1e-5)
    for a, b in zip(fused_grads, cells_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)


def test_rows_that_never_advance_keep_their_state_or_its_reset():
    cell = StackedRecurrentCell(1, IN, HIDDEN, "lstm", generator=torch.Generator().manual_seed(0))
    state = torch.randn(1, 2, cell.state_size)
    starts = torch.zeros(LENGTH, 1, 2, dtype=torch.bool)
    starts[3, 0, 1] = True
    _, final = cell.forward_sequence(
        torch.randn(LENGTH, 1, 2, IN), state, starts, torch.zeros(LENGTH, 1, 2, dtype=torch.bool), replay="fused"
    )
    assert torch.equal(final[0, 0], state[0, 0]) and not final[0, 1].any()


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_players_taking_turns_through_a_long_chunk_keep_their_memory_between_turns(kind):
    # Two players with their own networks, each moving on every other step of a 19-step chunk (several rounds
    # of the LSTM memory's scan), one of them starting a new hand in mid-chunk while waiting.
    generator = torch.Generator().manual_seed(4)
    cell = StackedRecurrentCell(2, IN, HIDDEN, kind, generator=generator)
    length = 19
    advance = torch.zeros(length, 2, BATCH, dtype=torch.bool)
    advance[0::2, 0], advance[1::2, 1] = True, True
    starts = torch.zeros_like(advance)
    starts[10, 1, :2] = True
    x = torch.randn(length, 2, BATCH, IN, generator=generator, requires_grad=True)
    state = torch.randn(2, BATCH, cell.state_size, generator=generator, requires_grad=True)
    results = {}
    for replay in ("cells", "fused"):
        out, final = cell.forward_sequence(x, state, starts, advance, replay=replay)
        loss = (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum() + (final**2).sum()
        results[replay] = (out, final, *torch.autograd.grad(loss, [x, state, *cell.parameters()]))
    for fused, cells in zip(results["fused"], results["cells"]):
        torch.testing.assert_close(fused, cells, rtol=0, atol=1e-4)
    torch.testing.assert_close(results["fused"][0], results["cells"][0], rtol=0, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (cuDNN's fused kernels)")
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_the_cudnn_replay_computes_what_the_cells_compute(kind, monkeypatch):
    # cuDNN may compute an RNN's products in TF32 by default; the comparison is of the same function in fp32.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    generator = torch.Generator().manual_seed(5)
    cells = [StackedRecurrentCell(3, IN, HIDDEN, kind, generator=generator).cuda() for _ in range(2)]
    starts, advance = _pattern("skips", 3, generator)
    xs, states = _inputs(cells, 3, generator)
    xs = [x.detach().cuda().requires_grad_() for x in xs]
    states = [s.detach().cuda().requires_grad_() for s in states]
    by_cells, cells_grads = _replayed(cells, "cells", xs, states, starts.cuda(), advance.cuda())
    fused, fused_grads = _replayed(cells, "fused", xs, states, starts.cuda(), advance.cuda())
    for (out_a, final_a), (out_b, final_b) in zip(fused, by_cells):
        torch.testing.assert_close(out_a, out_b, rtol=0, atol=1e-5)
        torch.testing.assert_close(final_a, final_b, rtol=0, atol=1e-5)
    for a, b in zip(fused_grads, cells_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)


def test_unknown_replays_are_refused():
    cell = StackedRecurrentCell(1, IN, HIDDEN, "gru")
    starts = torch.zeros(LENGTH, 1, BATCH, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"replay must be 'cells' or 'fused' \(resolve 'auto'.*got 'auto'"):
        cell.forward_sequence(torch.zeros(LENGTH, 1, BATCH, IN), cell.initial_state(BATCH), starts, replay="auto")
    with pytest.raises(ValueError, match=r"recurrent_replay must be one of \['auto', 'cells', 'fused'\], got 'gpu'"):
        resolve_replay("gpu", "cpu")
    with pytest.raises(ValueError, match=r"recurrent_replay must be one of .*got 'cudnn'; 'auto' picks the fused"):
        JointTrainerConfig(recurrent="gru", recurrent_replay="cudnn")
    with pytest.raises(ValueError, match=r"recurrent_replay must be one of .*got None"):
        JointTrainerConfig(recurrent_replay=None)


def test_auto_resolves_from_the_device():
    assert RECURRENT_REPLAYS == ("auto", "cells", "fused")
    assert resolve_replay("auto", "cpu")[0] == "cells"
    choice, reason = resolve_replay("auto", torch.device("cuda", 1))
    assert choice == "fused" and "CUDA" in reason
    assert resolve_replay("cells", "cuda")[0] == "cells"


MEMORY = functools.partial(memory_v0.parallel_env, num_agents=2, num_cues=4, delay=3)


def _trainer(env_fn=MEMORY, **changes):
    settings = {
        "num_envs": 4,
        "rollout_steps": 10,
        "minibatch_size": 16,
        "n_epochs": 2,
        "hidden_sizes": (16,),
        "rnn_hidden_size": 8,
        "bptt_length": 4,
        "learning_rate": 3e-3,
        "torch_threads": 1,
        "recurrent": "gru",
        **changes,
    }
    config = JointTrainerConfig(**settings)
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=0), config)


def test_the_trainer_resolves_auto_and_says_why():
    trainer = _trainer()
    assert trainer.config.recurrent_replay == "cells"
    assert trainer.derived["recurrent_replay"].startswith("cells: the learner runs on cpu")
    assert "recurrent_replay" not in _trainer(recurrent_replay="fused").derived
    assert _trainer(recurrent_replay="fused").config.recurrent_replay == "fused"
    feed_forward = _trainer(recurrent=None)
    assert feed_forward.config.recurrent_replay == "auto" and "recurrent_replay" not in feed_forward.derived


@pytest.mark.parametrize(
    ("env_fn", "kind", "sharing"),
    [
        (MEMORY, "gru", True),
        (MEMORY, "lstm", False),
        (kuhn_poker_v0.env, "gru", False),
        (kuhn_poker_v0.env, "lstm", True),
    ],
)
def test_training_with_the_fused_replay_follows_the_cells(env_fn, kind, sharing):
    losses = {}
    for replay in ("cells", "fused"):
        trainer = _trainer(env_fn, recurrent=kind, share_parameters=sharing, recurrent_replay=replay)
        losses[replay] = [trainer.update(trainer.collect_rollout()).total_loss for _ in range(3)]
    # The same rollouts act from weights that differ by rounding only; the losses follow each other closely.
    assert losses["fused"] == pytest.approx(losses["cells"], rel=1e-3, abs=1e-4)


def test_marljoint_train_refuses_a_bad_replay_in_one_line(tmp_path, capsys):
    config = tiny_config(tmp_path, 'recurrent = "gru"\nrecurrent_replay = "fast"\n')
    assert run_cli(train_args(tmp_path / "run", config)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recurrent_replay must be one of ['auto', 'cells', 'fused']" in err


def test_config_toml_holds_the_resolved_replay_and_its_reason(tmp_path):
    config = tiny_config(tmp_path, 'recurrent = "gru"\n')
    assert run_cli(train_args(tmp_path / "run", config, 64)) == 0
    text = (tmp_path / "run" / "config.toml").read_text()
    assert 'recurrent_replay = "cells"' in text
    assert "derived from this machine (cells: the learner runs on cpu" in text


def test_a_run_resumes_with_the_other_replay(tmp_path):
    config = tiny_config(tmp_path, 'recurrent = "lstm"\n')
    assert run_cli(train_args(tmp_path / "run", config, 2 * 64)) == 0
    assert run_cli(resume_args(tmp_path / "run", 4 * 64, "--set", "recurrent_replay=fused")) == 0
    assert 'recurrent_replay = "fused"' in (tmp_path / "run" / "config.toml").read_text()


def test_mock_env_replays_fused_with_agents_of_every_group():
    trainer = _trainer(mock_v0.parallel_env, recurrent="lstm", recurrent_replay="fused", share_parameters=False)
    stats = trainer.update(trainer.collect_rollout())
    assert torch.isfinite(torch.tensor(stats.total_loss))
