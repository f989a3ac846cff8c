"""Kuhn/Leduc MMD self-play by env steps: the last iterate, the average policy (weight t) and the magnet.

    PYTHONPATH=.:envs python probe.py GAME SEED ENV_STEPS EVERY TRAINER_JSON MMD_JSON TAG

TRAINER_JSON changes the self-play trainer settings, MMD_JSON the MmdConfig fields, plus probe-only keys:
alpha_tau/alpha_power (α_t = α·(1 + t/τ)^-p, the step size unchanged), alpha_floor (what
alpha_min now does), avg_magnet (the magnet is the exact average policy so far, looked up per information
state), kappa (an extra κ·α_t·KL to the uniform policy) and shadow (a parameter-EMA copy scored on its own).
"""

import json
import sys
import time

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from selfplay import current_tables, self_play_trainer  # noqa: E402

from marljoint.best_response import PolicyAverage  # noqa: E402
from marljoint.policies import AgentPolicy  # noqa

game, seed, budget, every, tch, mch, tag = (
    sys.argv[1],
    int(sys.argv[2]),
    int(sys.argv[3]),
    int(sys.argv[4]),
    json.loads(sys.argv[5]),
    json.loads(sys.argv[6]),
    sys.argv[7],
)
kappa = float(mch.pop("kappa", 0.0))
shadow_rate = float(mch.pop("shadow", 0.0))
avg_magnet_on = bool(mch.pop("avg_magnet", False))
alpha_floor = mch.pop("alpha_floor", None)
if alpha_floor is not None:
    from marljoint.best_response.mmd import MmdConfig

    MmdConfig.alpha_at = lambda self, u: max(float(alpha_floor), self.alpha * self.factor(u))
alpha_tau = mch.pop("alpha_tau", None)
alpha_power = float(mch.pop("alpha_power", 0.5))
if alpha_tau is not None:
    from marljoint.best_response.mmd import MmdConfig

    MmdConfig.alpha_at = lambda self, u: self.alpha * (1.0 + u / float(alpha_tau)) ** (-alpha_power)
tr, known, reg = self_play_trainer(game, "mmd", seed, tch, mch)
if kappa:
    from marljoint.best_response.mmd import advantage_scale, magnet_kl
    from marljoint.ppo.losses import masked_mean  # noqa

    orig_call = type(reg).__call__

    def call(self, batch):
        base = orig_call(self, batch)
        policy = batch.policy
        cols = [
            magnet_kl(out.head, None, policy.network_masks(k, batch.masks), net.action.nvec)
            for k, (net, out) in enumerate(zip(policy.networks, batch.outputs))
        ]
        kl = masked_mean(policy.agent_columns(cols), batch.valid)
        scale = (
            advantage_scale(batch.advantages, batch.valid)
            if self.config.alpha_units == "advantage_std"
            else torch.ones_like(kl)
        )
        return base + kappa * self.alpha * (scale * kl).sum()

    type(reg).__call__ = call
HITS = [0, 0]
avg = PolicyAverage(known)
P = known.num_players
if avg_magnet_on:
    from marljoint.best_response.mmd import magnet_kl
    from marljoint.ppo.losses import masked_mean

    state = {"logits": None}

    def call(self, batch):
        policy = batch.policy
        cols = []
        for k, (net, out) in enumerate(zip(policy.networks, batch.outputs)):
            ref = None
            if state["logits"] is not None:
                o3 = (
                    batch.obs[k]
                    .reshape(batch.obs[k].shape[0], batch.obs[k].shape[1], -1)
                    .cpu()
                    .numpy()
                    .astype("float32")
                )
                refs = []
                for j in range(o3.shape[1]):
                    lk = known._lookup[j]
                    lg = state["logits"][j]
                    rows = [lk.get(o.tobytes(), -1) for o in o3[:, j]]
                    vj = batch.valid[:, j].cpu().numpy()
                    HITS[0] += sum(1 for r, v in zip(rows, vj) if v and r >= 0)
                    HITS[1] += int(vj.sum())
                    refs.append(np.stack([lg[r] if r >= 0 else np.zeros(lg.shape[1], dtype="float32") for r in rows]))
                ref = torch.as_tensor(np.stack(refs, 1)).reshape(out.head.shape)
            cols.append(magnet_kl(out.head, ref, policy.network_masks(k, batch.masks), net.action.nvec))
        kl = masked_mean(policy.agent_columns(cols), batch.valid)
        self._kl_sum += float(kl.detach().sum())
        self._scale_sum += 1.0
        self._kl_count += 1
        return self.alpha * kl.sum()

    type(reg).__call__ = call
shadow = tr.joint_policy.copy_to(tr.joint_policy.device) if shadow_rate else None


def shadow_tables():
    from marljoint.policies import AgentPolicy as AP

    out = []
    for s in range(P):
        net, slot = shadow.network_of(s)
        out.append(known.table(AP(net, slot), s))
    return out


def magnet_tables():
    if reg.magnet is None:
        return None
    from marljoint.policies import AgentPolicy as AP

    out = []
    for s in range(P):
        net, slot = reg.magnet.network_of(s)
        out.append(known.table(AP(net, slot), s))
    return out


nxt = every
t0 = time.perf_counter()
while tr.env_steps < budget:
    tr.iterate()
    ts = current_tables(tr, known)
    avg.add(ts, float(tr.iteration))
    if avg_magnet_on:
        state["logits"] = [np.log(np.maximum(t, 1e-6)).astype("float32") for t in avg.tables()]
    if shadow is not None:
        shadow.move_weights_towards(tr.joint_policy, shadow_rate)
    if tr.env_steps >= nxt or tr.env_steps >= budget:
        nxt += every
        e = known.nash_conv(ts) / P
        ea = known.nash_conv(avg.tables()) / P
        mt = magnet_tables()
        em = known.nash_conv(mt) / P if mt else float("nan")
        es = known.nash_conv(shadow_tables()) / P if shadow is not None else float("nan")
        print(
            f"{tag} steps={tr.env_steps} it={tr.iteration} t={time.perf_counter() - t0:.0f} "
            f"last={e:.4f} lin={ea:.4f} magnet={em:.4f} shadow={es:.4f} "
            f"alpha={reg.alpha:.3f} hits={HITS}",
            flush=True,
        )
