"""The tuning report's forest plot: each row's Δ against LightGBM (per-query AP and NDCG@10)
with its 95% paired bootstrap interval, one panel per dataset and metric, drawn from the
report's JSON record.

    python benchmarks/protocol.py --plot-only --out benchmarks/results/protocol.md
        # redraws benchmarks/results/protocol.png from benchmarks/results/protocol.json

The report (rankers/tuning/tune.py) calls :func:`forest_plot` after writing its JSON (the PNG
goes beside it), and ``--plot-only`` redraws it from the JSON without running anything. Rows
are in the table's order, top to bottom; a point is the mean difference, its bar the interval,
green when the interval lies above 0 (better), red below (worse), grey when it holds 0. Rows
without an interval (the reference itself, failed rows) are left out.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from differank.datamodules.atomic_files import write_file

METRICS = {"map": "Δ AP", "ndcg@10": "Δ NDCG@10"}
COLORS = {"better": "tab:green", "worse": "tab:red", "indistinguishable": "0.45"}


@dataclass(frozen=True)
class Interval:
    """One row's paired difference on one metric of one dataset."""

    row: str
    mean: float
    low: float
    high: float
    verdict: str


def forest_rows(record: dict) -> dict[str, dict[str, list[Interval]]]:
    """``{dataset: {metric: [Interval, ...]}}`` from a ``protocol.json`` record, rows in the
    table's order, only rows with an interval."""
    datasets = {}
    for name, table in record.items():
        if name == "rows" or not isinstance(table, dict) or "rows" not in table:
            continue  # "rows" is the search record, not a dataset's table
        datasets[name] = {
            metric: [
                Interval(
                    row,
                    paired[metric]["mean"],
                    paired[metric]["low"],
                    paired[metric]["high"],
                    paired[metric]["verdict"],
                )
                for row, values in table["rows"].items()
                if (paired := values.get("paired")) and metric in paired
            ]
            for metric in METRICS
        }
    return datasets


def forest_plot(record: dict, path: Path | None = None, *, reference: str = "lightgbm"):
    """The forest plot of ``record`` (a matplotlib Figure), written to ``path`` (PNG, whole or
    absent) when given."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    datasets = forest_rows(record)
    if not datasets:
        raise ValueError("the record holds no dataset table with paired intervals")
    order = list(dict.fromkeys(i.row for d in datasets.values() for m in d.values() for i in m))
    panels = [(dataset, metric) for dataset in datasets for metric in METRICS]
    figure = Figure(
        figsize=(3.4 * len(panels) + 1.5, 0.24 * len(order) + 1.4), layout="constrained"
    )
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    position = {row: len(order) - 1 - k for k, row in enumerate(order)}  # first row on top
    for ax, (dataset, metric) in zip(axes, panels, strict=True):
        for interval in datasets[dataset][metric]:
            y = position[interval.row]
            ax.errorbar(
                [interval.mean],
                [y],
                xerr=[[interval.mean - interval.low], [interval.high - interval.mean]],
                fmt="o",
                markersize=4,
                capsize=2,
                color=COLORS.get(interval.verdict, "black"),
                label=interval.row,
            )
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_title(f"{dataset}: {METRICS[metric]} vs {reference}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", linewidth=0.3)
    axes[0].set_yticks(range(len(order)), [order[len(order) - 1 - y] for y in range(len(order))])
    axes[0].set_ylim(-0.7, len(order) - 0.3)
    figure.suptitle(
        f"Per-query test difference vs {reference}, mean and 95% paired bootstrap interval "
        "(green: better, red: worse, grey: indistinguishable)",
        fontsize=9,
    )
    if path is not None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110)
        write_file(path, buffer.getvalue())
    return figure
