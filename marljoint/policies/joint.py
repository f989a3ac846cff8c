"""The joint policy: the networks of every agent group, evaluated, sampled and exchanged together."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from marljoint.env.base import JointObs, JointStep
from marljoint.env.spaces import JointSpec
from marljoint.policies.actor_critic import ActorCritic, PolicyOutput
from marljoint.policies.normalizer import RunningNormalizer

__all__ = ["JointPolicy", "NetworkSlot"]


class NetworkSlot(NamedTuple):
    """Which agents one network serves.

    Attributes:
        group: index into ``spec.groups`` of the agents' group.
        agents: the agents' indices in ``possible_agents`` order.
        whole_group: the network takes the whole group's ``[B, n_g, ...]`` inputs (a batched group network);
            False: it serves one agent of the group, whose slot it reads.
    """

    group: int
    agents: tuple[int, ...]
    whole_group: bool


class JointPolicy:
    """Every agent's policy and value function: one network per slot, evaluated with one batched forward each.

    Inputs and outputs are per group (observations ``[B, n_g, ...]``, actions, masks) or per agent (``[B, N]``
    log-probabilities and values in ``possible_agents`` order), as in a rollout row; B is a batch of env copies
    or of minibatch rows.

    Args:
        spec: the env's agents, layouts and groups.
        networks: the :class:`~marljoint.policies.ActorCritic` of each slot.
        slots: which agents each network serves (:class:`NetworkSlot`); together they cover every agent once.
        centralized: the critics read the joint state (every agent's flat observation and the alive mask).
        value_normalizer: the running statistics the critics' outputs are normalised by, or ``None``.
        device: where the networks live.
    """

    def __init__(
        self,
        spec: JointSpec,
        networks: Sequence[ActorCritic],
        slots: Sequence[NetworkSlot],
        centralized: bool = False,
        value_normalizer: RunningNormalizer | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if len(networks) != len(slots):
            raise ValueError(f"got {len(networks)} networks for {len(slots)} slots; pass one network per slot")
        order = [i for slot in slots for i in slot.agents]
        if sorted(order) != list(range(spec.num_agents)):
            raise ValueError(
                f"the slots serve agents {order}; together they must serve each of the {spec.num_agents} agents "
                f"{list(spec.agents)} exactly once"
            )
        self.spec = spec
        self.networks = list(networks)
        self.slots = list(slots)
        self.centralized = bool(centralized)
        self.value_normalizer = value_normalizer
        self.device = torch.device(device)
        # (first row, total rows) when this policy evaluates one slice of a larger batch (a rollout worker).
        self.row_pad: tuple[int, int] | None = None
        # What act() remembers between calls for a recurrent policy: the states and alive flags after its last call.
        self._acting: tuple[tuple[torch.Tensor, ...], np.ndarray] | None = None
        # Columns of the concatenated network outputs, mapped back to possible_agents order.
        self._to_agent_order = torch.as_tensor(np.argsort(order), dtype=torch.long, device=self.device)
        self._in_agent_order = bool(np.array_equal(order, np.arange(len(order))))

    # ------------------------------------------------------------------ inputs
    def network_obs(self, k: int, group_obs: Sequence[torch.Tensor]) -> torch.Tensor:
        """Network ``k``'s observations ``[B, n_k, ...]`` from the per-group observations."""
        slot = self.slots[k]
        obs = group_obs[slot.group]
        if slot.whole_group:
            return obs
        _, j = self.spec.group_of(slot.agents[0])
        return obs[:, j : j + 1]

    def network_masks(self, k: int, masks: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
        """Network ``k``'s action masks from the per-group masks (``None`` for Box actions)."""
        slot = self.slots[k]
        mask = masks[slot.group]
        if mask is None or slot.whole_group:
            return mask
        _, j = self.spec.group_of(slot.agents[0])
        return mask[:, j : j + 1]

    def critic_state(self, group_obs: Sequence[torch.Tensor], alive: torch.Tensor) -> torch.Tensor | None:
        """``[B, S]`` joint state of a centralised critic: every agent's flat observation and the alive mask
        (``None`` without one)."""
        if not self.centralized:
            return None
        batch = alive.shape[0]
        parts = [o.reshape(batch, -1).float() for o in group_obs]
        parts.append(alive.float())
        return torch.cat(parts, dim=1)

    # ------------------------------------------------------------------ recurrent states
    @property
    def recurrent(self) -> bool:
        """Whether some network has a recurrent core (then every forward takes the agents' states)."""
        return any(getattr(network, "core", None) is not None for network in self.networks)

    def state_sizes(self) -> tuple[int, ...]:
        """Per group, S_g, the size of one agent's recurrent state (0 for feed-forward groups).

        Raises:
            ValueError: if the networks of one group have different state sizes.
        """
        sizes: list[set[int]] = [set() for _ in self.spec.groups]
        for network, slot in zip(self.networks, self.slots):
            sizes[slot.group].add(int(getattr(network, "state_size", 0)))
        for g, found in enumerate(sizes):
            if len(found) > 1:
                raise ValueError(
                    f"the networks of agents {list(self.spec.groups[g].agents)} have recurrent states of sizes "
                    f"{sorted(found)}; one group's networks need one state size"
                )
        return tuple(found.pop() for found in sizes)

    def initial_states(self, batch: int) -> tuple[torch.Tensor, ...]:
        """Per group, the zero states ``[batch, n_g, S_g]`` of an episode's start."""
        return tuple(
            torch.zeros(batch, group.size, size, device=self.device)
            for group, size in zip(self.spec.groups, self.state_sizes())
        )

    def network_state(self, k: int, states: Sequence[torch.Tensor] | None) -> torch.Tensor | None:
        """Network ``k``'s states ``[B, n_k, S]`` from the per-group states (``None`` for a feed-forward one)."""
        if states is None or getattr(self.networks[k], "core", None) is None:
            return None
        return self.network_obs(k, states)

    def group_states(self, outputs: Sequence[PolicyOutput]) -> tuple[torch.Tensor, ...] | None:
        """Per group, the states after a step ``[B, n_g, S_g]`` from :meth:`forward` outputs (``None`` for a
        feed-forward policy)."""
        if not self.recurrent:
            return None
        parts: list[list[torch.Tensor]] = [[] for _ in self.spec.groups]
        for out, slot in zip(outputs, self.slots):
            state = out.state if out.state is not None else out.values.new_zeros((*out.values.shape, 0))
            parts[slot.group].append(state)
        return tuple(torch.cat(p, dim=1) if len(p) > 1 else p[0] for p in parts)

    def reset_states(self, states: Sequence[torch.Tensor], fresh: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``states`` (per group ``[B, n_g, S_g]``) with the agents set in ``fresh`` (``[B, N]`` bool) zeroed."""
        fresh = fresh.to(device=states[0].device, dtype=torch.bool)
        return tuple(
            torch.where(fresh[:, list(g.agent_indices)].unsqueeze(-1), torch.zeros_like(h), h)
            for g, h in zip(self.spec.groups, states)
        )

    def advance_states(
        self, states: Sequence[torch.Tensor], outputs: Sequence[PolicyOutput], advance: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """The states after a step: the :meth:`forward` outputs' states for the agents set in ``advance``
        (``[B, N]`` bool: they decided at this step), ``states`` for the others (absent, or waiting)."""
        stepped = self.group_states(outputs)
        assert stepped is not None
        advance = advance.to(device=states[0].device, dtype=torch.bool)
        return tuple(
            torch.where(advance[:, list(g.agent_indices)].unsqueeze(-1), new, old)
            for g, new, old in zip(self.spec.groups, stepped, states)
        )

    # ------------------------------------------------------------------ evaluation
    def forward(
        self,
        group_obs: Sequence[torch.Tensor],
        alive: torch.Tensor,
        states: Sequence[torch.Tensor] | None = None,
    ) -> list[PolicyOutput]:
        """Every network on its agents' rows: one :class:`~marljoint.policies.PolicyOutput` per network.

        Args:
            group_obs: per group, ``[B, n_g, *obs_shape]``.
            alive: ``[B, N]`` bool (read by a centralised critic).
            states: per group, ``[B, n_g, S_g]`` recurrent states (required by a recurrent policy).
        """
        critic_state = self.critic_state(group_obs, alive)
        outputs = []
        for k, network in enumerate(self.networks):
            obs = self.network_obs(k, group_obs)
            critic_obs = None if critic_state is None else critic_state.unsqueeze(1).expand(-1, obs.shape[1], -1)
            state = self.network_state(k, states)
            outputs.append(network(obs, critic_obs) if state is None else network(obs, critic_obs, state))
        return outputs

    def forward_sequence(
        self,
        group_obs: Sequence[torch.Tensor],
        alive: torch.Tensor,
        states: Sequence[torch.Tensor],
        starts: torch.Tensor,
        advance: torch.Tensor,
        *,
        replay: str = "cells",
    ) -> list[PolicyOutput]:
        """Replays sequence chunks of a recurrent policy (truncated BPTT); outputs flattened to ``L × B`` rows.

        Args:
            group_obs: per group, ``[L, B, n_g, *obs_shape]``.
            alive: ``[L, B, N]`` bool.
            states: per group, ``[B, n_g, S_g]``, the states before each chunk's first step.
            starts: ``[L, B, N]`` bool, the agent's state is reset before that step.
            advance: ``[L, B, N]`` bool, the agent's state advances through that step.
            replay: ``"cells"`` or ``"fused"``: how the recurrent cores replay the chunks
                (:meth:`~marljoint.policies.ActorCritic.forward_sequence`).

        Returns:
            One :class:`~marljoint.policies.PolicyOutput` per network with fields over ``L × B`` rows in
            ``(step, chunk)`` order (as ``[L, B]`` flattened), and the states after the chunks ``[B, n_k, S]``.
        """
        length, batch = alive.shape[:2]
        rows = length * batch
        flat_obs = [o.reshape(rows, *o.shape[2:]) for o in group_obs]
        critic_state = self.critic_state(flat_obs, alive.reshape(rows, -1))
        outputs = []
        for k, network in enumerate(self.networks):
            agents = list(self.slots[k].agents)
            obs = self.network_obs(k, flat_obs)
            critic_obs = None
            if critic_state is not None:
                critic_obs = critic_state.view(length, batch, 1, -1).expand(-1, -1, obs.shape[1], -1)
            out = network.forward_sequence(
                obs.reshape(length, batch, *obs.shape[1:]),
                self.network_state(k, states),
                starts[:, :, agents],
                advance[:, :, agents],
                critic_obs,
                replay=replay,
            )
            outputs.append(PolicyOutput(*(x.reshape(rows, *x.shape[2:]) for x in out[:3]), state=out.state))
        return outputs

    def forward_rows(
        self,
        group_obs: Sequence[torch.Tensor],
        alive: torch.Tensor,
        states: Sequence[torch.Tensor] | None = None,
    ) -> list[PolicyOutput]:
        """:meth:`forward` of rollout rows; with :attr:`row_pad` ``(a, total)`` the rows are evaluated as rows
        ``a..`` of a ``total``-row batch (the others zero).

        Matrix-product kernels pick their summation order from the batch shape, so the same row gives other bits
        in a batch of another size; at the same shape and position it gets exactly the bits it gets when one
        process evaluates all the rows.
        """
        if self.row_pad is None:
            return self.forward(group_obs, alive, states)
        start, total = self.row_pad
        rows = alive.shape[0]

        def padded(x: torch.Tensor) -> torch.Tensor:
            out = x.new_zeros((total, *x.shape[1:]))
            out[start : start + rows] = x
            return out

        padded_states = None if states is None else [padded(s) for s in states]
        outputs = self.forward([padded(o) for o in group_obs], padded(alive), padded_states)
        return [type(o)(*(None if f is None else f[start : start + rows] for f in o)) for o in outputs]

    def agent_columns(self, per_network: Iterable[torch.Tensor]) -> torch.Tensor:
        """Concatenates ``[B, n_k]`` network outputs into ``[B, N]`` in ``possible_agents`` order."""
        parts = list(per_network)
        if self._in_agent_order:
            return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        return torch.cat(parts, dim=1).index_select(1, self._to_agent_order)

    def values(self, outputs: Sequence[PolicyOutput]) -> torch.Tensor:
        """``[B, N]`` values in return units (denormalised) from :meth:`forward` outputs."""
        values = self.agent_columns(o.values for o in outputs)
        if self.value_normalizer is not None:
            values = self.value_normalizer.denormalize(values)
        return values

    def sample(
        self,
        outputs: Sequence[PolicyOutput],
        masks: Sequence[torch.Tensor | None],
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        copy_noise: Any = None,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Actions of every agent; returns per-group action tensors ``[B, n_g, ...]`` and ``[B, N]`` log-probs.

        Args:
            outputs: from :meth:`forward`.
            masks: per group, ``[B, n_g, sum(nvec)]`` bool or ``None``.
            deterministic: take each distribution's mode.
            generator: the source of the noise otherwise.
            copy_noise: a :class:`~marljoint.collect.CopyNoise` over one generator per batch row (env copy), used
                instead of ``generator``: each copy's noise comes from its own generator, so a copy's actions do
                not depend on which other copies share the batch.

        Raises:
            ValueError: when sampling needs noise and neither ``generator`` nor ``copy_noise`` is given.
        """
        group_actions: list[list[torch.Tensor]] = [[] for _ in self.spec.groups]
        log_probs = []
        dists = [
            network.distribution(out.head, self.network_masks(k, masks))
            for k, (network, out) in enumerate(zip(self.networks, outputs))
        ]
        noises = copy_noise.draw(dists) if copy_noise is not None and not deterministic else None
        if noises is not None and self.device.type != "cpu":  # the copies' generators draw on the CPU
            noises = [noise.to(self.device) for noise in noises]
        if not deterministic and noises is None and generator is None:
            raise ValueError("sampling needs a generator or a copy_noise; pass one, or deterministic=True")
        for k, dist in enumerate(dists):
            if deterministic:
                action = dist.mode()
            elif noises is not None:
                action = dist.sample_from_noise(noises[k])
            else:
                action = dist.sample(generator)
            log_probs.append(dist.log_prob(action))
            group_actions[self.slots[k].group].append(action)
        actions = [torch.cat(parts, dim=1) if len(parts) > 1 else parts[0] for parts in group_actions]
        return actions, self.agent_columns(log_probs)

    def evaluate(
        self,
        outputs: Sequence[PolicyOutput],
        actions: Sequence[torch.Tensor],
        masks: Sequence[torch.Tensor | None],
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Log-probs and entropies ``[B, N]`` of given actions, and every agent's encoder features ``[B, d_i]``.

        Args:
            outputs: from :meth:`forward`.
            actions: per group, ``[B, n_g, ...]``.
            masks: per group, ``[B, n_g, sum(nvec)]`` bool or ``None``.
        """
        log_probs, entropies = [], []
        features: list[torch.Tensor | None] = [None] * self.spec.num_agents
        for k, (network, out) in enumerate(zip(self.networks, outputs)):
            slot = self.slots[k]
            group_actions = actions[slot.group]
            if not slot.whole_group:
                _, j = self.spec.group_of(slot.agents[0])
                group_actions = group_actions[:, j : j + 1]
            dist = network.distribution(out.head, self.network_masks(k, masks))
            log_probs.append(dist.log_prob(group_actions))
            entropies.append(dist.entropy())
            for j, agent in enumerate(slot.agents):
                features[agent] = out.features[:, j]
        return self.agent_columns(log_probs), self.agent_columns(entropies), features  # type: ignore[return-value]

    # ------------------------------------------------------------------ acting on env states
    def act(
        self, obs: JointObs, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> list[np.ndarray]:
        """Actions for a :class:`~marljoint.env.JointObs`, respecting masks.

        A recurrent policy remembers between calls: a :class:`~marljoint.env.JointObs` (what ``env.reset()``
        returns) starts every agent afresh, and the :class:`~marljoint.env.JointStep` that ``env.step()`` returned
        continues each agent's state, reset where its copy's episode restarted or the agent appeared, and kept while
        it is absent or waits for its turn.

        Returns:
            Per group, ``[E, n_g, *action_shape]`` actions ready for ``env.step`` (Box actions clipped).
        """
        group_obs = [torch.as_tensor(o, device=self.device) for o in obs.obs]
        masks = [None if m is None else torch.as_tensor(m, device=self.device) for m in obs.action_masks]
        alive = torch.as_tensor(obs.alive, device=self.device)
        states = self._acting_states(obs)
        with torch.no_grad():
            outputs = self.forward(group_obs, alive, states)
            actions, _ = self.sample(outputs, masks, deterministic, generator)
        if states is not None:
            advance = alive & torch.as_tensor(obs.acting, device=self.device)
            self._acting = (self.advance_states(states, outputs, advance), np.array(obs.alive, dtype=bool))
        return self.env_actions(actions)

    def predict_values(self, obs: JointObs) -> torch.Tensor:
        """``[E, N]`` value estimates (return units) for a :class:`~marljoint.env.JointObs`; entries of absent
        agents are meaningless. A recurrent policy reads the states :meth:`act` would act from (without
        advancing them)."""
        group_obs = [torch.as_tensor(o, device=self.device) for o in obs.obs]
        alive = torch.as_tensor(obs.alive, device=self.device)
        with torch.no_grad():
            return self.values(self.forward(group_obs, alive, self._acting_states(obs)))

    def _acting_states(self, obs: JointObs) -> tuple[torch.Tensor, ...] | None:
        """The states :meth:`act` acts from on ``obs`` (``None`` for a feed-forward policy)."""
        if not self.recurrent:
            return None
        copies = len(obs.alive)
        remembered = self._acting
        if not isinstance(obs, JointStep) or remembered is None or len(remembered[1]) != copies:
            return self.initial_states(copies)
        hidden, alive_before = remembered
        return self.reset_states(hidden, torch.from_numpy(obs.alive & (obs.reset_envs[:, None] | ~alive_before)))

    def env_actions(self, actions: Sequence[torch.Tensor]) -> list[np.ndarray]:
        """Per-group action tensors as the env takes them: numpy, Box actions clipped to their bounds."""
        return self.clip_actions([action.cpu().numpy() for action in actions])

    def clip_actions(self, actions: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per-group numpy actions with Box actions clipped to their bounds (a new array); others unchanged."""
        return [
            np.clip(arr, group.action.low, group.action.high) if group.action.kind == "box" else arr
            for group, arr in zip(self.spec.groups, actions)
        ]

    def network_of(self, agent: int | str) -> tuple[ActorCritic, int]:
        """``(network, position)``: the network serving ``agent`` and the agent's position among its inputs.

        Raises:
            ValueError: for an unknown agent.
        """
        if isinstance(agent, str):
            if agent not in self.spec.agents:
                raise ValueError(f"unknown agent {agent!r}; agents are {list(self.spec.agents)}")
            index = self.spec.agents.index(agent)
        else:
            index = int(agent)
        for network, slot in zip(self.networks, self.slots):
            if index in slot.agents:
                return network, slot.agents.index(index)
        raise ValueError(f"unknown agent {agent!r}; agents are {list(self.spec.agents)}")

    @torch.no_grad()
    def update_observation_statistics(
        self, group_obs: Sequence[torch.Tensor], alive: torch.Tensor, active: torch.Tensor | None = None
    ) -> None:
        """Merges a batch of observations into every network's running observation statistics (networks built
        without ``normalize_observations`` ignore it).

        Args:
            group_obs: per group, ``[B, n_g, *obs_shape]``.
            alive: ``[B, N]`` bool; only present agents' observations count.
            active: ``[N]`` bool; frozen agents' (False) statistics stay as they are. ``None``: every agent.
        """
        counts = alive.bool()
        if active is not None:
            counts = counts & active.to(device=counts.device, dtype=torch.bool)
        critic_state = self.critic_state(group_obs, alive)
        for k, network in enumerate(self.networks):
            obs = self.network_obs(k, group_obs)
            weights = counts[:, list(self.slots[k].agents)]
            critic_obs = None if critic_state is None else critic_state.unsqueeze(1).expand(-1, obs.shape[1], -1)
            network.update_observation_statistics(obs, weights, critic_obs)

    # ------------------------------------------------------------------ weights
    def weights(self) -> dict[str, Any]:
        """Every network's weights and the value normaliser's statistics, as numpy copies (see
        :meth:`load_weights`).

        The tensors travel as numpy arrays: a pipe pickles a torch tensor by moving its storage into a new
        shared-memory segment (milliseconds per iteration for a few small networks), plain pickling goes through
        ``torch.save`` per storage, and numpy arrays are pickled as their bytes. A dtype numpy lacks (bfloat16, a
        lazily conjugated complex tensor) stays a tensor.
        """
        normalizer = self.value_normalizer
        return {
            "policies": [_as_numpy(network.state_dict()) for network in self.networks],
            "value_normalizer": None if normalizer is None else _as_numpy(normalizer.state_dict()),
        }

    def load_weights(self, weights: dict[str, Any]) -> None:
        """Loads :meth:`weights` output (copies: read-only arrays, e.g. from Ray's object store, load too)."""
        for network, state in zip(self.networks, weights["policies"]):
            network.load_state_dict(_as_torch(state))
        if self.value_normalizer is not None:
            self.value_normalizer.load_state_dict(_as_torch(weights["value_normalizer"]))

    def copy_to(self, device: torch.device | str) -> JointPolicy:
        """An independent copy of this policy on ``device`` (the same slots and settings, its own networks and
        value statistics), holding this policy's current weights; :meth:`copy_weights_from` refreshes it.

        Example:
            >>> from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
            >>> from marljoint_envs import mock_v0
            >>> env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
            >>> policy = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2)).joint_policy
            >>> policy.copy_to("cpu").networks[0] is policy.networks[0]
            False
        """
        where = torch.device(device)
        # Allocated on the target first and then filled: reading a device's tensors out goes through one copy.
        networks = [copy.deepcopy(network).to_empty(device=where) for network in self.networks]
        normalizer = None
        if self.value_normalizer is not None:
            normalizer = RunningNormalizer(self.spec.num_agents, self.value_normalizer.min_var, device=where)
        twin = JointPolicy(self.spec, networks, self.slots, self.centralized, normalizer, device=where)
        twin.copy_weights_from(self)
        return twin

    def copy_weights_from(self, source: JointPolicy) -> None:
        """Loads ``source``'s current weights and value statistics into this policy (a :meth:`copy_to` of it), one
        tensor copy each, across devices."""
        with torch.no_grad():
            for network, origin in zip(self.networks, source.networks):
                # Buffers kept out of the state dict (the agent one-hot codes) are copied too.
                mine = itertools.chain(network.parameters(), network.buffers())
                for tensor, value in zip(mine, itertools.chain(origin.parameters(), origin.buffers()), strict=True):
                    tensor.copy_(value)
        if self.value_normalizer is not None and source.value_normalizer is not None:
            self.value_normalizer.load_state_dict(source.value_normalizer.state_dict())

    def train(self, mode: bool = True) -> None:
        """Sets every network's training mode."""
        for network in self.networks:
            network.train(mode)


def _as_numpy(state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Numpy copies of a state dict's tensors; one numpy cannot hold (bfloat16, or a lazily conjugated complex
    tensor) stays a tensor."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        value = value.detach().cpu()
        try:
            out[key] = value.numpy().copy()
        except (TypeError, RuntimeError):
            out[key] = value.clone()
    return out


def _as_torch(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`_as_numpy` (copies)."""
    return {k: v if isinstance(v, torch.Tensor) else torch.tensor(v) for k, v in state.items()}
