"""The synchronized joint multi-agent PPO trainer.

Every agent's PPO loss and the optional cross-agent auxiliary loss are summed into ONE scalar; ONE backward pass
runs; each agent's optimizer then steps on its own parameters, after clipping that agent's gradient to a global L2
norm. Agents with identical spaces form a group whose networks run as one batched forward.
"""

from __future__ import annotations

import math
import pickle
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from marljoint.auxiliary import AuxOutput
from marljoint.collect.local import LocalCollector
from marljoint.collect.noise import generators_from_states
from marljoint.collect.rollout import JointRollout, carry_pending_moves
from marljoint.env.base import JointEnv, JointObs
from marljoint.policies import ActorCritic, AgentPolicy, StackedAdam
from marljoint.policies.joint import JointPolicy, NetworkSlot
from marljoint.policies.normalizer import RunningNormalizer
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.learner import JointStats, Learner, _Unit
from marljoint.ppo.slices import blueprint

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
    ) -> None:
        spec = env.spec
        n = spec.num_agents
        _check_agent_count(config, n)
        for name, seq in (("policies", policies), ("optimizers", optimizers), ("critic_optimizers", critic_optimizers)):
            if seq is not None and len(seq) != n:
                raise ValueError(
                    f"got {len(seq)} {name} for {n} agents {list(spec.agents)}; pass exactly one per agent"
                )
        units = []
        for i, policy in enumerate(policies):
            g, _ = spec.group_of(i)
            if getattr(policy, "num_agents", 1) != 1:
                raise ValueError(
                    f"policy {i} is built for {policy.num_agents} agents; the constructor takes one single-agent "
                    "policy per agent (use from_env for batched groups)"
                )
            critic = critic_optimizers[i] if critic_optimizers is not None else None
            units.append(_Unit(g, policy, (i,), optimizers[i], critic, stacked=False, agent_names=spec.agents))
        self._setup(env, config, units)

    @classmethod
    def from_env(
        cls, env: JointEnv, config: JointTrainerConfig | None = None, **policy_kwargs: Any
    ) -> JointMultiAgentTrainer:
        """Builds default policies and per-agent Adam optimizers for ``env``.

        One :class:`~marljoint.policies.ActorCritic` per agent group (shared, or stacked per-agent weights) and a
        :class:`~marljoint.policies.StackedAdam` that behaves like one independent Adam per agent.

        Args:
            env: the JointEnv.
            config: hyperparameters (defaults when ``None``).
            **policy_kwargs: passed to every ``ActorCritic`` (e.g. ``log_std_init``); ``hidden_sizes`` defaults to
                ``config.hidden_sizes``.

        Returns:
            The trainer.
        """
        config = config or JointTrainerConfig()
        spec = env.spec
        _check_agent_count(config, spec.num_agents)
        if config.torch_threads is not None:
            # Before building: initial weights (orthogonal init) must not depend on the thread count in effect.
            torch.set_num_threads(config.torch_threads)
        critic_size = _critic_input_size(spec) if config.centralized_critic else None
        policy_kwargs.setdefault("hidden_sizes", config.hidden_sizes)
        units = []
        policy_kwargs.setdefault("generator", torch.Generator().manual_seed(config.seed))
        for g, group in enumerate(spec.groups):
            policy = ActorCritic(
                group.observation,
                group.action,
                num_agents=group.size,
                share_parameters=config.share_parameters,
                critic_input_size=critic_size,
                share_trunk=config.share_trunk,
                **policy_kwargs,
            ).to(config.device)
            members = 1 if config.share_parameters else group.size
            actor = list(policy.actor_parameters())
            critic = list(policy.critic_parameters())
            if config.critic_lr is None:
                optimizer = StackedAdam(actor + critic, lr=config.learning_rate, eps=config.adam_eps, members=members)
                critic_optimizer = None
            else:
                optimizer = StackedAdam(actor, lr=config.learning_rate, eps=config.adam_eps, members=members)
                critic_optimizer = StackedAdam(critic, lr=config.critic_lr, eps=config.adam_eps, members=members)
            unit = _Unit(g, policy, group.agent_indices, optimizer, critic_optimizer, True, agent_names=spec.agents)
            units.append(unit)
        trainer = cls.__new__(cls)
        trainer._setup(env, config, units)
        return trainer

    # ------------------------------------------------------------------ setup
    def _setup(self, env: JointEnv, config: JointTrainerConfig, units: list[_Unit]) -> None:
        self.env = env
        self.config = config
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        self.spec = env.spec
        self.device = torch.device(config.device)
        self._units = units
        self._generator = torch.Generator().manual_seed(config.seed)
        # Global index of this trainer's first env copy (non-zero when it collects one slice of a larger set).
        self._first_copy = int(getattr(env, "_copy_offset", 0))
        n = self.spec.num_agents
        self.value_normalizer = RunningNormalizer(n, device=self.device) if config.value_normalization else None
        self._rollout: JointRollout | None = None
        # Moves of the last rollout whose outcome lies in the next one (turn-based games), or None.
        self._pending: JointRollout | None = None
        if config.centralized_critic:
            _critic_input_size(self.spec)
        self.joint_policy = JointPolicy(
            self.spec,
            [u.policy for u in units],
            [NetworkSlot(u.group, u.agent_indices, u.stacked) for u in units],
            centralized=config.centralized_critic,
            value_normalizer=self.value_normalizer,
            device=self.device,
        )
        self.learner = Learner(config, self.joint_policy, units, self._generator)
        self._local = LocalCollector(env, self.joint_policy, config.seed, self._first_copy)
        self.iteration = 0
        self.env_steps = 0
        self._workers: Any = None
        # Subprocess envs: the pickled networks their workers collect with (False: they step the env only).
        self._slice_plan: bytes | bool | None = None
        self._slice_token = uuid.uuid4().hex
        self._keys: dict[str, list[str]] | None = None
        if config.num_workers > 0:
            if getattr(env, "env_fn", None) is None:
                raise ValueError(
                    f"num_workers={config.num_workers} Ray workers rebuild the env copies from a factory, but "
                    f"{type(env).__name__} has no env_fn; build the env with PettingZooJointEnv or make_joint_env"
                )
            from marljoint.distributed.rollout import worker_slices

            worker_slices(env.num_envs, config.num_workers)  # fail here, not at the first rollout

    # ------------------------------------------------------------------ where the next rollout starts
    @property
    def _state(self) -> JointObs | None:
        """The state the next rollout starts from (``None``: the env is reset first); the env workers and the
        Ray workers write it after a rollout they collected."""
        return self._local.state

    @_state.setter
    def _state(self, state: JointObs | None) -> None:
        self._local.state = state

    @property
    def _copy_generators(self) -> list[torch.Generator]:
        """The per-copy noise generators of the in-process collector (restored from checkpoints)."""
        return self._local.copy_generators

    @_copy_generators.setter
    def _copy_generators(self, generators: list[torch.Generator]) -> None:
        self._local.copy_generators = generators

    # ------------------------------------------------------------------ public properties
    @property
    def policies(self) -> list[ActorCritic]:
        """The networks, one per unit (per group with ``from_env``, per agent with the constructor)."""
        return [u.policy for u in self._units]

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
        """Plays ``rollout_steps`` joint steps in every env copy with the current policies.

        The env is reset (with ``config.seed``) on the first call; later calls continue where the last stopped.
        In turn-based games, a move whose outcome lies beyond the rollout (its agent waits for its turn at the
        end) is ``deferred`` and carried into the next rollout (:attr:`JointRollout.carried`).

        Returns:
            A :class:`JointRollout` (its storage is reused by the next call: keep a copy if you need both).
        """
        ro = self._collect()
        if self.joint_policy.row_pad is None:  # a rollout worker's slice is linked by the learner, which sees all
            ro.carried = self._pending
            ro.deferred = None
            ro.deferred, self._pending = carry_pending_moves(ro.extended(), self.config.bootstrap_truncation)
        return ro

    def _collect(self) -> JointRollout:
        """:meth:`collect_rollout` by the configured backend (Ray workers, env workers, or this process)."""
        cfg = self.config
        if self._rollout is None or self._rollout.num_envs != self.env.num_envs:
            self._rollout = JointRollout.allocate(self.spec, cfg.rollout_steps, self.env.num_envs, self.device)
        ro = self._rollout
        if cfg.num_workers > 0:
            self._ray_workers().collect(self.joint_policy.weights(), ro)
            self.env_steps += cfg.rollout_steps * self.env.num_envs
            return ro
        if self._collects_in_env_workers():
            self._state = self.env.collect_in_workers(
                ro, self._slice_token, self._slice_plan, cfg.to_dict(), self.joint_policy.weights(), self._state is None
            )
            self.env_steps += cfg.rollout_steps * self.env.num_envs
            return ro
        self._local.collect_into(ro)
        self.env_steps += cfg.rollout_steps * self.env.num_envs
        return ro

    def _collects_in_env_workers(self) -> bool:
        """Whether the env's worker processes run the policies too (a subprocess env, CPU policies, picklable)."""
        if self._slice_plan is None:
            self._slice_plan = False
            if callable(getattr(self.env, "collect_in_workers", None)) and self.device.type == "cpu":
                try:
                    self._slice_plan = blueprint(self)
                except (pickle.PicklingError, TypeError, AttributeError) as exc:
                    warnings.warn(
                        f"the policies cannot be pickled to the env worker processes ({exc}); the workers step the "
                        "env copies only and the policies run in this process, one step at a time",
                        stacklevel=3,
                    )
        return self._slice_plan is not False

    def _ray_workers(self) -> Any:
        if self._workers is None:
            from marljoint.distributed.rollout import RayRolloutWorkers

            self._workers = RayRolloutWorkers(self, self.env.env_fn, self.env.num_envs, self.config.num_workers)
        return self._workers

    def close(self) -> None:
        """Stops the Ray rollout workers, if any (the env, which the caller built, stays open)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None

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
        """
        return self.learner.update(rollout, aux_fn, active)

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
        if self.config.anneal_lr:
            if end_iteration is None:
                raise ValueError(
                    "anneal_lr decays the learning rate to 0 at the end of the run, so iterate() needs "
                    "end_iteration (the iteration the run ends at); or set anneal_lr=False"
                )
            self.anneal_learning_rate(end_iteration)
        tick = time.perf_counter()
        rollout = self.collect_rollout()
        if callable(active):
            active = active(rollout)
        stats = self.update(rollout, aux_fn=aux_fn, active=active)
        self.iteration += 1
        return Iteration(rollout, stats, time.perf_counter() - tick)

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
        per_iteration = self.config.rollout_steps * self.env.num_envs
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
        """Flat metrics of one iteration: counters, episode returns and every :class:`JointStats` field per agent."""
        env_steps = rollout.steps * rollout.num_envs
        agent_steps = int(rollout.valid.sum())
        out: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "agent_steps": agent_steps,
            "sps": agent_steps / seconds if seconds > 0 else float("nan"),
            "episodes": int(len(rollout.episode_lengths)),
        }
        returns = rollout.episode_returns
        out["episode_return_mean"] = float(returns.mean()) if len(returns) else float("nan")
        keys = self._metric_keys()
        for i, key in enumerate(keys["episode_return"]):
            out[key] = float(returns[:, i].mean()) if len(returns) else float("nan")
        for name in _PER_AGENT_STATS:
            for key, value in zip(keys[name], getattr(stats, name)):
                out[key] = value
        for key, value in stats.grad_norm.items():
            out[f"grad_norm/{key}"] = value
        out["aux_loss"] = stats.aux_loss
        out["total_loss"] = stats.total_loss
        out["num_mb_steps"] = stats.num_mb_steps
        out["learning_rate"] = float(self._units[0].optimizer.param_groups[0]["lr"])
        out["env_steps_this_iteration"] = env_steps
        out.update(stats.aux_metrics)
        return out

    def _metric_keys(self) -> dict[str, list[str]]:
        """``"<name>/<agent>"`` keys, built once: every metrics dict shares the same key strings."""
        if self._keys is None:
            names = ("episode_return", *_PER_AGENT_STATS)
            self._keys = {n: [sys.intern(f"{n}/{agent}") for agent in self.spec.agents] for n in names}
        return self._keys

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: networks, optimizers, normaliser, generator, counters, config."""
        return {
            "config": self.config.to_dict(),
            "agents": list(self.spec.agents),
            "policies": [u.policy.state_dict() for u in self._units],
            "optimizers": [[o.state_dict() for o in u.optimizers()] for u in self._units],
            "value_normalizer": None if self.value_normalizer is None else self.value_normalizer.state_dict(),
            "generator": self._generator.get_state(),
            "copy_generators": [g.get_state() for g in self._copy_generators],
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "lr_scale": self.learner.lr_scale,
            "pending_moves": None if self._pending is None else _fields_without_spec(self._pending.to("cpu")),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a trainer built for the same env and config.

        Raises:
            ValueError: if the agents or the number of networks differ.
        """
        if list(state["agents"]) != list(self.spec.agents):
            raise ValueError(f"checkpoint agents {state['agents']} differ from this env's {list(self.spec.agents)}")
        if len(state["policies"]) != len(self._units):
            raise ValueError(
                f"checkpoint holds {len(state['policies'])} networks, this trainer has {len(self._units)}; "
                "build the trainer with the same share_parameters setting"
            )
        for unit, policy_state, optimizer_states in zip(self._units, state["policies"], state["optimizers"]):
            _check_trunk_layout(unit.policy, policy_state, state.get("config", {}))
            unit.policy.load_state_dict(policy_state)
            for optimizer, optimizer_state in zip(unit.optimizers(), optimizer_states):
                optimizer.load_state_dict(optimizer_state)
        if self.value_normalizer is not None and state["value_normalizer"] is not None:
            self.value_normalizer.load_state_dict(state["value_normalizer"])
        self._generator.set_state(state["generator"])
        self._copy_generators = generators_from_states(state.get("copy_generators", []))
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.learner.lr_scale = float(state.get("lr_scale", 1.0))
        pending = state.get("pending_moves")
        self._pending = None if pending is None else JointRollout(**{**pending, "spec": self.spec}).to(self.device)

    def save(self, path: str) -> None:
        """Writes :meth:`state_dict` to ``path`` atomically (temporary file, fsync, rename)."""
        from marljoint.checkpoint import atomic_torch_save

        atomic_torch_save(self.state_dict(), path)

    def load(self, path: str) -> None:
        """Loads a checkpoint written by :meth:`save`.

        Raises:
            ValueError: if the file is not a readable marljoint checkpoint.
        """
        from marljoint.checkpoint import load_checkpoint

        self.load_state_dict(load_checkpoint(path))

    def env_state(self) -> dict[str, Any] | None:
        """Where the next rollout starts: the env's :meth:`~marljoint.PettingZooJointEnv.get_state` snapshot.

        Saved beside :meth:`state_dict`, it makes a resumed run bit-identical to an uninterrupted one.

        Returns:
            ``None`` before the first rollout (the next one resets the env), else ``{"env": snapshot}``; with Ray
            rollout workers, ``{"workers": [snapshot per worker]}`` (each worker's copies and noise generators).

        Raises:
            TypeError: if the env has no ``get_state()`` or cannot be pickled.
        """
        if self.config.num_workers > 0:
            if self._workers is None or all(s is None for s in self._workers.states()):
                return None
            return {"workers": self._workers.states()}
        if self._state is None:
            return None
        get_state = getattr(self.env, "get_state", None)
        if get_state is None:
            raise TypeError(f"{type(self.env).__name__} has no get_state(), so its episodes cannot be saved")
        return {"env": get_state()}

    def load_env_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores :meth:`env_state` output; ``None`` makes the next rollout reset the env with ``config.seed``
        (and drops the moves pending from the last rollout, whose episodes then end unseen)."""
        if state is None:
            self._pending = None
        if self.config.num_workers > 0:
            if state is not None and "workers" not in state:
                raise ValueError(
                    "this env state was saved by an in-process trainer (num_workers=0); resume it with num_workers=0"
                )
            workers = self._ray_workers()
            workers.load_states(state["workers"] if state is not None else [None] * workers.num_workers)
            return
        if state is None:
            self._state = None
            return
        if "env" not in state:
            raise ValueError(
                f"this env state was saved by {len(state['workers'])} Ray rollout workers; resume it with "
                f"num_workers={len(state['workers'])}"
            )
        self._state = self.env.set_state(state["env"])


_PER_AGENT_STATS = ("policy_loss", "value_loss", "entropy", "clip_fraction", "approx_kl", "explained_var")


def _check_trunk_layout(policy: Any, policy_state: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """Refuses a checkpoint whose critic layout (own trunk or shared) differs from the network's, with the fix."""
    if not isinstance(policy, ActorCritic) or policy.critic_input_size is not None:
        return
    saved_own_trunk = any(key.startswith("critic_encoder.") for key in policy_state)
    if saved_own_trunk == (not policy.share_trunk):
        return
    saved = "a critic trunk of its own" if saved_own_trunk else "a critic that reads the actor's trunk"
    hint = "" if "share_trunk" in config else " (checkpoints written before separate networks became the default)"
    raise ValueError(
        f"the checkpoint's networks have {saved}{hint}, this trainer's do not; build the trainer with "
        f"share_trunk={not saved_own_trunk} (share_trunk = {str(not saved_own_trunk).lower()} in a run's config.toml)"
    )


def _fields_without_spec(rollout: JointRollout) -> dict[str, Any]:
    """A rollout's fields for a checkpoint (the spec is the trainer's own, restored from the env)."""
    return {name: value for name, value in vars(rollout).items() if name != "spec"}


def _check_agent_count(config: JointTrainerConfig, n: int) -> None:
    if config.num_agents is not None and config.num_agents != n:
        raise ValueError(
            f"config.num_agents is {config.num_agents} but the env has {n} agents; set num_agents={n} or leave it None"
        )


def _critic_input_size(spec: Any) -> int:
    for group in spec.groups:
        if group.observation.kind == "image":
            raise ValueError(
                f"centralized_critic needs flat observations, but agents {list(group.agents)} observe images "
                f"{group.observation.shape}; turn it off, or flatten/encode the images with a supersuit wrapper"
            )
    return sum(spec.observations[i].size for i in range(spec.num_agents)) + spec.num_agents
