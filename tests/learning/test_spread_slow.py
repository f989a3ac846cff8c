"""A learning regression test on mpe2 simple_spread (slow: run with ``pytest -m slow``)."""

import pytest

pytest.importorskip("mpe2")

from marljoint import JointMultiAgentTrainer, make_joint_env  # noqa: E402
from marljoint.run.evaluate import play_episodes  # noqa: E402
from marljoint.run.presets import get_preset  # noqa: E402

DO_NOTHING = -23.5  # mean per-agent return of a policy that never moves (max_cycles=25, local_ratio=0.5)


@pytest.mark.slow
def test_spread_preset_beats_doing_nothing_clearly():
    preset = get_preset("spread")
    config = preset.config(seed=0)
    env = make_joint_env(preset.env_fn(), config.num_envs, config.seed)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    trainer.train(400_000)
    eval_env = make_joint_env(preset.env_fn(), 10, 1234)
    returns, _ = play_episodes(trainer, eval_env, 100, deterministic=True, seed=1234)
    per_agent = float(returns.mean())
    assert per_agent >= -21.0, f"mean per-agent return {per_agent:.2f} (doing nothing: {DO_NOTHING})"
