"""Can an MLP of a given width represent the regularised equilibrium of alpha on Leduc? Each seat's network is fit to
it by supervised KL (weighted by the equilibrium's visitation, or uniformly over states with ``uniform``) and the
fitted tables are scored exactly.

    PYTHONPATH=.:envs python fit_capacity.py 0.2 128,256,512,128x128 visit
"""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qre"))
from qre import others_reach, regularised_equilibrium  # noqa: E402

from marljoint.run.registry import known_game  # noqa: E402

torch.set_num_threads(1)
game = known_game("openspiel:leduc_poker")
alpha = float(sys.argv[1])
widths = [tuple(int(x) for x in w.split("x")) for w in sys.argv[2].split(",")]
mode = sys.argv[3] if len(sys.argv) > 3 else "visit"
eq = regularised_equilibrium(game, alpha, 0.05, 3000)
P = game.num_players
print("qre exploitability %.4f" % (game.nash_conv(eq) / P))


for hs in widths:
    fitted = []
    for p in range(P):
        obs = torch.as_tensor(game.infoset_observations(p), dtype=torch.float32)
        legal = torch.as_tensor(game.legal_mask(p)).bool()
        target = torch.as_tensor(eq[p], dtype=torch.float32)
        visit = game.reach([eq[p]], p)[0] * others_reach(game, eq, p)
        w = torch.as_tensor(
            visit / visit.sum() if mode == "visit" else np.ones(len(visit)) / len(visit), dtype=torch.float32
        )
        torch.manual_seed(0)
        layers, d = [], obs.shape[1]
        for h in hs:
            layers += [torch.nn.Linear(d, h), torch.nn.Tanh()]
            d = h
        layers.append(torch.nn.Linear(d, legal.shape[1]))
        net = torch.nn.Sequential(*layers)
        opt = torch.optim.Adam(net.parameters(), lr=3e-3)
        for _step in range(6000):
            logits = net(obs).masked_fill(~legal, -1e9)
            logp = torch.log_softmax(logits, -1)
            kl = (target * (torch.log(target.clamp_min(1e-30)) - logp)).masked_fill(~legal, 0).sum(-1)
            loss = (w * kl).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            probs = torch.softmax(net(obs).masked_fill(~legal, -1e9), -1).double().numpy()
        fitted.append(probs)
        print(
            f"  width {hs} player {p} weighted KL {loss.item():.2e} max abs err {np.abs(probs - eq[p]).max():.3f}",
            flush=True,
        )
    print(f"width {hs} mode {mode}: exploitability of the fit {game.nash_conv(fitted) / P:.4f}", flush=True)
