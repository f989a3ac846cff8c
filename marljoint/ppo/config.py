"""The joint trainer's configuration: one frozen dataclass of flat fields, validated by its groups of settings.

Each consumer reads the group it uses (:attr:`JointTrainerConfig.ppo`, :attr:`~JointTrainerConfig.optim`,
:attr:`~JointTrainerConfig.network`, :attr:`~JointTrainerConfig.runtime`, :attr:`~JointTrainerConfig.collection`);
the fields stay flat, so ``JointTrainerConfig(learning_rate=...)`` and a ``config.toml`` name each setting once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marljoint.collect.config import CollectionConfig
from marljoint.collect.settings import SHARED_DEFAULTS
from marljoint.ppo import checks
from marljoint.ppo.network import NetworkConfig
from marljoint.ppo.optim import OptimConfig
from marljoint.ppo.ppo_settings import PpoConfig
from marljoint.ppo.runtime import RuntimeConfig

__all__ = ["GROUPS", "JointTrainerConfig", "NetworkConfig", "OptimConfig", "PpoConfig", "RuntimeConfig"]


@dataclass(frozen=True)
class JointTrainerConfig:
    """Hyperparameters of :class:`~marljoint.JointMultiAgentTrainer`.

    The fields are flat (each setting constructed, replaced and written to ``config.toml`` under its own name) and
    fall into groups by the part of the trainer that reads them: :attr:`ppo` (:class:`PpoConfig`: rollout shape,
    returns, loss and update schedule), :attr:`optim` (:class:`OptimConfig`), :attr:`network`
    (:class:`NetworkConfig`), :attr:`runtime` (:class:`RuntimeConfig`) and :attr:`collection`
    (:class:`~marljoint.collect.CollectionConfig`). Each group validates its own fields; the config checks what
    spans two of them.

    Example:
        >>> cfg = JointTrainerConfig(num_envs=4, rollout_steps=32, minibatch_size=64)
        >>> cfg.batch_rows, cfg.minibatches_per_epoch
        (128, 2)
        >>> cfg.optim.learning_rate, cfg.runtime.seed
        (0.0003, 0)
    """

    num_agents: int | None = None
    """Expected number of agents N; checked against the env when given (``None``: take the env's)."""
    num_envs: int = SHARED_DEFAULTS["num_envs"]
    """Env copies E stepped together (used by ``from_env`` helpers that build the env)."""
    rollout_steps: int = 128
    """Steps T per rollout; a rollout holds ``T × E`` rows per agent."""
    gamma: float | None = None
    """Discount factor, in [0, 1]. ``None`` (the default) derives it from the env's episode length H (its
    ``max_cycles``, :attr:`~marljoint.env.JointSpec.episode_limit`): ``1 - 1/H`` kept within [0.9, 0.99], so that
    the effective horizon ``1/(1 - gamma)`` is no longer than an episode; 0.99 when the env states no limit. See
    :func:`~marljoint.ppo.derived.derive_settings`."""
    gae_lambda: float = 0.95
    """GAE λ, in [0, 1]."""
    clip_range: float = 0.2
    """PPO ratio clip ε (> 0)."""
    clip_range_vf: float = math.inf
    """Clip range of value updates; ``inf`` gives the plain squared error."""
    vf_coef: float = 0.5
    """Weight of the value loss in each agent's loss."""
    ent_coef: float | None = None
    """Weight of the entropy bonus in each agent's loss. ``None`` (the default) derives it from the action spaces:
    0.01 when every agent's actions are discrete, 0 when some agent acts in a ``Box`` (a Gaussian's entropy grows
    without bound with its standard deviation, so any bonus keeps widening the noise). See
    :func:`~marljoint.ppo.derived.derive_settings`."""
    n_epochs: int = 4
    """Passes over the rollout per update."""
    minibatch_size: int = 256
    """Rows ``(t, e)`` per minibatch; every agent sees the same rows. Not used when :attr:`num_minibatches` is
    set."""
    num_minibatches: int | None = None
    """Minibatches per epoch: each epoch's shuffled rows are cut into this many minibatches of (nearly) equal size,
    so an update takes the same number of steps however large the rollout (CleanRL's ``num_minibatches``), and a
    larger rollout makes larger minibatches instead of more of them. ``None``: cut them :attr:`minibatch_size` rows
    at a time, so the number of steps grows with the rollout. When set, :attr:`minibatch_size` is not used;
    :meth:`replace` with ``minibatch_size`` alone switches back to row-count minibatches."""
    max_grad_norm: float = 0.5
    """Global L2 norm cap of each network's gradient (direction kept); ``inf`` disables clipping. A network is
    one agent's actor, or its critic (or both with ``share_trunk``); with ``share_parameters`` the group's one
    network is clipped once on the gradient summed over its agents."""
    normalize_advantages: bool = True
    """Standardise advantages per agent over its valid rows in each minibatch."""
    iterate_all_minibatches: bool = True
    """True: a full shuffled pass per epoch. False: one minibatch per epoch (the original trainer's mode)."""
    critic_lr: float | None = None
    """If set, every critic parameter (its trunk and value head) gets its own optimizer with this learning rate
    (split critic); needs a critic network of its own (``share_trunk=False`` or a centralised critic)."""
    max_minibatches_per_epoch: int | None = None
    """Cap on minibatches per epoch (``None``: no cap; values below 1 count as 1)."""
    learning_rate: float | None = 3e-4
    """Adam learning rate of the policies (and of the critic unless ``critic_lr`` is set). ``None`` derives it from
    the action spaces (``marljoint train``'s default): 1e-3 when every agent's actions are discrete, 3e-4 when
    some agent acts in a ``Box``. See :func:`~marljoint.ppo.derived.derive_settings`."""
    adam_eps: float = SHARED_DEFAULTS["adam_eps"]
    """Adam ε."""
    seed: int = SHARED_DEFAULTS["seed"]
    """Seed of every generator the trainer owns (sampling, shuffling, env resets)."""
    device: str = SHARED_DEFAULTS["device"]
    """Torch device of the networks, the rollout the update reads and the update itself (the learner's device)."""
    acting_device: str = "auto"
    """Where the policy acts while the rollout is collected in this process: ``"cpu"`` (a CPU copy of the
    networks, whose weights are refreshed from the learner's before every rollout; the rollout is collected on the
    CPU and moved to :attr:`device` once per iteration), or the learner's :attr:`device` (the networks themselves
    act there, one step at a time). ``"auto"`` (the default) chooses by the rule of
    :func:`~marljoint.ppo.derived.derive_acting_device`: on the learner's device only where that pays (image
    observations, or networks whose work per step is large), else on the CPU. With ``device="cpu"`` both are the
    CPU and nothing is copied. The trainer's :attr:`~marljoint.JointMultiAgentTrainer.config` holds the device
    chosen and :attr:`~marljoint.JointMultiAgentTrainer.derived` the reason."""
    share_parameters: bool = SHARED_DEFAULTS["share_parameters"]
    """Agents of one group share one network (agent one-hot appended); False gives one network per agent."""
    value_normalization: bool = True
    """Train the critic on returns standardised by running per-agent statistics (MAPPO's value normalisation)."""
    normalize_observations: bool | None = None
    """Standardise flat observations (and a centralised critic's input) by running per-feature statistics, clipped
    to ±10, before the networks (:class:`~marljoint.policies.ObservationNormalizer`; the statistics live in the
    networks, so checkpoints and frozen policies keep them). ``None`` (the default) derives it from the env: on
    when some agent's observation space holds a ``Box`` with an infinite bound (or one of magnitude >= 1e6), whose
    scale nothing tells in advance; off when every observation is bounded (one-hot, ``[0, 1]`` features, images).
    True normalises every group with flat observations; images are never normalised (the CNN scales bytes to
    ``[0, 1]``). The trainer's :attr:`~marljoint.JointMultiAgentTrainer.config` holds the resolved value and
    :attr:`~marljoint.JointMultiAgentTrainer.derived` the reason."""
    centralized_critic: bool = False
    """The critic sees every agent's observation (and who is alive), not only its own."""
    critic_per_frame: bool = False
    """With :attr:`centralized_critic` and :attr:`share_parameters`: each group's critic runs once per frame on
    the joint state and gives one value per agent of the group (a head of ``n_g`` outputs, as BenchMARL's and
    MAPPO's shared centralised critic runs once per frame), instead of once per agent on the joint state with the
    agent's one-hot id. The same inputs and returns; ``n_g`` times less critic work per frame, and no agent id in
    the critic's trunk (the agents share its features and differ in their output). False (the default): once per
    agent. Feed-forward networks only."""
    share_trunk: bool = False
    """A local critic reads the actor's encoder trunk (one network with two heads) instead of a trunk of its own.
    False (the default, as in CleanRL, SB3 and MAPPO): actor and critic are separate networks, the value loss never
    moves the actor, and each is clipped on its own. True halves the encoder cost (CNNs, large MLPs) but lets the
    value loss shape the policy's features. A centralised critic always has its own network."""
    anneal_lr: bool | None = False
    """Decay every optimizer's learning rate linearly from its initial value to 0 over the run: the scale at
    iteration k of a run that ends at iteration K is ``1 − k / K`` (see
    :meth:`~marljoint.JointMultiAgentTrainer.anneal_learning_rate`). ``None`` derives it from the env (``marljoint
    train``'s default): on from :data:`~marljoint.ppo.derived.MANY_AGENTS` agents, off below; the trainer's
    :attr:`~marljoint.JointMultiAgentTrainer.config` holds the resolved value and
    :attr:`~marljoint.JointMultiAgentTrainer.derived` the reason."""
    target_kl: float | None = None
    """Stop an update's epochs early once an agent's approx KL exceeds ``1.5 × target_kl``."""
    uniform_mix: float = 0.0
    """ε in ``[0, 1)``: the rollouts are played by the behaviour policy ``(1 − ε)·π + ε·uniform`` (each categorical
    head mixed with uniform play over its allowed choices), and the update corrects each agent's own rows by the
    importance weight ``π / behaviour`` (decoupled PPO, as with ``policy_lag = 1``). What the rows of the *other*
    agents add is more visits to the states their rare moves lead to: in self-play of a two-player game the
    states a best response would steer to. 0 (the default): the policy itself. Categorical actions only."""
    bootstrap_truncation: bool = True
    """Bootstrap truncated episodes from V(final obs); False treats truncation as termination (for ablations)."""
    collection: CollectionConfig = field(default_factory=CollectionConfig)
    """How rollouts are collected: ``CollectionConfig(backend="local" | "subprocess" | "ray", workers=K)`` (see
    :class:`~marljoint.collect.CollectionConfig`); every backend gives bit-identical rollouts. In a
    ``config.toml``: ``collection = {backend = "subprocess", workers = 2}``."""
    torch_threads: int | str | None = "auto"
    """Compute threads of the learner's process (torch's intra-op threads). ``"auto"`` (the default): the cores
    this process may use (``os.sched_getaffinity``) less those the env workers take, ``cores − workers`` (at least
    one) with ``"subprocess"`` or ``"ray"`` collection, and one when the process collects the rollouts itself
    (``"local"``), whose env steps run on one core anyway, or when the update runs on a GPU (:attr:`device`), which
    the process drives from one core (:func:`marljoint.threads.learner_threads`). A number
    sets exactly that many; ``None`` leaves torch's own setting. The trainer's
    :attr:`~marljoint.JointMultiAgentTrainer.config` holds the number used and
    :attr:`~marljoint.JointMultiAgentTrainer.derived` the reason. Parallel sums split their work by thread, so
    the number is part of what decides a run's bits: the same seed and the same number give the same run."""
    hidden_sizes: tuple[int, ...] = SHARED_DEFAULTS["hidden_sizes"]
    """Hidden layer widths of the default MLP encoders."""
    recurrent: str | None = None
    """``"gru"`` or ``"lstm"``: every network gets a recurrent core after its MLP (the critic one of its own), and
    each agent keeps a hidden state per env copy, carried across rollouts and replayed by truncated BPTT over
    chunks of :attr:`bptt_length` steps. ``None``: feed-forward networks."""
    rnn_hidden_size: int = 64
    """Hidden size of the recurrent cores (with :attr:`recurrent`)."""
    bptt_length: int | None = None
    """Steps per sequence chunk of truncated BPTT (with :attr:`recurrent`), from 1 to ``rollout_steps``; a
    minibatch holds whole chunks, ``max(1, minibatch_size // bptt_length)`` of them. ``None``: the whole rollout
    (``rollout_steps``)."""
    recurrent_replay: str = "auto"
    """How the update replays each chunk through the recurrent cores (with :attr:`recurrent`). ``"cells"``: the
    stacked GRU/LSTM cells step through the chunk, computing exactly the bits the rollout acted with. ``"fused"``:
    torch's fused GRU/LSTM kernel (cuDNN on a GPU) runs each member's segments of the chunk (cut at every episode
    start, the steps an agent does not advance left out) in one call, the same function up to rounding, which
    spares a GPU several kernel launches per step.
    ``"auto"`` (the default): fused when :attr:`device` is CUDA, the cells elsewhere. The trainer's
    :attr:`~marljoint.JointMultiAgentTrainer.config` holds the choice and
    :attr:`~marljoint.JointMultiAgentTrainer.derived` the reason."""

    def __post_init__(self) -> None:
        if self.num_agents is not None:
            checks.positive_int("num_agents", self.num_agents)
        groups = {
            name: group(**{f.name: getattr(self, f.name) for f in dataclasses.fields(group)})
            for name, group in GROUPS.items()
        }
        # The groups validate their own fields; the config keeps their normalised values (hidden_sizes as a tuple).
        object.__setattr__(self, "hidden_sizes", groups["network"].hidden_sizes)
        object.__setattr__(self, "collection", CollectionConfig.from_value(self.collection))
        object.__setattr__(self, "_groups", groups)
        if self.critic_lr is not None and not groups["network"].own_critic_trunk:
            raise ValueError(
                f"critic_lr={self.critic_lr} steps the critic's own parameters, but share_trunk=True gives the "
                "critic no trunk of its own (the value loss would train the shared trunk at learning_rate); "
                "set share_trunk=False for a split critic, or critic_lr=None"
            )

    @property
    def ppo(self) -> PpoConfig:
        """The rollout's shape, the returns, the loss and the update schedule (read by GAE, the losses and the
        learner's minibatching)."""
        return self._groups["ppo"]

    @property
    def optim(self) -> OptimConfig:
        """The learning rates, Adam's ε, the annealing and the gradient clip (read by the optimisers)."""
        return self._groups["optim"]

    @property
    def network(self) -> NetworkConfig:
        """The encoders, parameter sharing, the critic's kind and the recurrent cores (read when the networks are
        built)."""
        return self._groups["network"]

    @property
    def runtime(self) -> RuntimeConfig:
        """The seed, the learner's and the acting device and the compute threads."""
        return self._groups["runtime"]

    @property
    def chunk_length(self) -> int:
        """Steps per BPTT chunk: :attr:`bptt_length`, or the whole rollout."""
        return self.ppo.chunk_length

    @property
    def batch_rows(self) -> int:
        """Rows per agent in one rollout: ``rollout_steps × num_envs``."""
        return self.ppo.batch_rows

    @property
    def rows_per_minibatch(self) -> int:
        """Rows per minibatch for a rollout of :attr:`batch_rows` rows: :attr:`minibatch_size`, or with
        :attr:`num_minibatches` the rows split into that many (the last minibatch may hold fewer)."""
        return self.ppo.minibatch_rows(self.batch_rows)

    def minibatch_rows(self, rows: int) -> int:
        """Rows (or, for a recurrent rollout, whole chunks) per minibatch when an epoch holds ``rows`` of them:
        ``ceil(rows / num_minibatches)``, or :attr:`minibatch_size` when :attr:`num_minibatches` is ``None``."""
        return self.ppo.minibatch_rows(rows)

    @property
    def minibatches_per_epoch(self) -> int:
        """Minibatch steps per epoch after the single-minibatch mode and the cap are applied, for a rollout of
        :attr:`batch_rows` rows. A turn-based rollout with moves carried in has up to ``N × num_envs`` rows more:
        with :attr:`minibatch_size`, when they make one more minibatch it is left out of that epoch (each epoch
        shuffles anew); with :attr:`num_minibatches` they are spread over the minibatches. A recurrent rollout is
        cut into minibatches of whole chunks instead."""
        return self.ppo.minibatches_per_epoch

    def replace(self, **changes: Any) -> JointTrainerConfig:
        """Returns a copy with ``changes`` applied (validated again). ``minibatch_size`` given without
        ``num_minibatches`` means minibatches of that many rows, so it clears :attr:`num_minibatches`.

        Raises:
            ValueError: for an invalid value, or the collection settings of older configs (``vector_mode``,
                ``num_env_workers``, ``num_workers``, ``extra``), naming :attr:`collection` instead.
        """
        _refuse_older_keys(changes)
        if "minibatch_size" in changes and "num_minibatches" not in changes:
            changes["num_minibatches"] = None
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain Python values (``inf`` kept as a float; :attr:`collection` as a dict)."""
        out = dataclasses.asdict(self)
        out["hidden_sizes"] = list(self.hidden_sizes)
        out["collection"] = self.collection.to_dict()
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> JointTrainerConfig:
        """Builds a config from a mapping of field names, rejecting unknown keys (a run's older ``config.toml`` is
        read into this format by :mod:`marljoint.run.migrations`).

        Raises:
            ValueError: naming the unknown keys and listing the valid ones; for the collection settings of older
                configs (``vector_mode``, ``num_env_workers``, ``num_workers``, ``extra``), naming
                :attr:`collection` instead.
        """
        _refuse_older_keys(values)
        return cls(**known_fields(cls, values))


_OLDER_COLLECTION_KEYS = ("vector_mode", "num_env_workers", "num_workers", "extra")


def _refuse_older_keys(values: Mapping[str, Any]) -> None:
    """Raises for the collection settings of older configs, naming the field that replaced them.

    Raises:
        ValueError: naming the older keys given, :attr:`JointTrainerConfig.collection` and the fix.
    """
    older = sorted(key for key in _OLDER_COLLECTION_KEYS if key in values)
    if older:
        raise ValueError(
            f"{older} are no JointTrainerConfig fields: the collection settings are the field collection; give "
            'e.g. collection=CollectionConfig(backend="subprocess", workers=4) (vector_mode="subprocess" with '
            'num_env_workers=4) or collection=CollectionConfig(backend="ray", workers=4) (num_workers=4), and '
            "drop extra"
        )


def known_fields(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as a dict, after checking every key is a field of the dataclass ``cls``.

    Raises:
        ValueError: naming the unknown keys and listing the valid ones.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; valid fields: {sorted(names)}")
    return dict(values)


GROUPS: dict[str, type] = {
    "ppo": PpoConfig,
    "optim": OptimConfig,
    "network": NetworkConfig,
    "runtime": RuntimeConfig,
}
"""The setting groups of :class:`JointTrainerConfig` by the property that holds each; every field but
``num_agents`` and ``collection`` belongs to exactly one."""
