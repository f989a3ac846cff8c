import json
import sys
import time

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, "/work/main/benchmarks")
import offpolicy_learning as ol  # noqa: E402

from marljoint import PettingZooJointEnv  # noqa: E402
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer  # noqa: E402

algo, seed, steps, changes, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
config = OffPolicyConfig(algorithm=algo, seed=seed, **changes)
env = PettingZooJointEnv(ol.TASKS["multiwalker"].factory, num_envs=config.num_envs, seed=seed)
tr = OffPolicyTrainer(env, config)
t0 = time.perf_counter()
rets = []
nxt = 10000
while tr.env_steps < steps:
    m = tr.iteration_metrics(*tr.iterate())
    played_r = [v for k, v in m.items() if k == "episode_return_mean"]
    if "episode_return_mean" in m and m["episode_return_mean"] == m["episode_return_mean"]:
        rets.append(m["episode_return_mean"])
    if tr.env_steps >= nxt:
        nxt += 10000
        keys = {k: round(float(v), 3) for k, v in m.items() if any(s in k for s in ("alpha", "entropy", "q_", "loss"))}
        print(
            tag,
            tr.env_steps,
            f"t={time.perf_counter() - t0:.0f}",
            "ret_recent",
            np.mean(rets[-20:]) if rets else None,
            keys,
            flush=True,
        )
