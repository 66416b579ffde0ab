"""Composing and running ``conf/train.yaml`` from Python, for the ``differank`` command,
notebooks, tests and other tools, without disturbing the caller's Hydra or logging
(``differank.compose`` and ``differank.run``).

Hydra keeps its state in process-wide singletons: ``GlobalHydra`` (the config search path),
``HydraConfig`` (the running job's ``hydra`` node, which ``${hydra:runtime.output_dir}`` reads),
``JobRuntime`` (the job's name) and ``VersionBase``. Composing here sets them aside and puts the
very objects it found back afterwards (also when composing fails), so a caller's own
``@hydra.main`` app keeps its output directory and config; a lock lets threads compose at once.
A run's logging (``train.log``, Lightning's lines, ``quiet``) and warnings filters are set for
the run alone and put back as found after it.

Public API::

    compose_config(overrides=(), *, run_dir) -> DictConfig  # resolved, without the hydra node
    run(overrides=(), *, output_dir=None) -> RunResult      # what `differank OVERRIDES` does
    RunResult(run_dir, monitor, best_validation, test_metrics)
    written_test_metrics(run_dir) -> dict                   # test_metrics.json, less its table
    compose_with_hydra(overrides=(), *, run_dir) -> DictConfig  # with it, unresolved
    without_hydra(cfg) -> DictConfig                        # the job's part of that, unresolved
    CONFIG_DIR, TASKS                                       # the package's conf/, its tasks
"""

from __future__ import annotations

import json
import logging
import logging.config
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobRuntime
from hydra.version import VersionBase
from omegaconf import DictConfig, OmegaConf, open_dict

import differank
from differank.datamodules.atomic_files import write_files
from differank.datamodules.download import data_home
from differank.rankers.run.folders import claim_folder, remove_if_unused
from differank.rankers.training.console import hide_progress

# src/differank/conf links to the top-level conf/ in a checkout; a wheel holds the files there
CONFIG_DIR = Path(differank.__file__).resolve().parent / "conf"
# The tasks of conf/train.yaml's ``task`` key: rankers/run/tasks.py's TASKS, named here too so
# that the command line checks a task without loading torch (tests/test_cli.py keeps both equal).
TASKS = ("fit", "test", "predict", "export", "simulate", "tune")
# Hydra's process-wide state that composing a config sets (Singleton._instances is Hydra's own
# registry of it: hydra.initialize backs GlobalHydra up from there the same way).
_HYDRA_STATE = (GlobalHydra, HydraConfig, JobRuntime, VersionBase)
_COMPOSING = threading.Lock()
# One run at a time in a process: Lightning, the seeds and logging are process-wide.
_RUNNING = threading.RLock()
# The loggers a run sets: differank's level, Lightning's handlers (console_logging)
_RUN_LOGGERS = ("differank", "pytorch_lightning")
# The tasks that write test_metrics.json (fit tests its best epoch; test scores a checkpoint).
_TESTING_TASKS = ("fit", "test")


def register_resolvers() -> None:
    """The resolvers of ``conf/``: ``${data_dir:MQ2008}`` ($LETOR_DIR/MQ2008, else the project's
    data folder) and ``${unique_dir:outputs/DATE/TIME}`` (that folder, created, or TIME_1, ...
    when another run has it; cached, so one config claims one folder). Idempotent."""
    OmegaConf.register_new_resolver("data_dir", lambda name: str(data_home() / name), replace=True)
    OmegaConf.register_new_resolver("unique_dir", claim_folder, use_cache=True, replace=True)


register_resolvers()


@contextmanager
def _own_hydra_state() -> Iterator[None]:
    """Hydra's singletons set aside for the block, the ones found put back after it."""
    with _COMPOSING:
        found = {kind: Singleton._instances.pop(kind, None) for kind in _HYDRA_STATE}
        try:
            yield
        finally:
            for kind, instance in found.items():
                Singleton._instances.pop(kind, None)
                if instance is not None:
                    Singleton._instances[kind] = instance


def _compose(overrides: Sequence[str], run_dir: str | Path | None) -> DictConfig:
    """``conf/train.yaml`` with ``overrides`` and Hydra's node, whose output folder is
    ``run_dir`` (None: ``hydra.run.dir``, claimed as the command line claims it)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="train"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    with open_dict(cfg):
        folder = cfg.hydra.run.dir if run_dir is None else run_dir
        cfg.hydra.runtime.output_dir = os.path.abspath(folder)  # absolute, as Hydra makes it
        cfg.hydra.job.num = 0
    return cfg


def without_hydra(cfg: DictConfig) -> DictConfig:
    """``cfg`` less Hydra's own node: the job's config, unresolved (a copy)."""
    return OmegaConf.masked_copy(cfg, [str(key) for key in cfg if key != "hydra"])


def _job_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` without Hydra's node, every interpolation resolved (``${hydra:...}`` against
    ``cfg``'s own node, set as the current HydraConfig while the state is our own)."""
    HydraConfig.instance().set_config(cfg)
    job = without_hydra(cfg)
    OmegaConf.resolve(job)
    OmegaConf.set_struct(job, True)  # as Hydra hands it to a task: a mistyped key raises
    return job


def compose_config(overrides: Sequence[str] = (), *, run_dir: str | Path) -> DictConfig:
    """``conf/train.yaml`` composed with command-line style ``overrides`` (``["loss=listnet",
    "trainer.max_epochs=1"]``), every interpolation resolved (``${hydra:runtime.output_dir}``
    is ``run_dir``, made absolute), without the ``hydra`` node: the config that ``differank
    OVERRIDES`` runs. Hydra's global state is left as found, also inside a running
    ``@hydra.main`` app.

    >>> cfg = compose_config(["loss=listnet", "trainer.max_epochs=1"], run_dir="/tmp/run")
    >>> cfg.loss._target_, cfg.trainer.max_epochs, cfg.trainer.default_root_dir, "hydra" in cfg
    ('differank.losses.listnet.ListNetLoss', 1, '/tmp/run', False)
    """
    with _own_hydra_state():
        return _job_config(_compose(overrides, run_dir))


def compose_with_hydra(overrides: Sequence[str] = (), *, run_dir: str | Path) -> DictConfig:
    """``conf/train.yaml`` composed with ``overrides`` and with Hydra's own node (its help
    template, run folder, logging and sweep settings), unresolved; ``run_dir`` is its output
    folder. Hydra's global state is left as found."""
    with _own_hydra_state():
        return _compose(overrides, run_dir)


def console_logging(quiet: bool) -> None:
    """A run's console: Lightning's messages join the root logger's handlers (the terminal and
    ``train.log``); with ``quiet`` the terminal hides the progress lines (epochs, checkpoints,
    Lightning's set-up) and keeps warnings, the test table and the output folder; a file handler
    (``train.log``) keeps every line. It changes the process's logging: for good in the
    command line's process, for the run alone under :func:`run`."""
    lightning = logging.getLogger("pytorch_lightning")
    lightning.handlers.clear()
    lightning.propagate = True
    if quiet:
        for handler in logging.getLogger().handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.addFilter(hide_progress)


@dataclass(frozen=True)
class RunResult:
    """What :func:`run` did: the folder it wrote, the validation metric its epoch was chosen on
    (``monitor``) with the best value it reached (NaN unless it trained), and the test metrics
    it wrote (``test_metrics.json`` without its table of conventions; empty for a task that
    writes none: predict, export, simulate)."""

    run_dir: Path
    monitor: str
    best_validation: float
    test_metrics: dict[str, float]


def run(overrides: Sequence[str] = (), *, output_dir: str | Path | None = None) -> RunResult:
    """What ``differank OVERRIDES`` does, from Python: ``conf/train.yaml`` composed with
    ``overrides``, its task run, its outputs written into ``output_dir`` (None: a new
    ``outputs/DATE/TIME`` folder in the working directory, as the command line claims one; a
    failed run removes a folder it claimed while that holds no output). Errors are raised as
    they are (no compact message). One run at a time in a process; sweeps (``-m``) are the
    command line's.

    The run writes ``train.log`` and ``.hydra/{config,overrides}.yaml`` as the command line
    does; its lines reach the caller's root handlers (the terminal's handler of
    ``conf/hydra/job_logging/`` when there is none). Afterwards Hydra's state, every logger
    that existed before (handlers, levels, filters, propagation), its handlers' filters and the
    warnings filters are as the caller had them.

    >>> result = run(["trainer.max_epochs=1", "quiet=true"], output_dir=folder)  # doctest: +SKIP
    >>> result.monitor, sorted(result.test_metrics)[:2]  # doctest: +SKIP
    ('val/map', ['map', 'mean_ndcg'])
    """
    with _own_hydra_state():
        cfg = _compose(overrides, output_dir)
        job = _job_config(cfg)
    run_dir = Path(cfg.hydra.runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)  # as Hydra makes it: train.log opens there
    try:
        with _RUNNING, _run_logging(cfg, job.quiet), warnings.catch_warnings():
            # torch and Lightning load only now, their import-time logging set-up undone after
            from differank.rankers.run.tasks import run_task

            write_files(_hydra_records(cfg, overrides))
            best = run_task(job, run_dir, overrides=list(overrides))
    except BaseException:
        remove_if_unused(run_dir)  # the folder this run claimed, if it holds no output
        raise
    metrics = written_test_metrics(run_dir) if job.task in _TESTING_TASKS else {}
    return RunResult(run_dir, job.monitor, best, metrics)


def _hydra_records(cfg: DictConfig, overrides: Sequence[str]) -> dict[Path, str]:
    """``.hydra/config.yaml`` (the composed config, unresolved) and ``.hydra/overrides.yaml``,
    as Hydra writes them for the command line (none with ``hydra.output_subdir=null``)."""
    if cfg.hydra.output_subdir is None:
        return {}
    folder = Path(cfg.hydra.runtime.output_dir) / cfg.hydra.output_subdir
    return {
        folder / "config.yaml": OmegaConf.to_yaml(without_hydra(cfg)),
        folder / "overrides.yaml": OmegaConf.to_yaml(OmegaConf.create(list(overrides))),
    }


def written_test_metrics(run_dir: Path) -> dict[str, float]:
    """``test_metrics.json`` without its side-by-side table of conventions; {} when the run
    wrote none (``trainer.fast_dev_run``, a DDP rank other than 0)."""
    written = run_dir / "test_metrics.json"
    if not written.is_file():
        return {}
    metrics = json.loads(written.read_text())
    metrics.pop("conventions", None)  # the table stays in the file
    return metrics


@contextmanager
def _run_logging(cfg: DictConfig, quiet: bool) -> Iterator[None]:
    """The run's logging for the block: the file handlers of ``cfg``'s ``job_logging``
    (``train.log``) on the root logger, its other handlers (the terminal's) only when the
    caller's root logger has none, differank's loggers at its root level, Lightning's lines
    routed to them and ``quiet`` applied (:func:`console_logging`). Every logger that existed
    before is put back as found, with its handlers' filters, and so are the loggers the run
    sets (Lightning's and differank's), found or not."""
    for name in _RUN_LOGGERS:  # made before the state is taken, so that it holds them
        logging.getLogger(name)
    found = _logging_state()
    root = logging.getLogger()
    config = cast(dict[str, Any], OmegaConf.to_container(cfg.hydra.job_logging, resolve=True))
    names = [
        name
        for name in config["root"]["handlers"]
        if "filename" in config["handlers"][name] or not root.handlers
    ]
    handlers = _handlers(config, names)
    try:
        for handler in handlers:
            root.addHandler(handler)
        logging.getLogger("differank").setLevel(config["root"]["level"])
        console_logging(quiet)
        yield
    finally:
        _restore_logging(found)
        for handler in handlers:
            handler.close()


def _handlers(config: dict[str, Any], names: list[str]) -> list[logging.Handler]:
    """The handlers ``names`` of a ``logging.config.dictConfig`` dictionary, built as
    ``dictConfig`` builds them (formatters, factories, arguments) but attached to no logger:
    ``dictConfig`` itself would replace and close the handlers the caller has."""
    configurator = logging.config.DictConfigurator(config)
    formatters = configurator.config["formatters"]
    for name in list(formatters):
        formatters[name] = configurator.configure_formatter(formatters[name])
    return [configurator.configure_handler(configurator.config["handlers"][name]) for name in names]


_LoggerState = tuple[logging.Logger, int, bool, bool, list[logging.Handler], list[Any]]
_HandlerState = tuple[logging.Handler, int, list[Any]]


def _logging_state() -> tuple[list[_LoggerState], list[_HandlerState]]:
    """Every existing logger's level, propagation, disabling, handlers and filters, and each of
    those handlers' level and filters."""
    loggers = [logging.getLogger()] + [
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)
    ]
    handlers = {handler for logger in loggers for handler in logger.handlers}
    return (
        [
            (
                logger,
                logger.level,
                logger.propagate,
                logger.disabled,
                logger.handlers[:],
                logger.filters[:],
            )
            for logger in loggers
        ],
        [(handler, handler.level, handler.filters[:]) for handler in handlers],
    )


def _restore_logging(state: tuple[list[_LoggerState], list[_HandlerState]]) -> None:
    loggers, handlers = state
    for logger, level, propagate, disabled, attached, filters in loggers:
        logger.setLevel(level)  # also clears the loggers' cached effective levels
        logger.propagate, logger.disabled = propagate, disabled
        logger.handlers[:], logger.filters[:] = attached, filters
    for handler, level, filters in handlers:
        handler.setLevel(level)
        handler.filters[:] = filters
