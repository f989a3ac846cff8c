"""Train every agent of mpe2's simple_spread with joint PPO."""
import os

from mpe2 import simple_spread_v3

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv

total_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 200_000))
config = JointTrainerConfig(num_envs=8, rollout_steps=128, learning_rate=1e-3, torch_threads=1, seed=0)
env = PettingZooJointEnv(simple_spread_v3.parallel_env, num_envs=config.num_envs, seed=config.seed)
trainer = JointMultiAgentTrainer.from_env(env, config)
history = trainer.train(total_steps)
print(f"episode return: first {history[0]['episode_return_mean']:.1f}, last {history[-1]['episode_return_mean']:.1f}")
