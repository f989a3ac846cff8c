"""What ``marljoint psro`` and ``marljoint nfsp`` take for an env: its best-response preset (the tuned PSRO and NFSP
settings, kept in the one table of :mod:`marljoint.run.presets`), the env factory they build their envs with, and
their metrics CSV (:func:`~marljoint.run.runlog.write_metrics_csv`).

Example:
    >>> recipe_for("kuhn_poker_v0").trainer.num_envs
    128
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marljoint.env.openspiel import OPENSPIEL_PREFIX
from marljoint.run.presets import BEST_RESPONSE_PRESETS, SELF_PLAY_PRESETS, Preset
from marljoint.run.registry import env_factory

__all__ = [
    "BUNDLED_ENVS",
    "EMA_MAGNET_DECISIONS",
    "MEASURE_EVERY",
    "GENERAL_RECIPE",
    "MMD_MAGNETS",
    "MMD_TRAINER",
    "OPENSPIEL_RECIPE",
    "RECIPES",
    "auto_meta_solver",
    "env_factory",
    "game_size",
    "recipe_for",
    "mmd_magnet_rule",
    "self_play_collection",
    "self_play_rule",
    "self_play_settings",
]

BUNDLED_ENVS = ("kuhn_poker_v0", "matrix_game_v0", "bucket_brigade_v0")


RECIPES: dict[str, Preset] = {name: BEST_RESPONSE_PRESETS[name] for name in BUNDLED_ENVS}
"""Bundled env name → its best-response :class:`~marljoint.run.presets.Preset`."""
GENERAL_RECIPE = BEST_RESPONSE_PRESETS["general"]
"""Every other env's best-response preset."""
OPENSPIEL_RECIPE = BEST_RESPONSE_PRESETS["openspiel"]
"""OpenSpiel games' best-response preset (Kuhn poker's, with the changes measured on Leduc poker)."""
SELF_PLAY_TRAINER: dict[str, Any] = dict(SELF_PLAY_PRESETS["openspiel"].config_kwargs)
"""The trainer settings ``marljoint train --self-play`` starts from on an OpenSpiel game or the bundled Kuhn poker:
those of the ``self_play/openspiel`` preset."""


MMD_TRAINER: dict[str, Any] = {"clip_range": 0.1}
"""The PPO setting ``--self-play mmd`` adds to :data:`SELF_PLAY_TRAINER` on every game: PPO's clip at 0.1 (each
update moves the policy less, which the iterates' jitter needs more than speed). Measured on Kuhn and Leduc poker
(``benchmarks/results/kuhn/``, ``benchmarks/results/leduc/``)."""

MMD_MAGNETS: dict[str, dict[str, Any]] = {
    "ema": {"mmd.magnet": "ema"},
    "uniform": {"mmd.magnet": "uniform", "mmd.alpha": 0.5, "mmd.alpha_min": 0.2, "uniform_mix": 0.1},
}
"""The two regimes of :func:`mmd_magnet_rule`, as run settings. ``"ema"``: the ``"ema"`` magnet (no bias: it follows
the policy). ``"uniform"``: the uniform magnet with α held at ``alpha_min`` or more (the iterates settle near the
regularised equilibrium of α_min, a bias that stays), and uniform play mixed into the rollouts at 0.1 (each seat plays
0.9·π + 0.1·uniform, its own rows weighed by π / behaviour), so that the states a best response against a seat would
steer to, which an update samples rarely in such a game, are sampled and learned; where every state is sampled often
(the ``"ema"`` regime) the mixture only slows each update's progress. The uniform regime's α and ``alpha_min`` are
those of a game whose payoffs spread as Leduc poker's (:data:`PAYOFF_SD_REFERENCE`); :func:`mmd_magnet_rule` scales
them to the game's own spread."""

PAYOFF_SD_REFERENCE = 4.513
"""The standard deviation of a seat's return in Leduc poker under uniform play (chips), the payoff scale at which the
uniform regime's α = 0.5 and ``alpha_min`` = 0.2 were measured (bias 0.085 there). α weighs the KL against the
advantages, which are in the game's payoffs: the same α in a game of ±1 payoffs (liar's dice, goofspiel: 1.0 and
0.955) pulls about 4.5 times as hard, and its regularised equilibrium is far from a Nash equilibrium (0.18 and 0.28
exploitable at α = 0.2, against 0.085 in Leduc poker)."""

SIMULTANEOUS_FLOOR = 0.4
"""The uniform regime's ``alpha_min`` in a game of simultaneous moves, before the payoff scaling (0.2 in a turn-based
game). Both seats' policies move at once there, against each other, and once α_t falls below about 0.055 in
goofspiel (five cards, ±1 payoffs; 0.25 in Leduc poker's scale) the sampled iterates leave the regularised
equilibrium for nearly deterministic policies: the last iterate at 0.4 to 0.77 exploitable and the average, which
weighs late iterates most, rising from 0.13 to 0.33. Held at twice the turn-based floor the iterates stay near it
(the average at 300 s 0.129 and 0.094 on two seeds, two cores; the tabular regularised equilibrium of α = 0.085
about 0.11 exploitable; ``benchmarks/results/goofspiel/five_cards/``). The turn-based games measured (Kuhn and Leduc
poker, liar's dice) do not leave it at their floor."""

EMA_MAGNET_DECISIONS = 32
"""Decisions per information state per update (all seats together) from which :func:`mmd_magnet_rule` chooses the
``"ema"`` magnet. An ``"ema"`` magnet moves with the policy's parameters, so it carries each update's sampling noise
at every information state; with few decisions per state that noise accumulates in the magnet, which then drifts
instead of settling. Measured: Kuhn poker has 341 per update with the self-play settings (4,096 decisions over 12
information states), where the ``"ema"`` magnet takes the average policy to 0.011-0.015 at 120 s and the uniform one
leaves a bias of 0.044; Leduc poker has 4.4 (4,096 over 936), where the ``"ema"`` magnet's average stays at 0.5-0.9
and the uniform regime reaches 0.13-0.16 at 600 s."""


def mmd_magnet_rule(
    env_name: str, env_kwargs: Mapping[str, Any] | None, decisions_per_update: int
) -> tuple[dict[str, Any], str]:
    """The magnet (and with it the exploration) ``--self-play mmd`` chooses for a game, from its size and the
    rollout's, and in the uniform regime the regularisation's strength from the game's payoff scale.

    Rule: ``decisions_per_update`` (``num_envs × rollout_steps``: in a turn-based game each env step is one seat's
    decision; in a game of simultaneous moves every seat decides at every step, so the rule counts the steps times
    the seats) over the game's information states (every seat's, counted from its tree) is the number of times an
    update samples each state on average. At :data:`EMA_MAGNET_DECISIONS` or more, the ``"ema"`` regime; below, or
    when the game is too large to count, the ``"uniform"`` regime (:data:`MMD_MAGNETS`): the uniform magnet, α and
    ``alpha_min`` 0.5 and 0.2 (:data:`SIMULTANEOUS_FLOOR` in a game of simultaneous moves) times the game's payoff
    standard deviation under uniform play over :data:`PAYOFF_SD_REFERENCE` (:func:`payoff_sd`; two significant
    digits, so Leduc poker gets 0.5 and 0.2 exactly; unscaled where the spread cannot be computed), and uniform play
    mixed into the rollouts.

    Args:
        env_name: ``openspiel:<game>`` or ``kuhn_poker_v0``.
        env_kwargs: the game's parameters.
        decisions_per_update: the env steps of one rollout (``num_envs × rollout_steps``), each one decision.

    Returns:
        ``(the regime's settings, flat: mmd.<key> and uniform_mix, the rule's reason)``.

    Example:
        >>> mmd_magnet_rule("kuhn_poker_v0", {}, 4096)[0]
        {'mmd.magnet': 'ema'}
    """
    size = game_size(env_name, env_kwargs)
    if size is not None:
        states, seats_per_step = size
        decisions_per_update *= seats_per_step
        per_state = decisions_per_update / states
        counted = (
            f"{decisions_per_update:,} decisions per update over {states:,} information states, {per_state:.3g} each"
        )
        if per_state >= EMA_MAGNET_DECISIONS:
            return dict(MMD_MAGNETS["ema"]), (
                f"an ema magnet: {counted}, at least {EMA_MAGNET_DECISIONS}, so the magnet follows the policy without "
                "drifting with the sampling noise, and leaves no bias"
            )
        why = f"{counted}, fewer than {EMA_MAGNET_DECISIONS}, too few for an ema magnet to settle"
    else:
        why = "the game's information states are too many to count, so an update samples each of them too rarely for "
        why += "an ema magnet to settle"
    settings, scale = _uniform_regime(env_name, env_kwargs, simultaneous=size is not None and size[1] > 1)
    return settings, (
        f"a uniform magnet with {scale}, and uniform play mixed into the rollouts: {why}; the uniform magnet's bias at "
        "alpha_min is small beside the sampling noise, and the mixture samples the states a best response would "
        "steer to"
    )


def _uniform_regime(
    env_name: str, env_kwargs: Mapping[str, Any] | None, simultaneous: bool
) -> tuple[dict[str, Any], str]:
    """The ``"uniform"`` regime's settings for a game, α and ``alpha_min`` in its payoff scale (:func:`payoff_sd`
    over :data:`PAYOFF_SD_REFERENCE`, two significant digits; the floor :data:`SIMULTANEOUS_FLOOR` in a game of
    simultaneous moves), and the words that say how they were chosen."""
    settings = dict(MMD_MAGNETS["uniform"])
    alpha, floor = settings["mmd.alpha"], SIMULTANEOUS_FLOOR if simultaneous else settings["mmd.alpha_min"]
    moves = (
        f"alpha_min {floor:g} in a game of simultaneous moves, where the iterates leave a lower floor's equilibrium"
        if simultaneous
        else f"alpha_min {floor:g}"
    )
    spread = payoff_sd(env_name, env_kwargs)
    if spread is None:
        settings["mmd.alpha_min"] = floor
        return settings, f"alpha {alpha:g} and {moves} in payoff units (the game's payoff spread is not computed here)"
    ratio = spread / PAYOFF_SD_REFERENCE
    settings["mmd.alpha"] = _two_digits(alpha * ratio)
    settings["mmd.alpha_min"] = _two_digits(floor * ratio)
    return settings, (
        f"alpha {settings['mmd.alpha']:g} and alpha_min {settings['mmd.alpha_min']:g}: alpha {alpha:g} and {moves}, "
        f"times the game's payoff standard deviation under uniform play ({spread:.4g}) over Leduc poker's "
        f"({PAYOFF_SD_REFERENCE}), so the KL pulls against the advantages as hard as where they were measured"
    )


def _two_digits(value: float) -> float:
    """``value`` to two significant digits (``0.50094`` → ``0.5``)."""
    return float(f"{value:.2g}")


_SPREADS: dict[str, float | None] = {}


def payoff_sd(env_name: str, env_kwargs: Mapping[str, Any] | None) -> float | None:
    """The standard deviation of a seat's return (the largest over the seats) when every seat plays uniformly over
    its legal actions: exact, from the terminal histories of an OpenSpiel game's tree; ``None`` for a game without
    one here (too many information states or terminal histories) and for the bundled games. Computed once per process
    and game.

    Example:
        >>> round(payoff_sd("openspiel:leduc_poker", {}), 3)
        4.513
    """
    import json

    import numpy as np

    from marljoint.best_response.openspiel_game import OpenSpielGame
    from marljoint.run.registry import known_game

    key = f"{env_name} {json.dumps(dict(env_kwargs or {}), sort_keys=True, default=str)}"
    if key not in _SPREADS:
        _SPREADS[key] = None
        if env_name.startswith(OPENSPIEL_PREFIX):
            try:
                game = known_game(env_name, dict(env_kwargs or {}))
            except ValueError:  # too many information states to tabulate
                game = None
            if isinstance(game, OpenSpielGame):
                uniform = [
                    game.check_table(np.ones(game.legal_mask(seat).shape), seat) for seat in range(game.num_players)
                ]
                spread = game.return_sd(uniform)
                _SPREADS[key] = None if spread is None else float(spread.max())
    return _SPREADS[key]


MEASURE_EVERY = 10
"""Iterations between two exact exploitability measurements that self-play on a countable game gets by default
(:func:`self_play_rule`)."""

_SIZES: dict[str, tuple[int, int] | None] = {}


def game_size(env_name: str, env_kwargs: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """``(information states of every seat, seats deciding at each env step)`` of a game from its tree (1 seat per
    step in a turn-based game, every seat in a game of simultaneous moves), or ``None`` when it has no tree here (too
    many information states to tabulate, or no known game). Counted once per process and game."""
    import json

    from marljoint.run.registry import known_game

    key = f"{env_name} {json.dumps(dict(env_kwargs or {}), sort_keys=True, default=str)}"
    if key not in _SIZES:
        try:
            game = known_game(env_name, dict(env_kwargs or {}))
        except ValueError:  # too many information states to tabulate
            game = None
        _SIZES[key] = None
        if game is not None:
            states = sum(len(game.infoset_observations(seat)) for seat in range(game.num_players))
            _SIZES[key] = (states, game.num_players if getattr(game, "simultaneous", False) else 1)
    return _SIZES[key]


def self_play_rule(
    values: Mapping[str, Any], default_env: str, cores: int | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings ``--self-play`` starts from under the run's own ``values``, and the reasons of those a rule chose.

    On an OpenSpiel game or the bundled Kuhn poker: :data:`SELF_PLAY_TRAINER`, exact exploitability measurements every
    :data:`MEASURE_EVERY` iterations where the game has a tree (:func:`game_size`), and with ``cores`` the
    collection of :func:`self_play_collection`; with ``self_play = "mmd"`` also :data:`MMD_TRAINER` and the regime of
    :func:`mmd_magnet_rule` (from the game and the run's ``num_envs × rollout_steps``: ``mmd.<key>`` settings and
    ``uniform_mix``).
    Any setting ``values`` holds is left out (a ``[mmd]`` table given whole keeps its keys; a file such as a run's
    ``config.toml`` holds every setting, so nothing is added to it).

    Args:
        values: the run's settings so far (a preset's, a ``--config`` file's, the command line's), flat.
        default_env: the env when ``values`` names none.
        cores: the cores of this machine one run may use; ``None`` keeps the collection as ``values`` has it (several
            runs side by side, data-parallel ranks, or a collection chosen on the command line).

    Returns:
        ``(settings to put under values, {setting: reason})``: ``"mmd"`` (and ``"uniform_mix"``) when the rule chose
        the magnet, ``"collection"`` when it chose worker processes, ``"exploitability_every"`` when it measures.
    """
    env_name, self_play = values.get("env", default_env), values.get("self_play")
    settings = dict(self_play_settings(env_name, self_play))
    reasons: dict[str, str] = {}
    if not settings:
        return settings, reasons
    num_envs = int(values.get("num_envs", settings["num_envs"]))
    if cores is not None and "collection" not in values:
        collection, reason = self_play_collection(num_envs, cores)
        if collection is not None:
            settings["collection"], reasons["collection"] = collection, reason
    size = game_size(env_name, values.get("env_kwargs"))
    if size is not None and "exploitability_every" not in values:
        settings["exploitability_every"] = MEASURE_EVERY
        reasons["exploitability_every"] = (
            f"every {MEASURE_EVERY} iterations: the game's {size[0]:,} information states give an exact "
            "exploitability, and each measurement writes the policies (with MMD the average policy, "
            "openspiel_average_policy.json, which only measured runs keep)"
        )
    if self_play != "mmd":
        return settings, reasons
    settings.update(MMD_TRAINER)
    given = values.get("mmd")
    given_keys = set(given) if isinstance(given, Mapping) else set() if given is None else {"magnet", "alpha_min"}
    given_keys |= {key.partition(".")[2] for key in values if key.startswith("mmd.")}
    if "magnet" in given_keys:
        return settings, reasons
    decisions = num_envs * int(values.get("rollout_steps", settings["rollout_steps"]))
    regime, reason = mmd_magnet_rule(env_name, values.get("env_kwargs"), decisions)
    for key, value in regime.items():
        table, _, name = key.rpartition(".")
        if not (name in given_keys if table else key in values):
            settings[key] = value
            reasons[table or key] = reason
    given_alpha = given.get("alpha") if isinstance(given, Mapping) else values.get("mmd.alpha")
    if isinstance(given_alpha, (int, float)) and "mmd.alpha_min" in settings:
        settings["mmd.alpha_min"] = min(settings["mmd.alpha_min"], given_alpha)  # a floor above α is no floor
    return settings, reasons


def self_play_collection(num_envs: int, cores: int) -> tuple[dict[str, Any] | None, str]:
    """How self-play on a game collects on a machine: one worker process per core (at most one per env copy) at
    policy lag 0, from two cores up; in this process on one core.

    A game's networks are small, so collecting in one process is most of an iteration (on Kuhn poker about 60%),
    and the workers share it while the learner waits for them (policy lag 0: the learner and the workers take turns,
    so every core is a worker's). The run is the one collecting in this process would give, bit for bit (the same
    copies, seeds and noise, and the learner's one thread), with more updates per second: on two cores about 1.7
    times as many on Kuhn poker (about 410 against 245 in 120 s).

    Args:
        num_envs: the run's env copies.
        cores: the cores the run may use.

    Returns:
        ``(the collection table, or None for in-process, the reason)``.

    Example:
        >>> self_play_collection(512, 2)[0]
        {'backend': 'subprocess', 'workers': 2}
    """
    from marljoint.collect import CollectionConfig

    workers = min(cores, num_envs)
    if workers < 2:
        return None, ""
    collection = CollectionConfig("subprocess", workers=workers, policy_lag=0)
    return collection.to_dict(), (
        f"{workers} env worker processes at policy lag 0, one per core of the {cores} this run may use: a game's "
        "networks are small and stepping its copies is most of an iteration in one process; the same run, bit for "
        "bit, as collecting in this process, with more updates per second"
    )


def self_play_settings(env_name: str, self_play: str | None) -> dict[str, Any]:
    """The trainer settings ``--self-play`` starts from on ``env_name``: :data:`SELF_PLAY_TRAINER` for an OpenSpiel
    game or the bundled Kuhn poker, nothing for other envs (their own defaults) or without self-play. MMD's own
    settings come from :func:`self_play_rule`."""
    if self_play is None or not (env_name.startswith(OPENSPIEL_PREFIX) or env_name == "kuhn_poker_v0"):
        return {}
    return {"self_play": self_play, **SELF_PLAY_TRAINER}


def auto_meta_solver(recipe: Preset, players: int, oracle: str = "ppo") -> str:
    """The meta-solver ``--meta-solver auto`` picks.

    With PPO best responses, the recipe's own when it names one. Otherwise ``nash`` for two players (an exact
    equilibrium of the meta-game: with exact best responses PSRO is then the double oracle, which ends at an exact
    equilibrium) and ``regret_matching`` for more (``nash`` solves two-player games only).

    Args:
        recipe: the env's settings (:func:`recipe_for`).
        players: the number of players.
        oracle: ``"ppo"`` or ``"exact"``, the best-response oracle.
    """
    if oracle == "ppo" and recipe.meta_solver is not None:
        return recipe.meta_solver
    return "nash" if players == 2 else "regret_matching"


def recipe_for(env_name: str) -> Preset:
    """The best-response :class:`~marljoint.run.presets.Preset` of an env: its own for a bundled best-response
    env, :data:`OPENSPIEL_RECIPE` for an OpenSpiel game, :data:`GENERAL_RECIPE` otherwise."""
    if env_name in RECIPES:
        return RECIPES[env_name]
    if env_name.startswith(OPENSPIEL_PREFIX):
        return OPENSPIEL_RECIPE
    return GENERAL_RECIPE
