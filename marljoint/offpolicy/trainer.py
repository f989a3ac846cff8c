"""The off-policy training loop: collect with exploration, store joint transitions, sample, one joint loss, one
backward, per-network clipping and optimiser steps, target updates; checkpoints with an exact resume."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from marljoint.auxiliary import AuxFn
from marljoint.checkpoint import atomic_torch_save, load_checkpoint
from marljoint.collect.backends import make_collector
from marljoint.collect.base import Collector
from marljoint.collect.config import CollectionConfig
from marljoint.collect.ranks import RankCollector
from marljoint.collect.rollout import JointRollout
from marljoint.collect.snapshots import trusted_state
from marljoint.distributed.ranks import RankGroup
from marljoint.env.base import JointEnv, JointObs
from marljoint.env.subprocess import SubprocessJointEnv
from marljoint.offpolicy.acting import ExplorationActing
from marljoint.offpolicy.base import OffPolicyAlgorithm
from marljoint.offpolicy.centralised import CentralisedActorCritic
from marljoint.offpolicy.config import VALUE_ALGORITHMS, OffPolicyConfig
from marljoint.offpolicy.replay import JointTransitions, ReplayBuffer
from marljoint.offpolicy.sharded import RankShards, dealt
from marljoint.offpolicy.transitions import check_saved_transitions, rollout_moves, rollout_transitions
from marljoint.offpolicy.value import ValueDecomposition
from marljoint.policies.joint import JointPolicy, NoActingPolicy

__all__ = ["OffPolicyTrainer", "Played", "build_algorithm"]


class Played(NamedTuple):
    """What one iteration's collection played.

    Attributes:
        steps: joint steps per env copy.
        episode_returns: ``[k, N]`` float64 returns of the episodes that finished.
        episode_lengths: ``[k]`` their lengths.
    """

    steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray


def _seed(seed: int, purpose: int) -> int:
    return int(np.random.SeedSequence([int(seed) % 2**63, purpose]).generate_state(1)[0])


def build_algorithm(spec: Any, config: OffPolicyConfig, init: torch.Generator) -> OffPolicyAlgorithm:
    """The algorithm ``config.algorithm`` names, for an env of ``spec``: its networks initialised from ``init``
    (value methods) or from the config's seed (actor-critics). Built under ``torch.device("meta")``, it holds
    shapes only (how the memory estimate counts parameters)."""
    if config.algorithm in VALUE_ALGORITHMS:
        return ValueDecomposition(spec, config, init)
    return CentralisedActorCritic(spec, config, _seed(config.seed, 1))


def _collection(env: JointEnv, collection: CollectionConfig | None) -> CollectionConfig:
    """The collection given, else the one the env implies (its worker processes act for a
    :class:`~marljoint.env.SubprocessJointEnv`, this process for any other env)."""
    if collection is not None:
        return collection
    if isinstance(env, SubprocessJointEnv):
        return CollectionConfig("subprocess", workers=env.num_workers)
    return CollectionConfig()


def _shard_sizes(config: OffPolicyConfig) -> tuple[int, int, int, int]:
    """The arguments of :class:`~marljoint.offpolicy.sharded.RankShards` after the group."""
    return config.num_envs, config.buffer_size, config.batch_size, config.seed


def _collector(
    env: JointEnv, config: OffPolicyConfig, collection: CollectionConfig | None, ranks: RankGroup | None
) -> Collector:
    """The collector of ``collection``; with ranks, this rank's slice of the copies in this process.

    Raises:
        ValueError: with ranks, for a collection in env workers or Ray actors, or an env that is not this rank's
            slice.
    """
    chosen = _collection(env, collection)
    if ranks is None:
        return make_collector(env, chosen, config.seed)
    if chosen.backend != "local":
        raise ValueError(
            f"data-parallel ranks step their own env copies in-process; collection backend {chosen.backend!r} "
            "cannot be combined with them: use backend 'local' (no env workers, no Ray)"
        )
    return RankCollector(env, config.seed, config.num_envs, ranks)


class OffPolicyTrainer:
    """Trains an :class:`~marljoint.offpolicy.OffPolicyAlgorithm` (VDN or QMIX by default) on a JointEnv.

    Every iteration, a :class:`~marljoint.collect.Collector` plays a rollout of ``rollout_steps`` steps in every
    env copy with the algorithm's exploring behaviour (:class:`~marljoint.offpolicy.acting.ExplorationActing`),
    in this process, in env worker processes or in Ray actors (``collection``); every env copy explores with its
    own noise generator, addressed by its global index, so the same seed gives the same transitions, bit for
    bit, on every backend. The replay buffer receives the rollout's transitions: one team transition per joint
    step (:func:`~marljoint.offpolicy.transitions.rollout_transitions`), or, for an algorithm that credits its
    agents' own moves, their moves from decision to decision
    (:func:`~marljoint.offpolicy.transitions.rollout_moves`), those still waiting at a rollout's end carried into
    the next (:attr:`carried`). A checkpoint holds the networks, the optimisers, the replay buffer, the carried
    moves, the generators and (by :meth:`env_state`) the env copies mid-episode, so a resumed run continues
    bit-identically.

    Args:
        env: the env copies (``config.num_envs`` of them).
        config: the settings.
        algorithm: the algorithm to train; ``None`` builds the one ``config.algorithm`` names
            (:class:`~marljoint.offpolicy.ValueDecomposition` for vdn and qmix,
            :class:`~marljoint.offpolicy.CentralisedActorCritic` for masac and maddpg). An algorithm with
            ``learning_rates`` (one per network) gets those; else every network takes ``config.learning_rate``.
            One with ``credits_own_moves`` True gets each agent's moves from decision to decision
            (:func:`~marljoint.offpolicy.transitions.rollout_moves`) instead of every step's team transitions.
        collection: where the env copies step and the algorithm acts (:class:`~marljoint.collect.CollectionConfig`;
            ``"subprocess"`` needs a :class:`~marljoint.env.SubprocessJointEnv`, ``"ray"`` an env with an
            ``env_fn``). ``None``: the env's worker processes for a SubprocessJointEnv, else this process.
        ranks: the process group of a data-parallel run (:mod:`marljoint.offpolicy.sharded`: each rank its own env
            copies and replay shard, the gradient of its share of every global batch summed over the ranks), with
            ``env`` this rank's slice of the ``config.num_envs`` copies (collected in this process); ``None``: one
            process.

    Raises:
        ValueError: if the env's number of copies differs from ``config.num_envs`` (with ranks: from this rank's
            slice), or an agent's actions are not Discrete (value methods), or not one Discrete or Box space
            (masac, maddpg); with ranks, a collection other than in this process, or a ``batch_size`` or
            ``buffer_size`` smaller than the ranks.

    Example:
        >>> from marljoint import PettingZooJointEnv
        >>> from marljoint_envs import mock_v0
        >>> env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
        >>> trainer = OffPolicyTrainer(env, OffPolicyConfig(num_envs=2, rollout_steps=4, learning_starts=8))
        >>> _ = trainer.train(16)
        >>> trainer.env_steps
        16
    """

    def __init__(
        self,
        env: JointEnv,
        config: OffPolicyConfig,
        algorithm: OffPolicyAlgorithm | None = None,
        collection: CollectionConfig | None = None,
        ranks: RankGroup | None = None,
    ) -> None:
        if ranks is None and env.num_envs != config.num_envs:
            raise ValueError(
                f"the env has {env.num_envs} copies but num_envs={config.num_envs}; build the env with "
                f"num_envs={config.num_envs}"
            )
        self.env, self.config, self.spec = env, config, env.spec
        init = torch.Generator().manual_seed(_seed(config.seed, 1))
        self.algorithm = algorithm if algorithm is not None else build_algorithm(env.spec, config, init)
        networks = self.algorithm.networks
        rates = getattr(self.algorithm, "learning_rates", None) or [config.learning_rate] * len(networks)
        self.optimizers = [
            torch.optim.Adam(net.parameters(), lr=rate, eps=config.adam_eps) for net, rate in zip(networks, rates)
        ]
        self.ranks = ranks
        """The process group of a data-parallel run, or ``None`` (one process)."""
        self.shards = None if ranks is None else RankShards(ranks, *_shard_sizes(config))
        """What this rank does differently on ranks (its replay shard's capacity, its share of every batch), or
        ``None``."""
        self._generator = torch.Generator().manual_seed(_seed(config.seed, 2))
        if self.shards is not None:
            self._generator = self.shards.generator
        self.acting = ExplorationActing(self.algorithm, env.spec, config.num_envs)
        """What the collector acts with."""
        self.collector: Collector = _collector(env, config, collection, ranks)
        """Plays the rollouts (the backend of ``collection``; with ranks, this rank's slice, whose state is every
        rank's)."""
        self.buffer: ReplayBuffer | None = None
        # Per-agent learners store each agent's moves from decision to decision (turn-based credit).
        self.credits_own_moves = bool(getattr(self.algorithm, "credits_own_moves", False))
        self.carried: JointRollout | None = None
        """The moves whose agents still waited after the last rollout, put before the next one (per-agent
        learners; :attr:`~marljoint.collect.JointRollout.carried`)."""
        self.iteration = 0
        self.env_steps = 0
        self.gradient_steps = 0
        self.derived: dict[str, str] = {}

    @property
    def generator(self) -> torch.Generator:
        """The generator of replay sampling (and of sampled evaluation actions)."""
        return self._generator

    def acting_policy(self) -> JointPolicy:
        """Refused: this trainer acts with its Q networks (vdn, qmix) or its own actors (masac, maddpg), not with a
        :class:`~marljoint.policies.JointPolicy`; :meth:`act` plays it.

        Raises:
            NoActingPolicy: saying what it acts with (the run layer adds what to use instead).
        """
        algorithm = self.config.algorithm
        if algorithm in VALUE_ALGORITHMS:
            raise NoActingPolicy(
                f"a {algorithm} run acts greedily on its Q networks (the argmax of each agent's utilities)"
            )
        raise NoActingPolicy(f"a {algorithm} run's actors are its own networks (trained against centralised critics)")

    def act(self, obs: JointObs, deterministic: bool = True) -> list[np.ndarray]:
        """Actions for a :class:`~marljoint.JointObs` (evaluation): greedy on Q, or exploring at the current
        schedule value with noise from :attr:`generator`."""
        copies = [self._generator] * obs.alive.shape[0]
        return self.algorithm.act(obs, self.env_steps, copies, greedy=deterministic)

    def collect(self) -> Played:
        """Plays ``rollout_steps`` joint steps in every copy (by :attr:`collector`) and stores the rollout's
        transitions in the replay buffer (for an algorithm that credits its agents' own moves, the moves that are
        complete; the others are carried into the next rollout).

        The transitions are stored, and the steps counted, once every step has been played: an env (or an env
        worker) that fails midway leaves the trainer's state as the previous iteration left it, so a checkpoint
        written on the way out is consistent.
        """
        self.acting.env_steps = self.env_steps
        plays = self.collector if self.shards is None else self.collector.local  # a rank plays its own copies
        ro = plays.collect(self.acting, self.config.rollout_steps)
        if self.credits_own_moves:
            ro.carried = self.carried
            transitions, self.carried, _ = rollout_moves(self.spec, ro)
            ro.carried = None  # the storage is reused by the next rollout
        else:
            transitions = rollout_transitions(self.spec, ro)
        played = Played(ro.steps, ro.episode_returns.copy(), ro.episode_lengths.copy())
        self._store(transitions)
        if self.shards is not None:
            played = self._share(transitions, played)
        self.env_steps += ro.steps * self.config.num_envs
        return played

    def _store(self, transitions: JointTransitions) -> None:
        """Adds a rollout's transitions to the replay buffer (created with the first; with ranks, this rank's
        shard) and, in one process, to the algorithm's statistics."""
        if transitions.actions.shape[0] == 0:
            return
        if self.buffer is None:
            capacity = self.config.buffer_size if self.shards is None else self.shards.capacity
            self.buffer = ReplayBuffer(capacity, transitions)
        self.buffer.add(transitions)
        if self.shards is None and hasattr(self.algorithm, "observe"):
            self.algorithm.observe(transitions)

    def _share(self, transitions: JointTransitions, played: Played) -> Played:
        """With ranks: what every rank must agree on after storing (one all-gather): the shards' sizes, every
        rank's new team rewards for the algorithm's statistics, every rank's finished episodes (the run's)."""
        size = 0 if self.buffer is None else len(self.buffer)
        rewards, alive, returns, lengths = self.shards.share_iteration(
            size, transitions.rewards, transitions.alive, played.episode_returns, played.episode_lengths
        )
        if hasattr(self.algorithm, "observe"):  # its statistics read the rewards and presence only
            self.algorithm.observe(transitions._replace(rewards=rewards, alive=alive))
        return Played(played.steps, returns, lengths)

    def update(self, aux_fn: AuxFn | None = None) -> dict[str, float]:
        """:attr:`~OffPolicyConfig.updates` gradient steps once ``learning_starts`` transitions are stored.

        Returns:
            The last step's statistics (empty before learning starts), with ``gradient_steps``.
        """
        stats: dict[str, float] = {}
        if self.shards is not None:
            ready = self.shards.can_update(self.config.learning_starts)
        else:
            ready = self.buffer is not None and len(self.buffer) >= max(self.config.learning_starts, 1)
        if not ready:
            return {"gradient_steps": float(self.gradient_steps)}
        for _ in range(self.config.updates):
            stats = self.gradient_step(aux_fn)
        return {**stats, "gradient_steps": float(self.gradient_steps)}

    def gradient_step(self, aux_fn: AuxFn | None = None) -> dict[str, float]:
        """One sampled batch: one joint loss, one backward, per-network clip and optimiser step, target update. On
        ranks, this rank's share of a global batch, and the gradients summed over the ranks before the clipping."""
        if self.shards is None:
            batch = self.buffer.sample(self.config.batch_size, self._generator)
            loss, stats = self.algorithm.loss(batch, aux_fn)
        else:
            batch, share = self.shards.sample(self.buffer)
            loss, stats = self.algorithm.loss(batch, aux_fn, share=share)
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.shards is not None:
            trained = [p for net in self.algorithm.networks for p in net.parameters() if p.grad is not None]
            stats = self.shards.reduce_(stats, trained)
        # An algorithm whose networks stack one member per agent clips each agent on its own (clip_grads).
        clip = getattr(self.algorithm, "clip_grads", None)
        for k, (network, optimizer) in enumerate(zip(self.algorithm.networks, self.optimizers)):
            if clip is not None:
                stats[f"grad_norm/{k}"] = clip(network, self.config.max_grad_norm)
            else:
                norm = torch.nn.utils.clip_grad_norm_(network.parameters(), self.config.max_grad_norm)
                stats[f"grad_norm/{k}"] = float(norm)
            optimizer.step()
        self.algorithm.update_targets()
        self.gradient_steps += 1
        return stats

    def iterate(self, total: int | None = None, aux_fn: AuxFn | None = None) -> tuple[Played, dict[str, float], float]:
        """One iteration (collection, then the gradient steps): ``(played, stats, seconds)``. ``total`` (the
        run's number of iterations) is accepted for the run loop's sake and unused."""
        started = time.perf_counter()
        played = self.collect()
        stats = self.update(aux_fn)
        if self.ranks is not None:
            self.ranks.check_identical(self._named_weights(), "parameters", self.iteration + 1)
        self.iteration += 1
        return played, stats, time.perf_counter() - started

    def train(self, total_steps: int, aux_fn: AuxFn | None = None) -> list[dict[str, Any]]:
        """Iterates until ``total_steps`` env steps (rounded up to whole iterations); the metrics of each."""
        rows = []
        while self.env_steps < total_steps:
            rows.append(self.iteration_metrics(*self.iterate(aux_fn=aux_fn)))
        return rows

    def iteration_metrics(self, played: Played, stats: Mapping[str, float], seconds: float) -> dict[str, Any]:
        """Flat metrics of one iteration: counters, episode returns, exploration and the update's statistics."""
        transitions = played.steps * self.config.num_envs
        returns = played.episode_returns
        row: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "agent_steps": transitions * self.spec.num_agents,
            "sps": transitions / seconds if seconds > 0 else 0.0,
            "episodes": len(returns),
            "episode_return_mean": float(returns.mean()) if len(returns) else float("nan"),
            "episode_length_mean": float(played.episode_lengths.mean()) if len(returns) else float("nan"),
            "exploration": self.algorithm.exploration_value(self.env_steps)
            if hasattr(self.algorithm, "exploration_value")
            else float("nan"),
            "buffer_size": self._stored(),
        }
        for i, agent in enumerate(self.spec.agents):
            row[f"episode_return/{agent}"] = float(returns[:, i].mean()) if len(returns) else float("nan")
        stats = dict(stats)
        # The auxiliary loss's own metrics keep their names (redundancy/...), as in a PPO run's log.
        row.update({k: float(v) for k, v in stats.pop("aux_metrics", {}).items()})
        row.update({f"offpolicy/{k}": float(v) for k, v in stats.items()})
        return row

    def _stored(self) -> int:
        """The transitions in the replay buffer (with ranks, in every rank's shard)."""
        if self.shards is not None:
            return self.shards.stored
        return 0 if self.buffer is None else len(self.buffer)

    def _named_weights(self) -> dict[str, torch.Tensor]:
        """Every trained network's parameters, named ``"<network index>.<name>"`` (compared across ranks)."""
        return {f"{k}.{name}": p for k, net in enumerate(self.algorithm.networks) for name, p in net.named_parameters()}

    def close(self) -> None:
        """Stops what the collector started (Ray actors, the workers' copies of the acting); the env, which the
        caller built, stays open."""
        self.collector.close()

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Networks, targets, optimisers, the replay buffer, the moves waiting for their agents' next decision, the
        generators and the counters. With ranks every rank calls it (it gathers every rank's replay shard,
        generator and carried moves into ``"ranks"``, :meth:`~marljoint.offpolicy.sharded.RankShards.state`)."""
        state = {
            "config": self.config.to_dict(),
            "agents": list(self.spec.agents),
            "algorithm": self.algorithm.state_dict(),
            "optimizers": [o.state_dict() for o in self.optimizers],
            "buffer": None if self.buffer is None else self.buffer.state_dict(),
            "generator": self._generator.get_state(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "gradient_steps": self.gradient_steps,
            "carried": None if self.carried is None else self.carried.fields(),
        }
        if self.shards is not None:
            state["ranks"] = self.shards.state(self.buffer, state["carried"])
            state.update(buffer=None, carried=None)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a trainer built for the same env and config.

        Raises:
            ValueError: if the agents differ, the state is of an older format (without ``carried``: read it through
                :func:`marljoint.run.migrations.migrate_offpolicy_state`), or the replay buffer holds transitions of
                another env (naming the field, its shape and dtype, and this env's).
        """
        if "carried" not in state:
            raise ValueError(
                "the off-policy trainer state holds no 'carried' moves (an older format, with 'pending_moves'); "
                "load it with marljoint.load_run or marljoint train --resume, which migrate it, or start a new run"
            )
        if list(state["agents"]) != list(self.spec.agents):
            raise ValueError(f"checkpoint agents {state['agents']} differ from this env's {list(self.spec.agents)}")
        buffer, carried, generator = self._saved_replay(state)
        if buffer is not None:  # checked before anything is restored
            check_saved_transitions(self.spec, buffer["transitions"])
        self.algorithm.load_state_dict(state["algorithm"])
        for optimizer, saved in zip(self.optimizers, state["optimizers"]):
            optimizer.load_state_dict(saved)
        self.buffer = None
        if buffer is not None:
            capacity = self.config.buffer_size if self.shards is None else self.shards.capacity
            self.buffer = ReplayBuffer(capacity, JointTransitions(**buffer["transitions"]))
            self.buffer.load_state_dict(buffer)
        self._generator.set_state(generator)
        self.iteration, self.env_steps = int(state["iteration"]), int(state["env_steps"])
        self.gradient_steps = int(state["gradient_steps"])
        self.carried = None if carried is None else JointRollout(spec=self.spec, **carried)

    def _saved_replay(self, state: Mapping[str, Any]) -> tuple[Any, Any, torch.Tensor]:
        """The replay buffer (or this rank's shard), carried moves and replay generator state to restore from a
        checkpoint's state, of one process or of ranks (:meth:`~marljoint.offpolicy.sharded.RankShards.restored`:
        the shards are dealt out again where the number of ranks differs)."""
        if self.shards is not None:
            return self.shards.restored(state)
        ranked = state.get("ranks")
        if ranked is None:
            return state["buffer"], state["carried"], state["generator"]
        return dealt(ranked["shards"], 1, 0, self.config.buffer_size), None, ranked["generators"][0]

    def env_state(self) -> dict[str, Any] | None:
        """Where the next rollout starts: the env copies mid-episode and the copies' exploration generators (the
        collector's :meth:`~marljoint.collect.Collector.state`; ``None`` before the first rollout).

        Raises:
            TypeError: if the env has no ``get_state()``.
        """
        return self.collector.state()

    def load_env_state(self, state: Mapping[str, Any] | None, trust_snapshot: bool = False) -> None:
        """Restores :meth:`env_state` output, of this or any other collection backend over the same copies
        (``None``: the env is reset at the next collection, and the carried moves, whose episodes then end unseen,
        are dropped).

        The env snapshot is pickled env objects, unpickled only when signed with this user's key
        (:mod:`marljoint.trust`): a state someone else saved is refused unless ``trust_snapshot``.

        Args:
            state: :meth:`env_state` output, or ``None``.
            trust_snapshot: restore a snapshot signed by someone else (a run you received and trust), re-signing it
                with your key. Unpickling it runs whatever code it names: only for runs you trust.

        Raises:
            marljoint.trust.SnapshotTrustError: for a snapshot not signed with this user's key (without
                ``trust_snapshot``), before anything of it is unpickled.
            ValueError: for a state that is unreadable or holds another number of copies.
        """
        if trust_snapshot:
            state = trusted_state(state)
        if state is None:
            self.carried = None
        self.collector.load_state(state)

    def save(self, path: Any) -> None:
        """Writes :meth:`state_dict` and :meth:`env_state` to ``path`` (atomically; with ranks every rank calls it
        and rank 0 writes)."""
        state = {"trainer": self.state_dict(), "env": self.env_state()}
        if self.ranks is None or self.ranks.is_writer:
            atomic_torch_save(state, path)

    def load(self, path: Any) -> None:
        """Restores a :meth:`save` file."""
        saved = load_checkpoint(path)
        self.load_state_dict(saved["trainer"])
        self.load_env_state(saved["env"])
