"""The actor-critic network of one agent group, evaluated for all of its agents in one batched forward."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies.distributions import Categorical, DiagGaussian, FactoredCategorical, make_distribution
from marljoint.policies.encoders import (
    TrunkBuilder,
    check_arguments,
    check_critic_per_frame,
    observation_normalizers,
    plain_settings,
    step_core,
    trunk_features,
)
from marljoint.policies.layers import Activation, StackedCNN, StackedLinear, StackedMLP, tanh
from marljoint.policies.member_axis import MemberAxis
from marljoint.policies.recurrent import StackedRecurrentCell

__all__ = ["ActorCritic", "PolicyOutput"]


class PolicyOutput(NamedTuple):
    """One forward pass of a group's actor-critic.

    Attributes:
        head: ``[B, n_g, L]`` action-head output (logits, or Gaussian means for a Box), ``L = logits_size``.
        values: ``[B, n_g]`` state-value estimates.
        features: ``[B, n_g, d]`` encoder features (the input of the action head).
        state: ``[B, n_g, S]`` the recurrent state after this step (``S = state_size``); ``None`` for a
            feed-forward network.
    """

    head: torch.Tensor
    values: torch.Tensor
    features: torch.Tensor
    state: torch.Tensor | None = None


class ActorCritic(nn.Module):
    """Actor-critic for the n_g agents of one group, with shared or independent parameters.

    With ``share_parameters=True`` one network (M = 1 member) serves every agent, and each agent's one-hot index
    within the group is appended to its observation (after the CNN for images) so that agents can still act
    differently. Otherwise each agent has its own network (M = n_g members), held as stacked weights. Both modes
    run as one batched computation over all agents; no Python loop over agents.

    Structure: the actor's encoder trunk (CNN + MLP for images, MLP otherwise) gives features ``[B, n_g, d]``; a
    linear action head (gain 0.01) gives logits or means. The critic is a network of its own by default: its own
    trunk of the same shape on the same observation (or, with ``critic_input_size``, a centralised critic MLP on a
    critic input), then a linear value head (gain 1). With ``share_trunk=True`` the value head reads the actor's
    trunk features instead (a local critic only): half the encoder cost, but the value loss then shapes the
    actor's features and its gradient is clipped together with the policy's. A Box action has a state-independent
    ``log_std`` ``[M, D]``. Every parameter's first axis is the member axis.

    Args:
        observation: the group's observation layout.
        action: the group's action layout.
        num_agents: number of agents n_g in the group.
        share_parameters: one network for all agents (True) or one per agent (False).
        hidden_sizes: hidden layer sizes of the encoder MLP (and of the critic MLP); ``d = hidden_sizes[-1]``.
        critic_input_size: size of a per-agent critic input for a centralised critic; ``None`` gives a local
            critic on the agent's own observation.
        share_trunk: a local critic reads the actor's trunk features (True) instead of having a trunk of its own
            (False, the default, as in CleanRL, SB3 and MAPPO). Ignored by a centralised critic, which always has
            its own MLP.
        critic_per_frame: a centralised critic shared by the agents (``share_parameters``, feed-forward) runs once
            per frame on the joint state (``critic_obs`` row 0), without agent ids, its value head giving one value
            per agent (``n_g`` outputs): ``n_g`` times less critic work.
        log_std_init: initial log standard deviation of a Box action.
        recurrent: ``"gru"`` or ``"lstm"`` gives the actor's trunk, and the critic's own trunk, a recurrent core
            after its MLP (:class:`~marljoint.policies.recurrent.StackedRecurrentCell`, one per member, all in one
            batched call); the features are then the core's output (``d = rnn_hidden_size``) and every method
            takes the agents' recurrent ``state`` (:meth:`initial_state`). ``None``: feed-forward.
        rnn_hidden_size: the recurrent core's hidden size.
        normalize_observations: standardise flat observations (and a centralised critic's input) by running
            per-feature statistics before the encoders (:attr:`obs_normalizer`, :attr:`critic_obs_normalizer`;
            updated by the learner with :meth:`update_observation_statistics`). Flat observations only.
        activation: activation of the MLPs.
        cnn_channels: output channels of each convolution (image observations).
        cnn_kernel_sizes: kernel size of each convolution (image observations).
        cnn_strides: stride of each convolution (image observations).
        cnn_features: CNN output size, the input of the encoder MLP (image observations).
        generator: source of the initial weights; ``None`` draws from torch's default generator.

    With none of the ``cnn_*`` settings given, images use the Nature CNN (channels 32-64-64, kernels 8-4-3, strides
    4-2-1, 512 features) when they are at least 36 × 36, the smallest size its kernels fit. Smaller images, such as
    board-game planes (connect four's 6 × 7 × 2), are flattened into the encoder MLP instead (``uint8`` images
    scaled to ``[0, 1]``), and :attr:`cnn` is ``None``. Give any ``cnn_*`` setting to get a CNN for them.

    Raises:
        TypeError: if the layouts are not :class:`ObservationLayout` / :class:`ActionLayout`.
        ValueError: for a non-positive ``num_agents``, empty or non-positive sizes, an image too small for the
            CNN settings given, ``normalize_observations`` with images, or ``critic_per_frame`` where none exists.

    Example:
        >>> import numpy as np, torch
        >>> from marljoint.env.spaces import ActionLayout, ObservationLayout
        >>> obs = ObservationLayout("flat", (18,), np.dtype(np.float32))
        >>> net = ActorCritic(
        ...     obs, ActionLayout("discrete", (5,), ()), num_agents=3, share_parameters=False,
        ...     generator=torch.Generator().manual_seed(0),
        ... )
        >>> out = net(torch.zeros(8, 3, 18))
        >>> out.head.shape, out.values.shape, out.features.shape
        (torch.Size([8, 3, 5]), torch.Size([8, 3]), torch.Size([8, 3, 64]))
        >>> net.distribution(out.head).sample(torch.Generator().manual_seed(0)).shape
        torch.Size([8, 3])
    """

    def __init__(
        self,
        observation: ObservationLayout,
        action: ActionLayout,
        num_agents: int,
        share_parameters: bool,
        hidden_sizes: Sequence[int] = (64, 64),
        critic_input_size: int | None = None,
        log_std_init: float = 0.0,
        *,
        share_trunk: bool = False,
        critic_per_frame: bool = False,
        recurrent: str | None = None,
        rnn_hidden_size: int = 64,
        normalize_observations: bool = False,
        activation: Activation = tanh,
        cnn_channels: Sequence[int] | None = None,
        cnn_kernel_sizes: Sequence[int] | None = None,
        cnn_strides: Sequence[int] | None = None,
        cnn_features: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        check_arguments(observation, action, num_agents, critic_input_size, recurrent)
        self.observation, self.action, self.num_agents = observation, action, num_agents
        self.share_parameters = bool(share_parameters)
        self.members = 1 if self.share_parameters else num_agents
        self.critic_input_size = critic_input_size
        self.share_trunk = bool(share_trunk) and critic_input_size is None
        self.critic_per_frame = check_critic_per_frame(critic_per_frame, critic_input_size, share_parameters, recurrent)
        self.recurrent = recurrent
        cnn_settings = (cnn_channels, cnn_kernel_sizes, cnn_strides, cnn_features)
        build = TrunkBuilder(
            observation, self.members, num_agents if self.share_parameters else 0, hidden_sizes, activation,
            recurrent, rnn_hidden_size, cnn_settings, generator,
        )  # fmt: skip
        # The order of construction below is the order of the weights' draws and of the checkpoint's parameters.
        self.cnn, self.encoder = build.trunk()
        self.core = build.core(self.encoder.out_features)
        self.feature_size = self.encoder.out_features if self.core is None else self.core.hidden_size
        self.actor_head = StackedLinear(self.members, self.feature_size, action.logits_size, 0.01, generator=generator)
        self.log_std: nn.Parameter | None = None
        if action.kind == "box":
            self.log_std = nn.Parameter(torch.full((self.members, action.logits_size), float(log_std_init)))
        self.critic_cnn, self.critic_encoder, self.critic_core, self.value_head = build.critic(
            critic_input_size, self.share_trunk, self.critic_per_frame, self.feature_size, num_agents
        )
        self.obs_normalizer, self.critic_obs_normalizer = observation_normalizers(
            normalize_observations, observation, self.members, critic_input_size
        )
        self.register_buffer("agent_ids", torch.eye(num_agents), persistent=False)
        self.axis = MemberAxis(
            observation, num_agents, share_parameters, critic_input_size, self.core, self.critic_core, critic_per_frame
        )
        """The shapes of the inputs and states, and the conversions between the agent and member axes."""
        self.settings = plain_settings(
            num_agents, self.share_parameters, hidden_sizes, critic_input_size, log_std_init, share_trunk, recurrent,
            rnn_hidden_size, normalize_observations, cnn_settings, self.critic_per_frame,
        )  # fmt: skip

    @property
    def state_size(self) -> int:
        """S, the numbers of one agent's recurrent state: the actor core's state, then the critic core's (0 for a
        feed-forward network)."""
        return self.axis.state_size

    @property
    def actor_state_size(self) -> int:
        """The numbers of one agent's actor-core state (the first part of :attr:`state_size`; 0 when
        feed-forward): all that acting needs, since the critic's core does not feed the actions."""
        return self.axis.actor_state_size

    def initial_state(self, batch: int) -> torch.Tensor:
        """The zero recurrent state of ``batch`` rows of every agent, ``[batch, n_g, S]`` (an episode's start)."""
        return torch.zeros(batch, self.num_agents, self.state_size, device=self.agent_ids.device)

    def member_of_agent(self, agent: int) -> int:
        """Index along the member axis of the parameters that act for agent ``agent`` of the group; IndexError
        for an ``agent`` outside ``0 .. n_g - 1``."""
        return self.axis.member_of_agent(agent)

    def forward(
        self, obs: torch.Tensor, critic_obs: torch.Tensor | None = None, state: torch.Tensor | None = None
    ) -> PolicyOutput:
        """Evaluates every agent of the group (one step of a recurrent network).

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations.
            critic_obs: ``[B, n_g, critic_input_size]`` critic inputs; required with a centralised critic and
                rejected without one.
            state: ``[B, n_g, S]`` recurrent states before this step; required by a recurrent network (zeros,
                :meth:`initial_state`, at an episode's start), rejected by a feed-forward one.

        Returns:
            A :class:`PolicyOutput` with head ``[B, n_g, L]``, values ``[B, n_g]``, features ``[B, n_g, d]`` and
            (recurrent) the state after the step ``[B, n_g, S]``.

        Raises:
            ValueError: if a tensor has the wrong shape, or ``critic_obs`` or ``state`` is missing or unexpected.
        """
        batch = self.axis.check_obs(obs)
        actor_state, critic_state = self.axis.split_state(state, batch)
        if self.core is not None and self.critic_core is not None:
            # Both cores step side by side, as the replay of the update steps them.
            hidden = self._critic_features(obs, critic_obs, batch)
            assert hidden is not None and actor_state is not None and critic_state is not None
            cores, inputs = [self.core, self.critic_core], [self._mlp(self.cnn, self.encoder, obs), hidden]
            stepped = StackedRecurrentCell.steps(cores, inputs, [actor_state, critic_state])
            (features, actor_state), (hidden, critic_state) = stepped
            values = self._value_head(hidden, batch)
        else:
            features, actor_state = self._trunk(obs, actor_state)
            values, critic_state = self._values(obs, critic_obs, batch, features, critic_state)
        head = self._head(features, batch)
        new_state = self.axis.join_state(actor_state, critic_state, batch)
        return PolicyOutput(head, values, self.axis.agent_major(features, batch), new_state)

    def forward_sequence(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        starts: torch.Tensor,
        advance: torch.Tensor | None = None,
        critic_obs: torch.Tensor | None = None,
        *,
        replay: str = "cells",
    ) -> PolicyOutput:
        """Replays a sequence chunk of a recurrent network from its initial state (truncated BPTT).

        The MLPs run on all ``L × B`` rows at once; the cores then step through the chunk, resetting the state
        where an episode starts and keeping it where an agent does not advance.

        Args:
            obs: ``[L, B, n_g, *obs_shape]`` the observations of L consecutive steps of B sequences.
            state: ``[B, n_g, S]`` the states before the first step.
            starts: ``[L, B, n_g]`` bool, True where an agent's episode starts (its state is reset before it).
            advance: ``[L, B, n_g]`` bool, False where an agent's state stays as it is (absent, or waiting for its
                turn); ``None``: every agent advances at every step.
            critic_obs: ``[L, B, n_g, critic_input_size]`` with a centralised critic.
            replay: how the cores replay the chunk: ``"cells"`` or ``"fused"``
                (:meth:`marljoint.policies.recurrent.StackedRecurrentCell.forward_sequence`).

        Returns:
            A :class:`PolicyOutput` with head ``[L, B, n_g, ·]``, values ``[L, B, n_g]``, features
            ``[L, B, n_g, d]`` and the state after the last step ``[B, n_g, S]``.

        Raises:
            ValueError: for a feed-forward network, shapes that disagree, or an unknown ``replay``.
        """
        length, batch = obs.shape[:2]
        flat_obs, flat_critic, starts_mm, advance_mm = self.axis.sequence_inputs(obs, critic_obs, starts, advance)
        actor_state, critic_state = self.axis.split_state(state, batch)
        rows = length * batch
        actor_in = self._mlp(self.cnn, self.encoder, flat_obs)
        hidden = self._critic_features(flat_obs, flat_critic, rows)
        cores, inputs, states = [self.core], [self.axis.time_major(actor_in, length)], [actor_state]
        if hidden is not None and self.critic_core is not None:
            cores.append(self.critic_core)
            inputs.append(self.axis.time_major(hidden, length))
            states.append(critic_state)
        replayed = StackedRecurrentCell.forward_sequences(cores, inputs, states, starts_mm, advance_mm, replay=replay)
        features, actor_state = self.axis.rows_of(replayed[0][0]), replayed[0][1]
        if len(replayed) > 1:
            hidden, critic_state = self.axis.rows_of(replayed[1][0]), replayed[1][1]
        head, values = self._head(features, rows), self._value_head(features if hidden is None else hidden, rows)
        shaped = (x.reshape(length, batch, *x.shape[1:]) for x in (head, values, self.axis.agent_major(features, rows)))
        return PolicyOutput(*shaped, state=self.axis.join_state(actor_state, critic_state, batch))

    def action_head(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """The action-head output alone, ``[B, n_g, L]`` (no critic is evaluated).

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations.
            state: ``[B, n_g, S]`` recurrent states (recurrent networks only).
        """
        batch = self.axis.check_obs(obs)
        features, _ = self._trunk(obs, self.axis.split_state(state, batch)[0])
        return self._head(features, batch)

    def actor_step(
        self, obs: torch.Tensor, actor_state: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The action head and the actor core's next state: one step of acting, without the critic.

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations.
            actor_state: ``[B, n_g, actor_state_size]`` the actor cores' states (recurrent networks only; the first
                :attr:`actor_state_size` numbers of a full state).

        Returns:
            ``(head [B, n_g, L], next actor state [B, n_g, actor_state_size] or None when feed-forward)``.

        Raises:
            ValueError: for a missing, unexpected or misshapen ``actor_state``.
        """
        batch = self.axis.check_obs(obs)
        member_state = self.axis.actor_member_state(actor_state, batch)
        features, new_state = step_core(self.core, self._mlp(self.cnn, self.encoder, obs), member_state)
        head = self._head(features, batch)
        return head, None if new_state is None else self.axis.agent_major(new_state, batch)

    def encoder_features(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """Trunk features of every agent, ``[B, n_g, d]`` (the input of the action head).

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations.
            state: ``[B, n_g, S]`` recurrent states (recurrent networks only).
        """
        batch = self.axis.check_obs(obs)
        features, _ = self._trunk(obs, self.axis.split_state(state, batch)[0])
        return self.axis.agent_major(features, batch)

    def value(
        self, obs: torch.Tensor, critic_obs: torch.Tensor | None = None, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """State values of every agent, ``[B, n_g]``.

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations (not read by a centralised critic).
            critic_obs: ``[B, n_g, critic_input_size]``; required with a centralised critic, rejected otherwise.
            state: ``[B, n_g, S]`` recurrent states (recurrent networks only).
        """
        batch = self.axis.check_obs(obs)
        actor_state, critic_state = self.axis.split_state(state, batch)
        features = self._trunk(obs, actor_state)[0] if self.share_trunk else None
        return self._values(obs, critic_obs, batch, features, critic_state)[0]

    def distribution(
        self, head: torch.Tensor, mask: torch.Tensor | None = None
    ) -> Categorical | FactoredCategorical | DiagGaussian:
        """The action distribution of every agent.

        Args:
            head: ``[B, n_g, L]`` head output from :meth:`forward`.
            mask: ``[B, n_g, sum(nvec)]`` bool action mask (True = allowed), categorical actions only.

        Returns:
            A distribution with batch shape ``[B, n_g]``.
        """
        return make_distribution(self.action, head, self.log_std, mask)

    def actor_parameters(self) -> list[nn.Parameter]:
        """Parameters of the policy: the encoder trunk, the action head and ``log_std``."""
        critic = {id(p) for p in self.critic_parameters()}
        return [p for p in self.parameters() if id(p) not in critic]

    def critic_parameters(self) -> list[nn.Parameter]:
        """Parameters of the value function: the critic's own trunk (local CNN + MLP, or centralised MLP, and its
        recurrent core) and the value head. With ``share_trunk=True`` only the value head: the shared trunk counts
        as the actor's."""
        parts = (self.critic_cnn, self.critic_encoder, self.critic_core, self.value_head)
        modules = [m for m in parts if m is not None]
        return [p for module in modules for p in module.parameters()]

    @torch.no_grad()
    def update_observation_statistics(
        self, obs: torch.Tensor, weights: torch.Tensor, critic_obs: torch.Tensor | None = None
    ) -> None:
        """Merges observations into the running statistics (nothing without ``normalize_observations``).

        A shared network (one member) merges every agent's rows into its one set of statistics; stacked per-agent
        weights keep one set per agent.

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations of the group's agents.
            weights: ``[B, n_g]`` bool, which of them count (alive agents that are trained).
            critic_obs: ``[B, n_g, critic_input_size]`` centralised critic inputs (required with one).
        """
        if self.obs_normalizer is None:
            return
        self.axis.check_obs(obs)
        counted = self.axis.member_columns(weights)[..., 0]
        self.obs_normalizer.update(self.axis.member_columns(obs), counted)
        if self.critic_obs_normalizer is not None:
            if critic_obs is None:
                raise ValueError("this network normalises a centralised critic's input; pass critic_obs")
            self.critic_obs_normalizer.update(self.axis.member_columns(critic_obs), counted)

    def _head(self, features: torch.Tensor, batch: int) -> torch.Tensor:
        """The action head on member-major ``features``, agent-major: ``[B, n_g, L]``."""
        return self.axis.agent_major(self.actor_head.forward_member_major(features), batch)

    def _value_head(self, hidden: torch.Tensor, batch: int) -> torch.Tensor:
        """The value head on the critic's member-major ``hidden`` features, agent-major: ``[B, n_g]``."""
        return self.axis.agent_values(self.value_head.forward_member_major(hidden), batch)

    def _trunk(self, obs: torch.Tensor, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Member-major actor trunk features ``[M, B', d]`` (``B' = B`` independent, ``B * n_g`` shared) and the
        actor core's member-major state after the step (``None`` without a core)."""
        return step_core(self.core, self._mlp(self.cnn, self.encoder, obs), state)

    def _mlp(self, cnn: StackedCNN | None, encoder: StackedMLP, obs: torch.Tensor) -> torch.Tensor:
        """Member-major MLP features of one trunk (the actor's or the local critic's) on ``[B, n_g, *obs]``."""
        return trunk_features(cnn, encoder, obs, self.obs_normalizer, self.axis, self.agent_ids)

    def _values(
        self,
        obs: torch.Tensor,
        critic_obs: torch.Tensor | None,
        batch: int,
        features: torch.Tensor | None,
        state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[B, n_g]`` values from the critic's input: the centralised critic input, the observation through the
        critic's own trunk, or (shared trunk) the actor's member-major ``features``; and the critic core's
        member-major state after the step (``None`` without one)."""
        hidden = self._critic_features(obs, critic_obs, batch)
        if hidden is None:
            assert features is not None
            hidden = features
        else:
            hidden, state = step_core(self.critic_core, hidden, state)
        return self._value_head(hidden, batch), state

    def _critic_features(self, obs: torch.Tensor, critic_obs: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """Member-major input of the critic's core (or head): the centralised critic's MLP on ``critic_obs``, the
        critic's own trunk on ``obs``, or ``None`` with a shared trunk."""
        if self.critic_input_size is not None:
            return self._critic_hidden(critic_obs, batch)
        self.axis.reject_critic_obs(critic_obs)
        return None if self.critic_encoder is None else self._mlp(self.critic_cnn, self.critic_encoder, obs)

    def _critic_hidden(self, critic_obs: torch.Tensor | None, batch: int) -> torch.Tensor:
        """Member-major features of the centralised critic's MLP on ``[B, n_g, critic_input_size]``."""
        critic_obs = self.axis.critic_rows(self.axis.check_critic_obs(critic_obs, batch))
        if self.critic_obs_normalizer is not None:
            critic_obs = self.critic_obs_normalizer(critic_obs)
        assert self.critic_encoder is not None
        return self.critic_encoder.forward_member_major(self.axis.critic_member_major(critic_obs, self.agent_ids))
