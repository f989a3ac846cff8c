"""Data-parallel ranks on a bigger machine: K = 1, 2, 4, 8, 16 CPU ranks, and one rank per GPU, in one command.

What a 2-core machine cannot measure (``docs/distributed.md``, "Performance"):

* CPU ranks: ``marljoint train --ranks K`` on simple_spread_v3 in ``marljoint train``'s defaults with 64 copies,
  for K = 1, 2, 4, 8, 16 (at most the usable cores), against the K-process bare ceiling, with the model of
  ``benchmarks/scaling.py`` beside every row (:func:`scaling.measure_ranks`);
* GPU ranks: ``marljoint train --ranks G --device cuda`` for G = 1 .. the GPUs (one GPU per rank, NCCL), each run's
  agent-steps per second from its metrics.csv after a warm-up iteration; with one GPU, G = 1 only (the several-GPU
  rows need a machine that has them).

Each part runs while time is left of ``--budget`` seconds; the tables go to standard output and the CSVs to
``--out`` (``$OUT`` when set, else ``./ranks_scaling``). From the project root::

    python benchmarks/device/ranks_scaling.py                         # both parts, at most 540 s
    python benchmarks/device/ranks_scaling.py --parts cpu --ranks 1 2 4 8 16 --iterations 3
    python benchmarks/device/ranks_scaling.py --parts gpu --budget 240
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scaling  # noqa: E402  (the sibling benchmark: the ranks' measurement, model and table)


def cpu_part(ranks: Sequence[int], iterations: int, window: float, out: Path) -> None:
    """The CPU ranks' table and CSV (``scaling.measure_ranks`` on simple_spread_v3, defaults shape)."""
    from marljoint.threads import usable_cores

    cores = usable_cores()
    ks = sorted({1, *(k for k in ranks if k <= cores)})
    print(f"CPU ranks {ks} on {cores} usable cores", flush=True)
    rows = scaling.measure_ranks("simple_spread_v3", "defaults", ks, iterations, window)
    print(scaling.rank_table(rows), flush=True)
    scaling.write_rank_csv(rows, out / "ranks_cpu.csv")


def gpu_rate(gpus: int, iterations: int) -> float:
    """``marljoint train --ranks G --device cuda`` (G = 1: one process on the GPU) on simple_spread_v3."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        command = [*scaling.train_command("simple_spread_v3", "defaults", gpus, iterations, run), "--device", "cuda"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"--ranks {gpus} --device cuda failed: {done.stderr.strip()[-800:]}")
        return scaling.metrics_rate(run / "metrics.csv")


def gpu_part(iterations: int, out: Path, deadline: float) -> None:
    """One rank per GPU, G = 1 .. the GPUs, while time is left."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        print("GPU ranks: no CUDA device here; skipped", flush=True)
        return
    rows = []
    for gpus in range(1, count + 1):
        if time.monotonic() > deadline:
            print(f"GPU ranks: out of time before G = {gpus}", flush=True)
            break
        rate = gpu_rate(gpus, iterations)
        rows.append((gpus, rate, rate / rows[0][1] if rows else 1.0))
        print(f"  GPU ranks G={gpus}: {rate:,.0f} agent-steps/s", flush=True)
    print("| GPUs (ranks) | agent-steps/s | speed-up over one GPU |\n|---|---|---|")
    for gpus, rate, speedup in rows:
        print(f"| {gpus} | {rate:,.0f} | {speedup:.2f} |")
    if count == 1:
        print("one GPU here: the rows of several GPUs need a machine with several", flush=True)
    with (out / "ranks_gpu.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["gpus", "rate", "speedup"])
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["cpu", "gpu"], choices=["cpu", "gpu"])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="CPU ranks to measure")
    parser.add_argument("--iterations", type=int, default=2, help="timed iterations per run, after a warm-up")
    parser.add_argument("--window", type=float, default=2.0, help="seconds of each bare-ceiling measurement")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for everything (default 540)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "ranks_scaling")))
    args = parser.parse_args(argv)
    if min(args.ranks) < 1:
        parser.error(f"--ranks must be positive, got {args.ranks}")
    deadline = time.monotonic() + args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    from marljoint import limit_threads

    limit_threads(1)
    if "cpu" in args.parts:
        cpu_part(args.ranks, args.iterations, args.window, args.out)
    if "gpu" in args.parts:
        gpu_part(args.iterations, args.out, deadline)


if __name__ == "__main__":
    main()
