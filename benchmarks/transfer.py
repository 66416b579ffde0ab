"""Do settings travel? ``differank tune``'s protocol (:mod:`differank.rankers.tuning`) run on
each of two datasets with the same budget, then each setting chosen on one dataset trained and
tested on the other, against LightGBM searched on that other dataset; and each objective's
default chosen on the mean validation MAP over both datasets.

    python benchmarks/transfer.py --budget 12m --jobs 1 --out benchmarks/results/transfer.md
    python benchmarks/transfer.py --profile smoke --out /tmp/smoke.md   # tests: tiny data

1. **The searches.** Each dataset (``--datasets A B``, default MQ2008 and lightgbm_rank) gets
   :func:`run_selection` with the rows of ``differank tune``'s default (``tune.rows`` of
   conf/train.yaml; XGBoost skipped when not installed) within ``--budget``.
2. **The transfer table**, each direction (chosen on A, tested on B, and back): each row's
   setting chosen on the source's validation, trained on the target (``--seeds`` seeds), its
   target figures and its paired intervals of per-query AP and NDCG@10 against LightGBM
   **searched on the target**; beside it the same row chosen on the target itself.
3. **Defaults chosen on both datasets.** Each differank row's candidates: its shipped default
   (trial 0), its setting chosen on A and the one chosen on B; each candidate's mean validation
   MAP over the folds (seed 0) on each dataset; the best candidate by the mean of the two
   (validation only, never test) is the default both datasets choose.

One runs cache (``--runs``) serves both directions: a setting already trained on the target (its
search tried it) is read from that search's runs, never trained again. Profiles
(:data:`PROFILES`): ``full`` (the datasets of the command line) and ``smoke`` (two synthetic
data sets, two rows, for the tests).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import measure
from omegaconf import OmegaConf
from reproduce import TINY_OVERRIDES

from differank.datamodules.atomic_files import write_file
from differank.rankers.run.runs import CONFIG_DIR
from differank.rankers.tuning.budget import parse_budget
from differank.rankers.tuning.report import (
    PAIRED_KEYS,
    REFERENCE_PEER,
    _interval,
    _setting,
    search_table,
)
from differank.rankers.tuning.search import Profile, Protocol, RowResult, Trial
from differank.rankers.tuning.selection import mean_std, paired_against
from differank.rankers.tuning.space import Row, row_space, setting_overrides
from differank.rankers.tuning.trials import Dataset, Runner
from differank.rankers.tuning.tune import Selection, run_selection

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class TransferProfile:
    """The searches' profile (no rows: ``tune.rows`` of conf/train.yaml) and the two datasets
    it runs on when the command line names none."""

    profile: Profile
    datasets: tuple[Dataset, Dataset]


def tune_rows() -> tuple[Row, ...]:
    """``differank tune``'s default rows (``tune.rows`` of conf/train.yaml)."""
    rows = OmegaConf.load(CONFIG_DIR / "train.yaml").tune.rows
    return tuple(Row.parse(name) for name in rows)


PROFILES = {
    "full": TransferProfile(
        Profile({}, seeds=1, folds=(1, 2, 3, 4, 5), rows=()),
        (Dataset.parse("mq2008"), Dataset.parse("lightgbm_rank")),
    ),
    "smoke": TransferProfile(
        Profile(
            {"linear": 2, "peer": 2},
            seeds=1,
            folds=(1,),  # the synthetic data has one fold
            rows=(Row("ranknet"), Row("lightgbm", peer="lightgbm")),
            extra=tuple(TINY_OVERRIDES),
            tiny=True,
        ),
        # two generated data sets (their data seeds differ): the smoke's "two datasets"
        (
            Dataset("synthetic_a", ("data=synthetic", "data.seed=0")),
            Dataset("synthetic_b", ("data=synthetic", "data.seed=1")),
        ),
    ),
}


@dataclass
class Searched:
    """One dataset's own search: its selection and the protocol that trains on it."""

    dataset: Dataset
    selection: Selection
    protocol: Protocol

    def result(self, row: Row) -> RowResult:
        return next(r for r in self.selection.results if r.row == row)

    def own_runs(self, row: Row) -> list[dict]:
        """The row's setting chosen on this dataset, with its seeds, on this dataset."""
        return self.result(row).seeds.get(self.dataset.name, [])


def _key(row: Row, trial: Trial) -> str:
    """What a trial trains, as a comparable text: trial 0 of a differank row runs the
    configured defaults (no setting overrides), every other trial its setting."""
    if trial.number == 0 and not row.peer:
        return "default"
    return json.dumps(trial.setting, sort_keys=True, default=str)


def transferred(result: RowResult, source: Dataset, target: Searched, runner, seeds: int):
    """The row's setting chosen on ``source`` trained on ``target`` with ``seeds`` seeds. A
    run the target's own search already made (the same setting, seed 0; or every seed when the
    target chose the same setting) is read from it, not trained again."""
    row, chosen = result.row, result.chosen
    own = target.result(row)
    same = [t for t in own.trials if t.error is None and _key(row, t) == _key(row, chosen)]
    if any(t is own.chosen for t in same) and own.seeds_run >= seeds:
        return [run for run in target.own_runs(row) if run["seed"] < seeds]
    overrides = [] if row.peer else list(row_space(row)[0])
    if chosen.number > 0 and not row.peer:
        overrides += setting_overrides(chosen.setting)
    runs = list(same[0].runs) if same else []
    for seed in range(1 if same else 0, seeds):
        folder = f"from_{source.name}/seed{seed}"
        jobs = target.protocol.jobs(row, overrides, chosen.setting, target.dataset, folder, seed)
        runs += runner.map(jobs)
    return runs


def _row_cells(runs: list[dict], reference: list[dict], test) -> list[str]:
    """Validation MAP, test MAP, NDCG@10 and the paired intervals against ``reference``."""
    failed = [run for run in runs if "error" in run]
    if not runs or failed:
        return [f"failed: {failed[0]['error'][:200]}" if failed else "not run", *[""] * 4]
    cells = [f"{mean_std(runs, 'val_map')[0]:.4f}"]
    cells += ["{:.4f} ± {:.4f}".format(*mean_std(runs, key)) for key in ("map", "ndcg@10")]
    cells += [_interval(paired_against(runs, reference, test, key)) for key in PAIRED_KEYS]
    return cells


def transfer_table(source: Searched, target: Searched, moved: dict[Row, list[dict]]):
    """The direction's table (markdown) and its record: each row chosen on ``source`` and
    chosen on ``target``, tested on ``target`` against LightGBM searched on ``target``."""
    reference = target.own_runs(Row(REFERENCE_PEER, peer=REFERENCE_PEER))
    if not reference or any("error" in run for run in reference):
        raise RuntimeError(
            f"{REFERENCE_PEER} searched on {target.dataset.name} has no runs to pair with: "
            "the transfer table compares every row with it (install lightgbm, see its error "
            "in the search table)"
        )
    _, test = target.protocol.splits(target.dataset)
    src, tgt = source.dataset.name, target.dataset.name
    headers = [
        f"Δ {label} vs {REFERENCE_PEER} searched on {tgt} [95% CI]"
        for label in PAIRED_KEYS.values()
    ]
    lines = [
        f"| row | chosen on | setting | val MAP | test MAP | NDCG@10 | {' | '.join(headers)} |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    record: dict[str, dict] = {}
    for row, runs in moved.items():
        for where, searched, row_runs in ((src, source, runs), (tgt, target, target.own_runs(row))):
            if row.peer and where == tgt:
                continue  # the reference itself
            cells = _row_cells(row_runs, reference, test)
            setting = _setting(searched.result(row))
            lines.append(f"| {row.name} | {where} | {setting} | " + " | ".join(cells) + " |")
            if not row_runs or any("error" in run for run in row_runs):
                continue
            record.setdefault(row.name, {})[where] = {
                "setting": searched.result(row).chosen.setting,
                **{f"{k}_mean": mean_std(row_runs, k)[0] for k in ("val_map", "map", "ndcg@10")},
                "paired": {
                    key: vars(paired_against(row_runs, reference, test, key)) for key in PAIRED_KEYS
                },
            }
    return "\n".join(lines) + "\n", record


def _val_map(runs: list[dict]) -> float | None:
    """Mean validation MAP over the folds of seed 0; None when a run failed."""
    seed0 = [run for run in runs if run.get("seed", 0) == 0]
    if not seed0 or any("error" in run for run in seed0):
        return None
    return statistics.fmean(run["val_map"] for run in seed0)


def defaults_table(first: Searched, second: Searched, moved: dict[tuple[str, Row], list[dict]]):
    """Each differank row's candidates (its default, the settings chosen on each dataset) by
    mean validation MAP on each dataset and their mean; the best mean is the new default."""
    names = (first.dataset.name, second.dataset.name)
    lines = [
        f"| row | candidate | setting | val MAP {names[0]} | val MAP {names[1]} | mean | |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    record: dict[str, dict] = {}
    for result in first.selection.results:
        row = result.row
        if row.peer:
            continue
        candidates: dict[str, dict] = {}  # key -> label, setting, val MAP per dataset
        default = first.result(row).trials[0]
        candidates["default"] = {
            "label": "shipped default",
            "setting": default.setting,
            "val_map": {s.dataset.name: s.result(row).trials[0].val_map for s in (first, second)},
        }
        for chooser, other in ((first, second), (second, first)):
            chosen = chooser.result(row).chosen
            if chosen is None:
                continue
            key = _key(row, chosen)
            entry = candidates.setdefault(
                key,
                {
                    "label": f"chosen on {chooser.dataset.name}",
                    "setting": chosen.setting,
                    "val_map": {
                        chooser.dataset.name: chosen.val_map,
                        other.dataset.name: _val_map(moved.get((chooser.dataset.name, row), [])),
                    },
                },
            )
            if entry["label"] != f"chosen on {chooser.dataset.name}":
                entry["label"] += f" = chosen on {chooser.dataset.name}"
        scored = {
            key: statistics.fmean(c["val_map"][n] for n in names)
            for key, c in candidates.items()
            if all(c["val_map"].get(n) is not None for n in names)
        }
        best = max(scored, key=scored.__getitem__) if scored else None
        for key, c in candidates.items():
            cells = [
                "-" if c["val_map"].get(n) is None else f"{c['val_map'][n]:.4f}" for n in names
            ]
            mean = f"{scored[key]:.4f}" if key in scored else "-"
            mark = "**new default**" if key == best and key != "default" else ""
            mark = mark or ("kept" if key == best else "")
            setting = json.dumps(c["setting"], default=str)
            lines.append(
                f"| {row.name} | {c['label']} | `{setting}` | {' | '.join(cells)} | {mean} | "
                f"{mark} |"
            )
        record[row.name] = {
            "candidates": {c["label"]: {**c, "mean": scored.get(k)} for k, c in candidates.items()},
            "best": candidates[best]["label"] if best else None,
        }
    return "\n".join(lines) + "\n", record


def search_each(
    profile: Profile, datasets, runs: Path, jobs: int, budget: float | None, runner: Runner
) -> list[Searched]:
    """Each dataset searched on its own validation (:func:`run_selection`, ``jobs`` at a time,
    within ``budget`` seconds each), runs cached under ``runs``; ``runner`` trains on it later."""
    return [
        Searched(
            dataset,
            run_selection(profile, [dataset], runs, jobs, budget),
            Protocol(profile, [dataset], runs, runner),
        )
        for dataset in datasets
    ]


def transfer_both(searched: list[Searched], runner: Runner, seeds: int):
    """Each row's chosen setting of each dataset trained on the other: ``(source name, row)``
    -> its runs on the target."""
    moved: dict[tuple[str, Row], list[dict]] = {}
    for source, target in (searched, searched[::-1]):
        for result in source.selection.results:
            if result.chosen is not None:
                runs = transferred(result, source.dataset, target, runner, seeds)
                moved[source.dataset.name, result.row] = runs
    return moved


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument(
        "--datasets",
        nargs=2,
        metavar=("A", "B"),
        help="the two datasets (conf/data names or NAME=DIR); default: the profile's",
    )
    parser.add_argument("--budget", default="8m", help="wall time of each search (90s, 8m, 1h)")
    parser.add_argument("--trials", type=int, default=8, help="at most this many per row")
    parser.add_argument("--seeds", type=int, help="seeds of each chosen setting (default 1)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "transfer")
    parser.add_argument("--out", type=Path, help="write the tables (markdown; JSON beside it)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    chosen = PROFILES[args.profile]
    profile = chosen.profile
    budget = parse_budget(args.budget)
    profile = dataclasses.replace(
        profile,
        seeds=args.seeds or profile.seeds,
        rows=profile.rows or tune_rows(),
        default_trials=args.trials,
    )
    datasets = [Dataset.parse(t) for t in args.datasets] if args.datasets else chosen.datasets
    runner = Runner(args.jobs)
    try:
        searched = search_each(profile, datasets, args.runs, args.jobs, budget, runner)
        moved = transfer_both(searched, runner, profile.seeds)
    finally:
        runner.close()

    command = " ".join(
        ["python benchmarks/transfer.py", *(argv if argv is not None else sys.argv[1:])]
    )
    names = [d.name for d in datasets]
    parts = [
        f"# Do chosen settings travel? {names[0]} ↔ {names[1]} ({args.profile} profile)",
        "",
        f"Command (from the repository root): `{command}`",
        "",
        f"Each dataset searched by `differank tune`'s protocol (rankers/tuning) with the rows "
        f"{', '.join(r.name for r in profile.rows)} (XGBoost skipped when not installed), at "
        f"most {args.trials} trials per row within a budget of {args.budget} per dataset, "
        f"{profile.seeds} seed(s) × folds {list(profile.folds)}, selection on mean validation "
        f"MAP over the folds. Test figures: mean ± std over seeds and folds. Δ: per-query test "
        f"metric (mean over seeds) minus {REFERENCE_PEER}'s searched on the target, pooled over "
        "folds, with its 95% paired bootstrap interval (10,000 resamples of queries).",
        "",
    ]
    record: dict = {"command": command, "budget": args.budget, "seeds": profile.seeds}
    for source, target in (searched, searched[::-1]):
        rows = {row: runs for (name, row), runs in moved.items() if name == source.dataset.name}
        text, record[f"{source.dataset.name}->{target.dataset.name}"] = transfer_table(
            source, target, rows
        )
        parts += [f"## Chosen on {source.dataset.name}, tested on {target.dataset.name}", "", text]
    text, record["defaults"] = defaults_table(*searched, moved)
    parts += [
        "## Defaults chosen on both datasets (validation MAP, seed 0, mean over the folds)",
        "",
        "Candidates: the shipped default (trial 0), the setting chosen on each dataset. The "
        "best mean of the two datasets' validation MAP is the default both choose (**new "
        "default** where it is not the shipped one). Test figures are never read here.",
        "",
        text,
    ]
    for s in searched:
        parts += [f"## What was searched ({s.dataset.name} validation)", ""]
        parts.append(search_table(s.selection.results))
        parts.append(f"Wall time of the search {s.selection.seconds:.0f} s (budget {args.budget}).")
        parts.append("")
        record[s.dataset.name] = s.selection.record
    measure.publish("\n".join(parts), args.out)
    if args.out:
        write_file(args.out.with_suffix(".json"), json.dumps(record, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
