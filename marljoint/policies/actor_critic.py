"""The actor-critic network of one agent group, evaluated for all of its agents in one batched forward."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import nn

from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies.distributions import Categorical, DiagGaussian, FactoredCategorical, make_distribution
from marljoint.policies.layers import Activation, StackedCNN, StackedLinear, StackedMLP, tanh
from marljoint.policies.normalizer import ObservationNormalizer
from marljoint.policies.recurrent import RECURRENT_KINDS, StackedRecurrentCell

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


_NATURE_CNN = ((32, 64, 64), (8, 4, 3), (4, 2, 1), 512)
"""Default CNN: channels, kernel sizes, strides, output features."""

_NATURE_CNN_MIN_SIZE = 36
"""Smallest image side the default CNN's kernels fit: a side of 36 becomes 8, 3, then 1 (35 would end at 0)."""


def _check_arguments(
    observation: Any, action: Any, num_agents: Any, critic_input_size: Any, recurrent: Any
) -> None:
    """The argument checks of :class:`ActorCritic`."""
    if not isinstance(observation, ObservationLayout):
        raise TypeError(f"observation must be an ObservationLayout, got {type(observation).__name__}")
    if not isinstance(action, ActionLayout):
        raise TypeError(f"action must be an ActionLayout, got {type(action).__name__}")
    if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
        raise ValueError(f"num_agents must be a positive int (the group size n_g), got {num_agents!r}")
    if critic_input_size is not None and (
        isinstance(critic_input_size, bool) or not isinstance(critic_input_size, int) or critic_input_size < 1
    ):
        raise ValueError(
            f"critic_input_size must be a positive int or None (no centralised critic), got {critic_input_size!r}"
        )
    if recurrent is not None and recurrent not in RECURRENT_KINDS:
        raise ValueError(f"recurrent must be one of {list(RECURRENT_KINDS)} or None, got {recurrent!r}")


def _observation_normalizers(
    enabled: bool, observation: ObservationLayout, members: int, critic_input_size: int | None
) -> tuple[ObservationNormalizer | None, ObservationNormalizer | None]:
    """The observation statistics of a network (and of its centralised critic's input), or ``None``."""
    if not enabled:
        return None, None
    if observation.kind == "image":
        raise ValueError(
            f"normalize_observations standardises flat observations, but this group observes images "
            f"{observation.shape}; turn it off (images are scaled to [0, 1] by the network), or flatten them first"
        )
    critic = None if critic_input_size is None else ObservationNormalizer(critic_input_size, members)
    return ObservationNormalizer(observation.size, members), critic


def _int_list(values: Sequence[int] | None) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def _plain_settings(
    num_agents: int,
    share_parameters: bool,
    hidden_sizes: Sequence[int],
    critic_input_size: int | None,
    log_std_init: float,
    share_trunk: bool,
    recurrent: str | None,
    rnn_hidden_size: int,
    normalize_observations: bool,
    cnn_settings: tuple[Any, Any, Any, Any],
) -> dict[str, Any]:
    """:class:`ActorCritic`'s keyword arguments other than the layouts, activation and generator, as plain values."""
    channels, kernel_sizes, strides, features = cnn_settings
    return {
        "num_agents": int(num_agents),
        "share_parameters": bool(share_parameters),
        "hidden_sizes": [int(size) for size in hidden_sizes],
        "critic_input_size": None if critic_input_size is None else int(critic_input_size),
        "log_std_init": float(log_std_init),
        "share_trunk": bool(share_trunk),
        "recurrent": recurrent,
        "rnn_hidden_size": int(rnn_hidden_size),
        "normalize_observations": bool(normalize_observations),
        "cnn_channels": _int_list(channels),
        "cnn_kernel_sizes": _int_list(kernel_sizes),
        "cnn_strides": _int_list(strides),
        "cnn_features": None if features is None else int(features),
    }


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
            CNN settings given, or ``normalize_observations`` with image observations.

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
        _check_arguments(observation, action, num_agents, critic_input_size, recurrent)
        self.observation = observation
        self.action = action
        self.num_agents = num_agents
        self.share_parameters = bool(share_parameters)
        self.members = 1 if self.share_parameters else num_agents
        self.critic_input_size = critic_input_size
        self.share_trunk = bool(share_trunk) and critic_input_size is None
        id_size = num_agents if self.share_parameters else 0
        members = self.members

        cnn_settings = (cnn_channels, cnn_kernel_sizes, cnn_strides, cnn_features)
        chosen = any(setting is not None for setting in cnn_settings)
        use_cnn = observation.kind == "image" and (chosen or min(observation.shape[:2]) >= _NATURE_CNN_MIN_SIZE)
        cnn_args = tuple(_NATURE_CNN[k] if setting is None else setting for k, setting in enumerate(cnn_settings))

        def trunk() -> tuple[StackedCNN | None, StackedMLP]:
            cnn = StackedCNN(members, observation.shape, *cnn_args, generator=generator) if use_cnn else None
            encoder_in = (cnn.out_features if cnn is not None else observation.size) + id_size
            return cnn, StackedMLP(members, encoder_in, hidden_sizes, activation, generator=generator)

        self.recurrent = recurrent

        def core(in_features: int) -> StackedRecurrentCell | None:
            if recurrent is None:
                return None
            return StackedRecurrentCell(members, in_features, rnn_hidden_size, recurrent, generator=generator)

        self.cnn, self.encoder = trunk()
        self.core = core(self.encoder.out_features)
        self.feature_size = self.encoder.out_features if self.core is None else self.core.hidden_size
        self.actor_head = StackedLinear(members, self.feature_size, action.logits_size, 0.01, generator=generator)
        if action.kind == "box":
            self.log_std: nn.Parameter | None = nn.Parameter(
                torch.full((members, action.logits_size), float(log_std_init))
            )
        else:
            self.log_std = None
        # The critic's own layers: a centralised MLP, a local trunk (CNN + MLP), or nothing (shared trunk).
        self.critic_cnn: StackedCNN | None = None
        self.critic_encoder: StackedMLP | None = None
        if critic_input_size is not None:
            self.critic_encoder = StackedMLP(
                members, critic_input_size + id_size, hidden_sizes, activation, generator=generator
            )
        elif not self.share_trunk:
            self.critic_cnn, self.critic_encoder = trunk()
        self.critic_core = None if self.critic_encoder is None else core(self.critic_encoder.out_features)
        if self.critic_encoder is None:
            critic_features = self.feature_size
        else:
            critic_features = self.critic_encoder.out_features if self.critic_core is None else rnn_hidden_size
        self.value_head = StackedLinear(members, critic_features, 1, 1.0, generator=generator)
        self.obs_normalizer, self.critic_obs_normalizer = _observation_normalizers(
            normalize_observations, observation, members, critic_input_size
        )
        self.register_buffer("agent_ids", torch.eye(num_agents), persistent=False)
        self._obs_shape = (num_agents, *observation.shape)
        # The constructor's settings as plain values (with the layouts and the activation, they build this network
        # again: marljoint.policies.description).
        self.settings = _plain_settings(
            num_agents, self.share_parameters, hidden_sizes, critic_input_size, log_std_init, share_trunk, recurrent,
            rnn_hidden_size, normalize_observations, cnn_settings,
        )  # fmt: skip

    @property
    def state_size(self) -> int:
        """S, the numbers of one agent's recurrent state: the actor core's state, then the critic core's (0 for a
        feed-forward network)."""
        return sum(c.state_size for c in (self.core, self.critic_core) if c is not None)

    def initial_state(self, batch: int) -> torch.Tensor:
        """The zero recurrent state of ``batch`` rows of every agent, ``[batch, n_g, S]`` (an episode's start)."""
        return torch.zeros(batch, self.num_agents, self.state_size, device=self.agent_ids.device)

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
        batch = self._check_obs(obs)
        actor_state, critic_state = self._split_state(state, batch)
        if self.core is not None and self.critic_core is not None:
            # Both cores step side by side, as the replay of the update steps them.
            hidden = self._critic_features(obs, critic_obs, batch)
            assert hidden is not None and actor_state is not None and critic_state is not None
            (features, actor_state), (hidden, critic_state) = StackedRecurrentCell.steps(
                [self.core, self.critic_core],
                [self._mlp(self.cnn, self.encoder, obs), hidden],
                [actor_state, critic_state],
            )
            values = self._agent_major(self.value_head.forward_member_major(hidden), batch).squeeze(-1)
        else:
            features, actor_state = self._trunk(obs, actor_state)
            values, critic_state = self._values(obs, critic_obs, batch, features, critic_state)
        head = self._agent_major(self.actor_head.forward_member_major(features), batch)
        new_state = self._join_state(actor_state, critic_state, batch)
        return PolicyOutput(head, values, self._agent_major(features, batch), new_state)

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
        if self.core is None:
            raise ValueError("forward_sequence replays a recurrent network; this one is feed-forward (recurrent=None)")
        length, batch = obs.shape[:2]
        flat_obs = obs.reshape(length * batch, *obs.shape[2:])
        self._check_obs(flat_obs)
        expected = (length, batch, self.num_agents)
        if starts.shape != expected or (advance is not None and advance.shape != expected):
            raise ValueError(f"starts and advance must be [L, B, n_g] = {list(expected)}, got {tuple(starts.shape)}")
        actor_state, critic_state = self._split_state(state, batch)
        starts_mm, advance_mm = self._sequence_mask(starts), None if advance is None else self._sequence_mask(advance)

        def sequence(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(x.shape[0], length, -1, x.shape[-1]).transpose(0, 1)  # [L, M, B', f]

        def rows_of(out: torch.Tensor) -> torch.Tensor:
            return out.transpose(0, 1).reshape(out.shape[1], -1, out.shape[-1])

        rows = length * batch
        actor_in = self._mlp(self.cnn, self.encoder, flat_obs)
        if self.critic_input_size is not None:
            flat_critic = None if critic_obs is None else critic_obs.reshape(rows, *critic_obs.shape[2:])
            hidden = self._critic_hidden(flat_critic, rows)
        elif self.critic_encoder is not None:
            self._reject_critic_obs(critic_obs)
            hidden = self._mlp(self.critic_cnn, self.critic_encoder, flat_obs)
        else:
            self._reject_critic_obs(critic_obs)
            hidden = None
        cores, inputs, states = [self.core], [sequence(actor_in)], [actor_state]
        if hidden is not None and self.critic_core is not None:
            cores.append(self.critic_core)
            inputs.append(sequence(hidden))
            states.append(critic_state)
        replayed = StackedRecurrentCell.forward_sequences(cores, inputs, states, starts_mm, advance_mm, replay=replay)
        features, actor_state = rows_of(replayed[0][0]), replayed[0][1]
        if len(replayed) > 1:
            hidden, critic_state = rows_of(replayed[1][0]), replayed[1][1]
        head = self._agent_major(self.actor_head.forward_member_major(features), rows)
        values = self._agent_major(self.value_head.forward_member_major(features if hidden is None else hidden), rows)
        fields = (head, values.squeeze(-1), self._agent_major(features, rows))
        shaped = (x.reshape(length, batch, *x.shape[1:]) for x in fields)
        return PolicyOutput(*shaped, state=self._join_state(actor_state, critic_state, batch))

    def action_head(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """The action-head output alone, ``[B, n_g, L]`` (no critic is evaluated).

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations.
            state: ``[B, n_g, S]`` recurrent states (recurrent networks only).
        """
        batch = self._check_obs(obs)
        features, _ = self._trunk(obs, self._split_state(state, batch)[0])
        return self._agent_major(self.actor_head.forward_member_major(features), batch)

    @property
    def actor_state_size(self) -> int:
        """The numbers of one agent's actor-core state (the first part of :attr:`state_size`; 0 when
        feed-forward): all that acting needs, since the critic's core does not feed the actions."""
        return 0 if self.core is None else self.core.state_size

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
        batch = self._check_obs(obs)
        if self.core is None:
            if actor_state is not None:
                raise ValueError("actor_state was given, but this network is feed-forward (recurrent=None); pass None")
            member_state = None
        else:
            expected = (batch, self.num_agents, self.actor_state_size)
            if actor_state is None or tuple(actor_state.shape) != expected:
                got = "none" if actor_state is None else f"shape {tuple(actor_state.shape)}"
                raise ValueError(
                    f"this network is recurrent ({self.recurrent}); pass actor_state of shape {list(expected)}, got "
                    f"{got} (zeros at an episode's start)"
                )
            member_state = self._member_major_rows(actor_state)
        features, new_state = self._recur(self.core, self._mlp(self.cnn, self.encoder, obs), member_state)
        head = self._agent_major(self.actor_head.forward_member_major(features), batch)
        return head, None if new_state is None else self._agent_major(new_state, batch)

    def encoder_features(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """Trunk features of every agent, ``[B, n_g, d]`` (the input of the action head).

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations.
            state: ``[B, n_g, S]`` recurrent states (recurrent networks only).
        """
        batch = self._check_obs(obs)
        features, _ = self._trunk(obs, self._split_state(state, batch)[0])
        return self._agent_major(features, batch)

    def value(
        self, obs: torch.Tensor, critic_obs: torch.Tensor | None = None, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """State values of every agent, ``[B, n_g]``.

        Args:
            obs: ``[B, n_g, *obs_shape]`` observations (not read by a centralised critic).
            critic_obs: ``[B, n_g, critic_input_size]``; required with a centralised critic, rejected otherwise.
            state: ``[B, n_g, S]`` recurrent states (recurrent networks only).
        """
        batch = self._check_obs(obs)
        actor_state, critic_state = self._split_state(state, batch)
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
        batch = self._check_obs(obs)
        rows = batch * self.num_agents if self.share_parameters else batch
        shaped = (rows, self.members, -1)
        self.obs_normalizer.update(obs.reshape(shaped), weights.reshape(rows, self.members))
        if self.critic_obs_normalizer is not None:
            if critic_obs is None:
                raise ValueError("this network normalises a centralised critic's input; pass critic_obs")
            self.critic_obs_normalizer.update(critic_obs.reshape(shaped), weights.reshape(rows, self.members))

    def member_of_agent(self, agent: int) -> int:
        """Index along the member axis of the parameters that act for agent ``agent`` of the group.

        Raises:
            IndexError: if ``agent`` is not in ``0 .. n_g - 1``.
        """
        if not 0 <= agent < self.num_agents:
            raise IndexError(f"agent {agent} is out of range for a group of {self.num_agents} agents")
        return 0 if self.share_parameters else agent

    def _check_obs(self, obs: torch.Tensor) -> int:
        if obs.dim() != len(self._obs_shape) + 1 or obs.shape[1:] != self._obs_shape:
            raise ValueError(
                f"obs of shape {tuple(obs.shape)} does not fit this group; expected [B, "
                f"{', '.join(map(str, self._obs_shape))}] (batch, {self.num_agents} agents, observation shape "
                f"{self.observation.shape})."
            )
        return obs.shape[0]

    def _trunk(self, obs: torch.Tensor, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Member-major actor trunk features ``[M, B', d]`` (``B' = B`` independent, ``B * n_g`` shared) and the
        actor core's member-major state after the step (``None`` without a core)."""
        return self._recur(self.core, self._mlp(self.cnn, self.encoder, obs), state)

    @staticmethod
    def _recur(
        core: StackedRecurrentCell | None, x: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One step of a recurrent core on member-major features (the features themselves without a core)."""
        if core is None:
            return x, None
        assert state is not None
        return core.step(x, state)

    def _mlp(self, cnn: StackedCNN | None, encoder: StackedMLP, obs: torch.Tensor) -> torch.Tensor:
        """Member-major MLP features of one trunk (the actor's or the local critic's) on ``[B, n_g, *obs]``."""
        batch = obs.shape[0]
        if cnn is None:
            x = obs if self.obs_normalizer is None else self.obs_normalizer(obs)
            if self.observation.kind == "image":  # an image too small for the default CNN, flattened
                x = obs.reshape(batch, self.num_agents, -1)
                if x.dtype == torch.uint8:
                    x = x.to(self.agent_ids.dtype).div_(255.0)
        else:
            if self.share_parameters:
                obs = obs.reshape(batch * self.num_agents, 1, *obs.shape[2:])
            x = cnn(obs).reshape(batch, self.num_agents, -1)
        return encoder.forward_member_major(self._member_major(x))

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
            hidden, state = self._recur(self.critic_core, hidden, state)
        return self._agent_major(self.value_head.forward_member_major(hidden), batch).squeeze(-1), state

    def _critic_features(self, obs: torch.Tensor, critic_obs: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """Member-major input of the critic's core (or head): the centralised critic's MLP on ``critic_obs``, the
        critic's own trunk on ``obs``, or ``None`` with a shared trunk."""
        if self.critic_input_size is not None:
            return self._critic_hidden(critic_obs, batch)
        self._reject_critic_obs(critic_obs)
        return None if self.critic_encoder is None else self._mlp(self.critic_cnn, self.critic_encoder, obs)

    def _split_state(
        self, state: torch.Tensor | None, batch: int
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Agent-major ``[B, n_g, S]`` states → the member-major states of the actor core and the critic core."""
        if self.core is None:
            if state is not None:
                raise ValueError("state was given, but this network is feed-forward (recurrent=None); pass None")
            return None, None
        expected = (batch, self.num_agents, self.state_size)
        if state is None or state.shape != expected:
            got = "none" if state is None else f"shape {tuple(state.shape)}"
            raise ValueError(
                f"this network is recurrent ({self.recurrent}); pass state of shape {list(expected)} (the agents' "
                f"states before this step, initial_state(B) at an episode's start), got {got}"
            )
        actor_size = self.core.state_size
        member_major = self._member_major_rows(state)
        critic = member_major[..., actor_size:] if self.critic_core is not None else None
        return member_major[..., :actor_size], critic

    def _join_state(self, actor: torch.Tensor | None, critic: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """Inverse of :meth:`_split_state`."""
        if actor is None:
            return None
        joined = actor if critic is None else torch.cat((actor, critic), dim=-1)
        return self._agent_major(joined, batch)

    def _member_major_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, n_g, k]`` → ``[M, B', k]`` without agent ids (states and masks)."""
        if self.share_parameters:
            return x.reshape(1, x.shape[0] * self.num_agents, *x.shape[2:])
        return x.transpose(0, 1)

    def _sequence_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """``[L, B, n_g]`` per-agent flags → the cores' member-major ``[L, M, B']``."""
        length, batch = mask.shape[:2]
        if self.share_parameters:
            return mask.reshape(length, 1, batch * self.num_agents)
        return mask.transpose(1, 2)

    def _member_major(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, n_g, f]`` per-agent inputs → the ``[M, B', f']`` input of a stacked network.

        Sharing folds the agents into the batch and appends each agent's one-hot id.
        """
        ids = self.agent_ids
        if x.dtype != ids.dtype:
            x = x.to(ids.dtype)
        if not self.share_parameters:
            return x.transpose(0, 1)
        batch = x.shape[0]
        ids = ids.expand(batch, self.num_agents, self.num_agents)
        return torch.cat((x, ids), dim=-1).view(1, batch * self.num_agents, -1)

    def _agent_major(self, y: torch.Tensor, batch: int) -> torch.Tensor:
        """Inverse of :meth:`_member_major` for outputs: ``[M, B', k]`` → ``[B, n_g, k]``."""
        if not self.share_parameters:
            return y.transpose(0, 1)
        return y.reshape(batch, self.num_agents, y.shape[-1])

    def _critic_hidden(self, critic_obs: torch.Tensor | None, batch: int) -> torch.Tensor:
        """Member-major features of the centralised critic's MLP on ``[B, n_g, critic_input_size]``."""
        expected = (batch, self.num_agents, self.critic_input_size)
        if critic_obs is None:
            raise ValueError(
                f"this network has a centralised critic (critic_input_size={self.critic_input_size}); pass "
                f"critic_obs of shape {list(expected)}."
            )
        if critic_obs.shape != expected:
            raise ValueError(f"critic_obs of shape {tuple(critic_obs.shape)} does not fit; expected {list(expected)}.")
        if self.critic_obs_normalizer is not None:
            critic_obs = self.critic_obs_normalizer(critic_obs)
        assert self.critic_encoder is not None
        return self.critic_encoder.forward_member_major(self._member_major(critic_obs))

    @staticmethod
    def _reject_critic_obs(critic_obs: torch.Tensor | None) -> None:
        if critic_obs is not None:
            raise ValueError(
                "critic_obs was given but this network has no centralised critic; build it with "
                "critic_input_size=... or pass critic_obs=None."
            )
