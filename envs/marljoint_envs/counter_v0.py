"""Counting environment whose every output can be written as a literal in a test.

Agents:
    ``agent_0 .. agent_{num_agents-1}``, all present after reset.

Observations:
    ``Box(0, inf, (1,), float32)``: every agent sees ``[t]``, where ``t`` is the number of steps taken so
    far in the episode (``[0.0]`` after reset). The observation returned by the step that ends an agent is the
    post-step ``t``, so final observations are literals too.

Actions:
    ``Discrete(num_actions)``.

Rewards:
    ``float(action)`` of the agent itself, or ``constant_reward`` for every agent when it is given (the action
    is then ignored).

Termination and truncation:
    ``terminate_at`` (an int for all agents, or a dict agent name -> int for some) terminates an agent on the
    step at which ``t`` becomes that number; the agent is then removed from ``agents``. ``truncate_at``
    truncates every remaining agent on the step at which ``t`` becomes that number. An agent whose termination
    and truncation fall on the same step is reported terminated only, since termination is the stronger signal
    (no bootstrapping). Without either the episode never ends.

Options:
    ``reset`` takes no options (any given are ignored), and the env draws no random numbers.

Example:
    >>> from marljoint_envs import counter_v0
    >>> env = counter_v0.parallel_env(num_agents=2, terminate_at={"agent_1": 1}, truncate_at=2)
    >>> env.reset(seed=0)[0]
    {'agent_0': array([0.], dtype=float32), 'agent_1': array([0.], dtype=float32)}
    >>> obs, rewards, terminations, truncations, _ = env.step({"agent_0": 2, "agent_1": 1})
    >>> rewards, terminations, env.agents
    ({'agent_0': 2.0, 'agent_1': 1.0}, {'agent_0': False, 'agent_1': True}, ['agent_0'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from marljoint_envs._common import (
    RENDER_MODES,
    SimultaneousEnv,
    check_discrete_action,
    check_float,
    check_int,
)

__all__ = ["CounterEnv", "parallel_env"]


class CounterEnv(SimultaneousEnv):
    """The counting environment; see the module docstring for its dynamics.

    Args:
        num_agents: number of agents (>= 1).
        num_actions: size of the Discrete action space (>= 1).
        terminate_at: ``None``, an int >= 1 (every agent), or a dict agent name -> int >= 1 (those agents).
        truncate_at: ``None`` or an int >= 1: truncate every remaining agent when ``t`` reaches it.
        constant_reward: if given, every agent receives this finite reward on every step.
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).

    Raises:
        ValueError: if an argument is out of range or names an unknown agent.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "counter_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": True,
    }

    def __init__(
        self,
        num_agents: int = 2,
        num_actions: int = 3,
        terminate_at: int | Mapping[str, int] | None = None,
        truncate_at: int | None = None,
        constant_reward: float | None = None,
        render_mode: str | None = None,
    ) -> None:
        num_agents = check_int("num_agents", num_agents, 1)
        num_actions = check_int("num_actions", num_actions, 1)
        agents = [f"agent_{i}" for i in range(num_agents)]
        super().__init__(
            {agent: spaces.Box(0.0, np.inf, (1,), np.float32) for agent in agents},
            {agent: spaces.Discrete(num_actions) for agent in agents},
            render_mode,
        )
        self.terminate_at = _check_terminate_at(terminate_at, agents)
        self.truncate_at = None if truncate_at is None else check_int("truncate_at", truncate_at, 1)
        self.constant_reward = (
            None if constant_reward is None else check_float("constant_reward", constant_reward)
        )
        self.timestep = 0

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self._reseed(seed)
        self.agents = self.possible_agents[:]
        self.timestep = 0
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self._live_actions(actions)
        chosen = {
            agent: check_discrete_action(agent, a, self.action_spaces[agent]) for agent, a in live.items()
        }
        self.timestep += 1
        observations = self._observations()
        if self.constant_reward is None:
            rewards = {agent: float(action) for agent, action in chosen.items()}
        else:
            rewards = dict.fromkeys(self.agents, self.constant_reward)
        terminations = {agent: self.terminate_at.get(agent) == self.timestep for agent in self.agents}
        truncations = {
            agent: self.truncate_at == self.timestep and not terminations[agent] for agent in self.agents
        }
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        self.agents = [agent for agent in self.agents if not (terminations[agent] or truncations[agent])]
        return observations, rewards, terminations, truncations, infos

    def _observations(self) -> dict[str, np.ndarray]:
        return {agent: np.array([self.timestep], dtype=np.float32) for agent in self.agents}

    def _render_text(self) -> str:
        return f"counter_v0 t={self.timestep} agents={self.agents}"


def _check_terminate_at(terminate_at: Any, agents: list[str]) -> dict[str, int]:
    """Normalises ``terminate_at`` to a dict agent name -> termination step."""
    if terminate_at is None:
        return {}
    if isinstance(terminate_at, Mapping):
        unknown = [agent for agent in terminate_at if agent not in agents]
        if unknown:
            raise ValueError(f"terminate_at names unknown agents {unknown}; use agent names from {agents}.")
        return {agent: check_int(f"terminate_at[{agent!r}]", step, 1) for agent, step in terminate_at.items()}
    if isinstance(terminate_at, (int, np.integer)) and not isinstance(terminate_at, bool):
        step = check_int("terminate_at", terminate_at, 1)
        return dict.fromkeys(agents, step)
    raise ValueError(
        "terminate_at must be None, an integer >= 1 or a dict agent name -> integer >= 1, got "
        f"{terminate_at!r}; pass e.g. terminate_at=3 or terminate_at={{'agent_0': 3}}."
    )


def parallel_env(**kwargs: Any) -> CounterEnv:
    """Creates the counting ParallelEnv; the keyword arguments are those of :class:`CounterEnv`."""
    return CounterEnv(**kwargs)
