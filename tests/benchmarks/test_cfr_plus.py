"""benchmarks/cfr_plus.py: OpenSpiel's CFR+ as the tabular floor, its curve and its time to a target."""

import pytest

from tests.benchmarks._benchmark_module import benchmark_module

pytest.importorskip("pyspiel")


def test_cfr_plus_solves_kuhn_poker_and_says_when_it_reached_each_target():
    with benchmark_module("cfr_plus") as cfr_plus:
        curve = cfr_plus.cfr_plus_curve("kuhn_poker", seconds=0.2)
        assert [n for _, n, _ in curve[:4]] == [1, 2, 4, 8]  # scored at every power of two
        assert curve[-1][2] < 0.01 < curve[0][2]  # uniform-ish at first, solved by the end
        seconds, iterations = cfr_plus.time_to(curve, 0.05)
        assert 0 < seconds <= curve[-1][0] and iterations >= 1
        assert cfr_plus.time_to(curve, -1.0) is None
        text = cfr_plus.report("kuhn_poker", curve, [0.05, -1.0])
        assert "to 0.05: " in text and "to -1: not within the budget" in text


def test_a_game_of_simultaneous_moves_is_solved_in_its_turn_based_form():
    with benchmark_module("cfr_plus") as cfr_plus:
        curve = cfr_plus.cfr_plus_curve("goofspiel(num_cards=3,imp_info=True,points_order=descending)", seconds=0.2)
        assert curve[-1][2] < curve[0][2]
