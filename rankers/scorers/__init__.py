"""Scorers: modules that map features [B, L, F] to scores [B, L] (the `Ranker` protocol)."""
