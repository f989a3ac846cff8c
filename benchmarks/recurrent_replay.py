"""Times one update's chunk replay of a recurrent policy, stacked cells against the fused GRU/LSTM kernel.

Each case is what one minibatch of a recurrent update replays: an actor's and a critic's core
(:meth:`marljoint.policies.recurrent.StackedRecurrentCell.forward_sequences`) over ``B`` chunks of ``L`` steps
for ``M`` members (``M = 1``: parameter sharing, the agents folded into the batch; ``M = n``: one network per
agent), forward and backward. Episodes start at random steps (1 in 25 by default, as in 25-step MPE episodes), and
the last chunk of a rollout is padded; ``--skip`` makes that share of steps not advance (turn-based games, absent
agents). The table gives the median milliseconds of ``--repeats`` timed replays after ``--warmup`` untimed ones,
for ``--replay cells`` and ``fused``, and their ratio. On a GPU each step of the cells costs several kernel
launches forward and backward; the fused kernel runs a member's segments in one call.

    python benchmarks/recurrent_replay.py --device cpu
    python benchmarks/recurrent_replay.py --device cuda --repeats 50
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import NamedTuple

import torch

from marljoint.policies.recurrent import StackedRecurrentCell


class Case(NamedTuple):
    """One replay: ``members`` M, ``chunks`` B (rows per member), ``length`` L, ``hidden`` h (and input size)."""

    members: int
    chunks: int
    length: int
    hidden: int


CASES = (
    Case(1, 192, 16, 64),  # 3 agents sharing one network, 64 chunks of 16 steps each
    Case(3, 64, 16, 64),  # the same rows, one network per agent
    Case(1, 512, 32, 128),  # a larger minibatch of longer chunks
    Case(8, 64, 32, 128),  # eight agents with their own networks
)


def replay_inputs(case: Case, kind: str, device: str, skip: float, start: float, seed: int = 0):
    """``(cells, xs, states, starts, advance)`` of one case, the last ``L // 4`` steps of every 4th chunk padded
    (reset and not advancing, as the learner pads a rollout's last chunk)."""
    generator = torch.Generator().manual_seed(seed)
    m, b, length, h = case
    cells = [StackedRecurrentCell(m, h, h, kind, generator=generator).to(device) for _ in range(2)]
    xs = [torch.randn(length, m, b, h, generator=generator).to(device).requires_grad_() for _ in cells]
    states = [torch.randn(m, b, c.state_size, generator=generator).to(device).requires_grad_() for c in cells]
    starts = torch.rand(length, m, b, generator=generator) < start
    advance = torch.rand(length, m, b, generator=generator) >= skip
    padded = slice(length - length // 4, None)
    starts[padded, :, ::4] = True
    advance[padded, :, ::4] = False
    return cells, xs, states, starts.to(device), advance.to(device)


def time_replay(inputs, replay: str, repeats: int, warmup: int) -> float:
    """Median milliseconds of one forward and backward replay."""
    cells, xs, states, starts, advance = inputs
    device = xs[0].device

    def once() -> None:
        results = StackedRecurrentCell.forward_sequences(cells, xs, states, starts, advance, replay=replay)
        sum(out.sum() + final.sum() for out, final in results).backward()

    for _ in range(warmup):
        once()
    times = []
    for _ in range(repeats):
        _synchronize(device)
        began = time.perf_counter()
        once()
        _synchronize(device)
        times.append(1000.0 * (time.perf_counter() - began))
    return statistics.median(times)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(device: str, kinds: list[str], repeats: int, warmup: int, skip: float, start: float) -> list[dict]:
    """One row per case and kind: its sizes and the milliseconds of each replay."""
    rows = []
    for kind in kinds:
        for case in CASES:
            inputs = replay_inputs(case, kind, device, skip, start)
            cells = time_replay(inputs, "cells", repeats, warmup)
            fused = time_replay(inputs, "fused", repeats, warmup)
            rows.append({"kind": kind, **case._asdict(), "cells_ms": cells, "fused_ms": fused})
    return rows


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| cell | M | B | L | h | cells ms | fused ms | cells / fused |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['members']} | {r['chunks']} | {r['length']} | {r['hidden']} | {r['cells_ms']:.2f} "
            f"| {r['fused_ms']:.2f} | {r['cells_ms'] / r['fused_ms']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="torch device of the replay (cpu, cuda)")
    parser.add_argument("--kinds", nargs="+", default=["gru", "lstm"], choices=["gru", "lstm"])
    parser.add_argument("--repeats", type=int, default=10, help="timed replays per case and replay")
    parser.add_argument("--warmup", type=int, default=2, help="untimed replays before them")
    parser.add_argument("--skip", type=float, default=0.0, help="share of steps that do not advance")
    parser.add_argument("--start", type=float, default=1 / 25, help="chance that an episode starts at a step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = run(args.device, args.kinds, args.repeats, args.warmup, args.skip, args.start)
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else f"{args.threads} thread(s)"
    print(f"chunk replay (forward + backward, actor and critic): {args.device}, {name}, torch {torch.__version__}")
    print(table(rows))


if __name__ == "__main__":
    main()
