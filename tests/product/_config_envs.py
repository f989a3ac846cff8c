"""An env factory of the user's own (``--env _config_envs:tiny_brigade`` with ``tests/product`` on the path), for
runs whose config.toml names a function to call."""

from __future__ import annotations

from typing import Any

from marljoint_envs import bucket_brigade_v0


def tiny_brigade(**kwargs: Any) -> Any:
    """bucket_brigade_v0's parallel env, built through a function the run's config names."""
    return bucket_brigade_v0.parallel_env(**kwargs)
