"""The ``differank`` command (also ``python -m differank``, and ``python train.py`` in a
checkout): train a ranker, pick the best validation epoch, test it and write the run's outputs.

``differank [TASK] [KEY=VALUE | GROUP=OPTION ...]`` takes Hydra's override grammar; a first word
that names a task is short for ``task=TASK`` (``differank predict ckpt_path=...`` is
``differank task=predict ckpt_path=...``).

``task=fit`` (default) trains (resuming from ``ckpt_path``, e.g. ``RUN/checkpoints/last.ckpt``)
and tests the best epoch (on clicks with ``clicks=pbm|cascade|dcm|ubm|trust|cbcm``, docs/clicks.md);
``task=simulate`` writes the click log those sessions make (``RUN/clicks.npz``); ``task=test``
tests the weights of ``ckpt_path``; ``task=predict`` scores the test split without metrics;
``task=export`` writes ``export/scorer.pt`` (TorchScript) and ``export/scorer.onnx`` from the
checkpoint alone; ``task=tune`` (``differank tune data=... tune.budget=30m``) searches objectives
and scorers on validation within a time budget against a searched LightGBM, and writes
``tune.md`` and the chosen ``checkpoints/best.ckpt`` (docs/tuning.md). Every checkpoint carries
the run's resolved config, a fingerprint of its data
(content sha256, feature count, normalization statistics) and its serving record (feature
transform and statistics): test and predict rebuild data, model and loss from it (allowlisted
classes only: a checkpoint is data, never code), command-line overrides winning, and refuse
data whose features or normalization differ (``allow_data_mismatch=true`` refits the
statistics on it); ``files=[a.txt,...]`` scores any LETOR files with the checkpoint's own
statistics instead (no fold layout, no training data). Outputs in the Hydra run directory:
``checkpoints/{best,last}.ckpt``, Lightning's CSV and TensorBoard logs, ``train.log`` (the
console lines), ``predictions/test.txt`` (one ``%.17g`` score per line of the test file(s),
scorable by ``Eval-Score-4.0.pl``), ``predictions/test.sources`` (those files, in order),
``predictions/test.run`` (a TREC run), ``predictions/test.qrels`` (TREC qrels, except for
predict) and ``test_metrics.json`` (the test rows scored in memory by LETOR 4.0's rules: what
``python -m differank.rankers.metrics.evaluate`` gives for ``test.txt``). Under DDP only global
rank 0 writes. ``ckpt_path=last`` resumes from the run folder's last checkpoint when there is
one. A sweep (``-m``) gets the best monitored validation value of each job (``task=fit``).

From Python, ``differank.run(OVERRIDES)`` runs the same (docs/running.md#from-python).
"""

from __future__ import annotations

import os
import string
import sys
import textwrap
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from differank.rankers.run.folders import remove_if_unused
from differank.rankers.run.runs import (
    CONFIG_DIR,
    TASKS,
    compose_with_hydra,
    console_logging,
    without_hydra,
)

HELP_FLAGS = ("--help", "-h")


class RunError(CompactHydraException):
    """A run's bad input (a ``ValueError`` or ``OSError``: a missing file, a wrong option) as
    Hydra prints a compact error: the message alone, no traceback (``HYDRA_FULL_ERROR=1``
    gives the original exception with its traceback)."""


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def run_job(cfg: DictConfig) -> float:
    """One job of the command line (each job of a sweep): ``cfg.task`` into Hydra's output
    folder. Lightning and torch load here, not at import (a fast ``--help``)."""
    from differank.rankers.run.tasks import run_task

    console_logging(cfg.quiet)
    job = HydraConfig.get()
    run_dir = Path(job.runtime.output_dir)
    try:
        return run_task(
            cfg,
            run_dir,
            overrides=list(job.overrides.task),
            multirun=job.mode == RunMode.MULTIRUN,
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
    """What ``differank --help [OVERRIDES]`` prints: the help template of
    ``conf/hydra/default.yaml`` with the config groups read from ``conf/`` and the composed
    config. Written here rather than by Hydra, whose help lists the groups through the config
    loader (a second of work per call)."""
    cfg = compose_with_hydra(overrides, run_dir=Path.cwd())
    return string.Template(cfg.hydra.help.template).substitute(
        APP_CONFIG_GROUPS=config_groups(), CONFIG=OmegaConf.to_yaml(without_hydra(cfg))
    )


def hydra_arguments(arguments: list[str]) -> list[str]:
    """``arguments`` in Hydra's grammar: a first word that names a task becomes ``task=WORD``;
    any other first word that is neither an override (``KEY=VALUE``, ``~KEY``) nor a flag is
    refused (``ValueError``) with the tasks listed."""
    first = arguments[0] if arguments else ""
    if not first or "=" in first or first.startswith(("-", "~")):
        return arguments
    if first in TASKS:
        return [f"task={first}", *arguments[1:]]
    raise ValueError(
        f"{first!r} is neither a task ({', '.join(TASKS)}) nor an override "
        f"KEY=VALUE: differank [TASK] [KEY=VALUE ...], e.g. differank predict ckpt_path=CKPT "
        f"(differank --help lists the options)"
    )


def main(arguments: list[str] | None = None) -> None:
    """The ``differank`` command: ``arguments`` (default: the command line's) as
    ``differank ARGUMENTS`` takes them. ``--help`` prints the options without loading torch."""
    try:
        arguments = hydra_arguments(sys.argv[1:] if arguments is None else list(arguments))
    except ValueError as error:
        print(f"differank: {error}", file=sys.stderr)
        raise SystemExit(2) from None  # a usage error, as argparse exits
    if any(flag in arguments for flag in HELP_FLAGS):
        print(help_text([word for word in arguments if not word.startswith("-")]))
        return
    sys.argv[1:] = arguments  # Hydra reads its arguments from sys.argv
    run_job()
