"""Seeds side by side: the wall time of ``marljoint train --seeds 0 1 2`` one run at a time and several at a time.

Times the whole command (processes, imports and all) for each ``--jobs`` value, ``1`` (one after another, in one
process) first, and prints each time with its ratio to the first. The default compares ``--jobs 1`` with the
default (``auto``: every run at once up to twice the cores this process may use, one per core beyond). It also
checks that every seed ended with the same ``metrics.csv`` (time columns aside) in each mode: the runs beside a run
do not change it.

The acceptance on 2 cores is a ratio of at most 0.6. Three single-core runs on two cores share them (1.5
run-lengths), where rounds of one run per core (``--jobs 2``) take two.

Usage::

    python benchmarks/seeds_parallel.py                                # simple_spread, --jobs 1 vs the default
    python benchmarks/seeds_parallel.py --jobs 1 auto 2 --save benchmarks/results/seeds-parallel
    python benchmarks/seeds_parallel.py --env mock_v0 --total-steps 4096   # seconds, no mpe2 needed
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

TARGET = 0.6
"""The acceptance: the default's wall time over the sequential one on 2 cores."""
TIME_COLUMNS = ("wall_time", "sps")


def command(env: str, total_steps: int, seeds: list[int], jobs: str, out: Path) -> list[str]:
    """The ``marljoint train`` command of one mode (``jobs`` ``"auto"`` leaves ``--jobs`` out).

    Example:
        >>> command("mock_v0", 64, [0, 1], "auto", Path("/tmp/a"))[-7:]
        ['--seeds', '0', '1', '--out', '/tmp/a', '--quiet', '--force']
        >>> command("mock_v0", 64, [0], "1", Path("/tmp/a"))[-2:]
        ['--jobs', '1']
    """
    installed = shutil.which("marljoint")
    marljoint = (
        [installed]
        if installed
        else [sys.executable, "-c", "import sys; from marljoint.cli import main; sys.exit(main())"]
    )
    line = [*marljoint, "train", "--env", env, "--total-steps", str(total_steps)]
    line += ["--seeds", *map(str, seeds), "--out", str(out), "--quiet", "--force"]
    return line + ([] if jobs == "auto" else ["--jobs", jobs])


def timed(line: list[str]) -> float:
    """Wall seconds of one command.

    Raises:
        RuntimeError: the command failed (with its last output lines).
    """
    started = time.perf_counter()
    done = subprocess.run(line, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-10:])
        raise RuntimeError(f"{' '.join(line)} exited with {done.returncode}:\n{tail}")
    return time.perf_counter() - started


def metrics(out: Path, seed: int) -> list[dict[str, str]]:
    """A seed's metrics rows without the time columns."""
    with open(out / f"seed_{seed}" / "metrics.csv") as file:
        return [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for row in csv.DictReader(file)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="mpe2.simple_spread_v3")
    parser.add_argument("--total-steps", type=int, default=98304, help="env steps of each run (default 98,304)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", nargs="+", default=["1", "auto"], help="--jobs values to time, 1 first")
    parser.add_argument("--save", type=Path, help="also write the report to DIR/<UTC date and time>.txt")
    args = parser.parse_args(argv)
    from marljoint.threads import usable_cores

    lines = [
        f"marljoint train --env {args.env} --total-steps {args.total_steps} --seeds {' '.join(map(str, args.seeds))}",
        f"{usable_cores()} usable cores; load average before {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]
    print("\n".join(lines), flush=True)
    seconds, rows = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in args.jobs:
            out = Path(tmp) / f"jobs-{jobs}"
            seconds[jobs] = timed(command(args.env, args.total_steps, args.seeds, jobs, out))
            rows[jobs] = [metrics(out, seed) for seed in args.seeds]
            ratio = seconds[jobs] / seconds[args.jobs[0]]
            lines.append(f"--jobs {jobs:>4}: {seconds[jobs]:7.1f} s  ratio {ratio:.3f}")
            print(lines[-1], flush=True)
    first = args.jobs[0]
    same = all(rows[jobs] == rows[first] for jobs in args.jobs)
    summary = [
        f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"every seed's metrics the same bits in every mode: {'yes' if same else 'NO'}",
    ]
    if "auto" in seconds and first == "1":
        ratio = seconds["auto"] / seconds["1"]
        verdict = "met" if ratio <= TARGET else "missed"
        summary.append(f"default/sequential {ratio:.3f} (target <= {TARGET} on 2 cores): {verdict}")
    lines += summary
    print("\n".join(summary))
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
        path = args.save / f"{datetime.now(timezone.utc).strftime('%Y-%m-%d-%H%M')}.txt"
        path.write_text("\n".join(lines) + "\n")
        print(path)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
