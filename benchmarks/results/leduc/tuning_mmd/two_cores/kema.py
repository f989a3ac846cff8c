"""MMD self-play by env steps: the last iterate, the linear average, the magnet and a parameter-EMA "shadow".

Usage: python kema.py GAME SEED BUDGET EVERY TRAINER_JSON MMD_JSON TAG

MMD_JSON takes MmdConfig fields and two extras: ``kappa`` (add kappa * alpha_t * KL(pi || uniform) to a following
magnet's term, in the same units) and ``shadow`` (keep a copy of the policy whose parameters move that fraction of
the way to the policy's after every iteration, and score it).
"""

import json
import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from selfplay import current_tables, self_play_trainer  # noqa: E402

from marljoint.best_response import PolicyAverage  # noqa: E402
from marljoint.best_response.mmd import advantage_scale, magnet_kl  # noqa: E402
from marljoint.policies import AgentPolicy  # noqa: E402
from marljoint.ppo.losses import masked_mean  # noqa: E402

game, seed, budget, every, tch, mch, tag = sys.argv[1:8]
seed, budget, every = int(seed), int(budget), int(every)
tch, mch = json.loads(tch), json.loads(mch)
kappa = float(mch.pop("kappa", 0.0))
shadow_rate = float(mch.pop("shadow", 0.0))
trainer, known, reg = self_play_trainer(game, "mmd", seed, tch, mch)
if kappa:
    base_call = type(reg).__call__

    def with_uniform_term(self, batch):
        policy = batch.policy
        columns = [
            magnet_kl(out.head, None, policy.network_masks(k, batch.masks), net.action.nvec)
            for k, (net, out) in enumerate(zip(policy.networks, batch.outputs))
        ]
        kl = masked_mean(policy.agent_columns(columns), batch.valid)
        scale = torch.ones_like(kl)
        if self.config.alpha_units == "advantage_std":
            scale = advantage_scale(batch.advantages, batch.valid)
        return base_call(self, batch) + kappa * self.alpha * (scale * kl).sum()

    type(reg).__call__ = with_uniform_term

players = known.num_players
average = PolicyAverage(known)
shadow = trainer.joint_policy.copy_to(trainer.joint_policy.device) if shadow_rate else None


def tables_of(joint_policy):
    out = []
    for seat in range(players):
        network, slot = joint_policy.network_of(seat)
        out.append(known.table(AgentPolicy(network, slot), seat))
    return out


def score(tables):
    return known.nash_conv(tables) / players if tables is not None else float("nan")


next_score, start = every, time.perf_counter()
while trainer.env_steps < budget:
    trainer.iterate()
    tables = current_tables(trainer, known)
    average.add(tables, float(trainer.iteration))
    if shadow is not None:
        shadow.move_weights_towards(trainer.joint_policy, shadow_rate)
    if trainer.env_steps >= next_score or trainer.env_steps >= budget:
        next_score += every
        magnet = tables_of(reg.magnet) if reg.magnet is not None else None
        shadowed = tables_of(shadow) if shadow is not None else None
        print(
            f"{tag} steps={trainer.env_steps} it={trainer.iteration} t={time.perf_counter() - start:.0f} "
            f"last={score(tables):.4f} lin={score(average.tables()):.4f} magnet={score(magnet):.4f} "
            f"shadow={score(shadowed):.4f} alpha={reg.alpha:.3f}",
            flush=True,
        )
