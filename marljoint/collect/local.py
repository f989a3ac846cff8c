"""The in-process collector: E env copies stepped in this process with a joint policy's actions."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from marljoint.collect.acting import HostActing
from marljoint.collect.noise import CopyNoise, copy_generators
from marljoint.collect.rollout import JointRollout
from marljoint.env.base import JointEnv, JointObs
from marljoint.policies.joint import JointPolicy

__all__ = ["LocalCollector"]


class LocalCollector:
    """Plays rollouts in a :class:`~marljoint.env.JointEnv` with a :class:`~marljoint.policies.JointPolicy`.

    The env is reset with ``seed`` before the first rollout; each later rollout continues where the last stopped.
    Every env copy samples from its own noise generator, addressed by its global index ``first_copy + e``, so a
    slice of the copies collected here gives exactly what those copies give in a collector of all of them.

    Args:
        env: the env copies.
        policy: the policy to act with (its device is the rollout's).
        seed: the seed of the env resets and of the copies' noise generators.
        first_copy: the global index of the env's first copy (non-zero for one slice of a larger set).

    Attributes:
        state: where the next rollout starts (``None``: the env is reset first).
        copy_generators: one noise generator per env copy (built on the first rollout).
    """

    def __init__(self, env: JointEnv, policy: JointPolicy, seed: int, first_copy: int = 0) -> None:
        self.env = env
        self.policy = policy
        self.seed = int(seed)
        self.first_copy = int(first_copy)
        self.state: JointObs | None = None
        self.copy_generators: list[torch.Generator] = []
        self.device = policy.device

    def collect_into(self, ro: JointRollout) -> None:
        """Plays ``ro.steps`` joint steps in every env copy, writing them into the rollout storage ``ro``.

        Args:
            ro: storage allocated for this env's copies on the policy's device (see
                :meth:`~marljoint.collect.JointRollout.allocate`).
        """
        steps = ro.steps
        if self.state is None:
            self.state = self.env.reset(seed=self.seed)
        if len(self.copy_generators) != self.env.num_envs:
            self.copy_generators = copy_generators(self.seed, self.env.num_envs, self.first_copy)
        state = self.state
        copy_noise = CopyNoise(self.copy_generators, steps)
        ro.final_values.zero_()  # written only at the steps where an agent is truncated
        ro.truncated_waiting.zero_()
        episode_returns: list[np.ndarray] = []
        episode_lengths: list[np.ndarray] = []
        episode_steps: list[np.ndarray] = []
        policy = self.policy
        policy.train(False)
        # The env's arrays enter the rollout through numpy views of its storage when it is on the CPU: a numpy
        # assignment costs a fraction of a torch copy_ per array and step.
        on_host = ro.rewards.device.type == "cpu"
        put = _put_numpy if on_host else _put_torch

        def sink(tensor: torch.Tensor) -> Any:
            return tensor.numpy() if on_host else tensor

        obs_in = [sink(o) for o in ro.obs]
        masks_in = [None if m is None else sink(m) for m in ro.action_masks]
        alive_in, acting_in, rewards_in, terminated_in, truncated_in = (
            sink(x) for x in (ro.alive, ro.acting, ro.rewards, ro.terminated, ro.truncated)
        )
        # On the CPU, plain MLP networks act through numpy around their torch matrix products.
        host = HostActing.build(self.policy, ro)
        with torch.no_grad():
            for t in range(steps):
                for g in range(len(self.env.spec.groups)):
                    put(obs_in[g], t, state.obs[g])
                    if masks_in[g] is not None:
                        put(masks_in[g], t, state.action_masks[g])
                put(alive_in, t, state.alive)
                put(acting_in, t, state.acting)
                # Rows without a decision carry all-allowed masks (the adapter's contract; the distributions
                # also treat an all-masked head as unmasked), so sampling there is well defined and ignored.
                if host is not None:
                    env_actions = policy.clip_actions(host.act(t, copy_noise))
                else:
                    env_actions = self._act_with_torch(ro, t, copy_noise)
                step = self.env.step(env_actions)
                put(rewards_in, t, step.rewards)
                put(terminated_in, t, step.terminated)
                put(truncated_in, t, step.truncated)
                if step.truncated.any():
                    ro.final_values[t] = self._final_values(step)
                    if step.final_waiting is not None:
                        ro.truncated_waiting[t] = torch.from_numpy(step.truncated & step.final_waiting)
                if len(step.episode_lengths):
                    episode_returns.append(step.episode_returns.copy())
                    episode_lengths.append(step.episode_lengths.copy())
                    episode_steps.append(np.full(len(step.episode_lengths), t, dtype=np.int64))
                state = step
            alive = torch.from_numpy(state.alive).to(self.device)
            outputs = policy.forward_rows([torch.from_numpy(o).to(self.device) for o in state.obs], alive)
            ro.bootstrap_values.copy_(policy.values(outputs) * alive)
            ro.next_alive.copy_(alive)
            ro.next_acting.copy_(torch.from_numpy(state.acting))
        self.state = JointObs(state.obs, state.alive, state.acting, state.action_masks)
        n = self.env.spec.num_agents
        ro.episode_returns = np.concatenate(episode_returns) if episode_returns else np.zeros((0, n))
        ro.episode_lengths = np.concatenate(episode_lengths) if episode_lengths else np.zeros(0, np.int64)
        ro.episode_steps = np.concatenate(episode_steps) if episode_steps else np.zeros(0, np.int64)

    def _act_with_torch(self, ro: JointRollout, t: int, copy_noise: CopyNoise) -> list[np.ndarray]:
        """Samples step ``t`` of a rollout with the networks and distributions in torch; returns the env actions."""
        masks = [m[t] if m is not None else None for m in ro.action_masks]
        policy = self.policy
        outputs = policy.forward_rows([o[t] for o in ro.obs], ro.alive[t])
        actions, log_probs = policy.sample(outputs, masks, copy_noise=copy_noise)
        ro.values[t] = policy.values(outputs)
        ro.log_probs[t] = log_probs
        for g, action in enumerate(actions):
            ro.actions[g][t].copy_(action)
        return policy.env_actions(actions)

    def _final_values(self, step: Any) -> torch.Tensor:
        """Values of the final states of agents that ended this step (bootstrap for truncation)."""
        ended = torch.from_numpy(step.terminated | step.truncated).to(self.device)
        reset = torch.from_numpy(step.reset_envs).to(self.device)
        group_obs = []
        for g, group in enumerate(self.env.spec.groups):
            final = torch.from_numpy(step.final_obs[g]).to(self.device)
            current = torch.from_numpy(step.obs[g]).to(self.device)
            cols = ended[:, list(group.agent_indices)]
            # Agents that did not end keep living in the same state, unless their copy was reset.
            current = torch.where(reset.view(-1, *([1] * (current.dim() - 1))), torch.zeros_like(current), current)
            shape = cols.shape + (1,) * (final.dim() - 2)
            group_obs.append(torch.where(cols.view(shape), final, current))
        alive_final = ended | (torch.from_numpy(step.alive).to(self.device) & ~reset.unsqueeze(1))
        return self.policy.values(self.policy.forward_rows(group_obs, alive_final))


def _put_numpy(dst: np.ndarray, t: int, src: np.ndarray) -> None:
    """Writes an env array into step t of a rollout field held as a numpy view of CPU storage."""
    dst[t] = src


def _put_torch(dst: torch.Tensor, t: int, src: np.ndarray) -> None:
    """Writes an env array into step t of a rollout field on any device."""
    dst[t].copy_(torch.from_numpy(src))
