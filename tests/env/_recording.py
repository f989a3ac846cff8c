"""Recording wrappers and an independent reference for checking PettingZooJointEnv step by step.

Each env copy is wrapped in a recorder that logs what the adapter sent to the env and what the env returned. After
every adapter step, :class:`Reference` reads those logs, derives the arrays the adapter should have returned from
the env's own dicts (with its own, deliberately naive, observation processing) and compares them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import AECEnv, ParallelEnv

from marljoint.env import PettingZooJointEnv, random_actions


def snapshot(value: Any) -> Any:
    """A deep copy of an env output: dicts and arrays copied, scalars kept (faster than copy.deepcopy)."""
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (tuple, list)):
        return type(value)(snapshot(v) for v in value)
    if isinstance(value, (int, float, str, bool, np.generic, type(None))):
        return value
    return copy.deepcopy(value)


class RecordingParallelEnv(ParallelEnv):
    """A ParallelEnv that forwards to ``env`` and logs every reset and step (copies of inputs and outputs)."""

    def __init__(self, env: ParallelEnv) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.metadata = getattr(env, "metadata", {})
        self.log: list[tuple] = []

    @property
    def agents(self) -> list[str]:
        return self.env.agents

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.env.action_space(agent)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations, infos = self.env.reset(seed=seed, options=options)
        self.log.append(("reset", seed, snapshot(observations), snapshot(infos), list(self.env.agents)))
        return observations, infos

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        sent = snapshot(actions)
        result = self.env.step(actions)
        self.log.append(("step", sent, *snapshot(result), list(self.env.agents)))
        return result

    def close(self) -> None:
        self.env.close()


class RecordingAECEnv(AECEnv):
    """An AECEnv that forwards to ``env`` and logs a full snapshot of the env after every reset and step."""

    def __init__(self, env: AECEnv) -> None:
        super().__init__()
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.metadata = getattr(env, "metadata", {})
        self.log: list[tuple] = []

    agents = property(lambda self: self.env.agents)
    agent_selection = property(lambda self: self.env.agent_selection)
    rewards = property(lambda self: self.env.rewards)
    terminations = property(lambda self: self.env.terminations)
    truncations = property(lambda self: self.env.truncations)
    infos = property(lambda self: self.env.infos)

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.env.action_space(agent)

    def observe(self, agent: str) -> Any:
        return self.env.observe(agent)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.env.reset(seed=seed, options=options)
        self.log.append(("reset", seed, self._snapshot()))

    def step(self, action: Any) -> None:
        selected = self.env.agent_selection
        self.env.step(action)
        self.log.append(("step", selected, snapshot(action), self._snapshot()))

    def _snapshot(self) -> dict:
        env = self.env
        return {
            "agents": list(env.agents),
            "selection": env.agent_selection,
            "rewards": dict(env.rewards),
            "terminations": dict(env.terminations),
            "truncations": dict(env.truncations),
            "infos": snapshot(env.infos),
            "obs": {a: snapshot(env.observe(a)) for a in env.agents},
        }

    def close(self) -> None:
        self.env.close()


def recording(factory: Callable[[], Any]) -> Callable[[], Any]:
    """Wraps a PettingZoo env factory so that every env it builds is a recorder."""

    def build() -> Any:
        env = factory()
        return RecordingAECEnv(env) if isinstance(env, AECEnv) else RecordingParallelEnv(env)

    return build


# ---------------------------------------------------------------------------------------------- naive processing
def expected_obs(space: gymnasium.Space, raw: Any) -> np.ndarray:
    """The processed observation, written out case by case (independent of marljoint.env.spaces)."""
    if isinstance(space, spaces.Dict) and "action_mask" in space.spaces:
        space, raw = space["observation"], raw["observation"]
    if isinstance(space, spaces.Box):
        arr = np.asarray(raw)
        if arr.ndim == 3:
            return arr.astype(np.uint8 if space.dtype == np.uint8 else np.float32)
        return arr.astype(np.float32).reshape(-1)
    if isinstance(space, spaces.Discrete):
        one_hot = np.zeros(space.n, np.float32)
        one_hot[int(raw) - int(space.start)] = 1.0
        return one_hot
    return np.asarray(spaces.flatten(space, raw), np.float32)


def expected_mask(space: gymnasium.Space, raw: Any, info: Any) -> np.ndarray | None:
    """The mask the env gives (from the observation dict or the info dict), or None if it gives none."""
    if isinstance(space, spaces.Dict) and "action_mask" in space.spaces:
        return np.asarray(raw["action_mask"]).astype(bool)
    if isinstance(info, dict) and "action_mask" in info:
        return np.asarray(info["action_mask"]).astype(bool)
    return None


def env_action(space: gymnasium.Space, value: np.ndarray) -> Any:
    """The env action for one agent's row of a group array, translated by hand."""
    if isinstance(space, spaces.Discrete):
        return int(value) + int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        return np.asarray(value) + space.start
    return np.asarray(value, np.float32).reshape(space.shape)


# ---------------------------------------------------------------------------------------------- the reference
def assert_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Exact equality of values and dtype (np.testing is too slow to call on every step of 1,000)."""
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: got\n{got!r}\nexpected\n{want!r}")


class Reference:
    """Derives, from the recorders' logs, every array PettingZooJointEnv.step should return, and compares.

    Args:
        env: the adapter, built on a :func:`recording` factory.

    Attributes:
        mid_episode_endings: agents that ended while others of their copy played on.
        episodes: episodes finished so far.
    """

    def __init__(self, env: PettingZooJointEnv) -> None:
        self.env = env
        self.agents = env.spec.agents
        self.index = {a: i for i, a in enumerate(self.agents)}
        self.slot = {}
        for g, group in enumerate(env.spec.groups):
            for j, agent in enumerate(group.agents):
                self.slot[agent] = (g, j)
        self.obs_spaces = {a: env.envs[0].observation_space(a) for a in self.agents}
        self.act_spaces = {a: env.envs[0].action_space(a) for a in self.agents}
        self.turn_based = isinstance(env.envs[0], AECEnv)
        self.cursor = [0] * env.num_envs
        self.live: list[list[str]] = [[] for _ in range(env.num_envs)]
        self.selection: list[str | None] = [None] * env.num_envs
        self.reported: list[set[str]] = [set() for _ in range(env.num_envs)]
        self.returns = np.zeros((env.num_envs, len(self.agents)), np.float64)
        self.lengths = np.zeros(env.num_envs, np.int64)
        self.mid_episode_endings = 0
        self.episodes = 0

    def _events(self, e: int) -> list[tuple]:
        log = self.env.envs[e].log
        events = log[self.cursor[e] :]
        self.cursor[e] = len(log)
        return events

    # -- the next state (obs, alive, acting, masks), built for all copies and compared at once
    def _start_state(self, state: Any) -> None:
        E, N = self.env.num_envs, len(self.agents)
        self.want_obs = [np.zeros_like(o) for o in state.obs]
        self.want_alive = np.zeros((E, N), bool)
        self.want_acting = np.zeros((E, N), bool)
        # Rows the env gives no expectation for (absent agents) keep the adapter's own values.
        self.want_masks = [None if m is None else m.copy() for m in state.action_masks]

    def _fill_state(self, e: int, state: Any, observations: dict, infos: dict, live: list[str]) -> None:
        for agent in live:
            i = self.index[agent]
            g, j = self.slot[agent]
            self.want_alive[e, i] = True
            raw = observations[agent]
            want = expected_obs(self.obs_spaces[agent], raw)
            if want.dtype != state.obs[g].dtype:
                raise AssertionError(f"agent {agent}: obs dtype {state.obs[g].dtype}, expected {want.dtype}")
            self.want_obs[g][e, j] = want
            if self.want_masks[g] is None:
                continue
            mask = expected_mask(self.obs_spaces[agent], raw, infos.get(agent))
            acting = self.selection[e] == agent if self.turn_based else True
            if mask is None or not acting:
                # A waiting player's action is ignored, so the adapter allows every choice.
                self.want_masks[g][e, j] = True
            else:
                self.want_masks[g][e, j] = mask
            # Every head of an alive agent has an allowed choice (JointObs's contract).
            if not state.action_masks[g][e, j].any():
                raise AssertionError(f"copy {e} agent {agent}: alive with an empty action mask")
        if self.turn_based:
            self.want_acting[e, self.index[self.selection[e]]] = True
        else:
            self.want_acting[e] = self.want_alive[e]

    def _compare_state(self, state: Any) -> None:
        for g, (got, want) in enumerate(zip(state.obs, self.want_obs)):
            assert_equal(got, want, f"obs of group {g}")
        assert_equal(state.alive, self.want_alive, "alive")
        assert_equal(state.acting, self.want_acting, "acting")
        for g, (got, want) in enumerate(zip(state.action_masks, self.want_masks)):
            if want is None:
                assert got is None
            else:
                assert_equal(got, want, f"action masks of group {g}")

    # -- reset
    def check_reset(self, state: Any, seed: int | None) -> None:
        self._start_state(state)
        for e in range(self.env.num_envs):
            events = self._events(e)
            assert len(events) == 1 and events[0][0] == "reset", events
            if seed is not None:
                assert events[0][1] == seed + e
            self.returns[e] = 0.0
            self.lengths[e] = 0
            self._enter_reset(e, events[0], state)
        self._compare_state(state)

    def _enter_reset(self, e: int, event: tuple, state: Any) -> None:
        if self.turn_based:
            self.reported[e] = set()
            self._enter_aec(e, event[2], state)
        else:
            _, _, observations, infos, agents = event
            self.live[e] = list(agents)
            self._fill_state(e, state, observations, infos, self.live[e])

    def _enter_aec(self, e: int, snap: dict, state: Any) -> None:
        ended = {a for a in snap["agents"] if snap["terminations"][a] or snap["truncations"][a]}
        self.live[e] = [a for a in snap["agents"] if a not in ended and a not in self.reported[e]]
        self.selection[e] = snap["selection"]
        assert self.selection[e] in self.live[e]
        self._fill_state(e, state, snap["obs"], snap["infos"], self.live[e])

    # -- step
    def check_step(self, actions: list[np.ndarray], out: Any) -> None:
        E, N = self.env.num_envs, len(self.agents)
        self._start_state(out)
        self.want_final = [f.copy() for f in out.final_obs]
        rewards = np.zeros((E, N), np.float32)
        terminated = np.zeros((E, N), bool)
        truncated = np.zeros((E, N), bool)
        finished_returns, finished_lengths = [], []
        for e in range(E):
            events = self._events(e)
            step = self._step_aec if self.turn_based else self._step_parallel
            done, rest = step(e, actions, events, rewards, terminated, truncated, out)
            self.returns[e] += rewards[e]
            self.lengths[e] += 1
            assert bool(out.reset_envs[e]) == done, f"copy {e}: reset_envs {out.reset_envs[e]}, expected {done}"
            if done:
                assert len(rest) == 1 and rest[0][0] == "reset", rest
                finished_returns.append(self.returns[e].copy())
                finished_lengths.append(self.lengths[e])
                self.returns[e] = 0.0
                self.lengths[e] = 0
                self.episodes += 1
                self._enter_reset(e, rest[0], out)
            else:
                assert not rest, rest
        self._compare_state(out)
        for g, (got, want) in enumerate(zip(out.final_obs, self.want_final)):
            assert_equal(got, want, f"final obs of group {g}")
        assert_equal(out.rewards, rewards, "rewards")
        assert_equal(out.terminated, terminated, "terminated")
        assert_equal(out.truncated, truncated, "truncated")
        np.testing.assert_allclose(out.episode_returns, np.asarray(finished_returns).reshape(-1, N), atol=1e-4)
        assert_equal(out.episode_lengths, np.asarray(finished_lengths, np.int64), "episode lengths")

    def _hand_action(self, actions: list[np.ndarray], e: int, agent: str) -> Any:
        g, j = self.slot[agent]
        return env_action(self.act_spaces[agent], actions[g][e, j])

    def _end(self, e: int, agent: str, term: bool, trunc: bool, raw_obs: Any, terminated, truncated) -> None:
        i = self.index[agent]
        terminated[e, i] = term
        truncated[e, i] = trunc and not term
        g, j = self.slot[agent]
        self.want_final[g][e, j] = expected_obs(self.obs_spaces[agent], raw_obs)

    def _step_parallel(self, e, actions, events, rewards, terminated, truncated, out):
        assert events and events[0][0] == "step", events
        _, sent, observations, step_rewards, terminations, truncations, infos, agents_after = events[0]
        assert sorted(sent) == sorted(self.live[e]), (sent.keys(), self.live[e])
        for agent in self.live[e]:
            if not np.array_equal(sent[agent], self._hand_action(actions, e, agent)):
                raise AssertionError(f"copy {e} agent {agent}: env got {sent[agent]}")
        for agent, r in step_rewards.items():
            rewards[e, self.index[agent]] = r
        ended = []
        for agent in self.live[e]:
            term, trunc = bool(terminations.get(agent, False)), bool(truncations.get(agent, False))
            assert term or trunc or agent in agents_after, f"{agent} left without a flag"
            if term or trunc:
                ended.append(agent)
                self._end(e, agent, term, trunc, observations[agent], terminated, truncated)
        live_next = [a for a in agents_after if a not in ended]
        if not live_next:
            return True, events[1:]
        if ended:
            self.mid_episode_endings += len(ended)
        self.live[e] = live_next
        self._fill_state(e, out, observations, infos, live_next)
        return False, events[1:]

    def _step_aec(self, e, actions, events, rewards, terminated, truncated, out):
        assert events and events[0][0] == "step", events
        _, selected, action, snap = events[0]
        assert selected == self.selection[e]
        assert np.array_equal(action, self._hand_action(actions, e, selected)), (selected, action)
        for agent, r in snap["rewards"].items():
            rewards[e, self.index[agent]] = r
        ended = []
        for agent in snap["agents"]:
            term, trunc = bool(snap["terminations"][agent]), bool(snap["truncations"][agent])
            if (term or trunc) and agent not in self.reported[e]:
                ended.append(agent)
                self.reported[e].add(agent)
                self._end(e, agent, term, trunc, snap["obs"][agent], terminated, truncated)
        rest = events[1:]
        while rest and rest[0][0] == "step":
            _, dead, action, snap = rest[0]
            assert action is None and dead in self.reported[e], (dead, action)
            rest = rest[1:]
        still = [a for a in snap["agents"] if not (snap["terminations"][a] or snap["truncations"][a])]
        if not still:
            return True, rest
        if ended:
            self.mid_episode_endings += len(ended)
        self._enter_aec(e, snap, out)
        return False, rest


def run_and_compare(
    factory: Callable[[], Any], num_steps: int, num_envs: int = 4, seed: int = 0
) -> tuple[PettingZooJointEnv, Reference]:
    """Plays ``num_steps`` random steps through the adapter and checks every output against the env's dicts."""
    env = PettingZooJointEnv(recording(factory), num_envs=num_envs)
    reference = Reference(env)
    rng = np.random.default_rng(seed)
    state = env.reset(seed=seed)
    reference.check_reset(state, seed)
    for _ in range(num_steps):
        if reference.turn_based:
            assert (state.acting.sum(1) == 1).all()
        actions = random_actions(env, state, rng)
        out = env.step(actions)
        reference.check_step(actions, out)
        state = out
    env.close()
    return env, reference
