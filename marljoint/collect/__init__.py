"""Collection: how rollouts are gathered from env copies (the per-copy noise generators so far)."""

from marljoint.collect.noise import CopyNoise, copy_generators, generators_from_states

__all__ = ["CopyNoise", "copy_generators", "generators_from_states"]
