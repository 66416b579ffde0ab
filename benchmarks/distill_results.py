"""Distilled students against their teacher and against the same student trained on labels alone.

    LETOR_DIR=/work/wt/shared/data python benchmarks/distill_results.py \\
        --datasets mq2008 lightgbm_rank --students mlp linear lightgbm xgboost \\
        --teachers lightgbm ensemble --seeds 0 1 2 --folds 1 2 3 4 5 \\
        --out benchmarks/results/distill.md
    python benchmarks/distill_results.py --tiny        # smoke run on synthetic data (seconds)

Per dataset and fold:

1. **Teachers.** ``lightgbm``: LightGBM lambdarank fitted on the fold's raw features by
   ``peers.fit_lightgbm`` (``num_leaves`` chosen on validation MAP, trees by early stopping on
   it), saved as a model file (``teacher=lightgbm``). ``ensemble``: a validation-chosen ensemble
   of the label-only students of this benchmark's first seed (step 2): of {MLP, linear, both},
   the one whose per-query standardised mean has the best validation MAP, written as an
   ``ensemble.json`` (``teacher=ensemble``). One teacher per fold for every student seed.
2. **Label-only students**: ``model=M loss=listnet``, one run per seed. A tree student
   (``lightgbm``, ``xgboost``) on labels alone is the same student with ``student.alpha=1``
   (the label loss's weight: the teacher's term has weight 0, so any teacher gives the same
   trees; the fold's first teacher is named because a tree student reads one).
3. **Distilled students**: ``model=M loss=distill`` (listwise KD mixed with ListNet on the labels,
   weight α), the teacher's file as ``teacher.path``; a tree student is
   ``experiment=distill/tree_student student=L`` with ``student.alpha`` and
   ``student.temperature`` (the same objective, docs/objectives/distill.md#tree-students).
   (α, temperature) is chosen from the grid by the mean validation MAP over the folds of the
   first seed (never test); every seed then runs with the chosen setting.

A tree student runs the first seed only: with conf/student/'s settings (no bagging, no feature
or row sampling) a booster has no randomness and gives the same trees for every seed, so more
seeds would repeat identical runs; the table says so in its ``seeds`` column.

Rows: test MAP and NDCG@10, mean ± std over the (fold, seed) runs, and 95% paired bootstrap
intervals (:func:`differank.rankers.metrics.significance.paired_bootstrap`, per-query AP
averaged over seeds, the protocol's pairing) of distilled − teacher and distilled − label-only.
Every run is kept under ``--runs`` (``result.json`` per run): a rerun reuses finished runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import measure
import numpy as np
import peers
import torch
from reproduce import TINY_OVERRIDES, training_run

from differank.datamodules.atomic_files import write_file
from differank.rankers.metrics.evaluate import per_query_values
from differank.rankers.metrics.significance import paired_bootstrap
from differank.rankers.run.runs import compose_config

ROOT = Path(__file__).resolve().parents[1]
LABEL_LOSS = "{_target_:differank.losses.listnet.ListNetLoss,reduction:none}"
TREE_STUDENTS = ("lightgbm", "xgboost")  # student=..., experiment=distill/tree_student
NEURAL_STUDENTS = ("mlp", "linear")
STUDENT_NAMES = {"mlp": "MLP", "linear": "linear", "lightgbm": "LightGBM", "xgboost": "XGBoost"}
DATASETS = {"mq2008": ("data=mq2008",), "lightgbm_rank": ("data=lightgbm_rank",)}
TINY_DATA = tuple(o for o in TINY_OVERRIDES if o.startswith("data"))


@dataclass(frozen=True)
class Plan:
    datasets: list[str]
    students: list[str]
    teachers: list[str]
    seeds: list[int]
    folds: list[int]
    alphas: list[float]
    temperatures: list[float]
    runs: Path
    tiny: bool


def data_overrides(plan: Plan, dataset: str, fold: int) -> list[str]:
    if plan.tiny:  # synthetic data is generated from data.seed (default: the run's seed)
        return [*TINY_DATA, "data.seed=0"]
    return [*DATASETS[dataset], f"data.fold={fold}"]


def raw_data(overrides: list[str], run_dir: Path):
    """The fold's data module with raw features (what every teacher scores)."""
    from hydra.utils import instantiate

    cfg = compose_config(overrides, run_dir=run_dir)
    return instantiate(cfg.data, normalization="none", transform="none")


def train(overrides: list[str], run_dir: Path, tiny: bool) -> dict:
    """One ``train.py`` run (reused when its ``result.json`` exists): val MAP, test metrics."""
    record = run_dir / "result.json"
    if record.is_file():
        return json.loads(record.read_text())
    extra = ["trainer.max_epochs=1", "logger=csv"] if tiny else ["logger=csv"]
    start = time.perf_counter()
    metrics = training_run([*overrides, *extra, "quiet=true"], run_dir)
    result = {
        "val_map": metrics["val/map"],
        "map": metrics["map"],
        "ndcg@10": metrics["ndcg@10"],
        "seconds": time.perf_counter() - start,
        "run_dir": str(run_dir),
    }
    write_file(record, json.dumps(result, indent=2) + "\n")
    return result


def test_scores(run: dict) -> np.ndarray:
    return np.loadtxt(Path(run["run_dir"]) / "predictions" / "test.txt", ndmin=1)


INTERVAL_METRICS = {"map": "AP", "ndcg@10": "NDCG@10"}  # per-query metric -> its column's name


def per_query(scores: np.ndarray, split, metric: str = "map") -> dict[int, float]:
    qids, metrics = per_query_values(torch.as_tensor(scores), split.labels, split.qids)
    return dict(zip(qids, metrics[metric].tolist(), strict=True))


def val_map(scores: np.ndarray, split) -> float:
    return statistics.fmean(per_query(scores, split).values())


def lightgbm_teacher(plan: Plan, data, folder: Path) -> Path:
    """The fold's LightGBM model file (fitted once; peers.fit_lightgbm chooses on validation)."""
    path = folder / "lightgbm.txt"
    if not path.is_file():
        candidates = (peers.TINY_CANDIDATES if plan.tiny else peers.DEFAULT_CANDIDATES)["lightgbm"]
        predict, _, _ = peers.fit_lightgbm(data, plan.tiny, candidates)
        folder.mkdir(parents=True, exist_ok=True)
        model = predict.booster.model_to_string(num_iteration=predict.booster.best_iteration)
        write_file(path, model)
    return path


def ensemble_teacher(label_runs: dict[str, list[dict]], seed: int, data, folder: Path) -> Path:
    """The fold's ``ensemble.json``: of the label-only students of ``seed`` (MLP, linear, both),
    the standardised-mean ensemble with the best validation MAP. One teacher per fold, as
    LightGBM: every student seed learns from the same ensemble."""
    from differank.rankers.run.teachers import EnsembleTeacher

    label_runs = {name: [r for r in runs if r["seed"] == seed] for name, runs in label_runs.items()}
    path = folder / f"ensemble_seed{seed}.json"
    if path.is_file():
        return path
    options = {name: runs for name, runs in label_runs.items() if runs}
    options["all"] = [run for runs in label_runs.values() for run in runs]
    best = None
    for name, runs in options.items():
        record = {
            "checkpoints": [str(Path(r["run_dir"]) / "checkpoints" / "best.ckpt") for r in runs],
            "weights": [1.0] * len(runs),
            "scores": "standardized",
            "chosen_from": name,
        }
        candidate = folder / f"ensemble_seed{seed}_{name}.json"
        write_file(candidate, json.dumps(record, indent=2) + "\n")
        value = val_map(
            EnsembleTeacher(candidate).score(data.split_data("val")), data.split_data("val")
        )
        if best is None or value > best[0]:
            best = (value, record)
    assert best is not None
    write_file(path, json.dumps({**best[1], "val_map": best[0]}, indent=2) + "\n")
    return path


def teacher_class(kind: str):
    from differank.rankers.run.teachers import EnsembleTeacher, LightGBMTeacher

    return {"lightgbm": LightGBMTeacher, "ensemble": EnsembleTeacher}[kind]


def distill_overrides(student: str, kind: str, path: Path, alpha: float, tau: float) -> list[str]:
    teacher = [f"teacher={kind}", f"teacher.path={path}"]
    if student in TREE_STUDENTS:
        return [
            "experiment=distill/tree_student",
            f"student={student}",
            f"student.alpha={alpha}",
            f"student.temperature={tau}",
            *teacher,
        ]
    return [
        f"model={student}",
        "loss=distill",
        "loss.form=listwise",
        f"loss.alpha={alpha}",
        f"loss.temperature={tau}",
        f"loss.label_loss={LABEL_LOSS}",
        *teacher,
    ]


def student_seeds(plan: Plan, student: str) -> list[int]:
    """A booster without randomness gives the same trees for every seed: it runs the first."""
    return plan.seeds[:1] if student in TREE_STUDENTS else plan.seeds


def tree_label_runs(plan: Plan, dataset: str, student: str, kind: str, teachers: dict) -> dict:
    """Per fold, the tree student on labels alone (``student.alpha=1``: the teacher's weight is
    0). Its folder names no teacher: any teacher gives the same trees, so it runs once."""
    label_runs = {}
    for fold, path in teachers.items():
        seed = plan.seeds[0]
        overrides = [
            *data_overrides(plan, dataset, fold),
            f"seed={seed}",
            *distill_overrides(student, kind, path, 1.0, 1.0),
        ]
        run_dir = plan.runs / dataset / f"fold{fold}" / f"{student}_labels_seed{seed}"
        label_runs[fold] = [{**train(overrides, run_dir, plan.tiny), "seed": seed}]
    return label_runs


def run_dataset(plan: Plan, dataset: str) -> list[dict]:
    """Every row of ``dataset``: per student and teacher, the teacher, label-only and distilled."""
    base = plan.runs / dataset
    folds = [1] if plan.tiny else plan.folds
    label_runs = {s: {f: [] for f in folds} for s in NEURAL_STUDENTS}
    needs_both = "ensemble" in plan.teachers
    for student in NEURAL_STUDENTS:
        if student not in plan.students and not needs_both:
            continue
        seeds = plan.seeds if student in plan.students else plan.seeds[:1]  # members only
        for fold, seed in itertools.product(folds, seeds):
            overrides = [*data_overrides(plan, dataset, fold), f"seed={seed}"]
            run_dir = base / f"fold{fold}" / f"{student}_labels_seed{seed}"
            run = train([*overrides, f"model={student}", "loss=listnet"], run_dir, plan.tiny)
            label_runs[student][fold].append({**run, "seed": seed})
    rows = []
    for kind in plan.teachers:
        teachers, teacher_values, test_splits = {}, {}, {}
        for fold in folds:
            folder = base / f"fold{fold}"
            data = raw_data(data_overrides(plan, dataset, fold), folder)
            if kind == "lightgbm":
                teachers[fold] = lightgbm_teacher(plan, data, folder)
            else:
                by_student = {s: label_runs[s][fold] for s in NEURAL_STUDENTS}
                teachers[fold] = ensemble_teacher(by_student, plan.seeds[0], data, folder)
            test_splits[fold] = data.split_data("test")
            scores = teacher_class(kind)(teachers[fold]).score(test_splits[fold])
            teacher_values[fold] = {
                metric: per_query(scores, test_splits[fold], metric) for metric in INTERVAL_METRICS
            }
        for student in plan.students:
            if student in TREE_STUDENTS and student not in label_runs:
                label_runs[student] = tree_label_runs(plan, dataset, student, kind, teachers)
            rows.append(
                student_rows(
                    plan,
                    dataset,
                    student,
                    kind,
                    teachers,
                    teacher_values,
                    test_splits,
                    label_runs[student],
                )  # fmt: skip
            )
    return rows


def student_rows(plan, dataset, student, kind, teachers, teacher_values, test_splits, label_runs):
    base = plan.runs / dataset
    folds = sorted(teachers)

    def distilled(alpha: float, tau: float, seed: int) -> list[dict]:
        runs = []
        for fold in folds:
            overrides = [
                *data_overrides(plan, dataset, fold),
                f"seed={seed}",
                *distill_overrides(student, kind, teachers[fold], alpha, tau),
            ]
            name = f"{student}_from_{teachers[fold].stem}_a{alpha:g}_t{tau:g}_seed{seed}"
            run = train(overrides, base / f"fold{fold}" / name, plan.tiny)
            runs.append({**run, "fold": fold})
        return runs

    grid = {(a, t): distilled(a, t, plan.seeds[0]) for a in plan.alphas for t in plan.temperatures}
    chosen = max(grid, key=lambda key: statistics.fmean(r["val_map"] for r in grid[key]))
    seeds = student_seeds(plan, student)
    runs = [run for seed in seeds for run in distilled(*chosen, seed)]
    labels = [{**run, "fold": fold} for fold in folds for run in label_runs[fold]]

    def per_query_mean(group: list[dict], metric: str) -> dict[tuple[int, int], float]:
        values: dict[tuple[int, int], list[float]] = {}
        for run in group:
            split = test_splits[run["fold"]]
            for qid, value in per_query(test_scores(run), split, metric).items():
                values.setdefault((run["fold"], qid), []).append(value)
        return {key: statistics.fmean(v) for key, v in values.items()}

    vs_teacher, vs_labels, teacher_map = {}, {}, 0.0
    for metric in INTERVAL_METRICS:
        ours, theirs = per_query_mean(runs, metric), per_query_mean(labels, metric)
        teacher = {
            (fold, qid): v for fold in folds for qid, v in teacher_values[fold][metric].items()
        }
        pairs = sorted(ours)
        distilled_values = torch.tensor([ours[p] for p in pairs])
        vs_teacher[metric] = paired_bootstrap(
            distilled_values, torch.tensor([teacher[p] for p in pairs])
        )
        vs_labels[metric] = paired_bootstrap(
            distilled_values, torch.tensor([theirs[p] for p in pairs])
        )
        if metric == "map":
            teacher_map = statistics.fmean(teacher.values())
    return {
        "dataset": dataset,
        "student": student,
        "teacher": kind,
        "seeds": seeds,
        "chosen": {"alpha": chosen[0], "temperature": chosen[1]},
        "grid_val_map": {
            f"a={a:g},t={t:g}": statistics.fmean(r["val_map"] for r in grid[(a, t)])
            for a, t in grid
        },
        "teacher_map": teacher_map,
        "distilled": summary(runs),
        "labels": summary(labels),
        "vs_teacher": vs_teacher,
        "vs_labels": vs_labels,
        "queries": len(pairs),
    }


def summary(runs: list[dict]) -> dict:
    def mean_std(key: str) -> str:
        values = [run[key] for run in runs]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.fmean(values):.4f} ± {spread:.4f}"

    return {"map": mean_std("map"), "ndcg@10": mean_std("ndcg@10"), "runs": len(runs)}


SIDES = ("vs_teacher", "vs_labels")  # the table's interval columns: against whom


def interval(result) -> str:
    return f"{result.mean:+.4f} [{result.low:+.4f}, {result.high:+.4f}] {result.verdict}"


def table(plan: Plan, rows: list[dict], command: str, reduced: str) -> str:
    lines = [
        "# Distilled students (docs/objectives/distill.md)",
        "",
        f"Command: `{command}`",
        "",
        f"Seeds {plan.seeds}, folds {plan.folds}; (α, τ) grid α ∈ {plan.alphas}, "
        f"τ ∈ {plan.temperatures}, chosen on mean validation MAP of seed {plan.seeds[0]}. "
        "Distilled = listwise KD mixed with ListNet on the labels (weight α); label-only = "
        "the same student with loss=listnet (a tree student: student.alpha=1, the teacher's "
        "weight 0). Intervals: 95% paired bootstrap of per-query AP and NDCG@10 (mean over seeds), "
        "distilled minus the other row. Tree students (lightgbm, xgboost: "
        "experiment=distill/tree_student, the same objective as the neural students' as the "
        "booster's custom objective) run one seed: with conf/student/'s settings (no bagging, "
        "no row or feature sampling) a booster has no randomness and gives the same trees for "
        "every seed; their ± is over folds only.",
        "",
    ]
    if reduced:
        lines += [f"Reduced: {reduced}", ""]
    lines += [
        "| data | student | seeds | teacher | chosen (α, τ) | teacher MAP | label-only MAP | "
        "distilled MAP | distilled NDCG@10 | distilled − teacher (AP) | distilled − teacher "
        "(NDCG@10) | distilled − label-only (AP) | distilled − label-only (NDCG@10) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['dataset']} | {row['student']} | "
            f"{' '.join(str(seed) for seed in row['seeds'])} | {row['teacher']} | "
            f"({row['chosen']['alpha']:g}, {row['chosen']['temperature']:g}) | "
            f"{row['teacher_map']:.4f} | {row['labels']['map']} | {row['distilled']['map']} | "
            f"{row['distilled']['ndcg@10']} | "
            + " | ".join(interval(row[side][m]) for side in SIDES for m in INTERVAL_METRICS)
            + " |"
        )
    lines += ["", "Validation MAP of the grid (first seed, mean over folds):", ""]
    for row in rows:
        grid = ", ".join(f"{k}: {v:.4f}" for k, v in row["grid_val_map"].items())
        lines.append(f"- {row['dataset']} {row['student']} from {row['teacher']}: {grid}")
    lines += ["", "Against the teacher on MQ2008 (the issue's criterion):", ""]
    for row in rows:
        if row["dataset"] != "mq2008" or row["student"] == "linear":
            continue
        result = row["vs_teacher"]["map"]
        if result.low <= 0 <= result.high:
            verdict = "within its paired interval of the teacher (the interval holds 0)"
        else:
            gap = result.high if result.high < 0 else result.low
            verdict = f"not within: the interval misses 0 by {abs(gap):.4f} AP"
        lines.append(f"- {STUDENT_NAMES[row['student']]} from {row['teacher']}: {verdict}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", nargs="+", default=["mq2008", "lightgbm_rank"])
    parser.add_argument(
        "--students",
        nargs="+",
        default=[*NEURAL_STUDENTS, *TREE_STUDENTS],
        choices=[*NEURAL_STUDENTS, *TREE_STUDENTS],
    )
    parser.add_argument(
        "--teachers", nargs="+", default=["lightgbm", "ensemble"], choices=["lightgbm", "ensemble"]
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--folds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--alphas", nargs="+", type=float, default=[0.0, 0.5])
    parser.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 3.0])
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "distill")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reduced", default="", help="what this run left out, stated in the table")
    parser.add_argument("--tiny", action="store_true", help="synthetic data, one fold, 1 epoch")
    args = parser.parse_args()
    plan = Plan(["synthetic"] if args.tiny else args.datasets, args.students, args.teachers,
                args.seeds, [1] if args.tiny else args.folds, args.alphas, args.temperatures,
                args.runs, args.tiny)  # fmt: skip
    rows = [row for dataset in plan.datasets for row in run_dataset(plan, dataset)]
    letor_dir = os.environ.get("LETOR_DIR")
    command = ("" if letor_dir is None else f"LETOR_DIR={letor_dir} ") + shlex.join(
        ["python", "benchmarks/distill_results.py", *sys.argv[1:]]
    )
    measure.publish(table(plan, rows, command, args.reduced), args.out)


if __name__ == "__main__":
    main()
