"""The run layer: export, checkpoint ensembles and the sweep summary (Hydra callback)."""
