"""Rankers by role: `scorers`, full-batch `solvers`, `metrics`, the Lightning `training` layer
and the `run` layer (export, ensembles, sweep summary)."""
