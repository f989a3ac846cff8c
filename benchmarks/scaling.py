"""Scaling: how much of a machine's cores marljoint's training turns into env steps, in one command for any machine.

For each env and batch shape it measures, on the cores this process may use:

* R, one bare env process with random actions, and the K-process bare ceiling (K bare loops at once, summed) for
  every K of the table;
* full training (collect + update, agent-steps per second after a warm-up iteration) with K subprocess env workers
  at policy lag 0 and at lag 1, for K = 1, 2, 4, 8, ... and cores − 1 (what ``--env-workers auto`` takes), with
  ``torch_threads="auto"`` (the learner takes the cores the workers leave);
* the per-iteration costs behind each row: one copy's rollout c·T in one worker, the update u with K workers
  (its threads depend on K), the exchange x and the slowest worker's slowdown s;
* full training with K data-parallel ranks (``marljoint train --ranks K``, the command a user runs, its rate read
  from the run's metrics.csv after a warm-up iteration) for K = 1, 2, 4, ... and the cores, against the same
  K-process bare ceiling, with the ranks' model beside each row (:func:`rank_model`);

and prints one table with the scaling model of ``docs/performance.md`` beside every measured row (lag 0, lag 1 with
a core for the learner, lag 1 on K cores), one for the ranks, and writes the rows to CSVs (the ranks' beside the
workers': ``scaling_ranks.csv`` for ``scaling.csv``).

Two batch shapes: ``defaults`` (``marljoint train``'s defaults with 64 env copies; 64-step rollouts unless
``--rollout-steps``) and ``benchmark`` (the comparison shape of ``benchmarks/throughput.py``: 8 copies × 128
steps, 4 epochs × 4 minibatches, at most 8 workers).

Usage::

    python benchmarks/scaling.py                                  # both envs, both shapes (about 5 min on 16 cores)
    python benchmarks/scaling.py --envs simple_spread_v3 --shapes defaults --csv scaling.csv
    python benchmarks/scaling.py --workers 1 2 --iterations 1     # a quick look on a small machine
    python benchmarks/scaling.py --envs simple_spread_v3 --update-costs 16 64 256   # the update alone
    python benchmarks/scaling.py --modes ranks --shapes defaults --ranks 1 2       # the ranks only
    python benchmarks/scaling.py --modes ranks --ranks 1 2 4 8 16 --iterations 3    # K = 16 on a 16-core machine
"""

from __future__ import annotations

import argparse
import csv
import math
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import (  # noqa: E402  (the sibling benchmark's bare-env loops and model)
    ENVS,
    IterationCosts,
    bare_env_rate_processes,
    modelled_rates,
)

from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig, limit_threads  # noqa: E402
from marljoint.run.train import RunSpec  # noqa: E402
from marljoint.threads import usable_cores  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    "defaults": {"num_envs": 64, "rollout_steps": 64},
    "benchmark": {
        "num_envs": 8, "rollout_steps": 128, "n_epochs": 4, "num_minibatches": 4, "learning_rate": 1e-3,
    },
}
"""Each shape's changes to ``marljoint train``'s defaults (:class:`~marljoint.run.train.RunSpec`'s trainer)."""


@dataclass
class Row:
    """One measured K of one env and shape (rates in agent-steps per second; seconds per iteration)."""

    env: str
    shape: str
    workers: int
    learner_threads: int
    ceiling: float
    lag0: float
    lag1: float
    copy_seconds: float
    update_seconds: float
    exchange_seconds: float
    slowdown: float
    model_lag0: float
    model_lag1_spare_core: float
    model_lag1_shared: float

    def ratios(self) -> tuple[float, ...]:
        """Every rate over the K-process ceiling, in the table's order."""
        rates = (self.lag0, self.lag1, self.model_lag0, self.model_lag1_spare_core, self.model_lag1_shared)
        return tuple(r / self.ceiling for r in rates)


def worker_counts(cores: int, num_envs: int) -> list[int]:
    """K = 1, 2, 4, 8, ... below ``cores``, and ``cores − 1`` (``--env-workers auto``), each at most ``num_envs``.

    Example:
        >>> worker_counts(16, 64), worker_counts(2, 64), worker_counts(16, 8)
        ([1, 2, 4, 8, 15], [1], [1, 2, 4, 8])
    """
    counts, k = set(), 1
    while k < cores:
        counts.add(k)
        k *= 2
    counts.add(max(1, cores - 1))
    return sorted(k for k in counts if k <= num_envs)


def config_for(shape: str, workers: int, lag: int, seed: int = 0) -> JointTrainerConfig:
    """The trainer config of one measurement: ``marljoint train``'s defaults, the shape's changes, and K
    subprocess workers at policy lag ``lag``."""
    collection = CollectionConfig("subprocess", workers=workers, policy_lag=lag)
    return RunSpec().trainer.replace(**SHAPES[shape], collection=collection, seed=seed)


@dataclass
class Measured:
    """Per-iteration medians of one training measurement."""

    rate: float
    collect: float
    update: float
    busy: list[float]
    agent_steps: float
    learner_threads: int


def timed_run(env_fn: Callable[[], Any], config: JointTrainerConfig, iterations: int) -> Measured:
    """``iterations`` timed training iterations after one warm-up iteration."""
    env = config.collection.make_env(env_fn, config.num_envs, config.seed)
    trainer = None
    try:
        trainer = JointMultiAgentTrainer.from_env(env, config)
        trainer.update(trainer.collect_rollout())  # warm-up
        collector = getattr(trainer.collector, "inner", trainer.collector)  # under an overlapped collector
        collect, update, busy, steps = [], [], [], []
        for _ in range(iterations):
            t0 = time.perf_counter()
            rollout = trainer.collect_rollout()
            t1 = time.perf_counter()
            trainer.update(rollout)
            collect.append(t1 - t0)
            update.append(time.perf_counter() - t1)
            busy.append(list(getattr(collector, "busy_seconds", [])))
            steps.append(int(rollout.valid.sum()))
        med = statistics.median
        return Measured(
            rate=sum(steps) / (sum(collect) + sum(update)),
            collect=med(collect),
            update=med(update),
            busy=[med(b[w] for b in busy) for w in range(len(busy[0]))],
            agent_steps=med(steps),
            learner_threads=int(trainer.config.torch_threads),
        )
    finally:
        if trainer is not None:
            trainer.close()
        env.close()
        limit_threads(1)  # the next measurement resolves its own learner threads


def costs_of(one: Measured, many: Measured, workers: int, num_envs: int) -> IterationCosts:
    """The model's inputs for K = ``workers``: c from the one-worker run, and u, x, s from the K-worker run.

    Example:
        >>> one = Measured(1000.0, 0.40, 0.05, [0.40], 3000.0, 1)
        >>> two = Measured(1800.0, 0.26, 0.03, [0.25, 0.24], 3000.0, 1)
        >>> costs = costs_of(one, two, 2, 8)
        >>> round(costs.copy_seconds, 3), costs.update_seconds, round(costs.exchange_seconds, 3), costs.slowdown
        (0.05, 0.03, 0.01, 1.25)
    """
    copy_seconds = one.busy[0] / num_envs
    slowest = max(many.busy)
    return IterationCosts(
        copy_seconds=copy_seconds,
        update_seconds=many.update,
        exchange_seconds=max(0.0, many.collect - slowest),
        slowdown=slowest / (copy_seconds * num_envs / workers) if workers > 1 else 1.0,
        agent_steps=many.agent_steps,
    )


def measure(env: str, shape: str, ks: Sequence[int], iterations: int, window: float) -> list[Row]:
    """Every row of one env and shape: the ceiling, lag 0 and lag 1 for each K, and the model beside them."""
    num_envs = SHAPES[shape]["num_envs"]
    rows, first = [], None
    for k in ks:
        ceiling = bare_env_rate_processes(env, window, k)
        lag0 = timed_run(ENVS[env], config_for(shape, k, 0), iterations)
        lag1 = timed_run(ENVS[env], config_for(shape, k, 1), iterations)
        ceiling = (ceiling + bare_env_rate_processes(env, window, k)) / 2  # around the two runs (the VM drifts)
        first = first or lag0
        costs = costs_of(first, lag0, k, num_envs)
        model = modelled_rates(costs, k, num_envs)
        rows.append(Row(env, shape, k, lag0.learner_threads, ceiling, lag0.rate, lag1.rate, costs.copy_seconds,
                        costs.update_seconds, costs.exchange_seconds, costs.slowdown, *model))  # fmt: skip
        print(f"  {env} {shape} K={k}: ceiling {ceiling:,.0f}, lag 0 {lag0.rate:,.0f}, lag 1 {lag1.rate:,.0f}",
              flush=True)  # fmt: skip
    return rows


def table(rows: Sequence[Row], rate: dict[str, float]) -> str:
    """The markdown table of every row: measured and modelled full training over the K-process ceiling."""
    lines = [
        "| env | shape | K workers | learner threads | K-process ceiling | lag 0 | lag 1 | lag 0 / ceiling "
        "| lag 1 / ceiling | model lag 0 | model lag 1 (K + 1 cores) | model lag 1 (K cores) | c·T ms | u ms | x ms "
        "| s |",
        "|---" * 16 + "|",
    ]
    for r in rows:
        lag0, lag1, m0, m1, m2 = r.ratios()
        lines.append(
            f"| {r.env} | {r.shape} | {r.workers} | {r.learner_threads} | {r.ceiling:,.0f} | {r.lag0:,.0f} "
            f"| {r.lag1:,.0f} | {lag0:.2f} | {lag1:.2f} | {m0:.2f} | {m1:.2f} | {m2:.2f} "
            f"| {1e3 * r.copy_seconds:.1f} | {1e3 * r.update_seconds:.1f} | {1e3 * r.exchange_seconds:.1f} "
            f"| {r.slowdown:.2f} |"
        )
    lines.append("R (one bare process): " + ", ".join(f"{env} {value:,.0f}" for env, value in rate.items()))
    return "\n".join(lines)


def write_csv(rows: Sequence[Row], path: Path) -> None:
    """One CSV row per :class:`Row`, with its ratios to the ceiling."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = ["lag0_ratio", "lag1_ratio", "model_lag0_ratio", "model_lag1_spare_core_ratio", "model_lag1_shared_ratio"]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*asdict(rows[0]), *names] if rows else [])
        for row in rows:
            writer.writerow([*asdict(row).values(), *(round(x, 4) for x in row.ratios())])


def update_cost(env: str, num_envs: int, threads: int, repetitions: int, **changes: Any) -> tuple[float, int]:
    """Median seconds of one update of ``marljoint train``'s defaults over ``num_envs`` copies (``changes``
    applied), on one rollout collected in-process, with ``threads`` learner threads; and its agent-rows."""
    config = RunSpec().trainer.replace(num_envs=num_envs, torch_threads=threads, **changes)
    joint_env = config.collection.make_env(ENVS[env], num_envs, config.seed)
    try:
        trainer = JointMultiAgentTrainer.from_env(joint_env, config)
        rollout = trainer.collect_rollout()
        trainer.update(rollout)  # warm-up
        seconds = []
        for _ in range(repetitions):
            start = time.perf_counter()
            trainer.update(rollout)
            seconds.append(time.perf_counter() - start)
        return statistics.median(seconds), int(rollout.valid.sum())
    finally:
        joint_env.close()
        limit_threads(1)


def update_costs(env: str, copies: Sequence[int], repetitions: int) -> str:
    """The update's cost per sample (µs per agent-row and epoch) at each number of copies: 16 minibatches per epoch
    (the default) and minibatches of 256 rows (the default before), on one thread and on every core."""
    cores = usable_cores()
    epochs = RunSpec().trainer.n_epochs
    lines = [
        f"update cost per sample on {env} (marljoint train's defaults, 10 epochs; µs per agent-row and epoch; "
        f"medians of {repetitions})",
        "| copies | rows per agent | 16 minibatches, 1 thread | 16 minibatches, "
        f"{cores} threads | 256-row minibatches, 1 thread | u, 16 minibatches, 1 thread |",
        "|---|---|---|---|---|---|",
    ]
    for e in copies:
        cells = []
        for threads, changes in ((1, {}), (cores, {}), (1, {"minibatch_size": 256})):
            seconds, rows = update_cost(env, e, threads, repetitions, **changes)
            cells.append(seconds / rows / epochs * 1e6)
            if not changes and threads == 1:
                u = seconds
        per_agent = RunSpec().trainer.rollout_steps * e
        lines.append(f"| {e} | {per_agent:,} | {cells[0]:.2f} | {cells[1]:.2f} | {cells[2]:.2f} | {u:.2f} s |")
        print(lines[-1], flush=True)
    return "\n".join(lines)


RANK_ENVS = {"simple_spread_v3": "mpe2.simple_spread_v3", "bucket_brigade_v0": "bucket_brigade_v0"}
"""Each env of :data:`throughput.ENVS` as ``marljoint train --env`` names it (with its default keyword arguments)."""


def rank_counts(cores: int, num_envs: int) -> list[int]:
    """K = 1, 2, 4, ... below ``cores``, and ``cores`` itself (``--ranks auto``), each at most ``num_envs``.

    Example:
        >>> rank_counts(16, 64), rank_counts(2, 64), rank_counts(6, 4)
        ([1, 2, 4, 8, 16], [1, 2], [1, 2, 4])
    """
    counts, k = {max(1, cores)}, 1
    while k < cores:
        counts.add(k)
        k *= 2
    return sorted(k for k in counts if k <= num_envs)


@dataclass
class RankRow:
    """One measured K of data-parallel ranks (rates in agent-steps per second; seconds per iteration or call)."""

    env: str
    shape: str
    ranks: int
    ceiling: float
    rate: float
    copy_seconds: float
    update_seconds: float
    allreduce_seconds: float
    minibatch_steps: int
    model: float

    def ratios(self) -> tuple[float, float]:
        """The measured and the modelled rate over the K-process ceiling."""
        return self.rate / self.ceiling, self.model / self.ceiling


def rank_model(
    copy_seconds: float,
    update_seconds: float,
    allreduce_seconds: float,
    minibatch_steps: int,
    ranks: int,
    num_envs: int,
    agent_steps: float,
) -> float:
    """Full-training agent-steps per second of K = ``ranks`` ranks on K cores: each rank plays E/K copies
    (``c·T · E/K``), then updates on its share of every minibatch (``u(E/K)``: the update of E/K copies' rollout
    with the same number of minibatches, whose fixed cost per minibatch does not shrink with K) and all-reduces
    its gradients once per minibatch step (``M·a``, none with one rank); the gather of the rollout pieces and the
    slowest rank's lag are left out (the measured rows show them).

    Example:
        >>> rank_model(0.02, 0.5, 0.001, 160, 1, 64, 12288), rank_model(0.02, 0.3, 0.001, 160, 2, 64, 12288)
        (6903.3707865168535, 11170.909090909092)
    """
    seconds = (
        copy_seconds * num_envs / ranks + update_seconds + (minibatch_steps * allreduce_seconds if ranks > 1 else 0)
    )
    return agent_steps / seconds


def train_command(env: str, shape: str, ranks: int, iterations: int, out: Path) -> list[str]:
    """``marljoint train --ranks K`` on ``env`` in ``shape`` for ``iterations`` timed iterations after a warm-up,
    checkpointing only at its end."""
    trainer = SHAPES[shape]
    copies, steps = trainer["num_envs"], trainer["rollout_steps"]
    sets = [f"--set={key}={value}" for key, value in trainer.items() if key not in ("num_envs", "rollout_steps")]
    total = (iterations + 1) * copies * steps
    return [
        sys.executable, "-m", "marljoint", "train", "--env", RANK_ENVS[env], "--num-envs", str(copies),
        "--rollout-steps", str(steps), *sets, "--total-steps", str(total), "--checkpoint-every", "1000000",
        "--out", str(out), "--quiet", "--ranks", str(ranks),
    ]  # fmt: skip


def metrics_rate(path: Path) -> float:
    """Agent-steps per second of a run's iterations after its first (the warm-up), from its metrics.csv."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        raise ValueError(f"{path} has {len(rows)} iteration(s); the rate needs a warm-up and at least one more")
    first, last = rows[0], rows[-1]
    steps = float(last["agent_steps"]) - float(first["agent_steps"])
    return steps / (float(last["wall_time"]) - float(first["wall_time"]))


def ranks_rate(env: str, shape: str, ranks: int, iterations: int) -> float:
    """Full training with ``marljoint train --ranks K``, as a user runs it (:func:`train_command`)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        done = subprocess.run(train_command(env, shape, ranks, iterations, out), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"marljoint train --ranks {ranks} on {env} failed: {done.stderr.strip()[-800:]}")
        return metrics_rate(out / "metrics.csv")


@dataclass
class RankCosts:
    """The ranks' model inputs measured in one process on one thread."""

    copy_seconds: float
    parameters: int
    agent_steps: float
    minibatch_steps: int


def rank_costs(env: str, shape: str) -> RankCosts:
    """c·T (one copy's rollout, collected in-process), the networks' parameter count, agent-steps per iteration and
    minibatch steps per update of ``env`` in ``shape``."""
    config = RunSpec().trainer.replace(**SHAPES[shape], torch_threads=1)
    joint_env = config.collection.make_env(ENVS[env], config.num_envs, config.seed)
    try:
        trainer = JointMultiAgentTrainer.from_env(joint_env, config)
        trainer.collect_rollout()  # warm-up
        start = time.perf_counter()
        rollout = trainer.collect_rollout()
        seconds = time.perf_counter() - start
        parameters = sum(p.numel() for network in trainer.joint_policy.networks for p in network.parameters())
        steps = config.n_epochs * config.minibatches_per_epoch
        return RankCosts(seconds / config.num_envs, parameters, float(rollout.valid.sum()), steps)
    finally:
        joint_env.close()
        limit_threads(1)


def _allreduce_rank(rank: int, world: int, port: int, numel: int, repetitions: int, results: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    flat = torch.zeros(numel)
    for _ in range(5):  # warm-up
        dist.all_reduce(flat)
    seconds = []
    for _ in range(repetitions):
        start = time.perf_counter()
        dist.all_reduce(flat)
        seconds.append(time.perf_counter() - start)
    if rank == 0:
        results.put(statistics.median(seconds))
    dist.destroy_process_group()


def allreduce_seconds(numel: int, ranks: int = 2, repetitions: int = 50) -> float:
    """Median seconds of one gloo all-reduce of ``numel`` float32 (a gradient buffer) among ``ranks`` processes
    on this machine: the ranks' cost per minibatch step."""
    import multiprocessing

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    processes = [
        ctx.Process(target=_allreduce_rank, args=(r, ranks, port, numel, repetitions, results)) for r in range(ranks)
    ]
    for process in processes:
        process.start()
    try:
        return float(results.get(timeout=120))
    finally:
        for process in processes:
            process.join(timeout=30)


def measure_ranks(
    env: str, shape: str, ks: Sequence[int], iterations: int, window: float, modelled: Sequence[int] = ()
) -> list[RankRow]:
    """Every ranks row of one env and shape: the ceiling and ``marljoint train --ranks K`` for each K of ``ks``,
    with the model beside (the all-reduce measured once, with 2 ranks); then, for each K of ``modelled`` (more
    ranks than this machine has cores), the model alone, against K times one bare process (the ceiling K cores
    would give) and with the update of E/K copies measured here."""
    num_envs = SHAPES[shape]["num_envs"]
    costs = rank_costs(env, shape)
    changes = {k: v for k, v in SHAPES[shape].items() if k != "num_envs"}
    allreduce = allreduce_seconds(costs.parameters) if max([*ks, *modelled]) > 1 else 0.0
    one_process = bare_env_rate_processes(env, window, 1) if modelled else math.nan
    rows = []
    for k in [*ks, *(k for k in modelled if k <= num_envs and k not in ks)]:
        measured = k in ks
        ceiling = bare_env_rate_processes(env, window, k) if measured else k * one_process
        rate = ranks_rate(env, shape, k, iterations) if measured else math.nan
        if measured:
            ceiling = (ceiling + bare_env_rate_processes(env, window, k)) / 2  # around the run (the VM drifts)
        update, _ = update_cost(env, max(1, num_envs // k), 1, max(3, iterations), **changes)
        model = rank_model(costs.copy_seconds, update, allreduce, costs.minibatch_steps, k, num_envs,
                           costs.agent_steps)  # fmt: skip
        rows.append(RankRow(env, shape, k, ceiling, rate, costs.copy_seconds, update, allreduce,
                            costs.minibatch_steps, model))  # fmt: skip
        print(f"  {env} {shape} ranks={k}: ceiling {ceiling:,.0f}, training {rate:,.0f}, model {model:,.0f}",
              flush=True)  # fmt: skip
    return rows


def _cell(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else "-"


def rank_table(rows: Sequence[RankRow]) -> str:
    """The markdown table of the ranks' rows: measured and modelled full training over the K-process ceiling, and
    the speed-ups over one rank of the same env and shape ("-": not measured, a K beyond this machine's cores)."""
    lines = [
        "| env | shape | K ranks | K-process ceiling | training | training / ceiling | model / ceiling "
        "| speed-up over K = 1 | model speed-up | c·T ms | u(E/K) ms | a ms | M |",
        "|---" * 13 + "|",
    ]
    one = {(r.env, r.shape): r for r in rows if r.ranks == 1}
    for r in rows:
        measured, modelled = r.ratios()
        base = one.get((r.env, r.shape))
        speedup = r.rate / base.rate if base else math.nan
        model_speedup = r.model / base.model if base else math.nan
        lines.append(
            f"| {r.env} | {r.shape} | {r.ranks} | {r.ceiling:,.0f} | {_cell(r.rate, ',.0f')} "
            f"| {_cell(measured, '.2f')} | {modelled:.2f} | {_cell(speedup, '.2f')} | {_cell(model_speedup, '.2f')} "
            f"| {1e3 * r.copy_seconds:.1f} "
            f"| {1e3 * r.update_seconds:.1f} | {1e3 * r.allreduce_seconds:.2f} | {r.minibatch_steps} |"
        )
    return "\n".join(lines)


def write_rank_csv(rows: Sequence[RankRow], path: Path) -> None:
    """One CSV row per :class:`RankRow`, with its ratios to the ceiling."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*asdict(rows[0]), "ratio", "model_ratio"] if rows else [])
        for row in rows:
            writer.writerow([*asdict(row).values(), *(round(x, 4) for x in row.ratios())])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument(
        "--modes", nargs="+", default=["workers", "ranks"], choices=["workers", "ranks"],
        help="env workers at lag 0 and 1 (marljoint train --env-workers K), data-parallel ranks (marljoint train "
        "--ranks K), or both (the default)",
    )  # fmt: skip
    parser.add_argument(
        "--workers", type=int, nargs="+", help="the K to measure, with 1 always (default: 1, 2, 4, ..., cores − 1)"
    )
    parser.add_argument(
        "--ranks", type=int, nargs="+", help="the ranks K to measure, with 1 always (default: 1, 2, 4, ..., cores)"
    )
    parser.add_argument(
        "--model-ranks", type=int, nargs="*", default=[4, 8, 16],
        help="ranks beyond the usable cores to model from this machine's costs, unmeasured (default 4 8 16)",
    )  # fmt: skip
    parser.add_argument("--iterations", type=int, default=2, help="timed iterations per measurement (default 2)")
    parser.add_argument("--window", type=float, default=2.0, help="seconds of each bare-ceiling measurement")
    parser.add_argument("--rollout-steps", type=int, help="the defaults shape's rollout (default 64)")
    parser.add_argument("--csv", type=Path, default=Path("scaling.csv"), help="where the rows go (default scaling.csv)")
    parser.add_argument(
        "--update-costs", type=int, nargs="+", metavar="E",
        help="instead: the update's cost per sample with E copies (e.g. 16 64 256) on the first --envs",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.update_costs:
        limit_threads(1)
        print(update_costs(args.envs[0], args.update_costs, max(1, args.iterations + 1)))
        return
    if args.rollout_steps is not None:
        SHAPES["defaults"]["rollout_steps"] = args.rollout_steps
    cores = usable_cores()
    for name in ("workers", "ranks"):
        if getattr(args, name) and min(getattr(args, name)) < 1:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    limit_threads(1)
    started = time.perf_counter()
    print(f"{cores} cores usable; learner threads 'auto' (the cores the workers leave)", flush=True)
    rate = {env: bare_env_rate_processes(env, args.window, 1) for env in args.envs}
    if "workers" in args.modes:
        rows: list[Row] = []
        for shape in args.shapes:
            # K = 1 first: its worker's busy time is the model's c·T for every K.
            ks = sorted({1, *args.workers}) if args.workers else worker_counts(cores, SHAPES[shape]["num_envs"])
            for env in args.envs:
                rows += measure(env, shape, ks, args.iterations, args.window)
        print()
        print(table(rows, rate))
        write_csv(rows, args.csv)
        print(f"rows in {args.csv}")
    if "ranks" in args.modes:
        rank_rows: list[RankRow] = []
        for shape in args.shapes:
            ks = sorted({1, *args.ranks}) if args.ranks else rank_counts(cores, SHAPES[shape]["num_envs"])
            modelled = sorted(k for k in args.model_ranks if k > cores)
            for env in args.envs:
                rank_rows += measure_ranks(env, shape, ks, args.iterations, args.window, modelled)
        path = args.csv.with_name(f"{args.csv.stem}_ranks{args.csv.suffix}")
        print()
        print(rank_table(rank_rows))
        write_rank_csv(rank_rows, path)
        print(f"ranks rows in {path}")
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
