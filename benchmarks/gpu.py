"""The GPU acceptance figures, in one command: one table and one CSV.

Every figure is agent-steps per second of full training (collect + update) after a first, untimed iteration,
measured for ``--seconds`` of wall time (at least one iteration), on ``marljoint train``'s defaults with 64 env
copies × 64 steps unless the row says otherwise:

* (a) simple_spread_v3, the default MLP, in one process: ``--device`` (acting device ``"auto"``) against the CPU
  on one thread;
* (b) simple_spread_v3, a 512×512 MLP, 64 copies, minibatches of 4096 rows: ``--device`` against the CPU on one
  thread (target: at least 5×);
* (c) memory_v0, a GRU and an LSTM policy on ``--device`` against the MLP on ``--device`` (target: at least 0.5);
* (d) simple_spread_v3 with 15 env workers (at most the cores less one), the learner on ``--device``, policy lag
  1, against the bare ceiling of as many env processes (``benchmarks/scaling.py``'s; target: at least 0.7).

The whole run should take about 4 minutes on the GPU machine (one H200, 16 cores). ``--device cpu --quick``
runs every row on the CPU with small rollouts, to check the script anywhere.

Usage::

    python benchmarks/gpu.py --csv gpu.csv                       # on the GPU machine
    python benchmarks/gpu.py --device cpu --quick --csv gpu.csv  # anywhere, a check of the script
"""

from __future__ import annotations

import argparse
import csv
import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import ENVS, bare_env_rate_processes  # noqa: E402  (the sibling benchmark's envs and ceiling)

from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig, limit_threads  # noqa: E402
from marljoint.run.train import RunSpec  # noqa: E402
from marljoint.threads import usable_cores  # noqa: E402
from marljoint_envs import memory_v0  # noqa: E402

DEFAULTS: dict[str, Any] = {"num_envs": 64, "rollout_steps": 64}
"""Each row's changes to ``marljoint train``'s defaults before its own (scaling.py's ``defaults`` shape)."""

QUICK: dict[str, Any] = {"num_envs": 8, "rollout_steps": 16, "n_epochs": 1}
"""What ``--quick`` changes on top of every row: a few seconds per measurement."""

LARGE_MLP: dict[str, Any] = {"hidden_sizes": (512, 512), "minibatch_size": 4096, "num_minibatches": None}
"""Figure (b)'s network and minibatches."""

TARGETS = {"b": 5.0, "c": 0.5, "d": 0.7}
"""The acceptance target of each figure's ratio (figure (a) has none: it shows what acting on the CPU gives)."""


@dataclass
class Measurement:
    """One training measurement."""

    case: str
    device: str
    acting_device: str
    learner_threads: int
    workers: int
    rate: float
    iterations: int


@dataclass
class Figure:
    """One row of the table: a measured rate over its reference."""

    figure: str
    case: str
    rate: float
    reference_case: str
    reference: float
    ratio: float
    target: float | None

    @property
    def verdict(self) -> str:
        """``"yes"``/``"no"`` against the target, ``""`` without one."""
        if self.target is None:
            return ""
        return "yes" if self.ratio >= self.target else "no"


def _memory() -> Any:
    return memory_v0.parallel_env()


def config_for(device: str, quick: bool, **changes: Any) -> JointTrainerConfig:
    """``marljoint train``'s defaults with :data:`DEFAULTS`, the row's ``changes`` and ``device``
    (and :data:`QUICK` with ``quick``)."""
    values = {**DEFAULTS, **changes, **(QUICK if quick else {}), "device": device}
    if quick and values.get("minibatch_size", 0) > 128:
        values["minibatch_size"] = 128
    return RunSpec().trainer.replace(**values)


def measure(case: str, env_fn: Callable[[], Any], config: JointTrainerConfig, seconds: float) -> Measurement:
    """Agent-steps per second of training iterations for ``seconds`` (at least one) after one untimed iteration."""
    env = config.collection.make_env(env_fn, config.num_envs, config.seed)
    trainer = None
    try:
        trainer = JointMultiAgentTrainer.from_env(env, config)
        trainer.iterate()  # warm-up: allocation, the first kernels, the workers' networks
        _synchronize(config.device)
        steps, spent, iterations = 0, 0.0, 0
        while iterations == 0 or spent < seconds:
            start = time.perf_counter()
            rollout, _, _ = trainer.iterate()
            _synchronize(config.device)
            spent += time.perf_counter() - start
            steps += int(rollout.valid.sum())
            iterations += 1
        workers = config.collection.workers if config.collection.multiprocess else 0
        measured = Measurement(
            case, config.device, trainer.config.acting_device, int(trainer.config.torch_threads or 0), workers,
            steps / spent, iterations,
        )  # fmt: skip
    finally:
        if trainer is not None:
            trainer.close()
        env.close()
        limit_threads(1)  # the next measurement resolves its own learner threads
    print(f"  {case}: {measured.rate:,.0f} agent-steps/s ({iterations} iterations, acting on "
          f"{measured.acting_device}, {measured.learner_threads} learner threads)", flush=True)  # fmt: skip
    return measured


def _synchronize(device: str) -> None:
    """Waits for the device's queued work, so that a timed iteration holds its own kernels."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def figures(device: str, quick: bool, seconds: float, window: float) -> tuple[list[Figure], list[Measurement]]:
    """Every measurement and the figures made of them."""
    spread = ENVS["simple_spread_v3"]
    run = functools.partial(_run, device=device, quick=quick, seconds=seconds)
    rows: list[Figure] = []
    measured: list[Measurement] = []

    def pair(figure: str, case: Measurement, reference: Measurement, target: float | None) -> None:
        measured.extend(m for m in (case, reference) if m not in measured)
        rows.append(Figure(figure, case.case, case.rate, reference.case, reference.rate, case.rate / reference.rate,
                           target))  # fmt: skip

    cpu = run("a: spread MLP, cpu 1 thread", spread, on_cpu=True)
    pair("a", run(f"a: spread MLP, {device}", spread), cpu, None)
    cpu = run("b: spread 512x512, cpu 1 thread", spread, on_cpu=True, **LARGE_MLP)
    pair("b", run(f"b: spread 512x512, {device}", spread, **LARGE_MLP), cpu, TARGETS["b"])
    mlp = run(f"c: memory MLP, {device}", _memory)
    for kind in ("gru", "lstm"):
        pair("c", run(f"c: memory {kind.upper()}, {device}", _memory, recurrent=kind), mlp, TARGETS["c"])
    workers = max(1, min(15, usable_cores() - 1))
    lag = CollectionConfig("subprocess", workers=workers, policy_lag=1)
    workers_row = run(f"d: spread {workers} workers lag 1, {device}", spread, collection=lag)
    ceiling = bare_env_rate_processes("simple_spread_v3", window, workers)
    print(f"  d: {workers}-process bare ceiling: {ceiling:,.0f} agent-steps/s", flush=True)
    bare = Measurement(f"d: {workers}-process bare ceiling", "cpu", "", 0, workers, ceiling, 0)
    pair("d", workers_row, bare, TARGETS["d"])
    return rows, measured


def _run(case: str, env_fn: Callable[[], Any], *, device: str, quick: bool, seconds: float, on_cpu: bool = False,
         **changes: Any) -> Measurement:  # fmt: skip
    """One measurement: on the CPU on one thread with ``on_cpu``, else on ``device`` with the threads and acting
    device chosen by ``"auto"``."""
    if on_cpu:
        changes = {**changes, "torch_threads": 1}
    return measure(case, env_fn, config_for("cpu" if on_cpu else device, quick, **changes), seconds)


def table(rows: Sequence[Figure]) -> str:
    """The markdown table of every figure."""
    lines = [
        "| figure | case | agent-steps/s | reference | reference agent-steps/s | ratio | target | meets |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        target = "" if r.target is None else f">= {r.target:g}"
        lines.append(f"| {r.figure} | {r.case} | {r.rate:,.0f} | {r.reference_case} | {r.reference:,.0f} "
                     f"| {r.ratio:.2f} | {target} | {r.verdict} |")  # fmt: skip
    return "\n".join(lines)


def write_csv(rows: Sequence[Figure], path: Path) -> None:
    """One CSV row per :class:`Figure`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*asdict(rows[0]), "meets"])
        writer.writeheader()
        for r in rows:
            writer.writerow({**asdict(r), "meets": r.verdict})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="the learner's device of the measured rows (default cuda)")
    parser.add_argument("--quick", action="store_true", help="small rollouts and one epoch: a check of the script")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per measurement (default 10)")
    parser.add_argument("--window", type=float, default=None, help="seconds of the bare ceiling (default 5)")
    parser.add_argument("--csv", type=Path, default=None, help="also write the figures to this CSV")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (0.5 if args.quick else 10.0)
    window = args.window if args.window is not None else (0.5 if args.quick else 5.0)
    limit_threads(1)
    started = time.perf_counter()
    rows, measured = figures(args.device, args.quick, seconds, window)
    print()
    print(table(rows))
    print(f"\n{len(measured)} measurements in {time.perf_counter() - started:,.0f} s on {usable_cores()} cores")
    if args.csv is not None:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
