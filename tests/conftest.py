"""Shared test setup: single-threaded torch keeps tiny-network tests fast and deterministic on small machines."""

import torch

torch.set_num_threads(1)
