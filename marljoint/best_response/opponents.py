"""Frozen policies in the seats of a JointEnv: training against opponents, and simulating meta-profiles.

:class:`PopulationEnv` wraps a :class:`~marljoint.env.JointEnv`. At the start of every episode of every env copy
an **assigner** decides who controls each seat for that whole episode: the learner (controller ``-1``: the
trainer's action is used) or member ``k`` of the seat's list of frozen policies (controller ``k``). Members' actions
are computed inside :meth:`PopulationEnv.step` and replace whatever the caller sent for those seats: a seat's
feed-forward network members act together as one :class:`~marljoint.policies.PolicyStack` (one batched call
whatever the number of members in use), other members one batched call each.

``acting`` then marks the learner's decisions only. The trainer derives row validity from ``alive & acting``, so
rows a frozen policy played never enter the learner's PPO loss, its advantage normalisation, its value
normaliser or its explained variance. How GAE treats those rows: an invalid row carries no decision, its reward
is credited to the agent's previous valid row and its value is skipped, and every episode end resets the
recursion. Because a seat's controller is fixed for a whole episode, a seat's rows in a frozen-controlled
episode are ALL invalid, so nothing of that episode reaches another episode's advantages: the learner's
advantages are exactly those of the episodes it played, bootstrapped as usual at the rollout end.

Each member acts on the device of its network (:func:`~marljoint.best_response.population.policy_device`):
its observations and masks go there and its actions come back to the CPU for the env.

Recurrent members (an :class:`~marljoint.policies.AgentPolicy` of a recurrent network) carry their own state per
(copy, seat): zeros when the copy's episode starts or the seat's agent appears, advanced on the seat's decisions
only, kept while it waits or is absent, so a frozen recurrent policy plays a whole episode with its memory as it
did in training.

This departs on purpose from one conformance rule of :func:`~marljoint.env.check_joint_env`: a copy whose
movers are all frozen policies has no acting agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np
import torch

from marljoint.best_response.population import FrozenPolicy, PolicyMixture, policy_device
from marljoint.env.base import JointEnv, JointObs, JointStep
from marljoint.env.snapshots import dump_snapshot, load_snapshot
from marljoint.policies.stack import PolicyStack

__all__ = [
    "LEARNER",
    "SeatAssigner",
    "MetaStrategyAssigner",
    "AnticipatoryAssigner",
    "FinishedEpisode",
    "PopulationEnv",
    "simulate_profiles",
    "mixture_profiles",
]

LEARNER = -1
"""Controller id of a seat whose actions come from the learner (the caller of ``step``)."""


class SeatAssigner(Protocol):
    """Chooses the controllers of the next episode of some env copies.

    Called as ``assign(rng, copies)`` with ``copies`` ``[k]`` env-copy indices; returns ``[k, N]`` int64:
    ``LEARNER`` (-1) or a member index of that seat.
    """

    def __call__(self, rng: np.random.Generator, copies: np.ndarray) -> np.ndarray: ...


class MetaStrategyAssigner:
    """PSRO's opponents: one learner seat per copy, every other seat drawn from its meta-strategy per episode.

    Copy ``e``'s learner seat is ``learner_seats[e % len(learner_seats)]`` (fixed, so each learner gets an equal
    share of the copies); with no learner seats every seat is drawn.

    Args:
        strategies: per seat, ``[n_seat]`` probabilities over that seat's members.
        learner_seats: the seats that learn.

    Raises:
        ValueError: a strategy that is not a distribution, or a learner seat out of range.
    """

    def __init__(self, strategies: Sequence[np.ndarray], learner_seats: Sequence[int] = ()) -> None:
        self.strategies = []
        for seat, strategy in enumerate(strategies):
            vector = np.asarray(strategy, dtype=np.float64).reshape(-1)
            if vector.size == 0 or np.any(vector < 0) or not np.isclose(vector.sum(), 1.0, atol=1e-6):
                raise ValueError(f"strategies[{seat}] = {vector} is not a probability vector")
            self.strategies.append(vector / vector.sum())
        self.learner_seats = np.asarray(list(learner_seats), dtype=np.int64)
        if np.any((self.learner_seats < 0) | (self.learner_seats >= len(self.strategies))):
            raise ValueError(
                f"learner_seats {self.learner_seats.tolist()} out of range for {len(self.strategies)} seats"
            )

    def __call__(self, rng: np.random.Generator, copies: np.ndarray) -> np.ndarray:
        controllers = np.stack(
            [rng.choice(len(strategy), size=len(copies), p=strategy) for strategy in self.strategies], axis=1
        ).astype(np.int64)
        if len(self.learner_seats):
            seats = self.learner_seats[np.asarray(copies) % len(self.learner_seats)]
            controllers[np.arange(len(copies)), seats] = LEARNER
        return controllers


class AnticipatoryAssigner:
    """NFSP's mixing: each seat, per episode, is the learner (best response) w.p. ``eta``, else member 0.

    Args:
        eta: the anticipatory parameter, in ``[0, 1]``.
        num_seats: N.
    """

    def __init__(self, eta: float, num_seats: int) -> None:
        if not 0.0 <= float(eta) <= 1.0:
            raise ValueError(f"eta={eta!r}; the anticipatory parameter must lie in [0, 1]")
        self.eta = float(eta)
        self.num_seats = int(num_seats)

    def __call__(self, rng: np.random.Generator, copies: np.ndarray) -> np.ndarray:
        best_response = rng.random((len(copies), self.num_seats)) < self.eta
        return np.where(best_response, LEARNER, 0).astype(np.int64)


class FinishedEpisode(NamedTuple):
    """An episode that ended during the last :meth:`PopulationEnv.step`.

    Attributes:
        copy: the env copy.
        controllers: ``[N]`` who controlled each seat.
        returns: ``[N]`` undiscounted returns.
    """

    copy: int
    controllers: np.ndarray
    returns: np.ndarray


class PopulationEnv:
    """A JointEnv whose seats are played, episode by episode, by the learner or by frozen member policies.

    See the module docstring for the semantics of ``acting``.

    Args:
        env: the JointEnv to wrap (its ``step`` receives the merged actions).
        members: per seat (``possible_agents`` order), its frozen policies; a seat the learner always plays may
            have none.
        assign: the :class:`SeatAssigner` called at every episode start.
        seed: seeds the assigner's generator and the members' sampling generator.

    Attributes:
        controllers: ``[E, N]`` the current episode's controller of every seat of every copy.
        finished: the episodes that ended during the last step.
        log: every episode finished since the last :meth:`drain_log` or reset.

    Raises:
        ValueError: ``members`` of the wrong length.
    """

    def __init__(
        self,
        env: JointEnv,
        members: Sequence[Sequence[FrozenPolicy]],
        assign: SeatAssigner,
        seed: int = 0,
    ) -> None:
        self.env = env
        self.spec = env.spec
        self.num_envs = env.num_envs
        if len(members) != self.spec.num_agents:
            raise ValueError(
                f"members has {len(members)} entries for {self.spec.num_agents} seats {list(self.spec.agents)}; "
                "pass one list of frozen policies per seat"
            )
        self.members = [list(seat) for seat in members]
        self.assign = assign
        self._seed_generators(seed)
        self.controllers = np.full((self.num_envs, self.spec.num_agents), LEARNER, dtype=np.int64)
        self.finished: list[FinishedEpisode] = []
        self.log: list[FinishedEpisode] = []
        self._returns = np.zeros((self.num_envs, self.spec.num_agents))
        self._state: JointObs | None = None
        self._memory: dict[tuple[int, int], torch.Tensor] = {}
        """(seat, member) → ``[E, S]`` the states a recurrent member acts from in each copy."""
        self._stacks: dict[int, tuple[PolicyStack | None, np.ndarray]] = {}

    def _seed_generators(self, seed: int) -> None:
        sequence = np.random.SeedSequence([int(seed) % 2**63, 0x706F70])
        assign_seed, torch_seed = sequence.spawn(2)
        self._rng = np.random.default_rng(assign_seed)
        self._generator = torch.Generator().manual_seed(int(torch_seed.generate_state(1, np.uint64)[0] % 2**63))

    def reset(self, seed: int | None = None) -> JointObs:
        """Resets every copy and assigns every copy's controllers; ``seed`` also reseeds the generators."""
        if seed is not None:
            self._seed_generators(seed)
        state = self.env.reset(seed=seed)
        self._state = state
        self._memory = {}
        self.controllers = self._assign(np.arange(self.num_envs))
        self._returns[:] = 0.0
        self.finished = []
        self.log = []
        return JointObs(state.obs, state.alive, self._learner_acting(state), state.action_masks)

    def step(self, actions: Sequence[np.ndarray] | None) -> JointStep:
        """Steps every copy: members' actions replace the caller's in the seats they control.

        Args:
            actions: per group, ``[E, n_g, *action_shape]`` (only the learner's seats are read); ``None`` when no
                seat is the learner's.
        """
        merged = self._merge(actions)
        step = self.env.step(merged)
        self._forget(step)
        self._returns += step.rewards
        self.finished = []
        done = np.flatnonzero(step.reset_envs)
        for e in done:
            self.finished.append(FinishedEpisode(int(e), self.controllers[e].copy(), self._returns[e].copy()))
        self.log.extend(self.finished)
        self._returns[done] = 0.0
        if len(done):
            self.controllers[done] = self._assign(done)
        self._state = JointObs(step.obs, step.alive, step.acting, step.action_masks)
        return step._replace(acting=self._learner_acting(step))

    def get_state(self) -> bytes:
        """Snapshot of the wrapped env's copies mid-episode (its :meth:`get_state`) and of this env's own state:
        who controls each seat, the running returns, the generators, the recurrent members' states and the log,
        signed with the user's key as the wrapped env's snapshots are.

        Raises:
            TypeError: if the wrapped env has no ``get_state()`` or cannot be pickled.
        """
        inner = getattr(self.env, "get_state", None)
        if inner is None:
            raise TypeError(f"{type(self.env).__name__} has no get_state(), so its episodes cannot be saved")
        return dump_snapshot(
            {
                "num_envs": self.num_envs,  # what every env snapshot states (the collectors read it)
                "agents": self.spec.agents,
                "env": inner(),
                "controllers": self.controllers.copy(),
                "returns": self._returns.copy(),
                "rng": self._rng.bit_generator.state,
                "generator": self._generator.get_state(),
                "memory": {key: states.cpu() for key, states in self._memory.items()},
                "log": [tuple(episode) for episode in self.log],
            }
        )

    def set_state(self, state: bytes) -> JointObs:
        """Restores a :meth:`get_state` snapshot of a population env over the same env and members.

        Returns:
            The restored :class:`JointObs`, where the next step starts (``acting`` only where the learner plays).

        Raises:
            marljoint.trust.SnapshotTrustError: a snapshot not signed with this user's key (checked first).
            ValueError: an unreadable snapshot, or one of another env.
        """
        snapshot = load_snapshot(state)
        restored = self.env.set_state(snapshot["env"])
        self.controllers = np.array(snapshot["controllers"], dtype=np.int64)
        self._returns = np.array(snapshot["returns"], dtype=np.float64)
        self._rng.bit_generator.state = snapshot["rng"]
        self._generator.set_state(snapshot["generator"])
        self._memory = {
            key: states.to(policy_device(self.members[key[0]][key[1]])) for key, states in snapshot["memory"].items()
        }
        self.log = [FinishedEpisode(*episode) for episode in snapshot["log"]]
        self.finished = []
        self._state = JointObs(restored.obs, restored.alive, restored.acting, restored.action_masks)
        return JointObs(restored.obs, restored.alive, self._learner_acting(restored), restored.action_masks)

    def drain_log(self) -> list[FinishedEpisode]:
        """Every episode finished since the last call (or reset), oldest first; the log is emptied."""
        log, self.log = self.log, []
        return log

    def close(self) -> None:
        """Closes the wrapped env."""
        self.env.close()

    def _assign(self, copies: np.ndarray) -> np.ndarray:
        controllers = np.asarray(self.assign(self._rng, copies), dtype=np.int64)
        expected = (len(copies), self.spec.num_agents)
        if controllers.shape != expected:
            raise ValueError(f"the seat assigner returned shape {controllers.shape}, expected {expected}")
        for seat, members in enumerate(self.members):
            used = controllers[:, seat]
            if np.any(used >= len(members)) or np.any(used < LEARNER):
                raise ValueError(
                    f"the seat assigner chose controller {int(used.max())} for seat {self.spec.agents[seat]!r}, "
                    f"which has {len(members)} members"
                )
        return controllers

    def _learner_acting(self, state: JointObs | JointStep) -> np.ndarray:
        return state.acting & (self.controllers == LEARNER)

    def _merge(self, actions: Sequence[np.ndarray] | None) -> list[np.ndarray]:
        state = self._state
        if state is None:
            raise RuntimeError("step() was called before reset(); call reset(seed=...) first")
        merged = []
        for g, group in enumerate(self.spec.groups):
            shape = (self.num_envs, group.size, *group.action.shape)
            if actions is None:
                base = np.zeros(shape, dtype=group.action.dtype)
            else:
                source = actions[g]
                source = source.detach().cpu().numpy() if hasattr(source, "detach") else np.asarray(source)
                base = source.astype(group.action.dtype, copy=True)
            merged.append(base)
        for seat in range(self.spec.num_agents):
            g, slot = self.spec.group_of(seat)
            action_shape = self.spec.groups[g].action.shape
            controlled = state.acting[:, seat] & (self.controllers[:, seat] != LEARNER)
            if not controlled.any():
                continue
            copies = np.flatnonzero(controlled)
            owners = self.controllers[copies, seat]
            obs = torch.from_numpy(np.ascontiguousarray(state.obs[g][copies, slot]))
            mask = state.action_masks[g]
            mask_rows = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask[copies, slot]))
            stack, position = self._stack(seat)
            places = position[owners]
            stacked = places >= 0
            if stack is not None and stacked.any():
                chosen = stack.act(
                    torch.from_numpy(places[stacked]),
                    obs[stacked],
                    self._generator,
                    None if mask_rows is None else mask_rows[stacked],
                )
                merged[g][copies[stacked], slot] = chosen.cpu().numpy().reshape(int(stacked.sum()), *action_shape)
            for member in np.unique(owners[~stacked]):
                rows = owners == member
                policy = self.members[seat][member]
                device = policy_device(policy)
                member_obs = obs[rows].to(device)
                member_mask = None if mask_rows is None else mask_rows[rows].to(device)
                if getattr(policy, "recurrent", False):
                    chosen = self._recurrent_act(seat, int(member), policy, copies[rows], member_obs, member_mask)
                else:
                    chosen = policy.act(member_obs, self._generator, member_mask)
                merged[g][copies[rows], slot] = chosen.cpu().numpy().reshape(int(rows.sum()), *action_shape)
        return merged

    def _stack(self, seat: int) -> tuple[PolicyStack | None, np.ndarray]:
        """The seat's largest set of members that act as one :class:`~marljoint.policies.PolicyStack` (built at
        the first step) and each member's place in it (-1: acts on its own, as recurrent, CNN and tabular members
        do)."""
        if seat not in self._stacks:
            self._stacks[seat] = PolicyStack.largest(self.members[seat])
        return self._stacks[seat]

    def _recurrent_act(
        self,
        seat: int,
        member: int,
        policy: FrozenPolicy,
        copies: np.ndarray,
        obs: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """A recurrent member's actions in ``copies``, from and into its per-copy states."""
        key = (seat, member)
        if key not in self._memory:
            self._memory[key] = policy.initial_state(self.num_envs)  # type: ignore[attr-defined]
        states = self._memory[key]
        index = torch.from_numpy(copies).to(states.device)
        chosen, states[index] = policy.step(  # type: ignore[attr-defined]
            obs, self._generator, mask, state=states[index]
        )
        return chosen

    def _forget(self, step: JointStep) -> None:
        """Zeroes the members' states where an episode restarted or a seat's agent appeared."""
        if not self._memory or self._state is None:
            return
        fresh = torch.from_numpy(step.alive & (step.reset_envs[:, None] | ~self._state.alive))
        for (seat, _), states in self._memory.items():
            states[fresh[:, seat].to(states.device)] = 0.0

    def __repr__(self) -> str:
        return f"PopulationEnv({self.env!r}, members={[len(m) for m in self.members]})"


class _ProfileQueue:
    """Assigns queued meta-profiles to copies as they reset; idle copies replay profile 0 (results discarded).

    With ``seeds`` (one env reset seed per job) the queue is also the env's ``episode_seed_source``: a copy takes
    its next job when the env resets it, so that the reset can use the job's seed, and hands it to the seat
    assigner called right after for the same copies.
    """

    def __init__(self, profiles: np.ndarray, seeds: np.ndarray | None = None) -> None:
        self.profiles = profiles
        self.seeds = seeds
        self.next = 0
        self.job_of_copy: dict[int, int] = {}
        self._taken: dict[int, int] = {}

    def _take(self) -> int:
        if self.next >= len(self.profiles):
            return -1
        self.next += 1
        return self.next - 1

    def seed_for(self, copy: int) -> int | None:
        """Takes copy ``copy``'s next job as the env resets it, and returns the job's seed (None when idle)."""
        job = self._take()
        self._taken[copy] = job
        return None if job < 0 or self.seeds is None else int(self.seeds[job])

    def __call__(self, rng: np.random.Generator, copies: np.ndarray) -> np.ndarray:
        out = np.empty((len(copies), self.profiles.shape[1]), dtype=np.int64)
        for row, copy in enumerate(copies):
            job = self._taken.pop(int(copy)) if self.seeds is not None else self._take()
            self.job_of_copy[int(copy)] = job
            out[row] = self.profiles[max(job, 0)]
        return out


STALLED_STEPS = 5_000
"""Simulated episodes are given up, with an error, when no env copy ends an episode in this many joint steps: the
env's episodes do not end by themselves."""


def simulate_profiles(
    env: JointEnv,
    members: Sequence[Sequence[FrozenPolicy]],
    profiles: np.ndarray,
    episodes_per_profile: int,
    seed: int,
    max_steps: int | None = None,
    episode_seeds: np.ndarray | Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Plays every meta-profile ``episodes_per_profile`` times and averages the returns.

    Every (profile, repetition) is one job; copies take jobs as they reset, and the function waits for every job,
    so short episodes are not over-represented. All copies' members act in batches per member.

    With ``episode_seeds``, repetition r of every profile is played from an env reset with ``episode_seeds[r]``
    (common random numbers): every profile meets the same chance outcomes (a card game's deals), so that luck
    cancels when profiles are compared. The members' own action sampling is not shared, so where it drives the
    returns (Leduc poker: ``benchmarks/common_random_numbers.py``) the gain is small.

    Args:
        env: the JointEnv (it is reset with ``seed``).
        members: per seat, its frozen policies.
        profiles: ``[K, N]`` member indices.
        episodes_per_profile: repetitions of each profile (>= 1).
        seed: seeds the env reset and the members' sampling.
        max_steps: optional safety cap on joint steps (``RuntimeError`` when exceeded).
        episode_seeds: ``[episodes_per_profile]`` env reset seeds, one per repetition; ``None``: each copy's own
            seed stream. Needs an env with ``episode_seed_source`` (:class:`~marljoint.PettingZooJointEnv`).

    Returns:
        ``(means, standard_errors)``, each ``[K, N]`` float64 (standard errors are 0 with one repetition).

    Raises:
        ValueError: ``episodes_per_profile`` below 1, profiles of the wrong width, or ``episode_seeds`` not one
            integer per repetition.
            Also: no episode ends in :data:`STALLED_STEPS` joint steps (an env whose episodes never end).
        TypeError: ``episode_seeds`` with an env that cannot seed its copies' resets.
    """
    index = np.asarray(profiles, dtype=np.int64).reshape(-1, env.spec.num_agents)
    if not isinstance(episodes_per_profile, (int, np.integer)) or episodes_per_profile < 1:
        raise ValueError(f"episodes_per_profile={episodes_per_profile!r}; pass a positive integer")
    num_profiles = len(index)
    num_agents = env.spec.num_agents
    seeds = _job_seeds(env, episode_seeds, episodes_per_profile, num_profiles)
    if num_profiles == 0:
        return np.zeros((0, num_agents)), np.zeros((0, num_agents))
    jobs = np.repeat(index, episodes_per_profile, axis=0)
    queue = _ProfileQueue(jobs, seeds)
    wrapped = PopulationEnv(env, members, queue, seed)
    results = np.full((len(jobs), num_agents), np.nan)
    if seeds is not None:
        env.episode_seed_source = queue.seed_for  # type: ignore[attr-defined]
    try:
        wrapped.reset(seed=seed)
        _play_jobs(wrapped, queue, results, max_steps)
    finally:
        if seeds is not None:
            env.episode_seed_source = None  # type: ignore[attr-defined]
    return _profile_statistics(results.reshape(num_profiles, episodes_per_profile, num_agents))


def _profile_statistics(per_profile: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(means, standard errors)`` ``[K, N]`` of ``[K, R, N]`` returns (R repetitions; errors 0 when R = 1)."""
    repetitions = per_profile.shape[1]
    means = per_profile.mean(axis=1)
    if repetitions > 1:
        errors = per_profile.std(axis=1, ddof=1) / np.sqrt(repetitions)
    else:
        errors = np.zeros_like(means)
    return means, errors


def _job_seeds(
    env: JointEnv, episode_seeds: np.ndarray | Sequence[int] | None, repetitions: int, profiles: int
) -> np.ndarray | None:
    """Each job's env reset seed (jobs are profile-major), or None; checks ``episode_seeds`` and the env."""
    if episode_seeds is None:
        return None
    seeds = np.asarray(episode_seeds)
    if seeds.shape != (repetitions,) or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(
            f"episode_seeds has shape {seeds.shape} and dtype {seeds.dtype}; pass one integer seed per repetition "
            f"({repetitions}), or None"
        )
    if not hasattr(env, "episode_seed_source"):
        raise TypeError(
            f"{type(env).__name__} cannot seed its copies' resets (no episode_seed_source); simulate on a "
            "PettingZooJointEnv, or pass episode_seeds=None"
        )
    return np.tile(seeds.astype(np.int64), profiles)


def _play_jobs(wrapped: PopulationEnv, queue: _ProfileQueue, results: np.ndarray, max_steps: int | None) -> None:
    """Steps until every job's episode has finished, writing each job's returns into its row of ``results``."""
    remaining = len(results)
    job_of_copy = dict(queue.job_of_copy)
    steps = stalled = 0
    while remaining:
        wrapped.step(None)
        steps += 1
        stalled += 1
        for episode in wrapped.drain_log():
            stalled = 0
            job = job_of_copy.get(episode.copy, -1)
            if job >= 0:
                results[job] = episode.returns
                remaining -= 1
        job_of_copy.update(queue.job_of_copy)
        if max_steps is not None and steps >= max_steps and remaining:
            raise RuntimeError(f"simulate_profiles: {remaining} episodes still running after {steps} joint steps")
        if stalled >= STALLED_STEPS:
            raise ValueError(
                f"no episode ended in {stalled:,} joint steps of {wrapped.num_envs} env copies ({remaining} still to "
                "play): the env's episodes do not end by themselves, and episodes are scored when they end; give the "
                "env an episode limit (a PettingZoo env's max_cycles, e.g. --env-kwargs '{\"max_cycles\": 25}')"
            )


def mixture_profiles(
    mixtures: Sequence[PolicyMixture], episodes: int, rng: np.random.Generator
) -> tuple[list[list[FrozenPolicy]], np.ndarray]:
    """Draws ``episodes`` pure profiles from independent per-seat mixtures, for :func:`simulate_profiles`.

    Returns:
        ``(members, profiles)``: per seat its member list, and ``[episodes, N]`` member indices.
    """
    members = [list(mixture.members) for mixture in mixtures]
    profiles = np.stack(
        [rng.choice(len(mixture), size=episodes, p=mixture.weights) for mixture in mixtures], axis=1
    ).astype(np.int64)
    return members, profiles
