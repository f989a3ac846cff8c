"""The stacked GRU/LSTM cells against PyTorch's own cells, member by member, and their sequence resets."""

import pytest
import torch

from marljoint.policies.recurrent import StackedRecurrentCell


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_each_member_computes_what_torchs_cell_computes(kind):
    torch.manual_seed(0)
    members, batch, inputs, hidden = 3, 5, 4, 6
    cell = StackedRecurrentCell(members, inputs, hidden, kind, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # non-zero biases, so their placement is checked too
        cell.bias_ih.normal_()
        cell.bias_hh.normal_()
    x = torch.randn(members, batch, inputs)
    state = torch.randn(members, batch, cell.state_size)
    out, new_state = cell.step(x, state)
    for m in range(members):
        reference = (torch.nn.GRUCell if kind == "gru" else torch.nn.LSTMCell)(inputs, hidden)
        with torch.no_grad():
            reference.weight_ih.copy_(cell.weight_ih[m].T)
            reference.weight_hh.copy_(cell.weight_hh[m].T)
            reference.bias_ih.copy_(cell.bias_ih[m])
            reference.bias_hh.copy_(cell.bias_hh[m])
            if kind == "gru":
                expected_h = reference(x[m], state[m])
                expected_state = expected_h
            else:
                expected_h, expected_c = reference(x[m], (state[m, :, :hidden], state[m, :, hidden:]))
                expected_state = torch.cat((expected_h, expected_c), -1)
        torch.testing.assert_close(out[m], expected_h, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(new_state[m], expected_state, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_sequence_resets_the_rows_whose_episode_starts(kind):
    cell = StackedRecurrentCell(2, 3, 4, kind, generator=torch.Generator().manual_seed(0))
    x = torch.randn(5, 2, 3, 3)
    start = torch.randn(2, 3, cell.state_size)
    starts = torch.zeros(5, 2, 3, dtype=torch.bool)
    starts[3, 1, 2] = True  # member 1, row 2: a new episode at step 3
    outputs, final = cell.forward_sequence(x, start, starts)
    state = start
    for t in range(5):  # the same steps one at a time
        if t == 3:
            state = state.clone()
            state[1, 2] = 0.0
        out, state = cell.step(x[t], state)
        torch.testing.assert_close(outputs[t], out)
    torch.testing.assert_close(final, state)
    # From the reset on, row (1, 2) no longer depends on its initial state.
    other = start.clone()
    other[1, 2] += 5.0
    outputs_other, _ = cell.forward_sequence(x, other, starts)
    assert not torch.allclose(outputs_other[2, 1, 2], outputs[2, 1, 2])
    torch.testing.assert_close(outputs_other[3:, 1, 2], outputs[3:, 1, 2])


def test_the_lstm_starts_with_its_forget_gate_open_and_bad_settings_are_refused():
    cell = StackedRecurrentCell(1, 2, 3, "lstm")
    assert cell.bias_ih[0, 3:6].tolist() == [1.0, 1.0, 1.0] and cell.bias_ih[0, :3].abs().sum() == 0
    assert cell.state_size == 6 and StackedRecurrentCell(1, 2, 3, "gru").state_size == 3
    with pytest.raises(ValueError, match=r"kind must be one of \['gru', 'lstm'\]"):
        StackedRecurrentCell(1, 2, 3, "rnn")
    with pytest.raises(ValueError, match="hidden_size must be a positive int"):
        StackedRecurrentCell(1, 2, 0)
    with pytest.raises(ValueError, match=r"forward_sequence takes x \[L, M, B, 2\]"):
        cell.forward_sequence(torch.zeros(3, 1, 4, 2), torch.zeros(1, 4, 5), torch.zeros(3, 1, 4, dtype=torch.bool))


def stepwise(cell, x, state, starts, advance):
    """forward_sequence's meaning, one autograd-recorded step at a time."""
    outputs = []
    for t in range(x.shape[0]):
        state = state * (~starts[t]).unsqueeze(-1)
        out, new_state = cell.step(x[t], state)
        state = new_state if advance is None else torch.where(advance[t].unsqueeze(-1), new_state, state)
        outputs.append(out)
    return torch.stack(outputs), state


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("with_advance", [False, True])
def test_the_hand_written_sequence_backward_matches_autograd_step_by_step(kind, with_advance):
    generator = torch.Generator().manual_seed(3)
    cells = [StackedRecurrentCell(3, 5, 4, kind, generator=generator).double() for _ in range(2)]
    for cell in cells:
        with torch.no_grad():
            cell.bias_ih.normal_(generator=generator)
            cell.bias_hh.normal_(generator=generator)
    length, members, batch = 9, 3, 6
    xs = [torch.randn(length, members, batch, 5, dtype=torch.double, generator=generator) for _ in cells]
    states = [torch.randn(members, batch, cells[0].state_size, dtype=torch.double, generator=generator) for _ in cells]
    starts = torch.rand(length, members, batch, generator=generator) < 0.2
    advance = torch.rand(length, members, batch, generator=generator) < 0.7 if with_advance else None
    weights = [torch.randn(length, members, batch, 4, dtype=torch.double, generator=generator) for _ in cells]

    def loss_and_grads(replay):
        inputs = [x.clone().requires_grad_() for x in xs]
        starting = [s.clone().requires_grad_() for s in states]
        results = replay(inputs, starting)
        loss = sum((out * w).sum() + (final**3).sum() for (out, final), w in zip(results, weights))
        leaves = [p for cell in cells for p in cell.parameters()] + inputs + starting
        return results, torch.autograd.grad(loss, leaves)

    fused, fused_grads = loss_and_grads(
        lambda inputs, starting: StackedRecurrentCell.forward_sequences(cells, inputs, starting, starts, advance)
    )
    reference, reference_grads = loss_and_grads(
        lambda inputs, starting: [stepwise(c, x, s, starts, advance) for c, x, s in zip(cells, inputs, starting)]
    )
    with torch.no_grad():  # the plain loop, which rollouts run: the same forward, bit for bit
        plain = StackedRecurrentCell.forward_sequences(cells, xs, states, starts, advance)
    for (out, final), (out_plain, final_plain), (out_ref, final_ref) in zip(fused, plain, reference):
        assert torch.equal(out, out_plain) and torch.equal(final, final_plain)
        torch.testing.assert_close((out, final), (out_ref, final_ref), rtol=1e-12, atol=1e-12)
    for grad, grad_ref in zip(fused_grads, reference_grads):
        torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)
