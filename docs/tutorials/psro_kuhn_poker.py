"""PSRO on Kuhn poker: PPO best responses, an empirical meta-game, and exact exploitability."""
import os

from marljoint import JointTrainerConfig
from marljoint.best_response import PSRO, PsroConfig, exploitability
from marljoint.best_response.games import KuhnGame
from marljoint_envs import kuhn_poker_v0

br_steps = int(os.environ.get("MARLJOINT_TUTORIAL_STEPS", 20_000))  # PPO env steps per best response
game = KuhnGame()  # the game tree: exact meta-game entries and exact exploitability

# 1. PPO best responses: each iteration trains one new policy per player against the other's meta-mixture.
config = PsroConfig(
    iterations=6,
    oracle="ppo",
    meta_solver="nash",
    br_steps=br_steps,
    trainer=JointTrainerConfig(num_envs=16, rollout_steps=32, minibatch_size=256, learning_rate=3e-3,
                               torch_threads=1, seed=0),
    seed=0,
)
psro = PSRO(kuhn_poker_v0.raw_env, config, game=game)
for row in psro.run():
    print(f"iteration {row['iteration']}: population {row['population']}, "
          f"exploitability {row['exploitability']:.3f}")

# 2. The meta-mixtures are policies: evaluate them with the exact exploitability.
mixtures = [psro.meta_policy(seat) for seat in range(2)]
print(f"PPO-oracle PSRO: exploitability {exploitability(game, mixtures):.3f} (uniform play: {11 / 24:.3f})")

# 3. With the exact oracle (exact best responses from the game tree), PSRO converges to a Nash equilibrium.
exact = PSRO(kuhn_poker_v0.raw_env, PsroConfig(oracle="exact", iterations=8), game=game)
print(f"exact-oracle PSRO: exploitability {max(exact.run()[-1]['exploitability'], 0.0):.4f}")
