"""Policies: action distributions, stacked (per-agent) layers, the group actor-critic, its optimizer and the value
normaliser."""

from marljoint.policies.actor_critic import ActorCritic, PolicyOutput
from marljoint.policies.agent_policy import AgentPolicy
from marljoint.policies.distributions import (
    ActionDistribution,
    BehaviourPolicy,
    Categorical,
    DiagGaussian,
    FactoredCategorical,
    UniformMixture,
    make_distribution,
)
from marljoint.policies.joint import JointPolicy, NetworkSlot, NoActingPolicy
from marljoint.policies.layers import StackedCNN, StackedConv2d, StackedLinear, StackedMLP
from marljoint.policies.noise import NoiseRequest, SamplingNoise
from marljoint.policies.normalizer import ObservationNormalizer, RunningNormalizer
from marljoint.policies.optim import StackedAdam, clip_member_grads_, member_grad_norms
from marljoint.policies.stack import PolicyStack

__all__ = [
    "ActionDistribution",
    "ActorCritic",
    "AgentPolicy",
    "BehaviourPolicy",
    "Categorical",
    "DiagGaussian",
    "FactoredCategorical",
    "JointPolicy",
    "NetworkSlot",
    "NoActingPolicy",
    "NoiseRequest",
    "ObservationNormalizer",
    "PolicyOutput",
    "PolicyStack",
    "RunningNormalizer",
    "SamplingNoise",
    "StackedAdam",
    "StackedCNN",
    "StackedConv2d",
    "StackedLinear",
    "StackedMLP",
    "UniformMixture",
    "clip_member_grads_",
    "make_distribution",
    "member_grad_norms",
]
