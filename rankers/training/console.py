"""The run's terminal: its log handler (:func:`console_handler`,
``conf/hydra/job_logging/differank.yaml``), what ``quiet=true`` hides there (:func:`is_progress`)
and the third-party warnings a run filters (:data:`NOISY_WARNINGS`). Rich only, no Lightning:
every command configures its logging through here, and one that trains nothing (``task=predict
files=[...]``, ``task=export``) loads no Lightning at all.

Public API::

    console_handler(console=None, **rich_options) -> logging.Handler
    is_progress(record) -> bool, hide_progress(record) -> bool   # quiet=true's filter
    PROGRESS_LOGGERS, WIDE_COLUMNS, NOISY_WARNINGS
"""

from __future__ import annotations

import logging
import os
from typing import Any

import rich
from rich.console import Console
from rich.logging import RichHandler

# Loggers whose INFO lines report progress (epochs, checkpoints, a solver's convergence,
# Lightning's set-up lines): what quiet=true hides on the terminal, never in train.log.
PROGRESS_LOGGERS = ("differank.rankers.training", "pytorch_lightning", "lightning")
WIDE_COLUMNS = 160  # the console's width when stdout is a file or a pipe (no terminal to fit)
# Known third-party noise, filtered as pyproject.toml's pytest filterwarnings does (by a run,
# rankers/run/tasks.py, and inside a library fit, rankers/training/fitting.py). Only these exact
# messages: differank's own warnings (and any other) always show.
NOISY_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\)",  # pytorch_lightning's pytree vs newer torch
    r".*does not have many workers",  # the LETOR loaders are in-memory; workers do not help
    r"You are using a custom batch sampler",  # ours shards queries itself (DDP)
    r"The `srun` command is available",  # a SLURM login node running a local job
    r"MLFlow only allows",  # its '@' -> '' renaming of ndcg@k, p@k (conf/logger/mlflow.yaml)
)


def is_progress(record: logging.LogRecord) -> bool:
    """An INFO (or lower) line about training progress; warnings never are."""
    return record.levelno < logging.WARNING and record.name.startswith(PROGRESS_LOGGERS)


def hide_progress(record: logging.LogRecord) -> bool:
    """A ``logging`` filter for the terminal's handler under ``quiet=true``."""
    return not is_progress(record)


def console_handler(console: Console | None = None, **rich_options: Any) -> logging.Handler:
    """The terminal's log handler: Rich's on a terminal (lines print above the live progress
    bar); a plain stream handler on stdout when stdout is a file or a pipe (a SLURM ``.out``,
    ``| tee``), where Rich would wrap every line at its 80-column default and pad it. There the
    console also widens to ``WIDE_COLUMNS`` (unless ``COLUMNS`` is set), for the progress bar."""
    console = console or rich.get_console()  # the progress bar's console
    if console.is_terminal:
        return RichHandler(console=console, **rich_options)
    if "COLUMNS" not in os.environ:  # the progress bar's lines too: Rich's default is 80
        console.width = max(console.width, WIDE_COLUMNS)
    return logging.StreamHandler(console.file)
