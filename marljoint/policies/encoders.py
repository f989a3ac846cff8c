"""The construction of an actor-critic's layers: argument checks, the encoder trunks (CNN + MLP, or MLP), the
recurrent cores, the centralised critic's MLP, and the observation statistics.

:class:`~marljoint.policies.actor_critic.ActorCritic` builds its layers through :class:`TrunkBuilder` in a fixed
order (actor trunk, actor core, action head, critic trunk, critic core, value head), which is both the order of its
parameters in a checkpoint and the order in which the initial weights are drawn from the generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies.layers import Activation, StackedCNN, StackedLinear, StackedMLP
from marljoint.policies.member_axis import MemberAxis
from marljoint.policies.normalizer import ObservationNormalizer
from marljoint.policies.recurrent import RECURRENT_KINDS, StackedRecurrentCell

__all__ = [
    "TrunkBuilder",
    "check_arguments",
    "observation_normalizers",
    "plain_settings",
    "step_core",
    "trunk_features",
]

_NATURE_CNN = ((32, 64, 64), (8, 4, 3), (4, 2, 1), 512)
"""Default CNN: channels, kernel sizes, strides, output features."""

_NATURE_CNN_MIN_SIZE = 36
"""Smallest image side the default CNN's kernels fit: a side of 36 becomes 8, 3, then 1 (35 would end at 0)."""

CnnSettings = tuple[Any, Any, Any, Any]
"""``(channels, kernel_sizes, strides, features)`` as given to the network, each possibly ``None``."""


def check_arguments(observation: Any, action: Any, num_agents: Any, critic_input_size: Any, recurrent: Any) -> None:
    """The argument checks of :class:`~marljoint.policies.actor_critic.ActorCritic`.

    Raises:
        TypeError: if the layouts are not :class:`ObservationLayout` / :class:`ActionLayout`.
        ValueError: for a non-positive ``num_agents`` or ``critic_input_size``, or an unknown ``recurrent``.
    """
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


def check_critic_per_frame(
    critic_per_frame: Any, critic_input_size: int | None, share_parameters: bool, recurrent: str | None
) -> bool:
    """``critic_per_frame``, checked: refuses one that is not a bool, or True without a centralised critic shared
    by the group's agents on a feed-forward network.

    Raises:
        ValueError: naming what is missing and the fix.
    """
    if not isinstance(critic_per_frame, bool):
        raise ValueError(f"critic_per_frame must be True or False, got {critic_per_frame!r}")
    if not critic_per_frame:
        return False
    if critic_input_size is None:
        raise ValueError(
            "critic_per_frame=True needs a centralised critic (critic_input_size); a local critic reads one agent's "
            "observation. Pass critic_input_size, or critic_per_frame=False"
        )
    if not share_parameters:
        raise ValueError(
            "critic_per_frame=True needs share_parameters=True: with one network per agent each agent has its own "
            "critic. Share the parameters, or critic_per_frame=False"
        )
    if recurrent is not None:
        raise ValueError(
            f"critic_per_frame=True needs a feed-forward network, got recurrent={recurrent!r} (a recurrent critic "
            "keeps one state per agent); pass recurrent=None, or critic_per_frame=False"
        )
    return True


def observation_normalizers(
    enabled: bool, observation: ObservationLayout, members: int, critic_input_size: int | None
) -> tuple[ObservationNormalizer | None, ObservationNormalizer | None]:
    """The observation statistics of a network (and of its centralised critic's input), or ``None``.

    Raises:
        ValueError: if ``enabled`` with image observations.
    """
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


def plain_settings(
    num_agents: int,
    share_parameters: bool,
    hidden_sizes: Sequence[int],
    critic_input_size: int | None,
    log_std_init: float,
    share_trunk: bool,
    recurrent: str | None,
    rnn_hidden_size: int,
    normalize_observations: bool,
    cnn_settings: CnnSettings,
    critic_per_frame: bool = False,
) -> dict[str, Any]:
    """The actor-critic's keyword arguments other than the layouts, activation and generator, as plain values:
    with the layouts and the activation they build it again (:mod:`marljoint.policies.description`)."""
    channels, kernel_sizes, strides, features = cnn_settings
    return {
        "num_agents": int(num_agents),
        "share_parameters": bool(share_parameters),
        "hidden_sizes": [int(size) for size in hidden_sizes],
        "critic_input_size": None if critic_input_size is None else int(critic_input_size),
        "log_std_init": float(log_std_init),
        "share_trunk": bool(share_trunk),
        "critic_per_frame": bool(critic_per_frame),
        "recurrent": recurrent,
        "rnn_hidden_size": int(rnn_hidden_size),
        "normalize_observations": bool(normalize_observations),
        "cnn_channels": _int_list(channels),
        "cnn_kernel_sizes": _int_list(kernel_sizes),
        "cnn_strides": _int_list(strides),
        "cnn_features": None if features is None else int(features),
    }


@dataclass(frozen=True)
class TrunkBuilder:
    """Builds the stacked layers of one agent group's network, each with ``members`` members.

    Attributes:
        observation: the group's observation layout.
        members: M, the member axis of every parameter.
        id_size: length of the one-hot agent id appended to the encoder's input (n_g when shared, else 0).
        hidden_sizes: hidden layer sizes of the encoder MLPs.
        activation: activation of the MLPs.
        recurrent: ``"gru"``, ``"lstm"`` or ``None`` (no cores).
        rnn_hidden_size: the recurrent cores' hidden size.
        cnn_settings: the ``cnn_*`` settings given (``None`` where not given).
        generator: source of the initial weights; ``None`` draws from torch's default generator.
    """

    observation: ObservationLayout
    members: int
    id_size: int
    hidden_sizes: Sequence[int]
    activation: Activation
    recurrent: str | None
    rnn_hidden_size: int
    cnn_settings: CnnSettings
    generator: torch.Generator | None

    @property
    def use_cnn(self) -> bool:
        """Whether image observations go through a CNN: any ``cnn_*`` setting given, or images the default fits."""
        chosen = any(setting is not None for setting in self.cnn_settings)
        shape = self.observation.shape
        return self.observation.kind == "image" and (chosen or min(shape[:2]) >= _NATURE_CNN_MIN_SIZE)

    def trunk(self) -> tuple[StackedCNN | None, StackedMLP]:
        """An encoder trunk on the observation: ``(CNN or None, MLP)``."""
        cnn = None
        if self.use_cnn:
            settings = (_NATURE_CNN[k] if s is None else s for k, s in enumerate(self.cnn_settings))
            cnn = StackedCNN(self.members, self.observation.shape, *settings, generator=self.generator)
        encoder_in = (cnn.out_features if cnn is not None else self.observation.size) + self.id_size
        return cnn, self.mlp(encoder_in)

    def mlp(self, in_features: int) -> StackedMLP:
        """An encoder MLP on ``in_features`` inputs plus the agent id."""
        return StackedMLP(self.members, in_features, self.hidden_sizes, self.activation, generator=self.generator)

    def core(self, in_features: int) -> StackedRecurrentCell | None:
        """A recurrent core after an MLP of ``in_features`` outputs (``None`` for a feed-forward network)."""
        if self.recurrent is None:
            return None
        return StackedRecurrentCell(
            self.members, in_features, self.rnn_hidden_size, self.recurrent, generator=self.generator
        )

    def value_head(
        self,
        feature_size: int,
        critic_encoder: StackedMLP | None,
        critic_core: StackedRecurrentCell | None,
        outputs: int = 1,
    ) -> StackedLinear:
        """The value head (gain 1) on the critic core's output, the critic MLP's, or (shared trunk, no critic MLP)
        the actor's ``feature_size`` features: ``outputs`` values per row (one per agent for a per-frame critic)."""
        if critic_encoder is None:
            inputs = feature_size
        else:
            inputs = critic_encoder.out_features if critic_core is None else critic_core.hidden_size
        return StackedLinear(self.members, inputs, outputs, 1.0, generator=self.generator)

    def critic(
        self, critic_input_size: int | None, share_trunk: bool, per_frame: bool, feature_size: int, num_agents: int
    ) -> tuple[StackedCNN | None, StackedMLP | None, StackedRecurrentCell | None, StackedLinear]:
        """The critic's parts in the order of their weights' draws: its own trunk (:meth:`critic_trunk`), its
        recurrent core and its value head (one output, or ``num_agents`` for a critic run ``per_frame``)."""
        cnn, encoder = self.critic_trunk(critic_input_size, share_trunk, per_frame)
        core = None if encoder is None else self.core(encoder.out_features)
        return cnn, encoder, core, self.value_head(feature_size, encoder, core, num_agents if per_frame else 1)

    def critic_trunk(
        self, critic_input_size: int | None, share_trunk: bool, per_frame: bool = False
    ) -> tuple[StackedCNN | None, StackedMLP | None]:
        """The critic's own layers: a centralised MLP (without agent ids when it runs ``per_frame``), a local trunk
        (CNN + MLP), or nothing (shared trunk)."""
        if critic_input_size is not None:
            return None, self.mlp(critic_input_size + (0 if per_frame else self.id_size))
        if share_trunk:
            return None, None
        return self.trunk()


def step_core(
    core: StackedRecurrentCell | None, x: torch.Tensor, state: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One step of a recurrent core on member-major features ``[M, B', f]`` with its member-major state
    ``[M, B', s]``: ``(outputs, next state)``; the features themselves and ``None`` without a core."""
    if core is None:
        return x, None
    assert state is not None
    return core.step(x, state)


def trunk_features(
    cnn: StackedCNN | None,
    encoder: StackedMLP,
    obs: torch.Tensor,
    normalizer: ObservationNormalizer | None,
    axis: MemberAxis,
    agent_ids: torch.Tensor,
) -> torch.Tensor:
    """Member-major MLP features ``[M, B', d]`` of one trunk on a group's ``[B, n_g, *obs_shape]`` observations.

    Flat observations are standardised by ``normalizer`` (when given); an image goes through ``cnn``, or, too small
    for one (``cnn=None``), is flattened (``uint8`` scaled to ``[0, 1]``). Shared parameters (``axis``) append
    each agent's one-hot id (a row of ``agent_ids``) to the MLP's input.
    """
    batch, num_agents = obs.shape[:2]
    if cnn is None:
        x = obs if normalizer is None else normalizer(obs)
        if axis.observation.kind == "image":  # an image too small for the default CNN, flattened
            x = obs.reshape(batch, num_agents, -1)
            if x.dtype == torch.uint8:
                x = x.to(agent_ids.dtype).div_(255.0)
    else:
        if axis.share_parameters:
            obs = obs.reshape(batch * num_agents, 1, *obs.shape[2:])
        x = cnn(obs).reshape(batch, num_agents, -1)
    return encoder.forward_member_major(axis.member_major(x, agent_ids))
