"""``differank tune`` (``task=tune``): the selection protocol on the data of the command line,
within a time budget, reported against LightGBM searched the same way (docs/tuning.md).

    differank tune data=letor data.root=DIR tune.budget=20m
    differank tune data=mq2008 tune.rows=[lightgbm,listmle/linear] tune.seeds=2 tune.jobs=2
    differank tune data=mq2008 clicks=pbm ultr=ips ultr.select=clicks tune.rows=[listmle/linear]

The last chooses every epoch, setting and row from held-out click sessions and reads no
validation label (rankers/tuning/signal.py): it has no LightGBM reference and no ensemble.
Every override that is not ``tune.*`` reaches every trial (``trainer.max_epochs=20``); the data
overrides (``data=...``, ``data.*``) name the data set. The run folder gets:

- ``tune.md``: the table (each row's validation and test figures, paired intervals against
  LightGBM, the ensemble, the validation-chosen row), what chose (the signal) and what was
  searched (trials per row);
- ``tune.json``: the same as a record (``selection``: the signal); ``tune.png``: the forest
  plot;
- ``checkpoints/best.ckpt``: the chosen model on the first fold, which ``load_ranker``,
  ``task=test|predict|export ckpt_path=...`` read: the validation-chosen differank row's chosen
  run (seed 0), or the chosen ensemble's run when it has one member. An ensemble of several is
  not one checkpoint: ``ensemble.md`` then names its members' checkpoints and the command that
  builds it (``python -m differank.rankers.run.ensemble``), and ``best.ckpt`` is the best
  single row;
- ``runs/``: every trial's run (cached: ``tune.runs=DIR`` reuses another run's).

From Python: :func:`tune` (``differank.tune``). ``benchmarks/protocol.py`` runs the same
:func:`run_selection` with its published profiles.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from hydra.errors import InstantiationException
from omegaconf import DictConfig

from differank.datamodules.atomic_files import write_file
from differank.rankers.run.runs import compose_config
from differank.rankers.tuning.budget import Budget, parse_budget
from differank.rankers.tuning.figure import forest_plot
from differank.rankers.tuning.report import (
    REFERENCE_PEER,
    dataset_table,
    search_table,
    write_experiment,
)
from differank.rankers.tuning.search import Profile, Protocol, RowResult
from differank.rankers.tuning.selection import NoCandidatesError, select_ensemble
from differank.rankers.tuning.signal import LABELS, Signal, refuse_label_rows, selection_signal
from differank.rankers.tuning.space import Row
from differank.rankers.tuning.trials import Dataset, Runner, data_module

log = logging.getLogger(__name__)

MAX_FOLDS = 5  # LETOR's rotation: Fold1..Fold5


@dataclass
class Selection:
    """What :func:`run_selection` found: the report's markdown sections, its JSON record, the
    rows' results, the wall time and the signal that chose."""

    sections: list[str]
    record: dict
    results: list[RowResult]
    seconds: float
    signal: Signal


def run_selection(
    profile: Profile,
    datasets: list[Dataset],
    runs: Path,
    jobs: int = 1,
    budget_seconds: float | None = None,
    experiments: Path | None = None,
    table: Path | None = None,
) -> Selection:
    """The protocol: every row of ``profile`` searched on the first dataset's validation
    (references first, then the others in order, each within its share of the budget), its
    chosen setting seeded on every dataset, the greedy ensemble, the tables. ``experiments``:
    write each differank row's chosen setting there (``table`` names the report in them).

    The signal (rankers/tuning/signal.py) is the trials' config's: under ``ultr.select=clicks``
    a reference row is refused before anything runs, and the ensemble is skipped (both choose
    on validation labels)."""
    from differank.rankers.tuning.reference import available

    composed = compose_config([*datasets[0].overrides, *profile.extra], run_dir=runs / "compose")
    signal = selection_signal(composed)
    refuse_label_rows(signal, profile.rows)
    rows = [r for r in profile.rows if not r.peer or available(r.peer)]
    rows.sort(key=lambda r: r.peer is None)  # references first: the others are compared to them
    budget, runner = Budget(budget_seconds), Runner(jobs)
    protocol = Protocol(profile, datasets, runs, runner, signal)
    try:
        results = protocol.run_all(rows, budget)
    finally:
        runner.close()
    seconds = time.perf_counter() - budget.start
    record: dict = {
        "selection": signal.to_json(),
        "rows": {r.row.name: r.to_json() for r in results},
    }
    if experiments is not None:
        for result in results:
            if not result.row.peer and result.chosen is not None:
                write_experiment(result, datasets[0], experiments, table)
    sections = []
    for dataset in datasets:
        val, test = protocol.splits(dataset)
        members = {
            f"{r.row.name}#{seed}": [run for run in runs_ if run.get("seed") == seed]
            for r in results
            if not r.row.peer
            and (runs_ := r.seeds.get(dataset.name))
            and not any("error" in run for run in runs_)
            for seed in range(r.seeds_run)
        }
        if not members:
            failures = "; ".join(f"{r.row.name}: {r.failure}" for r in results if not r.row.peer)
            raise NoCandidatesError(
                f"no differank row finished on {dataset.name}, so there is nothing to choose "
                f"or ensemble ({failures or 'no differank row in tune.rows'}); fix the errors "
                "or choose other rows (tune.rows=[...])"
            )
        ensemble = None if signal.clicks else select_ensemble(members, val, test)
        text, record[dataset.name] = dataset_table(dataset.name, results, ensemble, test, signal)
        record[dataset.name]["ensemble"] = ensemble[0] if ensemble else None
        sections += [f"## {dataset.name}", "", text]
        if ensemble is None:
            sections += [NO_ENSEMBLE, ""]
    sections += [
        f"## What was searched ({datasets[0].name} validation)",
        "",
        search_table(results, signal),
    ]
    cpu = sum(
        run.get("cpu_seconds", 0.0)
        for r in results
        for runs_ in [*(t.runs for t in r.trials), *r.seeds.values()]
        for run in runs_
    )
    limit = "no time budget" if budget_seconds is None else f"budget {budget_seconds:.0f} s"
    sections.append(
        f"Wall time {seconds:.0f} s ({limit}) with {jobs} job(s) (runs cached from earlier "
        f"invocations count 0 s); CPU time of the runs {cpu:.0f} s (one thread each)."
    )
    record["seconds"], record["budget_seconds"] = seconds, budget_seconds
    return Selection(sections, record, results, seconds, signal)


NO_ENSEMBLE = (
    "No ensemble: its greedy selection scores validation MAP, and this tune reads no "
    "validation label (ultr.select=clicks)."
)


def write_record(record: dict, out: Path) -> None:
    """The record beside the markdown report ``out`` (``.json``) and its forest plot (``.png``)."""
    write_file(out.with_suffix(".json"), json.dumps(record, indent=1) + "\n")
    forest_plot(record, out.with_suffix(".png"), reference=REFERENCE_PEER)


# ---- task=tune -----------------------------------------------------------------------------


def _is_data(override: str) -> bool:
    key = override.lstrip("+~").split("=", 1)[0]
    return key == "data" or key.startswith("data.")


def _passed_on(override: str) -> bool:
    """An override of the command line every trial gets (not the task's own)."""
    key = override.lstrip("+~").split("=", 1)[0]
    own = ("task", "tune", "seed", "ckpt_path", "hydra")
    return not _is_data(override) and not any(key == k or key.startswith(f"{k}.") for k in own)


def data_folds(dataset: Dataset, extra: Sequence[str], runs: Path) -> tuple[int, ...]:
    """The folds the data has: fold 1 (its errors raised as they are), then 2..5 while they
    build and name their files (synthetic data has one fold)."""
    folds = []
    for fold in range(1, MAX_FOLDS + 1):
        try:
            data_module([*dataset.overrides, *extra, f"++data.fold={fold}"], runs).split_files(
                "train"
            )
        except (ValueError, OSError, InstantiationException):  # no such fold (Hydra wraps it)
            if fold == 1:
                raise
            break
        folds.append(fold)
    log.info("tune: folds %s of %s", folds, dataset.name)
    return tuple(folds)


def _generated(data: DictConfig) -> bool:
    """Whether the data is generated from its seed (synthetic): the seeds' runs would each read
    other queries, and their paired intervals pair nothing."""
    from hydra.utils import get_class

    from differank.datamodules.synthetic import SyntheticLetorDataModule

    return issubclass(get_class(data._target_), SyntheticLetorDataModule)


def profile_of(cfg: DictConfig, overrides: Sequence[str], runs: Path) -> tuple[Profile, Dataset]:
    """The profile and dataset ``task=tune``'s config and command line describe."""
    options = cfg.tune
    rows = tuple(Row.parse(name) for name in options.rows)
    if not rows:
        raise ValueError("tune.rows is empty: name the rows to search, e.g. [lightgbm,listmle]")
    trials = int(options.trials)
    seeds = int(options.seeds)
    if trials < 1 or seeds < 1:
        raise ValueError(f"tune.trials and tune.seeds must be >= 1, got {trials} and {seeds}")
    data = [o for o in overrides if _is_data(o)]
    root = cfg.data.get("root")
    chosen = [o.split("=", 1)[1] for o in data if o.split("=", 1)[0] == "data"]
    name = Path(str(root)).name if root else (chosen[-1] if chosen else "data")
    if _generated(cfg.data) and not any(o.lstrip("+").startswith("data.seed=") for o in data):
        data.append(f"data.seed={cfg.seed}")  # one generated data set for every seed's run
    dataset = Dataset(name, tuple(data))
    extra = tuple(o for o in overrides if _passed_on(o))
    folds = tuple(options.folds) if options.folds else data_folds(dataset, extra, runs)
    profile = Profile({}, seeds, folds, rows, extra, bool(options.tiny), trials)
    return profile, dataset


# what a search needs beyond the core install: the sampler, and the reference every row is
# compared with (the `cluster` and `bench` extras hold them)
SEARCH_PACKAGES = {
    "optuna": "Optuna proposes the trials",
    "lightgbm": "LightGBM is the reference the rows are compared with",
}


def require_search_packages(rows: Sequence[str] | None = None) -> None:
    """Refuse a tune, before any trial runs, when Optuna, or LightGBM for a ``lightgbm`` row,
    is not installed (``rows``: ``tune.rows``; None: every package). A tune without that row
    (a click tune refuses it) does not need LightGBM."""
    needed = dict(SEARCH_PACKAGES)
    if rows is not None and "lightgbm" not in rows:
        needed.pop("lightgbm")
    missing = [name for name in needed if find_spec(name) is None]
    if missing:
        why = ", ".join(needed[name] for name in missing)
        raise ModuleNotFoundError(
            f"differank tune needs {' and '.join(missing)} ({why}): pip install "
            f'{" ".join(missing)}, or pip install "differank[bench,cluster]"'
        )


def tune_task(cfg: DictConfig, run_dir: Path, overrides: Sequence[str]) -> None:
    """``task=tune``: the protocol on the command line's data, its report and chosen model
    written into ``run_dir`` (the module docstring lists the files)."""
    budget = parse_budget(cfg.tune.budget)  # a bad budget is refused before anything runs
    require_search_packages([str(row) for row in cfg.tune.rows])
    jobs = int(cfg.tune.jobs)
    if jobs < 1:
        raise ValueError(f"tune.jobs must be >= 1, got {jobs}")
    runs = Path(cfg.tune.runs) if cfg.tune.runs else run_dir / "runs"
    profile, dataset = profile_of(cfg, overrides, runs)
    selection = run_selection(profile, [dataset], runs, jobs, budget)
    selection.record["dataset"] = dataset.name
    command = " ".join(["differank tune", *[o for o in overrides if o != "task=tune"]])
    paired = (
        f" Δ: per-query test metric (mean over seeds) minus {REFERENCE_PEER}'s, pooled over "
        "folds, with its 95% paired bootstrap interval (10,000 resamples of queries)."
        if any(row.peer == REFERENCE_PEER for row in profile.rows)
        else ""
    )
    heading = [
        "# differank tune",
        "",
        f"Command: `{command}`",
        "",
        f"Rows: {', '.join(r.name for r in profile.rows)}; at most {profile.default_trials} "
        f"trials per row, {profile.seeds} seeds × folds {list(profile.folds)}; chosen by "
        f"{selection.signal.description}, mean over the folds, and nothing else. Test MAP: "
        f"mean ± std over seeds and folds.{paired}",
        "",
    ]
    out = run_dir / "tune.md"
    chosen = write_chosen(selection, dataset, profile, run_dir)
    write_file(out, "\n".join([*heading, *selection.sections, "", chosen]) + "\n")
    write_record(selection.record, out)
    log.info("tune: report %s", out)


def write_chosen(selection: Selection, dataset: Dataset, profile: Profile, run_dir: Path) -> str:
    """``checkpoints/best.ckpt``: the validation-chosen model on the first fold: the ensemble's
    member when the chosen ensemble has one, else the best single differank row's seed 0 (and
    ``ensemble.md`` when an ensemble of several was chosen). Returns the report's line."""
    table = selection.record[dataset.name]
    singles = [
        (entry["validation_mean"], name)
        for name, entry in table["rows"].items()
        if not name.startswith(("peer_", "ensemble"))
    ]
    if not singles:
        return "No differank row finished: no checkpoint is written."
    ensemble_chosen = bool(table["chosen"]) and table["chosen"].startswith("ensemble")
    counts = table["ensemble"] or {}
    if ensemble_chosen and len(counts) == 1:  # the ensemble is one run (picked once or more)
        name, _, seed = next(iter(counts)).rpartition("#")
    else:
        name, seed = max(singles)[1], "0"
    fold = profile.folds[0]
    source = _member_checkpoint(selection, dataset, name, int(seed), fold)
    target = run_dir / "checkpoints" / "best.ckpt"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    line = (
        f"Chosen model: `checkpoints/best.ckpt` = {name} (fold {fold}, seed {seed}; copied "
        f"from `{source}`)."
    )
    if ensemble_chosen and len(counts) > 1:
        members = [
            (_member_checkpoint(selection, dataset, *_member(member), fold), count)
            for member, count in counts.items()
        ]
        write_file(run_dir / "ensemble.md", ensemble_recipe(members, fold))
        line += (
            " The ensemble was chosen on validation: `ensemble.md` names its members and the "
            "command that builds it; `best.ckpt` is the best single row."
        )
    return line


def _member(member: str) -> tuple[str, int]:
    """``ROW#SEED`` (an ensemble member's name) as ``(ROW, SEED)``."""
    name, _, seed = member.rpartition("#")
    return name, int(seed)


def _member_checkpoint(
    selection: Selection, dataset: Dataset, name: str, seed: int, fold: int
) -> Path:
    """The best checkpoint of row ``name``'s chosen setting with ``seed`` on ``fold``."""
    result = next(r for r in selection.results if r.row.name == name)
    runs = result.seeds[dataset.name]
    run = next(r for r in runs if r["seed"] == seed and r["fold"] == fold)
    return Path(run["run_dir"]) / "checkpoints" / "best.ckpt"


def ensemble_recipe(members: list[tuple[Path, int]], fold: int) -> str:
    """The chosen ensemble's members (their checkpoints on ``fold``, weight = times picked) and
    the command of :mod:`differank.rankers.run.ensemble` that builds and scores it."""
    paths = " ".join(str(path) for path, _ in members)
    weights = " ".join(str(count) for _, count in members)
    return (
        f"# The chosen ensemble (fold {fold})\n\n"
        f"python -m differank.rankers.run.ensemble {paths} --weights {weights} --out DIR\n"
    )


# ---- from Python ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` wrote: the run folder, the report, the chosen checkpoint (None when no
    differank row finished), the validation-chosen row's name, the ``monitor`` that chose
    (``val/map``, ``val/click_dcg@10``) and each row's mean value of it. ``mean_val_map``: each
    row's validation MAP, empty when chosen from clicks (none is computed)."""

    run_dir: Path
    report: Path
    checkpoint: Path | None
    chosen: str | None
    mean_val_map: dict[str, float]
    monitor: str = LABELS.monitor
    mean_validation: dict[str, float] = field(default_factory=dict)


def tune(overrides: Sequence[str] = (), *, output_dir: str | Path | None = None) -> TuneResult:
    """What ``differank tune OVERRIDES`` does, from Python (:func:`differank.run` of
    ``task=tune``)::

        result = differank.tune(["data=letor", "data.root=DIR", "tune.budget=30m"])
        ranker = differank.load_ranker(result.checkpoint)
    """
    from differank.rankers.run.runs import run

    done = run(["task=tune", *overrides], output_dir=output_dir)
    record = json.loads((done.run_dir / "tune.json").read_text())
    table = record[record["dataset"]]
    rows = table["rows"]
    checkpoint = done.run_dir / "checkpoints" / "best.ckpt"
    return TuneResult(
        done.run_dir,
        done.run_dir / "tune.md",
        checkpoint if checkpoint.is_file() else None,
        table["chosen"],
        {name: entry["val_map_mean"] for name, entry in rows.items() if "val_map_mean" in entry},
        record["selection"]["monitor"],
        {name: entry["validation_mean"] for name, entry in rows.items()},
    )
