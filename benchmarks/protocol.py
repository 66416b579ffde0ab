"""One selection protocol for every row: search on validation, seeds, paired intervals, ensembles.

    python benchmarks/protocol.py --jobs 2 --out benchmarks/results/protocol.md
    python benchmarks/protocol.py --datasets mq2008 lightgbm_rank --jobs 2 --out ...
    python benchmarks/protocol.py --profile smoke --out /tmp/smoke.md   # tests: tiny data
    python benchmarks/protocol.py --plot-only --out benchmarks/results/protocol.md
        # redraws the forest plot protocol.png from protocol.json (benchmarks/protocol_figure.py)

For each row (an objective on a scorer, or a peer) of the first dataset (MQ2008):

1. **Search.** The row's space is declared once, in ``conf/hparams_search/<search>.yaml`` (the
   files ``python train.py -m +hparams_search=<search>`` uses); on the transformer the loss's
   ``loss.*`` keys join the scorer's space of ``conf/hparams_search/transformer.yaml``. Peers'
   spaces are :data:`PEER_SPACES`. Optuna's TPE sampler (seeded) proposes the profile's trial
   budget; the first trial is always the row's current default, so the protocol can only keep
   or beat it on validation. A trial trains the setting on every fold (seed 0) and scores the
   **mean validation MAP over the folds**: the only selection signal. Test metrics are written
   by every run but never read before the search ends.
2. **Seeds.** The chosen setting is trained with ``seeds`` seeds per fold (seed 0 is the
   chosen trial's own run); a row reports mean ± std of test metrics over seeds and folds.
3. **Paired intervals.** Each row's per-query test AP (mean over its seeds), pooled over the
   folds (each query is tested once in LETOR's rotation), minus LightGBM's: the mean difference
   and its 95% paired bootstrap interval (:mod:`differank.rankers.metrics.significance`). A row
   is better or worse only when its interval excludes 0.
4. **Ensemble.** Greedy forward selection with replacement (Caruana et al. 2004) over every
   (row, seed) run of differank, on mean validation MAP over the folds, of the runs' scores
   standardised per query (:func:`differank.rankers.run.ensemble.standardize_per_query`),
   at most :data:`ENSEMBLE_STEPS` steps; its test row is scored like the others.
5. **The validation-chosen row**: the row (ensemble included) with the best mean validation
   MAP; its test MAP is what a user who never looks at test would get.

Every further dataset (``--datasets``) is never searched: each row's setting chosen on the first
dataset is trained there with the same seeds, so its rows test whether the choices generalise.
A dataset is a ``conf/data`` name (``mq2008``, ``lightgbm_rank``) or ``NAME=DIR`` for any LETOR
folder (``data=letor data.root=DIR``). Runs are cached under ``--runs``
(``<dataset>/<row>/<trial|seed>/fold<k>/result.json``): rerunning the command redoes only the
missing or failed runs (the seeded sampler proposes the same trials again) and those whose
``result.json`` or ``predictions/val.txt`` is damaged or another job's, each named in a warning
(:func:`cached_result`). Profiles
(:data:`PROFILES`): ``full`` (the published table) and ``smoke`` (tiny synthetic data, two rows
and a peer, for the tests).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import statistics
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import measure
import numpy as np
import torch
import yaml
from protocol_figure import forest_plot
from reproduce import TINY_OVERRIDES, training_run

from differank.datamodules.atomic_files import write_file
from differank.rankers.metrics.significance import PairedInterval, paired_bootstrap
from differank.rankers.run.runs import compose_config

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
SEARCHES = ROOT / "conf" / "hparams_search"
SCORER_SEARCH = {"transformer": "transformer"}  # scorers whose model.* space has its own file
ENSEMBLE_STEPS = 10
REFERENCE_PEER = "lightgbm"  # the row every paired interval is taken against


@dataclass(frozen=True)
class Row:
    """A table row: ``search`` names the space (conf/hparams_search) on ``scorer``; a peer
    row names its peer instead."""

    search: str
    scorer: str = "linear"
    peer: str | None = None

    @property
    def name(self) -> str:
        return f"peer_{self.peer}" if self.peer else f"{self.search}/{self.scorer}"


LINEAR = ("ranknet", "listnet", "domination", "hinge", "convex")
STANDARD = (
    "lambdaloss",
    "approxndcg",
    "neuralndcg",
    "listmle",
    "softmax",
    "poly1",
    "bce",
    "mse",
    "ordinal",
    "approxmetric",
)
ROWS = [
    *[Row(search) for search in (*LINEAR, *STANDARD)],
    Row("cone", "conerank"),
    *[Row(search, "transformer") for search in ("domination", *STANDARD)],
    Row("lightgbm", peer="lightgbm"),
    Row("xgboost", peer="xgboost"),
]


@dataclass(frozen=True)
class Profile:
    trials: dict[str, int]  # per scorer kind ("peer" for the peers)
    seeds: int
    folds: tuple[int, ...]
    rows: tuple[Row, ...]
    extra: tuple[str, ...] = ()  # overrides of every run (the smoke profile's tiny data)


PROFILES = {
    "full": Profile(
        trials={"linear": 8, "conerank": 8, "transformer": 4, "peer": 8},
        seeds=3,
        folds=(1, 2, 3, 4, 5),
        rows=tuple(ROWS),
    ),
    "smoke": Profile(
        trials={"linear": 2, "peer": 2},
        seeds=2,
        folds=(1,),  # the synthetic data has one fold
        rows=(Row("ranknet"), Row("listnet"), Row("lightgbm", peer="lightgbm")),
        extra=(*TINY_OVERRIDES, "data.seed=0"),  # one synthetic data set for every seed
    ),
}


def _peer_spaces() -> dict[str, dict]:
    from optuna.distributions import CategoricalDistribution, LogUniformDistribution

    return {
        "lightgbm": {
            "learning_rate": LogUniformDistribution(0.01, 0.3),
            "num_leaves": CategoricalDistribution([7, 15, 31, 63]),
            "min_data_in_leaf": CategoricalDistribution([5, 20, 50]),
        },
        "xgboost": {
            "eta": LogUniformDistribution(0.01, 0.3),
            "max_depth": CategoricalDistribution([3, 4, 6, 8]),
            "min_child_weight": CategoricalDistribution([1, 5, 10]),
        },
    }


# The peers' settings before the protocol (benchmarks/peers.py), the first trial of their search.
PEER_DEFAULTS = {
    "lightgbm": {"learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 20},
    "xgboost": {"eta": 0.05, "max_depth": 6, "min_child_weight": 1},
}


def _search_file(name: str) -> dict:
    path = SEARCHES / f"{name}.yaml"
    if not path.is_file():
        known = " ".join(sorted(p.stem for p in SEARCHES.glob("*.yaml")))
        raise SystemExit(f"no search space {path}; choose from: {known}")
    return yaml.safe_load(path.read_text())


def _group_overrides(search: dict) -> list[str]:
    """``override /model: linear`` entries of a search file's defaults as ``model=linear``."""
    overrides = []
    for entry in search.get("defaults", []):
        for key, value in entry.items() if isinstance(entry, dict) else []:
            group = key.removeprefix("override ").lstrip("/")
            if not group.startswith("hydra"):
                overrides.append(f"{group}={value}")
    return overrides


def row_space(row: Row) -> tuple[list[str], dict[str, str]]:
    """The row's fixed overrides and its space ``{key: Hydra sweep expression}``."""
    search = _search_file(row.search)
    overrides = _group_overrides(search)
    params = dict(search["hydra"]["sweeper"]["params"])
    if row.scorer in SCORER_SEARCH:
        scorer = _search_file(SCORER_SEARCH[row.scorer])
        overrides = [o for o in overrides if not o.startswith("model=")]
        overrides += [o for o in _group_overrides(scorer) if o.startswith("model=")]
        params = {k: v for k, v in params.items() if k.startswith("loss.")}
        params.update(scorer["hydra"]["sweeper"]["params"])
    elif row.scorer != "linear" and not any(o == f"model={row.scorer}" for o in overrides):
        raise SystemExit(f"{row.name}: the search file {row.search}.yaml is not for {row.scorer}")
    return overrides, params


def distributions(params: dict[str, str]) -> dict:
    """Optuna distributions of Hydra sweep expressions (the Optuna sweeper's own mapping)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.hydra_optuna_sweeper._impl import (
        create_optuna_distribution_from_override,
    )

    parser = OverridesParser.create()
    parsed = parser.parse_overrides([f"{key}={value}" for key, value in params.items()])
    return {o.get_key_element(): create_optuna_distribution_from_override(o) for o in parsed}


def _hydra_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def setting_overrides(params: dict) -> list[str]:
    return [f"{key}={_hydra_value(value)}" for key, value in params.items()]


@dataclass(frozen=True)
class Dataset:
    name: str
    overrides: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Dataset:
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


def _data_module(overrides: list[str], run_dir: Path):
    from hydra.utils import instantiate

    data_only = [o for o in overrides if o.lstrip("+~").startswith(("data", "seed"))]
    return instantiate(compose_config(data_only, run_dir=run_dir).data)


# What the tables and the ensemble read from a run's result.json, besides the job it ran.
RESULT_NUMBERS = ("val_map", "map", "mean_ndcg", "ndcg@10", "seconds", "cpu_seconds")


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
    # seeds of one setting share overrides and setting: the seed and fold tell them apart
    for key, expected in {"fold": job.fold, "seed": job.seed}.items():
        if cached.get(key) != expected:
            found = cached.get(key)
            raise UntrustedFile(f"{record} has {key} {found!r}, the job's is {expected!r}")
    for key in RESULT_NUMBERS:
        value = cached.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
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
        if not job.row.peer:  # a peer writes no validation scores: it is no ensemble member
            _check_val_scores(job.run_dir / "predictions" / "val.txt", job.val_rows)
    except UntrustedFile as error:
        log.warning("%s; the run is redone", error)
        return None
    return cached


def run_job(job: Job) -> dict:
    """Train (or fit the peer), score validation and test; the row (test metrics, validation
    MAP, where its prediction files are). Cached: a run whose files pass
    :func:`cached_result` is read, not redone."""
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
            from peers import run_peer

            row = run_peer(
                job.row.peer,
                _data_module(overrides, job.run_dir),
                job.run_dir,
                tiny=job.tiny,
                candidates=[dict(job.setting)],
                seed=job.seed,
            )
            row.pop("settings")
        else:
            row = training_run(overrides, job.run_dir)
            row["val_map"] = row.pop("val/map")  # the selection signal (conf/train.yaml monitor)
            root = compose_config(overrides, run_dir=job.run_dir).data.get("root")
            write_val_scores(job.run_dir, root)
        row.update(fold=job.fold, seed=job.seed, run_dir=str(job.run_dir))
    except Exception as error:  # one failing run (e.g. an invalid option pair) is a failed trial
        traceback.print_exc()
        row = {"error": " ".join(f"{type(error).__name__}: {error}".split())}
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


@dataclass
class Trial:
    number: int
    setting: dict
    runs: list[dict]

    @property
    def val_map(self) -> float:
        """Mean validation MAP over the folds; -inf when a fold failed (never chosen)."""
        if any("error" in run for run in self.runs):
            return float("-inf")
        return statistics.fmean(run["val_map"] for run in self.runs)


@dataclass
class RowResult:
    row: Row
    default: dict
    trials: list[Trial] = field(default_factory=list)
    chosen: Trial | None = None
    seeds: dict[str, list[dict]] = field(default_factory=dict)  # dataset -> runs

    def to_json(self) -> dict:
        return {
            "default": self.default,
            "trials": [{"setting": t.setting, "val_map": t.val_map} for t in self.trials],
            "chosen": self.chosen.setting if self.chosen else None,
            "chosen_trial": self.chosen.number if self.chosen else None,
        }


class Protocol:
    def __init__(self, profile: Profile, datasets: list[Dataset], runs: Path, runner: Runner):
        self.profile, self.datasets, self.runs, self.runner = profile, datasets, runs, runner
        self.tiny = bool(profile.extra)
        self._splits: dict[Dataset, tuple[dict[int, Split], dict[int, Split]]] = {}

    def splits(self, dataset: Dataset) -> tuple[dict[int, Split], dict[int, Split]]:
        """Each fold's validation and test split of ``dataset``, read once."""
        if dataset not in self._splits:
            self._splits[dataset] = fold_splits(dataset, self.profile, self.runs)
        return self._splits[dataset]

    def jobs(self, row, overrides, setting, dataset, folder, seed) -> list[Job]:
        val, _ = self.splits(dataset)
        return [
            Job(
                row,
                (*dataset.overrides, *overrides, *self.profile.extra),
                tuple(setting.items()) if row.peer else (),
                fold,
                seed,
                self.runs / dataset.name / row.name.replace("/", "-") / folder / f"fold{fold}",
                len(val[fold].labels),
                self.tiny,
            )
            for fold in self.profile.folds
        ]

    def space(self, row: Row) -> tuple[list[str], dict, dict]:
        """Fixed overrides, Optuna distributions, and the current default of each key."""
        if row.peer:
            return [], _peer_spaces()[row.peer], PEER_DEFAULTS[row.peer]
        overrides, params = row_space(row)
        space = distributions(params)
        dataset = self.datasets[0]
        cfg = compose_config(
            [*dataset.overrides, *overrides, *self.profile.extra], run_dir=self.runs / "compose"
        )
        from omegaconf import OmegaConf

        default = {key: OmegaConf.select(cfg, key) for key in space}
        return overrides, space, default

    def search(self, row: Row) -> RowResult:
        import optuna

        overrides, space, default = self.space(row)
        result = RowResult(row, default)
        budget = self.profile.trials["peer" if row.peer else row.scorer]
        sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=max(1, budget // 2))
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        dataset, folds = self.datasets[0], len(self.profile.folds)
        while len(result.trials) < budget:
            # two trials' folds at once keep both workers busy; trial 0 is the current default
            # (run as configured: a default outside the space, e.g. weight decay 0 under a log
            # interval, stays exactly the default)
            asked: list = [] if result.trials else [None]
            while len(asked) < min(2, budget - len(result.trials)):
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
            runs = self.runner.map([job for _, batch in batches for job in batch])
            for index, (trial, (setting, _)) in enumerate(zip(asked, batches, strict=True)):
                done = Trial(len(result.trials), setting, runs[index * folds :][:folds])
                result.trials.append(done)
                value = done.val_map
                if trial is not None and np.isfinite(value):
                    study.tell(trial, value)
                elif trial is not None:  # a failed fold (an option pair the loss refuses)
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                print(
                    f"[protocol] {row.name} trial {done.number}: val MAP {value:.4f} {setting}",
                    flush=True,
                )
        result.chosen = max(result.trials, key=lambda t: t.val_map)
        return result

    def seeds(self, result: RowResult) -> None:
        """The chosen setting with every seed on every dataset (seed 0 on the first dataset
        is the chosen trial itself)."""
        row, setting = result.row, result.chosen.setting
        overrides = [] if row.peer else [*row_space(row)[0]]
        if result.chosen.number > 0 and not row.peer:  # trial 0 ran the configured defaults
            overrides += setting_overrides(setting)
        for index, dataset in enumerate(self.datasets):
            jobs = []
            for seed in range(self.profile.seeds):
                folder = (
                    f"trial{result.chosen.number}" if index == 0 and seed == 0 else f"seed{seed}"
                )
                jobs += self.jobs(row, overrides, setting, dataset, folder, seed)
            result.seeds[dataset.name] = self.runner.map(jobs)


# ---- what the runs say: rows, paired intervals, the ensemble -----------------------------------


PAIRED_KEYS = {"map": "AP", "ndcg@10": "NDCG@10"}  # per-query metrics the intervals compare


def per_query(runs: list[dict], test: dict[int, Split], key: str) -> dict[tuple[int, int], float]:
    """``key`` of each test (fold, qid) from the runs' prediction files, the mean over seeds."""
    from differank.rankers.metrics.evaluate import per_query_values

    values: dict[tuple[int, int], list[float]] = {}
    for run in runs:
        split = test[run["fold"]]
        qids, metrics = per_query_values(_scores(run, "test"), split.labels, split.qids)
        for qid, value in zip(qids, metrics[key].tolist(), strict=True):
            values.setdefault((run["fold"], qid), []).append(value)
    return {pair: statistics.fmean(seeds) for pair, seeds in values.items()}


def paired_against(runs: list[dict], reference: list[dict], test: dict[int, Split], key: str):
    """The row's paired bootstrap interval of per-query ``key`` against the reference row's."""
    ours, theirs = per_query(runs, test, key), per_query(reference, test, key)
    if set(ours) != set(theirs):
        raise ValueError("the two rows were tested on different queries")
    pairs = sorted(ours)
    return paired_bootstrap(
        torch.tensor([ours[p] for p in pairs]), torch.tensor([theirs[p] for p in pairs])
    )


@dataclass
class Split:
    """One fold's split in the padded layout the ensemble scores: rows grouped by query."""

    labels: np.ndarray
    qids: np.ndarray
    rows: np.ndarray
    index: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def of(cls, split) -> Split:
        from peers import GroupedMap

        from differank.datamodules.reader import group_queries

        _, rows, lengths = group_queries(split.qids)
        grouped = GroupedMap(split.labels[rows], lengths)
        return cls(split.labels, split.qids, rows, grouped.index, grouped.mask)

    def padded(self, scores: np.ndarray) -> torch.Tensor:
        from differank.rankers.run.ensemble import standardize_per_query

        values = torch.from_numpy(np.asarray(scores, dtype=np.float64)[self.rows])[self.index]
        return standardize_per_query(torch.where(self.mask, values, 0.0), self.mask)

    def flat(self, padded: torch.Tensor) -> np.ndarray:
        scores = np.empty(len(self.rows))
        scores[self.rows] = padded[self.mask].numpy()
        return scores


def _scores(run: dict, split: str) -> np.ndarray:
    """A run's scores of ``split``, one per source row (the ensemble's are held in memory)."""
    if f"{split}_scores" in run:
        return run[f"{split}_scores"]
    return np.loadtxt(Path(run["run_dir"]) / "predictions" / f"{split}.txt", ndmin=1)


def select_ensemble(members: dict[str, list[dict]], val: dict[int, Split], test: dict[int, Split]):
    """Greedy forward selection with replacement on mean validation MAP over the folds.

    ``members``: name -> its runs (one per fold). Returns ``(counts, val_map, test_runs)``:
    how often each member was picked, the ensemble's validation MAP and its per-fold test rows
    (metrics and scores, like a run's)."""
    from differank.rankers.metrics.evaluate import evaluate_arrays
    from differank.rankers.metrics.letor import letor_metrics

    folds = sorted(val)
    by_fold = {name: {run["fold"]: run for run in runs} for name, runs in members.items()}
    val_scores = {
        name: {f: val[f].padded(_scores(runs[f], "val")) for f in folds}
        for name, runs in by_fold.items()
    }
    labels = {f: torch.from_numpy(val[f].labels[val[f].rows])[val[f].index] for f in folds}

    def val_map(totals: dict[int, torch.Tensor]) -> float:
        return statistics.fmean(
            float(letor_metrics(totals[f], labels[f], val[f].mask, ks=(1,))["map"].mean())
            for f in folds
        )

    counts: dict[str, int] = {}
    totals = {f: torch.zeros_like(val[f].index, dtype=torch.float64) for f in folds}
    best = float("-inf")
    for _ in range(ENSEMBLE_STEPS):
        scored = [
            (val_map({f: totals[f] + val_scores[name][f] for f in folds}), name)
            for name in sorted(val_scores)
        ]
        value, name = max(scored)
        if value <= best:
            break
        best, counts[name] = value, counts.get(name, 0) + 1
        totals = {f: totals[f] + val_scores[name][f] for f in folds}
    test_runs = []
    for f in folds:
        total = sum(
            count * test[f].padded(_scores(by_fold[n][f], "test")) for n, count in counts.items()
        )
        scores = test[f].flat(total)
        metrics = evaluate_arrays(scores, test[f].labels, test[f].qids)
        test_runs.append({**metrics, "fold": f, "test_scores": scores, "val_map": best})
    return counts, best, test_runs


def mean_std(runs: list[dict], key: str) -> tuple[float, float]:
    values = [run[key] for run in runs]
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _setting(result: RowResult) -> str:
    if result.chosen is None:
        return "-"
    if result.chosen.number == 0:
        return "= default"
    return ", ".join(
        f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
        for k, v in result.chosen.setting.items()
    )


def dataset_table(
    name: str, results: list[RowResult], ensemble, test: dict[int, Split]
) -> tuple[str, dict]:
    """The dataset's table (markdown) and its record (JSON)."""
    reference = next((r for r in results if r.row.peer == REFERENCE_PEER), None)
    paired_headers = [f"Δ {label} vs {REFERENCE_PEER} [95% CI]" for label in PAIRED_KEYS.values()]
    lines = [
        "| row | chosen setting | val MAP | test MAP | MeanNDCG | NDCG@10 | "
        + " | ".join(paired_headers)
        + " | s / run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    record: dict[str, dict] = {}
    entries = [(r.row.name, _setting(r), r.seeds.get(name, [])) for r in results]
    counts, _, ensemble_runs = ensemble
    members = " + ".join(f"{c}×{n}" if c > 1 else n for n, c in counts.items())
    size = f"{len(counts)} member" + ("s" if len(counts) > 1 else "")
    entries.append((f"ensemble ({size})", members, ensemble_runs))
    chosen_name, chosen_val = None, float("-inf")
    for row_name, setting, runs in entries:
        failed = [run for run in runs if "error" in run]
        if not runs or failed:
            error = failed[0]["error"][:100] if failed else "not run"
            lines.append(f"| {row_name} | {setting} | failed: {error} ||||||||")
            continue
        cells = {key: mean_std(runs, key) for key in ("val_map", "map", "mean_ndcg", "ndcg@10")}
        paired = {}
        if reference is not None and reference.seeds.get(name) and row_name != reference.row.name:
            paired = {
                key: paired_against(runs, reference.seeds[name], test, key) for key in PAIRED_KEYS
            }
        deltas = [_interval(paired[key]) if paired else "-" for key in PAIRED_KEYS]
        seconds = statistics.fmean(run["seconds"] for run in runs) if "seconds" in runs[0] else 0
        lines.append(
            f"| {row_name} | {setting} | {cells['val_map'][0]:.4f} | "
            + " | ".join(f"{m:.4f} ± {s:.4f}" for m, s in list(cells.values())[1:])
            + " | "
            + " | ".join(deltas)
            + f" | {seconds:.1f} |"
        )
        if not row_name.startswith("peer_") and cells["val_map"][0] > chosen_val:
            chosen_name, chosen_val = row_name, cells["val_map"][0]
        record[row_name] = {
            "setting": setting,
            **{f"{k}_mean": m for k, (m, _) in cells.items()},
            **{f"{k}_std": s for k, (_, s) in cells.items()},
            "paired": {
                key: {**vars(interval), "verdict": interval.verdict}
                for key, interval in paired.items()
            }
            or None,
            "runs": len(runs),
        }
    chosen = record[chosen_name]
    note = (
        f"Validation-chosen differank row: **{chosen_name}** (val MAP {chosen_val:.4f}, "
        f"test MAP {chosen['map_mean']:.4f})"
    )
    if chosen["paired"]:
        interval = chosen["paired"]["map"]
        note += (
            f"; per-query AP minus {REFERENCE_PEER}'s over {interval['queries']} queries: "
            f"{interval['mean']:+.4f} [{interval['low']:+.4f}, {interval['high']:+.4f}], "
            f"{interval['verdict']}"
        )
    counts = {
        key: Counter(r["paired"][key]["verdict"] for r in record.values() if r["paired"])
        for key in PAIRED_KEYS
    }
    note += f". Against {REFERENCE_PEER} (a row is better or worse only when its interval " + (
        "excludes 0): "
        + "; ".join(
            f"{label} " + ", ".join(f"{counts[key][v]} {v}" for v in VERDICTS)
            for key, label in PAIRED_KEYS.items()
        )
        + "."
    )
    return "\n".join(lines) + "\n\n" + note + "\n", {"rows": record, "chosen": chosen_name}


VERDICTS = ("better", "indistinguishable", "worse")


def _interval(interval: PairedInterval) -> str:
    """``+0.0012 [-0.0040, +0.0065]`` with its verdict in words when the interval excludes 0."""
    text = f"{interval.mean:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}]"
    return text if interval.verdict == "indistinguishable" else f"{text} {interval.verdict}"


def search_table(results: list[RowResult]) -> str:
    """What was searched: per row, the trials' mean validation MAP, the default's first."""
    lines = [
        "| row | trials | default val MAP | chosen val MAP | chosen setting |",
        "|---|---:|---:|---:|---|",
    ]
    for result in results:
        values = [t.val_map for t in result.trials]
        lines.append(
            f"| {result.row.name} | {len(values)} | {values[0]:.4f} | "
            f"{result.chosen.val_map:.4f} | {json.dumps(result.chosen.setting)} |"
        )
    return "\n".join(lines) + "\n"


def write_experiment(result: RowResult, dataset: Dataset, folder: Path, table: Path | None) -> Path:
    """The row's chosen setting as a ``conf/experiment`` file: its groups, then its keys."""
    overrides = [*dataset.overrides, *row_space(result.row)[0]]
    groups = [o.split("=", 1) for o in overrides if "." not in o.split("=", 1)[0]]
    settings: dict = {}
    for key, value in result.chosen.setting.items():
        node = settings
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    trial = result.chosen.number
    source = f"; table: {table.name}" if table else ""
    lines = [
        "# @package _global_",
        f"# {result.row.name}: chosen by benchmarks/protocol.py on mean validation MAP over the "
        f"folds of {dataset.name}",
        f"# (trial {trial} of {len(result.trials)}; trial 0 = the defaults{source}).",
        "# Written by --write-experiments: rerun the protocol rather than editing by hand.",
        "defaults:",
        *[f"  - override /{group}: {value}" for group, value in groups],
        "",
        yaml.safe_dump(settings, sort_keys=False).rstrip() if settings else "{}",
    ]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.row.name.replace('/', '_')}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def fold_splits(dataset: Dataset, profile: Profile, runs: Path) -> tuple[dict, dict]:
    """Each fold's validation and test split (labels, qids) of ``dataset``."""
    val, test = {}, {}
    for fold in profile.folds:
        overrides = [*dataset.overrides, *profile.extra, f"++data.fold={fold}"]
        datamodule = _data_module(overrides, runs / "compose")
        val[fold], test[fold] = (Split.of(datamodule.split_data(s)) for s in ("val", "test"))
    return val, test


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=["mq2008"],
        help="the first is searched; the others train its chosen settings (conf/data names "
        "or NAME=DIR for a LETOR folder)",
    )
    parser.add_argument("--only", nargs="*", help="keep only these rows (names as in the table)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "protocol")
    parser.add_argument("--out", type=Path, help="write the table (markdown; JSON beside it)")
    parser.add_argument(
        "--write-experiments",
        type=Path,
        metavar="DIR",
        help="write each differank row's chosen setting as DIR/<search>_<scorer>.yaml "
        "(conf/experiment/protocol: `python train.py experiment=protocol/<search>_<scorer>`)",
    )
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="redraw the forest plot (--out with .png) from --out's protocol.json; run nothing",
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        if args.out is None:
            parser.error("--plot-only needs --out (its .json is read, its .png written)")
        record = json.loads(args.out.with_suffix(".json").read_text())
        forest_plot(record, args.out.with_suffix(".png"), reference=REFERENCE_PEER)
        return

    profile = PROFILES[args.profile]
    if args.profile == "smoke":
        args.datasets = [name for name in args.datasets if name != "mq2008"] or ["synthetic"]
    datasets = [Dataset.parse(text) for text in args.datasets]
    rows = [r for r in profile.rows if args.only is None or r.name in args.only]
    from peers import available

    rows = [r for r in rows if not r.peer or available(r.peer)]
    start, runner = time.perf_counter(), Runner(args.jobs)
    protocol, results = Protocol(profile, datasets, args.runs, runner), []
    for row in rows:
        result = protocol.search(row)
        protocol.seeds(result)
        results.append(result)
    wall = time.perf_counter() - start

    command = " ".join(
        ["python benchmarks/protocol.py", *(argv if argv is not None else sys.argv[1:])]
    )
    parts = [
        f"# The selection protocol ({args.profile} profile)",
        "",
        f"Command (from the repository root): `{command}`",
        "",
        f"Trials per row: {profile.trials}; {profile.seeds} seeds × folds {list(profile.folds)}; "
        f"selection on mean validation MAP over the folds of {datasets[0].name} only; every "
        f"other dataset trains the settings chosen there. Test MAP: mean ± std over seeds and "
        f"folds. Δ AP: per-query test AP (mean over seeds) minus {REFERENCE_PEER}'s, pooled "
        "over folds, with its 95% paired bootstrap interval (10,000 resamples of queries).",
        "",
    ]
    record: dict = {"rows": {r.row.name: r.to_json() for r in results}}
    if args.write_experiments:
        for result in results:
            if not result.row.peer:
                write_experiment(result, datasets[0], args.write_experiments, args.out)
    for dataset in datasets:
        val, test = protocol.splits(dataset)
        members = {
            f"{r.row.name}#{seed}": [
                run for run in r.seeds[dataset.name] if run.get("seed") == seed
            ]
            for r in results
            if not r.row.peer and not any("error" in run for run in r.seeds[dataset.name])
            for seed in range(profile.seeds)
        }
        ensemble = select_ensemble(members, val, test)
        table, record[dataset.name] = dataset_table(dataset.name, results, ensemble, test)
        parts += [f"## {dataset.name}", "", table]
    parts += [f"## What was searched ({datasets[0].name} validation)", "", search_table(results)]
    cpu = sum(
        run.get("cpu_seconds", 0.0)
        for r in results
        for runs in [*(t.runs for t in r.trials), *r.seeds.values()]
        for run in runs
    )
    parts.append(
        f"Wall time {wall:.0f} s with --jobs {args.jobs} (runs cached from earlier invocations "
        f"count 0 s); CPU time of the runs {cpu:.0f} s (one thread each)."
    )
    measure.publish("\n".join(parts), args.out)
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
        forest_plot(record, args.out.with_suffix(".png"), reference=REFERENCE_PEER)


if __name__ == "__main__":
    main()
