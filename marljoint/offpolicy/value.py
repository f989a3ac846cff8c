"""VDN and QMIX: per-agent Q networks on the policies' encoders, a mixer, and the double-Q TD loss."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from marljoint.auxiliary import AuxFn, AuxOutput
from marljoint.env.base import JointObs
from marljoint.env.spaces import JointSpec
from marljoint.offpolicy.config import OffPolicyConfig
from marljoint.offpolicy.exploration import explore, linear_schedule
from marljoint.offpolicy.functional import (
    decode_actions,
    double_q_values,
    joint_action_mask,
    td_targets,
    team_rewards,
)
from marljoint.offpolicy.mixers import QmixMixer, VdnMixer
from marljoint.offpolicy.replay import JointTransitions
from marljoint.offpolicy.reward_scale import RewardScale
from marljoint.offpolicy.sharded import BatchShare
from marljoint.offpolicy.targets import TargetNetworks
from marljoint.policies.layers import StackedLinear, StackedMLP

__all__ = ["MAX_JOINT_ACTIONS", "GroupQNetwork", "ValueDecomposition", "check_categorical", "flat_obs", "num_actions"]

MAX_JOINT_ACTIONS = 4096
"""The most combinations a MultiDiscrete agent may have: its utility has one output per combination."""


def num_actions(nvec: Sequence[int]) -> int:
    """Outputs of a utility over the product of the heads' choices."""
    return int(np.prod(nvec))


def check_categorical(spec: JointSpec, algorithm: str) -> None:
    """Refuses agents whose actions a value method cannot enumerate: Box actions, and MultiDiscrete spaces of more
    than :data:`MAX_JOINT_ACTIONS` combinations (the maximum is over every combination).

    Raises:
        ValueError: naming the agent, its action space and the fix.
    """
    for agent, layout in zip(spec.agents, spec.actions):
        if layout.kind == "box":
            raise ValueError(
                f"{algorithm} needs Discrete or MultiDiscrete actions, but agent {agent!r} acts in a Box space; "
                "train it with --algorithm mappo or ippo"
            )
        if num_actions(layout.nvec) > MAX_JOINT_ACTIONS:
            raise ValueError(
                f"{algorithm} enumerates every action combination, but agent {agent!r} has "
                f"{num_actions(layout.nvec)} (MultiDiscrete {list(layout.nvec)}, at most {MAX_JOINT_ACTIONS}); "
                "train it with --algorithm mappo or ippo"
            )


def flat_obs(obs: np.ndarray | torch.Tensor) -> torch.Tensor:
    """One group's observations ``[E, n_g, *shape]`` as float32 ``[E, n_g, F]`` (byte images scaled to [0, 1])."""
    x = torch.as_tensor(obs)
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    return flat.float() / 255.0 if flat.dtype == torch.uint8 else flat.float()


def _gathered(
    share: BatchShare, features: Sequence[torch.Tensor], alive: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every rank's rows of the agents' features (``[B_r, d_i]`` each) and of ``alive`` ``[B_r, N]``, in global batch
    order, in one gather (this rank's rows keep their gradient)."""
    widths = [f.shape[-1] for f in features]
    both = share.gathered(torch.cat([*features, alive.to(features[0].dtype)], -1))
    *gathered, present = both.split([*widths, alive.shape[-1]], -1)
    return list(gathered), present > 0.5


class GroupQNetwork(nn.Module):
    """The utilities ``Q_i(o_i, ·)`` of one agent group: the policies' stacked MLP encoder and a linear head.

    Args:
        agents: n_g, the group's agents.
        obs_size: F, the flattened observation size.
        actions: A, the group's number of actions.
        hidden_sizes: the encoder's widths.
        shared: one network for the group (the agent's one-hot id appended) or one per agent.
        generator: source of the initial weights.
    """

    def __init__(
        self,
        agents: int,
        obs_size: int,
        actions: int,
        hidden_sizes: Sequence[int],
        shared: bool,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.agents, self.shared = agents, shared
        members = 1 if shared else agents
        in_features = obs_size + (agents if shared else 0)
        self.encoder = StackedMLP(members, in_features, hidden_sizes, torch.relu, generator=generator)
        self.head = StackedLinear(members, hidden_sizes[-1], actions, gain=0.01, generator=generator)
        self.register_buffer("ids", torch.eye(agents), persistent=False)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Utilities and encoder features.

        Args:
            obs: ``[B, n_g, F]`` flattened observations.

        Returns:
            ``(q [B, n_g, A], features [B, n_g, d])``.
        """
        batch = obs.shape[0]
        if self.shared:
            x = torch.cat([obs, self.ids.expand(batch, -1, -1)], -1).reshape(batch * self.agents, 1, -1)
            features = self.encoder(x)
            return self.head(features).view(batch, self.agents, -1), features.view(batch, self.agents, -1)
        features = self.encoder(obs)
        return self.head(features), features


class ValueDecomposition:
    """VDN or QMIX as an :class:`~marljoint.offpolicy.OffPolicyAlgorithm`.

    The team value ``Q_tot(s, a) = mix(Q_1(o_1, a_1), ..., Q_N(o_N, a_N); s)`` is trained on the TD target
    ``r + γ · Q_tot'(s', a')`` where each ``a'_i`` is agent i's legal maximum (chosen by the online network with
    double Q) and ``Q_tot'`` uses the target networks. The state ``s`` is the agents' concatenated observations.

    Args:
        spec: the env's agents (Discrete actions only).
        config: the settings.
        generator: source of the initial weights.
    """

    def __init__(self, spec: JointSpec, config: OffPolicyConfig, generator: torch.Generator) -> None:
        check_categorical(spec, config.algorithm)
        self.spec, self.config = spec, config
        self.groups = [
            GroupQNetwork(
                g.size,
                g.observation.size,
                num_actions(g.action.nvec),
                config.hidden_sizes,
                config.share_parameters,
                generator,
            )
            for g in spec.groups
        ]
        self.columns = [list(g.agent_indices) for g in spec.groups]
        state_size = sum(g.size * g.observation.size for g in spec.groups)
        if config.algorithm == "qmix":
            self.mixer: nn.Module = QmixMixer(
                spec.num_agents, state_size, config.mixer_embed_dim, config.hypernet_hidden, generator=generator
            )
        else:
            self.mixer = VdnMixer()
        online: list[nn.Module] = [*self.groups, self.mixer]
        self.targets = TargetNetworks(online, config.target_update, config.tau, config.target_update_interval)
        self.reward_scale = RewardScale(config.reward_scale)

    @property
    def networks(self) -> list[nn.Module]:
        """The trained networks, each clipped and stepped by its own optimiser (VDN's mixer has no parameters)."""
        return [m for m in [*self.groups, self.mixer] if any(True for _ in m.parameters())]

    def exploration_value(self, env_steps: int) -> float:
        """ε (or the temperature) after ``env_steps`` env steps."""
        c = self.config
        return linear_schedule(c.exploration_start, c.exploration_end, c.exploration_steps, env_steps)

    @torch.no_grad()
    def act(
        self, obs: JointObs, env_steps: int, generators: Sequence[torch.Generator], greedy: bool = False
    ) -> list[np.ndarray]:
        """Actions of every agent group: exploring by the schedule, or greedy.

        Args:
            obs: the agents' observations and action masks (batched over E copies).
            env_steps: env steps so far (the exploration schedule's clock).
            generators: one noise generator per env copy.
            greedy: take each agent's legal maximum.

        Returns:
            Per group, ``[E, n_g]`` (Discrete) or ``[E, n_g, K]`` (MultiDiscrete) int64 actions for ``env.step``.
        """
        mode = "greedy" if greedy else self.config.exploration
        value = self.exploration_value(env_steps)
        actions = []
        for g, (network, group) in enumerate(zip(self.groups, self.spec.groups)):
            q, _ = network(flat_obs(obs.obs[g]))
            mask = obs.action_masks[g]
            legal = None if mask is None else joint_action_mask(torch.as_tensor(mask), group.action.nvec)
            chosen = explore(q, legal, mode, value, generators)
            if group.action.kind == "multidiscrete":
                chosen = decode_actions(chosen, group.action.nvec)
            actions.append(chosen.numpy())
        return actions

    def _scatter(self, per_group: Sequence[torch.Tensor], batch: int) -> torch.Tensor:
        out = torch.zeros(batch, self.spec.num_agents)
        for columns, values in zip(self.columns, per_group):
            out[:, columns] = values
        return out

    def loss(
        self, batch: JointTransitions, aux_fn: AuxFn | None = None, share: BatchShare | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The joint loss: the TD loss of the team value, plus ``aux_fn`` on every agent's encoder features.

        Args:
            batch: ``B`` sampled joint transitions.
            aux_fn: a cross-agent auxiliary loss (e.g. :class:`~marljoint.redundancy.RedundancyPenalty`).
            share: on data-parallel ranks, how this batch sits in the global batch
                (:class:`~marljoint.offpolicy.sharded.BatchShare`): the means are the global batch's (the ranks'
                losses sum to the one-process loss) and ``aux_fn`` sees every rank's rows; ``None``: one process.

        Returns:
            ``(joint scalar loss, stats)`` with stats ``td_loss``, ``q_taken``, ``td_target``, ``reward_scale``
            (the factor on the team reward), ``aux_loss``,
            ``total_loss`` and, with ``aux_fn``, ``aux_metrics`` (the aux function's metrics, by their names).
        """
        rows = batch.actions.shape[0]
        chosen, features = [], []
        for g, network in enumerate(self.groups):
            q, feats = network(batch.obs[g])
            taken = batch.actions[:, self.columns[g]].clamp(min=0, max=q.shape[-1] - 1)
            chosen.append(q.gather(-1, taken.unsqueeze(-1)).squeeze(-1))
            features += [feats[:, j] for j in range(feats.shape[1])]
        state = torch.cat([o.reshape(rows, -1) for o in batch.obs], -1)
        q_tot = self.mixer(self._scatter(chosen, rows), batch.deciding, state)
        targets = self.targets_of(batch)
        mean = torch.mean if share is None else share.mean
        td_loss = mean((q_tot - targets).pow(2))
        stats: dict[str, Any] = {
            "td_loss": float(td_loss.detach()),
            "q_taken": float(mean(q_tot.detach())),
            "td_target": float(mean(targets)),
            "reward_scale": self.reward_scale.factor,
            "aux_loss": 0.0,
        }
        total = td_loss
        if aux_fn is not None:
            order = [a for columns in self.columns for a in columns]
            by_agent = [features[order.index(i)] for i in range(self.spec.num_agents)]
            alive = batch.alive
            if share is not None:  # every row's features and presence, this rank's rows keeping their gradient
                by_agent, alive = _gathered(share, by_agent, alive)
            aux = aux_fn(by_agent, alive)
            aux_loss, metrics = (aux.loss, dict(aux.metrics)) if isinstance(aux, AuxOutput) else (aux, {})
            total = total + aux_loss
            stats.update(aux_metrics=metrics, aux_loss=float(aux_loss.detach()))
        stats["total_loss"] = float(total.detach())
        return total, stats

    @torch.no_grad()
    def targets_of(self, batch: JointTransitions) -> torch.Tensor:
        """The TD targets ``[B]`` of a batch (target networks, double Q, masked maxima; no gradient)."""
        rows = batch.actions.shape[0]
        target_groups, target_mixer = self.targets.targets[:-1], self.targets.targets[-1]
        next_values = []
        for g, (network, target) in enumerate(zip(self.groups, target_groups)):
            online_next = network(batch.next_obs[g])[0] if self.config.double_q else None
            target_next = target(batch.next_obs[g])[0]
            chooser = target_next if online_next is None else online_next
            next_values.append(double_q_values(chooser, target_next, batch.next_masks[g], True))
        next_state = torch.cat([o.reshape(rows, -1) for o in batch.next_obs], -1)
        next_tot = target_mixer(self._scatter(next_values, rows), batch.next_deciding, next_state)
        rewards = team_rewards(batch.rewards, batch.alive, self.config.team_reward) * self.reward_scale.factor
        return td_targets(rewards, batch.next_present.any(-1), next_tot, self.config.gamma)

    def observe(self, stored: JointTransitions) -> None:
        """Counts just-stored transitions' team rewards in the ``"auto"`` reward scale's statistics (only their
        ``rewards`` and ``alive`` are read: on data-parallel ranks, those of every rank's new transitions)."""
        self.reward_scale.observe(team_rewards(stored.rewards, stored.alive, self.config.team_reward))

    def update_targets(self) -> None:
        """Moves the target networks after a gradient step (Polyak or periodic)."""
        self.targets.update()

    def state_dict(self) -> dict[str, Any]:
        """The online and target weights, and the reward scale's statistics."""
        return {
            "groups": [n.state_dict() for n in self.groups],
            "mixer": self.mixer.state_dict(),
            "targets": self.targets.state_dict(),
            "reward_scale": self.reward_scale.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output.

        Raises:
            ValueError: if the checkpoint holds another number of agent groups.
        """
        if len(state["groups"]) != len(self.groups):
            raise ValueError(
                f"checkpoint holds {len(state['groups'])} Q networks, this env has {len(self.groups)} agent groups"
            )
        for network, saved in zip(self.groups, state["groups"]):
            network.load_state_dict(saved)
        self.mixer.load_state_dict(state["mixer"])
        self.targets.load_state_dict(state["targets"])
        self.reward_scale.load_state_dict(state["reward_scale"])
