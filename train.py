"""Train a ranker, pick the best validation epoch, test it and write the run's outputs.

``task=fit`` (default) trains (resuming from ``ckpt_path``, e.g. ``RUN/checkpoints/last.ckpt``)
and tests the best epoch (on clicks with ``clicks=pbm|cascade|dcm|ubm|trust``, docs/clicks.md);
``task=simulate`` writes the click log those sessions make (``RUN/clicks.npz``); ``task=test``
tests the weights of ``ckpt_path``; ``task=predict`` scores the test split without metrics;
``task=export`` writes ``export/scorer.pt`` (TorchScript) and ``export/scorer.onnx`` from the
checkpoint alone. Every checkpoint carries the
run's resolved config, a fingerprint of its data (content sha256, feature count, normalization
statistics) and its serving record (feature transform and statistics): test and predict
rebuild data, model and loss from it (allowlisted classes only: a checkpoint is data, never
code), command-line overrides winning, and refuse data whose features or normalization differ
(``allow_data_mismatch=true`` refits the statistics on it); ``files=[a.txt,...]`` scores any
LETOR files with the checkpoint's own statistics instead (no fold layout, no training data).
Outputs in the Hydra run directory: ``checkpoints/{best,last}.ckpt``, Lightning's CSV and
TensorBoard logs, ``train.log`` (the console lines), ``predictions/test.txt`` (one ``%.17g``
score per line of the test file(s), scorable by ``Eval-Score-4.0.pl``),
``predictions/test.sources`` (those files, in order), ``predictions/test.run`` (a TREC run),
``predictions/test.qrels`` (TREC qrels, except for predict) and ``test_metrics.json`` (the
test rows scored in memory by LETOR 4.0's rules: what ``python -m
differank.rankers.metrics.evaluate`` gives for ``test.txt``). Under DDP only global rank 0
writes. ``ckpt_path=last`` resumes from the run folder's last checkpoint when there is one.
Returns the best monitored validation value (``task=fit``, for sweepers), else NaN.
"""

import json
import logging
import os
import string
import sys
import textwrap
from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from differank.datamodules.download import data_home
from differank.rankers.run.folders import claim_folder, remove_if_unused

CONFIG_DIR = Path(__file__).resolve().parent / "conf"
# ${data_dir:MQ2008}: $LETOR_DIR/MQ2008, else the project's default data folder (conf/data/)
OmegaConf.register_new_resolver("data_dir", lambda name: str(data_home() / name), replace=True)
# ${unique_dir:outputs/DATE/TIME}: that folder, created, or TIME_1, ... when another run has it
OmegaConf.register_new_resolver("unique_dir", claim_folder, use_cache=True, replace=True)


def train(
    cfg: DictConfig,
    run_dir: Path,
    *,
    overrides: list[str] | None = None,
    multirun: bool = False,
) -> float:
    """Run ``cfg.task`` and write the outputs into ``run_dir``; ``cfg`` is the composed
    ``conf/train.yaml``, ``overrides`` the command line it was composed with and ``multirun``
    whether it is a sweep's job (``overrides`` None: both as :func:`compose_run` keeps them in
    ``cfg.hydra``). Lightning and torch load here, not at import (a fast ``--help``)."""
    from differank.rankers.run.tasks import run_task

    if overrides is None and "hydra" in cfg:
        overrides = list(cfg.hydra.overrides.task)
        multirun = cfg.hydra.mode == RunMode.MULTIRUN
    return run_task(cfg, run_dir, overrides=overrides or [], multirun=multirun)


def compose_run(overrides: list[str], run_dir: Path) -> DictConfig:
    """``conf/train.yaml`` composed with command-line style ``overrides`` outside the CLI (tests,
    benchmarks), with ``run_dir`` as the Hydra run directory."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    return cfg


def run_training(overrides: list[str], run_dir: Path) -> dict[str, float]:
    """One training run from Python: what ``python train.py OVERRIDES`` does (``task=fit``),
    with ``run_dir`` as its output folder. Returns the run's test metrics (``test_metrics.json``)
    and, under the name of ``monitor`` (``val/map`` by default), the best monitored validation
    value: the epoch whose weights were tested. The benchmarks (``benchmarks/protocol.py``,
    ``benchmarks/reproduce.py``) run every training through it."""
    cfg = compose_run(overrides, run_dir)
    if cfg.task != "fit":
        raise ValueError(f"run_training trains (task=fit), got task={cfg.task}: use train()")
    best = train(cfg, run_dir, overrides=overrides)
    written = run_dir / "test_metrics.json"
    if not written.is_file():
        raise FileNotFoundError(
            f"{written}: the run wrote no test metrics (trainer.fast_dev_run and DDP ranks "
            "other than 0 write no outputs)"
        )
    metrics = json.loads(written.read_text())
    metrics.pop("conventions", None)  # the side-by-side table of conventions stays in the file
    return {cfg.monitor: best, **metrics}


def console_logging(quiet: bool) -> None:
    """Under the CLI: Lightning's messages join the run's console (and ``train.log``); with
    ``quiet`` the terminal hides the progress lines (epochs, checkpoints, Lightning's set-up)
    and keeps warnings, the test table and the output folder; ``train.log`` keeps every line."""
    from differank.rankers.training.console import hide_progress

    lightning = logging.getLogger("pytorch_lightning")
    lightning.handlers.clear()
    lightning.propagate = True
    if quiet:
        for handler in logging.getLogger().handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.addFilter(hide_progress)


class RunError(CompactHydraException):
    """A run's bad input (a ``ValueError`` or ``OSError``: a missing file, a wrong option) as
    Hydra prints a compact error: the message alone, no traceback (``HYDRA_FULL_ERROR=1``
    gives the original exception with its traceback)."""


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    console_logging(cfg.quiet)
    hydra_config = HydraConfig.get()
    run_dir = Path(hydra_config.runtime.output_dir)
    overrides = list(hydra_config.overrides.task)
    try:
        return train(
            cfg, run_dir, overrides=overrides, multirun=hydra_config.mode == RunMode.MULTIRUN
        )
    except BaseException as error:
        remove_if_unused(run_dir)  # the folder this run claimed, if it holds no output
        if isinstance(error, (ValueError, OSError)) and os.environ.get("HYDRA_FULL_ERROR") != "1":
            raise RunError(f"error: {error}") from error
        raise


def config_groups() -> str:
    """Every config group of ``conf/`` (a folder; Hydra's own ``hydra/`` excepted) and its options
    (the folder's ``.yaml`` files), one ``group: a, b, c`` entry per group as Hydra lists them."""
    entries = []
    for folder in sorted(path for path in CONFIG_DIR.rglob("*") if path.is_dir()):
        group = folder.relative_to(CONFIG_DIR).as_posix()
        if group.split("/")[0] == "hydra":
            continue
        options = ", ".join(sorted(path.stem for path in folder.glob("*.yaml")))
        entries.append(textwrap.fill(f"{group}: {options}", width=100, subsequent_indent="    "))
    return "\n".join(entries)


def help_text(overrides: list[str]) -> str:
    """What ``python train.py --help [OVERRIDES]`` prints: the help template of
    ``conf/hydra/default.yaml`` with the config groups read from ``conf/`` and the composed
    config. Written here rather than by Hydra, whose help lists the groups through the config
    loader (a second of work per call)."""
    cfg = compose_run(overrides, Path.cwd())
    job = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
    return string.Template(cfg.hydra.help.template).substitute(
        APP_CONFIG_GROUPS=config_groups(), CONFIG=OmegaConf.to_yaml(job)
    )


if __name__ == "__main__":
    if sys.argv[1:2] in (["--help"], ["-h"]):
        print(help_text(sys.argv[2:]))
    else:
        main()
