"""Bucket brigade: a cooperative firefighting social dilemma.

World:
    A ring of ``H`` houses (``num_houses``, default 10), each SAFE (0), BURNING (1) or RUINED (2). House ``h``
    is owned by agent ``h mod N`` (``num_agents``, default 4, at most ``H``), so agent ``i``'s home is house
    ``i``. At reset every house burns independently with probability ``initial_burn_prob`` (0.3); if none
    does, one uniformly drawn house is set burning, so every episode starts with a fire.
    ``reset(options={"houses": ...})`` sets the initial states instead (other option keys are ignored).

Actions:
    ``MultiDiscrete([H, 2, 2])`` = ``[house, mode, signal]``: the house the agent goes to, mode 0 rest / 1
    work, and a signal bit that is cheap talk (it only shows up in the others' observations).

One night (one step), in this order (:func:`simulate_night`):
    1. Extinguish: a burning house with ``w`` workers is extinguished (becomes SAFE) with probability
       ``1 - (1 - kappa) ** w``.
    2. Spread: every house still burning ignites each SAFE ring neighbour with probability ``beta``
       (independently, so a house between two fires ignites with probability ``1 - (1 - beta) ** 2``). Houses
       extinguished in step 1 are SAFE and can catch fire again.
    3. Burn-out: houses that were burning at dusk and were not extinguished become RUINED. Fires that
       spread this night stay BURNING until the next night, which is why spread happens before burn-out: a
       fire gets one night to spread before it burns out.
    4. Ignition: every SAFE house catches fire with probability ``p_ignite``.

Rewards (per agent and night, :func:`night_rewards`, dawn states after the night):
    ``-work_cost`` if the agent worked, else ``+rest_reward`` (default ``0.5 * work_cost``);
    ``+own_save_bonus`` for each own house and ``+other_save_bonus`` for each other house extinguished this
    night; ``-own_ruin_penalty`` for each own RUINED house and ``-other_ruin_penalty`` for each other RUINED
    house, on every night; plus the team term ``team_survive * #SAFE / H - team_burn * #RUINED / H``.

Termination and truncation:
    Every agent terminates at the first dawn at which at least ``min_nights`` nights have passed and the
    houses are all SAFE or all RUINED. Otherwise every agent is truncated after ``max_nights`` nights (default
    100).

Observations (``Box(0, 1, (3H + N(H + 3) + 12,), float32)``, layout from :func:`observation_slices`):
    ``houses`` ``[H, 3]`` one-hot house states; ``agent_id`` ``[N]`` own index one-hot; ``positions``
    ``[N, H]`` one-hot of the house each agent chose last night; ``modes`` ``[N]`` (1 = worked last night);
    ``signals`` ``[N]`` (last night's signals); ``params`` ``[11]``: ``beta``, ``kappa``, ``p_ignite``,
    ``work_cost`` (saturating at 1), then ``rest_reward``, ``own_save_bonus``, ``other_save_bonus``,
    ``own_ruin_penalty``, ``other_ruin_penalty``, ``team_survive``, ``team_burn`` each divided by
    :data:`REWARD_SCALE` (saturating at 1); ``progress`` ``[1]``: nights passed / ``max_nights``, so that the
    time limit is observable. Positions, modes and signals are zero after reset.

Scenarios (:data:`SCENARIOS`, each a set of :class:`BucketBrigadeParams` fields; ``parallel_env(scenario=...,
**overrides)`` applies the overrides on top). Other-house bonuses and penalties are half the own-house ones in
every scenario. Fields a scenario does not set keep the ``default`` values.

=========================  ====  ====  ========  ====  ==========  =========  ==========  ==========
scenario                   beta  kap.  p_ignite  c     own +/-     other +/-  team +/-    min_nights
=========================  ====  ====  ========  ====  ==========  =========  ==========  ==========
default                    .25   .5    .02       .5    +20/-40     +10/-20    100/100     12
easy                       .1    .8    .01       .5    +1/-2       +.5/-1     100/100     10
hard                       .4    .3    .05       .5    +1/-2       +.5/-1     100/100     15
rest_trap                  .05   .95   .02       .2    +1/-2       +.5/-1     100/100     12
minimal_specialization     .25   .5    .02       .5    +50/-100    +25/-50    10/10       12
=========================  ====  ====  ========  ====  ==========  =========  ==========  ==========

Scripted baselines: :func:`random_policy`, :func:`specialist_policy`, and :func:`evaluate_scripted` for
their mean per-agent episode return.

Example:
    >>> from marljoint_envs import bucket_brigade_v0
    >>> env = bucket_brigade_v0.parallel_env(scenario="easy", num_agents=2, num_houses=4)
    >>> obs, _ = env.reset(seed=0, options={"houses": [1, 0, 0, 0]})
    >>> actions = {agent: bucket_brigade_v0.specialist_policy(obs[agent], i, 2, 4)
    ...            for i, agent in enumerate(env.agents)}
    >>> actions["agent_0"].tolist(), actions["agent_1"].tolist()
    ([0, 1, 1], [1, 0, 0])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from marljoint_envs._common import (
    RENDER_MODES,
    SimultaneousEnv,
    check_choice,
    check_float,
    check_int,
    check_multidiscrete_action,
)

__all__ = [
    "BURNING",
    "REWARD_SCALE",
    "RUINED",
    "SAFE",
    "SCENARIOS",
    "SCRIPTED_POLICIES",
    "BucketBrigadeEnv",
    "BucketBrigadeParams",
    "evaluate_scripted",
    "night_rewards",
    "observation_slices",
    "parallel_env",
    "random_policy",
    "simulate_night",
    "specialist_policy",
]

SAFE, BURNING, RUINED = 0, 1, 2
REWARD_SCALE = 100.0
"""Reward-valued parameters are divided by this in the observation."""

_PROBABILITIES = ("beta", "kappa", "p_ignite", "initial_burn_prob")
_REWARD_SCALES = (
    "rest_reward",
    "own_save_bonus",
    "other_save_bonus",
    "own_ruin_penalty",
    "other_ruin_penalty",
    "team_survive",
    "team_burn",
)
_NUM_PARAM_FEATURES = 4 + len(_REWARD_SCALES)


@dataclass(frozen=True)
class BucketBrigadeParams:
    """Parameters of a bucket brigade game; the defaults are the ``default`` scenario.

    Raises:
        ValueError: if a field is out of range (the message names the field, its value and the valid range).
    """

    num_agents: int = 4
    """N, agents; agent ``i`` owns the houses ``h`` with ``h mod N == i`` (1 <= N <= num_houses)."""
    num_houses: int = 10
    """H, houses on the ring (>= 3, so that every house has two distinct neighbours)."""
    beta: float = 0.25
    """Probability that a burning house ignites a SAFE neighbour in one night."""
    kappa: float = 0.5
    """Probability that one worker extinguishes a burning house in one night."""
    p_ignite: float = 0.02
    """Probability that a SAFE house catches fire spontaneously in one night."""
    initial_burn_prob: float = 0.3
    """Probability that a house is burning at reset (at least one house always is)."""
    work_cost: float = 0.5
    """c, paid by an agent for each night it works (>= 0)."""
    rest_reward: float | None = None
    """Received by an agent for each night it rests (>= 0); ``None`` means ``0.5 * work_cost``."""
    own_save_bonus: float = 20.0
    """Received by an agent for each of its own houses extinguished in a night (>= 0)."""
    other_save_bonus: float = 10.0
    """Received by an agent for each house of another agent extinguished in a night (>= 0)."""
    own_ruin_penalty: float = 40.0
    """Paid by an agent for each of its own RUINED houses, every night (>= 0)."""
    other_ruin_penalty: float = 20.0
    """Paid by an agent for each RUINED house of another agent, every night (>= 0)."""
    team_survive: float = 100.0
    """Team term: every agent receives ``team_survive * #SAFE / H`` every night (>= 0)."""
    team_burn: float = 100.0
    """Team term: every agent pays ``team_burn * #RUINED / H`` every night (>= 0)."""
    min_nights: int = 12
    """The episode cannot terminate before this many nights (0 <= min_nights <= max_nights)."""
    max_nights: int = 100
    """Every agent is truncated after this many nights (>= 1)."""

    def __post_init__(self) -> None:
        num_houses = check_int("num_houses", self.num_houses, 3)
        values: dict[str, Any] = {
            "num_houses": num_houses,
            "num_agents": check_int("num_agents", self.num_agents, 1, num_houses),
            "max_nights": check_int("max_nights", self.max_nights, 1),
        }
        values["min_nights"] = check_int("min_nights", self.min_nights, 0, values["max_nights"])
        for name in _PROBABILITIES:
            values[name] = check_float(name, getattr(self, name), 0.0, 1.0)
        values["work_cost"] = check_float("work_cost", self.work_cost, 0.0)
        if self.rest_reward is None:
            values["rest_reward"] = 0.5 * values["work_cost"]
        for name in _REWARD_SCALES:
            if name not in values:
                values[name] = check_float(name, getattr(self, name), 0.0)
        # Frozen dataclasses allow setting fields only through object.__setattr__; this stores the checked
        # values as plain ints/floats, so NumPy scalars passed by callers do not leak into observations.
        for name, value in values.items():
            object.__setattr__(self, name, value)


_PARAM_NAMES = tuple(field.name for field in dataclasses.fields(BucketBrigadeParams))

SCENARIOS: dict[str, dict[str, float]] = {
    "default": {},
    "easy": {
        "beta": 0.1,
        "kappa": 0.8,
        "p_ignite": 0.01,
        "own_save_bonus": 1.0,
        "other_save_bonus": 0.5,
        "own_ruin_penalty": 2.0,
        "other_ruin_penalty": 1.0,
        "min_nights": 10,
    },
    "hard": {
        "beta": 0.4,
        "kappa": 0.3,
        "p_ignite": 0.05,
        "own_save_bonus": 1.0,
        "other_save_bonus": 0.5,
        "own_ruin_penalty": 2.0,
        "other_ruin_penalty": 1.0,
        "min_nights": 15,
    },
    "rest_trap": {
        "beta": 0.05,
        "kappa": 0.95,
        "p_ignite": 0.02,
        "work_cost": 0.2,
        "own_save_bonus": 1.0,
        "other_save_bonus": 0.5,
        "own_ruin_penalty": 2.0,
        "other_ruin_penalty": 1.0,
    },
    "minimal_specialization": {
        "beta": 0.25,
        "kappa": 0.5,
        "p_ignite": 0.02,
        "team_survive": 10.0,
        "team_burn": 10.0,
        "work_cost": 0.5,
        "own_save_bonus": 50.0,
        "other_save_bonus": 25.0,
        "own_ruin_penalty": 100.0,
        "other_ruin_penalty": 50.0,
    },
}
"""Named scenarios: the :class:`BucketBrigadeParams` fields each one sets (table in the module docstring)."""

SCRIPTED_POLICIES = ("random", "specialist")
"""Names accepted by :func:`evaluate_scripted`."""


def simulate_night(
    houses: np.ndarray, workers: np.ndarray, params: BucketBrigadeParams, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Runs the fire dynamics of one night (extinguish, spread, burn-out, ignition; see the module docstring).

    Draws exactly ``3 * H`` uniforms from ``rng`` every night, whatever the state, so that runs with equal
    seeds stay aligned.

    Args:
        houses: ``[H]`` house states at dusk (SAFE, BURNING or RUINED).
        workers: ``[H]`` number of agents working at each house.
        params: the game parameters.
        rng: the random generator.

    Returns:
        ``(dawn, saved)``: ``[H]`` int8 house states at dawn, and ``[H]`` bool, the houses extinguished
        this night.
    """
    draws = rng.random((3, houses.shape[0]))
    burning = houses == BURNING
    saved = burning & (draws[0] < 1.0 - (1.0 - params.kappa) ** workers)
    still_burning = burning & ~saved
    dawn = houses.astype(np.int8)
    dawn[saved] = SAFE
    burning_neighbours = np.roll(still_burning, 1).astype(np.int64) + np.roll(still_burning, -1)
    spread = (dawn == SAFE) & (draws[1] < 1.0 - (1.0 - params.beta) ** burning_neighbours)
    dawn[still_burning] = RUINED
    dawn[spread] = BURNING
    dawn[(dawn == SAFE) & (draws[2] < params.p_ignite)] = BURNING
    return dawn, saved


def night_rewards(
    dawn: np.ndarray, saved: np.ndarray, working: np.ndarray, params: BucketBrigadeParams
) -> np.ndarray:
    """Rewards of one night (see the module docstring).

    Args:
        dawn: ``[H]`` house states after the night.
        saved: ``[H]`` bool, the houses extinguished this night.
        working: ``[N]`` bool, the agents that worked this night.
        params: the game parameters.

    Returns:
        ``[N]`` float64 rewards, agent ``i`` at index ``i``.
    """
    num_agents, num_houses = params.num_agents, params.num_houses
    owner = np.arange(num_houses) % num_agents
    ruined = dawn == RUINED
    own_saved = np.bincount(owner[saved], minlength=num_agents)
    own_ruined = np.bincount(owner[ruined], minlength=num_agents)
    effort = np.where(working, -params.work_cost, params.rest_reward)
    bonus = params.own_save_bonus * own_saved + params.other_save_bonus * (saved.sum() - own_saved)
    penalty = params.own_ruin_penalty * own_ruined + params.other_ruin_penalty * (ruined.sum() - own_ruined)
    team = (params.team_survive * np.sum(dawn == SAFE) - params.team_burn * ruined.sum()) / num_houses
    return effort + bonus - penalty + team


def observation_slices(num_agents: int, num_houses: int) -> dict[str, slice]:
    """Where each block of the observation lies (see the module docstring for their contents).

    Returns:
        Block name -> slice, in layout order: ``houses``, ``agent_id``, ``positions``, ``modes``, ``signals``,
        ``params``, ``progress``; the last slice ends at the observation length.
    """
    sizes = {
        "houses": 3 * num_houses,
        "agent_id": num_agents,
        "positions": num_agents * num_houses,
        "modes": num_agents,
        "signals": num_agents,
        "params": _NUM_PARAM_FEATURES,
        "progress": 1,
    }
    slices = {}
    start = 0
    for name, size in sizes.items():
        slices[name] = slice(start, start + size)
        start += size
    return slices


class BucketBrigadeEnv(SimultaneousEnv):
    """The bucket brigade game; see the module docstring for the rules, rewards and observation layout.

    Args:
        scenario: a name in :data:`SCENARIOS`.
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).
        **overrides: :class:`BucketBrigadeParams` fields that replace the scenario's values.

    Attributes:
        params: the resolved parameters.
        houses: ``[H]`` int8 current house states.
        night: nights passed in the episode.

    Raises:
        ValueError: for an unknown scenario, an unknown override or an out-of-range parameter.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "bucket_brigade_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": True,
    }

    def __init__(self, scenario: str = "default", render_mode: str | None = None, **overrides: Any) -> None:
        self.scenario = check_choice("scenario", scenario, SCENARIOS)
        unknown = sorted(set(overrides) - set(_PARAM_NAMES))
        if unknown:
            raise ValueError(
                f"unknown bucket brigade parameters {unknown}; valid overrides are {list(_PARAM_NAMES)}."
            )
        self.params = BucketBrigadeParams(**{**SCENARIOS[scenario], **overrides})
        num_agents, num_houses = self.params.num_agents, self.params.num_houses
        self._slices = observation_slices(num_agents, num_houses)
        size = self._slices["progress"].stop
        agents = [f"agent_{i}" for i in range(num_agents)]
        super().__init__(
            {agent: spaces.Box(0.0, 1.0, (size,), np.float32) for agent in agents},
            {agent: spaces.MultiDiscrete([num_houses, 2, 2]) for agent in agents},
            render_mode,
        )
        self._param_features = self._parameter_features()
        self.houses = np.zeros(num_houses, dtype=np.int8)
        self.night = 0
        self._last_actions: np.ndarray | None = None

    @property
    def max_cycles(self) -> int:
        """The most steps (nights) an episode lasts: ``params.max_nights``, under PettingZoo's name for a step
        limit. Setting it (as PettingZoo's API test does) sets ``max_nights`` (checked against ``min_nights``)."""
        return self.params.max_nights

    @max_cycles.setter
    def max_cycles(self, value: int) -> None:
        self.params = dataclasses.replace(self.params, max_nights=value)

    def _parameter_features(self) -> np.ndarray:
        p = self.params
        raw = [p.beta, p.kappa, p.p_ignite, p.work_cost]
        scaled = [getattr(p, name) / REWARD_SCALE for name in _REWARD_SCALES]
        return np.minimum(np.array(raw + scaled, dtype=np.float32), 1.0)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Starts a night-0 town: random fires, or ``options["houses"]`` (``[H]`` states) when given."""
        self._reseed(seed)
        if options is not None and "houses" in options:
            self.houses = self._check_houses(options["houses"])
        else:
            self.houses = self._random_houses()
        self.agents = self.possible_agents[:]
        self.night = 0
        self._last_actions = None
        return self._observations(), {agent: {} for agent in self.agents}

    def _random_houses(self) -> np.ndarray:
        num_houses = self.params.num_houses
        burning = self.np_random.random(num_houses) < self.params.initial_burn_prob
        if not burning.any():
            burning[self.np_random.integers(num_houses)] = True
        return np.where(burning, BURNING, SAFE).astype(np.int8)

    def _check_houses(self, houses: Any) -> np.ndarray:
        states = np.asarray(houses)
        num_houses = self.params.num_houses
        valid = (
            states.shape == (num_houses,)
            and np.issubdtype(states.dtype, np.integer)
            and bool(np.all((states >= SAFE) & (states <= RUINED)))
        )
        if not valid:
            raise ValueError(
                f"options['houses'] must be {num_houses} integer states, each 0 (SAFE), 1 (BURNING) or "
                f"2 (RUINED), got {houses!r}; pass e.g. [1] + [0] * {num_houses - 1}."
            )
        return states.astype(np.int8)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self._live_actions(actions)
        chosen = np.stack(
            [check_multidiscrete_action(agent, a, self.action_spaces[agent]) for agent, a in live.items()]
        )
        working = chosen[:, 1] == 1
        workers = np.bincount(chosen[working, 0], minlength=self.params.num_houses)
        self.houses, saved = simulate_night(self.houses, workers, self.params, self.np_random)
        rewards = night_rewards(self.houses, saved, working, self.params)
        self.night += 1
        self._last_actions = chosen
        settled = bool(np.all(self.houses == SAFE) or np.all(self.houses == RUINED))
        terminated = self.night >= self.params.min_nights and settled
        truncated = not terminated and self.night >= self.params.max_nights
        observations = self._observations()
        reward_dict = {agent: float(rewards[i]) for i, agent in enumerate(self.agents)}
        terminations = dict.fromkeys(self.agents, terminated)
        truncations = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        if terminated or truncated:
            self.agents = []
        return observations, reward_dict, terminations, truncations, infos

    def _observations(self) -> dict[str, np.ndarray]:
        s = self._slices
        num_agents, num_houses = self.params.num_agents, self.params.num_houses
        shared = np.zeros(s["progress"].stop, dtype=np.float32)
        shared[s["houses"]][np.arange(num_houses) * 3 + self.houses] = 1.0
        if self._last_actions is not None:
            positions = shared[s["positions"]].reshape(num_agents, num_houses)
            positions[np.arange(num_agents), self._last_actions[:, 0]] = 1.0
            shared[s["modes"]] = self._last_actions[:, 1]
            shared[s["signals"]] = self._last_actions[:, 2]
        shared[s["params"]] = self._param_features
        shared[s["progress"]] = self.night / self.params.max_nights
        observations = {}
        for i, agent in enumerate(self.possible_agents):
            observation = shared.copy()
            observation[s["agent_id"].start + i] = 1.0
            observations[agent] = observation
        return observations

    def _render_text(self) -> str:
        town = "".join(".F#"[state] for state in self.houses)
        return f"bucket_brigade_v0 night {self.night}: {town}  (. safe, F burning, # ruined)"


def parallel_env(scenario: str = "default", **kwargs: Any) -> BucketBrigadeEnv:
    """Creates the bucket brigade ParallelEnv; the arguments are those of :class:`BucketBrigadeEnv`."""
    return BucketBrigadeEnv(scenario, **kwargs)


def _num_agents_from_length(observation: np.ndarray, num_houses: int) -> int:
    """Recovers N from an observation's length, given H (the layout length is ``3H + N(H + 3) + 12``)."""
    rest = observation.shape[-1] - 3 * num_houses - _NUM_PARAM_FEATURES - 1
    num_agents, remainder = divmod(rest, num_houses + 3)
    if observation.ndim != 1 or remainder != 0 or not 1 <= num_agents <= num_houses:
        raise ValueError(
            f"observation of shape {observation.shape} is not a bucket brigade observation for num_houses="
            f"{num_houses}; pass one agent's observation and the env's num_houses."
        )
    return num_agents


def random_policy(
    observation: np.ndarray, agent_index: int, rng: np.random.Generator, num_houses: int = 10
) -> np.ndarray:
    """Uniformly random action ``[house, mode, signal]``; the observation is only checked, not used.

    Args:
        observation: one agent's observation.
        agent_index: the agent's index ``i`` (of ``agent_i``).
        rng: the generator to draw from.
        num_houses: H of the env that produced ``observation``.

    Returns:
        ``[3]`` int64 action.

    Raises:
        ValueError: if the observation does not fit ``num_houses`` or ``agent_index`` is out of range.
    """
    num_agents = _num_agents_from_length(np.asarray(observation), num_houses)
    check_int("agent_index", agent_index, 0, num_agents - 1)
    return rng.integers(np.array([num_houses, 2, 2])).astype(np.int64)


def specialist_policy(
    observation: np.ndarray, agent_index: int, num_agents: int, num_houses: int
) -> np.ndarray:
    """Works the lowest-index burning house the agent owns, else rests at home; signals 1 when working.

    Home is the lowest-index house the agent owns, which is house ``agent_index``.

    Args:
        observation: one agent's observation.
        agent_index: the agent's index ``i`` (of ``agent_i``).
        num_agents: N of the env.
        num_houses: H of the env.

    Returns:
        ``[3]`` int64 action ``[house, mode, signal]``.

    Raises:
        ValueError: if the observation does not fit ``num_agents`` and ``num_houses``, or ``agent_index`` is
            out of range.
    """
    observation = np.asarray(observation)
    if _num_agents_from_length(observation, num_houses) != num_agents:
        raise ValueError(
            f"observation of length {observation.shape[-1]} does not fit num_agents={num_agents} and "
            f"num_houses={num_houses}; pass the env's num_agents and num_houses."
        )
    check_int("agent_index", agent_index, 0, num_agents - 1)
    states = observation[observation_slices(num_agents, num_houses)["houses"]].reshape(num_houses, 3)
    owned = np.arange(agent_index, num_houses, num_agents)
    burning_owned = owned[states[owned, BURNING] > 0.5]
    if burning_owned.size:
        return np.array([burning_owned[0], 1, 1], dtype=np.int64)
    return np.array([agent_index, 0, 0], dtype=np.int64)


def evaluate_scripted(
    policy_name: str, scenario: str = "default", episodes: int = 10, seed: int = 0, **overrides: Any
) -> float:
    """Mean per-agent undiscounted episode return of a scripted policy played by every agent.

    Args:
        policy_name: one of :data:`SCRIPTED_POLICIES`.
        scenario: a name in :data:`SCENARIOS`.
        episodes: number of episodes (>= 1).
        seed: seeds both the env and the random policy (through independent child seeds).
        **overrides: :class:`BucketBrigadeParams` fields that replace the scenario's values.

    Returns:
        The return averaged over agents and episodes.

    Raises:
        ValueError: for an unknown policy or scenario, or an invalid parameter.
    """
    check_choice("policy_name", policy_name, SCRIPTED_POLICIES)
    episodes = check_int("episodes", episodes, 1)
    env = BucketBrigadeEnv(scenario, **overrides)
    num_agents, num_houses = env.params.num_agents, env.params.num_houses
    env_seed, policy_seed = np.random.SeedSequence(check_int("seed", seed, 0)).spawn(2)
    rng = np.random.default_rng(policy_seed)
    total = 0.0
    for episode in range(episodes):
        observations, _ = env.reset(seed=int(env_seed.generate_state(1)[0]) if episode == 0 else None)
        while env.agents:
            actions = {}
            for i, agent in enumerate(env.agents):
                if policy_name == "random":
                    actions[agent] = random_policy(observations[agent], i, rng, num_houses)
                else:
                    actions[agent] = specialist_policy(observations[agent], i, num_agents, num_houses)
            observations, rewards, _, _, _ = env.step(actions)
            total += sum(rewards.values())
    return total / (episodes * num_agents)
