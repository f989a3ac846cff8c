"""Every JointTrainerConfig field is type-checked: a wrong type is refused, never read as something else."""

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.run.train import RunError, RunSpec, read_config_file
from marljoint_envs import mock_v0


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"centralized_critic": "false"}, r"centralized_critic must be true or false, got 'false' \(a string"),
        ({"share_parameters": "no"}, "share_parameters must be true or false, got 'no'"),
        ({"anneal_lr": 1}, r"anneal_lr must be true, false or None \(derived .*, got 1"),
        ({"normalize_advantages": None}, "normalize_advantages must be true or false, got None"),
        ({"hidden_sizes": "256"}, r"hidden_sizes must be a list of positive integer widths such as \[64, 64\]"),
        ({"hidden_sizes": 256}, "hidden_sizes must be a list of positive integer widths"),
        ({"hidden_sizes": [64, 2.5]}, r"positive integer widths, got \[64, 2.5\]"),
        ({"hidden_sizes": [True]}, r"positive integer widths, got \[True\]"),
        ({"hidden_sizes": []}, "non-empty list"),
        ({"device": "gpu0"}, "device must name a torch device such as 'cpu', 'cuda' or 'cuda:1', got 'gpu0'"),
        ({"device": 0}, "device must name a torch device"),
        ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*63 - 1\], got -1"),
        ({"seed": 2**64}, r"seed must be an integer in \[0, 2\*\*63 - 1\]"),
        ({"seed": 1.0}, "seed must be an integer"),
        ({"learning_rate": "3e-4"}, "learning_rate must be > 0, got '3e-4'"),
        ({"num_minibatches": 0}, "num_minibatches must be a positive integer, got 0"),
        ({"num_minibatches": 4.0}, "num_minibatches must be a positive integer, got 4.0"),
    ],
)
def test_a_wrong_type_is_refused_naming_the_field_and_the_value(changes, match):
    with pytest.raises(ValueError, match=match):
        JointTrainerConfig(**changes)


def test_a_toml_string_for_a_boolean_is_refused_not_read_as_true(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('centralized_critic = "false"\n')
    with pytest.raises(RunError, match="centralized_critic must be true or false, got 'false'"):
        RunSpec.from_dict(read_config_file(path))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_device_this_machine_lacks_is_refused_when_the_trainer_is_built():
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2)
    with pytest.raises(ValueError, match=r"device='cuda', but this torch build sees no CUDA GPU.*use device='cpu'"):
        JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2, device="cuda"))
    assert JointTrainerConfig(device="cuda").device == "cuda"  # a config may name it (to run elsewhere)
