"""How the trainer's networks and optimizers are built: one unit (a network and its optimizers) per agent group
from the defaults, or per agent from networks the caller passes; and the checks tying them to the env."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from marljoint.env.spaces import JointSpec
from marljoint.policies import ActorCritic, StackedAdam
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.learner import NetworkUnit
from marljoint.ppo.optim import OptimConfig
from marljoint.threads import set_torch_threads

__all__ = ["default_units", "units_from_policies"]


def default_units(spec: JointSpec, config: JointTrainerConfig, **policy_kwargs: Any) -> list[NetworkUnit]:
    """One :class:`~marljoint.policies.ActorCritic` per agent group (shared, or stacked per-agent weights) with a
    :class:`~marljoint.policies.StackedAdam` that behaves like one independent Adam per agent (a second one for
    the critic with ``critic_lr``).

    Raises:
        ValueError: if ``config.num_agents`` disagrees with the env, or a centralised critic meets images.
    """
    check_agent_count(config, spec.num_agents)
    runtime, network, optim = config.runtime, config.network, config.optim
    check_device_available(runtime.device)
    if runtime.torch_threads is not None:
        # Before building: initial weights (orthogonal init) must not depend on the thread count in effect.
        set_torch_threads(runtime.torch_threads)
    critic_size = critic_input_size(spec) if network.centralized_critic else None
    policy_kwargs.setdefault("hidden_sizes", network.hidden_sizes)
    units = []
    policy_kwargs.setdefault("generator", torch.Generator().manual_seed(runtime.seed))
    for g, group in enumerate(spec.groups):
        policy = ActorCritic(
            group.observation,
            group.action,
            num_agents=group.size,
            share_parameters=network.share_parameters,
            critic_input_size=critic_size,
            share_trunk=network.share_trunk,
            critic_per_frame=network.critic_per_frame,
            normalize_observations=bool(network.normalize_observations) and group.observation.kind == "flat",
            recurrent=network.recurrent,
            rnn_hidden_size=network.rnn_hidden_size,
            **policy_kwargs,
        ).to(runtime.device)
        members = 1 if network.share_parameters else group.size
        optimizer, critic_optimizer = _optimizers(policy, optim, members)
        unit = NetworkUnit(g, policy, group.agent_indices, optimizer, critic_optimizer, True, agent_names=spec.agents)
        units.append(unit)
    return units


def _optimizers(policy: ActorCritic, optim: OptimConfig, members: int) -> tuple[StackedAdam, StackedAdam | None]:
    """One optimizer of every parameter, or with ``critic_lr`` one of the actor's and one of the critic's."""
    actor = list(policy.actor_parameters())
    critic = list(policy.critic_parameters())
    if optim.critic_lr is None:
        return StackedAdam(actor + critic, lr=optim.learning_rate, eps=optim.adam_eps, members=members), None
    optimizer = StackedAdam(actor, lr=optim.learning_rate, eps=optim.adam_eps, members=members)
    return optimizer, StackedAdam(critic, lr=optim.critic_lr, eps=optim.adam_eps, members=members)


def units_from_policies(
    spec: JointSpec,
    config: JointTrainerConfig,
    policies: Sequence[ActorCritic],
    optimizers: Sequence[torch.optim.Optimizer],
    critic_optimizers: Sequence[torch.optim.Optimizer] | None,
) -> list[NetworkUnit]:
    """One unit per agent from single-agent networks and optimizers the caller built.

    Raises:
        ValueError: when the numbers of policies/optimizers do not match the env's agents, a policy serves several
            agents, or ``config.num_agents`` disagrees with the env.
    """
    n = spec.num_agents
    check_agent_count(config, n)
    check_device_available(config.device)
    for name, seq in (("policies", policies), ("optimizers", optimizers), ("critic_optimizers", critic_optimizers)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"got {len(seq)} {name} for {n} agents {list(spec.agents)}; pass exactly one per agent")
    units = []
    for i, policy in enumerate(policies):
        g, _ = spec.group_of(i)
        if getattr(policy, "num_agents", 1) != 1:
            raise ValueError(
                f"policy {i} is built for {policy.num_agents} agents; the constructor takes one single-agent "
                "policy per agent (use from_env for batched groups)"
            )
        critic = critic_optimizers[i] if critic_optimizers is not None else None
        units.append(NetworkUnit(g, policy, (i,), optimizers[i], critic, stacked=False, agent_names=spec.agents))
    return units


def check_trunk_layout(policy: Any, policy_state: Mapping[str, Any]) -> None:
    """Refuses a checkpoint whose critic layout (own trunk or shared) or observation statistics differ from the
    network's, with the fix."""
    if not isinstance(policy, ActorCritic):
        return
    saved_stats = any(key.startswith("obs_normalizer.") for key in policy_state)
    if saved_stats != (policy.obs_normalizer is not None):
        raise ValueError(
            f"the checkpoint's networks {'normalise' if saved_stats else 'do not normalise'} observations, this "
            f"trainer's {'do not' if saved_stats else 'do'}; build the trainer with "
            f"normalize_observations={saved_stats} (normalize_observations = {str(saved_stats).lower()} in a run's "
            "config.toml)"
        )
    if policy.critic_input_size is not None:
        return
    saved_own_trunk = any(key.startswith("critic_encoder.") for key in policy_state)
    if saved_own_trunk == (not policy.share_trunk):
        return
    saved = "a critic trunk of its own" if saved_own_trunk else "a critic that reads the actor's trunk"
    raise ValueError(
        f"the checkpoint's networks have {saved}, this trainer's do not; build the trainer with "
        f"share_trunk={not saved_own_trunk} (share_trunk = {str(not saved_own_trunk).lower()} in a run's config.toml)"
    )


def check_device_available(device: str) -> None:
    """Refuses a device this machine does not have, naming it and the fix.

    Raises:
        ValueError: for CUDA without a CUDA GPU (or an index beyond the GPUs), or MPS where it is unavailable.
    """
    where = torch.device(device)
    if where.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"device={device!r}, but this torch build sees no CUDA GPU (torch.cuda.is_available() is False); "
                "use device='cpu', or install a CUDA build of torch on a machine with a GPU"
            )
        if where.index is not None and where.index >= count:
            raise ValueError(f"device={device!r}, but this machine has {count} CUDA GPU(s): cuda:0..cuda:{count - 1}")
    if where.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r}, but MPS is not available here; use device='cpu'")


def check_agent_count(config: JointTrainerConfig, n: int) -> None:
    """Refuses a ``config.num_agents`` other than the env's ``n``."""
    if config.num_agents is not None and config.num_agents != n:
        raise ValueError(
            f"config.num_agents is {config.num_agents} but the env has {n} agents; set num_agents={n} or leave it None"
        )


def critic_input_size(spec: JointSpec) -> int:
    """Input width of a centralised critic: every agent's flat observation and the alive mask.

    Raises:
        ValueError: for image observations (which need flattening or an encoder first).
    """
    for group in spec.groups:
        if group.observation.kind == "image":
            raise ValueError(
                f"centralized_critic needs flat observations, but agents {list(group.agents)} observe images "
                f"{group.observation.shape}; turn it off, or flatten/encode the images with a supersuit wrapper"
            )
    return sum(spec.observations[i].size for i in range(spec.num_agents)) + spec.num_agents
