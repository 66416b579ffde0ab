"""The protocol's forest plot, drawn by :mod:`differank.rankers.tuning.figure` (importable from
here for the benchmarks and their tests).

    python benchmarks/protocol.py --plot-only --out benchmarks/results/protocol.md
        # redraws benchmarks/results/protocol.png from benchmarks/results/protocol.json
"""

from differank.rankers.tuning.figure import COLORS, METRICS, Interval, forest_plot, forest_rows

__all__ = ["COLORS", "METRICS", "Interval", "forest_plot", "forest_rows"]
