"""VDN, QMIX, MASAC and MADDPG on two data-parallel ranks: one gradient step on a global batch split between the ranks
equals one process's step on the whole batch (to float rounding), the ranks' parameters stay bitwise equal, and a
run through the build path trains, checkpoints and resumes (bit for bit with the same ranks, by re-dealing the
replay shards with another number)."""

import copy
import dataclasses

import pytest
import torch
from rank_harness import run_ranks

from marljoint import PettingZooJointEnv
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.redundancy import RedundancyPenalty
from marljoint.run.build import build_trainer, make_env
from marljoint.run.spec import RunSpec

SMALL = {"num_envs": 4, "rollout_steps": 6, "hidden_sizes": (16,), "learning_starts": 50_000, "seed": 11}
BATCH = 24


def _spread():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=2, max_cycles=5, continuous_actions=True)


def _mock():
    from marljoint_envs import mock_v0

    return mock_v0.parallel_env(num_agents=3, max_cycles=5)


# name -> (env, algorithm, OffPolicyConfig changes, with the redundancy penalty). MASAC acts in a Box (its loss
# samples Gaussian noise), MADDPG in Discrete actions (Gumbel noise), with two actor updates in three steps; QMIX's
# copies split unevenly between the ranks, and so do the batch's rows.
CASES = {
    "vdn": (_mock, "vdn", {}, False),
    "qmix_redundancy_uneven": (_mock, "qmix", {"num_envs": 5}, True),  # 2 and 3 copies: 9 and 15 rows
    "masac_box": (_spread, "masac", {}, False),
    "maddpg_discrete_redundancy": (_mock, "maddpg", {"sac": {"actor_update_interval": 2}}, True),
}


class _Fixed:
    """A replay buffer that gives the same rows at every draw (the rows of a global batch a rank holds)."""

    def __init__(self, batch, start, stop):
        self.batch = type(batch)(*(_rows(field, start, stop) for field in batch))

    def sample(self, count, generator):
        assert count == self.batch.actions.shape[0]
        return self.batch

    def __len__(self):
        return self.batch.actions.shape[0]


def _rows(field, start, stop):
    return tuple(x[start:stop] for x in field) if isinstance(field, tuple) else field[start:stop]


def _weights(trainer):
    return [{n: p.detach().clone() for n, p in net.named_parameters()} for net in trainer.algorithm.networks]


def _gap(a, b):
    """The largest parameter difference, relative to the largest parameter magnitude of its network."""
    worst = 0.0
    for x, y in zip(a, b):
        scale = max(float(t.abs().max()) for t in y.values())
        worst = max(worst, max(float((x[n].double() - y[n].double()).abs().max()) for n in y) / scale)
    return worst


def _one_update(group, name, steps=3):
    env_fn, algorithm, changes, redundancy = CASES[name]
    config = OffPolicyConfig(algorithm=algorithm, batch_size=BATCH, **{**SMALL, **changes})
    start, stop = group.slice_of(config.num_envs)
    one = OffPolicyTrainer(PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=3), config)
    ranked = OffPolicyTrainer(
        PettingZooJointEnv(env_fn, num_envs=stop - start, seed=3, first_copy=start), config, ranks=group
    )
    for _ in range(3):  # the same transitions, and the reward scale's statistics of every rank's rewards
        one.collect()
        ranked.collect()
    batch = one.buffer.sample(BATCH, torch.Generator().manual_seed(5))
    rows = ranked.shards.rows
    one.buffer, ranked.buffer = _Fixed(batch, 0, BATCH), _Fixed(batch, *rows)
    aux = RedundancyPenalty(kind="xcorr", coef=0.5) if redundancy else None
    out = {"gaps": [], "ranked": [], "stats": []}
    for _ in range(steps):
        expected = one.gradient_step(aux)
        got = ranked.gradient_step(aux)
        out["gaps"].append(_gap(_weights(ranked), _weights(one)))
        out["ranked"].append(_weights(ranked))
        out["stats"].append((got, expected))
    return out


def _out_of_step(group):
    """Rank 0 gathers a checkpoint's shards while rank 1 gathers its iteration: both stop, naming what each did."""
    from marljoint.offpolicy.sharded import RankShards

    shards = RankShards(group, num_envs=4, buffer_size=8, batch_size=4, seed=0)
    try:
        if group.rank == 0:
            shards.state(None, None)
        else:
            shards.share_iteration(0, torch.zeros(0, 2), torch.zeros(0, 2, dtype=torch.bool), torch.zeros(0), [])
    except RuntimeError as exc:
        return str(exc)
    return None


def _equivalence(group):
    out = {name: _one_update(group, name) for name in CASES}
    out["out_of_step"] = _out_of_step(group)
    return out


def test_a_rank_that_checkpoints_while_the_others_collect_stops_every_rank(updates):
    mine, theirs = updates[0]["out_of_step"], updates[1]["out_of_step"]
    assert mine.startswith("rank 0 gathered a checkpoint's replay shards while ranks [1] gathered the iteration's")
    assert theirs.startswith("rank 1 gathered the iteration's transitions while ranks [0] gathered a checkpoint's")
    assert "the newest checkpoint is kept" in mine and "\n" not in mine


@pytest.fixture(scope="module")
def updates(tmp_path_factory):
    return run_ranks(_equivalence, tmp_path_factory.mktemp("offpolicy_update"))


@pytest.mark.parametrize("name", list(CASES))
def test_one_step_on_two_ranks_equals_one_process_on_the_whole_batch(updates, name):
    assert max(updates[0][name]["gaps"]) <= 1e-6
    assert max(updates[1][name]["gaps"]) <= 1e-6
    got, expected = updates[0][name]["stats"][-1]
    for key in ("td_loss", "critic_loss", "actor_loss", "total_loss", "aux_loss"):
        if key in expected:
            assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("name", list(CASES))
def test_the_ranks_parameters_are_bitwise_equal_after_every_step(updates, name):
    for mine, other in zip(updates[0][name]["ranked"], updates[1][name]["ranked"]):
        for x, y in zip(mine, other):
            assert all(torch.equal(x[n], y[n]) for n in x)


def _spec(algorithm):
    offpolicy = {"batch_size": 16, "learning_starts": 24, "updates_per_iteration": 2, "buffer_size": 60}
    values = {"env": "mock_v0", "env_kwargs": {"num_agents": 2, "max_cycles": 5}, "algorithm": algorithm}
    values.update(num_envs=4, rollout_steps=6, seed=7)
    return RunSpec.from_dict({**values, "hidden_sizes": [16], "torch_threads": 1, "offpolicy": offpolicy})


def _state(trainer):
    return copy.deepcopy({"trainer": trainer.state_dict(), "env": trainer.env_state()})


def _restored(spec, state, group):
    env = make_env(spec) if group is None else make_env(spec, ranks=group)
    trainer = build_trainer(spec, env) if group is None else build_trainer(spec, env, ranks=group)
    trainer.load_state_dict(state["trainer"])
    trainer.load_env_state(state["env"])
    return trainer


def _train_and_resume(group, algorithm):
    spec = _spec(algorithm)
    straight = build_trainer(spec, make_env(spec, ranks=group), ranks=group)
    rows = [straight.iteration_metrics(*straight.iterate()) for _ in range(2)]
    halfway = _state(straight)
    rows += [straight.iteration_metrics(*straight.iterate()) for _ in range(2)]
    resumed = _restored(spec, halfway, group)
    resumed_rows = [resumed.iteration_metrics(*resumed.iterate()) for _ in range(2)]
    # Another number of processes: the two shards dealt into one buffer, one process's buffer over two shards.
    alone = _restored(spec, halfway, None)
    loaded = (len(alone.buffer), float(alone.buffer.state_dict()["transitions"]["rewards"].sum()))
    alone.iterate()
    one = build_trainer(spec, make_env(spec))
    one.iterate()
    one.iterate()
    spread = _restored(spec, _state(one), group)
    spread_size = spread.shards.stored
    spread.iterate()
    return {
        "straight": (_weights(straight), straight.buffer.state_dict(), straight.env_steps, rows[2:]),
        "resumed": (_weights(resumed), resumed.buffer.state_dict(), resumed.env_steps, resumed_rows),
        "gradient_steps": straight.gradient_steps,
        "alone": (loaded, len(alone.buffer), alone.env_steps),
        "halfway": [
            (s["size"], float(s["transitions"]["rewards"].sum())) for s in halfway["trainer"]["ranks"]["shards"]
        ],
        "spread": (spread_size, len(one.buffer), spread.env_steps),
    }


def _runs(group, out_dir):
    from marljoint.checkpoint import list_checkpoints, load_checkpoint
    from marljoint.run.train import train_run

    out = {name: _train_and_resume(group, name) for name in ("vdn", "masac")}
    spec = dataclasses.replace(_spec("qmix"), total_steps=3 * 4 * 6, checkpoint_every=1)
    result = train_run(spec, out_dir / "run", progress=False, ranks=group)
    group.barrier()  # rank 0 has written everything
    saved = list_checkpoints(out_dir / "run" / "checkpoints")
    state = load_checkpoint(saved[-1])["trainer"]
    shards = state["ranks"]["shards"]
    out["run"] = (result.iterations, result.env_steps, len(saved), [s["size"] for s in shards], state["iteration"])
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offpolicy_runs")
    return run_ranks(_runs, tmp, out_dir=tmp)


@pytest.mark.parametrize("algorithm", ["vdn", "masac"])
def test_a_run_on_two_ranks_resumed_halfway_equals_the_straight_run_bit_for_bit(runs, algorithm):
    for rank in runs:
        got = rank[algorithm]
        assert got["gradient_steps"] > 0  # learning started within the four iterations
        straight, resumed = got["straight"], got["resumed"]
        for x, y in zip(straight[0], resumed[0]):
            assert all(torch.equal(x[n], y[n]) for n in x)
        assert straight[2] == resumed[2] == 4 * 4 * 6
        for key, value in straight[1]["transitions"].items():
            other = resumed[1]["transitions"][key]
            assert all(map(torch.equal, value, other)) if isinstance(value, tuple) else torch.equal(value, other)
        timeless = [
            [{k: v for k, v in row.items() if k != "sps"} for row in rows] for rows in (straight[3], resumed[3])
        ]
        for row, other in zip(*timeless):  # the metrics rows, of the whole run's episodes
            assert row == pytest.approx(other, rel=0, abs=0, nan_ok=True)
    for x, y in zip(runs[0][algorithm]["straight"][0], runs[1][algorithm]["straight"][0]):
        assert all(torch.equal(x[n], y[n]) for n in x)


@pytest.mark.parametrize("algorithm", ["vdn", "masac"])
def test_a_run_resumes_with_another_number_of_processes_by_dealing_its_replay_out_again(runs, algorithm):
    got = runs[0][algorithm]
    (loaded, rewards), stored, env_steps = got["alone"]
    assert loaded == sum(size for size, _ in got["halfway"]) == 2 * 4 * 6  # every shard's transitions, in one buffer
    assert rewards == pytest.approx(sum(r for _, r in got["halfway"]))
    assert (stored, env_steps) == (60, 3 * 4 * 6)  # and it trains on: 24 more, the newest 60 kept
    spread_size, one_size, spread_steps = got["spread"]
    assert spread_size == one_size  # one process's buffer dealt over the two shards, nothing lost
    assert spread_steps == 3 * 4 * 6


def test_a_run_on_two_ranks_trains_through_the_run_driver_and_rank_0_checkpoints_every_shard(runs):
    iterations, env_steps, checkpoints, shard_sizes, saved_iteration = runs[0]["run"]
    assert (iterations, env_steps, saved_iteration) == (3, 72, 3)
    assert checkpoints >= 1 and len(shard_sizes) == 2 and all(size > 0 for size in shard_sizes)
    assert runs[1]["run"][:2] == (3, 72)
