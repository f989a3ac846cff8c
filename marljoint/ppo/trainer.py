"""The synchronized joint multi-agent PPO trainer.

Every agent's PPO loss and the optional cross-agent auxiliary loss are summed into ONE scalar; ONE backward pass
runs; each agent's optimizer then steps on its own parameters, after clipping that agent's gradient to a global L2
norm. Agents with identical spaces form a group whose networks run as one batched forward.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from marljoint.auxiliary import AuxOutput
from marljoint.collect.backends import make_collector
from marljoint.collect.base import Collector
from marljoint.collect.ranks import RankCollector
from marljoint.collect.rollout import JointRollout, carry_pending_moves
from marljoint.collect.snapshots import trusted_state
from marljoint.distributed.ranks import RankGroup
from marljoint.env.base import JointEnv, JointObs
from marljoint.env.check import BlankImageWarning, blank_image_agents, blank_image_message
from marljoint.env.spaces import JointSpec
from marljoint.policies import ActorCritic, AgentPolicy, UniformMixture
from marljoint.policies.joint import JointPolicy
from marljoint.policies.normalizer import RunningNormalizer
from marljoint.ppo.build import (
    check_device_available,
    check_trunk_layout,
    critic_input_size,
    default_units,
    units_from_policies,
)
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.derived import (
    derive_acting_device,
    derive_replay,
    derive_settings,
    derive_threads,
    settings_of_policies,
)
from marljoint.ppo.divergence import DivergenceError
from marljoint.ppo.learner import JointStats, Learner, NetworkUnit
from marljoint.ppo.metrics import MetricKeys, iteration_metrics
from marljoint.ppo.regularizer import PolicyRegularizer, RegularizerFactory
from marljoint.ppo.sharded import RankShares
from marljoint.threads import set_torch_threads

__all__ = ["Iteration", "JointMultiAgentTrainer", "JointStats"]


class Iteration(NamedTuple):
    """What one :meth:`JointMultiAgentTrainer.iterate` did.

    Attributes:
        rollout: the rollout collected (its storage is reused by the next iteration).
        stats: the update's :class:`JointStats`.
        seconds: wall time of the collection and the update together.
    """

    rollout: JointRollout
    stats: JointStats
    seconds: float


class JointMultiAgentTrainer:
    """Synchronized joint multi-agent PPO over a :class:`~marljoint.env.JointEnv`.

    Build it with :meth:`from_env` (default networks, one batched forward per agent group, per-agent Adam), or pass
    one policy and one optimizer per agent to the constructor.

    Example:
        >>> from marljoint import PettingZooJointEnv, JointTrainerConfig, JointMultiAgentTrainer
        >>> from marljoint_envs import mock_v0
        >>> env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
        >>> cfg = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=8, n_epochs=1)
        >>> trainer = JointMultiAgentTrainer.from_env(env, cfg)
        >>> rollout = trainer.collect_rollout()
        >>> rollout.rewards.shape  # [T, E, N]
        torch.Size([8, 2, 2])
        >>> stats = trainer.update(rollout)
        >>> stats.num_mb_steps
        2

    Args:
        env: the JointEnv to train on.
        config: hyperparameters.
        policies: one :class:`~marljoint.policies.ActorCritic` per agent, each built for a single agent.
        optimizers: one torch optimizer per agent over its policy's actor parameters (and critic parameters unless
            ``critic_optimizers`` is given).
        critic_optimizers: optional one optimizer per agent over its policy's critic parameters (split critic).
        regularizer: builds the term the updates add to the joint loss (:attr:`regularizer`, e.g. magnetic mirror
            descent's: :func:`marljoint.best_response.mmd_regularizer`) from the joint policy and the resolved
            config; ``None``: plain PPO.

    Raises:
        ValueError: when the numbers of policies/optimizers do not match the env's agents, or the config's
            ``num_agents`` disagrees with the env.
    """

    def __init__(
        self,
        env: JointEnv,
        config: JointTrainerConfig,
        policies: Sequence[ActorCritic],
        optimizers: Sequence[torch.optim.Optimizer],
        critic_optimizers: Sequence[torch.optim.Optimizer] | None = None,
        regularizer: RegularizerFactory | None = None,
    ) -> None:
        config, derived = settings_of_policies(config, policies)
        config, from_env = derive_settings(env.spec, config)
        config, threads = derive_threads(config)
        config, replay = derive_replay(config)
        derived = {**derived, **from_env, **threads, **replay}
        units = units_from_policies(env.spec, config, policies, optimizers, critic_optimizers)
        self._setup(env, config, units, derived, regularizer)

    @classmethod
    def from_env(
        cls,
        env: JointEnv,
        config: JointTrainerConfig | None = None,
        regularizer: RegularizerFactory | None = None,
        ranks: RankGroup | None = None,
        **policy_kwargs: Any,
    ) -> JointMultiAgentTrainer:
        """Builds default policies and per-agent Adam optimizers for ``env``.

        One :class:`~marljoint.policies.ActorCritic` per agent group (shared, or stacked per-agent weights) and a
        :class:`~marljoint.policies.StackedAdam` that behaves like one independent Adam per agent.

        Args:
            env: the JointEnv.
            config: hyperparameters (defaults when ``None``).
            regularizer: builds the term the updates add to the joint loss, as in the constructor.
            ranks: the process group of a data-parallel run (:mod:`marljoint.ppo.sharded`), with ``env`` this
                rank's slice of the ``config.num_envs`` copies; ``None``: one process.
            **policy_kwargs: passed to every ``ActorCritic`` (e.g. ``log_std_init``); ``hidden_sizes`` defaults to
                ``config.network.hidden_sizes``.

        Returns:
            The trainer.
        """
        config, derived = derive_settings(env.spec, config or JointTrainerConfig())
        config, threads = derive_threads(config)
        config, replay = derive_replay(config)
        derived = {**derived, **threads, **replay}
        trainer = cls.__new__(cls)
        trainer._setup(env, config, default_units(env.spec, config, **policy_kwargs), derived, regularizer, ranks)
        return trainer

    # ------------------------------------------------------------------ setup
    def _setup(
        self,
        env: JointEnv,
        config: JointTrainerConfig,
        units: list[NetworkUnit],
        derived: dict[str, str],
        regularizer: RegularizerFactory | None,
        ranks: RankGroup | None = None,
    ) -> None:
        if ranks is None:  # with ranks, the env holds this rank's slice (checked by its collector)
            _check_copies(env, config)
        config, acting = derive_acting_device(config, [u.policy for u in units])
        check_device_available(config.runtime.acting_device)
        derived = {**derived, **acting}
        self.env = env
        self.config = config
        self.derived = derived
        """Why each setting the config left to the env (``None``) or to the machine (``torch_threads="auto"``,
        ``acting_device="auto"``, ``recurrent_replay="auto"``) has the value in :attr:`config`: ``{setting: reason}``
        (see :func:`~marljoint.ppo.derived.derive_settings`, :func:`~marljoint.ppo.derived.derive_threads`,
        :func:`~marljoint.ppo.derived.derive_acting_device` and :func:`~marljoint.ppo.derived.derive_replay`)."""
        if config.runtime.torch_threads is not None:
            set_torch_threads(config.runtime.torch_threads)
        self.spec = env.spec
        self.device = torch.device(config.runtime.device)
        self._generator = torch.Generator().manual_seed(config.runtime.seed)
        n = self.spec.num_agents
        self.value_normalizer = RunningNormalizer(n, device=self.device) if config.ppo.value_normalization else None
        # Moves of the last rollout whose outcome lies in the next one (turn-based games), or None.
        self._pending: JointRollout | None = None
        if config.network.centralized_critic:  # refuses what a centralised critic cannot take (images)
            critic_input_size(self.spec)
        self.joint_policy = JointPolicy(
            self.spec,
            [u.policy for u in units],
            [u.slot for u in units],
            centralized=config.network.centralized_critic,
            value_normalizer=self.value_normalizer,
            device=self.device,
        )
        """The networks of every agent, on the learner's device."""
        self.behaviour = _behaviour(self.spec, config.ppo.uniform_mix)
        """What plays the rollouts in the policy's place, handed to :attr:`collector` with every rollout: a
        :class:`~marljoint.policies.UniformMixture` with ``uniform_mix`` > 0, ``None`` (the policy itself) else."""
        self._acting_policy: JointPolicy | None = None
        self.ranks = ranks
        """The process group of a data-parallel run (each rank plays its slice of the copies and computes its share
        of every minibatch: :mod:`marljoint.ppo.sharded`), or ``None``: one process."""
        shares = None if ranks is None else RankShares(ranks)
        self.learner = Learner(config, self.joint_policy, units, self._generator, self.behaviour, shares)
        """The optimizers and the one-backward update."""
        if regularizer is not None:
            self.learner.regularizer = regularizer(self.joint_policy, config)
        self.collector: Collector = _collector(env, config, ranks)
        """Plays the rollouts (the backend of ``config.collection``)."""
        self.iteration = 0
        self.env_steps = 0
        self._keys: MetricKeys | None = None

    # ------------------------------------------------------------------ public properties
    @property
    def policies(self) -> list[ActorCritic]:
        """The networks, one per unit (per group with ``from_env``, per agent with the constructor)."""
        return [u.policy for u in self.learner.units]

    def acting_policy(self) -> JointPolicy:
        """The policy that acts, for export and per-agent policies: :attr:`joint_policy` (the learner's networks)."""
        return self.joint_policy

    @property
    def regularizer(self) -> PolicyRegularizer | None:
        """The term the updates add to the joint loss, built at construction (``regularizer``), or ``None``."""
        return self.learner.regularizer

    @property
    def collector_policy(self) -> JointPolicy:
        """The policy the collector acts with: :attr:`joint_policy` itself, or its copy on ``config.acting_device``
        (made when first asked for, refreshed from :attr:`joint_policy` before every rollout)."""
        if self._acting_policy is None:
            where = torch.device(self.config.runtime.acting_device)
            self._acting_policy = self.joint_policy if where == self.device else self.joint_policy.copy_to(where)
        return self._acting_policy

    @property
    def pending_moves(self) -> JointRollout | None:
        """Moves of the last rollout whose outcome lies in the next one (turn-based games; ``None`` when there are
        none): the next :meth:`collect_rollout` carries them (:attr:`JointRollout.carried`)."""
        return self._pending

    @property
    def generator(self) -> torch.Generator:
        """The generator behind action sampling and minibatch shuffling."""
        return self._generator

    def agent_policy(self, agent: int | str) -> AgentPolicy:
        """A frozen copy of ``agent``'s current policy (later training does not change it)."""
        network, slot = self.policy_for(agent)
        return AgentPolicy(network, slot)

    def policy_for(self, agent: int | str) -> tuple[ActorCritic, int]:
        """Returns ``(network, slot)``: the network serving ``agent`` and the agent's position among its inputs."""
        return self.joint_policy.network_of(agent)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: networks, optimizers, normaliser, generator, counters, config."""
        return {
            "config": self.config.to_dict(),
            "agents": list(self.spec.agents),
            "policies": [u.policy.state_dict() for u in self.learner.units],
            "optimizers": [[o.state_dict() for o in u.optimizers()] for u in self.learner.units],
            "value_normalizer": None if self.value_normalizer is None else self.value_normalizer.state_dict(),
            "generator": self._generator.get_state(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "lr_scale": self.learner.lr_scale,
            "pending_moves": None if self._pending is None else self._pending.to("cpu").fields(),
            **({} if self.learner.regularizer is None else {"regularizer": self.learner.regularizer.state_dict()}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a trainer built for the same env and config.

        Raises:
            ValueError: if the agents or the number of networks differ.
        """
        if list(state["agents"]) != list(self.spec.agents):
            raise ValueError(f"checkpoint agents {state['agents']} differ from this env's {list(self.spec.agents)}")
        if len(state["policies"]) != len(self.learner.units):
            raise ValueError(
                f"checkpoint holds {len(state['policies'])} networks, this trainer has {len(self.learner.units)}; "
                "build the trainer with the same share_parameters setting"
            )
        for unit, policy_state, optimizer_states in zip(self.learner.units, state["policies"], state["optimizers"]):
            check_trunk_layout(unit.policy, policy_state)
            unit.policy.load_state_dict(policy_state)
            for optimizer, optimizer_state in zip(unit.optimizers(), optimizer_states):
                optimizer.load_state_dict(optimizer_state)
        if self.value_normalizer is not None and state["value_normalizer"] is not None:
            self.value_normalizer.load_state_dict(state["value_normalizer"])
        self._generator.set_state(state["generator"])
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.learner.lr_scale = float(state.get("lr_scale", 1.0))
        if self.learner.regularizer is not None and state.get("regularizer") is not None:
            self.learner.regularizer.load_state_dict(state["regularizer"])
        pending = state.get("pending_moves")
        self._pending = (
            None if pending is None else JointRollout(**{**pending, "spec": self.spec}).to(self.config.acting_device)
        )

    def save(self, path: str) -> None:
        """Writes :meth:`state_dict` to ``path`` atomically (temporary file, fsync, rename)."""
        from marljoint.checkpoint import atomic_torch_save

        atomic_torch_save(self.state_dict(), path)

    def load(self, path: str) -> None:
        """Loads a checkpoint written by :meth:`save`, or one of ``marljoint train``'s (``checkpoints/ckpt_*.pt``:
        its trainer part; :meth:`load_env_state` takes its ``"env"`` part).

        Raises:
            ValueError: if the file is not a readable marljoint checkpoint, or holds objects that could run code.
        """
        from marljoint.checkpoint import load_checkpoint

        state = load_checkpoint(path)
        self.load_state_dict(state["trainer"] if "trainer" in state and "policies" not in state else state)

    def env_state(self) -> dict[str, Any] | None:
        """Where the next rollout starts: the collector's :meth:`~marljoint.collect.Collector.state` (the env
        copies mid-episode and their noise generators).

        Saved beside :meth:`state_dict`, it makes a resumed run bit-identical to an uninterrupted one.

        On data-parallel ranks every rank calls it at the same point (it gathers every rank's slice of the copies)
        and every rank gets the whole state.

        Returns:
            ``None`` before the first rollout (the next one resets the env); else ``{"env": snapshot, ...}``, or
            with Ray workers or ranks ``{"workers": [snapshot per worker or rank]}``.

        Raises:
            TypeError: if the env has no ``get_state()`` or cannot be pickled.
        """
        return self.collector.state()

    def load_env_state(self, state: Mapping[str, Any] | None, trust_snapshot: bool = False) -> None:
        """Restores :meth:`env_state` output; ``None`` makes the next rollout reset the env with ``config.seed``
        (and drops the moves pending from the last rollout, whose episodes then end unseen).

        On data-parallel ranks every rank is given the whole state (saved with any number of ranks, workers or
        actors) and restores its own slice of the copies.

        The env snapshot is pickled env objects, unpickled only when signed with this user's key
        (:mod:`marljoint.trust`): a state someone else saved is refused unless ``trust_snapshot``.

        Args:
            state: :meth:`env_state` output, or ``None``.
            trust_snapshot: restore a snapshot signed by someone else (a run you received and trust), re-signing it
                with your key. Unpickling it runs whatever code it names: only for runs you trust.

        Raises:
            marljoint.trust.SnapshotTrustError: for a snapshot not signed with this user's key (without
                ``trust_snapshot``), before anything of it is unpickled.
            ValueError: for a state saved with another collection backend or number of workers (naming them).
        """
        if trust_snapshot:
            state = trusted_state(state)
        if state is None:
            self._pending = None
        self.collector.load_state(state)

    # ------------------------------------------------------------------ acting
    def act(self, obs: JointObs, deterministic: bool = False) -> list[np.ndarray]:
        """Chooses actions for a :class:`JointObs` (e.g. for evaluation), respecting masks; sampled actions draw
        from :attr:`generator`.

        Returns:
            Per group, ``[E, n_g, *action_shape]`` actions ready for ``env.step`` (Box actions clipped to bounds).
        """
        return self.joint_policy.act(obs, deterministic, self._generator)

    def predict_values(self, obs: JointObs) -> torch.Tensor:
        """The critic's value estimates (in return units) for a :class:`JointObs`.

        Returns:
            ``[E, N]`` values; entries of absent agents are meaningless.
        """
        return self.joint_policy.predict_values(obs)

    # ------------------------------------------------------------------ rollout
    def collect_rollout(self) -> JointRollout:
        """Plays ``rollout_steps`` joint steps in every env copy with the current policies (by :attr:`collector`).

        The policy acts on ``config.acting_device``: with a copy of the networks there (the CPU while the learner
        is on a GPU), the copy takes the learner's weights first, and the rollout moves to the learner's device
        once, at the end. The env is reset (with ``config.seed``) on the first call; later calls continue where
        the last stopped.
        In turn-based games, a move whose outcome lies beyond the rollout (its agent waits for its turn at the
        end) is ``deferred`` and carried into the next rollout (:attr:`JointRollout.carried`).
        On data-parallel ranks every rank plays its slice of the copies and returns the whole rollout, bit for bit
        the one-process rollout (:class:`~marljoint.collect.ranks.RankCollector`).

        Returns:
            A :class:`JointRollout` (its storage is reused by the next call: keep a copy if you need both).
        """
        acting = self.collector_policy
        if acting is not self.joint_policy:
            acting.copy_weights_from(self.joint_policy)
        ro = self.collector.collect(acting, self.config.ppo.rollout_steps, behaviour=self.behaviour)
        self.env_steps += ro.steps * ro.num_envs
        # The moves to carry are found where the rollout was collected: their host reads need no device sync.
        ro.carried = self._pending
        ro.deferred = None
        ro.deferred, self._pending = carry_pending_moves(ro.extended(), self.config.ppo.bootstrap_truncation)
        if acting is not self.joint_policy:
            ro = ro.to(self.device)  # once per iteration: the update reads it on the learner's device
        return ro

    def close(self) -> None:
        """Stops what the collector started (Ray actors, the workers' policy copies); the env, which the caller
        built, stays open."""
        self.collector.close()

    # ------------------------------------------------------------------ update
    def compute_advantages(self, rollout: JointRollout) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE advantages and returns, ``[T', E, N]`` each, over the rows of ``rollout.extended()`` (see
        :meth:`Learner.compute_advantages <marljoint.ppo.learner.Learner.compute_advantages>`)."""
        return self.learner.compute_advantages(rollout)

    def update(
        self,
        rollout: JointRollout,
        aux_fn: Callable[..., AuxOutput | torch.Tensor] | None = None,
        active: Sequence[bool] | torch.Tensor | None = None,
    ) -> JointStats:
        """Runs the PPO epochs on a rollout: one joint loss and one backward per minibatch.

        The learner's :meth:`~marljoint.ppo.Learner.update`, where the arguments, the aux-loss call and the errors
        are described; ``rollout`` comes from :meth:`collect_rollout` (or is built by hand with the same shapes).

        On data-parallel ranks every rank calls it with the same (whole) rollout; afterwards the ranks' parameters
        are compared (:meth:`~marljoint.distributed.ranks.RankGroup.check_identical`).

        Raises:
            DivergenceError: a loss or gradient became non-finite (no optimizer stepped on it), or a parameter did;
                it names the metric and the iteration in progress (:attr:`iteration` + 1).
            RanksDiverged: on ranks, when a rank's parameters differ from rank 0's after the update.
        """
        try:
            stats = self.learner.update(rollout, aux_fn, active)
        except DivergenceError as exc:
            raise exc.at_iteration(self.iteration + 1) from None
        if self.ranks is not None:
            self.ranks.check_identical(self._named_weights(), "parameters", self.iteration + 1)
        return stats

    def _named_weights(self) -> dict[str, torch.Tensor]:
        """Every network's parameters and buffers (observation statistics), named ``"<network>.<name>"``, and the
        value normaliser's statistics."""
        named = {}
        for unit in self.learner.units:
            network = "+".join(unit.network_names)
            named.update({f"{network}.{name}": value for name, value in unit.policy.state_dict().items()})
        if self.value_normalizer is not None:
            normalizer = self.value_normalizer.state_dict()
            named.update({f"value_normalizer.{k}": v for k, v in normalizer.items() if isinstance(v, torch.Tensor)})
        return named

    def set_learning_rate_scale(self, scale: float) -> None:
        """Sets every optimizer's learning rate to ``scale ×`` its own initial value (see
        :meth:`Learner.set_learning_rate_scale <marljoint.ppo.learner.Learner.set_learning_rate_scale>`)."""
        self.learner.set_learning_rate_scale(scale)

    def anneal_learning_rate(self, end_iteration: int) -> float:
        """Applies the ``anneal_lr`` schedule for the coming iteration; returns the scale it set.

        The one schedule of every training loop: linear from each optimizer's initial rate at iteration 0 to 0 at
        ``end_iteration``, by the absolute :attr:`iteration`, so a resumed run continues where it stopped.

        Args:
            end_iteration: the iteration at which the run ends (``> iteration``).

        Raises:
            ValueError: if ``end_iteration`` is not after the current iteration.
        """
        if end_iteration <= self.iteration:
            raise ValueError(
                f"end_iteration={end_iteration} must be after the current iteration {self.iteration}; pass the "
                "iteration the whole run ends at"
            )
        scale = 1.0 - self.iteration / end_iteration
        self.set_learning_rate_scale(scale)
        return scale

    def iterate(
        self,
        end_iteration: int | None = None,
        aux_fn: Callable[..., AuxOutput | torch.Tensor] | None = None,
        active: Sequence[bool] | torch.Tensor | Callable[[JointRollout], Any] | None = None,
    ) -> Iteration:
        """One training iteration, the loop body of every caller: schedule, collect, update, count.

        With ``anneal_lr`` the learning rates are set by :meth:`anneal_learning_rate` first; then one
        :meth:`collect_rollout`, one :meth:`update`, and :attr:`iteration` advances by one.

        Args:
            end_iteration: the iteration the run ends at; required with ``anneal_lr``.
            aux_fn: passed to :meth:`update`.
            active: passed to :meth:`update`; or a function of the rollout returning it, called between the
                collection and the update (to look at the rollout first, as NFSP does).

        Returns:
            An :class:`Iteration`: the rollout, the update's statistics and the seconds the two took.

        Raises:
            ValueError: with ``anneal_lr`` and no ``end_iteration``.
        """
        if self.config.optim.anneal_lr:
            if end_iteration is None:
                rule = "anneal_lr"
                if "anneal_lr" in self.derived:
                    rule = f"anneal_lr is on ({self.spec.num_agents} agents: derived from the agent count)"
                raise ValueError(
                    f"{rule} decays the learning rate to 0 at the end of the run, so iterate() needs "
                    "end_iteration (the iteration the run ends at); or set anneal_lr=False"
                )
            self.anneal_learning_rate(end_iteration)
        tick = time.perf_counter()
        rollout = self.collect_rollout()
        if self.iteration == 0:
            self._warn_blank_images(rollout)
        if callable(active):
            active = active(rollout)
        stats = self.update(rollout, aux_fn=aux_fn, active=active)
        self.iteration += 1
        return Iteration(rollout, stats, time.perf_counter() - tick)

    def _warn_blank_images(self, rollout: JointRollout) -> None:
        """Warns (:class:`~marljoint.env.BlankImageWarning`) when an agent's images held one value all through
        ``rollout``: a run that would otherwise train for hours on black frames without a sign."""
        if all(group.observation.kind != "image" for group in self.spec.groups):
            return
        found = blank_image_agents(self.spec, [o.cpu() for o in rollout.obs], rollout.alive.cpu())
        if found:
            warnings.warn(blank_image_message(found, self.spec, rollout.steps), BlankImageWarning, stacklevel=3)

    def train(
        self,
        total_steps: int,
        callback: Callable[[dict[str, Any]], bool | None] | None = None,
        aux_fn: Callable[..., AuxOutput | torch.Tensor] | None = None,
        keep_history: bool = True,
    ) -> list[dict[str, Any]]:
        """Alternates :meth:`collect_rollout` and :meth:`update` for ``total_steps`` env steps.

        One env step is one joint step of one env copy; an iteration takes ``rollout_steps × num_envs`` of them.

        With ``anneal_lr`` the schedule runs by the absolute iteration up to the end of this call
        (:meth:`anneal_learning_rate`): a trainer restored from a checkpoint and trained for the remaining steps
        follows exactly the schedule of one uninterrupted call.

        Args:
            total_steps: env steps to train for (rounded up to whole iterations).
            callback: called with each iteration's metrics; returning ``False`` stops training.
            aux_fn: passed to every :meth:`update`.
            keep_history: keep every iteration's metrics (about 1–2 KB each for a few agents); ``False`` keeps only
                the last, so memory stays constant however long the run (stream the rest through ``callback``).

        Returns:
            One metrics dict per iteration (see :meth:`iteration_metrics`); only the last one with
            ``keep_history=False``.
        """
        if not isinstance(total_steps, (int, np.integer)) or total_steps < 1:
            raise ValueError(f"total_steps must be a positive integer, got {total_steps!r}")
        per_iteration = self.config.ppo.rollout_steps * self.config.ppo.num_envs
        iterations = math.ceil(total_steps / per_iteration)
        end_iteration = self.iteration + iterations
        history = []
        start = time.perf_counter()
        for _ in range(iterations):
            rollout, stats, seconds = self.iterate(end_iteration, aux_fn=aux_fn)
            metrics = self.iteration_metrics(rollout, stats, seconds)
            metrics["wall_time"] = time.perf_counter() - start
            if keep_history:
                history.append(metrics)
            else:
                history[:] = [metrics]
            if callback is not None and callback(metrics) is False:
                break
        return history

    def iteration_metrics(self, rollout: JointRollout, stats: JointStats, seconds: float) -> dict[str, Any]:
        """Flat metrics of one iteration: counters, episode returns and every :class:`JointStats` field per agent
        (:func:`~marljoint.ppo.metrics.iteration_metrics`), then the :attr:`regularizer`'s metrics since the last
        call (e.g. ``mmd/alpha``, ``mmd/kl``)."""
        if self._keys is None:
            self._keys = MetricKeys(self.spec.agents)
        lr = float(self.learner.units[0].optimizer.param_groups[0]["lr"])
        metrics = iteration_metrics(self._keys, rollout, stats, seconds, self.iteration, self.env_steps, lr)
        if self.learner.regularizer is not None:
            metrics.update(self.learner.regularizer.metrics())
        return metrics


def _check_copies(env: JointEnv, config: JointTrainerConfig) -> None:
    """Refuses (ValueError) an env with another number of copies than ``config.num_envs``."""
    if config.ppo.num_envs != env.num_envs:
        raise ValueError(
            f"config.num_envs is {config.ppo.num_envs} but the env has {env.num_envs} copies; build the env with "
            f"num_envs={config.ppo.num_envs}, or set num_envs={env.num_envs} in the config"
        )


def _collector(env: JointEnv, config: JointTrainerConfig, ranks: RankGroup | None) -> Collector:
    """The collector of ``config.collection`` (collecting workers compute on one thread each, whatever the learner's
    count); with ``ranks``, this rank's slice of the copies, in this process, gathered into the whole rollout.

    Raises:
        ValueError: with ranks, for a collection backend other than ``"local"`` (the ranks are the run's processes),
            or an env that is not this rank's slice.
    """
    if ranks is None:
        return make_collector(env, config.collection, config.runtime.seed)
    if config.collection.backend != "local":
        raise ValueError(
            f"data-parallel ranks step their own env copies in-process; collection backend "
            f"{config.collection.backend!r} cannot be combined with them: use backend 'local' (no env workers, no Ray)"
        )
    return RankCollector(env, config.runtime.seed, config.ppo.num_envs, ranks)


def _behaviour(spec: JointSpec, epsilon: float) -> UniformMixture | None:
    """The behaviour policy of ``uniform_mix`` = ``epsilon`` for the rollouts of ``spec``'s agents (``None`` for 0):
    refused (ValueError) when one has Box actions."""
    if not epsilon:
        return None
    for agent, layout in zip(spec.agents, spec.actions):
        if layout.kind == "box":
            raise ValueError(
                f"uniform_mix = {epsilon} mixes categorical actions with uniform play, but agent {agent!r} has a "
                f"Box action space (shape {tuple(layout.shape)}), which has no uniform mixture; set uniform_mix = 0"
            )
    return UniformMixture(float(epsilon))
