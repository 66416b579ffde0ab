"""The sweep summary: one table of every job of a Hydra multirun (its overrides, the value
``train.py`` returned, its test metrics and its time), written when the sweep ends.

Configured in ``conf/hydra/default.yaml`` as a Hydra callback (``_target_:
differank.rankers.run.sweep_summary.SweepSummary``), so it works with any sweeper (basic grid,
Optuna) and launcher (in-process, submitit): each job writes ``job.json`` into its own folder from
the job's process, and the end of the sweep, in the launching process, gathers them into
``summary.csv`` and ``summary.md`` in the sweep folder and prints the table. Part of the Hydra
harness beside ``rankers/training/module.py``: it imports Hydra and Rich, never the losses.
"""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table


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
        temporary = path.with_suffix(f".{os.getpid()}.tmp")  # DDP ranks may all write it
        temporary.write_text(json.dumps(record, default=float) + "\n")
        os.replace(temporary, path)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows, common = summarize(sweep_dir)
        if not rows:
            return
        columns = list(dict.fromkeys(key for row in rows for key in row))
        with open(sweep_dir / f"{self.filename}.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
        caption = f"Overrides of every job: `{' '.join(common) or '(none)'}`"
        (sweep_dir / f"{self.filename}.md").write_text("\n".join([caption, "", *lines]) + "\n")
        table = Table(*columns, title=f"sweep summary: {sweep_dir}", caption=caption)
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in columns))
        Console(width=max(120, 14 * len(columns))).print(table)


def summarize(sweep_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per job folder of ``sweep_dir`` that has a ``job.json``, in job order, with
    the job's ``test_metrics.json`` merged in when it has one; ``overrides`` keeps what differs
    between jobs. Also returns the overrides that all jobs share."""
    rows = []
    for record in sweep_dir.glob("**/job.json"):
        row = json.loads(record.read_text())
        metrics = record.parent / "test_metrics.json"
        if metrics.is_file():
            row.update(json.loads(metrics.read_text()))
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


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)
