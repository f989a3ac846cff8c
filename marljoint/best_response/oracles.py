"""Best-response oracles: PPO through the joint trainer, or exact for games with a known tree.

An oracle is called as ``oracle(populations, strategies, learners, seed)`` and returns
:class:`BestResponses`: one new frozen policy for each learner seat, each a best response (exact or
approximate) to the other seats playing their meta-strategies over their populations.

:func:`best_response_gain` uses the PPO oracle to estimate, with a confidence interval, how much each player
could gain by deviating from a fixed profile: an approximate NashConv for envs without a known tree.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from marljoint.best_response.games import KnownGame
from marljoint.best_response.opponents import (
    LEARNER,
    MetaStrategyAssigner,
    PopulationEnv,
    mixture_profiles,
    simulate_profiles,
)
from marljoint.best_response.population import FrozenPolicy, PolicyMixture
from marljoint.env.base import JointEnv
from marljoint.policies import AgentPolicy
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.trainer import JointMultiAgentTrainer

__all__ = [
    "GAIN_DEFAULTS",
    "BestResponses",
    "ExactOracle",
    "Oracle",
    "PPOOracle",
    "BestResponseGain",
    "GAIN_METRICS",
    "best_response_gain",
    "check_gain_settings",
    "gain_metrics",
    "run_trainer_config",
    "check_current_format",
    "warm_start_seat",
    "check_warm_start",
]


class BestResponses(NamedTuple):
    """What an oracle returns.

    Attributes:
        policies: learner seat → its new frozen policy.
        metrics: diagnostics (PPO: ``br_env_steps``, ``br_seconds``, and per learner ``br_explained_var/<agent>``
            and ``br_return/<agent>``, averaged over the last quarter of training; empty for the exact oracle).
    """

    policies: dict[int, FrozenPolicy]
    metrics: dict[str, float]


class Oracle(Protocol):
    """What PSRO asks for a best response: called with the populations, the meta-strategies, the learner seats and
    a seed, it returns :class:`BestResponses`.

    Attributes:
        trains_as_tasks: its best responses can be trained as tasks of the task engine, one per seat
            (:attr:`PsroConfig.task_split <marljoint.best_response.PsroConfig.task_split>`); False: computed in
            this process whatever the split.
    """

    trains_as_tasks: bool

    def __call__(
        self,
        populations: Sequence[Sequence[FrozenPolicy]],
        strategies: Sequence[np.ndarray],
        learners: Sequence[int],
        seed: int,
    ) -> BestResponses: ...


class ExactOracle:
    """Exact best responses in a :class:`~marljoint.best_response.games.KnownGame`.

    The opponents' meta-mixtures become behaviour tables (reach-weighted in Kuhn poker), and the best response
    is the game's deterministic best response (ties to the lowest action).

    Args:
        game: the known game.
    """

    trains_as_tasks = False
    """Arithmetic on tables, faster in this process than any task would start."""

    def __init__(self, game: KnownGame) -> None:
        self.game = game

    def __call__(
        self,
        populations: Sequence[Sequence[FrozenPolicy]],
        strategies: Sequence[np.ndarray],
        learners: Sequence[int],
        seed: int,
    ) -> BestResponses:
        tables = [
            self.game.table(PolicyMixture(population, strategy), seat)
            for seat, (population, strategy) in enumerate(zip(populations, strategies))
        ]
        policies: dict[int, FrozenPolicy] = {}
        for seat in learners:
            _, table = self.game.best_response(tables, seat)
            policies[seat] = self.game.policy(table, seat)
        return BestResponses(policies, {})


class PPOOracle:
    """Best responses trained with the joint PPO trainer against meta-strategy opponents.

    Each call builds a fresh trainer (fresh networks, ``share_parameters=False`` so that every seat has its own
    network) on a :class:`~marljoint.best_response.opponents.PopulationEnv` over ``env``: env copy ``e`` trains
    seat ``learners[e % len(learners)]`` while every other seat plays a member drawn from its meta-strategy for
    the episode. All learners train at once, each on its own copies: ``update(rollout, active=mask)`` steps the
    learner seats only, and the other seats' rows are excluded from the loss (see ``opponents.py``).

    Args:
        env: the JointEnv (its ``num_envs`` copies are used).
        config: PPO settings; ``seed`` and ``share_parameters`` are replaced per call.
        steps: env steps (joint steps × copies) of training per call, shared by all learners.
        warm_start: start each learner from the newest member of its population (actor and critic) when that member
            is a network of the same shape, instead of from fresh networks: the best responses keep improving over
            iterations, and the critic starts from values it already fitted (the value normaliser starts afresh).
        policy_scale: with ``warm_start``, the copied policy output layer (the logits, or a Gaussian's mean) is
            multiplied by this, in [0, 1]: 1 keeps the member's policy, 0 restarts it at uniform on the member's
            encoders and critic, values between keep its preferences with more entropy.
        **policy_kwargs: passed to ``JointMultiAgentTrainer.from_env`` (e.g. ``activation``).

    Raises:
        ValueError: ``steps`` not a positive integer.
    """

    trains_as_tasks = True
    """Each seat's PPO training is a task of its own when PSRO splits its work."""

    def __init__(
        self,
        env: JointEnv,
        config: JointTrainerConfig,
        steps: int,
        warm_start: bool = False,
        policy_scale: float = 1.0,
        **policy_kwargs: Any,
    ) -> None:
        if not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"steps={steps!r}; pass a positive number of env steps per best response")
        check_warm_start(warm_start, policy_scale)
        self.env = env
        self.config = config
        self.steps = int(steps)
        self.warm_start = warm_start
        self.policy_scale = float(policy_scale)
        self.policy_kwargs = policy_kwargs

    def __call__(
        self,
        populations: Sequence[Sequence[FrozenPolicy]],
        strategies: Sequence[np.ndarray],
        learners: Sequence[int],
        seed: int,
    ) -> BestResponses:
        spec = self.env.spec
        wrapped = PopulationEnv(self.env, populations, MetaStrategyAssigner(strategies, learners), seed)
        config = self.config.replace(seed=int(seed), share_parameters=False, num_envs=self.env.num_envs)
        trainer = JointMultiAgentTrainer.from_env(wrapped, config, **self.policy_kwargs)
        warm = 0
        if self.warm_start:
            warm = sum(warm_start_seat(trainer, seat, populations[seat][-1], self.policy_scale) for seat in learners)
        active = np.zeros(spec.num_agents, dtype=bool)
        active[list(learners)] = True
        per_iteration = config.rollout_steps * self.env.num_envs
        iterations = max(1, math.ceil(self.steps / per_iteration))
        recent: list[Any] = []
        explained: list[list[float]] = []
        # The reported diagnostics average the last quarter of training.
        last_quarter = iterations - max(1, iterations // 4)
        start = time.perf_counter()
        for k in range(iterations):
            _, stats, _ = trainer.iterate(iterations, active=active.tolist())
            episodes = wrapped.drain_log()
            if k >= last_quarter:
                recent.extend(episodes)
                explained.append(stats.explained_var)
        metrics: dict[str, float] = {"br_env_steps": float(iterations * per_iteration)}
        if self.warm_start:
            metrics["br_warm_started"] = float(warm)
        metrics["br_seconds"] = time.perf_counter() - start
        for seat in learners:
            agent = spec.agents[seat]
            values = [row[seat] for row in explained if math.isfinite(row[seat])]
            metrics[f"br_explained_var/{agent}"] = float(np.mean(values)) if values else float("nan")
            mine = [episode.returns[seat] for episode in recent if episode.controllers[seat] == LEARNER]
            metrics[f"br_return/{agent}"] = float(np.mean(mine)) if mine else float("nan")
        policies = {seat: trainer.agent_policy(seat) for seat in learners}
        return BestResponses(policies, metrics)


def check_warm_start(warm_start: Any, policy_scale: Any) -> None:
    """Raises ValueError unless ``warm_start`` is a bool and ``policy_scale`` a number in [0, 1]."""
    if not isinstance(warm_start, (bool, np.bool_)):
        raise ValueError(f"warm_start must be True or False, got {warm_start!r}")
    if isinstance(policy_scale, bool) or not isinstance(policy_scale, (int, float, np.number)):
        raise ValueError(f"warm_start_policy_scale must be a number in [0, 1], got {policy_scale!r}")
    if not 0.0 <= float(policy_scale) <= 1.0:
        raise ValueError(
            f"warm_start_policy_scale must be in [0, 1] (1: keep the copied policy, 0: restart it at uniform), "
            f"got {policy_scale!r}"
        )


def warm_start_seat(trainer: JointMultiAgentTrainer, seat: int, member: Any, policy_scale: float = 1.0) -> bool:
    """Copies a population member's network (actor and critic) into ``seat``'s slot of a fresh trainer.

    Works when ``member`` is an :class:`~marljoint.policies.AgentPolicy` over per-agent (stacked) weights whose
    parameters match the seat's network slot by name and shape; anything else (the uniform initial policy, another
    architecture) is left alone.

    Args:
        trainer: the fresh trainer.
        seat: the seat whose slot is filled.
        member: the population member to copy.
        policy_scale: multiplies the copied policy output layer (``actor_head``, weights and bias): 1 keeps the
            member's policy, 0 makes it uniform (over the allowed actions) on the member's encoders and critic.

    Returns:
        Whether the seat was warm-started.
    """
    network, slot = trainer.policy_for(seat)
    source = getattr(member, "network", None)
    if not isinstance(member, AgentPolicy) or type(source) is not type(network) or network.share_parameters:
        return False
    mine, theirs = dict(network.named_parameters()), dict(source.named_parameters())
    if mine.keys() != theirs.keys() or any(mine[k].shape[1:] != theirs[k].shape[1:] for k in mine):
        return False
    with torch.no_grad():
        for name, param in mine.items():
            param[slot].copy_(theirs[name][member.slot])
            if name.startswith("actor_head.") and policy_scale != 1.0:
                param[slot].mul_(float(policy_scale))
    return True


@dataclass(frozen=True)
class BestResponseGain:
    """An estimate of how much each player gains by best-responding to a fixed profile.

    Attributes:
        agents: agent names.
        values: ``[N]`` mean return of each player in the profile.
        best_response_values: ``[N]`` mean return of each player's trained best response against the others.
        gains: ``[N]`` ``best_response_values - values``; a trained best response is at most as good as the
            true one, so the expected gain is a lower bound of the true gain.
        half_widths: ``[N]`` confidence half-width of each gain (normal approximation, independent samples).
        nash_conv: the sum of the gains (an approximate NashConv), and ``nash_conv_half_width`` its half-width.
        confidence: the confidence level.
        episodes: episodes simulated per estimate.
    """

    agents: tuple[str, ...]
    values: np.ndarray
    best_response_values: np.ndarray
    gains: np.ndarray
    half_widths: np.ndarray
    nash_conv: float
    nash_conv_half_width: float
    confidence: float
    episodes: int


def _normal_quantile(confidence: float) -> float:
    """Two-sided standard normal quantile for ``confidence`` (bisection on erf; no scipy needed)."""
    target = 0.5 + confidence / 2.0
    low, high = 0.0, 10.0
    for _ in range(100):
        middle = (low + high) / 2.0
        if 0.5 * (1.0 + math.erf(middle / math.sqrt(2.0))) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def best_response_gain(
    env: JointEnv,
    policies: Sequence[FrozenPolicy | PolicyMixture],
    config: JointTrainerConfig,
    steps: int,
    episodes: int = 1000,
    players: Sequence[int] | None = None,
    seed: int = 0,
    confidence: float = 0.95,
    eval_env: JointEnv | None = None,
) -> BestResponseGain:
    """Trains a fresh PPO best response for each player against a fixed profile and measures the gain.

    For envs without a known tree this is the practical exploitability estimate: player ``p``'s gain is its
    return when its best response plays against the others' fixed policies, minus its return in the profile;
    their sum approximates NashConv (from below, as the best responses are approximate).

    Args:
        env: the JointEnv to train on (``num_envs`` copies).
        policies: one frozen policy or :class:`~marljoint.best_response.population.PolicyMixture` per seat.
        config: PPO settings of the best responses.
        steps: env steps of best-response training (shared by all players, trained at once).
        episodes: episodes per estimate (the profile, and each best response).
        players: the players to best-respond for; all when ``None`` (others report a gain of NaN).
        seed: seeds training and simulation.
        confidence: the confidence level of the intervals, in ``(0, 1)``.
        eval_env: JointEnv for the simulations; ``env`` when ``None``.

    Returns:
        :class:`BestResponseGain`.

    Raises:
        ValueError: the wrong number of policies, ``episodes`` below 2, or a confidence outside ``(0, 1)``.
    """
    spec = env.spec
    num_agents = spec.num_agents
    _check_gain_arguments(spec.agents, policies, episodes, confidence)
    learners = list(range(num_agents)) if players is None else [int(p) for p in players]
    mixtures = [p if isinstance(p, PolicyMixture) else PolicyMixture([p]) for p in policies]
    sequence = np.random.SeedSequence([int(seed) % 2**63, 0x627267])
    train_seed, profile_seed, *player_seeds = (int(s.generate_state(1)[0]) for s in sequence.spawn(2 + num_agents))
    oracle = PPOOracle(env, config, steps)
    trained = oracle([m.members for m in mixtures], [m.weights for m in mixtures], learners, train_seed).policies
    simulation_env = env if eval_env is None else eval_env
    rng = np.random.default_rng(profile_seed)
    members, profiles = mixture_profiles(mixtures, episodes, rng)
    returns = _episode_returns(simulation_env, members, profiles, profile_seed)
    deviated = {}
    for seat in learners:
        deviation = list(mixtures)
        deviation[seat] = PolicyMixture([trained[seat]])
        rng = np.random.default_rng(player_seeds[seat])
        members, profiles = mixture_profiles(deviation, episodes, rng)
        deviated[seat] = _episode_returns(simulation_env, members, profiles, player_seeds[seat])[:, seat]
    return _gain_estimate(tuple(spec.agents), returns, deviated, learners, episodes, confidence)


def _check_gain_arguments(
    agents: Sequence[str], policies: Sequence[FrozenPolicy | PolicyMixture], episodes: Any, confidence: Any
) -> None:
    """The argument checks of :func:`best_response_gain`."""
    if len(policies) != len(agents):
        raise ValueError(f"got {len(policies)} policies for {len(agents)} seats {list(agents)}; pass one per seat")
    if not isinstance(episodes, (int, np.integer)) or episodes < 2:
        raise ValueError(f"episodes={episodes!r}; pass at least 2 episodes per estimate")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r}; pass a level in (0, 1), e.g. 0.95")


def _gain_estimate(
    agents: tuple[str, ...],
    returns: np.ndarray,
    deviated: Mapping[int, np.ndarray],
    learners: Sequence[int],
    episodes: int,
    confidence: float,
) -> BestResponseGain:
    """The gains and their confidence intervals from the profile's ``[episodes, N]`` returns and each learner's
    ``[episodes]`` returns with its best response (``deviated``, by seat)."""
    num_agents = returns.shape[1]
    values = returns.mean(axis=0)
    value_vars = returns.var(axis=0, ddof=1) / episodes
    br_variances = np.zeros(num_agents)
    br_values = np.full(num_agents, np.nan)
    gains = np.full(num_agents, np.nan)
    half_widths = np.full(num_agents, np.nan)
    z = _normal_quantile(confidence)
    for seat in learners:
        br_values[seat] = deviated[seat].mean()
        gains[seat] = br_values[seat] - values[seat]
        br_variances[seat] = deviated[seat].var(ddof=1) / episodes
        half_widths[seat] = z * math.sqrt(br_variances[seat] + value_vars[seat])
    chosen = np.asarray(learners)
    # The players' profile values come from the same episodes (in zero-sum games they cancel exactly), so the
    # sum's variance uses the per-episode sum of the chosen players' returns.
    total_variance = float(br_variances[chosen].sum() + returns[:, chosen].sum(axis=1).var(ddof=1) / episodes)
    return BestResponseGain(
        agents=agents,
        values=values,
        best_response_values=br_values,
        gains=gains,
        half_widths=half_widths,
        nash_conv=float(gains[chosen].sum()),
        nash_conv_half_width=z * math.sqrt(total_variance),
        confidence=confidence,
        episodes=int(episodes),
    )


def _episode_returns(env: JointEnv, members: list[list[FrozenPolicy]], profiles: np.ndarray, seed: int) -> np.ndarray:
    """``[episodes, N]``: the returns of one episode per row of ``profiles``."""
    returns, _ = simulate_profiles(env, members, profiles, 1, seed)
    return returns


GAIN_METRICS: dict[str, str] = {
    "best_response_gain": "estimated exploitability (NashConv / P) of the evaluated policies, from fresh PPO best "
    "responses (best_response_gain; every gain_every iterations, for envs without a known game)",
    "best_response_gain_ci": "95% confidence half-width of best_response_gain (simulation noise only: the best "
    "responses' own shortfall biases the estimate low)",
}
"""The columns :func:`gain_metrics` adds to a PSRO or NFSP row."""

GAIN_DEFAULTS: dict[str, int] = {"gain_every": 0, "gain_steps": 50_000, "gain_episodes": 200}
"""The defaults of the exploitability estimates by fresh best responses, for PSRO and NFSP alike
(:class:`~marljoint.best_response.PsroConfig` and :class:`~marljoint.best_response.NfspConfig` take them from here):
none unless asked for (``gain_every`` 0), then 50,000 env steps of best-response training and 200 episodes per
estimate."""


def check_gain_settings(every: Any, steps: Any, episodes: Any) -> None:
    """Validates the ``gain_every`` / ``gain_steps`` / ``gain_episodes`` settings of PSRO and NFSP.

    Raises:
        ValueError: naming the setting, the value and the fix.
    """
    if not isinstance(every, (int, np.integer)) or isinstance(every, bool) or every < 0:
        raise ValueError(f"gain_every must be an integer >= 0 (0: never estimate), got {every!r}")
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"gain_steps must be a positive integer (env steps per estimate, e.g. 50000), got {steps!r}")
    if not isinstance(episodes, (int, np.integer)) or isinstance(episodes, bool) or episodes < 2:
        raise ValueError(f"gain_episodes must be an integer >= 2 (e.g. 200), got {episodes!r}")


def run_trainer_config(device: Any, trainer: JointTrainerConfig) -> JointTrainerConfig:
    """The PPO settings a PSRO or NFSP run builds its trainers with: ``trainer`` on the run's ``device``.

    Every network of a run lives on one device, named by the run's config; the trainer's own ``device`` may stay
    at its default (``"cpu"``) or name the same one.

    Raises:
        ValueError: ``device`` that names no torch device, or a ``trainer.device`` that names another device.
    """
    placed = trainer.replace(device=device)
    if trainer.device not in ("cpu", device):
        raise ValueError(
            f"trainer.device={trainer.device!r} but device={device!r}: every network of the run lives on the run's "
            f"device; set device={trainer.device!r} (the trainer follows it)"
        )
    return placed


def gain_metrics(
    env: JointEnv,
    policies: Sequence[FrozenPolicy | PolicyMixture],
    config: JointTrainerConfig,
    steps: int,
    episodes: int,
    seed: int,
) -> dict[str, float]:
    """:func:`best_response_gain` of ``policies`` as the two columns of :data:`GAIN_METRICS` (per player: NashConv
    and its half-width divided by the number of players, the scale of ``exploitability``)."""
    gain = best_response_gain(env, policies, config, steps, episodes=episodes, seed=seed)
    players = len(policies)
    return {
        "best_response_gain": float(gain.nash_conv) / players,
        "best_response_gain_ci": float(gain.nash_conv_half_width) / players,
    }


def check_current_format(config: Mapping[str, Any], keys: Sequence[str], command: str) -> None:
    """Refuses a saved PSRO or NFSP config that is not in the format this version writes: one lacking any of its
    own ``keys`` or a trainer table naming ``normalize_observations``.

    Raises:
        ValueError: naming the missing settings and the reader that converts such a checkpoint.
    """
    trainer = config.get("trainer")
    missing = [key for key in keys if key not in config]
    if not isinstance(trainer, Mapping) or "normalize_observations" not in trainer:
        missing.append("trainer.normalize_observations")
    if missing:
        raise ValueError(
            f"this {command} checkpoint is in an earlier format (its config lacks {missing}); load it through "
            f"marljoint.run, which converts it: marljoint.run.migrations.read_{command}_checkpoint(directory) "
            f"(what `marljoint {command} --resume` does)"
        )
