"""Off-policy multi-agent algorithms."""
