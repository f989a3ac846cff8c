"""The ``algorithm`` of a run: which trainer ``marljoint train`` builds, and the off-policy trainer of value
runs (``vdn``, ``qmix``) and centralised-critic actor-critic runs (``masac``, ``maddpg``) behind the same interface
as the PPO trainer's."""

from __future__ import annotations

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
        """Refused: a value run acts with its utilities, not with PPO's policy networks.

        Raises:
            RunError: saying what to use instead.
        """
        algorithm = self.trainer.config.algorithm
        acts = "greedily on its Q networks" if algorithm in VALUE_ALGORITHMS else "with its off-policy actors"
        raise RunError(
            f"a {algorithm} run acts {acts} and has no policy networks to export or hand out per agent; use "
            "marljoint eval, or load_run(run_dir).act(obs) from Python"
        )

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
