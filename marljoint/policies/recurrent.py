"""Recurrent cores held as M stacked members: GRU and LSTM cells evaluated for every member in one batched call.

The cells follow PyTorch's equations (:class:`torch.nn.GRUCell`, :class:`torch.nn.LSTMCell`), with the member axis
first on every parameter like the other stacked layers (:mod:`marljoint.policies.layers`), so parameter sharing
(M = 1, agents folded into the batch) and per-agent weights (M = n_g) are one code path and per-member
optimisation and clipping work unchanged. The state of one member's batch row is one tensor of
:attr:`StackedRecurrentCell.state_size` numbers: ``h`` for a GRU, ``h`` then ``c`` for an LSTM.

Replaying a chunk for the update is one autograd node per chunk with a hand-written backward (``_ChunkReplay``):
the same forward bits as the step loop the rollout runs, and about a third less update time than autograd
recording every cell step. On a GPU that loop is bound by kernel launches (several per step, forward and
backward), so the update can instead replay with torch's fused GRU/LSTM kernel (cuDNN): each chunk's rows are cut
into segments at every episode start, the steps a row does not advance are left out of its segments, and one
packed kernel call per member runs them all (``replay="fused"``, :data:`RECURRENT_REPLAYS`). It computes the same
function as the cells up to rounding, with gradients from torch's own autograd.
"""

from __future__ import annotations

import warnings
from typing import Literal, NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

__all__ = ["RECURRENT_KINDS", "RECURRENT_REPLAYS", "StackedRecurrentCell", "resolve_replay"]

RecurrentKind = Literal["gru", "lstm"]
RECURRENT_KINDS: tuple[str, ...] = ("gru", "lstm")
"""The recurrent cells a policy can have."""

_GATES = {"gru": 3, "lstm": 4}

RECURRENT_REPLAYS: tuple[str, ...] = ("auto", "cells", "fused")
"""How the update replays a recurrent chunk: ``"cells"`` steps the stacked cells through it (one autograd node per
chunk, the bits the rollout computes), ``"fused"`` runs torch's fused GRU/LSTM kernel (cuDNN on a GPU) once per
member over the chunk's episode segments, ``"auto"`` picks fused on CUDA and cells elsewhere."""


def resolve_replay(setting: str, device: torch.device | str) -> tuple[str, str]:
    """The replay ``setting`` resolves to on ``device``, and why.

    Args:
        setting: one of :data:`RECURRENT_REPLAYS`.
        device: the learner's device.

    Returns:
        ``("cells" | "fused", reason)``.

    Raises:
        ValueError: for a ``setting`` outside :data:`RECURRENT_REPLAYS`.

    Example:
        >>> resolve_replay("auto", "cpu")[0], resolve_replay("auto", "cuda:0")[0], resolve_replay("fused", "cpu")[0]
        ('cells', 'fused', 'fused')
    """
    if setting not in RECURRENT_REPLAYS:
        raise ValueError(
            f"recurrent_replay must be one of {list(RECURRENT_REPLAYS)}, got {setting!r}; 'auto' picks the fused "
            "kernel on CUDA and the cells elsewhere"
        )
    if setting != "auto":
        return setting, f"{setting}: set explicitly"
    kind = torch.device(device).type
    if kind == "cuda":
        return "fused", (
            "fused: the learner runs on CUDA, where stepping the cells costs kernel launches at every step of "
            "every chunk and one fused GRU/LSTM kernel per member replays a whole chunk"
        )
    return "cells", (
        f"cells: the learner runs on {kind}, where the stacked cells are faster than the fused kernel and compute "
        "exactly the bits the rollout acted with"
    )


class StackedRecurrentCell(nn.Module):
    """M independent GRU or LSTM cells.

    Member m's input-to-hidden weights are ``weight_ih[m]`` ``[in, G·h]`` and its hidden-to-hidden weights
    ``weight_hh[m]`` ``[h, G·h]`` (G = 3 gates r, z, n for a GRU; 4 gates i, f, g, o for an LSTM, in PyTorch's
    order). Each gate's block is initialised orthogonally per member and the biases are zero (as CleanRL's LSTM
    agent does), except the LSTM forget gate's input bias, which is 1 so that a new cell keeps its memory.

    Args:
        members: number of members M.
        in_features: input size.
        hidden_size: h, the size of the output (and of ``h``).
        kind: ``"gru"`` or ``"lstm"``.
        generator: source of the initial weights; ``None`` draws from torch's default generator.

    Raises:
        ValueError: for an unknown ``kind`` or a non-positive size.

    Example:
        >>> import torch
        >>> cell = StackedRecurrentCell(2, 5, 8, "lstm", generator=torch.Generator().manual_seed(0))
        >>> state = cell.initial_state(3)
        >>> out, state = cell.step(torch.zeros(2, 3, 5), state)
        >>> out.shape, state.shape
        (torch.Size([2, 3, 8]), torch.Size([2, 3, 16]))
    """

    def __init__(
        self,
        members: int,
        in_features: int,
        hidden_size: int,
        kind: RecurrentKind = "gru",
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if kind not in _GATES:
            raise ValueError(f"kind must be one of {list(RECURRENT_KINDS)} (the recurrent cell), got {kind!r}")
        for name, value in (("members", members), ("in_features", in_features), ("hidden_size", hidden_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.members, self.in_features, self.hidden_size, self.kind = members, in_features, hidden_size, kind
        gates = _GATES[kind]
        self.weight_ih = nn.Parameter(torch.empty(members, in_features, gates * hidden_size))
        self.weight_hh = nn.Parameter(torch.empty(members, hidden_size, gates * hidden_size))
        self.bias_ih = nn.Parameter(torch.zeros(members, gates * hidden_size))
        self.bias_hh = nn.Parameter(torch.zeros(members, gates * hidden_size))
        with torch.no_grad():
            for member in range(members):
                for gate in range(gates):
                    block = slice(gate * hidden_size, (gate + 1) * hidden_size)
                    nn.init.orthogonal_(self.weight_ih[member, :, block].T, generator=generator)
                    nn.init.orthogonal_(self.weight_hh[member, :, block].T, generator=generator)
            if kind == "lstm":
                self.bias_ih[:, hidden_size : 2 * hidden_size] = 1.0

    @property
    def state_size(self) -> int:
        """Numbers in one row's state: h for a GRU, 2h (``h`` then ``c``) for an LSTM."""
        return self.hidden_size * (2 if self.kind == "lstm" else 1)

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The zero state of ``batch`` rows, ``[M, batch, state_size]``."""
        return torch.zeros(self.members, batch, self.state_size, device=device or self.weight_ih.device)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of every member on member-major rows.

        Args:
            x: ``[M, B, in_features]`` inputs.
            state: ``[M, B, state_size]`` states.

        Returns:
            ``(output [M, B, h], new state [M, B, state_size])``; the output is the new ``h``.
        """
        return self._cell(torch.baddbmm(self.bias_ih.unsqueeze(1), x, self.weight_ih), state)

    def _cell(self, gates_x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step from the input's gate pre-activations ``[M, B, G·h]`` (``x W_ih + b_ih``)."""
        return _cell(self.kind, self.hidden_size, gates_x, state, self.weight_hh, self.bias_hh)

    def forward_sequence(
        self,
        x: torch.Tensor,
        state: torch.Tensor,
        starts: torch.Tensor,
        advance: torch.Tensor | None = None,
        *,
        replay: str = "cells",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs a sequence chunk from its initial state, zeroing the state of rows where an episode starts.

        Args:
            x: ``[L, M, B, in_features]`` inputs of L consecutive steps.
            state: ``[M, B, state_size]`` the state before the first step.
            starts: ``[L, M, B]`` bool; True where a row's episode starts at that step (its state is reset to zero
                before the step).
            advance: ``[L, M, B]`` bool, or ``None`` (every row advances); a row set to False keeps its state
                through that step (an absent agent, or a player waiting for its turn). Its output is still
                computed, from the kept state.
            replay: ``"cells"`` (the stacked cells step through the chunk: the rollout's bits) or ``"fused"``
                (torch's fused kernel over the chunk's segments cut at every reset, the steps a row does not
                advance left out of them; equal up to rounding).

        Returns:
            ``(outputs [L, M, B, h], the state after the last step [M, B, state_size])``.

        Raises:
            ValueError: if the shapes disagree, or for an unknown ``replay``.
        """
        if (
            x.dim() != 4
            or starts.shape != x.shape[:3]
            or state.shape != (*x.shape[1:3], self.state_size)
            or (advance is not None and advance.shape != x.shape[:3])
        ):
            raise ValueError(
                f"forward_sequence takes x [L, M, B, {self.in_features}], state [M, B, {self.state_size}], starts "
                f"and advance [L, M, B]; got {tuple(x.shape)}, {tuple(state.shape)} and {tuple(starts.shape)}"
            )
        return _replay_with(replay, [self], [x], [state], starts, advance)[0]

    @staticmethod
    def forward_sequences(
        cells: list[StackedRecurrentCell],
        xs: list[torch.Tensor],
        states: list[torch.Tensor],
        starts: torch.Tensor,
        advance: torch.Tensor | None = None,
        *,
        replay: str = "cells",
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`forward_sequence` of several cells over the same rows (an actor's and a critic's core), stepped
        side by side as one stack of all their members when they have the same kind and sizes: one sequential
        loop instead of one per cell, each member computing exactly what it computes alone.

        Args:
            cells: the cells.
            xs: per cell, ``[L, M_c, B, in_features]``.
            states: per cell, ``[M_c, B, state_size]``.
            starts: ``[L, M, B]`` (the same rows for every cell, so ``M_c = M``).
            advance: ``[L, M, B]`` or ``None``.
            replay: ``"cells"`` or ``"fused"``, as :meth:`forward_sequence` takes it.

        Returns:
            Per cell, ``(outputs, final state)`` as :meth:`forward_sequence` returns them.

        Raises:
            ValueError: for an unknown ``replay``.
        """
        first = cells[0]
        shape = (first.kind, first.in_features, first.hidden_size, first.members)
        alike = all((c.kind, c.in_features, c.hidden_size, c.members) == shape for c in cells)
        if not alike or any(x.shape != xs[0].shape for x in xs):
            return [c.forward_sequence(x, s, starts, advance, replay=replay) for c, x, s in zip(cells, xs, states)]
        return _replay_with(replay, cells, xs, states, starts, advance)

    @staticmethod
    def steps(
        cells: list[StackedRecurrentCell], xs: list[torch.Tensor], states: list[torch.Tensor]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`step` of several cells over the same rows, side by side as :meth:`forward_sequences` replays
        them (the same numbers): per cell ``(output [M, B, h], new state)`` from ``[M, B, in]`` inputs."""
        first = cells[0]
        shape = (first.kind, first.in_features, first.hidden_size, first.members)
        if any((c.kind, c.in_features, c.hidden_size, c.members) != shape for c in cells) or any(
            x.shape != xs[0].shape for x in xs
        ):
            return [c.step(x, s) for c, x, s in zip(cells, xs, states)]
        starts = torch.zeros((1, *xs[0].shape[:2]), dtype=torch.bool, device=xs[0].device)
        replayed = _replay(cells, [x.unsqueeze(0) for x in xs], states, starts, None)
        return [(out[0], state) for out, state in replayed]

    def extra_repr(self) -> str:
        return f"members={self.members}, in_features={self.in_features}, hidden_size={self.hidden_size}, {self.kind}"


def _replay_with(
    replay: str,
    cells: list[StackedRecurrentCell],
    xs: list[torch.Tensor],
    states: list[torch.Tensor],
    starts: torch.Tensor,
    advance: torch.Tensor | None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`_fused_replay` or :func:`_replay`, as ``replay`` says."""
    if replay not in ("cells", "fused"):
        raise ValueError(f"replay must be 'cells' or 'fused' (resolve 'auto' with resolve_replay), got {replay!r}")
    if replay == "fused":
        return _fused_replay(cells, xs, states, starts, advance)
    return _replay(cells, xs, states, starts, advance)


def _replay(
    cells: list[StackedRecurrentCell],
    xs: list[torch.Tensor],
    states: list[torch.Tensor],
    starts: torch.Tensor,
    advance: torch.Tensor | None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Replays cells of one kind and size side by side: their members stacked (``[K·M, ...]``), one loop."""
    cell = cells[0]
    k = len(cells)
    cat = (lambda ts: ts[0]) if k == 1 else (lambda ts: torch.cat(ts))
    weight_ih, weight_hh = cat([c.weight_ih for c in cells]), cat([c.weight_hh for c in cells])
    bias_ih, bias_hh = cat([c.bias_ih for c in cells]), cat([c.bias_hh for c in cells])
    x = xs[0] if k == 1 else torch.cat(xs, dim=1)  # [L, K·M, B, f]
    state = cat(states)
    length, members, batch = x.shape[:3]
    # The input's share of the gates for every step in one product; only the recurrence is sequential.
    inputs = x.transpose(0, 1).reshape(members, length * batch, cell.in_features)
    gates_x = torch.baddbmm(bias_ih.unsqueeze(1), inputs, weight_ih).reshape(members, length, batch, -1)
    keep = (~starts).unsqueeze(-1).to(state.dtype)
    moves = None if advance is None else advance.unsqueeze(-1)
    if k > 1:
        keep = keep.repeat(1, k, 1, 1)
        moves = None if moves is None else moves.repeat(1, k, 1, 1)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (gates_x, state, weight_hh, bias_hh))
    if needs_grad:
        out_all, state = _ChunkReplay.apply(cell.kind, gates_x.transpose(0, 1), state, weight_hh, bias_hh, keep, moves)
    else:
        outputs = []
        for t, gates_t in enumerate(gates_x.unbind(1)):
            state = state * keep[t]
            out, new_state = _cell(cell.kind, cell.hidden_size, gates_t, state, weight_hh, bias_hh)
            state = new_state if moves is None else torch.where(moves[t], new_state, state)
            outputs.append(out)
        out_all = torch.stack(outputs)
    m = members // k
    return [(out_all[:, i * m : (i + 1) * m], state[i * m : (i + 1) * m]) for i in range(k)]


def _cell(
    kind: str, h: int, gates_x: torch.Tensor, state: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step from the input's gate pre-activations ``[M, B, G·h]`` (``x W_ih + b_ih``)."""
    # split/unbind rather than slices: autograd then joins the gradients once, where a slice's backward fills a
    # whole zero tensor per slice.
    hidden, memory = (state, None) if kind == "gru" else state.split(h, dim=-1)
    gates_h = torch.baddbmm(bias_hh.unsqueeze(1), hidden, weight_hh)
    if kind == "gru":
        x_r, x_z, x_n = gates_x.split(h, dim=-1)
        h_r, h_z, h_n = gates_h.split(h, dim=-1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        new_h = n + z * (hidden - n)
        return new_h, new_h
    i, f, g, o = (gates_x + gates_h).split(h, dim=-1)
    c = torch.sigmoid(f) * memory + torch.sigmoid(i) * torch.tanh(g)
    new_h = torch.sigmoid(o) * torch.tanh(c)
    return new_h, torch.cat((new_h, c), dim=-1)


class _ChunkReplay(torch.autograd.Function):
    """A GRU's or an LSTM's recurrence over a whole chunk, with a hand-written backward.

    The forward computes exactly what :func:`_replay`'s step loop computes (the same operations in the same order,
    so the same bits), keeping each step's gates; the backward walks the chunk in reverse with the cell's
    derivatives (fewer and larger operations than autograd records step by step), and forms the hidden-to-hidden
    weight gradient in one batched product over all steps.

    Inputs: ``kind`` (``"gru"`` or ``"lstm"``), ``gates_x [L, M, B, G·h]`` (``x W_ih + b_ih``), ``state [M, B, S]``,
    ``weight_hh [M, h, G·h]``, ``bias_hh [M, G·h]``, ``keep [L, M, B, 1]`` (0 where an episode starts), ``moves
    [L, M, B, 1]`` bool or None. Outputs: ``(outputs [L, M, B, h], final state [M, B, S])``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        kind: str,
        gates_x: torch.Tensor,
        state: torch.Tensor,
        weight_hh: torch.Tensor,
        bias_hh: torch.Tensor,
        keep: torch.Tensor,
        moves: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        run = _gru_forward if kind == "gru" else _lstm_forward
        outputs, state, saved = run(gates_x, state, weight_hh, bias_hh, keep, moves)
        ctx.save_for_backward(weight_hh, keep, *saved, *(() if moves is None else (moves,)))
        ctx.kind, ctx.has_moves = kind, moves is not None
        return outputs, state

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_outputs: torch.Tensor, grad_state: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        weight_hh, keep, *saved = ctx.saved_tensors
        moves = saved.pop() if ctx.has_moves else None
        run = _gru_backward if ctx.kind == "gru" else _lstm_backward
        grad_x, grad_start, grad_gates_h, hidden = run(saved, weight_hh, keep, moves, grad_outputs, grad_state)
        grad_weight, grad_bias = _hidden_weight_grads(hidden, grad_gates_h)
        return None, grad_x, grad_start, grad_weight, grad_bias, None, None


def _gru_forward(
    gates_x: torch.Tensor,
    state: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_hh: torch.Tensor,
    keep: torch.Tensor,
    moves: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The GRU chunk: ``(outputs, final state, [kept states, r, z, n, h_n] stacked over steps)``."""
    h = state.shape[-1]
    saved: list[list[torch.Tensor]] = [[] for _ in range(5)]
    outputs = []
    for t in range(gates_x.shape[0]):
        state = state * keep[t]
        gates_h = torch.baddbmm(bias_hh.unsqueeze(1), state, weight_hh)
        x_r, x_z, x_n = gates_x[t].split(h, dim=-1)
        h_r, h_z, h_n = gates_h.split(h, dim=-1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        new_h = n + z * (state - n)
        for store, value in zip(saved, (state, r, z, n, h_n)):
            store.append(value)
        outputs.append(new_h)
        state = new_h if moves is None else torch.where(moves[t], new_h, state)
    return torch.stack(outputs), state, [torch.stack(x) for x in saved]


def _lstm_forward(
    gates_x: torch.Tensor,
    state: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_hh: torch.Tensor,
    keep: torch.Tensor,
    moves: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The LSTM chunk: ``(outputs, final state, [kept states, σ(i), σ(f), tanh(g), σ(o), tanh(c)] stacked)``."""
    h = state.shape[-1] // 2
    saved: list[list[torch.Tensor]] = [[] for _ in range(6)]
    outputs = []
    for t in range(gates_x.shape[0]):
        state = state * keep[t]
        hidden, memory = state.split(h, dim=-1)
        gates_h = torch.baddbmm(bias_hh.unsqueeze(1), hidden, weight_hh)
        i, f, g, o = (gates_x[t] + gates_h).split(h, dim=-1)
        input_gate, forget_gate, candidate, output_gate = (
            torch.sigmoid(i),
            torch.sigmoid(f),
            torch.tanh(g),
            torch.sigmoid(o),
        )
        c = forget_gate * memory + input_gate * candidate
        squashed = torch.tanh(c)
        new_h = output_gate * squashed
        for store, value in zip(saved, (state, input_gate, forget_gate, candidate, output_gate, squashed)):
            store.append(value)
        outputs.append(new_h)
        new_state = torch.cat((new_h, c), dim=-1)
        state = new_state if moves is None else torch.where(moves[t], new_state, state)
    return torch.stack(outputs), state, [torch.stack(x) for x in saved]


def _split_carried(carried: torch.Tensor, moves_t: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The gradient reaching a step's new state, and the one passing through rows that did not move (None: all
    moved)."""
    if moves_t is None:
        return carried, None
    return torch.where(moves_t, carried, 0.0), torch.where(moves_t, 0.0, carried)


def _gru_backward(
    saved: list[torch.Tensor],
    weight_hh: torch.Tensor,
    keep: torch.Tensor,
    moves: torch.Tensor | None,
    grad_outputs: torch.Tensor,
    grad_state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(grad of gates_x, grad of the start state, grad of the hidden gates [L, M, B, 3h], their inputs)``."""
    kept, resets, updates, candidates, hidden_n = saved
    weight_t = weight_hh.transpose(1, 2)
    grad_hidden_gates, grad_input_gates = [], []
    carried = grad_state
    for t in reversed(range(kept.shape[0])):
        grad_new, grad_kept = _split_carried(carried, None if moves is None else moves[t])
        grad_new = grad_new + grad_outputs[t]
        r, z, n = resets[t], updates[t], candidates[t]
        grad_a_n = grad_new * (1.0 - z) * (1.0 - n * n)
        grad_a_z = grad_new * (kept[t] - n) * z * (1.0 - z)
        grad_a_r = grad_a_n * hidden_n[t] * r * (1.0 - r)
        grad_h = torch.cat((grad_a_r, grad_a_z, grad_a_n * r), dim=-1)
        grad_input_gates.append(torch.cat((grad_a_r, grad_a_z, grad_a_n), dim=-1))
        grad_hidden_gates.append(grad_h)
        through = grad_new * z + torch.bmm(grad_h, weight_t)
        carried = (through if grad_kept is None else grad_kept + through) * keep[t]
    return torch.stack(grad_input_gates[::-1]), carried, torch.stack(grad_hidden_gates[::-1]), kept


def _lstm_backward(
    saved: list[torch.Tensor],
    weight_hh: torch.Tensor,
    keep: torch.Tensor,
    moves: torch.Tensor | None,
    grad_outputs: torch.Tensor,
    grad_state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """As :func:`_gru_backward`; an LSTM's input and hidden gates share one gradient."""
    kept, input_gate, forget_gate, candidate, output_gate, squashed = saved
    h = kept.shape[-1] // 2
    weight_t = weight_hh.transpose(1, 2)
    grad_gate_steps = []
    carried = grad_state
    for t in reversed(range(kept.shape[0])):
        grad_new, grad_kept = _split_carried(carried, None if moves is None else moves[t])
        grad_h, grad_c = grad_new.split(h, dim=-1)
        grad_h = grad_h + grad_outputs[t]
        i, f, g, o, tc = input_gate[t], forget_gate[t], candidate[t], output_gate[t], squashed[t]
        grad_c = grad_c + grad_h * o * (1.0 - tc * tc)
        memory = kept[t, ..., h:]
        grad_gates = torch.cat(
            (
                grad_c * g * i * (1.0 - i),
                grad_c * memory * f * (1.0 - f),
                grad_c * i * (1.0 - g * g),
                grad_h * tc * o * (1.0 - o),
            ),
            dim=-1,
        )
        grad_gate_steps.append(grad_gates)
        through = torch.cat((torch.bmm(grad_gates, weight_t), grad_c * f), dim=-1)
        carried = (through if grad_kept is None else grad_kept + through) * keep[t]
    grad_gates_all = torch.stack(grad_gate_steps[::-1])
    return grad_gates_all, carried, grad_gates_all, kept[..., :h].contiguous()


def _hidden_weight_grads(hidden: torch.Tensor, grad_gates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``weight_hh`` ``[M, h, G·h]`` and ``bias_hh`` ``[M, G·h]`` from every step's hidden input
    ``[L, M, B, h]`` and the gradient of its gate pre-activations ``[L, M, B, G·h]``: one batched product."""
    members = hidden.shape[1]
    grad_weight = torch.bmm(
        hidden.transpose(0, 1).reshape(members, -1, hidden.shape[-1]).transpose(1, 2),
        grad_gates.transpose(0, 1).reshape(members, -1, grad_gates.shape[-1]),
    )
    return grad_weight, grad_gates.sum(dim=(0, 2))


class _Segments(NamedTuple):
    """The stretches of a chunk's rows that one fused kernel call can run: the advancing steps of a row between
    two resets, in step order. Rows are member-major (``r = m × B + b``); flat positions are ``r × L + t``.

    Attributes:
        index: ``[P]`` flat position of every advancing step, in position order.
        segment: ``[P]`` its segment; segments are numbered in position order, so member-major.
        place: ``[P]`` its place within its segment.
        row: ``[G]`` the row of every segment.
        from_state: ``[G]`` bool, the segment starts from its row's given state (no reset before it); else zero.
        previous: ``[R, L]`` the row's last advancing step before each step (-1: none).
        reset: ``[R, L]`` bool, an episode starts after ``previous`` and at or before the step.
        last_segment: ``[R]`` the segment of the row's last advancing step (-1: the row never advances).
        reset_after: ``[R]`` bool, an episode starts after that step (the final state is zero).
        lengths: ``[G]`` (CPU) the segments' lengths.
        per_member: the number of segments of each member.
        held: ``[H]`` flat position of every step that does not advance (its output comes from the state its row
            keeps), in position order.
        held_per_member: the number of those steps of each member.
        keeps_memory: some step that does not advance keeps a state an earlier step of the chunk made (an LSTM's
            cell memory there is not among the fused kernel's outputs).
    """

    index: torch.Tensor
    segment: torch.Tensor
    place: torch.Tensor
    row: torch.Tensor
    from_state: torch.Tensor
    previous: torch.Tensor
    reset: torch.Tensor
    last_segment: torch.Tensor
    reset_after: torch.Tensor
    lengths: torch.Tensor
    per_member: list[int]
    held: torch.Tensor
    held_per_member: list[int]
    keeps_memory: bool


def _segments(starts: torch.Tensor, advance: torch.Tensor | None) -> _Segments:
    """Cuts the rows of a chunk (``starts`` and ``advance`` ``[L, M, B]``) into :class:`_Segments` with tensor
    operations; the device is waited for three times a replay (two ``nonzero`` and one transfer of the sizes to the
    CPU, which the packed kernel call needs), not at every step."""
    length, members, batch = starts.shape
    rows = members * batch
    st = starts.permute(1, 2, 0).reshape(rows, length)
    adv = torch.ones_like(st) if advance is None else advance.permute(1, 2, 0).reshape(rows, length)
    steps = torch.arange(length, device=st.device).expand(rows, length)
    last_upto = torch.where(adv, steps, -1).cummax(dim=1).values
    previous = torch.cat((torch.full_like(last_upto[:, :1], -1), last_upto[:, :-1]), dim=1)
    started = st.long().cumsum(dim=1)
    started_before = torch.where(previous >= 0, started.gather(1, previous.clamp(min=0)), 0)
    reset = started > started_before
    first = (adv & ((previous < 0) | reset)).reshape(-1)
    segment_of = first.long().cumsum(0) - 1
    index = adv.reshape(-1).nonzero().squeeze(1)
    firsts = first.nonzero().squeeze(1)
    compacted = adv.long().cumsum(dim=1).reshape(-1) - 1
    segment = segment_of[index]
    last = last_upto[:, -1]
    last_at = last.clamp(min=0).unsqueeze(1)
    lengths = torch.bincount(segment, minlength=firsts.shape[0])
    per_member = torch.bincount(torch.div(firsts, length * batch, rounding_mode="floor"), minlength=members)
    holding = ~adv
    held = holding.reshape(-1).nonzero().squeeze(1)
    held_per_member = torch.bincount(torch.div(held, length * batch, rounding_mode="floor"), minlength=members)
    keeps_memory = (holding & ~reset & (previous >= 0)).any().reshape(1).long()
    sizes = torch.cat((per_member, held_per_member, keeps_memory, lengths)).cpu()
    return _Segments(
        index=index,
        segment=segment,
        place=compacted[index] - compacted[firsts][segment],
        row=torch.div(firsts, length, rounding_mode="floor"),
        from_state=(previous.reshape(-1)[firsts] < 0) & ~reset.reshape(-1)[firsts],
        previous=previous,
        reset=reset,
        last_segment=torch.where(last >= 0, segment_of.view(rows, length).gather(1, last_at).squeeze(1), -1),
        reset_after=started[:, -1] > torch.where(last >= 0, started.gather(1, last_at).squeeze(1), 0),
        lengths=sizes[2 * members + 1 :],
        per_member=sizes[:members].tolist(),
        held=held,
        held_per_member=sizes[members : 2 * members].tolist(),
        keeps_memory=bool(sizes[2 * members]),
    )


def _fused_replay(
    cells: list[StackedRecurrentCell],
    xs: list[torch.Tensor],
    states: list[torch.Tensor],
    starts: torch.Tensor,
    advance: torch.Tensor | None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`_replay` with torch's fused kernels: the chunk's rows cut into segments at every reset, the steps a
    row does not advance left out of them, one packed kernel call per member."""
    segments = _segments(starts, advance)
    return [_fused_cell(c, x, s, segments) for c, x, s in zip(cells, xs, states)]


def _fused_cell(
    cell: StackedRecurrentCell, x: torch.Tensor, state: torch.Tensor, segments: _Segments
) -> tuple[torch.Tensor, torch.Tensor]:
    """One cell's fused replay of ``x`` ``[L, M, B, in]`` from ``state`` ``[M, B, S]``: ``(outputs [L, M, B, h],
    final state [M, B, S])``."""
    length, members, batch = x.shape[:3]
    rows, h = members * batch, cell.hidden_size
    flat_x = x.permute(1, 2, 0, 3).reshape(rows * length, x.shape[-1])
    count = int(segments.lengths.shape[0])
    longest = int(segments.lengths.max()) if count else 0
    padded = flat_x.new_zeros(count, longest, x.shape[-1]).index_put(
        (segments.segment, segments.place), flat_x[segments.index]
    )
    state_rows = state.reshape(rows, -1)
    initial = state_rows[segments.row] * segments.from_state.unsqueeze(1).to(state.dtype)
    # An LSTM step that does not advance needs the cell memory its row kept, which the kernel does not return.
    wants_memory = cell.kind == "lstm" and segments.keeps_memory
    outputs, finals, memories, first = [], [], [], 0
    for member, size in enumerate(segments.per_member):
        if size:
            end = first + size
            out, final = _fused_member(cell, member, padded[first:end], initial[first:end], segments.lengths[first:end])
            outputs.append(out)
            finals.append(final)
            if wants_memory:
                memories.append(_lstm_memories(cell, member, padded[first:end], initial[first:end], out))
            first = end
    flat_state = flat_out = flat_x.new_zeros(rows * length, h)
    if count:
        flat_state = flat_out = flat_out.index_put((segments.index,), _at_steps(outputs, segments))
    if wants_memory:
        flat_memory = torch.zeros_like(flat_out).index_put((segments.index,), _at_steps(memories, segments))
        flat_state = torch.cat((flat_out, flat_memory), dim=1)
    elif cell.kind == "lstm":
        flat_state = torch.cat((flat_out, torch.zeros_like(flat_out)), dim=1)
    if segments.held.shape[0]:
        flat_out = flat_out.index_put((segments.held,), _held_outputs(cell, flat_x, state_rows, flat_state, segments))
    final_rows = state_rows
    if count:
        last = segments.last_segment
        final_rows = torch.where((last >= 0).unsqueeze(1), torch.cat(finals)[last.clamp(min=0)], state_rows)
    final_rows = final_rows * (~segments.reset_after).unsqueeze(1).to(state.dtype)
    outputs_lmb = flat_out.reshape(members, batch, length, h).permute(2, 0, 1, 3)
    return outputs_lmb, final_rows.reshape(members, batch, -1)


def _at_steps(per_member: list[torch.Tensor], segments: _Segments) -> torch.Tensor:
    """``[P, ·]``: the values of the advancing steps, in position order, from per-member ``[G_m, L', ·]``."""
    return torch.cat(per_member)[segments.segment, segments.place]


def _held_outputs(
    cell: StackedRecurrentCell,
    flat_x: torch.Tensor,
    state_rows: torch.Tensor,
    flat_state: torch.Tensor,
    segments: _Segments,
) -> torch.Tensor:
    """``[H, h]``: the outputs of the steps that do not advance, each one cell step from the state its row keeps
    there (one product per member), where ``flat_state`` ``[R × L, S]`` is the state after each advancing step (an
    LSTM's memory is needed, and there, only where :attr:`_Segments.keeps_memory`)."""
    length = segments.previous.shape[1]
    held = segments.held
    row = torch.div(held, length, rounding_mode="floor")
    previous = segments.previous.reshape(-1)[held]
    made = flat_state[row * length + previous.clamp(min=0)]
    before = torch.where((previous >= 0).unsqueeze(1), made, state_rows[row])
    before = before * (~segments.reset.reshape(-1)[held]).unsqueeze(1).to(before.dtype)
    outputs, first = [], 0
    for member, size in enumerate(segments.held_per_member):
        if size:
            end = first + size
            gates_x = torch.addmm(cell.bias_ih[member], flat_x[held[first:end]], cell.weight_ih[member])
            out, _ = _cell(
                cell.kind,
                cell.hidden_size,
                gates_x.unsqueeze(0),
                before[first:end].unsqueeze(0),
                cell.weight_hh[member : member + 1],
                cell.bias_hh[member : member + 1],
            )
            outputs.append(out[0])
            first = end
    return torch.cat(outputs)


def _fused_member(
    cell: StackedRecurrentCell, member: int, x: torch.Tensor, initial: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Member ``member``'s kernel call over segments ``x`` ``[G, L', in]`` of ``lengths`` (CPU) from ``initial``
    ``[G, S]``: ``(outputs [G, L', h] (zero past a segment's length), final states [G, S])``."""
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    order, back = packed.sorted_indices, packed.unsorted_indices
    assert order is not None and back is not None
    hx = initial.index_select(0, order).unsqueeze(0)
    # torch's kernels take PyTorch's layout, [G·h, in], where ours puts the member axis first and transposes.
    weights = [
        cell.weight_ih[member].T.contiguous(),
        cell.weight_hh[member].T.contiguous(),
        cell.bias_ih[member],
        cell.bias_hh[member],
    ]
    train = torch.is_grad_enabled()
    with warnings.catch_warnings():
        # cuDNN copies weights that are not one flat buffer and says so at every call; these are small and
        # change at every optimizer step, so the copy is what a flat buffer would cost anyway.
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
        if cell.kind == "gru":
            out, h_n = torch._VF.gru(
                packed.data, packed.batch_sizes, hx.contiguous(), weights, True, 1, 0.0, train, False
            )
            final = h_n[0]
        else:
            h = cell.hidden_size
            pair = (hx[..., :h].contiguous(), hx[..., h:].contiguous())
            out, h_n, c_n = torch._VF.lstm(packed.data, packed.batch_sizes, pair, weights, True, 1, 0.0, train, False)
            final = torch.cat((h_n[0], c_n[0]), dim=-1)
    unpacked, _ = pad_packed_sequence(
        PackedSequence(out, packed.batch_sizes, order, back), batch_first=True, total_length=x.shape[1]
    )
    return unpacked, final.index_select(0, back)


def _lstm_memories(
    cell: StackedRecurrentCell, member: int, x: torch.Tensor, initial: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """``[G, L', h]``: an LSTM's cell memory after every step of member ``member``'s segments, from their inputs
    ``x`` ``[G, L', in]``, initial states ``[G, 2h]`` and the kernel's outputs ``out`` ``[G, L', h]``.

    The gates are recomputed in two batched products (each step's hidden input is the previous output); the
    recurrence ``c_t = f_t c_(t-1) + i_t g_t`` is then linear and runs as a parallel prefix scan, log2 L' rounds of
    whole-tensor operations rather than L' steps. Positions past a segment's length hold values nothing reads.
    """
    h = cell.hidden_size
    hidden_before = torch.cat((initial[:, None, :h], out[:, :-1]), dim=1)
    gates = torch.addmm(cell.bias_ih[member], x.reshape(-1, x.shape[-1]), cell.weight_ih[member]) + torch.addmm(
        cell.bias_hh[member], hidden_before.reshape(-1, h), cell.weight_hh[member]
    )
    i, f, g, _ = gates.reshape(*x.shape[:2], -1).split(h, dim=-1)
    decay = torch.sigmoid(f)
    memory = torch.sigmoid(i) * torch.tanh(g)
    memory = torch.cat((memory[:, :1] + decay[:, :1] * initial[:, None, h:], memory[:, 1:]), dim=1)
    shift = 1
    while shift < x.shape[1]:
        # After this round each step holds the recurrence over the 2·shift steps up to it.
        memory = torch.cat((memory[:, :shift], memory[:, shift:] + decay[:, shift:] * memory[:, :-shift]), dim=1)
        decay = torch.cat((decay[:, :shift], decay[:, shift:] * decay[:, :-shift]), dim=1)
        shift *= 2
    return memory
