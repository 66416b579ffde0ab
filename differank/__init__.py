"""differank: learning-to-rank objectives as plain torch losses, with a LETOR data module,
LETOR-exact metrics and a Lightning + Hydra harness.

The installed packages are ``differank.losses`` (the objectives; torch only),
``differank.rankers`` (scorers, solvers, metrics, the Lightning layer and the run layer) and
``differank.datamodules`` (reading and batching LETOR data).
"""

__version__ = "0.1.0"
