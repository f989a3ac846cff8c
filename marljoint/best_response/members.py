"""Population members as plain values: how PSRO checkpoints keep their frozen policies without pickling objects.

Each member becomes a dict naming its kind from an allow-list, with numbers, strings, numeric arrays and (for a
network) a :mod:`~marljoint.policies.description` of it. The checkpoint then loads with
``torch.load(weights_only=True)``, and the members are built again here: a file crafted to run code is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from marljoint.best_response.openspiel_game import OpenSpielTablePolicy
from marljoint.best_response.population import ConstantPolicy, FrozenPolicy, KuhnTablePolicy, UniformPolicy
from marljoint.env.spaces import ActionLayout
from marljoint.policies import AgentPolicy
from marljoint.policies.description import actor_critic_from_description, describe_actor_critic

__all__ = ["MEMBER_KINDS", "member_from_plain", "member_to_plain"]

MEMBER_KINDS = ("uniform", "constant", "kuhn_table", "openspiel_table", "network")
"""The kinds of population members a checkpoint may hold."""


def member_to_plain(policy: FrozenPolicy) -> dict[str, Any]:
    """A population member as plain values (:func:`member_from_plain` builds it again, bit for bit), with a
    network's weights as CPU tensors whatever its device.

    Raises:
        TypeError: for a policy of a kind outside :data:`MEMBER_KINDS` (nothing else can be stored without
            pickling it).
        ValueError: for a network whose activation a checkpoint cannot name.
    """
    if type(policy) is UniformPolicy:
        return {"kind": "uniform", "nvec": list(policy.nvec), "has_head_axis": bool(policy.has_head_axis)}
    if type(policy) is ConstantPolicy:
        return {
            "kind": "constant",
            "head_probs": [p.copy() for p in policy.head_probs],
            "has_head_axis": bool(policy.has_head_axis),
        }
    if type(policy) is KuhnTablePolicy:
        return {"kind": "kuhn_table", "table": policy.table.copy(), "player": policy.player}
    if type(policy) is OpenSpielTablePolicy:
        keys = list(policy.lookup)
        return {
            "kind": "openspiel_table",
            "name": policy.name,
            "keys": keys,
            "rows": [int(policy.lookup[k]) for k in keys],
            "table": policy.table.copy(),
            "player": policy.player,
        }
    if type(policy) is AgentPolicy:
        return {"kind": "network", "network": describe_actor_critic(policy.network), "slot": policy.slot}
    raise TypeError(
        f"a population member of type {type(policy).__name__} cannot be saved as plain values; the kinds that can "
        f"are {list(MEMBER_KINDS)}"
    )


def member_from_plain(plain: Mapping[str, Any], device: str | torch.device = "cpu") -> FrozenPolicy:
    """The member :func:`member_to_plain` described; a network member is placed on ``device`` (tabular members
    compute on the CPU wherever the run's networks live).

    Raises:
        ValueError: for a kind outside :data:`MEMBER_KINDS`.
    """
    kind = plain.get("kind")
    if kind == "uniform":
        nvec = tuple(int(n) for n in plain["nvec"])
        multi = bool(plain["has_head_axis"])
        layout = ActionLayout("multidiscrete" if multi else "discrete", nvec, (len(nvec),) if multi else ())
        return UniformPolicy(layout)
    if kind == "constant":
        probs = [np.asarray(p, dtype=np.float64).copy() for p in plain["head_probs"]]
        constant = ConstantPolicy(probs, bool(plain["has_head_axis"]))
        constant.head_probs = probs  # as saved: normalising them again could change their last bits
        return constant
    if kind == "kuhn_table":
        table = np.asarray(plain["table"], dtype=np.float64).copy()
        kuhn = KuhnTablePolicy(table, int(plain["player"]))
        kuhn.table, kuhn._table = table, torch.as_tensor(table, dtype=torch.float32)
        return kuhn
    if kind == "openspiel_table":
        lookup = {bytes(k): int(row) for k, row in zip(plain["keys"], plain["rows"])}
        table = np.asarray(plain["table"], dtype=np.float64)
        return OpenSpielTablePolicy(str(plain["name"]), lookup, table, int(plain["player"]))
    if kind == "network":
        return AgentPolicy(actor_critic_from_description(plain["network"]), int(plain["slot"])).to(device)
    raise ValueError(f"unknown population member kind {kind!r}; a checkpoint may hold {list(MEMBER_KINDS)}")
