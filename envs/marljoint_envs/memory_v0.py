"""Memory environment: a cue shown once must be recalled ``delay`` steps later, so solving it needs memory.

At reset each agent draws its own cue, uniform over ``num_cues`` values, and sees it only in the reset
observation; ``delay`` steps later it is told to act and is rewarded for naming its cue. An optimal (recurrent)
policy returns 1 per episode; a memoryless one cannot beat ``1 / num_cues`` in expectation.

Agents:
    ``agent_0 .. agent_{num_agents-1}``, all present for the whole episode.

Observation:
    ``Box(0, 1, (num_cues + 1,), float32)``. The reset observation is the one-hot of the agent's own cue with
    the last entry 0; the observations after steps ``1 .. delay - 1`` are all zeros; the observation after
    ``delay`` steps (the decision step) is zeros with the last entry 1, meaning "act now".

Action:
    ``Discrete(num_cues)``: the cue the agent names. Actions before the decision step are checked, then
    ignored.

Reward:
    0 on every step except the decision step (the step taken at ``t == delay``, ``t`` counting the steps taken
    so far), where each agent receives 1.0 if its action equals its own cue and 0.0 otherwise.

Termination and truncation:
    An episode lasts ``delay + 1`` steps. Agents never leave early; after the decision step every agent is
    terminated (never truncated).

Options:
    ``reset`` takes no options (any given are ignored); ``reset(seed=...)`` seeds the cues.

Example:
    >>> from marljoint_envs import memory_v0
    >>> env = memory_v0.parallel_env(num_agents=1, num_cues=3, delay=2)
    >>> obs, _ = env.reset(seed=0)
    >>> cue = int(obs["agent_0"][:3].argmax())
    >>> obs, rewards, *_ = env.step({"agent_0": 0})
    >>> obs["agent_0"].tolist(), rewards
    ([0.0, 0.0, 0.0, 0.0], {'agent_0': 0.0})
    >>> env.step({"agent_0": 0})[0]["agent_0"].tolist()
    [0.0, 0.0, 0.0, 1.0]
    >>> _, rewards, terminations, truncations, _ = env.step({"agent_0": cue})
    >>> rewards, terminations, truncations, env.agents
    ({'agent_0': 1.0}, {'agent_0': True}, {'agent_0': False}, [])
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from marljoint_envs._common import RENDER_MODES, SimultaneousEnv, check_discrete_action, check_int

__all__ = ["MemoryEnv", "chance_return", "optimal_return", "parallel_env"]


class MemoryEnv(SimultaneousEnv):
    """The memory environment; see the module docstring.

    Args:
        num_agents: number of agents (>= 1).
        num_cues: number of possible cues, and of actions (>= 2).
        delay: steps between the cue and the decision (>= 1); an episode lasts ``delay + 1`` steps.
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).

    Raises:
        ValueError: if an argument is out of range.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "memory_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": True,
    }

    def __init__(
        self,
        num_agents: int = 2,
        num_cues: int = 4,
        delay: int = 3,
        render_mode: str | None = None,
    ) -> None:
        num_agents = check_int("num_agents", num_agents, 1)
        self.num_cues = check_int("num_cues", num_cues, 2)
        self.delay = check_int("delay", delay, 1)
        agents = [f"agent_{i}" for i in range(num_agents)]
        obs_spaces = {agent: spaces.Box(0.0, 1.0, (self.num_cues + 1,), np.float32) for agent in agents}
        action_spaces = {agent: spaces.Discrete(self.num_cues) for agent in agents}
        super().__init__(obs_spaces, action_spaces, render_mode)
        self.timestep = 0
        self.cues = self._draw_cues()

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self._reseed(seed)
        self.agents = self.possible_agents[:]
        self.timestep = 0
        self.cues = self._draw_cues()
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self._live_actions(actions)
        chosen = [check_discrete_action(agent, action, self.action_spaces[agent]) for agent, action in live.items()]
        deciding = self.timestep == self.delay
        rewards = {
            agent: float(deciding and choice == self.cues[i]) for i, (agent, choice) in enumerate(zip(live, chosen))
        }
        self.timestep += 1
        observations = self._observations()
        terminations = dict.fromkeys(self.agents, deciding)
        truncations = dict.fromkeys(self.agents, False)
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        if deciding:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _draw_cues(self) -> np.ndarray:
        """``[N]`` int cues, one per agent in ``possible_agents`` order."""
        return self.np_random.integers(self.num_cues, size=len(self.possible_agents))

    def _observations(self) -> dict[str, np.ndarray]:
        observations = {}
        for i, agent in enumerate(self.agents):
            observation = np.zeros(self.num_cues + 1, dtype=np.float32)
            if self.timestep == 0:
                observation[self.cues[i]] = 1.0
            elif self.timestep == self.delay:
                observation[-1] = 1.0
            observations[agent] = observation
        return observations

    def _render_text(self) -> str:
        return f"memory_v0 t={self.timestep}/{self.delay} cues={self.cues.tolist()}"


def parallel_env(**kwargs: Any) -> MemoryEnv:
    """Creates the memory ParallelEnv; the keyword arguments are those of :class:`MemoryEnv`."""
    return MemoryEnv(**kwargs)


def optimal_return(**kwargs: Any) -> float:
    """Expected per-agent episode return of an optimal policy (one that remembers its cue): always 1.0.

    Args:
        **kwargs: the keyword arguments of :class:`MemoryEnv`, checked as it checks them.

    Raises:
        ValueError: if an argument is out of range.
    """
    MemoryEnv(**kwargs)
    return 1.0


def chance_return(num_cues: int = 4, **kwargs: Any) -> float:
    """Expected per-agent episode return of the best memoryless policy: ``1 / num_cues``.

    A policy that cannot remember sees the same observation at every decision step whatever the cue was, so
    its action matches the uniformly drawn cue with probability ``1 / num_cues``.

    Args:
        num_cues: number of possible cues (>= 2), as for :class:`MemoryEnv`.
        **kwargs: the other keyword arguments of :class:`MemoryEnv`, checked as it checks them.

    Raises:
        ValueError: if an argument is out of range.
    """
    MemoryEnv(num_cues=num_cues, **kwargs)
    return 1.0 / num_cues
