"""NFSP on Kuhn poker: PPO best responses plus supervised average policies."""
import os

from marljoint import JointTrainerConfig
from marljoint.best_response import NFSP, NfspConfig
from marljoint.best_response.games import KuhnGame
from marljoint_envs import kuhn_poker_v0

iterations = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 40_000)) // 2_000  # 2,000 env steps per iteration

config = NfspConfig(
    anticipatory=0.1,  # η: per episode, an agent plays its best response with probability 0.1
    rollouts_per_iteration=4,
    min_reservoir_size=64,
    trainer=JointTrainerConfig(num_envs=16, rollout_steps=32, minibatch_size=256, learning_rate=1e-3,
                               torch_threads=1, seed=0),
    seed=0,
)
nfsp = NFSP(kuhn_poker_v0.raw_env, config, game=KuhnGame())
for row in nfsp.run(iterations=max(iterations, 1)):
    print(f"iteration {row['iteration']}: {row['env_steps']} env steps, "
          f"exploitability of the average policies {row['exploitability']:.3f}")

# The average policies are what NFSP converges with; uniform play has exploitability 11/24 ≈ 0.458.
print(f"final exploitability {nfsp.exploitability():.3f}")
