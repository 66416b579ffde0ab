"""Composing ``conf/train.yaml`` from Python, for the ``differank`` command, notebooks, tests and
other tools, without disturbing the caller's Hydra.

Hydra keeps its state in process-wide singletons: ``GlobalHydra`` (the config search path),
``HydraConfig`` (the running job's ``hydra`` node, which ``${hydra:runtime.output_dir}`` reads),
``JobRuntime`` (the job's name) and ``VersionBase``. Composing here sets them aside and puts the
very objects it found back afterwards (also when composing fails), so a caller's own
``@hydra.main`` app keeps its output directory and config; a lock lets threads compose at once.

Public API::

    compose_config(overrides=(), *, run_dir) -> DictConfig  # resolved, without the hydra node
    compose_with_hydra(overrides=(), *, run_dir=None) -> DictConfig  # with it, unresolved
    CONFIG_DIR                                              # the installed package's conf/
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobRuntime
from hydra.version import VersionBase
from omegaconf import DictConfig, OmegaConf, open_dict

import differank
from differank.datamodules.download import data_home
from differank.rankers.run.folders import claim_folder

# src/differank/conf links to the top-level conf/ in a checkout; a wheel holds the files there
CONFIG_DIR = Path(differank.__file__).resolve().parent / "conf"
# The tasks of conf/train.yaml's ``task`` key: rankers/run/tasks.py's TASKS, named here too so
# that the command line checks a task without loading torch (tests/test_cli.py keeps both equal).
TASKS = ("fit", "test", "predict", "export", "simulate")
# Hydra's process-wide state that composing a config sets (Singleton._instances is Hydra's own
# registry of it: hydra.initialize backs GlobalHydra up from there the same way).
_HYDRA_STATE = (GlobalHydra, HydraConfig, JobRuntime, VersionBase)
_COMPOSING = threading.Lock()


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
        cfg.hydra.runtime.output_dir = str(cfg.hydra.run.dir if run_dir is None else run_dir)
        cfg.hydra.job.num = 0
    return cfg


def _job_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` without Hydra's node, every interpolation resolved (``${hydra:...}`` against
    ``cfg``'s own node, set as the current HydraConfig while the state is our own)."""
    HydraConfig.instance().set_config(cfg)
    job = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
    OmegaConf.resolve(job)
    OmegaConf.set_struct(job, True)  # as Hydra hands it to a task: a mistyped key raises
    return job


def compose_config(overrides: Sequence[str] = (), *, run_dir: str | Path) -> DictConfig:
    """``conf/train.yaml`` composed with command-line style ``overrides`` (``["loss=listnet",
    "trainer.max_epochs=1"]``), every interpolation resolved (``${hydra:runtime.output_dir}``
    is ``run_dir``), without the ``hydra`` node: the config ``differank OVERRIDES`` runs.
    Hydra's global state is left as found, also inside a running ``@hydra.main`` app.

    >>> cfg = compose_config(["loss=listnet", "trainer.max_epochs=1"], run_dir="/tmp/run")
    >>> cfg.loss._target_, cfg.trainer.max_epochs, cfg.trainer.default_root_dir, "hydra" in cfg
    ('differank.losses.listnet.ListNetLoss', 1, '/tmp/run', False)
    """
    with _own_hydra_state():
        return _job_config(_compose(overrides, run_dir))


def compose_with_hydra(overrides: Sequence[str] = (), *, run_dir: str | Path | None = None):
    """``conf/train.yaml`` composed with ``overrides`` and with Hydra's own node (its help
    template, run folder, logging and sweep settings), unresolved; ``run_dir`` is its output
    folder (None: the run folder ``hydra.run.dir`` names, claimed as the command line claims
    it). Hydra's global state is left as found."""
    with _own_hydra_state():
        return _compose(overrides, run_dir)


def console_logging(quiet: bool) -> None:
    """A run's console: Lightning's messages join the root logger's handlers (the terminal and
    ``train.log``); with ``quiet`` the terminal hides the progress lines (epochs, checkpoints,
    Lightning's set-up) and keeps warnings, the test table and the output folder; a file handler
    (``train.log``) keeps every line. It changes the process's logging: the command line's to
    keep, :func:`run`'s for the run only."""
    lightning = logging.getLogger("pytorch_lightning")
    lightning.handlers.clear()
    lightning.propagate = True
    if quiet:
        from differank.rankers.training.callbacks import hide_progress  # Lightning: quiet only

        for handler in logging.getLogger().handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.addFilter(hide_progress)
