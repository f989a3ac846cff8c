"""RankGroup: joining from torchrun's variables, the collectives the trainer uses, and the divergence check."""

import os
import pathlib

import pytest
import torch
from rank_harness import run_ranks

from marljoint.distributed.ranks import RankGroup, RanksDiverged, row_shares


def _collectives(group):
    a = torch.full((3,), float(group.rank + 1))
    b = torch.tensor([[1.0, 2.0]]) * (group.rank + 1)
    c = torch.tensor([group.rank + 1], dtype=torch.int64)
    group.all_reduce_sum_([a, b, c])
    d = torch.tensor(float(group.rank + 1))  # one tensor, a scalar: summed where it is
    group.all_reduce_sum_([d])
    sizes = (2, 1)  # unequal shares: rank 0 holds two rows, rank 1 one
    rows = torch.arange(sizes[group.rank] * 2, dtype=torch.float32).reshape(-1, 2) + 10 * group.rank
    rows.requires_grad_(True)
    gathered = group.gather_rows(rows, sizes)
    (gathered * torch.arange(1.0, 4.0).unsqueeze(1)).sum().backward()
    group.barrier()
    return {
        "a": a,
        "b": b,
        "c": c,
        "d": d,
        "objects": group.all_gather_object({"rank": group.rank}),
        "broadcast": group.broadcast_object(f"from {group.rank}"),
        "slice": group.slice_of(5),
        "gathered": gathered.detach(),
        "grad": rows.grad,
        "writer": group.is_writer,
        "world": (group.rank, group.world_size, group.local_rank, group.backend),
    }


def test_two_ranks_join_from_torchrun_variables_and_share_sums_objects_and_rows(tmp_path):
    out = run_ranks(_collectives, tmp_path)
    for r, got in enumerate(out):
        assert got["world"] == (r, 2, r, "gloo")
        assert torch.equal(got["a"], torch.full((3,), 3.0))
        assert torch.equal(got["b"], torch.tensor([[3.0, 6.0]]))
        assert torch.equal(got["c"], torch.tensor([3]))
        assert torch.equal(got["d"], torch.tensor(3.0))
        assert got["objects"] == [{"rank": 0}, {"rank": 1}]
        assert got["broadcast"] == "from 0"
        assert torch.equal(got["gathered"], torch.tensor([[0.0, 1.0], [2.0, 3.0], [10.0, 11.0]]))
    assert [got["slice"] for got in out] == [(0, 2), (2, 5)]  # collect's one slicing rule
    assert [got["writer"] for got in out] == [True, False]
    # Each rank keeps the gradient of its own rows of the gathered tensor.
    assert torch.equal(out[0]["grad"], torch.tensor([[1.0, 1.0], [2.0, 2.0]]))
    assert torch.equal(out[1]["grad"], torch.tensor([[3.0, 3.0]]))


def _check(group, perturb):
    params = {"actor.weight": torch.ones(4, 3), "critic.bias": torch.zeros(2)}
    if perturb and group.rank == 1:
        params["critic.bias"][1] = 1e-30  # one tiny change of one element's bits
    try:
        group.check_identical(params, "parameters", iteration=7)
    except RanksDiverged as exc:
        return str(exc)
    return None


def test_identical_parameters_pass_the_check(tmp_path):
    assert run_ranks(_check, tmp_path, perturb=False) == [None, None]


def test_one_rank_s_perturbed_parameter_raises_ranks_diverged_on_every_rank(tmp_path):
    messages = run_ranks(_check, tmp_path, perturb=True)
    assert messages[0] == messages[1]
    assert "\n" not in messages[0]
    with pytest.raises(RanksDiverged, match=r"ranks \[1\] hold other parameters than rank 0 at iteration 7 "):
        raise RanksDiverged("parameters", [1], ["critic.bias"], 7)
    assert "differing: critic.bias)" in messages[0] and "ranks [1]" in messages[0] and "iteration 7" in messages[0]


def test_one_process_has_no_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert RankGroup.from_environment() is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert RankGroup.from_environment() is None


def test_missing_or_bad_torchrun_variables_are_named(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(ValueError, match="environment variable MASTER_PORT is not set, but WORLD_SIZE=2"):
        RankGroup.from_environment()
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="environment variable RANK='two' must be a non-negative integer"):
        RankGroup.from_environment()
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match=r"RANK=2 is outside 0..1 \(WORLD_SIZE=2\)"):
        RankGroup.from_environment()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_cuda_run_without_its_gpu_is_refused(monkeypatch):
    for name, value in {
        "WORLD_SIZE": "2",
        "RANK": "1",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "x",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"LOCAL_RANK=1 needs GPU cuda:1, but this machine has 0 CUDA device\(s\)"):
        RankGroup.from_environment(device="cuda")


def test_row_shares_cut_like_tensor_split():
    for count in range(0, 9):
        for k in (1, 2, 3):
            expected = [(int(p[0]), int(p[-1]) + 1) if len(p) else None for p in torch.arange(count).tensor_split(k)]
            got = row_shares(count, k)
            assert [b - a for a, b in got] == [len(p) for p in torch.arange(count).tensor_split(k)]
            assert all(e is None or e == g for e, g in zip(expected, got))


def _state_failure(group, kind):
    from marljoint import PettingZooJointEnv
    from marljoint.collect.ranks import RankCollector
    from marljoint_envs import counter_v0

    start, stop = group.slice_of(4)
    env = PettingZooJointEnv(counter_v0.parallel_env, num_envs=stop - start, seed=0, first_copy=start)
    collector = RankCollector(env, 0, 4, group)
    if group.rank == 1:

        def fail():
            raise kind("this env cannot be pickled")

        collector.local.state = fail
    try:
        collector.state()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    finally:
        env.close()
    return None


@pytest.mark.parametrize("kind", [TypeError, RuntimeError])
def test_one_rank_s_env_state_failure_reaches_every_rank_at_once(tmp_path, kind):
    out = run_ranks(_state_failure, tmp_path, kind=kind)
    assert out[1] == (kind.__name__, "this env cannot be pickled")  # the failing rank raises its own error
    name, message = out[0]
    assert name == kind.__name__  # a TypeError everywhere, so that every rank saves its checkpoint without the env
    with pytest.raises(kind, match=r"^rank 1 could not save its env copies' state: this env cannot be pickled"):
        raise kind(message)


def _threads_after_close(group):
    import torch._dynamo  # noqa: F401  (as an optimizer's first step imports it, after the group was joined)

    group.all_gather_object(group.rank)
    group.close()
    return [pathlib.Path(f"/proc/self/task/{tid}/comm").read_text().strip() for tid in os.listdir("/proc/self/task")]


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").is_dir(), reason="reads the threads from /proc")
def test_closing_the_group_ends_its_gloo_threads(tmp_path):
    # Threads left alive are torn down with the interpreter, which can end a finished rank with SIGABRT.
    for names in run_ranks(_threads_after_close, tmp_path):
        assert not [name for name in names if "gloo" in name], names
