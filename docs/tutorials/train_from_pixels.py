"""Train from pixels: cooperative pong's 280 × 480 RGB frames, shrunk with SuperSuit, into the CNN encoder."""
import os
import time

import supersuit
from pettingzoo.butterfly import cooperative_pong_v6

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv

total_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 200_000))


def make_env():
    # render_mode="rgb_array": cooperative pong draws its screen only when it renders (None gives black frames).
    env = cooperative_pong_v6.parallel_env(render_mode="rgb_array")
    env = supersuit.color_reduction_v0(env, mode="full")  # grey: 280 x 480 x 1
    env = supersuit.resize_v1(env, x_size=48, y_size=48)  # the CNN needs at least 36 x 36
    return supersuit.frame_stack_v1(env, stack_size=3)  # motion: the last three frames, 48 x 48 x 3


config = JointTrainerConfig(num_envs=8, rollout_steps=64, minibatch_size=256, n_epochs=4, learning_rate=3e-4,
                            torch_threads=1, seed=0)
env = PettingZooJointEnv(make_env, num_envs=config.num_envs, seed=config.seed)
print("observations per agent:", env.spec.groups[0].observation.shape, env.spec.groups[0].observation.dtype)
trainer = JointMultiAgentTrainer.from_env(env, config)  # image observations get the Nature CNN encoder
start = time.perf_counter()
history = trainer.train(total_steps)
seconds = time.perf_counter() - start
steps = sum(h["agent_steps"] for h in history)
print(f"{len(history)} iterations, {steps / seconds:,.0f} agent-steps/s, "
      f"last mean episode return {history[-1]['episode_return_mean']:.3g}")
env.close()
