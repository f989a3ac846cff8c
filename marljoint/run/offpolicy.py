"""The ``algorithm`` of a run: which trainer ``marljoint train`` builds, and the off-policy trainer of value
runs (``vdn``, ``qmix``) and centralised-critic actor-critic runs (``masac``, ``maddpg``) behind the same interface
as the PPO trainer's."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import torch

from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.run.errors import RunError
from marljoint.threads import learner_threads

__all__ = [
    "ALGORITHMS",
    "OFFPOLICY_ALGORITHMS",
    "VALUE_ALGORITHMS",
    "OffPolicyRun",
    "build_offpolicy_trainer",
    "check_algorithm",
    "check_offpolicy_env",
    "check_offpolicy_run",
]

VALUE_ALGORITHMS = ("vdn", "qmix")
"""Value decomposition, trained off-policy from a replay buffer."""
OFFPOLICY_ALGORITHMS = (*VALUE_ALGORITHMS, "masac", "maddpg")
"""Algorithms trained off-policy from a replay buffer: value decomposition and the centralised-critic
actor-critics (their own settings in ``[offpolicy.sac]``)."""
ALGORITHMS = ("mappo", "ippo", *OFFPOLICY_ALGORITHMS)
"""Every ``algorithm`` a run may name; ``mappo`` and ``ippo`` are PPO with and without the centralised critic."""

# Settings an off-policy run takes from the run's trainer settings, not from its [offpolicy] table.
_FROM_RUN = ("algorithm", "num_envs", "rollout_steps", "seed", "hidden_sizes", "share_parameters", "gamma")


def offpolicy_config(algorithm: str, trainer: Any, table: Mapping[str, Any]) -> OffPolicyConfig:
    """The :class:`~marljoint.offpolicy.OffPolicyConfig` of a value run.

    Args:
        algorithm: ``vdn``, ``qmix``, ``masac`` or ``maddpg``.
        trainer: the run's :class:`~marljoint.JointTrainerConfig` (E, T, seed, widths, sharing and γ come from it;
            γ 0.99 where it is derived).
        table: the run's ``offpolicy`` settings (every other OffPolicyConfig field).

    Raises:
        RunError: for a key the table cannot hold, or an invalid value (naming the field).
    """
    misplaced = sorted(set(table) & set(_FROM_RUN))
    if misplaced:
        raise RunError(
            f"offpolicy.{misplaced[0]} is a setting of the run itself; set {misplaced[0]} at the top level "
            "(or with its command-line option) instead"
        )
    shared = {
        **_learning_rate(algorithm, trainer, table),
        "algorithm": algorithm,
        "num_envs": trainer.num_envs,
        "rollout_steps": trainer.rollout_steps,
        "seed": trainer.seed,
        "hidden_sizes": trainer.hidden_sizes,
        "share_parameters": trainer.share_parameters,
        "gamma": 0.99 if trainer.gamma is None else trainer.gamma,
    }
    try:
        return OffPolicyConfig(**shared, **dict(table))
    except TypeError:
        valid = sorted(f for f in OffPolicyConfig.__dataclass_fields__ if f not in _FROM_RUN)
        unknown = sorted(set(table) - set(OffPolicyConfig.__dataclass_fields__))
        raise RunError(f"unknown offpolicy setting(s) {unknown}; valid keys: {valid}") from None
    except ValueError as exc:
        raise RunError(f"offpolicy: {exc}") from None


_SAC_RATES = "offpolicy.sac's actor_lr, critic_lr and alpha_lr (--set 'offpolicy={sac={actor_lr=3e-4}}')"


def _learning_rate(algorithm: str, trainer: Any, table: Mapping[str, Any]) -> dict[str, Any]:
    """The run's ``learning_rate`` (``--learning-rate``) as the value methods' ``offpolicy.learning_rate``; refused
    where it would be ignored: given twice, or for masac and maddpg, which read ``offpolicy.sac``'s rates."""
    rate = trainer.learning_rate
    if algorithm not in VALUE_ALGORITHMS:
        for name, given in (("learning_rate", rate), ("offpolicy.learning_rate", table.get("learning_rate"))):
            if given is not None:
                raise RunError(f"{algorithm} does not read {name} (= {given!r}); set {_SAC_RATES} instead")
        return {}
    if rate is None:
        return {}
    if "learning_rate" in table:
        raise RunError(
            f"learning_rate = {rate!r} and offpolicy.learning_rate = {table['learning_rate']!r} both set the "
            f"{algorithm} networks' learning rate; set one of them"
        )
    return {"learning_rate": rate}


def check_offpolicy_run(spec: Any) -> None:
    """Refuses run settings an off-policy run cannot honour: ``exploitability_every`` (it scores per-seat
    policies, which these runs do not have), and a ``learning_starts`` the run never reaches (the run would end
    without a gradient step).

    Raises:
        RunError: naming the setting, its value and the fix.
    """
    algorithm = spec.algorithm
    if algorithm not in OFFPOLICY_ALGORITHMS:
        return
    if spec.exploitability_every is not None:
        raise RunError(
            f"exploitability_every = {spec.exploitability_every} scores each seat's policy, which a {algorithm} run "
            "does not have; drop --exploitability-every (--eval-every measures its returns), or train with "
            "--algorithm mappo or ippo, or run marljoint psro or nfsp"
        )
    config = offpolicy_config(algorithm, spec.trainer, spec.offpolicy)
    per_iteration = config.transitions_per_iteration
    stored = math.ceil(spec.total_steps / per_iteration) * per_iteration
    if config.learning_starts > stored:
        raise RunError(
            f"offpolicy.learning_starts = {config.learning_starts} is more than the {stored} joint transitions "
            f"this run stores (total_steps = {spec.total_steps}, in iterations of {per_iteration}), so it would end "
            "without training; lower learning_starts or raise total_steps"
        )


def check_offpolicy_env(spec: Any, joint_spec: Any, per_copy: int = 0) -> Any:
    """Refuses, before the env copies and networks are built, an off-policy run that cannot learn on its env or
    does not fit in memory: vdn and qmix on a zero-sum game (their team reward, the agents' rewards summed or
    averaged, is always 0 there), and a replay buffer, networks and env copies larger than the memory available
    (:func:`~marljoint.run.memory.estimate_offpolicy_memory`).

    Args:
        spec: the run's :class:`~marljoint.run.spec.RunSpec`.
        joint_spec: its env's :class:`~marljoint.JointSpec`.
        per_copy: bytes one env copy allocates.

    Returns:
        The :class:`~marljoint.run.memory.OffPolicyMemory` estimate.

    Raises:
        RunError: naming the reason, the numbers and the fix.
    """
    from marljoint.run import memory
    from marljoint.run.exploitability import zero_sum_env

    algorithm = spec.algorithm
    if algorithm in VALUE_ALGORITHMS and zero_sum_env(spec.env, spec.env_kwargs):
        raise RunError(
            f"env {spec.env!r} is a zero-sum game, so the team reward {algorithm} learns (the agents' rewards "
            "averaged or summed) is always 0 and nothing would be learnt; train its players against each other "
            "with --algorithm mappo or ippo (self-play), or run marljoint psro or nfsp"
        )
    config = offpolicy_config(algorithm, spec.trainer, spec.offpolicy)
    estimate = memory.estimate_offpolicy_memory(
        joint_spec, config, per_copy, ray=spec.trainer.collection.backend == "ray"
    )
    free = memory.available_memory()
    if free is not None and estimate.host > free:
        size = memory.format_bytes
        raise RunError(
            f"the {algorithm} run needs about {size(estimate.host)} of memory, but only {size(free)} is "
            f"available: the replay buffer of {config.buffer_size:,} transitions x {size(estimate.transition)} "
            f"(twice, while a checkpoint is written) {size(estimate.replay)}, the networks {size(estimate.networks)}, "
            f"a batch of {config.batch_size} {size(estimate.batch)}, the {config.num_envs:,} env copies "
            f"{size(estimate.env_copies)}; lower offpolicy.buffer_size, batch_size, mixer_embed_dim, "
            "hypernet_hidden or hidden_sizes, or num_envs"
        )
    return estimate


def check_algorithm(algorithm: str | None, trainer: Any, table: Mapping[str, Any]) -> None:
    """Refuses an unknown algorithm, PPO settings that contradict it, and invalid off-policy settings.

    Raises:
        RunError: naming the setting, its value and the fix.
    """
    if algorithm is None:
        if table:
            raise RunError(
                f"offpolicy settings need algorithm = one of {list(OFFPOLICY_ALGORITHMS)}; set algorithm or drop them"
            )
        return
    if algorithm not in ALGORITHMS:
        raise RunError(f"algorithm must be one of {list(ALGORITHMS)}, got {algorithm!r}")
    if algorithm in OFFPOLICY_ALGORITHMS:
        if trainer.recurrent is not None:
            raise RunError(
                f"{algorithm} trains feed-forward utilities, but recurrent={trainer.recurrent!r}; drop recurrent or "
                "use --algorithm mappo or ippo"
            )
        if trainer.device != "cpu":
            raise RunError(f"{algorithm} trains on the CPU, got device={trainer.device!r}; drop --device")
        collection = trainer.collection
        if collection.policy_lag or collection.balance:
            raise RunError(
                f"{algorithm} acts in this process at every env step, so there is no rollout to collect ahead "
                "or to rebalance (its env copies may step in --env-workers K or --ray workers); drop --policy-lag "
                "and --balance"
            )
        offpolicy_config(algorithm, trainer, table)
        return
    if table:
        raise RunError(f"offpolicy settings apply to {', '.join(OFFPOLICY_ALGORITHMS)}, not {algorithm}; drop them")
    central = algorithm == "mappo"
    if trainer.centralized_critic != central:
        raise RunError(
            f"algorithm {algorithm!r} trains {'a centralised' if central else 'per-agent'} critic, but "
            f"centralized_critic={str(trainer.centralized_critic).lower()}; drop one of the two settings"
        )


def with_algorithm_defaults(values: Mapping[str, Any]) -> dict[str, Any]:
    """Run settings with ``centralized_critic`` following ``algorithm = mappo | ippo`` unless given."""
    out = dict(values)
    if out.get("algorithm") in ("mappo", "ippo") and "centralized_critic" not in out:
        out["centralized_critic"] = out["algorithm"] == "mappo"
    return out


class OffPolicyRun:
    """An :class:`~marljoint.offpolicy.OffPolicyTrainer` as the run loop, evaluation and checkpoints see a
    trainer: :attr:`config` is the run's trainer settings, everything else is the off-policy trainer's."""

    def __init__(self, trainer: OffPolicyTrainer, run_config: Any) -> None:
        self.trainer = trainer
        self.config = run_config
        self.derived: dict[str, str] = {}
        # The run loop reads learner.regularizer (PPO's self-play term, --self-play mmd): an off-policy run has none.
        self.learner = SimpleNamespace(regularizer=None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.trainer, name)

    @property
    def joint_policy(self) -> Any:
        """Refused: an off-policy run acts with its Q networks (vdn, qmix) or its own actors (masac, maddpg), not
        with PPO's policy networks, which export and per-agent policies take.

        Raises:
            RunError: saying what to use instead.
        """
        algorithm = self.trainer.config.algorithm
        if algorithm in VALUE_ALGORITHMS:
            why = (
                f"a {algorithm} run acts greedily on its Q networks (the argmax of each agent's utilities), and "
                "export and per-agent policies take PPO's policy networks; export supports mappo and ippo runs"
            )
        else:
            why = (
                f"a {algorithm} run's actors are its own networks (trained against centralised critics), and "
                "export and per-agent policies take PPO's policy networks; export supports mappo and ippo runs"
            )
        raise RunError(f"{why}; use marljoint eval, or load_run(run_dir).act(obs) from Python")

    def agent_policy(self, agent: int | str) -> Any:
        """Refused, as :attr:`joint_policy`.

        Raises:
            RunError: saying what to use instead.
        """
        return self.joint_policy


def build_offpolicy_trainer(spec: Any, env: Any) -> OffPolicyRun:
    """The off-policy trainer of a run (``spec.algorithm`` vdn, qmix, masac or maddpg) on ``env``.

    Raises:
        RunError: for settings or an env the algorithm cannot train (e.g. Box actions for vdn and qmix).
    """
    config = offpolicy_config(spec.algorithm, spec.trainer, spec.offpolicy)
    # The process acts at every env step, so more compute threads would only spin (the PPO runs' rule).
    threads = spec.trainer.torch_threads
    torch.set_num_threads(threads if isinstance(threads, int) else learner_threads(0, collects=True)[0])
    try:
        return OffPolicyRun(OffPolicyTrainer(env, config), spec.trainer)
    except ValueError as exc:
        raise RunError(f"cannot build the {spec.algorithm} trainer for env {spec.env!r}: {exc}") from None
