"""The run layer: export, checkpoint ensembles, the sweep summary (Hydra callback) and the
teachers of distillation with their cached scores."""
