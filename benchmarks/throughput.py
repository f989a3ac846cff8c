"""Throughput: marljoint against the env's own speed and against SB3 + SuperSuit, in one run.

Reports agent-steps per second (medians over repetitions) for

  (a) the bare env with random actions (one process, one env instance): the physical limit R; and the same in K
      processes at once (summed), K = the cores this process may use: the ceiling of any K-process trainer here;
  (b) marljoint's rollout alone;
  (c) marljoint's full training (collect + update), in-process and with K subprocess env workers, the latter at
      policy lag 0 and overlapped (``policy_lag=1``) against the K-process ceiling measured around it, with a
      scaling table for K = 1, 2, 4, 8 workers: measured where the machine has the cores, and modelled from the
      measured per-iteration times (:func:`modelled_rates`) for every K;
  (d) SB3 PPO on the SuperSuit-vectorised env (same batch, epochs, network size), if stable-baselines3 is installed,
      with one torch thread (as marljoint runs here) and with torch's default thread count (as SB3 runs unless told
      otherwise);

and, for independent (non-shared) policies on ``mock_v0`` with N = 2, 4, 8, 16 agents, the update time per
agent-sample, with the parameter-shared update at N = 8 for comparison. ``--memory-steps`` adds a long run that
samples the resident memory after every iteration.

Usage::

    python benchmarks/throughput.py                 # full tables (a few minutes on 2 cores)
    python benchmarks/throughput.py --quick         # one repetition, fewer steps
    python benchmarks/throughput.py --memory-steps 2000000
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, make_joint_env
from marljoint.collect import CollectionConfig
from marljoint_envs import bucket_brigade_v0, mock_v0

# The batch shape of the comparison: 8 envs x N agents, 128 steps, 4 epochs x 4 minibatches, 64-unit networks.
NUM_ENVS, ROLLOUT, EPOCHS, MINIBATCHES, HIDDEN = 8, 128, 4, 4, (64, 64)

DEFAULT_THREADS = torch.get_num_threads()
"""torch's thread count before this script sets it to 1: what an SB3 user gets without setting it."""

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
"""K: the cores this process may run on, the process count of the bare ceiling and the worker count of the rows."""

OVERRIDES: dict[str, Any] = {}
"""``--set`` changes to every marljoint config of the run (for example the network of an earlier default)."""

SCALING_WORKERS = (1, 2, 4, 8)
"""The worker counts of the scaling table (measured up to :data:`CORES`, modelled for all)."""


def _spread() -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env()


def _bucket() -> Any:
    return bucket_brigade_v0.parallel_env()


ENVS: dict[str, Callable[[], Any]] = {"simple_spread_v3": _spread, "bucket_brigade_v0": _bucket}


def bare_env_rate(env_fn: Callable[[], Any], agent_steps: int, seed: int = 0, seconds: float | None = None) -> float:
    """Agent-steps per second of one env instance with uniformly random actions, over ``agent_steps`` steps, or
    over ``seconds`` of wall time when given."""
    env = env_fn()
    env.reset(seed=seed)
    spaces = {a: env.action_space(a) for a in env.possible_agents}
    for i, space in enumerate(spaces.values()):
        space.seed(seed + i)
    done = 0
    start = time.perf_counter()
    deadline = start + seconds if seconds is not None else None
    while (done < agent_steps) if deadline is None else (time.perf_counter() < deadline):
        actions = {a: spaces[a].sample() for a in env.agents}
        env.step(actions)
        done += len(actions)
        if not env.agents:
            env.reset()
    return done / (time.perf_counter() - start)


def _bare_in_process(args: tuple[str, float, int, Any]) -> float:
    name, seconds, seed, barrier = args
    bare_env_rate(ENVS[name], 500, seed)  # warm-up, outside the window
    barrier.wait()
    return bare_env_rate(ENVS[name], 0, seed, seconds=seconds)


def bare_env_rate_processes(name: str, seconds: float, processes: int = CORES) -> float:
    """Summed agent-steps per second of ``processes`` bare env loops stepping in as many processes over the same
    window of ``seconds``: what that many processes can get out of this machine's cores at once (one process: this
    one)."""
    if processes == 1:
        bare_env_rate(ENVS[name], 500)  # warm-up, outside the window
        return bare_env_rate(ENVS[name], 0, seconds=seconds)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(processes) as pool:
        barrier = manager.Barrier(processes)
        # A bounded wait: a child that cannot start (for example, one that cannot import this module) would
        # otherwise hang the benchmark.
        jobs = [(name, seconds, seed, barrier) for seed in range(processes)]
        rates = pool.map_async(_bare_in_process, jobs).get(timeout=seconds + 120)
    return sum(rates)


def _config(num_agents: int, **changes: Any) -> JointTrainerConfig:
    rows = NUM_ENVS * ROLLOUT
    return JointTrainerConfig(
        num_envs=NUM_ENVS,
        rollout_steps=ROLLOUT,
        n_epochs=EPOCHS,
        minibatch_size=rows // MINIBATCHES,
        hidden_sizes=HIDDEN,
        torch_threads=1,
        **{**OVERRIDES, **changes},
    )


@dataclass
class Timings:
    """One training measurement, per iteration: agent-steps, seconds collecting (or waiting for a rollout collected
    ahead) and updating, and each worker's busy seconds on its slice (empty without workers; at lag 1, those of
    the rollout that finished last)."""

    agent_steps: list[int] = field(default_factory=list)
    collect: list[float] = field(default_factory=list)
    update: list[float] = field(default_factory=list)
    busy: list[list[float]] = field(default_factory=list)

    @property
    def rollout_rate(self) -> float:
        """Agent-steps per second of collection alone."""
        return sum(self.agent_steps) / sum(self.collect)

    @property
    def full_rate(self) -> float:
        """Agent-steps per second of full training (collect + update)."""
        return sum(self.agent_steps) / (sum(self.collect) + sum(self.update))


def timed_training(env_fn: Callable[[], Any], iterations: int, **changes: Any) -> Timings:
    """``iterations`` timed training iterations after one warm-up iteration, with the batch shape of the comparison
    and ``changes`` to the config."""
    probe = env_fn()
    cfg = _config(len(probe.possible_agents), **changes)
    probe.close()
    env = cfg.collection.make_env(env_fn, cfg.num_envs, cfg.seed)
    trainer = None
    try:
        trainer = JointMultiAgentTrainer.from_env(env, cfg)
        trainer.update(trainer.collect_rollout())  # warm-up
        collector = getattr(trainer.collector, "inner", trainer.collector)  # under an overlapped collector
        timings = Timings()
        for _ in range(iterations):
            t0 = time.perf_counter()
            rollout = trainer.collect_rollout()
            t1 = time.perf_counter()
            trainer.update(rollout)
            t2 = time.perf_counter()
            timings.collect.append(t1 - t0)
            timings.update.append(t2 - t1)
            timings.agent_steps.append(int(rollout.valid.sum()))
            timings.busy.append(list(getattr(collector, "busy_seconds", [])))
        return timings
    finally:
        if trainer is not None:
            trainer.close()  # a lagged collector may still be collecting ahead
        env.close()


def marljoint_rates(env_fn: Callable[[], Any], iterations: int, **changes: Any) -> tuple[float, float]:
    """(rollout-only, full training) agent-steps per second."""
    timings = timed_training(env_fn, iterations, **changes)
    return timings.rollout_rate, timings.full_rate


def sb3_rate(env_fn: Callable[[], Any], iterations: int, threads: int = 1) -> float | None:
    """Agent-steps per second of SB3 PPO on the SuperSuit-vectorised env with ``threads`` torch threads, or None
    without SB3."""
    try:
        import supersuit as ss
        from stable_baselines3 import PPO
    except ImportError:
        return None
    env = env_fn()
    num_agents = len(env.possible_agents)
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    vec = ss.concat_vec_envs_v1(vec, NUM_ENVS, num_cpus=0, base_class="stable_baselines3")
    rows = NUM_ENVS * num_agents * ROLLOUT
    model = PPO(
        "MlpPolicy",
        vec,
        n_steps=ROLLOUT,
        batch_size=rows // MINIBATCHES,
        n_epochs=EPOCHS,
        policy_kwargs={"net_arch": list(HIDDEN)},
        device="cpu",
        verbose=0,
    )
    torch.set_num_threads(threads)
    try:
        model.learn(rows)  # warm-up
        start = time.perf_counter()
        model.learn(rows * iterations, reset_num_timesteps=False)
        rate = rows * iterations / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(1)
        vec.close()
    return rate


def update_time_per_sample(num_agents: int, share: bool, repetitions: int) -> float:
    """Seconds per agent-sample of one update on mock_v0 (cheap env, so the trainer dominates)."""
    cfg = _config(num_agents, share_parameters=share)
    env = make_joint_env(functools.partial(mock_v0.parallel_env, num_agents=num_agents, obs_dim=16), NUM_ENVS, 0)
    trainer = JointMultiAgentTrainer.from_env(env, cfg)
    rollout = trainer.collect_rollout()
    trainer.update(rollout)
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        trainer.update(rollout)
        times.append(time.perf_counter() - start)
    samples = NUM_ENVS * ROLLOUT * num_agents * EPOCHS
    return statistics.median(times) / samples


def resident_mib() -> float:
    """This process's resident memory now, in MiB (Linux ``/proc``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_memory_run(total_steps: int) -> list[float]:
    """Resident memory (MiB) after every iteration of a simple_spread run of ``total_steps`` env steps."""
    cfg = _config(3)
    env = make_joint_env(_spread, cfg.num_envs, cfg.seed)
    trainer = JointMultiAgentTrainer.from_env(env, cfg)
    samples: list[float] = []
    trainer.train(total_steps, callback=lambda m: samples.append(resident_mib()), keep_history=False)
    return samples


def recurrent_rows(repetitions: int, iterations: int) -> None:
    """GRU and LSTM policies against the MLP on simple_spread, measured in turns (agent-steps per second)."""
    kinds: dict[str, dict[str, Any]] = {
        "MLP": {},
        "GRU": {"recurrent": "gru", "bptt_length": 16},
        "LSTM": {"recurrent": "lstm", "bptt_length": 16},
    }
    rates: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for _ in range(repetitions):
        for name, changes in kinds.items():
            rates[name].append(marljoint_rates(ENVS["simple_spread_v3"], iterations, **changes))
    print("\nrecurrent policies on spread (rnn_hidden_size 64, chunks of 16 steps; medians, agent-steps/s)")
    print("| policy | rollout | full | rollout / MLP rollout | full / MLP full |")
    print("|---|---|---|---|---|")
    mlp_roll = [r for r, _ in rates["MLP"]]
    mlp_full = [f for _, f in rates["MLP"]]
    for name, values in rates.items():
        roll = statistics.median(r for r, _ in values)
        full = statistics.median(f for _, f in values)
        roll_ratio = statistics.median(r / m for (r, _), m in zip(values, mlp_roll))
        full_ratio = statistics.median(f / m for (_, f), m in zip(values, mlp_full))
        print(f"| {name} | {roll:,.0f} | {full:,.0f} | {roll_ratio:.2f} | {full_ratio:.2f} |")


@dataclass
class IterationCosts:
    """The scaling model's inputs, measured with subprocess workers at lag 0 (seconds per iteration).

    Attributes:
        copy_seconds: c·T, one copy's rollout (its env steps and its share of the policy's inference) in a worker
            that has a core to itself: one worker's busy seconds over E copies.
        update_seconds: u, the learner's update.
        exchange_seconds: x, sending the weights and gathering the pieces: a K-worker collection's wall time less
            its slowest worker's busy time.
        slowdown: s, how much slower than ``copy_seconds`` the slowest of K workers ran per copy (1 with one worker).
        agent_steps: agent-steps per iteration.
    """

    copy_seconds: float
    update_seconds: float
    exchange_seconds: float
    slowdown: float
    agent_steps: float


def modelled_rates(costs: IterationCosts, workers: int, num_envs: int = NUM_ENVS) -> tuple[float, float, float]:
    """Full-training agent-steps per second with K = ``workers`` workers over E = ``num_envs`` copies, by the
    scaling model of ``docs/performance.md``: a worker's rollout takes ``w = c·T · E/K · s`` (s = 1 at K = 1), and

    - lag 0: ``t = w + x + u`` (the workers wait for the update, the learner for the slowest worker);
    - lag 1 with a core for the learner (K + 1 cores): ``t = max(w, x + u)``;
    - lag 1 on K cores: ``t = max(x + u, w + (x + u) / K)`` (the update's work lands on the workers' cores).

    Returns:
        ``(lag 0, lag 1 on K + 1 cores, lag 1 on K cores)`` agent-steps per second (``agent_steps / t``).
    """
    slowdown = costs.slowdown if workers > 1 else 1.0
    w = costs.copy_seconds * num_envs / workers * slowdown
    learner = costs.exchange_seconds + costs.update_seconds
    times = (w + learner, max(w, learner), max(learner, w + learner / workers))
    lag0, spare, shared = (costs.agent_steps / t for t in times)
    return lag0, spare, shared


def measured_costs(one: Timings, many: Timings, workers: int) -> IterationCosts:
    """:class:`IterationCosts` from a lag-0 measurement with one worker (``one``) and with ``workers`` (``many``)."""
    med = statistics.median
    copy_seconds = med(busy[0] for busy in one.busy) / NUM_ENVS
    slowest = [max(busy) for busy in many.busy]
    return IterationCosts(
        copy_seconds=copy_seconds,
        update_seconds=med(one.update),
        exchange_seconds=max(0.0, med(c - b for c, b in zip(many.collect, slowest))),
        slowdown=med(slowest) / (copy_seconds * NUM_ENVS / workers) if workers > 1 else 1.0,
        agent_steps=med(one.agent_steps),
    )


def overlap_rows(
    names: list[str], repetitions: int, iterations: int, window: float, balance: bool = False, workers: int = CORES
) -> None:
    """Full training with K = ``workers`` subprocess workers at policy lag 0 and lag 1 against the K-process bare
    ceiling, each measurement taken between two ceiling measurements of its window and divided by their mean; then
    the scaling table: the same for every K of :data:`SCALING_WORKERS` up to ``workers``, and the model's figures
    (:func:`modelled_rates`, from the measured :class:`IterationCosts`) for every K (``balance``: with the
    workers' slices balanced by their speed, ``CollectionConfig(balance=True)``)."""
    how = ", balanced" if balance else ""
    measured_ks = sorted({k for k in SCALING_WORKERS if k <= workers} | {1, workers})
    tables = []
    for name in names:
        env_fn = ENVS[name]
        ceilings: dict[int, list[float]] = {k: [] for k in measured_ks}
        rates: dict[tuple[int, int], list[float]] = {(k, lag): [] for k in measured_ks for lag in (0, 1)}
        ratios: dict[tuple[int, int], list[float]] = {(k, lag): [] for k in measured_ks for lag in (0, 1)}
        costs: dict[int, list[IterationCosts]] = {k: [] for k in measured_ks}
        for _ in range(repetitions):
            at_lag0: dict[int, Timings] = {}
            for k in measured_ks:
                bracket = [bare_env_rate_processes(name, window, k)]
                for lag in (0, 1):
                    collection = CollectionConfig("subprocess", workers=k, policy_lag=lag, balance=balance and k > 1)
                    timings = timed_training(env_fn, iterations, collection=collection)
                    bracket.append(bare_env_rate_processes(name, window, k))
                    rates[k, lag].append(timings.full_rate)
                    ratios[k, lag].append(timings.full_rate / statistics.mean(bracket[-2:]))
                    if lag == 0:
                        at_lag0[k] = timings
                ceilings[k].append(statistics.mean(bracket))
            for k in measured_ks:
                costs[k].append(measured_costs(at_lag0[1], at_lag0[k], k))
        tables.append((name, ceilings, rates, ratios, costs))

    med = statistics.median
    print(f"\noverlapped collection: {workers} env workers{how}, full training over the {workers}-process bare "
          "ceiling (medians)")
    print(f"| env | {workers}-process ceiling | lag 0 | lag 1 | lag 0 / ceiling | lag 1 / ceiling | lag 1 / lag 0 |")
    print("|---" * 7 + "|")
    for name, ceilings, rates, ratios, _ in tables:
        lag0, lag1 = rates[workers, 0], rates[workers, 1]
        pairs = [b / a for a, b in zip(lag0, lag1)]
        print(
            f"| {name} | {med(ceilings[workers]):,.0f} | {med(lag0):,.0f} | {med(lag1):,.0f} "
            f"| {med(ratios[workers, 0]):.2f} | {med(ratios[workers, 1]):.2f} | {med(pairs):.2f} |"
        )
        print("per repetition: lag 0 " + ", ".join(f"{r:.2f}" for r in ratios[workers, 0]) + "; lag 1 "
              + ", ".join(f"{r:.2f}" for r in ratios[workers, 1]))
    for name, ceilings, _, ratios, costs in tables:
        scaling_table(name, ceilings, ratios, costs, workers)


def scaling_table(
    name: str,
    ceilings: dict[int, list[float]],
    ratios: dict[tuple[int, int], list[float]],
    costs: dict[int, list[IterationCosts]],
    workers: int,
) -> None:
    """Prints the measured and modelled full training over the K-process ceiling for every K of
    :data:`SCALING_WORKERS` (and K = ``workers``). The model's inputs are the medians of the measured
    :class:`IterationCosts`: a measured K's own, and for a K beyond the cores those of the largest measured K within
    them (its slowest-worker factor s is assumed to hold for more workers)."""
    med = statistics.median
    inputs = {
        k: IterationCosts(*(med(getattr(x, f) for x in runs) for f in IterationCosts.__dataclass_fields__))
        for k, runs in costs.items()
    }
    within = [k for k in inputs if k <= CORES] or [min(inputs)]
    rate = med(ceilings[1])  # R: one bare process
    one = inputs[1]
    print(
        f"\nscaling on {name} ({NUM_ENVS} copies x {ROLLOUT} steps; medians): one copy's rollout in one worker "
        f"c·T = {1e3 * one.copy_seconds:.1f} ms, update u = {1e3 * one.update_seconds:.1f} ms, exchange x = "
        + ", ".join(f"{1e3 * c.exchange_seconds:.1f} ms" for c in inputs.values())
        + ", slowest worker s = " + ", ".join(f"{c.slowdown:.2f}" for c in inputs.values())
        + f" with {', '.join(map(str, inputs))} workers; R = {rate:,.0f}"
    )
    print(
        "| K workers | ceiling | lag 0 / ceiling, measured | lag 1 / ceiling, measured | lag 0 / ceiling, model "
        "| lag 1 / ceiling, model (K + 1 cores) | lag 1 / ceiling, model (K cores) "
        "| lag 1 / lag 0, model (K + 1 cores) |"
    )
    print("|---" * 8 + "|")
    for k in sorted({*SCALING_WORKERS, workers}):
        if k > NUM_ENVS:
            continue
        measured = k in ceilings
        ceiling = med(ceilings[k]) if measured else k * rate
        model = inputs[k] if k in inputs else inputs[max(within)]
        lag0, spare, shared = (r / (k * rate) for r in modelled_rates(model, k))
        cells = [f"{med(ratios[k, lag]):.2f}" if measured else "-" for lag in (0, 1)]
        print(
            f"| {k} | {ceiling:,.0f}{'' if measured else ' (K·R)'} | {cells[0]} | {cells[1]} | {lag0:.2f} "
            f"| {spare:.2f} | {shared:.2f} | {spare / lag0:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3, help="training iterations per measurement")
    parser.add_argument("--quick", action="store_true", help="one repetition, one iteration")
    parser.add_argument("--envs", nargs="*", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument("--memory-steps", type=int, default=0, help="also run the peak-memory check")
    parser.add_argument("--skip-recurrent", action="store_true", help="skip the GRU-against-MLP rows")
    parser.add_argument("--skip-overlap", action="store_true", help="skip the policy-lag rows")
    parser.add_argument("--only-overlap", action="store_true", help="only the policy-lag rows")
    parser.add_argument("--only-recurrent", action="store_true", help="only the GRU-against-MLP rows")
    parser.add_argument("--balance", action="store_true", help="policy-lag rows with balanced workers")
    parser.add_argument(
        "--workers", type=int, default=CORES, help=f"K: env workers and bare processes (default: the {CORES} cores)"
    )
    parser.add_argument(
        "--set", metavar="FIELD=JSON", action="append", default=[],
        help="a JointTrainerConfig change for every marljoint measurement, e.g. share_trunk=true",
    )
    args = parser.parse_args()
    for item in args.set:
        name, _, value = item.partition("=")
        try:
            OVERRIDES[name] = json.loads(value)
        except json.JSONDecodeError:
            parser.error(f"--set {item!r}: the value must be JSON (true, 3, \"gru\"), got {value!r}")
    if not 1 <= args.workers <= NUM_ENVS:
        parser.error(f"--workers must be between 1 and the {NUM_ENVS} env copies, got {args.workers}")
    k = args.workers
    reps = 1 if args.quick else args.repetitions
    iters = 1 if args.quick else args.iterations
    torch.set_num_threads(1)
    if OVERRIDES:
        print(f"every marljoint config changed by {OVERRIDES}")
    if args.only_overlap or args.only_recurrent:
        if args.only_overlap:
            overlap_rows(args.envs, reps, iters, 2.0 if not args.quick else 0.5, args.balance, k)
        if args.only_recurrent:
            recurrent_rows(reps, iters)
        return

    print(f"batch: {NUM_ENVS} envs x {ROLLOUT} steps, {EPOCHS} epochs x {MINIBATCHES} minibatches, MLP {HIDDEN}")
    print(
        f"| env | bare R | bare, {k} processes | rollout | full (sync) | full ({k} workers) | SB3 (1 thread) "
        f"| SB3 ({DEFAULT_THREADS} threads) | rollout/R | full/R | workers/R | workers/({k}-process bare) "
        f"| full/SB3 (1 thread) | full/SB3 ({DEFAULT_THREADS} threads) | workers/SB3 (1 thread) |"
    )
    print("|---" * 15 + "|")
    window = 2.0 if not args.quick else 0.5
    tables = []
    for name in args.envs:
        env_fn = ENVS[name]
        runs: dict[str, list[float]] = {k: [] for k in ("bare", "bare2", "roll", "full", "sub", "sb3", "sb3_default")}
        # Drift-corrected ratios: this machine's speed can drift by half within a minute, so every measurement is
        # bracketed by bare-env measurements just before and after it, and divided by their mean.
        norm: dict[str, list[float]] = {k: [] for k in ("roll", "full", "sub", "sb3", "sb3_default")}
        for _ in range(reps):
            bare = [bare_env_rate(env_fn, 0, seconds=window)]
            r, f = marljoint_rates(env_fn, iters)
            bare.append(bare_env_rate(env_fn, 0, seconds=window))
            sub = marljoint_rates(env_fn, iters, collection=CollectionConfig("subprocess", workers=k))[1]
            bare.append(bare_env_rate(env_fn, 0, seconds=window))
            measured = {"roll": (r, 0), "full": (f, 0), "sub": (sub, 1)}
            if not args.skip_sb3:
                for key, threads in (("sb3", 1), ("sb3_default", DEFAULT_THREADS)):
                    rate = sb3_rate(env_fn, iters, threads)
                    if rate is not None:
                        measured[key] = (rate, len(bare) - 1)
                        bare.append(bare_env_rate(env_fn, 0, seconds=window))
            runs["bare2"].append(bare_env_rate_processes(name, 1.5 * window, k))
            runs["bare"].append(statistics.mean(bare))
            for key, (rate, before) in measured.items():
                runs[key].append(rate)
                norm[key].append(rate / ((bare[before] + bare[before + 1]) / 2))
        m = {k: statistics.median(v) if v else float("nan") for k, v in runs.items()}
        print(
            f"| {name} | {m['bare']:,.0f} | {m['bare2']:,.0f} | {m['roll']:,.0f} | {m['full']:,.0f} | {m['sub']:,.0f} "
            f"| {m['sb3']:,.0f} | {m['sb3_default']:,.0f} | {m['roll'] / m['bare']:.2f} | {m['full'] / m['bare']:.2f} "
            f"| {m['sub'] / m['bare']:.2f} | {m['sub'] / m['bare2']:.2f} | {m['full'] / m['sb3']:.2f} "
            f"| {m['full'] / m['sb3_default']:.2f} | {m['sub'] / m['sb3']:.2f} |"
        )
        per_repetition = "; ".join(f"{k} " + ", ".join(f"{v:,.0f}" for v in vals) for k, vals in runs.items())
        print("per repetition: " + per_repetition)
        tables.append((name, norm))

    print(
        "\ndrift-corrected ratios (each rate over the mean of the bare-env rates measured just before and after it; "
        "medians over repetitions)"
    )
    print(
        f"| env | rollout/R | full/R | workers/R | full/SB3 (1 thread) | full/SB3 ({DEFAULT_THREADS} threads) "
        "| workers/SB3 (1 thread) |"
    )
    print("|---" * 7 + "|")
    for name, norm in tables:
        med = {k: statistics.median(v) if v else float("nan") for k, v in norm.items()}
        over_sb3 = [f / s for f, s in zip(norm["full"], norm["sb3"])]
        over_sb3_default = [f / s for f, s in zip(norm["full"], norm["sb3_default"])]
        workers_sb3 = [w / s for w, s in zip(norm["sub"], norm["sb3"])]
        nan = float("nan")
        print(
            f"| {name} | {med['roll']:.2f} | {med['full']:.2f} | {med['sub']:.2f} "
            f"| {statistics.median(over_sb3) if over_sb3 else nan:.2f} "
            f"| {statistics.median(over_sb3_default) if over_sb3_default else nan:.2f} "
            f"| {statistics.median(workers_sb3) if workers_sb3 else nan:.2f} |"
        )
        print("per repetition: " + "; ".join(f"{k} " + ", ".join(f"{v:.2f}" for v in vals) for k, vals in norm.items()))

    if not args.skip_overlap:
        overlap_rows(args.envs, reps, iters, window, args.balance, k)
    if not args.skip_recurrent:
        recurrent_rows(reps, iters)

    print("\nindependent policies on mock_v0 (update time per agent-sample, microseconds)")
    print("| N | independent | ratio to N=2 |")
    print("|---|---|---|")
    base = None
    per_n = {}
    for n in (2, 4, 8, 16):
        t = update_time_per_sample(n, share=False, repetitions=reps) * 1e6
        per_n[n] = t
        base = base or t
        print(f"| {n} | {t:.3f} | {t / base:.2f} |")
    shared8 = update_time_per_sample(8, share=True, repetitions=reps) * 1e6
    print(f"\nN=8 shared: {shared8:.3f} us/sample; independent/shared = {per_n[8] / shared8:.2f}")

    if args.memory_steps:
        samples = peak_memory_run(args.memory_steps)
        third = max(1, len(samples) // 3)
        print(
            f"\nmemory over {len(samples)} iterations ({args.memory_steps:,} env steps): first {samples[0]:.0f} MiB, "
            f"mean of first third {np.mean(samples[:third]):.0f}, of last third {np.mean(samples[-third:]):.0f}, "
            f"max {max(samples):.0f}, ru_maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )


if __name__ == "__main__":
    main()
