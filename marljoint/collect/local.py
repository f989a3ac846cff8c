"""The in-process collector: E env copies stepped in this process with a joint policy's actions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from marljoint.collect.acting import HostActing
from marljoint.collect.base import ActingPolicy, StepActing, rollout_storage
from marljoint.collect.noise import CopyNoise, copy_generators, generators_from_states
from marljoint.collect.padded import PaddedPolicy, RowPadding
from marljoint.collect.rollout import JointRollout
from marljoint.collect.snapshots import read_memory, read_state, restore_env
from marljoint.env.base import JointEnv, JointObs, JointStep
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.policies.joint import JointPolicy

__all__ = ["LocalCollector"]


class LocalCollector:
    """Plays rollouts in a :class:`~marljoint.env.JointEnv` in this process with a
    :class:`~marljoint.policies.JointPolicy` (a :class:`~marljoint.collect.Collector`).

    The env is reset with ``seed`` before the first rollout; each later rollout continues where the last stopped.
    Every env copy samples from its own noise generator, addressed by its global index ``first_copy + e``, so a
    slice of the copies collected here gives exactly what those copies give in a collector of all of them.

    Args:
        env: the env copies (any JointEnv; a :class:`~marljoint.env.SubprocessJointEnv` steps in its workers).
        seed: the seed of the env resets and of the copies' noise generators.
        first_copy: the global index of the env's first copy (non-zero for one slice of a larger set).
        batch_rows: the copies of the whole set (E) when this env holds one slice of it: the slice's rows are then
            evaluated at their positions of an E-row batch (:class:`~marljoint.collect.padded.PaddedPolicy`), so
            they get the bits a collector of all E copies gives them. ``None``: the env's copies are the batch.

    Attributes:
        current: where the next rollout starts (``None``: the env is reset first).
        copy_generators: one noise generator per env copy (built on the first rollout).
    """

    def __init__(self, env: JointEnv, seed: int, first_copy: int = 0, batch_rows: int | None = None) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.seed = int(seed)
        self.first_copy = int(first_copy)
        self.rows = None if batch_rows is None else RowPadding(self.first_copy, int(batch_rows))
        self.current: JointObs | None = None
        self.copy_generators: list[torch.Generator] = []
        self._storage: JointRollout | None = None
        self._memory: _Memory | None = None

    def collect(self, policy: ActingPolicy, steps: int, behaviour: BehaviourPolicy | None = None) -> JointRollout:
        """Plays ``steps`` joint steps in every env copy with ``policy`` (played by ``behaviour`` when given: the
        rollout stores the behaviour's log-probabilities; a :class:`~marljoint.collect.StepActing` plays itself).

        Returns:
            The rollout ``[T, E, ...]`` on the policy's device (its storage is reused by the next call).
        """
        self._storage = rollout_storage(self._storage, self.env.spec, steps, self.env.num_envs, policy.device)
        self.collect_into(self._storage, policy, behaviour)
        return self._storage

    def state(self) -> dict[str, Any] | None:
        """``{"env": the env's get_state() snapshot, "copy_generators": their states}``, or ``None`` before the
        first rollout.

        Raises:
            TypeError: if the env has no ``get_state()`` or cannot be pickled.
        """
        if self.current is None:
            return None
        get_state = getattr(self.env, "get_state", None)
        if get_state is None:
            raise TypeError(f"{type(self.env).__name__} has no get_state(), so its episodes cannot be saved")
        state = {"env": get_state(), "copy_generators": [g.get_state() for g in self.copy_generators]}
        if self._memory is not None:
            state["memory"] = self._memory.state()
        return state

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores the :meth:`~marljoint.collect.Collector.state` of any collector over the same copies (this
        one's, or a subprocess or Ray collector's: the copies continue exactly where they stopped); ``None`` makes
        the next rollout reset the env with the seed. A state without noise generators keeps the current ones.

        Raises:
            ValueError: for a state that is unreadable or holds another number of copies.
        """
        if state is None:
            self.current = None
            self._memory = None
            return
        self.current, generators = restore_env(self.env, read_state(state))
        if generators is not None:
            self.copy_generators = generators_from_states(generators)
        self.load_memory(read_memory(state))

    def memory_state(self) -> dict[str, Any] | None:
        """The recurrent agents' states between rollouts (``{"hidden": per group [E, n_g, S_g], "fresh": [E, N]}``
        as numpy arrays), or ``None`` (a feed-forward policy, or before the first rollout)."""
        return None if self._memory is None else self._memory.state()

    def load_memory(self, memory: Mapping[str, Any] | None) -> None:
        """Restores :meth:`memory_state` output; ``None`` starts every agent afresh at the next rollout."""
        self._memory = None if memory is None else _Memory.from_state(memory)

    def close(self) -> None:
        """Nothing to release: the env belongs to the caller."""

    def collect_into(self, ro: JointRollout, policy: ActingPolicy, behaviour: BehaviourPolicy | None = None) -> None:
        """Plays ``ro.steps`` joint steps in every env copy, writing them into the rollout storage ``ro``.

        Args:
            ro: storage allocated for this env's copies on the policy's device (see
                :meth:`~marljoint.collect.JointRollout.allocate`).
            policy: the policy to act with (a :class:`~marljoint.collect.StepActing` is asked for each step's
                actions, and the rollout keeps the successors of its steps).
            behaviour: the :class:`~marljoint.policies.BehaviourPolicy` that plays in its place (``None``: the
                policy itself; not used with a :class:`~marljoint.collect.StepActing`).
        """
        if not isinstance(policy, JointPolicy):
            self._collect_steps(ro, policy)
            return
        state = self._start()
        noise = CopyNoise(self.copy_generators, ro.steps)
        ro.final_values.zero_()  # written only at the steps where an agent is truncated
        ro.truncated_waiting.zero_()
        policy.train(False)
        padded = PaddedPolicy(policy, self.rows)
        writer = _StepWriter(ro)
        episodes = _Episodes()
        memory = self._recurrent_memory(policy, ro, state)
        act = self._acting(padded, ro, memory, behaviour)
        with torch.no_grad():
            for t in range(ro.steps):
                writer.observation(t, state)
                # Rows without a decision carry all-allowed masks (the adapter's contract; the distributions
                # also treat an all-masked head as unmasked), so sampling there is well defined and ignored.
                step = self.env.step(act(t, noise))
                writer.outcome(t, step)
                if step.truncated.any():
                    ro.final_values[t] = self._final_values(padded, step, memory)
                    if step.final_waiting is not None:
                        ro.truncated_waiting[t] = torch.from_numpy(step.truncated & step.final_waiting)
                episodes.record(t, step)
                if memory is not None:  # the env may reuse its arrays: step t's flags are read from the rollout
                    memory.after_step(ro.alive[t].cpu().numpy(), step)
                state = step
            _bootstrap(ro, padded, state, memory)
        self.current = JointObs(state.obs, state.alive, state.acting, state.action_masks)
        episodes.write(ro, self.env.spec.num_agents)

    def _collect_steps(self, ro: JointRollout, policy: StepActing) -> None:
        """:meth:`collect_into` for a :class:`~marljoint.collect.StepActing`: each step's actions from
        ``policy.act_step``, the copies' noise generators handed over; values and log-probabilities stay 0."""
        state = self._start()
        ro.keep_successors()
        for name in ("values", "log_probs", "final_values", "truncated_waiting", "bootstrap_values"):
            getattr(ro, name).zero_()
        ro.states = ro.starts = None
        writer = _StepWriter(ro)
        episodes = _Episodes()
        with torch.no_grad():
            for t in range(ro.steps):
                writer.observation(t, state)
                current = JointObs(state.obs, state.alive, state.acting, state.action_masks)
                actions = policy.act_step(current, t, self.copy_generators, self.rows)
                for g, action in enumerate(actions):
                    ro.actions[g][t].copy_(torch.as_tensor(np.asarray(action)))
                step = self.env.step(actions)
                writer.outcome(t, step)
                writer.successors(t, step)
                if step.final_waiting is not None and step.truncated.any():
                    ro.truncated_waiting[t] = torch.from_numpy(step.truncated & step.final_waiting)
                episodes.record(t, step)
                state = step
        writer.after_last(state)
        self.current = JointObs(state.obs, state.alive, state.acting, state.action_masks)
        episodes.write(ro, self.env.spec.num_agents)

    def _start(self) -> JointObs:
        """Where the rollout starts (the env reset with the seed before the first), with the noise generators."""
        if self.current is None:
            self.current = self.env.reset(seed=self.seed)
            self._memory = None
        if len(self.copy_generators) != self.env.num_envs:
            self.copy_generators = copy_generators(self.seed, self.env.num_envs, self.first_copy)
        return self.current

    def _acting(
        self, padded: PaddedPolicy, ro: JointRollout, memory: _Memory | None, behaviour: BehaviourPolicy | None
    ) -> Callable[[int, CopyNoise], list[np.ndarray]]:
        """The acting step of this rollout: ``act(t, noise)`` samples step ``t``, writes it into ``ro`` and returns
        the env actions."""
        policy = padded.policy
        if memory is not None:
            return functools.partial(memory.act, padded, ro, behaviour)
        # On the CPU, plain MLP networks act through numpy around their torch matrix products.
        host = HostActing.build(policy, ro, self.rows, behaviour)
        if host is not None:
            return lambda t, noise: policy.clip_actions(host.act(t, noise))
        return functools.partial(_act_with_torch, padded, ro, behaviour)

    def _recurrent_memory(self, policy: JointPolicy, ro: JointRollout, start: JointObs) -> _Memory | None:
        """The agents' hidden states for this rollout (``None`` for a feed-forward policy), with the rollout's
        ``states`` and ``starts`` storage allocated."""
        if not policy.recurrent:
            self._memory = None
            ro.states = ro.starts = None
            return None
        sizes = policy.group_states.sizes()
        if self._memory is None or self._memory.sizes != sizes:
            self._memory = _Memory(policy.group_states.initial(self.env.num_envs, policy.device), start.alive)
        self._memory.to(policy.device)
        shapes = [(ro.steps, *h.shape) for h in self._memory.hidden]
        if ro.states is None or [tuple(x.shape) for x in ro.states] != shapes:
            # The states are rollout storage: they live with the rollout, which the acting policy's device need
            # not be (the hidden states it steps follow the policy instead, above).
            ro.states = tuple(torch.zeros(shape, device=ro.alive.device) for shape in shapes)
            ro.starts = torch.zeros_like(ro.alive)
        return self._memory

    def _final_values(self, padded: PaddedPolicy, step: Any, memory: _Memory | None = None) -> torch.Tensor:
        """Values of the final states of agents that ended this step (bootstrap for truncation)."""
        policy = padded.policy
        device = policy.device
        ended = torch.from_numpy(step.terminated | step.truncated).to(device)
        reset = torch.from_numpy(step.reset_envs).to(device)
        group_obs = []
        for g, group in enumerate(self.env.spec.groups):
            final = torch.from_numpy(step.final_obs[g]).to(device)
            current = torch.from_numpy(step.obs[g]).to(device)
            cols = ended[:, list(group.agent_indices)]
            # Agents that did not end keep living in the same state, unless their copy was reset.
            current = torch.where(reset.view(-1, *([1] * (current.dim() - 1))), torch.zeros_like(current), current)
            shape = cols.shape + (1,) * (final.dim() - 2)
            group_obs.append(torch.where(cols.view(shape), final, current))
        alive_final = ended | (torch.from_numpy(step.alive).to(device) & ~reset.unsqueeze(1))
        # A recurrent critic reads the final states from the states the agents reached with their last step.
        states = None if memory is None else memory.hidden
        return policy.values(padded.forward(group_obs, alive_final, states))


class _Memory:
    """The agents' recurrent states between steps: per group ``[E, n_g, S_g]``, and which agents start afresh
    at the next step (``[E, N]`` bool: their episode began, or they appeared in their copy)."""

    def __init__(self, hidden: tuple[torch.Tensor, ...], fresh: np.ndarray) -> None:
        self.hidden = tuple(hidden)
        self.fresh = np.array(fresh, dtype=bool)
        self.sizes = tuple(int(h.shape[-1]) for h in self.hidden)

    def to(self, device: torch.device) -> None:
        self.hidden = tuple(h.to(device) for h in self.hidden)

    def act(
        self, padded: PaddedPolicy, ro: JointRollout, behaviour: BehaviourPolicy | None, t: int, noise: CopyNoise
    ) -> list[np.ndarray]:
        """Step ``t``: resets the fresh agents' states, stores what each agent acts from, samples, and advances
        the states of the agents that decide at this step."""
        policy = padded.policy
        fresh = torch.from_numpy(self.fresh).to(ro.alive.device)
        ro.starts[t] = fresh
        hidden = policy.group_states.reset(self.hidden, fresh)
        for g, h in enumerate(hidden):
            ro.states[g][t] = h
        masks = [m[t] if m is not None else None for m in ro.action_masks]
        outputs = padded.forward([o[t] for o in ro.obs], ro.alive[t], hidden)
        actions, log_probs = policy.sample(outputs, masks, noise=noise, behaviour=behaviour)
        ro.values[t] = policy.values(outputs)
        ro.log_probs[t] = log_probs
        for g, action in enumerate(actions):
            ro.actions[g][t].copy_(action)
        self.hidden = policy.group_states.advance(hidden, outputs, ro.alive[t] & ro.acting[t])
        return policy.env_actions(actions)

    def after_step(self, alive_before: np.ndarray, step: Any) -> None:
        """Marks the agents that start afresh at the next step: those of a copy that was reset, and those that
        appeared (absent at this step, present at the next)."""
        self.fresh = step.alive & (step.reset_envs[:, None] | ~alive_before)

    def fresh_states(self, policy: JointPolicy) -> tuple[torch.Tensor, ...]:
        """The states the agents act from at the next step (the fresh ones reset)."""
        return policy.group_states.reset(self.hidden, torch.from_numpy(self.fresh))

    def state(self) -> dict[str, Any]:
        """Numpy copies, for the collector's saved state."""
        return {"hidden": [h.detach().cpu().numpy().copy() for h in self.hidden], "fresh": self.fresh.copy()}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> _Memory:
        """Inverse of :meth:`state`."""
        return cls(tuple(torch.as_tensor(np.array(h)) for h in state["hidden"]), np.array(state["fresh"]))


def _act_with_torch(
    padded: PaddedPolicy, ro: JointRollout, behaviour: BehaviourPolicy | None, t: int, noise: CopyNoise
) -> list[np.ndarray]:
    """Samples step ``t`` of a rollout with the networks and distributions in torch; returns the env actions."""
    policy = padded.policy
    masks = [m[t] if m is not None else None for m in ro.action_masks]
    outputs = padded.forward([o[t] for o in ro.obs], ro.alive[t])
    actions, log_probs = policy.sample(outputs, masks, noise=noise, behaviour=behaviour)
    ro.values[t] = policy.values(outputs)
    ro.log_probs[t] = log_probs
    for g, action in enumerate(actions):
        ro.actions[g][t].copy_(action)
    return policy.env_actions(actions)


def _bootstrap(ro: JointRollout, padded: PaddedPolicy, state: JointStep | JointObs, memory: _Memory | None) -> None:
    """Writes the values of the state after the last step and who is present and moves there."""
    policy = padded.policy
    device = policy.device
    alive = torch.from_numpy(state.alive).to(device)
    states = None if memory is None else memory.fresh_states(policy)
    outputs = padded.forward([torch.from_numpy(o).to(device) for o in state.obs], alive, states)
    ro.bootstrap_values.copy_(policy.values(outputs) * alive)
    ro.next_alive.copy_(alive)
    ro.next_acting.copy_(torch.from_numpy(state.acting))


class _StepWriter:
    """Writes the env's arrays into a rollout's step ``t``: through numpy views of its storage when it is on the
    CPU (a numpy assignment costs a fraction of a torch ``copy_`` per array and step), else with torch copies."""

    def __init__(self, ro: JointRollout) -> None:
        on_host = ro.rewards.device.type == "cpu"
        self.put = _put_numpy if on_host else _put_torch
        self.ro, self.on_host = ro, on_host

        def sink(tensor: torch.Tensor) -> Any:
            return tensor.numpy() if on_host else tensor

        self.obs = [sink(o) for o in ro.obs]
        self.masks = [None if m is None else sink(m) for m in ro.action_masks]
        self.alive, self.acting, self.rewards, self.terminated, self.truncated = (
            sink(x) for x in (ro.alive, ro.acting, ro.rewards, ro.terminated, ro.truncated)
        )

    def observation(self, t: int, state: JointObs) -> None:
        """What the agents act on at step ``t``: observations, masks, alive and acting flags."""
        put = self.put
        for g, obs in enumerate(self.obs):
            put(obs, t, state.obs[g])
            if self.masks[g] is not None:
                put(self.masks[g], t, state.action_masks[g])
        put(self.alive, t, state.alive)
        put(self.acting, t, state.acting)

    def outcome(self, t: int, step: JointStep) -> None:
        """What step ``t`` gave: rewards, terminated and truncated flags."""
        self.put(self.rewards, t, step.rewards)
        self.put(self.terminated, t, step.terminated)
        self.put(self.truncated, t, step.truncated)

    def successors(self, t: int, step: JointStep) -> None:
        """The final observations of step ``t`` and the copies it reset (a rollout that keeps successors)."""
        ro = self.ro
        for g, final in enumerate(ro.final_obs):
            self.put(final.numpy() if self.on_host else final, t, step.final_obs[g])
        self.put(ro.resets.numpy() if self.on_host else ro.resets, t, step.reset_envs)

    def after_last(self, state: JointStep | JointObs) -> None:
        """The state after the last step: observations, legal actions, who is present and who moves."""
        ro = self.ro
        for g, obs in enumerate(ro.next_obs):
            obs.copy_(torch.from_numpy(np.asarray(state.obs[g])))
            mask = ro.next_action_masks[g]
            if mask is not None:
                given = state.action_masks[g]
                mask.copy_(torch.from_numpy(np.asarray(given))) if given is not None else mask.fill_(True)
        ro.next_alive.copy_(torch.from_numpy(state.alive))
        ro.next_acting.copy_(torch.from_numpy(state.acting))


class _Episodes:
    """The episodes that finish during a rollout: their returns, lengths and the step they finished at."""

    def __init__(self) -> None:
        self.returns: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.steps: list[np.ndarray] = []

    def record(self, t: int, step: JointStep) -> None:
        if len(step.episode_lengths):
            self.returns.append(step.episode_returns.copy())
            self.lengths.append(step.episode_lengths.copy())
            self.steps.append(np.full(len(step.episode_lengths), t, dtype=np.int64))

    def write(self, ro: JointRollout, num_agents: int) -> None:
        ro.episode_returns = np.concatenate(self.returns) if self.returns else np.zeros((0, num_agents))
        ro.episode_lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        ro.episode_steps = np.concatenate(self.steps) if self.steps else np.zeros(0, np.int64)


def _put_numpy(dst: np.ndarray, t: int, src: np.ndarray) -> None:
    """Writes an env array into step t of a rollout field held as a numpy view of CPU storage."""
    dst[t] = src


def _put_torch(dst: torch.Tensor, t: int, src: np.ndarray) -> None:
    """Writes an env array into step t of a rollout field on any device."""
    dst[t].copy_(torch.from_numpy(src))
