"""Bring your own env: write a PettingZoo ParallelEnv, check it, train on it."""
import functools
import os

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.test import parallel_api_test

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv, check_joint_env

total_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 20_000))


class MeetingPoint(ParallelEnv):
    """Two agents on a line of `size` cells must meet; the scout leaves after `scout_steps` steps."""

    metadata = {"name": "meeting_point_v0", "render_modes": []}

    def __init__(self, size: int = 7, max_steps: int = 20, scout_steps: int = 10):
        self.size, self.max_steps, self.scout_steps = size, max_steps, scout_steps
        self.possible_agents = ["walker", "scout"]
        # Observation: own position and the other's (both scaled to [0, 1]); action: left, stay, right.
        self._obs_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self._act_space = spaces.Discrete(3)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def reset(self, seed=None, options=None):
        self.rng = np.random.default_rng(seed) if seed is not None or not hasattr(self, "rng") else self.rng
        self.agents = list(self.possible_agents)
        self.pos = {a: int(self.rng.integers(self.size)) for a in self.agents}
        self.t = 0
        return self._observe(), {a: {} for a in self.agents}

    def _observe(self):
        scale = self.size - 1
        other = {"walker": "scout", "scout": "walker"}
        return {
            a: np.array([self.pos[a] / scale, self.pos.get(other[a], self.pos[a]) / scale], np.float32)
            for a in self.agents
        }

    def step(self, actions):
        self.t += 1
        for agent, action in actions.items():
            self.pos[agent] = int(np.clip(self.pos[agent] + int(action) - 1, 0, self.size - 1))
        met = len(self.agents) == 2 and self.pos["walker"] == self.pos["scout"]
        rewards = {a: (1.0 if met else -0.05) for a in self.agents}
        terminations = {a: met or (a == "scout" and self.t >= self.scout_steps) for a in self.agents}
        truncations = {a: self.t >= self.max_steps and not terminations[a] for a in self.agents}
        observations, infos = self._observe(), {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos


# 1. PettingZoo's own API test on one copy.
parallel_api_test(MeetingPoint(), num_cycles=100)

# 2. marljoint's conformance check on the adapted env: shapes, masks, flags, seeded determinism.
env = PettingZooJointEnv(functools.partial(MeetingPoint, size=7), num_envs=4, seed=0)
check_joint_env(env)
print(env.spec.agents, [g.agents for g in env.spec.groups])

# 3. Train on it.
config = JointTrainerConfig(num_envs=4, rollout_steps=128, minibatch_size=128, learning_rate=1e-3,
                            torch_threads=1, seed=0)
trainer = JointMultiAgentTrainer.from_env(env, config)
history = trainer.train(total_steps)
print(f"episode return: first {history[0]['episode_return_mean']:.2f}, last {history[-1]['episode_return_mean']:.2f}")
