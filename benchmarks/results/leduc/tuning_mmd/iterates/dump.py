"""Runs MMD self-play by env steps and saves every iterate's tables, for averaging studies offline (``avg.py``).

    PYTHONPATH=.:envs python dump.py GAME SEED ENV_STEPS TRAINER_JSON MMD_JSON OUT.npz

TRAINER_JSON changes the self-play trainer settings, MMD_JSON the MmdConfig fields, plus one probe-only key:
``lr_power_after_floor`` p (once α_t reaches ``alpha_min`` the step size falls as (1 + t/τ)^-p from there on, joined
continuously, instead of following α's schedule). The run is the one ``benchmarks/leduc.py`` makes for the same
seed and settings, update for update (its time budget only decides where it stops).
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

from marljoint.best_response.mmd import MmdConfig  # noqa: E402

game, seed, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
trainer_changes, mmd_changes, out = json.loads(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6]
lr_power = mmd_changes.pop("lr_power_after_floor", None)
if lr_power is not None:
    base_factor = MmdConfig.factor

    def alpha_at(self, update):
        return max(self.alpha_min, self.alpha * base_factor(self, update))

    def factor(self, update):
        if self.alpha_min > 0 and self.alpha * base_factor(self, update) < self.alpha_min:
            floor_at = self.decay_updates * ((self.alpha / self.alpha_min) ** 2 - 1.0)
            ratio = (1 + floor_at / self.decay_updates) / (1 + update / self.decay_updates)
            return base_factor(self, floor_at) * ratio ** float(lr_power)
        return base_factor(self, update)

    MmdConfig.alpha_at, MmdConfig.factor = alpha_at, factor


def save(tables, steps):
    np.savez_compressed(out, steps=np.array(steps), **{f"p{p}": np.stack(t) for p, t in enumerate(tables)})


trainer, known, _ = self_play_trainer(game, "mmd", seed, trainer_changes, mmd_changes)
players = known.num_players
tables, steps, start = [[] for _ in range(players)], [], time.perf_counter()
while trainer.env_steps < budget:
    trainer.iterate()
    for p, table in enumerate(current_tables(trainer, known)):
        tables[p].append(np.asarray(table, dtype=np.float32))
    steps.append(trainer.env_steps)
    if trainer.iteration % 200 == 0:
        last = known.nash_conv([t[-1] for t in tables]) / players
        print(f"it={trainer.iteration} steps={trainer.env_steps} t={time.perf_counter() - start:.0f} last={last:.4f}")
        save(tables, steps)
save(tables, steps)
print("done", time.perf_counter() - start)
