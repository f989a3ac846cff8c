"""PettingZoo environments bundled with marljoint, each a module named ``<env>_v<version>``.

``mock_v0`` (cheap deterministic stand-in for throughput benchmarks), ``counter_v0`` (every output a literal,
for tests), ``variable_agents_v0`` (agents that leave early and join late), ``identity_v0`` (learning sanity
checks with MultiDiscrete or Box actions), ``memory_v0`` (a cue to recall ``delay`` steps later, for recurrent
policies), ``matrix_game_v0`` (one-shot normal-form games such as rock-paper-scissors), ``kuhn_poker_v0``
(3-card Kuhn poker, turn-based with action masks) and ``bucket_brigade_v0`` (a cooperative firefighting social
dilemma). Every module has ``parallel_env(**kwargs)`` returning a PettingZoo ``ParallelEnv``; the turn-based
``kuhn_poker_v0`` also has ``env()`` and ``raw_env`` (AEC). The environments depend only on PettingZoo, Gymnasium
and NumPy, draw all randomness from ``np_random`` seeded by ``reset(seed=...)``, and pass PettingZoo's API and
seed tests.
"""

from marljoint_envs import (
    bucket_brigade_v0,
    counter_v0,
    identity_v0,
    kuhn_poker_v0,
    matrix_game_v0,
    memory_v0,
    mock_v0,
    variable_agents_v0,
)

__all__ = [
    "bucket_brigade_v0",
    "counter_v0",
    "identity_v0",
    "kuhn_poker_v0",
    "matrix_game_v0",
    "memory_v0",
    "mock_v0",
    "variable_agents_v0",
]
