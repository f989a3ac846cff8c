"""The adapter of turn-based PettingZoo ``AECEnv`` copies: one move per step, by the agent the env selects."""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo.utils.conversions import turn_based_aec_to_parallel_wrapper

from marljoint.env.adapter import PettingZooAdapter

__all__ = ["TurnBasedAdapter", "playable"]


def playable(env: Any) -> Any:
    """Returns the env to step: PettingZoo's turn-based parallel conversion is played as the AEC env it wraps."""
    # That conversion asks every agent for an action but uses only the mover's; stepped as a parallel env, every
    # agent would count as acting, and the waiting one would carry an all-zero action mask.
    if isinstance(env, turn_based_aec_to_parallel_wrapper):
        return env.aec_env
    return env


class TurnBasedAdapter(PettingZooAdapter):
    """Resets and steps ``AECEnv`` copies: ``acting`` marks the one agent to move, rewards are credited to every
    agent on the step they arrive, and agents that end are stepped out with PettingZoo's dead steps."""

    turn_based = True

    def reset_copy(self, e: int, seed: int | None) -> None:
        self._clear_copy(e)
        try:
            self.envs[e].reset(seed=seed)
        except Exception as exc:
            raise self._copy_error(e, "reset", exc) from exc
        self._observe(e, moves=0)
        if not self.acting[e].any():
            raise ValueError(f"env copy {e}: the AEC env has no agent to act right after reset")

    def step_copy(self, e: int, actions: list[np.ndarray]) -> bool:
        env = self.envs[e]
        i = int(self.acting[e].argmax())  # the one acting agent
        g, j = self._slot[i]
        action = self._env_action(i, actions[g][e, j])
        try:
            env.step(action)
        except Exception as exc:
            raise self._copy_error(e, "step", exc) from exc
        self._collect_rewards(e)
        self._record_endings(e)
        # Agents that ended are stepped out with None actions (PettingZoo's dead steps).
        while env.agents and (
            env.terminations.get(env.agent_selection, False) or env.truncations.get(env.agent_selection, False)
        ):
            try:
                env.step(None)
            except Exception as exc:
                raise self._copy_error(e, "step", exc) from exc
        if not env.agents or not any(
            not (env.terminations.get(a, False) or env.truncations.get(a, False)) for a in env.agents
        ):
            return True
        self._observe(e, moves=int(self.lengths[e]) + 1)
        if not self.acting[e].any():
            raise ValueError(
                f"env copy {e}: after a step the AEC env selects {env.agent_selection!r}, which is not a live agent"
            )
        return False

    def _observe(self, e: int, moves: int) -> None:
        """Reads copy e's observations and the mask of the agent to move, ``moves`` moves into its episode."""
        env = self.envs[e]
        self._clear_state(e)
        selected = env.agent_selection
        for agent in env.agents:
            i = self._index[agent]
            if env.terminations.get(agent, False) or env.truncations.get(agent, False) or self.ended[e, i]:
                continue
            raw = env.observe(agent)
            self._write_obs(e, agent, raw, self.obs)
            if agent == selected:
                self._write_mask(e, agent, raw, env.infos.get(agent))
                self._check_some_action_allowed(e, agent, moves)
            else:
                # Games often give waiting players an all-zero mask; their action is ignored, and an empty mask
                # would break a masked distribution evaluated over the whole group.
                g, j = self._slot[i]
                if self.masks[g] is not None:
                    self.masks[g][e, j] = True
            self.alive[e, i] = True
        if selected is not None and selected in self._index and self.alive[e, self._index[selected]]:
            self.acting[e, self._index[selected]] = True

    def _check_some_action_allowed(self, e: int, agent: str, moves: int) -> None:
        """The agent to move must have a legal choice in every head: the policy's masked distribution would
        otherwise sample a forbidden action, reported far from the env that caused it. Checked once per AEC move,
        where the mask arrives, never in the loss."""
        i = self._index[agent]
        g, j = self._slot[i]
        if self.masks[g] is None:
            return
        row = self.masks[g][e, j]
        nvec = self.spec.actions[i].nvec
        if len(nvec) == 1:  # one head (the common case): no split needed
            if row.any():
                return
        elif row.all():
            return
        for k, head in enumerate(np.split(row, np.cumsum(nvec)[:-1])):
            if not head.any():
                unwrapped = getattr(self.envs[e], "unwrapped", self.envs[e])
                name = (getattr(unwrapped, "metadata", None) or {}).get("name", type(unwrapped).__name__)
                where = "right after reset" if moves == 0 else f"after move {moves} of its episode"
                head_text = f" (head {k} of {len(nvec)})" if len(nvec) > 1 else ""
                raise ValueError(
                    f"env {name!r} (env copy {e + self.first_copy}, {where}): the agent to move, {agent!r}, has an "
                    f"action mask that allows no action{head_text}; the env must leave the agent to move at least "
                    "one legal action (or end its episode)"
                )

    def _collect_rewards(self, e: int) -> None:
        for agent, reward in self.envs[e].rewards.items():
            self.rewards[e, self._index[agent]] += reward

    def _record_endings(self, e: int) -> None:
        env = self.envs[e]
        for agent in env.agents:
            i = self._index[agent]
            if self.ended[e, i]:
                continue
            term = bool(env.terminations.get(agent, False))
            trunc = bool(env.truncations.get(agent, False))
            if term or trunc:
                self.ended[e, i] = True
                self.terminated[e, i] = term
                self.truncated[e, i] = trunc and not term
                # After a step, agent_selection names the agent to move next: everyone else ends waiting.
                self.final_waiting[e, i] = agent != env.agent_selection
                self._write_obs(e, agent, env.observe(agent), self.final_obs)
