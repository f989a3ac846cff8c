"""Bit-identity fingerprints: rollout and parameter hashes after 3 training iterations, for many kinds of run.

A refactoring that must not change behaviour is checked by computing the hashes before and after it, on the same
machine (float kernels, and so the bits, depend on the CPU and the torch build)::

    python benchmarks/identity_hashes.py --out before.json
    # ... change the code ...
    python benchmarks/identity_hashes.py --compare before.json      # exit status 1 on any difference

Each case builds a trainer, runs 3 iterations (collect, update) and hashes every rollout tensor of every
iteration (observations, actions, masks, log-probabilities, values, rewards, flags, carried and deferred moves)
and every network parameter and buffer at the end.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import supersuit
import torch
from gymnasium import spaces

from marljoint import JointMultiAgentTrainer, JointTrainerConfig
from marljoint.collect import CollectionConfig
from marljoint.redundancy import RedundancyPenalty
from marljoint_envs import bucket_brigade_v0, counter_v0, identity_v0, kuhn_poker_v0, mock_v0, variable_agents_v0

ITERATIONS = 3


def _image_mock() -> Any:
    """mock_v0 seen as 36 × 36 grey images (the smallest the default CNN takes)."""
    space = spaces.Box(0, 255, (36, 36, 1), np.uint8)
    return supersuit.observation_lambda_v0(
        mock_v0.parallel_env(num_agents=2),
        lambda obs, _space: np.full((36, 36, 1), int((obs[0] + 1) * 100), np.uint8),
        lambda _space: space,
    )


def _turns_of_counter() -> Any:
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(counter_v0.parallel_env(num_agents=2, truncate_at=3))


# name -> (env factory, config overrides, extras: "active" (frozen agents), "aux", "resume")
CASES: dict[str, tuple[Callable[[], Any], dict[str, Any], dict[str, Any]]] = {
    "sync-shared-discrete": (mock_v0.parallel_env, {}, {}),
    "sync-stacked-multidiscrete": (
        functools.partial(bucket_brigade_v0.parallel_env, scenario="easy"),
        {"share_parameters": False},
        {},
    ),
    "sync-box": (functools.partial(identity_v0.parallel_env, action_type="box", box_dim=2), {}, {}),
    "sync-cnn": (_image_mock, {"minibatch_size": 16}, {}),
    "sync-aec-kuhn": (kuhn_poker_v0.env, {"share_parameters": False, "gamma": 1.0}, {}),
    "sync-aec-truncated": (_turns_of_counter, {}, {}),
    "sync-centralised-dying-agents": (
        variable_agents_v0.parallel_env,
        {"centralized_critic": True, "share_parameters": False},
        {},
    ),
    "sync-centralised-split-critic": (mock_v0.parallel_env, {"critic_lr": 1e-3, "centralized_critic": True}, {}),
    "sync-shared-trunk": (mock_v0.parallel_env, {"share_trunk": True}, {}),
    # The same run collected three ways: the three hashes must agree.
    "sync-aec-kuhn-shared": (kuhn_poker_v0.env, {}, {}),
    "sync-frozen-agent": (kuhn_poker_v0.env, {"share_parameters": False}, {"active": [True, False]}),
    "sync-redundancy": (mock_v0.parallel_env, {"share_parameters": False}, {"aux": True}),
    "sync-resume": (kuhn_poker_v0.env, {"share_parameters": False, "anneal_lr": True}, {"resume": True}),
    "subprocess-variable-agents": (
        variable_agents_v0.parallel_env,
        {"collection": CollectionConfig("subprocess", workers=2)},
        {},
    ),
    "subprocess-aec-kuhn": (kuhn_poker_v0.env, {"collection": CollectionConfig("subprocess", workers=2)}, {}),
    "ray-aec-kuhn": (kuhn_poker_v0.env, {"collection": CollectionConfig("ray", workers=2)}, {}),
    # sync-resume collected in workers: both must give sync-resume's hashes.
    "subprocess-resume": (
        kuhn_poker_v0.env,
        {"share_parameters": False, "anneal_lr": True, "collection": CollectionConfig("subprocess", workers=2)},
        {"resume": True},
    ),
    "ray-resume": (
        kuhn_poker_v0.env,
        {"share_parameters": False, "anneal_lr": True, "collection": CollectionConfig("ray", workers=2)},
        {"resume": True},
    ),
}


def _config(overrides: dict[str, Any]) -> JointTrainerConfig:
    base = {"num_envs": 4, "rollout_steps": 16, "minibatch_size": 32, "n_epochs": 2, "seed": 3, "torch_threads": 1}
    return JointTrainerConfig(**{**base, **overrides})


def _build(env_fn: Callable[[], Any], config: JointTrainerConfig) -> JointMultiAgentTrainer:
    env = config.collection.make_env(env_fn, config.num_envs, config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def _hash_rollout(digest: Any, rollout: Any) -> None:
    tensors = [*rollout.obs, *rollout.actions, *(m for m in rollout.action_masks if m is not None)]
    names = ("log_probs", "values", "rewards", "terminated", "truncated", "alive", "acting", "final_values")
    tensors += [getattr(rollout, name) for name in (*names, "bootstrap_values")]
    for name in ("next_alive", "next_acting", "truncated_waiting", "deferred"):
        tensors.append(getattr(rollout, name, None))
    for tensor in tensors:
        digest.update(b"-" if tensor is None else tensor.detach().cpu().contiguous().numpy().tobytes())
    carried = getattr(rollout, "carried", None)
    if carried is not None:
        _hash_rollout(digest, carried)
    digest.update(np.ascontiguousarray(rollout.episode_returns).tobytes())


def _hash_parameters(digest: Any, trainer: JointMultiAgentTrainer) -> None:
    for policy in trainer.policies:
        for name, value in policy.state_dict().items():
            digest.update(name.encode())
            digest.update(value.detach().cpu().contiguous().numpy().tobytes())


def run_case(name: str) -> dict[str, str]:
    """The rollout and parameter hashes of one case."""
    env_fn, overrides, extras = CASES[name]
    config = _config(overrides)
    trainer = _build(env_fn, config)
    aux = RedundancyPenalty(kind="xcorr", coef=0.1) if extras.get("aux") else None
    rollouts = hashlib.sha256()
    end = ITERATIONS
    for k in range(ITERATIONS):
        if extras.get("resume") and k == 1:
            # Continue in a fresh trainer from a checkpoint taken after the first iteration.
            state, env_state = trainer.state_dict(), trainer.env_state()
            trainer.env.close()
            trainer = _build(env_fn, config)
            trainer.load_state_dict(state)
            trainer.load_env_state(env_state)
        if config.anneal_lr:
            trainer.anneal_learning_rate(end)
        rollout = trainer.collect_rollout()
        _hash_rollout(rollouts, rollout)
        trainer.update(rollout, aux_fn=aux, active=extras.get("active"))
        trainer.iteration += 1
    parameters = hashlib.sha256()
    _hash_parameters(parameters, trainer)
    trainer.close()
    trainer.env.close()
    return {"rollouts": rollouts.hexdigest()[:20], "parameters": parameters.hexdigest()[:20]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=sorted(CASES), choices=sorted(CASES))
    parser.add_argument("--out", type=Path, help="write the hashes to this JSON file")
    parser.add_argument("--compare", type=Path, help="compare with the hashes of this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    hashes = {}
    for name in args.cases:
        hashes[name] = run_case(name)
        print(f"{name:34s} rollouts {hashes[name]['rollouts']}  parameters {hashes[name]['parameters']}", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(hashes, indent=2, sort_keys=True) + "\n")
    if args.compare is not None:
        expected = json.loads(args.compare.read_text())
        differ = [name for name in hashes if expected.get(name) != hashes[name]]
        print("identical" if not differ else f"DIFFERENT: {differ}")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
