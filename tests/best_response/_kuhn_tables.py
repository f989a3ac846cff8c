"""Kuhn poker tables shared by the tests: uniform, always-pass and the equilibrium family."""

import numpy as np

UNIFORM = np.full((6, 2), 0.5)
ALWAYS_PASS = np.tile([1.0, 0.0], (6, 1))


def equilibrium(alpha):
    """The known equilibrium family (Kuhn, 1950), rows in KUHN_INFOSETS order."""
    player_0 = np.array(
        [
            [1 - alpha, alpha],  # J, "": bet with alpha
            [1.0, 0.0],  # J, "pb": fold
            [1.0, 0.0],  # Q, "": check
            [2 / 3 - alpha, alpha + 1 / 3],  # Q, "pb": call with alpha + 1/3
            [1 - 3 * alpha, 3 * alpha],  # K, "": bet with 3 alpha
            [0.0, 1.0],  # K, "pb": call
        ]
    )
    player_1 = np.array(
        [
            [2 / 3, 1 / 3],  # J, "p": bet with 1/3
            [1.0, 0.0],  # J, "b": fold
            [1.0, 0.0],  # Q, "p": check
            [2 / 3, 1 / 3],  # Q, "b": call with 1/3
            [0.0, 1.0],  # K, "p": bet
            [0.0, 1.0],  # K, "b": call
        ]
    )
    return [player_0, player_1]
