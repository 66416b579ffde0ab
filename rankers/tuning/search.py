"""The search: for each row, Optuna's TPE sampler (seeded) proposes settings of the row's space
(rankers/tuning/space.py); the first trial is always the row's current default, so the search
can only keep or beat it on validation. A trial trains the setting on every fold (seed 0) and
scores the **mean over the folds of the signal** (rankers/tuning/signal.py: validation MAP, or
under ``ultr.select=clicks`` the click monitor of held-out sessions): the only selection signal.
Test metrics are written by every run but never read before the search ends. The chosen setting
is then trained with the other seeds. Trials stop at the row's share of the time budget
(rankers/tuning/budget.py).

A trial whose run failed on a fold (an option pair the loss refuses, a crash) is kept with its
error: it is never chosen, Optuna is told it failed, and the report names it. A row whose every
trial failed has no chosen setting and no seeds: the report says why.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from differank.rankers.run.runs import compose_config
from differank.rankers.tuning.budget import Budget, RowBudget
from differank.rankers.tuning.selection import Split
from differank.rankers.tuning.signal import LABELS, Signal
from differank.rankers.tuning.space import (
    REFERENCE_DEFAULTS,
    Row,
    distributions,
    reference_spaces,
    row_space,
    setting_overrides,
)
from differank.rankers.tuning.trials import Dataset, Job, data_module

log = logging.getLogger(__name__)

TRIALS_AT_ONCE = 2  # with workers: trials proposed together, their folds run together


@dataclass(frozen=True)
class Profile:
    """What a tuning run does: at most ``trials`` trials per row kind (a scorer, or ``peer``
    for the references; ``default_trials`` for a kind not named), ``seeds`` seeds of each
    chosen setting on ``folds``, ``extra`` overrides of every run, ``tiny``: the references'
    few boosting rounds (the tests)."""

    trials: dict[str, int]
    seeds: int
    folds: tuple[int, ...]
    rows: tuple[Row, ...]
    extra: tuple[str, ...] = ()
    tiny: bool = False
    default_trials: int = 8

    def trials_of(self, row: Row) -> int:
        return self.trials.get(row.kind, self.default_trials)


@dataclass
class Trial:
    number: int
    setting: dict
    runs: list[dict]
    seconds: float = 0.0  # wall time of the trial (its share of its batch)
    over_budget: bool = False  # finished past its row's share of the budget

    @property
    def error(self) -> str | None:
        """The first failed fold's error, None when every fold ran."""
        failed = [run for run in self.runs if "error" in run]
        return f"fold {failed[0].get('fold', '?')}: {failed[0]['error']}" if failed else None

    @property
    def validation(self) -> float | None:
        """Mean over the folds of the value each run's epoch was chosen by (the tune's
        signal); None when a fold failed (never chosen)."""
        if self.error is not None:
            return None
        return statistics.fmean(run["validation"] for run in self.runs)

    @property
    def val_map(self) -> float | None:
        """Mean validation MAP over the folds; None when a fold failed or the runs were
        chosen from clicks (no validation MAP is computed)."""
        if self.error is not None or any("val_map" not in run for run in self.runs):
            return None
        return statistics.fmean(run["val_map"] for run in self.runs)


@dataclass
class RowResult:
    row: Row
    default: dict
    trials: list[Trial] = field(default_factory=list)
    chosen: Trial | None = None
    seeds: dict[str, list[dict]] = field(default_factory=dict)  # dataset -> runs
    seeds_run: int = 0  # seeds of the chosen setting (fewer than asked when the budget ended)
    over_budget: bool = False  # a trial or the seeds ran past the row's share

    def to_json(self) -> dict:
        return {
            "default": self.default,
            "trials": [
                {
                    "setting": t.setting,
                    "validation": t.validation,
                    "val_map": t.val_map,
                    "error": t.error,
                    "seconds": t.seconds,
                    "over_budget": t.over_budget,
                }
                for t in self.trials
            ],
            "chosen": self.chosen.setting if self.chosen else None,
            "chosen_trial": self.chosen.number if self.chosen else None,
            "seeds": self.seeds_run,
            "over_budget": self.over_budget,
        }

    @property
    def failure(self) -> str:
        """Why the row has no chosen setting (its trials' errors)."""
        errors = [f"trial {t.number} {t.error}" for t in self.trials if t.error]
        return "; ".join(errors) if errors else "no trial ran"


@dataclass
class FoldSplits:
    """Each fold's validation row count, validation split (empty when the tune is chosen from
    clicks: no validation label is read) and test split (labels, qids) of a dataset."""

    val_rows: dict[int, int]
    val: dict[int, Split]
    test: dict[int, Split]


def fold_splits(dataset: Dataset, profile: Profile, runs: Path, labels: bool) -> FoldSplits:
    """:class:`FoldSplits` of ``dataset``; the validation labels read only when ``labels``."""
    splits = FoldSplits({}, {}, {})
    for fold in profile.folds:
        overrides = [*dataset.overrides, *profile.extra, f"++data.fold={fold}"]
        datamodule = data_module(overrides, runs / "compose")
        val = datamodule.split_data("val")
        splits.val_rows[fold] = len(val.qids)
        if labels:
            splits.val[fold] = Split.of(val)
        splits.test[fold] = Split.of(datamodule.split_data("test"))
    return splits


class Protocol:
    """Searches and seeds rows of ``profile`` on ``datasets`` (the first is searched, the
    others train its chosen settings) by ``signal``, runs cached under ``runs``, run by
    ``runner``."""

    def __init__(
        self, profile: Profile, datasets: list[Dataset], runs: Path, runner, signal: Signal = LABELS
    ):
        self.profile, self.datasets, self.runs, self.runner = profile, datasets, runs, runner
        self.signal = signal
        # one trial at a time in one process (a budget then stops after the trial in flight)
        self.at_once = TRIALS_AT_ONCE if runner.pool is not None else 1
        self._splits: dict[Dataset, FoldSplits] = {}

    def dataset_splits(self, dataset: Dataset) -> FoldSplits:
        """:class:`FoldSplits` of ``dataset``, read once."""
        if dataset not in self._splits:
            labels = not self.signal.clicks
            self._splits[dataset] = fold_splits(dataset, self.profile, self.runs, labels)
        return self._splits[dataset]

    def splits(self, dataset: Dataset) -> tuple[dict[int, Split], dict[int, Split]]:
        """Each fold's validation split (none when chosen from clicks) and test split."""
        splits = self.dataset_splits(dataset)
        return splits.val, splits.test

    def jobs(self, row, overrides, setting, dataset, folder, seed) -> list[Job]:
        val_rows = self.dataset_splits(dataset).val_rows
        return [
            Job(
                row,
                (*dataset.overrides, *overrides, *self.profile.extra),
                tuple(setting.items()) if row.peer else (),
                fold,
                seed,
                self.runs / dataset.name / row.name.replace("/", "-") / folder / f"fold{fold}",
                val_rows[fold],
                self.profile.tiny,
                self.signal,
            )
            for fold in self.profile.folds
        ]

    def space(self, row: Row) -> tuple[list[str], dict, dict]:
        """Fixed overrides, Optuna distributions, and the current default of each key."""
        if row.peer:
            return [], reference_spaces()[row.peer], REFERENCE_DEFAULTS[row.peer]
        overrides, params = row_space(row)
        space = distributions(params)
        dataset = self.datasets[0]
        cfg = compose_config(
            [*dataset.overrides, *overrides, *self.profile.extra], run_dir=self.runs / "compose"
        )
        default = {key: OmegaConf.select(cfg, key) for key in space}
        return overrides, space, default

    def run_all(self, rows: list[Row], budget: Budget) -> list[RowResult]:
        """Each row searched then seeded within its share of ``budget``, in order."""
        results = []
        for index, row in enumerate(rows):
            share = budget.share(len(rows) - index)
            result = self.search(row, share)
            self.seeds(result, share)
            results.append(result)
        return results

    def _mean_trial_seconds(self, result: RowResult) -> float:
        return statistics.fmean(t.seconds for t in result.trials) if result.trials else 0.0

    def search(self, row: Row, share: RowBudget | None = None) -> RowResult:
        import optuna

        share = share or RowBudget(math.inf)
        overrides, space, default = self.space(row)
        result = RowResult(row, default)
        budget = self.profile.trials_of(row)
        sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=max(1, budget // 2))
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        dataset, folds = self.datasets[0], len(self.profile.folds)
        extra_seeds = self.profile.seeds - 1
        while len(result.trials) < budget:
            mean = self._mean_trial_seconds(result)
            if result.trials and not share.holds(mean * (1 + extra_seeds)):
                break  # the next trial and the seeds would end past the row's share
            # trial 0 is the current default (run as configured: a default outside the space,
            # e.g. weight decay 0 under a log interval, stays exactly the default)
            asked: list = [] if result.trials else [None]
            while len(asked) < min(self.at_once, budget - len(result.trials)):
                asked.append(study.ask(space))
            batches = []
            for index, trial in enumerate(asked):
                setting = default if trial is None else dict(trial.params)
                fixed = [] if trial is None or row.peer else setting_overrides(setting)
                number = len(result.trials) + index
                batches.append(
                    (
                        setting,
                        self.jobs(row, [*overrides, *fixed], setting, dataset, f"trial{number}", 0),
                    )
                )
            start = time.perf_counter()
            runs = self.runner.map([job for _, batch in batches for job in batch])
            seconds = (time.perf_counter() - start) / len(asked)
            for index, (trial, (setting, _)) in enumerate(zip(asked, batches, strict=True)):
                done = Trial(len(result.trials), setting, runs[index * folds :][:folds], seconds)
                done.over_budget = share.left() < 0
                result.trials.append(done)
                value = done.validation
                if trial is not None and value is not None:
                    study.tell(trial, value)
                elif trial is not None:  # a failed fold (an option pair the loss refuses)
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                shown = (
                    f"{self.signal.label} {value:.4f}"
                    if value is not None
                    else f"failed: {done.error}"
                )
                log.info("[tune] %s trial %d: %s %s", row.name, done.number, shown, setting)
        finished = [(value, t) for t in result.trials if (value := t.validation) is not None]
        result.chosen = max(finished, key=lambda pair: pair[0])[1] if finished else None
        result.over_budget = any(t.over_budget for t in result.trials)
        return result

    def seeds(self, result: RowResult, share: RowBudget | None = None) -> None:
        """The chosen setting with every seed on every dataset (seed 0 on the first dataset
        is the chosen trial itself); fewer seeds when the row's share does not hold them."""
        if result.chosen is None:
            return
        share = share or RowBudget(math.inf)
        row, setting = result.row, result.chosen.setting
        seeds = self.profile.seeds
        mean = self._mean_trial_seconds(result)
        if mean > 0 and not share.holds(mean * (seeds - 1)):
            seeds = 1 + max(0, int(share.left() // mean))
        seeds = min(seeds, self.profile.seeds)
        result.seeds_run = seeds
        overrides = [] if row.peer else [*row_space(row)[0]]
        if result.chosen.number > 0 and not row.peer:  # trial 0 ran the configured defaults
            overrides += setting_overrides(setting)
        for index, dataset in enumerate(self.datasets):
            jobs = []
            for seed in range(seeds):
                folder = (
                    f"trial{result.chosen.number}" if index == 0 and seed == 0 else f"seed{seed}"
                )
                jobs += self.jobs(row, overrides, setting, dataset, folder, seed)
            result.seeds[dataset.name] = self.runner.map(jobs)
        result.over_budget = result.over_budget or share.left() < 0
