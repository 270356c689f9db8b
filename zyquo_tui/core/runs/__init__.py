"""Runs: what a run is, its settings (each defined once), its mlx-lm config and why it failed."""
