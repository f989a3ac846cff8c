"""Redundancy effect: what the xcorr penalty does to independent encoders on mpe2 ``simple_spread_v3``.

For every coefficient λ in ``--coefs`` and every seed in ``--seeds``, trains independent (non-shared) encoders for
``--steps`` env steps with ``RedundancyPenalty(kind=..., coef=λ)`` as the ``aux_fn`` (λ = 0 is the baseline: the
metrics are logged, training is untouched). Then, on two fixed probe sets of observations (each
``--probe-size`` joint observations collected once with ``--probe-seed``, the same sets for every run: one visited
by a uniformly random policy, one by agents that each head for their own landmark with 20% random actions, the
states a policy solving the task sees), it measures between every pair of agents (i < j):

* ``mean_abs_corr``: mean absolute Pearson correlation over all ``d_i × d_j`` feature pairs, each feature
  standardised over the probe set;
* ``xcorr``: :func:`~marljoint.redundancy.pairwise_xcorr` with ``eps = 0`` (mean squared correlation);
* ``cka``: :func:`~marljoint.redundancy.pairwise_cka` (debiased linear CKA);

averaged over the pairs, and per agent the mean feature standard deviation over the probe set. Features whose
standard deviation on the probe set is below ``CONSTANT_STD`` are constant: all three measures count them as 0
correlation, and their number is reported. The return is the mean per-agent episode return of the final policy
over ``--eval-episodes`` episodes with sampled actions (the stochastic policy PPO trains; the action generator is
reseeded with the evaluation seed), on the same episodes (env seeds) for every run; a uniformly random policy on
the same episodes gives the baseline. The return with deterministic (mode) actions is reported too, outside the
criteria.

Acceptance (for each correlation measure and probe set): every λ > 0 seed is at most half of every λ = 0 seed; no
agent of a λ > 0 run has a constant feature or a mean feature std below half of the smallest one among the λ = 0 runs;
and the mean return over λ > 0 seeds keeps at least 90% of the λ = 0 improvement over the random policy.

Usage::

    python benchmarks/redundancy_effect.py --out results.json                  # 2 coefs x 3 seeds
    python benchmarks/redundancy_effect.py --steps 153600 --seeds 0 1 2 --coefs 0 1
    python benchmarks/redundancy_effect.py --variance-floor 0.1 --coefs 0 1    # penalty options
    python benchmarks/redundancy_effect.py --coefs 3 10 --baseline results.json  # reuse the λ = 0 runs
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import math
import pathlib
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv, make_joint_env
from marljoint.redundancy import RedundancyPenalty, agent_pairs, pairwise_cka, pairwise_xcorr

CONSTANT_STD = 1e-6
"""A feature whose standard deviation over the probe set is below this counts as constant (0 correlation)."""

MEASURES = ("mean_abs_corr", "xcorr", "cka")


def make_spread() -> Any:
    """mpe2 ``simple_spread_v3`` with its defaults: 3 agents, 3 landmarks, 25 cycles, discrete actions."""
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env()


@dataclass(frozen=True)
class BenchmarkConfig:
    """What one benchmark run does; every field is recorded in the results."""

    steps: int = 153_600
    """Env steps per training run (one env step = one joint step of one env copy)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Trainer seeds; every coefficient is trained once per seed."""
    coefs: tuple[float, ...] = (0.0, 1.0)
    """Penalty coefficients λ; 0 is the baseline the others are compared with."""
    kind: str = "xcorr"
    """Penalty kind passed to :class:`~marljoint.redundancy.RedundancyPenalty`."""
    reduction: str = "mean"
    """Penalty reduction over agent pairs."""
    debias: bool = False
    """Penalty ``debias`` option (``xcorr`` only)."""
    variance_floor: float | None = None
    """Penalty ``variance_floor`` option (None: off)."""
    num_envs: int = 16
    """Env copies E of a training run."""
    rollout_steps: int = 64
    """Steps T per rollout: an iteration is ``T × E`` env steps."""
    minibatch_size: int = 256
    """Rows per PPO minibatch, and so the batch the penalty sees."""
    n_epochs: int = 4
    """PPO epochs per update."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Encoder MLP widths (``tanh``); the features are the last layer's ``d = 64`` outputs."""
    learning_rate: float = 1e-3
    """Adam learning rate; the trainer's default 3e-4 learns too little within this budget."""
    gamma: float = 0.95
    """Discount; episodes last 25 steps, and the trainer's default 0.99 learns less within this budget."""
    probe_size: int = 2048
    """Joint observations in the probe set."""
    probe_seed: int = 12345
    """Seed of the probe set's env resets and random actions (fixed across runs)."""
    eval_episodes: int = 100
    """Evaluation episodes per policy (sampled actions; mode actions reported beside) and for the random baseline."""
    eval_envs: int = 20
    """Env copies stepped together during evaluation."""
    eval_seed: int = 54321
    """Seed of the evaluation episodes and of the action sampling (the same for every policy)."""
    centralized_critic: bool = False
    """Give the critic its own MLP on the joint observation, so the penalised encoder serves the actor only."""
    env_workers: int = 0
    """Env worker processes of a training run (0: in-process); the results are the same bit for bit."""


def _uniform_actions(env: PettingZooJointEnv, rng: np.random.Generator) -> list[np.ndarray]:
    actions = []
    for group in env.spec.groups:
        if group.action.kind != "discrete":
            raise ValueError(f"the random policy handles Discrete actions only, got {group.action.kind!r}")
        actions.append(rng.integers(0, group.action.nvec[0], size=(env.num_envs, group.size)))
    return actions


def _landmark_seeking_actions(
    env: PettingZooJointEnv, state: Any, rng: np.random.Generator, epsilon: float
) -> list[np.ndarray]:
    """simple_spread: agent i heads for landmark i along its larger offset (observation layout: own velocity, own
    position, then the landmarks' positions relative to the agent); with probability ``epsilon`` a random action."""
    actions = []
    for g, group in enumerate(env.spec.groups):
        obs = state.obs[g]  # [E, n_g, obs]
        slots = np.arange(group.size)
        offset = np.stack([obs[:, i, 4 + 2 * i : 6 + 2 * i] for i in slots], axis=1)  # [E, n_g, 2]
        dx, dy = offset[..., 0], offset[..., 1]
        # Discrete(5): no-op, left (-x), right (+x), down (-y), up (+y)
        along_x = np.where(dx > 0, 2, 1)
        along_y = np.where(dy > 0, 4, 3)
        action = np.where(np.abs(dx) >= np.abs(dy), along_x, along_y)
        explore = rng.random(action.shape) < epsilon
        action = np.where(explore, rng.integers(0, group.action.nvec[0], size=action.shape), action)
        actions.append(action.astype(np.int64))
    return actions


PROBE_POLICIES = ("random", "task")
"""Probe sets: ``random`` (states a uniformly random policy visits) and ``task`` (states of agents that each head
for their own landmark, 20% random actions: the part of the state space a policy that solves the task visits)."""


def collect_probe(
    env_fn: Callable[[], Any], size: int, seed: int, num_envs: int = 16, policy: str = "random"
) -> list[torch.Tensor]:
    """``size`` joint observations visited by a probe policy (:data:`PROBE_POLICIES`), per group
    ``[size, n_g, *obs_shape]``."""
    if policy not in PROBE_POLICIES:
        raise ValueError(f"unknown probe policy {policy!r}; choose one of {PROBE_POLICIES}")
    env = PettingZooJointEnv(env_fn, num_envs=num_envs, seed=seed)
    rng = np.random.default_rng(seed)
    try:
        state = env.reset(seed=seed)
        if not state.alive.all():
            raise ValueError("the probe set needs every agent alive in every state")
        parts: list[list[np.ndarray]] = [[] for _ in env.spec.groups]
        collected = 0
        while collected < size:
            for g, obs in enumerate(state.obs):
                parts[g].append(obs.copy())  # the env overwrites its arrays on the next step
            collected += env.num_envs
            if policy == "random":
                actions = _uniform_actions(env, rng)
            else:
                actions = _landmark_seeking_actions(env, state, rng, epsilon=0.2)
            state = env.step(actions)
        return [torch.from_numpy(np.concatenate(p)[:size]).float() for p in parts]
    finally:
        env.close()


def evaluate(
    env_fn: Callable[[], Any],
    policy: Callable[[Any], list[np.ndarray]] | None,
    episodes: int,
    seed: int,
    num_envs: int,
) -> dict[str, float]:
    """Mean per-agent episode return over the first ``episodes`` finished episodes.

    Args:
        policy: ``state -> actions`` (e.g. ``lambda s: trainer.act(s, deterministic=True)``); None plays uniformly
            random actions.
        episodes: how many finished episodes to average over.
        seed: reset seed of the env copies (and of the random policy).
        num_envs: env copies stepped together (at most ``episodes``).
    """
    env = PettingZooJointEnv(env_fn, num_envs=min(num_envs, episodes), seed=seed)
    rng = np.random.default_rng(seed)
    try:
        state = env.reset(seed=seed)
        finished: list[np.ndarray] = []
        while sum(len(r) for r in finished) < episodes:
            actions = _uniform_actions(env, rng) if policy is None else policy(state)
            state = env.step(actions)
            if len(state.episode_returns):
                finished.append(state.episode_returns.copy())
        returns = np.concatenate(finished)[:episodes]  # [episodes, N]
        per_episode = returns.mean(axis=1)
        return {
            "return": float(per_episode.mean()),
            "return_sem": float(per_episode.std(ddof=1) / math.sqrt(len(per_episode))),
        }
    finally:
        env.close()


def probe_features(trainer: JointMultiAgentTrainer, probe: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Every agent's encoder features on the probe set, ``[P, d_i]`` float64, in ``possible_agents`` order."""
    features = []
    with torch.no_grad():
        for agent in range(trainer.spec.num_agents):
            network, slot = trainer.policy_for(agent)
            group, _ = trainer.spec.group_of(agent)
            features.append(network.encoder_features(probe[group])[:, slot].double())
    return features


def redundancy_measures(features: Sequence[torch.Tensor]) -> dict[str, Any]:
    """The correlation measures and feature statistics of one set of per-agent features ``[P, d_i]``.

    Features with std < ``CONSTANT_STD`` are replaced by their mean, so every measure counts them as 0.
    """
    cleaned, stds, constant = [], [], []
    for z in features:
        std = z.std(dim=0, unbiased=False)
        is_constant = std < CONSTANT_STD
        cleaned.append(torch.where(is_constant, z.mean(dim=0), z))
        stds.append(float(std.mean()))
        constant.append(int(is_constant.sum()))
    standardised = []
    for z in cleaned:
        centred = z - z.mean(dim=0)
        std = centred.square().mean(dim=0).sqrt()
        standardised.append(torch.where(std > 0, centred / torch.where(std > 0, std, 1.0), 0.0))
    rows = cleaned[0].shape[0]
    abs_corr = [float((standardised[i].T @ standardised[j] / rows).abs().mean()) for i, j in agent_pairs(len(cleaned))]
    xcorr = pairwise_xcorr(cleaned, eps=0.0)
    cka = pairwise_cka(cleaned)
    return {
        "mean_abs_corr": statistics.fmean(abs_corr),
        "xcorr": float(xcorr.mean()),
        "cka": float(cka.mean()),
        "pairs": {
            f"{i}-{j}": {"mean_abs_corr": abs_corr[p], "xcorr": float(xcorr[p]), "cka": float(cka[p])}
            for p, (i, j) in enumerate(agent_pairs(len(cleaned)))
        },
        "feature_std": stds,
        "constant_features": constant,
    }


def train_and_measure(
    cfg: BenchmarkConfig,
    coef: float,
    seed: int,
    probe: Sequence[torch.Tensor],
    env_fn: Callable[[], Any] = make_spread,
    task_probe: Sequence[torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Trains one run, then measures it on the probe set(s) and on the evaluation episodes."""
    trainer_cfg = JointTrainerConfig(
        num_envs=cfg.num_envs,
        rollout_steps=cfg.rollout_steps,
        minibatch_size=cfg.minibatch_size,
        n_epochs=cfg.n_epochs,
        hidden_sizes=cfg.hidden_sizes,
        learning_rate=cfg.learning_rate,
        gamma=cfg.gamma,
        share_parameters=False,
        centralized_critic=cfg.centralized_critic,
        seed=seed,
        torch_threads=1,
    )
    penalty = RedundancyPenalty(
        kind=cfg.kind, coef=coef, reduction=cfg.reduction, debias=cfg.debias, variance_floor=cfg.variance_floor
    )
    env = make_joint_env(
        env_fn, cfg.num_envs, seed, "subprocess" if cfg.env_workers else "sync", cfg.env_workers or None
    )
    start = time.perf_counter()
    try:
        trainer = JointMultiAgentTrainer.from_env(env, trainer_cfg)
        history = trainer.train(cfg.steps, aux_fn=penalty)
    finally:
        env.close()
    train_seconds = time.perf_counter() - start
    result: dict[str, Any] = {"coef": coef, "seed": seed, "kind": cfg.kind, "train_seconds": train_seconds}
    result.update(redundancy_measures(probe_features(trainer, probe)))
    if task_probe is not None:
        result["task_probe"] = redundancy_measures(probe_features(trainer, task_probe))
    episodes = (cfg.eval_episodes, cfg.eval_seed, cfg.eval_envs)
    trainer.generator.manual_seed(cfg.eval_seed)  # the same action-sampling stream for every run
    result.update(evaluate(env_fn, lambda s: trainer.act(s, deterministic=False), *episodes))
    mode = evaluate(env_fn, lambda s: trainer.act(s, deterministic=True), *episodes)
    result["return_deterministic"] = mode["return"]
    result["return_deterministic_sem"] = mode["return_sem"]
    last = history[-1]
    result["final_training_metrics"] = {
        k: last[k] for k in last if k.startswith("redundancy/") or k in ("episode_return_mean", "env_steps")
    }
    result["training_return_curve"] = [m["episode_return_mean"] for m in history]
    return result


def summarise(runs: Sequence[dict[str, Any]], random_return: float) -> dict[str, Any]:
    """Per-coefficient means and the acceptance checks of every λ > 0 against λ = 0."""
    coefs = sorted({r["coef"] for r in runs})
    by_coef = {c: [r for r in runs if r["coef"] == c] for c in coefs}
    summary: dict[str, Any] = {"random_return": random_return, "per_coef": {}, "criteria": {}}
    for c, rs in by_coef.items():
        row = {m: statistics.fmean(r[m] for r in rs) for m in (*MEASURES, "return")}
        row["min_agent_feature_std"] = min(min(r["feature_std"]) for r in rs)
        row["constant_features"] = sum(sum(r["constant_features"]) for r in rs)
        row["improvement_over_random"] = row["return"] - random_return
        if all("task_probe" in r for r in rs):
            row["task_probe"] = {m: statistics.fmean(r["task_probe"][m] for r in rs) for m in MEASURES}
            row["task_probe"]["min_agent_feature_std"] = min(min(r["task_probe"]["feature_std"]) for r in rs)
        summary["per_coef"][str(c)] = row
    if 0.0 not in by_coef:
        return summary
    base = by_coef[0.0]
    base_improvement = summary["per_coef"]["0.0"]["improvement_over_random"]
    for c, rs in by_coef.items():
        if c == 0.0:
            continue
        checks: dict[str, Any] = {}
        for prefix, view in (("", lambda r: r), ("task_probe_", lambda r: r["task_probe"])):
            if any("task_probe" not in r for r in (*rs, *base)) and prefix:
                continue
            for m in MEASURES:
                worst, best_base = max(view(r)[m] for r in rs), min(view(r)[m] for r in base)
                checks[f"{prefix}{m}_halved"] = {
                    "max_penalised": worst,
                    "min_baseline": best_base,
                    "held": worst <= 0.5 * best_base,
                }
            min_std = min(min(view(r)["feature_std"]) for r in rs)
            constants = sum(sum(view(r)["constant_features"]) for r in rs)
            checks[f"{prefix}no_variance_collapse"] = {
                "min_agent_feature_std": min_std,
                "min_baseline_agent_feature_std": min(min(view(r)["feature_std"]) for r in base),
                "constant_features": constants,
                "held": constants == 0 and min_std >= 0.5 * min(min(view(r)["feature_std"]) for r in base),
            }
        # Undefined (and so not held) when the baseline itself does not beat the random policy.
        kept = (
            summary["per_coef"][str(c)]["improvement_over_random"] / base_improvement
            if base_improvement > 0
            else float("nan")
        )
        checks["return_kept"] = {
            "baseline_improvement": base_improvement,
            "fraction_of_baseline_improvement": kept,
            "held": base_improvement > 0 and kept >= 0.9,
        }
        checks["all_held"] = all(v["held"] for v in checks.values())
        summary["criteria"][str(c)] = checks
    return summary


def code_fingerprint() -> dict[str, str]:
    """Identifies the code a run executes: a digest of the loaded ``marljoint`` sources, and package versions.

    Training trajectories change with the trainer's code, so runs can only be compared (or reused as a
    baseline) when their fingerprints match.
    """
    digest = hashlib.sha256()
    sources = sorted(
        (name, pathlib.Path(module.__file__))
        for name, module in list(sys.modules.items())
        if name.split(".")[0] == "marljoint" and getattr(module, "__file__", None)
    )
    for name, path in sources:
        digest.update(name.encode())
        digest.update(path.read_bytes())
    versions = {pkg: importlib.metadata.version(pkg) for pkg in ("torch", "numpy", "pettingzoo", "mpe2")}
    return {"marljoint_sources_sha256": digest.hexdigest(), **versions}


# Fields that must match for λ = 0 runs to be reused: the penalty options do not change a λ = 0 run.
_BASELINE_FIELDS = (
    "steps",
    "centralized_critic",
    "num_envs",
    "rollout_steps",
    "minibatch_size",
    "n_epochs",
    "hidden_sizes",
    "learning_rate",
    "gamma",
    "probe_size",
    "probe_seed",
    "eval_episodes",
    "eval_envs",
    "eval_seed",
)


def baseline_runs(cfg: BenchmarkConfig, earlier: dict[str, Any]) -> list[dict[str, Any]]:
    """The λ = 0 runs of ``cfg.seeds`` from an earlier results dict, after checking it measured the same thing.

    With ``coef=0`` the penalty returns an exactly-zero loss, so a λ = 0 run does not depend on the penalty
    options and need not be trained again for each of them.

    Raises:
        ValueError: the code, a training or measurement setting differs, or a seed's λ = 0 run is missing.
    """
    code = code_fingerprint()
    if earlier.get("code") != code:
        raise ValueError(
            f"the baseline file was made by other code ({earlier.get('code')}) than this run ({code}); "
            "train the λ=0 runs again (include 0 in --coefs, without --baseline)"
        )
    here = asdict(cfg)
    for name in _BASELINE_FIELDS:
        theirs = earlier["config"][name]
        if json.loads(json.dumps(here[name])) != theirs:
            raise ValueError(f"the baseline file has {name}={theirs!r} but this run uses {here[name]!r}")
    runs = {r["seed"]: r for r in earlier["runs"] if r["coef"] == 0.0}
    missing = [s for s in cfg.seeds if s not in runs]
    if missing:
        raise ValueError(f"the baseline file has no λ=0 run for seeds {missing}; its seeds are {sorted(runs)}")
    return [{**runs[s], "reused": True} for s in cfg.seeds]


def run_benchmark(
    cfg: BenchmarkConfig, log: Callable[[str], None] = print, baseline: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Collects the probe set, trains and measures every (coef, seed), and returns everything as plain data.

    Args:
        baseline: an earlier results dict whose λ = 0 runs are reused instead of training λ = 0 again.
    """
    start = time.perf_counter()
    code = code_fingerprint()
    torch.set_num_threads(1)
    probe = collect_probe(make_spread, cfg.probe_size, cfg.probe_seed)
    task_probe = collect_probe(make_spread, cfg.probe_size, cfg.probe_seed, policy="task")
    random_eval = evaluate(make_spread, None, cfg.eval_episodes, cfg.eval_seed, cfg.eval_envs)
    log(f"uniformly random policy: return {random_eval['return']:.2f} ± {random_eval['return_sem']:.2f}")
    log(_TABLE_HEADER)
    runs = []
    if baseline is not None:
        runs = baseline_runs(cfg, baseline)
        for run in runs:
            log(_run_line(run))
    for coef in cfg.coefs:
        if baseline is not None and coef == 0:
            continue
        for seed in cfg.seeds:
            run = train_and_measure(cfg, float(coef), seed, probe, task_probe=task_probe)
            runs.append(run)
            log(_run_line(run))
    return {
        "config": asdict(cfg),
        "code": code,
        "random": random_eval,
        "runs": runs,
        "summary": summarise(runs, random_eval["return"]),
        "baseline_reused": baseline is not None,
        "wall_seconds": time.perf_counter() - start,
    }


_TABLE_HEADER = (
    "| λ | seed | mean abs corr | xcorr | CKA | task probe: mean abs corr, xcorr, CKA | penalty (last iteration) "
    "| feature std per agent | constant features | return (sampled) | return (mode) | train s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _run_line(run: dict[str, Any]) -> str:
    stds = ", ".join(f"{s:.3f}" for s in run["feature_std"])
    on_policy = run["final_training_metrics"].get(f"redundancy/{run['kind']}", float("nan"))
    task = run.get("task_probe")
    task_cell = "–" if task is None else f"{task['mean_abs_corr']:.3f}, {task['xcorr']:.4f}, {task['cka']:.3f}"
    return (
        f"| {run['coef']:g} | {run['seed']} | {run['mean_abs_corr']:.3f} | {run['xcorr']:.4f} | {run['cka']:.3f} "
        f"| {task_cell} | {on_policy:.4f} "
        f"| {stds} | {sum(run['constant_features'])} | {run['return']:.2f} ± {run['return_sem']:.2f} "
        f"| {run['return_deterministic']:.2f} | {run['train_seconds']:.0f}{' (reused)' if run.get('reused') else ''} |"
    )


def report(results: dict[str, Any]) -> str:
    """The per-seed table, the per-coefficient summary and the acceptance checks, as Markdown."""
    lines = [_TABLE_HEADER]
    lines += [_run_line(r) for r in results["runs"]]
    summary = results["summary"]
    lines += [
        "",
        f"Uniformly random policy: return {results['random']['return']:.2f} ± {results['random']['return_sem']:.2f}.",
        "",
        "| λ | mean abs corr | xcorr | CKA | task probe: mean abs corr, xcorr, CKA | min agent feature std "
        "| return | improvement over random |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c, row in summary["per_coef"].items():
        task = row.get("task_probe")
        task_cell = "–" if task is None else f"{task['mean_abs_corr']:.3f}, {task['xcorr']:.4f}, {task['cka']:.3f}"
        lines.append(
            f"| {float(c):g} | {row['mean_abs_corr']:.3f} | {row['xcorr']:.4f} | {row['cka']:.3f} | {task_cell} "
            f"| {row['min_agent_feature_std']:.3f} | {row['return']:.2f} | {row['improvement_over_random']:.2f} |"
        )
    for c, checks in summary["criteria"].items():
        lines += ["", f"λ = {float(c):g} against λ = 0:"]
        for prefix, probe in (("", "random-play probe"), ("task_probe_", "task probe")):
            if f"{prefix}no_variance_collapse" not in checks:
                continue
            for m in MEASURES:
                check = checks[f"{prefix}{m}_halved"]
                lines.append(
                    f"- {probe}, {m}: worst λ>0 seed {check['max_penalised']:.4f} vs half the best λ=0 seed "
                    f"{0.5 * check['min_baseline']:.4f}: {'held' if check['held'] else 'FAILED'}"
                )
            check = checks[f"{prefix}no_variance_collapse"]
            lines.append(
                f"- {probe}, no variance collapse: smallest agent feature std {check['min_agent_feature_std']:.3f} "
                f"vs half the smallest at λ=0 {0.5 * check['min_baseline_agent_feature_std']:.3f}, "
                f"{check['constant_features']} constant features: {'held' if check['held'] else 'FAILED'}"
            )
        check = checks["return_kept"]
        if check["baseline_improvement"] > 0:
            kept = f"keeps {100 * check['fraction_of_baseline_improvement']:.0f}% of the λ=0 improvement over random"
        else:
            kept = f"comparison undefined: λ=0 does not beat random ({check['baseline_improvement']:+.2f})"
        lines.append(f"- return {kept} (needs 90%): {'held' if check['held'] else 'FAILED'}")
    lines += ["", f"Wall time: {results['wall_seconds']:.0f} s."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = BenchmarkConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps, help="env steps per training run")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(defaults.seeds))
    parser.add_argument("--coefs", type=float, nargs="+", default=list(defaults.coefs), help="λ values; include 0")
    parser.add_argument("--kind", default=defaults.kind, choices=("xcorr", "cka", "hsic"))
    parser.add_argument("--reduction", default=defaults.reduction, choices=("mean", "sum"))
    parser.add_argument("--debias", action="store_true")
    parser.add_argument("--variance-floor", type=float, default=None)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--gamma", type=float, default=defaults.gamma)
    parser.add_argument("--probe-size", type=int, default=defaults.probe_size)
    parser.add_argument(
        "--centralized-critic", action="store_true", help="critic MLP of its own: the encoder serves the actor only"
    )
    parser.add_argument("--eval-episodes", type=int, default=defaults.eval_episodes)
    parser.add_argument(
        "--env-workers", type=int, default=0, help="env worker processes per training run (0: in-process; same results)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON to this path")
    parser.add_argument(
        "--baseline", default=None, help="reuse the λ=0 runs of this earlier --out file (same steps, seeds, config)"
    )
    args = parser.parse_args(argv)
    cfg = BenchmarkConfig(
        steps=args.steps,
        seeds=tuple(args.seeds),
        coefs=tuple(args.coefs),
        kind=args.kind,
        reduction=args.reduction,
        debias=args.debias,
        variance_floor=args.variance_floor,
        learning_rate=args.learning_rate,
        gamma=args.gamma,
        probe_size=args.probe_size,
        eval_episodes=args.eval_episodes,
        centralized_critic=args.centralized_critic,
        env_workers=args.env_workers,
    )
    print(
        f"simple_spread_v3, independent encoders, {cfg.steps} env steps per run "
        f"({cfg.num_envs} envs x {cfg.rollout_steps} steps), penalty {cfg.kind} reduction={cfg.reduction} "
        f"debias={cfg.debias} variance_floor={cfg.variance_floor} centralized_critic={cfg.centralized_critic}"
    )
    baseline = None
    if args.baseline:
        with open(args.baseline) as f:
            baseline = json.load(f)
    results = run_benchmark(cfg, baseline=baseline)
    print()
    print(report(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
