"""The product: run specs and their TOML, the training loop of a run, evaluation, episodes, plots, metrics logs,
exports, sweeps, presets and the registry of envs and games (the only place that imports ``marljoint_envs``).

The ``marljoint`` command (:mod:`marljoint.cli`) parses arguments and prints messages over these modules.
"""
