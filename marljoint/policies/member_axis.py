"""The two axes of a group's network: the agents' ``[B, n_g, ...]`` and the stacked members' ``[M, B', ...]``.

Inputs and outputs of :class:`~marljoint.policies.actor_critic.ActorCritic` are agent-major: ``[B, n_g, ...]``.
Its stacked layers compute member-major: ``[M, B', ...]``, where sharing one network (M = 1) folds the agents into
the batch (``B' = B * n_g``, each agent's one-hot id appended to its input) and per-agent weights (M = n_g) keep
the batch (``B' = B``). A :class:`MemberAxis` holds the conversions between the two, the checks of the inputs'
shapes and the layout of the recurrent state (the actor core's numbers, then the critic core's).
"""

from __future__ import annotations

import torch

from marljoint.env.spaces import ObservationLayout
from marljoint.policies.recurrent import StackedRecurrentCell

__all__ = ["MemberAxis"]


class MemberAxis:
    """The shapes of one group network's inputs and states, and the conversions between its two axes.

    A value object: it holds the sizes it was built with and no tensor, so a network moved to another device keeps
    it as it is.

    Args:
        observation: the group's observation layout.
        num_agents: n_g, the agents of the group.
        share_parameters: one member serves every agent (M = 1), else one member per agent (M = n_g).
        critic_input_size: the per-agent input of a centralised critic, ``None`` for a local critic.
        core: the actor's recurrent core, ``None`` when feed-forward.
        critic_core: the critic's own recurrent core, ``None`` without one.
        critic_per_frame: the centralised critic runs once per frame (``[1, B, S]``, no agent ids) and its head
            gives the ``n_g`` values of a frame at once.
    """

    def __init__(
        self,
        observation: ObservationLayout,
        num_agents: int,
        share_parameters: bool,
        critic_input_size: int | None,
        core: StackedRecurrentCell | None,
        critic_core: StackedRecurrentCell | None,
        critic_per_frame: bool = False,
    ) -> None:
        self.observation = observation
        self.num_agents = num_agents
        self.share_parameters = bool(share_parameters)
        self.critic_input_size = critic_input_size
        self.critic_per_frame = critic_per_frame
        self.recurrent = None if core is None else core.kind
        """The recurrent core's kind (``"gru"``, ``"lstm"``), ``None`` when feed-forward."""
        self.actor_state_size = 0 if core is None else core.state_size
        self.critic_state_size = 0 if critic_core is None else critic_core.state_size
        self.obs_shape = (num_agents, *observation.shape)

    @property
    def state_size(self) -> int:
        """S, the numbers of one agent's recurrent state: the actor core's state, then the critic core's."""
        return self.actor_state_size + self.critic_state_size

    def member_of_agent(self, agent: int) -> int:
        """Index along the member axis of the parameters that act for agent ``agent`` of the group.

        Raises:
            IndexError: if ``agent`` is not in ``0 .. n_g - 1``.
        """
        if not 0 <= agent < self.num_agents:
            raise IndexError(f"agent {agent} is out of range for a group of {self.num_agents} agents")
        return 0 if self.share_parameters else agent

    def check_obs(self, obs: torch.Tensor) -> int:
        """Checks ``[B, n_g, *obs_shape]`` observations; returns B."""
        if obs.dim() != len(self.obs_shape) + 1 or obs.shape[1:] != self.obs_shape:
            raise ValueError(
                f"obs of shape {tuple(obs.shape)} does not fit this group; expected [B, "
                f"{', '.join(map(str, self.obs_shape))}] (batch, {self.num_agents} agents, observation shape "
                f"{self.observation.shape})."
            )
        return obs.shape[0]

    def check_critic_obs(self, critic_obs: torch.Tensor | None, batch: int) -> torch.Tensor:
        """A centralised critic's input ``[B, n_g, critic_input_size]``, checked."""
        expected = (batch, self.num_agents, self.critic_input_size)
        if critic_obs is None:
            raise ValueError(
                f"this network has a centralised critic (critic_input_size={self.critic_input_size}); pass "
                f"critic_obs of shape {list(expected)}."
            )
        if critic_obs.shape != expected:
            raise ValueError(f"critic_obs of shape {tuple(critic_obs.shape)} does not fit; expected {list(expected)}.")
        return critic_obs

    @staticmethod
    def reject_critic_obs(critic_obs: torch.Tensor | None) -> None:
        """Refuses a critic input given to a network without a centralised critic."""
        if critic_obs is not None:
            raise ValueError(
                "critic_obs was given but this network has no centralised critic; build it with "
                "critic_input_size=... or pass critic_obs=None."
            )

    def sequence_inputs(
        self, obs: torch.Tensor, critic_obs: torch.Tensor | None, starts: torch.Tensor, advance: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """A sequence chunk's inputs, checked and laid out for its replay.

        Args:
            obs: ``[L, B, n_g, *obs_shape]`` observations.
            critic_obs: ``[L, B, n_g, critic_input_size]`` with a centralised critic, else ``None``.
            starts: ``[L, B, n_g]`` bool.
            advance: ``[L, B, n_g]`` bool, or ``None``.

        Returns:
            ``(obs, critic_obs)`` as ``[L * B, n_g, ...]`` rows (a ``critic_obs`` without a centralised critic as
            given, for its refusal), and ``starts``, ``advance`` as the cores' member-major ``[L, M, B']``.
        """
        flat_obs = self._check_sequence(obs, starts, advance)
        flat_critic = critic_obs
        if critic_obs is not None and self.critic_input_size is not None:
            flat_critic = critic_obs.reshape(flat_obs.shape[0], *critic_obs.shape[2:])
        member_advance = None if advance is None else self.sequence_mask(advance)
        return flat_obs, flat_critic, self.sequence_mask(starts), member_advance

    def _check_sequence(self, obs: torch.Tensor, starts: torch.Tensor, advance: torch.Tensor | None) -> torch.Tensor:
        """Checks a sequence chunk's ``[L, B, n_g, *obs_shape]`` observations and its ``[L, B, n_g]`` flags, and
        returns the observations as ``[L * B, n_g, *obs_shape]`` rows."""
        if self.recurrent is None:
            raise ValueError("forward_sequence replays a recurrent network; this one is feed-forward (recurrent=None)")
        length, batch = obs.shape[:2]
        flat_obs = obs.reshape(length * batch, *obs.shape[2:])
        self.check_obs(flat_obs)
        expected = (length, batch, self.num_agents)
        if starts.shape != expected or (advance is not None and advance.shape != expected):
            raise ValueError(f"starts and advance must be [L, B, n_g] = {list(expected)}, got {tuple(starts.shape)}")
        return flat_obs

    @staticmethod
    def time_major(x: torch.Tensor, length: int) -> torch.Tensor:
        """Member-major rows ``[M, L * B', f]`` of a chunk → the cores' ``[L, M, B', f]``."""
        return x.reshape(x.shape[0], length, -1, x.shape[-1]).transpose(0, 1)

    @staticmethod
    def rows_of(out: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`time_major`: ``[L, M, B', f]`` → ``[M, L * B', f]``."""
        return out.transpose(0, 1).reshape(out.shape[1], -1, out.shape[-1])

    def split_state(self, state: torch.Tensor | None, batch: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Agent-major ``[B, n_g, S]`` states → the member-major states of the actor core and the critic core."""
        if self.recurrent is None:
            if state is not None:
                raise ValueError("state was given, but this network is feed-forward (recurrent=None); pass None")
            return None, None
        expected = (batch, self.num_agents, self.state_size)
        if state is None or state.shape != expected:
            got = "none" if state is None else f"shape {tuple(state.shape)}"
            raise ValueError(
                f"this network is recurrent ({self.recurrent}); pass state of shape {list(expected)} (the agents' "
                f"states before this step, initial_state(B) at an episode's start), got {got}"
            )
        member_major = self.member_major_rows(state)
        critic = member_major[..., self.actor_state_size :] if self.critic_state_size else None
        return member_major[..., : self.actor_state_size], critic

    def actor_member_state(self, actor_state: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """Agent-major ``[B, n_g, actor_state_size]`` actor-core states → member-major (``None`` when
        feed-forward)."""
        if self.recurrent is None:
            if actor_state is not None:
                raise ValueError("actor_state was given, but this network is feed-forward (recurrent=None); pass None")
            return None
        expected = (batch, self.num_agents, self.actor_state_size)
        if actor_state is None or tuple(actor_state.shape) != expected:
            got = "none" if actor_state is None else f"shape {tuple(actor_state.shape)}"
            raise ValueError(
                f"this network is recurrent ({self.recurrent}); pass actor_state of shape {list(expected)}, got "
                f"{got} (zeros at an episode's start)"
            )
        return self.member_major_rows(actor_state)

    def join_state(self, actor: torch.Tensor | None, critic: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """Inverse of :meth:`split_state`."""
        if actor is None:
            return None
        joined = actor if critic is None else torch.cat((actor, critic), dim=-1)
        return self.agent_major(joined, batch)

    def member_major_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, n_g, k]`` → ``[M, B', k]`` without agent ids (states and masks)."""
        if self.share_parameters:
            return x.reshape(1, x.shape[0] * self.num_agents, *x.shape[2:])
        return x.transpose(0, 1)

    def member_columns(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, n_g, ...]`` → ``[B', M, f]``: each member's rows in its own column (per-member statistics)."""
        rows = x.shape[0] * self.num_agents if self.share_parameters else x.shape[0]
        return x.reshape(rows, 1 if self.share_parameters else self.num_agents, -1)

    def sequence_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """``[L, B, n_g]`` per-agent flags → the cores' member-major ``[L, M, B']``."""
        length, batch = mask.shape[:2]
        if self.share_parameters:
            return mask.reshape(length, 1, batch * self.num_agents)
        return mask.transpose(1, 2)

    def member_major(self, x: torch.Tensor, agent_ids: torch.Tensor) -> torch.Tensor:
        """``[B, n_g, f]`` per-agent inputs → the ``[M, B', f']`` input of a stacked network.

        Sharing folds the agents into the batch and appends each agent's one-hot id (a row of ``agent_ids``,
        ``[n_g, n_g]``, whose dtype the input takes).
        """
        if x.dtype != agent_ids.dtype:
            x = x.to(agent_ids.dtype)
        if not self.share_parameters:
            return x.transpose(0, 1)
        batch = x.shape[0]
        ids = agent_ids.expand(batch, self.num_agents, self.num_agents)
        return torch.cat((x, ids), dim=-1).view(1, batch * self.num_agents, -1)

    def critic_rows(self, critic_obs: torch.Tensor) -> torch.Tensor:
        """The rows of a checked ``[B, n_g, S]`` critic input the critic reads: ``[B, 1, S]`` (the frame's joint
        state, which every agent's row holds) for a per-frame critic, else every agent's."""
        return critic_obs[:, :1] if self.critic_per_frame else critic_obs

    def critic_member_major(self, rows: torch.Tensor, agent_ids: torch.Tensor) -> torch.Tensor:
        """:meth:`critic_rows` → the critic's ``[M, B', S']`` input: ``[1, B, S]`` per frame, else as
        :meth:`member_major`."""
        return rows.transpose(0, 1) if self.critic_per_frame else self.member_major(rows, agent_ids)

    def agent_values(self, y: torch.Tensor, batch: int) -> torch.Tensor:
        """The value head's ``[M, B', k]`` output → ``[B, n_g]`` values (a per-frame head's ``[1, B, n_g]``)."""
        return y[0] if self.critic_per_frame else self.agent_major(y, batch).squeeze(-1)

    def agent_major(self, y: torch.Tensor, batch: int) -> torch.Tensor:
        """Inverse of :meth:`member_major` for outputs: ``[M, B', k]`` → ``[B, n_g, k]``."""
        if not self.share_parameters:
            return y.transpose(0, 1)
        return y.reshape(batch, self.num_agents, y.shape[-1])
