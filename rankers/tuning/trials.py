"""One trial run: a setting trained (or a reference fitted) on one fold with one seed, its
validation and test scores written, and its ``result.json`` cached.

A run's row records the monitor its epoch was chosen by and its value there (``monitor``,
``validation``; rankers/tuning/signal.py); a label-chosen run also keeps it as ``val_map``, the
name earlier result.json files hold it under. A click-chosen run (``ultr.select=clicks``)
writes no validation scores: they are for the ensemble, which chooses on validation labels.

Runs are cached under the runs folder (``<dataset>/<row>/<trial|seed>/fold<k>/result.json``):
running again redoes only the missing or failed runs (the seeded sampler proposes the same
trials again) and those whose ``result.json`` or ``predictions/val.txt`` is damaged, another
job's or chosen by another monitor, each named in a warning (:func:`cached_result`). A failed
run is a row ``{"error": ...}`` (the report names it), never a score.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import torch

from differank.datamodules.atomic_files import write_file
from differank.rankers.run.runs import compose_config, run
from differank.rankers.tuning.signal import LABELS, Signal
from differank.rankers.tuning.space import Row

log = logging.getLogger(__name__)


def training_run(overrides: list[str], run_dir: Path) -> dict:
    """One training run (:func:`differank.run`: what ``differank OVERRIDES`` does) as a row:
    its test metrics, the ``monitor`` its epoch was chosen by (``val/map``,
    ``val/click_dcg@10``) and its ``validation`` value there. Its lines go to its own
    ``train.log``; the terminal shows only its warnings (a search prints its trials' validation
    figures, never their test tables)."""
    with _terminal_warnings_only():
        result = run(overrides, output_dir=run_dir)
    return {"monitor": result.monitor, "validation": result.best_validation, **result.test_metrics}


def _warning_or_worse(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


@contextmanager
def _terminal_warnings_only() -> Iterator[None]:
    """The root logger's terminal handlers (not its files) pass only warnings and errors."""
    terminals = [h for h in logging.getLogger().handlers if not isinstance(h, logging.FileHandler)]
    for handler in terminals:
        handler.addFilter(_warning_or_worse)
    try:
        yield
    finally:
        for handler in terminals:
            handler.removeFilter(_warning_or_worse)


@dataclass(frozen=True)
class Dataset:
    """A data set the protocol runs on: its name (the report's, the runs folder's) and the
    overrides that choose it (``data=mq2008``; ``data=letor data.root=DIR``)."""

    name: str
    overrides: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Dataset:
        """A ``conf/data`` name (``mq2008``) or ``NAME=DIR`` for any LETOR folder."""
        name, sep, root = text.partition("=")
        if sep:
            return cls(name, ("data=letor", f"data.root={root}"))
        return cls(name, (f"data={name}",))


@dataclass(frozen=True)
class Job:
    """One training run (or peer fit) of one setting on one fold with one seed."""

    row: Row
    overrides: tuple[str, ...]  # the row's + the setting's (peers: none)
    setting: tuple[tuple[str, object], ...]  # the peer's parameters (ours: in overrides)
    fold: int
    seed: int
    run_dir: Path
    val_rows: int  # the fold's validation rows: predictions/val.txt has one score each
    tiny: bool = False
    signal: Signal = LABELS  # what the run's epoch must be chosen by


def data_module(overrides: list[str], run_dir: Path):
    from hydra.utils import instantiate

    data_only = [o for o in overrides if o.lstrip("+~").startswith(("data", "seed"))]
    return instantiate(compose_config(data_only, run_dir=run_dir).data)


# What the tables and the ensemble read from a run's result.json, besides the job it ran.
RESULT_NUMBERS = ("validation", "map", "mean_ndcg", "ndcg@10", "seconds", "cpu_seconds")


class UntrustedFile(Exception):
    """A cached file that cannot stand for its run; the message names the file and why."""


def _identity(job: Job) -> dict:
    """What a ``result.json`` records of its job (as JSON reads it back: tuples are lists); a
    cached run is reused only for the same."""
    return json.loads(json.dumps({"overrides": job.overrides, "setting": dict(job.setting)}))


def _read_result(record: Path, job: Job) -> dict:
    """``record`` parsed and checked against ``job``, or :class:`UntrustedFile`."""
    try:
        cached = json.loads(record.read_bytes())
    except ValueError as error:  # undecodable bytes included
        raise UntrustedFile(f"{record} is not JSON (cut mid-write?): {error}") from None
    if not isinstance(cached, dict):
        raise UntrustedFile(f"{record} holds a JSON {type(cached).__name__}, not a run's record")
    if "job" not in cached:
        raise UntrustedFile(f"{record} names no job, so it may be another job's")
    if cached["job"] != _identity(job):
        raise UntrustedFile(f"{record} is another job's: {json.dumps(cached['job'])}")
    if "error" in cached:
        raise UntrustedFile(f"{record} records a failed run")
    if "monitor" not in cached and "val_map" in cached:  # written before the monitor was kept
        cached.update(monitor=LABELS.monitor, validation=cached["val_map"])
    if cached.get("monitor") != job.signal.monitor:
        raise UntrustedFile(
            f"{record} was chosen by {cached.get('monitor')!r}, this tune by {job.signal.monitor!r}"
        )
    # seeds of one setting share overrides and setting: the seed and fold tell them apart
    for key, expected in {"fold": job.fold, "seed": job.seed}.items():
        if cached.get(key) != expected:
            found = cached.get(key)
            raise UntrustedFile(f"{record} has {key} {found!r}, the job's is {expected!r}")
    for key in RESULT_NUMBERS:
        value = cached.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and isinstance(value, int | float) and math.isfinite(value)):
            raise UntrustedFile(f"{record} has {key} {value!r}, not a finite number")
    cached["run_dir"] = str(job.run_dir)  # its predictions are read here (runs folder moved)
    return cached


def _check_val_scores(path: Path, rows: int) -> None:
    """``path`` holds exactly one finite score per validation row, or :class:`UntrustedFile`."""
    if not path.is_file():
        raise UntrustedFile(f"{path} is missing")
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as error:
        raise UntrustedFile(f"{path} is not text: {error}") from None
    if len(lines) != rows:
        raise UntrustedFile(f"{path} has {len(lines)} lines, one per validation row is {rows}")
    for number, line in enumerate(lines, start=1):
        try:
            finite = math.isfinite(float(line))
        except ValueError:
            finite = False
        if not finite:
            raise UntrustedFile(f"{path} line {number} is {line!r}, not a finite score")


def cached_result(job: Job) -> dict | None:
    """The job's cached row; None when it has none or its files cannot be trusted. A damaged or
    foreign ``result.json`` or ``predictions/val.txt`` counts as missing (a warning names the
    file and why), never as a result."""
    record = job.run_dir / "result.json"
    if not record.is_file():
        return None
    try:
        cached = _read_result(record, job)
        if not job.row.peer and not job.signal.clicks:  # only ensemble members write them
            _check_val_scores(job.run_dir / "predictions" / "val.txt", job.val_rows)
    except UntrustedFile as error:
        log.warning("%s; the run is redone", error)
        return None
    return cached


def run_job(job: Job) -> dict:
    """Train (or fit the peer), score validation and test; the row (test metrics, the
    monitor and its validation value, where its prediction files are). Cached: a run whose
    files pass :func:`cached_result` is read, not redone."""
    cached = cached_result(job)
    if cached is not None:
        return cached
    if job.run_dir.is_dir():  # an interrupted, failed or changed run: redone from an empty
        shutil.rmtree(job.run_dir)  # folder, so a stale checkpoint never stands in for it
    torch.set_num_threads(1)
    overrides = [*job.overrides, f"seed={job.seed}", f"++data.fold={job.fold}", "quiet=true"]
    start, cpu = time.perf_counter(), time.process_time()
    try:
        job.run_dir.mkdir(parents=True, exist_ok=True)
        if job.row.peer:
            from differank.rankers.tuning.reference import run_reference

            row = run_reference(
                job.row.peer,
                data_module(overrides, job.run_dir),
                job.run_dir,
                [dict(job.setting)],
                tiny=job.tiny,
                seed=job.seed,
            )
            row.pop("settings")
            row.update(monitor=LABELS.monitor, validation=row["val_map"])
        else:
            row = training_run(overrides, job.run_dir)
            if row["monitor"] != job.signal.monitor:  # e.g. a row's own overrides changed it
                raise ValueError(
                    f"the run's epoch was chosen by {row['monitor']}, the tune chooses by "
                    f"{job.signal.monitor}: give every row the same ultr.select"
                )
            if not job.signal.clicks:  # the ensemble's scores (it chooses on validation MAP)
                row["val_map"] = row["validation"]
                root = compose_config(overrides, run_dir=job.run_dir).data.get("root")
                write_val_scores(job.run_dir, root)
        row.update(fold=job.fold, seed=job.seed, run_dir=str(job.run_dir))
    except Exception as error:  # one failing run (e.g. an invalid option pair) is a failed trial
        log.error("%s failed (the report names it)", job.run_dir, exc_info=True)
        row = {"error": " ".join(f"{type(error).__name__}: {error}".split()), "fold": job.fold}
    row.update(seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu)
    row["job"] = _identity(job)
    if "error" not in row:  # a failure is tried again by the next invocation; whole or absent
        write_file(job.run_dir / "result.json", json.dumps(row) + "\n")
    return row


def write_val_scores(run_dir: Path, data_root: str | None) -> None:
    """``predictions/val.txt``: the best checkpoint's scores of the validation split, one per
    source row (what the ensemble selects on), from the checkpoint and the run's own data
    folder ``data_root`` (a LETOR folder given by path is not under the data folder)."""
    from differank.rankers.checkpoints import load_ranker
    from differank.rankers.run.ensemble import evaluation_data
    from differank.rankers.run.scoring import score_split

    checkpoint = run_dir / "checkpoints" / "best.ckpt"
    data = evaluation_data(checkpoint, data_root=data_root)
    scores = score_split(load_ranker(checkpoint), data.split_data("val"))
    write_file(run_dir / "predictions" / "val.txt", "".join(f"{s:.17g}\n" for s in scores))


class Runner:
    """Runs jobs ``jobs`` at a time in spawned one-thread processes (or inline for 1)."""

    def __init__(self, jobs: int):
        self.pool = None
        if jobs > 1:
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            self.pool = ProcessPoolExecutor(jobs, mp_context=get_context("spawn"))

    def map(self, jobs: list[Job]) -> list[dict]:
        if self.pool is None:
            return [run_job(job) for job in jobs]
        return list(self.pool.map(run_job, jobs))

    def close(self) -> None:
        """The worker processes ended (none inline)."""
        if self.pool is not None:
            self.pool.shutdown()
