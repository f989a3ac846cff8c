import json
import sys
import time

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, "/work/main/benchmarks")
import offpolicy_learning as ol  # noqa: E402
from pettingzoo.utils.wrappers import BaseParallelWrapper  # noqa: E402

from marljoint import PettingZooJointEnv  # noqa: E402
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer  # noqa: E402

algo, seed, steps, changes, scale, tag = (
    sys.argv[1],
    int(sys.argv[2]),
    int(sys.argv[3]),
    json.loads(sys.argv[4]),
    float(sys.argv[5]),
    sys.argv[6],
)


class Scaled(BaseParallelWrapper):
    def step(self, actions):
        o, r, te, tr, i = self.env.step(actions)
        return o, {a: v * scale for a, v in r.items()}, te, tr, i


def factory():
    return Scaled(ol.TASKS["multiwalker"].factory())


config = OffPolicyConfig(algorithm=algo, seed=seed, **changes)
env = PettingZooJointEnv(factory, num_envs=config.num_envs, seed=seed)
tr = OffPolicyTrainer(env, config)
t0 = time.perf_counter()
rets = []
lens = []
nxt = 10000
while tr.env_steps < steps:
    m = tr.iteration_metrics(*tr.iterate())
    if m["episodes"]:
        rets.append(m["episode_return_mean"] / scale)
        lens.append(m["episode_length_mean"])
    if tr.env_steps >= nxt:
        nxt += 10000
        keys = {
            k.split("/")[-2] + k.split("/")[-1]: round(float(v), 2)
            for k, v in m.items()
            if any(s in k for s in ("critic_loss", "q/0", "alpha/0", "entropy/0"))
        }
        print(
            tag,
            tr.env_steps,
            f"t={time.perf_counter() - t0:.0f}",
            "ret",
            round(np.mean(rets[-20:]), 1) if rets else None,
            "len",
            round(np.mean(lens[-20:]), 0) if lens else None,
            keys,
            flush=True,
        )
torch.save(tr.state_dict(), f"/tmp/mw/{tag}.pt")
