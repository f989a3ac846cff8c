"""Half-widths of best_response_gain, paired (as now) against unpaired (independent episodes), same BRs."""
import math, numpy as np, torch
from marljoint import PettingZooJointEnv
from marljoint.best_response.oracles import PPOOracle, _episode_returns, _normal_quantile
from marljoint.best_response.opponents import mixture_profiles
from marljoint.best_response.population import PolicyMixture, UniformPolicy
from marljoint.cli.best_response import env_factory, recipe_for
import sys
torch.set_num_threads(1)
game = sys.argv[1]; kwargs = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
factory = env_factory(game, kwargs)
recipe = recipe_for(game)
config = recipe.trainer.replace(share_parameters=False)
env = PettingZooJointEnv(factory, num_envs=config.num_envs, seed=0)
N = env.spec.num_agents
profile = [PolicyMixture([UniformPolicy(env.spec.actions[s])]) for s in range(N)]
trained = PPOOracle(env, config, 20_000)([m.members for m in profile], [m.weights for m in profile], list(range(N)), 1).policies
sim = PettingZooJointEnv(factory, num_envs=32, seed=1)
z = _normal_quantile(0.95)
for rep in range(3):
    rng = np.random.default_rng(rep)
    members, profiles = mixture_profiles(profile, 200, rng)
    seeds = rng.integers(2**31, size=(200, 1))
    base_p = _episode_returns(sim, members, profiles, 10 + rep, seeds)
    base_u = _episode_returns(sim, members, profiles, 20 + rep, None)
    out = []
    for seat in range(N):
        dev = [list(m) for m in members]; dev[seat] = [trained[seat]]
        p2 = profiles.copy(); p2[:, seat] = 0
        d_p = _episode_returns(sim, dev, p2, 30 + rep, seeds)[:, seat]
        d_u = _episode_returns(sim, dev, p2, 40 + rep, None)[:, seat]
        paired = z * np.std(d_p - base_p[:, seat], ddof=1) / math.sqrt(200)
        unpaired = z * math.sqrt(d_u.var(ddof=1) / 200 + base_u[:, seat].var(ddof=1) / 200)
        out.append(f"seat {seat}: gain {d_p.mean() - base_p[:, seat].mean():.2f} ± {paired:.2f} paired, {d_u.mean() - base_u[:, seat].mean():.2f} ± {unpaired:.2f} unpaired")
    print(f"rep {rep}: " + "; ".join(out), flush=True)
