import json
import sys
import time

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, "/work/main/benchmarks")
from selfplay import self_play_trainer  # noqa: E402

game, method, seed, budget, every, tch, mch, tag = (
    sys.argv[1],
    sys.argv[2],
    int(sys.argv[3]),
    int(sys.argv[4]),
    int(sys.argv[5]),
    json.loads(sys.argv[6]),
    json.loads(sys.argv[7]),
    sys.argv[8],
)
ema = mch.pop("ema", None)
if ema is not None:
    from marljoint.best_response import mmd as M

    orig = M.MmdRegularizer.begin_update

    def begin_update(self, learner):
        t = self.updates
        if t > 0:
            with torch.no_grad():
                for nm, np_ in zip(self.magnet.networks, learner.joint_policy.networks):
                    for pm, pp in zip(nm.parameters(), np_.parameters()):
                        pm.mul_(1 - ema).add_(pp, alpha=ema)
                    for bm, bp in zip(nm.buffers(), np_.buffers()):
                        bm.copy_(bp)
        self.alpha = self.config.alpha_at(t)
        if self.config.anneal_step_size:
            learner.set_learning_rate_scale(self.config.factor(t))
        self.updates = t + 1

    M.MmdRegularizer.begin_update = begin_update
    mch["magnet"] = "moving"
uniform_start = mch.pop("uniform_start", False)
END = tch.pop("end_iteration", None)  # with anneal_lr: the iteration the run ends at
trainer, known, reg = self_play_trainer(game, method, seed, tch, mch)
if uniform_start:
    with torch.no_grad():
        for net in reg.magnet.networks:
            net.actor_head.weight.zero_()
            net.actor_head.bias.zero_()
P = known.num_players
acc = {k: [None] * P for k in ("avg", "lin", "tail", "quad")}
wsum = {k: [None] * P for k in acc}


def tables():
    return [known.check_table(known.table(trainer.agent_policy(s), s), s) for s in range(P)]


def accumulate(ts, it):
    for s in range(P):
        reach = known._reach(ts[s][None], s)[0]
        for k, w in (
            ("avg", 1.0),
            ("lin", float(it)),
            ("quad", float(it) ** 2),
            ("tail", 1.0 if trainer.env_steps > budget / 2 else 0.0),
        ):
            if w == 0:
                continue
            if acc[k][s] is None:
                acc[k][s] = np.zeros_like(ts[s])
                wsum[k][s] = np.zeros(ts[s].shape[0])
            acc[k][s] += w * reach[:, None] * ts[s]
            wsum[k][s] += w * reach


def avg_tables(k):
    return [
        known.check_table(
            np.where(wsum[k][s][:, None] > 0, acc[k][s] / np.maximum(wsum[k][s][:, None], 1e-300), 1.0), s
        )
        for s in range(P)
    ]


nxt = every
train_t = 0.0
out = open(f"/tmp/avg46/{tag}.log", "w")
while trainer.env_steps < budget:
    a = time.perf_counter()
    trainer.iterate(end_iteration=END) if END else trainer.iterate()
    train_t += time.perf_counter() - a
    ts = tables()
    accumulate(ts, trainer.iteration)
    if trainer.env_steps >= nxt or trainer.env_steps >= budget:
        nxt += every
        e = known.nash_conv(ts) / P
        ea = known.nash_conv(avg_tables("avg")) / P
        el = known.nash_conv(avg_tables("lin")) / P
        et = known.nash_conv(avg_tables("tail")) / P if acc["tail"][0] is not None else float("nan")
        eq = known.nash_conv(avg_tables("quad")) / P
        m = reg.metrics() if reg else {}
        line = (
            f"{tag} steps={trainer.env_steps} it={trainer.iteration} t={train_t:.0f}s last={e:.4f} avg={ea:.4f} "
            f"lin={el:.4f} tail={et:.4f} quad={eq:.4f} alpha={m.get('mmd/alpha', 0):.3f} "
            f"scale={m.get('mmd/scale', 0):.3f}"
        )
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()
