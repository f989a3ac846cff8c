"""Leduc MMD with the magnet reset to the phase's average policy (a proximal-point outer loop), by env steps.

    PYTHONPATH=.:envs python average_magnet.py GAME SEED ENV_STEPS EVERY SWITCHES ALPHA_AFTER TRAINER_JSON MMD_JSON TAG

SWITCHES: millions of env steps, comma-separated; at each the magnet becomes the (tabular) average policy of the
phase just ended, with α = ALPHA_AFTER from then on, and a new phase average starts.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from selfplay import current_tables, self_play_trainer  # noqa: E402

from marljoint.best_response import PolicyAverage  # noqa: E402
from marljoint.best_response.mmd import magnet_kl  # noqa: E402
from marljoint.ppo.losses import masked_mean  # noqa: E402

game, seed, budget, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
switches = [int(float(x) * 1e6) for x in sys.argv[5].split(",") if x]
alpha_after = float(sys.argv[6])
tch, mch, tag = json.loads(sys.argv[7]), json.loads(sys.argv[8]), sys.argv[9]
tr, known, reg = self_play_trainer(game, "mmd", seed, tch, mch)
P = known.num_players
state = {"logits": None}
orig_call = type(reg).__call__


def call(self, batch):
    if state["logits"] is None:
        return orig_call(self, batch)
    policy = batch.policy
    cols = []
    for k, (net, out) in enumerate(zip(policy.networks, batch.outputs)):
        o = batch.obs[k]
        o3 = o.reshape(o.shape[0], o.shape[1], -1).cpu().numpy().astype("float32")
        refs = []
        for j in range(o3.shape[1]):
            lk, lg = known._lookup[j], state["logits"][j]
            uniq, inv = np.unique(o3[:, j], axis=0, return_inverse=True)
            rows = np.array([lk.get(u.tobytes(), -1) for u in uniq])[inv.reshape(-1)]
            ref = np.where((rows >= 0)[:, None], lg[np.maximum(rows, 0)], 0.0).astype("float32")
            refs.append(ref)
        ref = torch.as_tensor(np.stack(refs, 1)).reshape(out.head.shape)
        cols.append(magnet_kl(out.head, ref, policy.network_masks(k, batch.masks), net.action.nvec))
    kl = masked_mean(policy.agent_columns(cols), batch.valid)
    self._kl_sum += float(kl.detach().sum())
    self._scale_sum += 1.0
    self._kl_count += 1
    return alpha_after * kl.sum()


type(reg).__call__ = call

avg_all = PolicyAverage(known)
avg_phase = PolicyAverage(known)
phase_start = 0
nxt = every
t0 = time.perf_counter()
while tr.env_steps < budget:
    tr.iterate()
    ts = current_tables(tr, known)
    avg_all.add(ts, float(tr.iteration))
    avg_phase.add(ts, float(tr.iteration - phase_start))
    if switches and tr.env_steps >= switches[0]:
        switches.pop(0)
        mag = avg_phase.tables() if phase_start else avg_all.tables()
        state["logits"] = [np.log(np.maximum(t, 1e-6)).astype("float32") for t in mag]
        print(
            f"{tag} switch at steps={tr.env_steps} it={tr.iteration}: "
            f"magnet exploitability {known.nash_conv(mag) / P:.4f}",
            flush=True,
        )
        phase_start = tr.iteration
        avg_phase = PolicyAverage(known)
    if tr.env_steps >= nxt or tr.env_steps >= budget:
        nxt += every
        e = known.nash_conv(ts) / P
        ea = known.nash_conv(avg_all.tables()) / P
        ep = known.nash_conv(avg_phase.tables()) / P if tr.iteration > phase_start else float("nan")
        print(
            f"{tag} steps={tr.env_steps} it={tr.iteration} t={time.perf_counter() - t0:.0f} "
            f"last={e:.4f} lin={ea:.4f} phase={ep:.4f} alpha={reg.alpha:.3f}",
            flush=True,
        )
