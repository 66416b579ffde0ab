"""The sweep summary: one table of every job of a Hydra multirun (its overrides, the value
``train.py`` returned, its test metrics and its time), written when the sweep ends.

Configured in ``conf/hydra/default.yaml`` as a Hydra callback (``_target_:
differank.rankers.run.sweep_summary.SweepSummary``), so it works with any sweeper (basic grid,
Optuna) and launcher (in-process, submitit): each job writes ``job.json`` into its own folder from
the job's process, and the end of the sweep, in the launching process, gathers them into
``summary.csv`` and ``summary.md`` in the sweep folder and prints the table. When a setting ran
on several folds or seeds (``data.fold=1,2,3,4,5``, ``seed=0,1,2``, or both),
``summary_mean_std.csv`` and a second table in ``summary.md`` give each setting's mean ± std over
its folds and seeds. Part of the Hydra
harness beside ``rankers/training/module.py``: it imports Hydra and Rich, never the losses.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import time
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from differank.datamodules.atomic_files import write_file, write_files

# The overrides a setting is repeated over, and the column counting each one's values.
REPEATS = {"data.fold": "folds", "seed": "seeds"}
FLAT = ("overrides", *REPEATS.values(), "runs")  # over_runs' columns that are not (mean, std)


class SweepSummary(Callback):
    """Hydra callback: ``job.json`` per job, ``summary.{csv,md}`` per sweep (see module doc)."""

    def __init__(self, filename: str = "summary") -> None:
        self.filename = filename
        self.started = time.perf_counter()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.perf_counter()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        ok = job_return.status == JobStatus.COMPLETED
        record = {
            "job": config.hydra.job.num,
            "overrides": list(config.hydra.overrides.task),
            "status": "ok" if ok else "failed",
            "value": job_return.return_value if ok else None,
            "seconds": round(time.perf_counter() - self.started, 2),
        }
        path = Path(config.hydra.runtime.output_dir) / "job.json"
        write_file(path, json.dumps(record, default=float) + "\n")  # DDP ranks may all write it

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows, common = summarize(sweep_dir)
        if not rows:
            return
        columns = list(dict.fromkeys(key for row in rows for key in row))
        table_csv = io.StringIO(newline="")
        writer = csv.DictWriter(table_csv, columns)
        writer.writeheader()
        writer.writerows(rows)
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
        caption = f"Overrides of every job: `{' '.join(common) or '(none)'}`"
        markdown = "\n".join([caption, "", *lines]) + "\n"
        files = {sweep_dir / f"{self.filename}.csv": table_csv.getvalue()}
        table = Table(*columns, title=f"sweep summary: {sweep_dir}", caption=caption)
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in columns))
        Console(width=max(120, 14 * len(columns))).print(table)
        settings = over_runs(rows)
        if any(setting["runs"] > 1 for setting in settings):
            mean_std_csv, mean_std_markdown = self._over_runs_files(settings)
            files[sweep_dir / f"{self.filename}_mean_std.csv"] = mean_std_csv
            markdown += mean_std_markdown
        files[sweep_dir / f"{self.filename}.md"] = markdown
        write_files(files)  # the summary is whole or absent

    def _over_runs_files(self, settings: list[dict[str, Any]]) -> tuple[str, str]:
        """The text of ``summary_mean_std.csv`` (mean and std columns) and of the mean ± std
        table appended to ``summary.md``; the table is also printed."""
        columns = list(dict.fromkeys(key for row in settings for key in row))
        mean_std_csv = io.StringIO(newline="")
        writer = csv.writer(mean_std_csv)
        writer.writerow(_flat_header(columns))
        writer.writerows(_flat_row(row, columns) for row in settings)
        cells = [[_spread(row.get(c)) for c in columns] for row in settings]
        title = "Mean ± std over folds and seeds (std: sample standard deviation, n − 1)"
        lines = ["", title, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        table = Table(*columns, title=title)
        for row in cells:
            table.add_row(*row)
        Console(width=max(120, 20 * len(columns))).print(table)
        return mean_std_csv.getvalue(), "\n".join(lines) + "\n"


def summarize(sweep_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per job folder of ``sweep_dir`` that has a ``job.json``, in job order, with
    the job's ``test_metrics.json`` merged in when it has one; ``overrides`` keeps what differs
    between jobs. Also returns the overrides that all jobs share."""
    rows = []
    for record in sweep_dir.glob("**/job.json"):
        row = json.loads(record.read_text())
        metrics = record.parent / "test_metrics.json"
        if metrics.is_file():
            values = json.loads(metrics.read_text())
            values.pop("conventions", None)  # the side-by-side table stays in each job's file
            row.update(values)
        row["seconds"] = row.pop("seconds")  # last column
        rows.append(row)
    rows.sort(key=lambda row: row["job"])
    if not rows:
        return [], []
    shared = set.intersection(*(set(row["overrides"]) for row in rows))
    common = [o for o in rows[0]["overrides"] if o in shared]
    for row in rows:
        row["overrides"] = " ".join(o for o in row["overrides"] if o not in shared)
    return rows, common


def over_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting (a job's differing overrides without ``data.fold=...`` and
    ``seed=...``), in job order: ``overrides``; ``folds`` and ``seeds``, how many different
    ones its completed jobs ran (1 when not swept); ``runs``, its completed jobs; and
    ``(mean, std)`` of every number column (``value``, the test metrics, ``seconds``) over those
    runs, folds and seeds pooled; std is the sample standard deviation (n − 1), 0 for one run."""
    groups: dict[str, list[tuple[dict[str, Any], dict[str, str]]]] = {}
    for row in rows:
        if row["status"] == "ok":
            setting, repeated = _split_repeats(row["overrides"])
            groups.setdefault(setting, []).append((row, repeated))
    settings = []
    for setting, members in groups.items():
        runs = [row for row, _ in members]
        summary: dict[str, Any] = {"overrides": setting or "(every job)"}
        for key, column in REPEATS.items():
            summary[column] = len({repeated.get(key) for _, repeated in members})
        summary["runs"] = len(runs)
        numbers = [
            key
            for key in dict.fromkeys(k for row in runs for k in row)
            if key != "job" and all(isinstance(row.get(key), (int, float)) for row in runs)
        ]
        for key in numbers:
            values = [float(row[key]) for row in runs]
            summary[key] = (statistics.fmean(values), _sample_std(values))
        settings.append(summary)
    return settings


def _split_repeats(overrides: str) -> tuple[str, dict[str, str]]:
    """A job's differing overrides as its setting and the values of its REPEATS keys
    (``data.fold=2``, ``++data.fold=2`` and ``seed=1`` alike)."""
    setting, repeated = [], {}
    for override in overrides.split():
        key, _, value = override.partition("=")
        if key.lstrip("+") in REPEATS:
            repeated[key.lstrip("+")] = value
        else:
            setting.append(override)
    return " ".join(setting), repeated


def _sample_std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _spread(value: Any) -> str:
    if isinstance(value, tuple):
        return f"{value[0]:.4f} ± {value[1]:.4f}"
    return _cell(value)


def _flat_header(columns: list[str]) -> list[str]:
    return [name for c in columns for name in ((c,) if c in FLAT else (f"{c}_mean", f"{c}_std"))]


def _flat_row(row: dict[str, Any], columns: list[str]) -> list[Any]:
    return [v for c in columns for v in ((row.get(c),) if c in FLAT else row.get(c, ("", "")))]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)
