"""Runs side by side: how much of its speed a ``marljoint`` run keeps when another one shares the machine.

For each job it times the same fixed amount of work (whole processes, start-up included) three ways:

* **alone on one core**: ``taskset -c <first core>`` (the speed the run has when it owns one core);
* **alone**: on every core this process may use;
* **two side by side**: two copies started together, neither pinned, so the operating system shares the cores
  between them (different seeds and output directories);

and prints each side-by-side copy's speed as a fraction of the one-core speed (``alone on one core / side by side``
in wall time). With the thread policy (``marljoint.threads``) every copy computes on one thread, so on two cores
two copies each keep most of a core; with torch's default thread count each would hold a spinning thread per core.

Jobs (``--jobs``): ``train`` (simple_spread, ``marljoint train``'s defaults), ``nfsp`` and ``psro`` (Leduc poker,
``openspiel:leduc_poker``; needs ``pip install "marljoint[openspiel]"``).

Usage::

    python benchmarks/side_by_side.py                         # every job, 3 repetitions
    python benchmarks/side_by_side.py --jobs nfsp --repetitions 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

JOBS: dict[str, list[str]] = {
    "train": ["train", "--env", "mpe2.simple_spread_v3", "--total-steps", "65536", "--quiet"],
    "nfsp": ["nfsp", "--env", "openspiel:leduc_poker", "--iterations", "12", "--quiet"],
    "psro": ["psro", "--env", "openspiel:leduc_poker", "--iterations", "4", "--quiet"],
}
"""Each job's ``marljoint`` arguments (a fixed amount of work: 20-40 s alone on one core here); ``--out`` and
``--seed`` are added per copy."""


def command(job: str, out: Path, seed: int, pin: int | None = None) -> list[str]:
    """The command line of one copy of ``job`` (pinned to core ``pin`` with ``taskset`` when given).

    Example:
        >>> command("nfsp", Path("/tmp/a"), 1, pin=0)[:4]
        ['taskset', '-c', '0', 'marljoint']
    """
    marljoint = shutil.which("marljoint") or "marljoint"
    line = [marljoint, *JOBS[job], "--out", str(out), "--seed", str(seed)]
    return (["taskset", "-c", str(pin)] if pin is not None else []) + line


def timed(commands: Sequence[list[str]]) -> list[float]:
    """Starts every command at once and returns each one's wall seconds.

    Raises:
        RuntimeError: a command that fails, with its last output lines.
    """
    started = time.perf_counter()
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in commands]
    seconds = []
    for c, process in zip(commands, processes):
        output, _ = process.communicate()
        seconds.append(time.perf_counter() - started)
        if process.returncode != 0:
            tail = "\n".join(output.strip().splitlines()[-5:])
            raise RuntimeError(f"{' '.join(c)} exited with {process.returncode}:\n{tail}")
    return seconds


def measure(job: str, repetitions: int, scratch: Path) -> dict[str, list[float]]:
    """Wall seconds of ``job`` alone on one core, alone, and as each of two copies side by side."""
    first = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    times: dict[str, list[float]] = {"one core": [], "alone": [], "side by side": []}
    for rep in range(repetitions):
        out = scratch / f"{job}-{rep}"
        times["one core"] += timed([command(job, out / "pinned", 0, pin=first)])
        times["alone"] += timed([command(job, out / "alone", 0)])
        times["side by side"] += timed([command(job, out / "a", 0), command(job, out / "b", 1)])
    return times


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    if shutil.which("taskset") is None:
        parser.error("needs taskset (util-linux) to pin the one-core run")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores usable; wall seconds per run (medians over {args.repetitions} repetitions)")
    print("| job | alone on one core | alone | side by side (each copy) | kept: one core / side by side |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for job in args.jobs:
            times = measure(job, args.repetitions, Path(scratch))
            med = statistics.median
            kept = med(times["one core"]) / med(times["side by side"])
            print(
                f"| {job} | {med(times['one core']):.1f} | {med(times['alone']):.1f} "
                f"| {med(times['side by side']):.1f} ({', '.join(f'{t:.1f}' for t in times['side by side'])}) "
                f"| {kept:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
