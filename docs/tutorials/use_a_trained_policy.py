"""Use a trained policy from Python: train with the command line, load the run, act in its env."""
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

import marljoint
from marljoint.cli import main

total_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 100_000))
run_dir = Path(tempfile.mkdtemp()) / "kuhn"
# Any run directory works: this one trains Kuhn poker for a moment (the same as typing the command in a shell).
main(["train", "--env", "kuhn_poker_v0", "--total-steps", str(total_steps), "--out", str(run_dir), "--quiet"])

run = marljoint.load_run(run_dir, num_envs=4, seed=0)  # the newest checkpoint, 4 copies of the env, on the CPU
state = run.env.reset(seed=0)
returns = np.zeros(run.env.spec.num_agents)
episodes = 0
while episodes < 20:
    step = run.env.step(run.act(state))  # the policies' most likely actions, per agent group
    returns += step.episode_returns.sum(axis=0)
    episodes += len(step.episode_lengths)
    state = step
run.close()
means = {agent: round(float(r), 3) for agent, r in zip(run.env.spec.agents, returns / episodes)}
print(f"{episodes} episodes, mean return per agent {means}")

# One agent's frozen policy acts on its own observations, e.g. inside a game loop of your own.
policy = run.agent_policy("player_0")
obs = torch.zeros(1, run.env.spec.observations[0].size)
probs = policy.action_probs(obs)[0]  # one head: the probability of each action
action = policy.act(obs, torch.Generator().manual_seed(0))  # sampled with your own generator
print(f"player_0 in the all-zero state: action probabilities {[round(float(p), 3) for p in probs[0]]}, "
      f"sampled {action.tolist()}")
