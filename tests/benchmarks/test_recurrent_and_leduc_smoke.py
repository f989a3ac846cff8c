"""Keeps benchmarks/recurrent_po.py and benchmarks/leduc.py runnable: tiny budgets, the CSV rows, the skipping
of finished runs and the reports (nothing about learning is asserted: that is what the benchmarks measure)."""

import csv
import math
import sys

import numpy as np
import pytest
from _benchmark_module import benchmark_module

pytest.importorskip("mpe2")


def test_the_partially_observable_task_hides_the_velocity_and_stacking_shows_the_past():
    with benchmark_module("recurrent_po") as bench:
        plain, stacked = bench.spread_without_velocity(1), bench.spread_without_velocity(4)
        agent = plain.possible_agents[0]
        width = plain.observation_space(agent).shape[0]
        assert stacked.observation_space(agent).shape == (4 * width,)
        from mpe2 import simple_spread_v3

        raw = simple_spread_v3.parallel_env(N=3, max_cycles=25)
        obs_raw, _ = raw.reset(seed=5)
        obs, _ = plain.reset(seed=5)
        np.testing.assert_array_equal(obs[agent], obs_raw[agent][bench.VELOCITY :])


def test_the_landmarks_are_seen_on_the_first_observation_only():
    with benchmark_module("recurrent_po") as bench:
        from mpe2 import simple_spread_v3

        env, raw = bench.spread_landmarks_at_start(1), simple_spread_v3.parallel_env(N=3, max_cycles=25)
        first, _ = env.reset(seed=3)
        first_raw, _ = raw.reset(seed=3)
        agent = env.possible_agents[0]
        np.testing.assert_array_equal(first[agent], first_raw[agent])
        assert np.abs(first[agent][bench.LANDMARKS]).sum() > 0
        actions = {a: 1 for a in env.agents}
        obs, *_ = env.step(actions)
        obs_raw, *_ = raw.step(actions)
        hidden = np.zeros_like(obs_raw[agent])
        hidden[bench.LANDMARKS] = obs_raw[agent][bench.LANDMARKS]
        np.testing.assert_array_equal(obs[agent], obs_raw[agent] - hidden)  # all but the landmarks, unchanged
        assert not obs[agent][bench.LANDMARKS].any()
        from marljoint import episode_limit

        assert episode_limit(env) == 25  # the wrapper keeps the episode length visible (gamma follows it)


def test_the_landmarks_are_seen_on_every_8th_observation_only_in_every_episode():
    with benchmark_module("recurrent_po") as bench:
        from mpe2 import simple_spread_v3

        env, raw = bench.spread_landmarks_every_8(1), simple_spread_v3.parallel_env(N=3, max_cycles=25)
        agent = env.possible_agents[0]
        for episode in range(2):  # the count restarts with each episode
            obs, _ = env.reset(seed=episode)
            obs_raw, _ = raw.reset(seed=episode)
            seen = []
            for t in range(25):
                hidden = np.zeros_like(obs_raw[agent])
                hidden[bench.LANDMARKS] = obs_raw[agent][bench.LANDMARKS]
                shown = bool(np.abs(obs[agent][bench.LANDMARKS]).sum() > 0)
                expected = obs_raw[agent] if shown else obs_raw[agent] - hidden  # all but the landmarks, unchanged
                np.testing.assert_array_equal(obs[agent], expected)
                seen.append(shown)
                actions = {a: (t + episode) % 5 for a in env.agents}
                obs, *_ = env.step(actions)
                obs_raw, *_ = raw.step(actions)
            assert [t for t, s in enumerate(seen) if s] == [0, 8, 16, 24]
        from marljoint import episode_limit

        assert episode_limit(env) == 25
        stacked, _ = bench.spread_landmarks_every_8(4).reset(seed=3)
        assert stacked[agent].shape == (4 * obs[agent].shape[0],)


def test_the_speaker_is_told_the_goal_on_the_first_observation_only():
    with benchmark_module("recurrent_po") as bench:
        from mpe2 import simple_speaker_listener_v4

        env = bench.speaker_listener_goal_at_start(1)
        raw = simple_speaker_listener_v4.parallel_env(max_cycles=25)
        first, _ = env.reset(seed=3)
        first_raw, _ = raw.reset(seed=3)
        for agent in env.possible_agents:
            np.testing.assert_array_equal(first[agent], first_raw[agent])
        assert first[bench.SPEAKER].any()
        for _ in range(3):
            actions = {a: 1 for a in env.agents}
            obs, *_ = env.step(actions)
            obs_raw, *_ = raw.step(actions)
            assert not obs[bench.SPEAKER].any()  # the goal is gone
            np.testing.assert_array_equal(obs["listener_0"], obs_raw["listener_0"])  # the listener's is unchanged
        from marljoint import episode_limit

        assert episode_limit(env) == 25
        stacked, _ = bench.speaker_listener_goal_at_start(4).reset(seed=3)
        assert stacked[bench.SPEAKER].shape == (4 * first[bench.SPEAKER].shape[0],)


def test_the_listener_hears_the_goal_once_and_the_env_passes_the_api_test():
    with benchmark_module("recurrent_po") as bench:
        from mpe2 import simple_speaker_listener_v4
        from pettingzoo.test import parallel_api_test

        parallel_api_test(bench.speaker_listener_word_once(1), num_cycles=60)
        env = bench.speaker_listener_word_once(1)
        raw = simple_speaker_listener_v4.parallel_env(max_cycles=25)
        assert env.possible_agents == [bench.LISTENER]  # the speaker is scripted, not trained
        for seed in range(4):
            first, _ = env.reset(seed=seed)
            first_raw, _ = raw.reset(seed=seed)
            goal = int(np.argmax(first_raw[bench.SPEAKER]))
            assert raw.unwrapped.world.agents[0].goal_b is raw.unwrapped.world.landmarks[goal]
            np.testing.assert_array_equal(first[bench.LISTENER][bench.WORD], np.eye(3)[goal])
            np.testing.assert_array_equal(first[bench.LISTENER][:-3], first_raw[bench.LISTENER][:-3])
            for t in range(25):
                action = (t + seed) % 5
                obs, rewards, terms, truncs, _ = env.step({bench.LISTENER: action})
                obs_raw, rewards_raw, *_ = raw.step({bench.SPEAKER: 0, bench.LISTENER: action})
                assert not obs[bench.LISTENER][bench.WORD].any()  # silence after the first observation
                np.testing.assert_array_equal(obs[bench.LISTENER][:-3], obs_raw[bench.LISTENER][:-3])
                assert rewards[bench.LISTENER] == rewards_raw[bench.LISTENER]
            assert truncs[bench.LISTENER] and env.agents == []
        from marljoint import episode_limit

        assert episode_limit(bench.speaker_listener_word_once(1)) == 25
        stacked, _ = bench.speaker_listener_word_once(4).reset(seed=3)
        assert stacked[bench.LISTENER].shape == (4 * first[bench.LISTENER].shape[0],)
        always = bench.speaker_listener_word_always(1)  # the reference hears the same word on every step
        first_always, _ = always.reset(seed=2)
        for _ in range(3):
            obs, *_ = always.step({bench.LISTENER: 2})
            np.testing.assert_array_equal(obs[bench.LISTENER][bench.WORD], first_always[bench.LISTENER][bench.WORD])
        assert first_always[bench.LISTENER][bench.WORD].sum() == 1


@pytest.mark.slow  # a whole benchmark command end to end: seconds to tens of seconds on 2 cores
def test_the_recurrent_benchmark_trains_every_policy_resumes_and_reports(tmp_path, monkeypatch, capsys):
    with benchmark_module("recurrent_po") as bench:
        out = tmp_path / "po.csv"
        argv = ["recurrent_po.py", "--seeds", "0", "--env-steps", "2048", "--episodes", "2", "--out", str(out)]
        monkeypatch.setattr(sys, "argv", argv)
        bench.main()
        with out.open(newline="") as f:
            rows = list(csv.DictReader(f))
        assert {(r["method"], r["mode"]) for r in rows} == {
            (m, mode) for m in ("mlp", "mlp+stack4", "gru") for mode in ("greedy", "sampled")
        }
        bench.main()  # finished runs are not trained again
        assert len(out.read_text().splitlines()) == 1 + len(rows)
        monkeypatch.setattr(sys, "argv", ["recurrent_po.py", "--report", "--out", str(out)])
        bench.main()
        assert "| gru |" in capsys.readouterr().out
        argv = ["recurrent_po.py", "--report", "--task", "spread_no_velocity", "--out", str(out)]
        monkeypatch.setattr(sys, "argv", argv)
        bench.main()
        assert "| gru |" not in capsys.readouterr().out  # the runs were of the other task


def test_the_leduc_benchmark_reads_checkpoints_and_reports(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyspiel")
    with benchmark_module("leduc") as bench:
        history = [{"wall_time": 5.0, "exploitability": 2.0, "iteration": 1},
                   {"wall_time": 50.0, "exploitability": 1.0, "iteration": 2}]
        points = bench.at_checkpoints(history, (1.0, 10.0, 60.0))
        assert math.isnan(points[0][1]) and points[1][1:] == (2.0, 1) and points[2][1:] == (1.0, 2)
        out = tmp_path / "leduc.csv"
        argv = ["leduc.py", "--methods", "nfsp", "--seeds", "0", "--seconds", "1", "--checkpoints", "1", "60"]
        monkeypatch.setattr(sys, "argv", argv + ["--out", str(tmp_path / "runs"), "--csv", str(out)])
        bench.main()
        rows = list(csv.DictReader(out.open(newline="")))
        assert [r["checkpoint_s"] for r in rows] == ["1.0", "60.0"] and rows[0]["method"] == "nfsp"
        assert 0.0 < float(rows[-1]["exploitability"]) < 4.0  # OpenSpiel's figure after one iteration
        png = tmp_path / "curves.png"
        argv = ["leduc.py", "--report", "--csv", str(out), "--out", str(tmp_path / "runs"), "--plot", str(png)]
        monkeypatch.setattr(sys, "argv", argv)
        bench.main()
        printed = capsys.readouterr().out
        assert "| nfsp |" in printed and "1 runs drawn" in printed  # the run's metrics, found under --out
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_leduc_benchmark_applies_set_changes_on_top_of_the_recipe():
    pytest.importorskip("pyspiel")
    with benchmark_module("leduc") as bench:
        changes = bench.parse_changes(["warm_start=false", "trainer.learning_rate=3e-3", "trainer.hidden_sizes=[8]"])
        assert changes == ({"warm_start": False}, {"learning_rate": 3e-3, "hidden_sizes": (8,)})
        psro = bench.build("psro-exact", 0, changes)
        assert psro.config.warm_start is False and psro.config.evaluation == "exact"
        assert psro.config.trainer.learning_rate == 3e-3 and psro.config.trainer.hidden_sizes == (8,)
        plain = bench.build("psro-sim", 0)
        assert plain.config.warm_start is True and plain.config.warm_start_policy_scale == 0.3  # the recipe's
        nfsp = bench.build("nfsp", 1, bench.parse_changes(["anticipatory=0.2"]))
        assert nfsp.config.anticipatory == 0.2 and nfsp.config.seed == 1
        with pytest.raises(SystemExit, match="--set expects FIELD=VALUE"):
            bench.parse_changes(["warm_start"])


def test_the_population_step_benchmark_runs_both_ways_with_the_same_members(monkeypatch, capsys):
    pytest.importorskip("pyspiel")
    with benchmark_module("population_step") as bench:
        monkeypatch.setattr(sys, "argv", ["population_step.py", "--members", "3", "--steps", "3", "--repetitions", "1"])
        bench.main()
    line = capsys.readouterr().out.strip()
    assert line.startswith("3 members: one call per member") and "stacked" in line


@pytest.mark.slow  # a whole benchmark command end to end: seconds to tens of seconds on 2 cores
def test_the_population_step_benchmark_times_meta_game_simulation_per_number_of_copies(monkeypatch, capsys):
    pytest.importorskip("pyspiel")
    with benchmark_module("population_step") as bench:
        argv = ["population_step.py", "--game", "openspiel:kuhn_poker", "--members", "2", "--repetitions", "1",
                "--simulate-copies", "4", "8"]
        monkeypatch.setattr(sys, "argv", argv)
        bench.main()
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["2 members, 4 copies", "2 members, 8 copies"]
    assert all(float(line.split(": ")[1].split(" s ")[0]) > 0 for line in lines)


def test_leduc_set_items_given_twice_add_up():
    with benchmark_module("leduc") as bench:
        args = bench.command_line().parse_args(["--set", "br_steps=80000", "--set", "trainer.learning_rate=0.003"])
        assert bench.parse_changes(args.set) == ({"br_steps": 80000}, {"learning_rate": 0.003})


def test_the_common_random_numbers_benchmark_prints_both_spreads(monkeypatch, capsys):
    pytest.importorskip("pyspiel")
    with benchmark_module("common_random_numbers") as bench:
        argv = ["common_random_numbers.py", "--game", "openspiel:kuhn_poker", "--episodes", "4", "--repetitions", "3"]
        monkeypatch.setattr(sys, "argv", argv)
        bench.main()
    rows = capsys.readouterr().out.strip().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| independent", "| common"]
    spreads = [[float(x) for x in " ".join(row.strip("| ").split(" | ")[1:]).split()] for row in rows]
    assert all(len(s) == 9 and all(np.isfinite(s)) and max(s) > 0 for s in spreads)
