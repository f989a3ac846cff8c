"""The settings of the off-policy trainer (VDN, QMIX, MASAC, MADDPG): one frozen, validated dataclass."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marljoint.collect.settings import SHARED_DEFAULTS
from marljoint.offpolicy.defaults import OFFPOLICY_DEFAULTS
from marljoint.offpolicy.sac import SacConfig

__all__ = [
    "ALGORITHMS",
    "RUN_SAC_SETTINGS",
    "SAC_TABLE_SETTINGS",
    "VALUE_ALGORITHMS",
    "OffPolicyConfig",
    "sac_changes",
]

VALUE_ALGORITHMS = ("vdn", "qmix")
"""The value-decomposition algorithms."""
ALGORITHMS = (*VALUE_ALGORITHMS, "masac", "maddpg")
"""The algorithms :class:`OffPolicyConfig` trains: value decomposition, and the centralised-critic actor-critics
(:mod:`marljoint.offpolicy.sac`, their settings in :attr:`OffPolicyConfig.sac`)."""

_CHOICES = {
    "algorithm": ALGORITHMS,
    "target_update": ("polyak", "periodic"),
    "exploration": ("epsilon", "boltzmann"),
    "team_reward": ("mean", "sum"),
}


@dataclass(frozen=True)
class OffPolicyConfig:
    """Hyperparameters of :class:`~marljoint.offpolicy.OffPolicyTrainer`.

    The settings every family shares take their defaults from one place:
    :data:`~marljoint.collect.settings.SHARED_DEFAULTS`, or, where this family's differ from PPO's (the rollout's
    length, γ, the learning rate, the gradient clip, τ), :data:`~marljoint.offpolicy.defaults.OFFPOLICY_DEFAULTS`.
    In a run, ``num_envs``, ``rollout_steps``, ``seed``, ``gamma``, ``hidden_sizes`` and ``share_parameters`` are
    the run's own settings; the ``[offpolicy]`` table holds the rest.

    Example:
        >>> cfg = OffPolicyConfig(algorithm="qmix", num_envs=4, batch_size=64)
        >>> cfg.transitions_per_iteration
        64
    """

    algorithm: str = OFFPOLICY_DEFAULTS["algorithm"]
    """``"vdn"`` (the team value is the sum of the agents' utilities) or ``"qmix"`` (a monotonic mixing network
    whose weights are produced by hypernetworks from the global state), or ``"masac"`` / ``"maddpg"`` (an actor
    per agent and centralised critics, :mod:`marljoint.offpolicy.sac`; the exploration, target and learning-rate
    settings here are then unused, and :attr:`sac` holds theirs)."""
    num_envs: int = SHARED_DEFAULTS["num_envs"]
    """E, env copies stepped together."""
    rollout_steps: int = OFFPOLICY_DEFAULTS["rollout_steps"]
    """Joint steps played in every env copy per iteration (an iteration stores ``rollout_steps × num_envs``
    joint transitions)."""
    gamma: float = OFFPOLICY_DEFAULTS["gamma"]
    """Discount factor."""
    hidden_sizes: tuple[int, ...] = SHARED_DEFAULTS["hidden_sizes"]
    """Hidden layer sizes of every agent's Q network encoder (the last is the feature size the redundancy penalty
    reads)."""
    share_parameters: bool = SHARED_DEFAULTS["share_parameters"]
    """Agents of a group share one Q network (their one-hot agent id appended to the observation)."""
    learning_rate: float = OFFPOLICY_DEFAULTS["learning_rate"]
    """Adam learning rate of every network (Q networks and mixer)."""
    adam_eps: float = SHARED_DEFAULTS["adam_eps"]
    """Adam epsilon."""
    max_grad_norm: float = OFFPOLICY_DEFAULTS["max_grad_norm"]
    """Global gradient-norm clip, applied to each network separately."""
    buffer_size: int = 50_000
    """Joint transitions the replay buffer holds (the oldest are overwritten)."""
    batch_size: int = 128
    """Joint transitions per gradient step."""
    learning_starts: int = 1_000
    """Joint transitions stored before the first gradient step."""
    updates_per_iteration: int | None = None
    """Gradient steps after each iteration's collection; ``None``: one per :attr:`transitions_per_update` stored
    transitions (:attr:`updates`; 16 for vdn and qmix, 4 for masac and maddpg), so each transition is sampled about
    ``batch_size / transitions_per_update`` times whatever the iteration's size."""
    double_q: bool = True
    """Double-Q targets: the online networks choose the next action, the target networks value it."""
    target_update: str = "polyak"
    """``"polyak"`` (target ← τ·online + (1−τ)·target after every gradient step) or ``"periodic"`` (a copy every
    ``target_update_interval`` gradient steps)."""
    tau: float = OFFPOLICY_DEFAULTS["tau"]
    """Polyak coefficient τ."""
    target_update_interval: int = 200
    """Gradient steps between periodic target copies."""
    exploration: str = "epsilon"
    """``"epsilon"`` (a uniformly random legal action with probability ε, else the greedy one) or ``"boltzmann"``
    (a legal action drawn from ``softmax(Q / temperature)``)."""
    exploration_start: float = 1.0
    """ε (or the temperature) at the first env step."""
    exploration_end: float = 0.05
    """ε (or the temperature) from ``exploration_steps`` env steps on."""
    exploration_steps: int = 20_000
    """Env steps over which ε (or the temperature) falls linearly from start to end."""
    mixer_embed_dim: int = 32
    """QMIX: width of the mixing network's hidden layer."""
    hypernet_hidden: int = 64
    """QMIX: hidden width of the hypernetworks producing the mixing weights."""
    team_reward: str = "mean"
    """How the agents' rewards of a step form the team reward the mixer learns: ``"mean"`` over the agents present
    at the step, or ``"sum"``."""
    reward_scale: float | str = "auto"
    """Factor on the team reward before it enters the TD target, or ``"auto"``: one over the running standard
    deviation of the team rewards stored so far (:class:`~marljoint.offpolicy.reward_scale.RewardScale`), so the
    TD targets have the same scale on any env (rewards of hundreds per step would otherwise give utilities of tens
    of thousands, which networks starting near zero take long to reach)."""
    seed: int = SHARED_DEFAULTS["seed"]
    """Seed of the env resets, the exploration noise, the initial weights and the replay sampling."""
    sac: SacConfig | None = None
    """masac and maddpg: their own settings, a :class:`~marljoint.offpolicy.sac.SacConfig` (``docs/masac.md``),
    given as one or as a table of its fields (``{"tau": 0.01}``; none: SacConfig's defaults). Its ``variant``,
    ``gamma``, ``hidden_sizes`` and ``share_parameters`` are this config's ``algorithm``, ``gamma``,
    ``hidden_sizes`` and ``share_parameters``: a table may not hold them, and a SacConfig's are replaced by them.
    ``None`` for vdn and qmix."""

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        for name in ("num_envs", "rollout_steps", "buffer_size", "batch_size"):
            _positive_int(name, getattr(self, name))
        if self.updates_per_iteration is not None:
            _positive_int("updates_per_iteration", self.updates_per_iteration)
        for name in ("target_update_interval", "mixer_embed_dim", "hypernet_hidden"):
            _positive_int(name, getattr(self, name))
        for name in ("learning_starts", "exploration_steps"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {getattr(self, name)!r}")
        object.__setattr__(self, "hidden_sizes", _widths(self.hidden_sizes))
        _in_range("gamma", self.gamma, 0.0, 1.0, "a discount in [0, 1]")
        _in_range("tau", self.tau, 0.0, 1.0, "a Polyak coefficient in (0, 1]", open_low=True)
        _in_range("exploration_start", self.exploration_start, 0.0, math.inf, "a non-negative number")
        _in_range("exploration_end", self.exploration_end, 0.0, math.inf, "a non-negative number")
        if self.exploration == "epsilon" and max(self.exploration_start, self.exploration_end) > 1.0:
            raise ValueError(
                f"epsilon-greedy exploration needs probabilities in [0, 1], got exploration_start="
                f"{self.exploration_start!r} and exploration_end={self.exploration_end!r}; lower them or use "
                "exploration='boltzmann'"
            )
        if self.reward_scale != "auto":
            _in_range("reward_scale", self.reward_scale, 0.0, math.inf, "'auto' or a positive number", open_low=True)
        for name in ("learning_rate", "adam_eps", "max_grad_norm"):
            _in_range(name, getattr(self, name), 0.0, math.inf, "a positive number", open_low=True)
        if not isinstance(self.double_q, bool) or not isinstance(self.share_parameters, bool):
            raise ValueError(
                f"double_q and share_parameters must be true or false, got {self.double_q!r}, {self.share_parameters!r}"
            )
        if not _is_int(self.seed) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be an integer in [0, 2**63 - 1], got {self.seed!r}")
        object.__setattr__(self, "sac", _parse_sac(self.sac, self))
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"batch_size={self.batch_size} exceeds buffer_size={self.buffer_size}; raise buffer_size or lower "
                "batch_size"
            )
        if self.learning_starts > self.buffer_size:
            raise ValueError(
                f"learning_starts={self.learning_starts} exceeds buffer_size={self.buffer_size}: the buffer never "
                "holds that many transitions, so no gradient step would be taken; lower learning_starts or raise "
                "buffer_size"
            )

    @property
    def transitions_per_iteration(self) -> int:
        """Joint transitions stored per iteration: ``rollout_steps × num_envs``."""
        return self.rollout_steps * self.num_envs

    @property
    def transitions_per_update(self) -> int:
        """Stored transitions per gradient step when ``updates_per_iteration`` is ``None``: 16 for the value methods,
        4 for the actor-critics, whose actors and temperatures learn from the critics and need more steps per
        transition (measured on simple_spread with continuous actions: ``docs/learning.md``, "MASAC against PPO")."""
        return 4 if self.algorithm in ("masac", "maddpg") else 16

    @property
    def updates(self) -> int:
        """Gradient steps per iteration: ``updates_per_iteration``, or one per :attr:`transitions_per_update`
        transitions stored."""
        if self.updates_per_iteration is not None:
            return self.updates_per_iteration
        return max(1, self.transitions_per_iteration // self.transitions_per_update)

    def replace(self, **changes: Any) -> OffPolicyConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (as written to ``config.toml``)."""
        out = dataclasses.asdict(self)
        out["hidden_sizes"] = list(self.hidden_sizes)
        out["sac"] = sac_changes(self.sac)
        return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(name: str, value: Any) -> None:
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _in_range(name: str, value: Any, low: float, high: float, what: str, open_low: bool = False) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or math.isnan(value) or value > high or value < low or (open_low and value == low):
        raise ValueError(f"{name} must be {what}, got {value!r}")


def _widths(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"hidden_sizes must be a list of positive integer widths such as [64, 64], got {value!r}")
    widths = tuple(value)
    if not widths or not all(_is_int(w) and w > 0 for w in widths):
        raise ValueError(f"hidden_sizes must be a list of positive integer widths such as [64, 64], got {value!r}")
    return widths


RUN_SAC_SETTINGS = ("variant", "gamma", "hidden_sizes", "share_parameters")
""":class:`~marljoint.offpolicy.sac.SacConfig` fields taken from :class:`OffPolicyConfig` (the algorithm, γ, the
actors' widths, sharing), not from its ``sac`` table."""

SAC_TABLE_SETTINGS = tuple(f.name for f in dataclasses.fields(SacConfig) if f.name not in RUN_SAC_SETTINGS)
"""The keys an :attr:`OffPolicyConfig.sac` table may hold: the other :class:`~marljoint.offpolicy.sac.SacConfig`
fields, in their order."""


def sac_changes(sac: SacConfig | None) -> dict[str, Any]:
    """The ``sac`` table of an :class:`OffPolicyConfig` as ``config.toml`` holds it: the settings of ``sac`` (not
    those the off-policy config sets) whose values differ from their defaults, as plain values; empty for ``None``.

    Example:
        >>> sac_changes(SacConfig(tau=0.01, critic_hidden_sizes=(16,), gamma=0.9))
        {'tau': 0.01, 'critic_hidden_sizes': [16]}
    """
    if sac is None:
        return {}
    fields = SacConfig.__dataclass_fields__
    changed = {name: getattr(sac, name) for name in SAC_TABLE_SETTINGS if getattr(sac, name) != fields[name].default}
    return {name: list(value) if isinstance(value, tuple) else value for name, value in changed.items()}


def _parse_sac(value: Any, config: OffPolicyConfig) -> SacConfig | None:
    """The :attr:`OffPolicyConfig.sac` of ``config`` from the ``sac`` it was given: ``None`` for vdn and qmix, else
    a :class:`~marljoint.offpolicy.sac.SacConfig` with the off-policy config's algorithm, γ, widths and sharing.

    Raises:
        ValueError: for a value that is neither a table nor a SacConfig, settings given to vdn or qmix, or a bad key
            or value of the table (naming ``sac.<key>``, the value and the fix).
    """
    if value is None:
        value = {}
    if not isinstance(value, (Mapping, SacConfig)):
        raise ValueError(
            f"sac must be a table of MASAC and MADDPG settings (such as {{'tau': 0.01}}) or a SacConfig, got {value!r}"
        )
    if config.algorithm in VALUE_ALGORITHMS:
        if sac_changes(value) if isinstance(value, SacConfig) else value:
            raise ValueError(f"sac settings apply to masac and maddpg, not {config.algorithm}; drop them")
        return None
    run = {
        "variant": config.algorithm,
        "gamma": config.gamma,
        "hidden_sizes": tuple(config.hidden_sizes),
        "share_parameters": config.share_parameters,
    }
    if isinstance(value, SacConfig):
        return dataclasses.replace(value, **run)
    table = _sac_table(value)
    try:
        return SacConfig(**run, **table)
    except (TypeError, ValueError) as exc:
        raise ValueError(_sac_message(str(exc), value, table)) from None


def _sac_table(value: Mapping[str, Any]) -> dict[str, Any]:
    """The ``sac`` table's settings, refusing a key the off-policy config sets and a key that is no setting."""
    table = dict(value)
    for key, given in table.items():
        if key in RUN_SAC_SETTINGS:
            raise ValueError(
                f"sac.{key} is set by the off-policy config itself (algorithm, gamma, hidden_sizes, "
                f"share_parameters), got {given!r}; set {'algorithm' if key == 'variant' else key} there instead"
            )
        if key not in SAC_TABLE_SETTINGS:
            raise ValueError(
                f"sac.{key}={given!r} is not a MASAC or MADDPG setting; valid keys: {', '.join(SAC_TABLE_SETTINGS)}"
            )
    if isinstance(table.get("critic_hidden_sizes"), list):
        table["critic_hidden_sizes"] = tuple(table["critic_hidden_sizes"])
    return table


def _sac_message(message: str, given: Mapping[str, Any], table: Mapping[str, Any]) -> str:
    """SacConfig's ``message`` about a field as ``sac.<field>=<value as given> ...``: its messages start with the
    field they name, with the value it got (``tau=0.0 must lie in (0.0, 1.0]``) or without (``tau must be a
    float``); ``table`` holds the values it got, ``given`` the values as given."""
    name = message.split(" ")[0].split("=")[0]
    if name not in SacConfig.__dataclass_fields__:
        return f"sac: {message}"
    if name not in given:
        return f"sac.{message}"
    rest = message.removeprefix(f"{name}={table[name]!r}").removeprefix(name)
    return f"sac.{name}={given[name]!r}{rest}"
