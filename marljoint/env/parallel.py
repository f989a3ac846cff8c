"""The adapter of PettingZoo ``ParallelEnv`` copies: every live agent moves on every step."""

from __future__ import annotations

from typing import Any

import numpy as np

from marljoint.env.adapter import PettingZooAdapter

__all__ = ["ParallelAdapter"]

_MISSING = object()
"""Marks a key missing from an env's dict (an observation may legitimately be ``None``)."""


class ParallelAdapter(PettingZooAdapter):
    """Resets and steps ``ParallelEnv`` copies: ``acting == alive``, and agents may join and leave mid-episode."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whether a step that keeps the same agents may just overwrite their observations (see _refill_in_place).
        self._plain_obs = all(self._direct_obs)

    def reset_copy(self, e: int, seed: int | None) -> None:
        self._clear_copy(e)
        env = self.envs[e]
        try:
            result = env.reset(seed=seed)
        except Exception as exc:
            raise self._copy_error(e, "reset", exc) from exc
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                "ParallelEnv.reset() must return (observations, infos); this env returns "
                f"{type(result).__name__} (an old PettingZoo API)"
            )
        observations, infos = result
        for agent in env.agents:
            self._enter(e, agent, observations, infos)
        if not self.alive[e].any():
            raise ValueError(f"env copy {e}: reset() returned no live agent")

    def _enter(self, e: int, agent: str, observations: dict, infos: dict) -> None:
        i = self._index.get(agent)
        if i is None:
            raise ValueError(f"agent {agent!r} is not in possible_agents {list(self.spec.agents)}")
        raw = observations.get(agent, _MISSING)
        if raw is _MISSING:
            raise ValueError(f"env copy {e}: agent {agent!r} is in env.agents but has no observation")
        self._write_obs(e, agent, raw, self.obs)
        if self.masks[self._slot[i][0]] is not None:
            self._write_mask(e, agent, raw, infos.get(agent) if infos else None)
        self.alive[e, i] = True
        self.acting[e, i] = True

    def step_copy(self, e: int, actions: list[np.ndarray]) -> bool:
        # The hot path of every rollout: the copy's agent list is read once before and once after the step (a
        # wrapped env resolves each read through its wrapper chain), and flags live in Python locals.
        env = self.envs[e]
        index, slots, names = self._index, self._slot, self.spec.agents
        alive_row = self.alive[e]
        alive_before = [i for i in range(len(names)) if alive_row[i]]
        action_dict = {}
        for agent in env.agents:
            i = index[agent]
            if alive_row[i]:
                g, j = slots[i]
                action_dict[agent] = self._env_action(i, actions[g][e, j])
        try:
            observations, rewards, terminations, truncations, infos = env.step(action_dict)
        except Exception as exc:
            raise self._copy_error(e, "step", exc) from exc
        reward_row = self.rewards[e]
        for agent, reward in rewards.items():
            reward_row[index[agent]] = reward
        present = env.agents
        ended = self._record_endings(e, alive_before, present, observations, terminations, truncations)
        live_next = [a for a in present if index[a] not in ended] if ended else present
        if not live_next:
            return True
        if not ended and len(present) == len(alive_before) and self._refill_in_place(e, present, observations, infos):
            return False
        self._clear_state(e)
        for agent in live_next:
            self._enter(e, agent, observations, infos)
        return False

    def _record_endings(
        self,
        e: int,
        alive_before: list[int],
        present: list[str],
        observations: dict,
        terminations: dict,
        truncations: dict,
    ) -> set[int]:
        """Flags the agents of copy e that ended in this step and keeps their final observations.

        Returns:
            The indices of the agents that ended.
        """
        slots, names = self._slot, self.spec.agents
        ended = set()
        for i in alive_before:
            agent = names[i]
            ended_term = bool(terminations.get(agent, False))
            ended_trunc = bool(truncations.get(agent, False))
            if not (ended_term or ended_trunc) and agent not in present:
                # The agent left without a flag (an API slip of the env): treat it as a terminal exit.
                ended_term = True
            if ended_term or ended_trunc:
                ended.add(i)
                self.terminated[e, i] = ended_term
                self.truncated[e, i] = ended_trunc and not ended_term
                if agent in observations:
                    self._write_obs(e, agent, observations[agent], self.final_obs)
                else:
                    g, j = slots[i]
                    self.final_obs[g][e, j] = self.obs[g][e, j]
        return ended

    def _refill_in_place(self, e: int, present: list[str], observations: dict, infos: dict) -> bool:
        """The common parallel step: the agents alive before it are the agents present after it.

        When every observation is a Box in its processed shape and no action mask has ever been seen (so every mask
        row is all-allowed), clearing the copy and re-entering each agent would only rewrite the same flags: the new
        observations are written over the old ones instead. Returns False when the step needs the full refill
        (which then rewrites everything this wrote).
        """
        if not self._plain_obs or any(self.masked_groups):
            return False
        index, slots, alive_row, obs = self._index, self._slot, self.alive[e], self.obs
        check_masks = any(mask is not None for mask in self.masks) and bool(infos)
        for agent in present:
            i = index.get(agent)
            if i is None or not alive_row[i]:
                return False
            raw = observations.get(agent, _MISSING)
            if raw is _MISSING:
                return False
            if check_masks:
                info = infos.get(agent)
                if isinstance(info, dict) and "action_mask" in info:
                    return False
            g, j = slots[i]
            try:
                obs[g][e, j] = raw
            except (ValueError, TypeError):
                return False
        return True
