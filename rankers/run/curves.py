"""A run's learning curves: training loss and every validation metric per epoch, the best epoch
marked (``curves.png`` in each training run folder; docs/architecture.md#what-a-run-writes).

Public API::

    run_curves(run_dir, *, monitor="val/map", mode="max") -> RunCurves   # the data of the plot
    history_curves(history, *, monitor="val/map", mode="max") -> RunCurves  # per-epoch dicts
    plot_run_curves(run_dir, path=None, *, monitor="val/map", mode="max") -> matplotlib Figure
    plot_curves(curves, path=None, *, title="") -> matplotlib Figure

The values are the run's CSV log (``csv/version_*/metrics.csv``, which every ``logger`` config
writes; a resumed run's later versions continue the earlier ones): ``train/loss`` and each
``val/*`` column, one value per epoch. The best epoch is the first epoch whose ``monitor`` value
is the best by ``mode`` (``"max"`` or ``"min"``), the rule of Lightning's ``ModelCheckpoint``
that keeps ``checkpoints/best.ckpt``. Matplotlib is imported only when a figure is drawn, and
drawn without pyplot (an Agg canvas of its own), so no global backend is touched.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from differank.datamodules.atomic_files import write_file

MODES = ("max", "min")
_VERSION = re.compile(r"version_([0-9]+)")
_COLUMNS = 4  # panels per row


@dataclass
class RunCurves:
    """Per-epoch values of a run: ``series[name]`` maps epoch -> value for ``train/loss`` and
    each ``val/*`` metric; ``best_epoch`` is the monitored metric's best (None without it)."""

    series: dict[str, dict[int, float]] = field(default_factory=dict)
    monitor: str = "val/map"
    best_epoch: int | None = None

    @property
    def names(self) -> list[str]:
        """The plotted metrics: the training loss first, then validation's in name order."""
        return sorted(self.series, key=lambda name: (not name.startswith("train/"), name))


def _metric_files(run_dir: Path) -> list[Path]:
    logs = [p for p in (run_dir / "csv").glob("version_*/metrics.csv") if p.is_file()]
    numbered = [(_VERSION.fullmatch(p.parent.name), p) for p in logs]
    return [p for _, p in sorted((int(m[1]), p) for m, p in numbered if m)]


def run_curves(run_dir, *, monitor: str = "val/map", mode: str = "max") -> RunCurves:
    """The per-epoch values of ``run_dir``'s CSV log and the best epoch by ``monitor``.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / "csv" / "version_0").mkdir(parents=True)
        >>> _ = (run / "csv" / "version_0" / "metrics.csv").write_text(
        ...     "epoch,step,train/loss,val/map\\n0,1,,0.5\\n0,1,2.0,\\n1,3,,0.7\\n1,3,1.5,\\n"
        ...     "2,5,,0.6\\n2,5,1.2,\\n")
        >>> curves = run_curves(run)
        >>> curves.series["train/loss"], curves.series["val/map"], curves.best_epoch
        ({0: 2.0, 1: 1.5, 2: 1.2}, {0: 0.5, 1: 0.7, 2: 0.6}, 1)
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    run_dir = Path(run_dir)
    files = _metric_files(run_dir)
    if not files:
        raise FileNotFoundError(
            f"{run_dir} has no CSV log (csv/version_*/metrics.csv): learning curves are drawn "
            "from it; every conf/logger config writes it"
        )
    curves = RunCurves(monitor=monitor)
    for path in files:  # later versions (a resumed run) overwrite the epochs they repeat
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                if not row.get("epoch"):
                    continue
                epoch = int(float(row["epoch"]))
                for name, text in row.items():
                    plotted = name == "train/loss" or name.startswith("val/")
                    if plotted and text not in (None, ""):
                        curves.series.setdefault(name, {})[epoch] = float(text)
    return _with_best_epoch(curves, mode)


def history_curves(history, *, monitor: str = "val/map", mode: str = "max") -> RunCurves:
    """The curves of per-epoch dicts (``epoch``, ``train/loss``, ``val/*``), as
    :class:`differank.Ranker` keeps them in memory."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    curves = RunCurves(monitor=monitor)
    for row in history:
        epoch = int(row["epoch"])
        for name, value in row.items():
            if name == "train/loss" or name.startswith("val/"):
                curves.series.setdefault(name, {})[epoch] = float(value)
    return _with_best_epoch(curves, mode)


def _with_best_epoch(curves: RunCurves, mode: str) -> RunCurves:
    watched = {e: v for e, v in curves.series.get(curves.monitor, {}).items() if not math.isnan(v)}
    if watched:
        best = max if mode == "max" else min
        value = best(watched.values())
        curves.best_epoch = min(e for e, v in watched.items() if v == value)
    return curves


def plot_run_curves(run_dir, path=None, *, monitor: str = "val/map", mode: str = "max"):
    """:func:`plot_curves` of :func:`run_curves`, titled with the run folder's name."""
    curves = run_curves(run_dir, monitor=monitor, mode=mode)
    return plot_curves(curves, path, title=Path(run_dir).name)


def plot_curves(curves: RunCurves, path=None, *, title: str = ""):
    """One panel per metric (training loss first), each with a dashed line at the best epoch,
    and the monitored panel's best value circled; written to ``path`` (PNG, whole or absent)
    when given. Returns the ``matplotlib.figure.Figure``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    monitor = curves.monitor
    names = curves.names
    rows = max(1, math.ceil(len(names) / _COLUMNS))
    columns = min(_COLUMNS, max(1, len(names)))
    figure = Figure(figsize=(3.2 * columns, 2.4 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False).reshape(-1)
    for ax, name in zip(axes, names, strict=False):
        epochs = sorted(curves.series[name])
        values = [curves.series[name][e] for e in epochs]
        ax.plot(epochs, values, marker="o", markersize=3, label=name)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if curves.best_epoch is not None:
            ax.axvline(curves.best_epoch, color="tab:red", linestyle="--", label="best epoch")
        if name == monitor and curves.best_epoch is not None:
            ax.plot(
                [curves.best_epoch],
                [curves.series[name][curves.best_epoch]],
                "o",
                markersize=9,
                markerfacecolor="none",
                color="tab:red",
                label=f"best {name}",
            )
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    best = "" if curves.best_epoch is None else f"best epoch {curves.best_epoch} by {monitor}"
    figure.suptitle("; ".join(part for part in (title, best) if part), fontsize=10)
    if path is not None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        write_file(path, buffer.getvalue())
    return figure
