"""Game-theoretic training: meta-games and meta-solvers, PSRO, NFSP, and exploitability / NashConv.

- :class:`PSRO` / :class:`PsroConfig`: populations of frozen best responses, an empirical meta-game estimated
  entry by entry, and a meta-solver from :data:`META_SOLVERS`.
- :class:`NFSP` / :class:`NfspConfig`: PPO best responses plus supervised average policies.
- :class:`MmdConfig` / :func:`mmd_regularizer`: magnetic mirror descent self-play of the joint trainer;
  :class:`PolicyAverage`: the reach-weighted average of tabulated iterates, whose exploitability no-regret
  self-play bounds.
- :func:`nash_conv` / :func:`exploitability`: exact for games with a known tree (matrix games, Kuhn poker);
  :func:`best_response_gain` estimates NashConv with a confidence interval everywhere else.
"""

from marljoint.best_response.average import PolicyAverage
from marljoint.best_response.exploitability import (
    exploitability,
    kuhn_exploitability,
    kuhn_nash_conv,
    matrix_exploitability,
    matrix_nash_conv,
    nash_conv,
)
from marljoint.best_response.games import KnownGame, KuhnGame, MatrixGame
from marljoint.best_response.kuhn import (
    KUHN_CARDS,
    KUHN_DEALS,
    KUHN_HISTORIES,
    KUHN_INFOSETS,
    KUHN_NUM_ACTIONS,
    KUHN_NUM_INFOSETS,
    KUHN_OBSERVATION_SIZE,
    kuhn_best_response,
    kuhn_infoset_observations,
    kuhn_mixture_table,
    kuhn_policy_value,
    kuhn_profile_values,
    kuhn_reach,
    tables_from_policy,
)
from marljoint.best_response.matrix import (
    action_values,
    is_constant_sum,
    lemke_howson,
    validate_payoffs,
    validate_strategies,
    zero_sum_nash,
)
from marljoint.best_response.meta_game import MetaGame
from marljoint.best_response.meta_solvers import (
    META_SOLVERS,
    MetaSolver,
    fictitious_play,
    get_meta_solver,
    nash,
    prd,
    project_to_simplex,
    regret_matching,
    uniform,
)
from marljoint.best_response.mmd import MmdConfig, MmdRegularizer, OpponentReach, magnet_kl, mmd_regularizer
from marljoint.best_response.nfsp import NFSP, NFSP_METRICS, AveragePolicy, NfspConfig
from marljoint.best_response.openspiel_game import MAX_INFORMATION_STATES, OpenSpielGame, OpenSpielTablePolicy
from marljoint.best_response.opponents import (
    LEARNER,
    AnticipatoryAssigner,
    FinishedEpisode,
    MetaStrategyAssigner,
    PopulationEnv,
    SeatAssigner,
    mixture_profiles,
    simulate_profiles,
)
from marljoint.best_response.oracles import (
    BestResponseGain,
    BestResponses,
    ExactOracle,
    PPOOracle,
    best_response_gain,
    warm_start_seat,
)
from marljoint.best_response.population import (
    ConstantPolicy,
    FrozenPolicy,
    KuhnTablePolicy,
    PolicyMixture,
    UniformPolicy,
)
from marljoint.best_response.psro import PSRO, PSRO_METRICS, PsroConfig
from marljoint.best_response.reservoir import ReservoirBatch, ReservoirBuffer
from marljoint.best_response.resolve import resolve_game

__all__ = [
    "AnticipatoryAssigner",
    "AveragePolicy",
    "BestResponseGain",
    "BestResponses",
    "ConstantPolicy",
    "ExactOracle",
    "FinishedEpisode",
    "FrozenPolicy",
    "KUHN_CARDS",
    "KUHN_DEALS",
    "KUHN_HISTORIES",
    "KUHN_INFOSETS",
    "KUHN_NUM_ACTIONS",
    "KUHN_NUM_INFOSETS",
    "KUHN_OBSERVATION_SIZE",
    "KnownGame",
    "KuhnGame",
    "KuhnTablePolicy",
    "LEARNER",
    "META_SOLVERS",
    "MAX_INFORMATION_STATES",
    "MatrixGame",
    "MetaGame",
    "MetaSolver",
    "MetaStrategyAssigner",
    "MmdConfig",
    "MmdRegularizer",
    "NFSP",
    "NFSP_METRICS",
    "NfspConfig",
    "OpenSpielGame",
    "OpponentReach",
    "OpenSpielTablePolicy",
    "PPOOracle",
    "PSRO",
    "PSRO_METRICS",
    "PolicyAverage",
    "PolicyMixture",
    "PopulationEnv",
    "PsroConfig",
    "ReservoirBatch",
    "ReservoirBuffer",
    "SeatAssigner",
    "UniformPolicy",
    "action_values",
    "best_response_gain",
    "exploitability",
    "fictitious_play",
    "get_meta_solver",
    "is_constant_sum",
    "kuhn_best_response",
    "kuhn_exploitability",
    "kuhn_infoset_observations",
    "kuhn_mixture_table",
    "kuhn_nash_conv",
    "kuhn_policy_value",
    "kuhn_profile_values",
    "kuhn_reach",
    "lemke_howson",
    "magnet_kl",
    "matrix_exploitability",
    "matrix_nash_conv",
    "mixture_profiles",
    "mmd_regularizer",
    "nash",
    "nash_conv",
    "prd",
    "project_to_simplex",
    "regret_matching",
    "resolve_game",
    "simulate_profiles",
    "tables_from_policy",
    "uniform",
    "validate_payoffs",
    "validate_strategies",
    "warm_start_seat",
    "zero_sum_nash",
]
