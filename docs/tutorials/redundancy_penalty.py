"""The redundancy penalty: push agents' encoder features apart while they learn."""
import functools
import os

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.redundancy import RedundancyPenalty
from marljoint_envs import bucket_brigade_v0

total_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 100_000))
env_fn = functools.partial(bucket_brigade_v0.parallel_env, scenario="easy", num_agents=3)
# One network per agent: with a shared network the agents' features differ only through the agent id.
config = JointTrainerConfig(num_envs=16, rollout_steps=64, minibatch_size=512, learning_rate=1e-3,
                            share_parameters=False, torch_threads=1, seed=0)


def train(coef: float) -> dict:
    env = PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=config.seed)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    # coef=0 adds nothing to the loss (training is bit-identical to no aux_fn) but still measures redundancy.
    penalty = RedundancyPenalty(kind="xcorr", coef=coef)
    return trainer.train(total_steps, aux_fn=penalty)[-1]


for coef in (0.0, 0.5):
    last = train(coef)
    pairs = {k: round(v, 3) for k, v in last.items() if k.startswith("redundancy/xcorr/")}
    print(f"coef {coef}: mean xcorr {last['redundancy/xcorr']:.3f} per pair {pairs}, "
          f"aux_loss {last['aux_loss']:.4f}, return {last['episode_return_mean']:.0f}")
