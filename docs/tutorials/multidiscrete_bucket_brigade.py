"""MultiDiscrete agents: bucket brigade's [house, mode, signal] actions as three factored categorical heads."""
import functools
import os

import numpy as np

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint_envs import bucket_brigade_v0

total_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 200_000))

# 1. The env: 4 agents on a ring of 10 houses, each choosing [house, mode, signal] = MultiDiscrete([10, 2, 2]).
env_fn = functools.partial(bucket_brigade_v0.parallel_env, scenario="easy")
config = JointTrainerConfig(num_envs=16, rollout_steps=64, minibatch_size=512, learning_rate=1e-3,
                            torch_threads=1, seed=0)
env = PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=config.seed)

# 2. The layout: identical agents form one group; its action layout lists the heads.
(group,) = env.spec.groups
print(f"group {group.agents}: action kind {group.action.kind!r}, heads {group.action.nvec}")

# 3. One network for the group (agent id appended), three heads; log-probs add up over heads.
trainer = JointMultiAgentTrainer.from_env(env, config)
history = trainer.train(total_steps)
returns = [m["episode_return_mean"] for m in history if np.isfinite(m["episode_return_mean"])]
if returns:  # iterations in which episodes ended
    print(f"mean episode return: first iterations {np.mean(returns[:5]):.0f}, last {np.mean(returns[-5:]):.0f}")


# 4. Compare the trained policy with the scripted baselines on the same scenario.
def trained_return(episodes: int = 8) -> float:
    eval_env = PettingZooJointEnv(env_fn, num_envs=episodes, seed=123)
    state, finished = eval_env.reset(), []
    while len(finished) < episodes:
        out = eval_env.step(trainer.act(state, deterministic=True))
        finished.extend(out.episode_returns.mean(axis=1))
        state = out
    return float(np.mean(finished[:episodes]))


print(f"trained policy:      {trained_return():.0f}")
for name in bucket_brigade_v0.SCRIPTED_POLICIES:
    print(f"{name + ' policy:':<20} {bucket_brigade_v0.evaluate_scripted(name, 'easy', episodes=8):.0f}")
