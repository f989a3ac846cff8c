"""MMD self-play where each seat acts from (1 - eps) pi + eps uniform-over-legal (its own rows importance-corrected by
the learner's decoupled weights pi_prox / mu): more samples at the states the opponent rarely leads to.

    PYTHONPATH=.:envs python explore.py GAME SEED ENV_STEPS EVERY EPS TRAINER_JSON MMD_JSON TAG
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
from marljoint.collect import acting  # noqa: E402

game, seed, budget, every, eps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
tch, mch, tag = json.loads(sys.argv[6]), json.loads(sys.argv[7]), sys.argv[8]

CALLS = [0]


def _categorical(self, logits, mask, uniform):
    rows, n = logits.shape[:2]
    assert self.uniform and self.kind == "discrete"
    shape = (rows, n, len(self.nvec), self.width)
    logits3 = logits.reshape(shape)
    legal = np.ones(shape, dtype=bool) if mask is None else mask.reshape(shape)
    blocked = ~legal & legal.any(-1, keepdims=True)
    logits3 = np.where(blocked, self.fill, logits3)
    shifted = logits3 - logits3.max(-1, keepdims=True)
    p = np.exp(shifted)
    p /= p.sum(-1, keepdims=True)
    allowed = ~blocked
    mu = (1 - eps) * p + eps * allowed / allowed.sum(-1, keepdims=True)
    log_mu = np.log(np.maximum(mu, 1e-30)).astype(np.float32)
    np.maximum(uniform, np.finfo(np.float32).tiny, out=uniform)
    g = -np.log(-np.log(uniform))
    choice = np.where(allowed, log_mu + g, -np.inf).argmax(-1)
    flat = log_mu.reshape(-1, self.width)
    log_probs = flat[np.arange(len(flat)), choice.reshape(-1)].reshape(rows, n, -1).sum(-1)
    CALLS[0] += 1
    return choice[..., 0], log_probs


if eps > 0:
    acting._UnitActing._categorical = _categorical
tr, known, reg = self_play_trainer(game, "mmd", seed, tch, mch)
if eps > 0:
    tr.learner.decoupled = True
P = known.num_players
avg = PolicyAverage(known)
nxt = every
t0 = time.perf_counter()
while tr.env_steps < budget:
    tr.iterate()
    ts = current_tables(tr, known)
    avg.add(ts, float(tr.iteration))
    if tr.env_steps >= nxt or tr.env_steps >= budget:
        nxt += every
        print(
            f"{tag} steps={tr.env_steps} it={tr.iteration} t={time.perf_counter() - t0:.0f} "
            f"last={known.nash_conv(ts) / P:.4f} lin={known.nash_conv(avg.tables()) / P:.4f}",
            flush=True,
        )
