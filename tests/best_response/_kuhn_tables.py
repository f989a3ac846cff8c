"""Kuhn poker tables shared by the tests: uniform, always-pass, the equilibrium family, and those of a trained run."""

import json

import numpy as np
import pytest

from marljoint.best_response.games import KuhnGame
from marljoint.run.evaluate import load_run

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


def column(rows, name):
    """The float values of a metrics column, on the rows that have one."""
    return [float(r[name]) for r in rows if r.get(name) not in (None, "")]


def run_tables(run_dir, checkpoint=None):
    """Both seats' policies of a Kuhn poker run (its newest checkpoint, or ``checkpoint``) as tables."""
    run = load_run(run_dir, checkpoint)
    try:
        return KuhnGame().tables([run.agent_policy(0), run.agent_policy(1)])
    finally:
        run.close()


def openspiel_exploitability(path):
    """OpenSpiel's exploitability (NashConv / 2) of a Kuhn poker policy file in OpenSpiel's form (skips the test
    without pyspiel)."""
    pyspiel = pytest.importorskip("pyspiel")
    with open(path) as f:
        policy = {key: [tuple(pair) for pair in pairs] for key, pairs in json.load(f).items()}
    assert len(policy) == 12  # every information state of Kuhn poker
    return pyspiel.nash_conv(pyspiel.load_game("kuhn_poker"), policy) / 2
