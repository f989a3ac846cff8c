"""MASAC and MADDPG as algorithms of the off-policy trainer: :class:`CentralisedActorCritic` adapts
:class:`~marljoint.offpolicy.sac.SacAlgorithm` (tensors of one batch layout) to the env adapter's observations and
the replay buffer's :class:`~marljoint.offpolicy.JointTransitions`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
import torch
from torch import nn

from marljoint.auxiliary import AuxFn
from marljoint.env.base import JointObs
from marljoint.env.spaces import JointSpec
from marljoint.offpolicy.config import OffPolicyConfig
from marljoint.offpolicy.replay import JointTransitions
from marljoint.offpolicy.sac import SacAlgorithm
from marljoint.offpolicy.sac_networks import member_parameter_sets
from marljoint.offpolicy.sharded import BatchShare
from marljoint.offpolicy.value import flat_obs
from marljoint.policies.optim import clip_member_grads_

__all__ = ["ACTOR_CRITIC_ALGORITHMS", "CentralisedActorCritic"]

ACTOR_CRITIC_ALGORITHMS = ("masac", "maddpg")
"""The centralised-critic actor-critics the off-policy trainer runs (``SacConfig.variant``)."""


def _action_space(spec: JointSpec, algorithm: str) -> gymnasium.spaces.Space:
    """Every agent's one action space (Discrete, or a one-dimensional Box).

    Raises:
        ValueError: for MultiDiscrete actions, or agents whose action spaces differ.
    """
    first = spec.actions[0]
    for agent, layout in zip(spec.agents, spec.actions):
        if layout.kind == "multidiscrete":
            raise ValueError(
                f"{algorithm} needs Discrete or Box actions, but agent {agent!r} acts in a MultiDiscrete space; "
                "train it with --algorithm mappo, ippo, vdn or qmix"
            )
        if layout != first or not np.array_equal(layout.low, first.low) or not np.array_equal(layout.high, first.high):
            raise ValueError(
                f"{algorithm} trains agents of one action space, but agent {agent!r}'s differs from "
                f"{spec.agents[0]!r}'s; train it with --algorithm mappo or ippo"
            )
    if first.kind == "discrete":
        return gymnasium.spaces.Discrete(first.nvec[0])
    return gymnasium.spaces.Box(np.asarray(first.low, np.float32), np.asarray(first.high, np.float32))


class CentralisedActorCritic:
    """MASAC or MADDPG (:class:`~marljoint.offpolicy.sac.SacAlgorithm`) as an
    :class:`~marljoint.offpolicy.OffPolicyAlgorithm`.

    Each agent's actor reads its own flat observation, unpadded: agents of one observation width (every agent of
    an agent group, and groups of equal widths together) share one stacked actor of that width
    (:class:`~marljoint.offpolicy.sac_networks.OffPolicyActor`, or one per width,
    :class:`~marljoint.offpolicy.sac_networks.GroupedActor`). The critics' global state is every agent's own flat
    observation concatenated in agent order (``state_dim`` = the sum of the widths); each agent's critic reads it
    with the joint action. An agent's rows enter the losses where it decided (present, and in a turn-based
    game on its turn), and each of its transitions runs from one of its decisions to the next
    (:attr:`credits_own_moves`: the trainer builds them from each rollout by
    :func:`~marljoint.offpolicy.transitions.rollout_moves`): its reward is everything it received in between,
    and it bootstraps from the state of its next decision, with the actions of the agents deciding there, unless
    its episode terminated first. Each env copy's exploration noise comes from its own generator.

    Discrete agents honour their action masks: they act among their legal actions (sampled or greedy), the actor
    loss and MASAC's entropy read the legal actions they chose from (:attr:`JointTransitions.masks`), and the
    critics' targets sample the next actions among the legal actions of the next decision (``next_masks``). A
    mask row that allows nothing counts every action legal
    (:func:`~marljoint.policies.distributions.legal_actions`), as in PPO's distributions.

    Args:
        spec: the env's agents and layouts.
        config: the off-policy settings (``algorithm`` masac or maddpg; its ``sac`` settings).
        seed: seeds the initial weights and the loss's sampling noise.

    Raises:
        ValueError: for action spaces SAC cannot train, or invalid settings.
    """

    credits_own_moves = True
    """Per-agent critics: each stored transition is an agent's move from one of its decisions to the next."""

    def __init__(self, spec: JointSpec, config: OffPolicyConfig, seed: int) -> None:
        self.spec, self.config = spec, config
        if config.sac is None:
            raise ValueError(f"algorithm={config.algorithm!r} is no actor-critic; use masac or maddpg")
        self.sac_config = config.sac
        self.obs_dims = tuple(layout.size for layout in spec.observations)
        """Each agent's flat observation width, in agent order."""
        self.state_dim = sum(self.obs_dims)
        """The critics' global state width: every agent's observation, concatenated."""
        starts = np.cumsum((0, *self.obs_dims))
        self._columns = [
            torch.tensor([k for i in group.agent_indices for k in range(starts[i], starts[i + 1])])
            for group in spec.groups
        ]
        space = _action_space(spec, config.algorithm)
        self.discrete = isinstance(space, gymnasium.spaces.Discrete)
        self.sac = SacAlgorithm(
            self.sac_config,
            num_agents=spec.num_agents,
            obs_dim=self.obs_dims,
            state_dim=self.state_dim,
            action_space=space,
            seed=seed,
        )

    @property
    def networks(self) -> list[nn.Module]:
        """Actor, critic and (masac with a learned temperature) temperature: one optimiser and clip each."""
        return [net for _, net in self.sac.networks()]

    @property
    def learning_rates(self) -> list[float]:
        """The learning rate of each of :attr:`networks`."""
        return list(self.sac.learning_rates().values())

    def clip_grads(self, network: nn.Module, max_norm: float) -> float:
        """Clips each agent's gradient in ``network`` to ``max_norm`` on its own (its parameters have the agent
        axis first; an actor of several observation widths has one such set per width); the largest agent's norm
        before clipping (0 where the network got no gradient)."""
        sets = [params for params in member_parameter_sets(network) if any(p.grad is not None for p in params)]
        if not sets:
            return 0.0
        return max(float(clip_member_grads_(params, max_norm).max()) for params in sets)

    def _joint_obs(self, per_group: Sequence[Any]) -> torch.Tensor:
        """Per group ``[B, n_g, ...]`` → ``[B, ΣF]`` float32: every agent's own flat observation, concatenated in
        agent order (no padding)."""
        rows = per_group[0].shape[0]
        out = torch.empty(rows, self.state_dim)
        for columns, obs in zip(self._columns, per_group):
            out[:, columns] = flat_obs(obs).reshape(rows, -1)
        return out

    @torch.no_grad()
    def act(
        self, obs: JointObs, env_steps: int, generators: Sequence[torch.Generator], greedy: bool = False
    ) -> list[np.ndarray]:
        """Per group ``[E, n_g]`` int64 (Discrete) or ``[E, n_g, D]`` float32 (Box) actions: sampled, copy e's noise
        from ``generators[e]``, or greedy (the mean action, the most likely legal one); Discrete agents choose among
        the legal actions of ``obs.action_masks``."""
        x = self._joint_obs(obs.obs)
        has_masks = self.discrete and any(mask is not None for mask in obs.action_masks)
        masks = self._agents_masks(obs.action_masks, x.shape[0]) if has_masks else None
        if greedy:
            chosen = self.sac.act(x, masks, explore=False)
        else:
            copy_masks = [None] * x.shape[0] if masks is None else masks.split(1)
            rows = [
                self.sac.act(x[e : e + 1], copy_masks[e], explore=True, generator=generators[e])
                for e in range(x.shape[0])
            ]
            chosen = torch.cat(rows)
        dtype = np.int64 if self.discrete else np.float32
        return [chosen[:, list(group.agent_indices)].numpy().astype(dtype) for group in self.spec.groups]

    def batch(self, transitions: JointTransitions) -> dict[str, torch.Tensor]:
        """The :mod:`~marljoint.offpolicy.sac` batch layout of sampled transitions."""
        obs, next_obs = self._joint_obs(transitions.obs), self._joint_obs(transitions.next_obs)
        rows = obs.shape[0]
        out = {
            "obs": obs,
            "state": obs,
            "actions": transitions.actions,
            "rewards": transitions.rewards.float(),
            "next_obs": next_obs,
            "next_state": next_obs,
            "terminated": transitions.terminated,
            "truncated": transitions.truncated,
            "alive": transitions.deciding,
            "next_alive": transitions.next_present,
            "next_acting": transitions.next_deciding,
        }
        if self.discrete:
            out["next_masks"] = self._agents_masks(transitions.next_masks, rows)
            if transitions.masks:
                out["masks"] = self._agents_masks(transitions.masks, rows)
        return out

    def _agents_masks(self, per_group: Sequence[Any], rows: int) -> torch.Tensor:
        """Per group ``[B, n_g, A]`` bool (or ``None``: all legal) → ``[B, N, A]`` bool in agent order."""
        out = torch.ones(rows, self.spec.num_agents, self.sac.spaces.action_size, dtype=torch.bool)
        for group, mask in zip(self.spec.groups, per_group):
            if mask is not None:
                out[:, list(group.agent_indices)] = torch.as_tensor(mask, dtype=torch.bool)
        return out

    def loss(
        self, batch: JointTransitions, aux_fn: AuxFn | None = None, share: BatchShare | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The joint loss (critics, actors, temperatures, ``aux_fn`` on the actors' encoder features) of a batch;
        the auxiliary metrics under ``aux_metrics``. ``share``: this rank's rows of a global batch (data-parallel
        ranks; the rows where an agent decided are its ``counts``), or ``None``."""
        total, stats = self.sac.loss(self.batch(batch), aux_fn, share)
        known = {"critic_loss", "actor_loss", "alpha_loss", "aux_loss", "total_loss", "actor_updated"}
        own = {k: v for k, v in stats.items() if k in known or k.split("/")[0] in ("q", "alpha", "entropy")}
        own["aux_metrics"] = {k: v for k, v in stats.items() if k not in own}
        return total, own

    def update_targets(self) -> None:
        """Polyak update of the target critics (and MADDPG's target actors)."""
        self.sac.update_targets()

    def state_dict(self) -> dict[str, Any]:
        """Online and target weights, temperatures, the loss's noise generator and its call count."""
        return {"sac": self.sac.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output."""
        self.sac.load_state_dict(state["sac"])
