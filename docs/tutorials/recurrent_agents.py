"""Recurrent agents: a GRU policy remembers a cue that a feed-forward policy cannot see any more."""

import functools
import os

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.run.episodes import play_episodes
from marljoint_envs import memory_v0

total_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 40_000))
# Each agent sees its own cue (one of 4) at the first step only, and scores 1 if it names it 3 steps later.
env_fn = functools.partial(memory_v0.parallel_env, num_agents=2, num_cues=4, delay=3)

for recurrent in (None, "gru"):
    config = JointTrainerConfig(
        num_envs=16,
        rollout_steps=32,
        minibatch_size=256,
        learning_rate=3e-3,
        hidden_sizes=(32,),
        recurrent=recurrent,  # "gru", "lstm", or None for feed-forward networks
        rnn_hidden_size=32,  # the recurrent core's hidden state per agent and env copy
        bptt_length=8,  # the update replays chunks of 8 steps from the states stored in the rollout
    )
    env = PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    trainer.train(total_steps)
    # act() carries each agent's state from step to step, and starts afresh when an episode restarts.
    returns, _ = play_episodes(trainer, PettingZooJointEnv(env_fn, num_envs=4), episodes=100)
    print(
        f"{recurrent or 'feed-forward'}: mean return {returns.mean():.2f} "
        f"(optimal {memory_v0.optimal_return():.0f}, chance {memory_v0.chance_return(num_cues=4):.2f})"
    )
    env.close()
