"""The joint policy: the networks of every agent group, evaluated, sampled and exchanged together."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from marljoint.env.base import JointObs
from marljoint.env.spaces import JointSpec
from marljoint.policies.actor_critic import ActorCritic, PolicyOutput
from marljoint.policies.distributions import BehaviourPolicy, FactoredCategorical
from marljoint.policies.joint_states import GroupStates
from marljoint.policies.noise import SamplingNoise, check_sampling_noise
from marljoint.policies.normalizer import RunningNormalizer

__all__ = ["JointPolicy", "NetworkSlot", "NoActingPolicy"]


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


class NoActingPolicy(ValueError):
    """Raised by a trainer's ``acting_policy()`` when it acts with something other than a :class:`JointPolicy`
    (Q networks, actors of its own): the message says what it acts with instead."""


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
        self.group_states = GroupStates(spec, self.networks, [slot.group for slot in self.slots])
        """The groups' recurrent states: their sizes, start, reset and advance, and what :meth:`act` remembers."""
        # Columns of the concatenated network outputs, mapped back to possible_agents order.
        self._to_agent_order = torch.as_tensor(np.argsort(order), dtype=torch.long, device=self.device)
        self._in_agent_order = bool(np.array_equal(order, np.arange(len(order))))

    @property
    def recurrent(self) -> bool:
        """Whether some network has a recurrent core (then every forward takes the agents' states)."""
        return self.group_states.recurrent

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

    def network_state(self, k: int, states: Sequence[torch.Tensor] | None) -> torch.Tensor | None:
        """Network ``k``'s states ``[B, n_k, S]`` from the per-group states (``None`` for a feed-forward one)."""
        if states is None or not self.group_states.network_recurrent[k]:
            return None
        return self.network_obs(k, states)

    def critic_state(self, group_obs: Sequence[torch.Tensor], alive: torch.Tensor) -> torch.Tensor | None:
        """``[B, S]`` joint state of a centralised critic: every agent's flat observation and the alive mask
        (``None`` without one)."""
        if not self.centralized:
            return None
        batch = alive.shape[0]
        parts = [o.reshape(batch, -1).float() for o in group_obs]
        parts.append(alive.float())
        return torch.cat(parts, dim=1)

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
        outputs = []
        for k, network, obs, critic_obs in self.network_inputs(group_obs, alive):
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
        outputs = []
        for k, network, obs, critic_obs in self.network_inputs(flat_obs, alive.reshape(rows, -1)):
            starts_k, advance_k = (flags[:, :, list(self.slots[k].agents)] for flags in (starts, advance))
            obs, critic_obs = (x if x is None else x.reshape(length, batch, *x.shape[1:]) for x in (obs, critic_obs))
            out = network.forward_sequence(
                obs, self.network_state(k, states), starts_k, advance_k, critic_obs, replay=replay
            )
            outputs.append(PolicyOutput(*(x.reshape(rows, *x.shape[2:]) for x in out[:3]), state=out.state))
        return outputs

    def network_inputs(
        self, group_obs: Sequence[torch.Tensor], alive: torch.Tensor
    ) -> Iterator[tuple[int, ActorCritic, torch.Tensor, torch.Tensor | None]]:
        """Per network ``k``, what it reads of a batch: ``(k, network, obs [B, n_k, ...], critic_obs)``, the
        critic's input ``[B, n_k, S]`` being the joint state of a centralised critic (``None`` without one)."""
        critic_state = self.critic_state(group_obs, alive)
        for k, network in enumerate(self.networks):
            obs = self.network_obs(k, group_obs)
            critic_obs = None if critic_state is None else critic_state.unsqueeze(1).expand(-1, obs.shape[1], -1)
            yield k, network, obs, critic_obs

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
        noise: SamplingNoise | None = None,
        behaviour: BehaviourPolicy | None = None,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Actions of every agent; returns per-group action tensors ``[B, n_g, ...]`` and ``[B, N]`` log-probs.

        With a ``behaviour`` (e.g. :class:`~marljoint.policies.UniformMixture`: ``(1 − ε)·π + ε·uniform`` over each
        categorical head's allowed choices) the actions are drawn from it and the log-probs are the behaviour's;
        ``deterministic=True`` takes π's mode whatever the behaviour.

        Args:
            outputs: from :meth:`forward`.
            masks: per group, ``[B, n_g, sum(nvec)]`` bool or ``None``.
            deterministic: take each distribution's mode.
            generator: the source of the noise otherwise.
            noise: a :class:`~marljoint.policies.noise.SamplingNoise` used instead of ``generator`` (e.g.
                :class:`~marljoint.collect.CopyNoise`: each batch row's noise from the generator of its env copy,
                so a copy's actions do not depend on which other copies share the batch).
            behaviour: the :class:`~marljoint.policies.BehaviourPolicy` to play instead of π (categorical actions
                only); ``None`` by default: sample π itself.

        Raises:
            ValueError: when sampling needs noise and neither ``generator`` nor ``noise`` is given, or a
                ``behaviour`` for a network with Box actions.
            TypeError: when ``noise`` is not a :class:`~marljoint.policies.noise.SamplingNoise`.
        """
        dists = [
            network.distribution(out.head, self.network_masks(k, masks))
            for k, (network, out) in enumerate(zip(self.networks, outputs))
        ]
        if behaviour is not None and not deterministic:
            dists = [_played_by(dist, behaviour) for dist in dists]
        if deterministic:
            actions = [dist.mode() for dist in dists]
        elif noise is not None:
            draws = check_sampling_noise(noise).draw(dists)
            # A collector's generators draw on the CPU.
            actions = [dist.sample_from_noise(x.to(self.device)) for dist, x in zip(dists, draws)]
        elif generator is not None:
            actions = [dist.sample(generator) for dist in dists]
        else:
            raise ValueError("sampling needs a generator or a noise source; pass one, or deterministic=True")
        group_actions: list[list[torch.Tensor]] = [[] for _ in self.spec.groups]
        for slot, action in zip(self.slots, actions):
            group_actions[slot.group].append(action)
        grouped = [torch.cat(parts, dim=1) if len(parts) > 1 else parts[0] for parts in group_actions]
        return grouped, self.agent_columns(dist.log_prob(action) for dist, action in zip(dists, actions))

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
        states = self.group_states.acting(obs, self.device)
        with torch.no_grad():
            outputs = self.forward(group_obs, alive, states)
            actions, _ = self.sample(outputs, masks, deterministic, generator)
        if states is not None:
            advance = alive & torch.as_tensor(obs.acting, device=self.device)
            self.group_states.remember(states, outputs, advance, obs.alive)
        return self.env_actions(actions)

    def predict_values(self, obs: JointObs) -> torch.Tensor:
        """``[E, N]`` value estimates (return units) for a :class:`~marljoint.env.JointObs`; entries of absent
        agents are meaningless. A recurrent policy reads the states :meth:`act` would act from (without
        advancing them)."""
        group_obs = [torch.as_tensor(o, device=self.device) for o in obs.obs]
        alive = torch.as_tensor(obs.alive, device=self.device)
        with torch.no_grad():
            return self.values(self.forward(group_obs, alive, self.group_states.acting(obs, self.device)))

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
        for k, network, obs, critic_obs in self.network_inputs(group_obs, alive):
            network.update_observation_statistics(obs, counts[:, list(self.slots[k].agents)], critic_obs)

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
        _transfer_weights(self, source, None)

    def move_weights_towards(self, source: JointPolicy, rate: float) -> None:
        """Moves every network parameter ``rate`` of the way to ``source``'s, in place: ``p ← (1 − rate)·p +
        rate·p_source`` (repeated, an exponential moving average); buffers (observation statistics, agent codes)
        and value statistics are copied as :meth:`copy_weights_from` copies them.

        Args:
            source: a policy of the same architecture.
            rate: in [0, 1]; 1 is :meth:`copy_weights_from`, 0 keeps the parameters.

        Raises:
            ValueError: ``rate`` outside [0, 1].
        """
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be a number in [0, 1], got {rate!r}; e.g. rate=0.05")
        _transfer_weights(self, source, float(rate))

    def train(self, mode: bool = True) -> None:
        """Sets every network's training mode."""
        for network in self.networks:
            network.train(mode)


def _transfer_weights(target: JointPolicy, source: JointPolicy, rate: float | None) -> None:
    """Copies ``source``'s parameters into ``target``'s (``rate=None``) or moves them ``rate`` of the way there;
    buffers, kept out of the state dict (the agent one-hot codes) or not, and value statistics are copied."""
    with torch.no_grad():
        for network, origin in zip(target.networks, source.networks):
            for tensor, value in zip(network.parameters(), origin.parameters(), strict=True):
                if rate is None:
                    tensor.copy_(value)
                else:
                    tensor.mul_(1.0 - rate).add_(value.to(tensor.device), alpha=rate)
            for tensor, value in zip(network.buffers(), origin.buffers(), strict=True):
                tensor.copy_(value)
    if target.value_normalizer is not None and source.value_normalizer is not None:
        target.value_normalizer.load_state_dict(source.value_normalizer.state_dict())


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


def _played_by(dist: Any, behaviour: BehaviourPolicy) -> Any:
    """What ``behaviour`` plays in place of ``dist`` (a categorical head); a Box action's distribution has no
    behaviour policy, and a trainer refuses ``uniform_mix`` for Box agents."""
    if not isinstance(dist, FactoredCategorical):
        raise ValueError(
            f"the behaviour policy {behaviour!r} plays categorical actions, but this network's actions are "
            f"{type(dist).__name__}; collect with behaviour=None (uniform_mix = 0) for Box actions"
        )
    return dist.under(behaviour)
