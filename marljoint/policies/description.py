"""Networks as plain descriptions: what a checkpoint stores instead of pickled modules.

A description names an architecture from an allow-list and gives its constructor's settings as ints, floats,
strings, bools, lists and numpy arrays of numbers, beside the network's ``state_dict``. Such a checkpoint loads with
``torch.load(weights_only=True)``, so loading it can run no code from the file; the network is rebuilt here from
the allow-list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies.actor_critic import ActorCritic
from marljoint.policies.layers import Activation, tanh

__all__ = [
    "ACTIVATIONS",
    "action_from_plain",
    "action_to_plain",
    "actor_critic_from_description",
    "describe_actor_critic",
    "observation_from_plain",
    "observation_to_plain",
]

ACTIVATIONS: dict[str, Activation] = {
    "tanh": tanh,
    "torch.tanh": torch.tanh,
    "torch.relu": torch.relu,
    "torch.sigmoid": torch.sigmoid,
    "F.relu": F.relu,
    "F.elu": F.elu,
    "F.gelu": F.gelu,
    "F.silu": F.silu,
    "F.leaky_relu": F.leaky_relu,
    "F.softplus": F.softplus,
}
"""The activations a described network may use, by name (``tanh`` is the networks' default)."""

_ARCHITECTURE = "ActorCritic"


def observation_to_plain(layout: ObservationLayout) -> dict[str, Any]:
    """An observation layout as plain values (:func:`observation_from_plain` reads it)."""
    return {
        "kind": layout.kind,
        "shape": [int(n) for n in layout.shape],
        "dtype": np.dtype(layout.dtype).str,
        "has_mask": bool(layout.has_mask),
        "unbounded": bool(layout.unbounded),
    }


def observation_from_plain(plain: Mapping[str, Any]) -> ObservationLayout:
    """The layout :func:`observation_to_plain` described."""
    return ObservationLayout(
        str(plain["kind"]),  # type: ignore[arg-type]
        tuple(int(n) for n in plain["shape"]),
        np.dtype(str(plain["dtype"])),
        bool(plain["has_mask"]),
        bool(plain["unbounded"]),
    )


def action_to_plain(layout: ActionLayout) -> dict[str, Any]:
    """An action layout as plain values (bounds as numeric arrays; :func:`action_from_plain` reads it)."""
    return {
        "kind": layout.kind,
        "nvec": [int(n) for n in layout.nvec],
        "shape": [int(n) for n in layout.shape],
        "low": None if layout.low is None else np.asarray(layout.low).copy(),
        "high": None if layout.high is None else np.asarray(layout.high).copy(),
        "start": [int(n) for n in layout.start],
        "env_shape": [int(n) for n in layout.env_shape],
    }


def action_from_plain(plain: Mapping[str, Any]) -> ActionLayout:
    """The layout :func:`action_to_plain` described."""
    return ActionLayout(
        str(plain["kind"]),  # type: ignore[arg-type]
        tuple(int(n) for n in plain["nvec"]),
        tuple(int(n) for n in plain["shape"]),
        None if plain["low"] is None else np.asarray(plain["low"]).copy(),
        None if plain["high"] is None else np.asarray(plain["high"]).copy(),
        tuple(int(n) for n in plain["start"]),
        tuple(int(n) for n in plain["env_shape"]),
    )


def _activation_name(activation: Any) -> str:
    for name, known in ACTIVATIONS.items():
        if activation is known:
            return name
    raise ValueError(
        f"the network's activation {activation!r} is not one a checkpoint can name (it stores no code); use one "
        f"of {sorted(ACTIVATIONS)}"
    )


def describe_actor_critic(network: ActorCritic) -> dict[str, Any]:
    """A plain description of ``network``: its architecture's name, its settings and its weights (CPU tensors).

    Args:
        network: the network.

    Returns:
        ``{"architecture", "observation", "action", "settings", "activation", "weights"}``, which
        :func:`actor_critic_from_description` builds again.

    Raises:
        ValueError: for an activation outside :data:`ACTIVATIONS`.
        TypeError: for a network other than :class:`~marljoint.policies.ActorCritic`.
    """
    if type(network) is not ActorCritic:
        raise TypeError(f"only an ActorCritic can be described, got {type(network).__name__}")
    return {
        "architecture": _ARCHITECTURE,
        "observation": observation_to_plain(network.observation),
        "action": action_to_plain(network.action),
        "settings": dict(network.settings),
        "activation": _activation_name(network.encoder.activation),
        "weights": {name: value.detach().cpu().clone() for name, value in network.state_dict().items()},
    }


def actor_critic_from_description(description: Mapping[str, Any]) -> ActorCritic:
    """The network :func:`describe_actor_critic` described, with its weights (on the CPU).

    Raises:
        ValueError: for an architecture or activation outside the allow-lists, or settings the network refuses.
    """
    if description.get("architecture") != _ARCHITECTURE:
        raise ValueError(
            f"unknown network architecture {description.get('architecture')!r}; a checkpoint may name {_ARCHITECTURE!r}"
        )
    activation = description.get("activation")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; a checkpoint may name one of {sorted(ACTIVATIONS)}")
    settings = dict(description["settings"])
    network = ActorCritic(
        observation_from_plain(description["observation"]),
        action_from_plain(description["action"]),
        activation=ACTIVATIONS[activation],
        # The initial weights are replaced below; a generator of its own leaves torch's global one untouched.
        generator=torch.Generator(),
        **settings,
    )
    network.load_state_dict(description["weights"])
    return network
