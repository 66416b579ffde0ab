"""The robustness grid of Niu et al. (SIGIR 2025, "Investigating the Robustness of
Counterfactual Learning to Rank Models") on differank: production ranker strength × click model
× logged sessions × estimator, each cell's test NDCG@10 beside naive's with a paired interval.

    python benchmarks/ultr_grid.py --datasets mq2008 lightgbm_rank --seeds 0 1 2 \\
        --sessions 10 100 1000 --sessions-first-seed-only 1000 --baidu 100 --jobs 2 \\
        --out benchmarks/results/ultr_grid.md

One **unit** is (dataset, strength, click model, sessions, seed): ``task=simulate`` writes a
click log of ``sessions`` sessions per training query (the production ranker, trained with the
true labels on ``strength`` of the training queries, shows its top 10 of every query; the click
model clicks), then every estimator trains offline on that same log (``clicks.mode=offline``).
Every run of every level takes the same number of optimizer steps: an epoch is one pass over
the log in batches of 32 × ``sessions`` lists (MQ2008 Fold1: 15 steps an epoch at every level),
at most ``--max-epochs`` epochs (early stopping after 10 without a better validation MAP),
linear model, Adam lr 0.001; the epoch tested is the one with the best validation MAP on the
true labels (the semi-synthetic protocol's stated assumption). The estimators' rows are those
of ``benchmarks/ultr_results.py``: naive and IPS listwise (softmax, label-sum weighted), DLA
(softmax, conf/ultr/dla.yaml's defaults), regression EM and two-tower (pointwise, BCE), and
naive on BCE, the pointwise estimators' own lower bar. Doubly robust is not run: here every
training document was shown and the log's propensity serves as both its θ and its ρ, so DR's
label ``R̂ + (c − ρ R̂)/ρ`` is IPS's ``c/ρ`` up to rounding (a first unit gave the same NDCG@10
to 4 decimals; over 40 epochs the rounding can still move the chosen epoch).

A cell gives each estimator's test NDCG@10 (mean over seeds) and the paired bootstrap interval
(95 %, over the test queries, each query's value the mean over seeds:
``rankers/metrics/significance.py``) of its per-query NDCG@10 minus naive's on the same logs;
the pointwise estimators also against naive on BCE.
``--baidu`` adds rows that differ only in the PBM's examination curve: Baidu-ULTR's measured
one (``clicks.propensity=baidu``, 5 positions) beside ULTRA's eye-tracking curve cut to the same
5 positions.

Runs live in ``<runs>/<dataset>/<unit>/<estimator>``; a run whose ``test_metrics.json`` exists is
read, not run again, so an interrupted grid resumes and a later call with more seeds or levels
adds to it. Units run in ``--jobs`` worker processes of one torch thread each, seed by seed.
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import shutil
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import measure
from ultr_results import ROWS, Row, paired_difference

ROOT = Path(__file__).resolve().parents[1]
# doubly robust is not a column: it is IPS up to rounding in this protocol (module docstring)
ESTIMATORS = ("naive", "naive_bce", "ips", "dla", "rem", "twotower")
# the pointwise estimators, also compared with naive on their own loss (naive_bce)
POINTWISE = ("rem", "twotower")
CLICK_MODELS = ("pbm", "dcm", "cbcm")
BASE_BATCH = 32  # lists per step at one session per query (data.batch_size's default)
# ultr_results' rows, with DLA at conf/ultr/dla.yaml's propensity learning rate (lr_scale 5)
GRID_ROWS = {**ROWS, "dla": Row("DLA", ("ultr=dla", "loss=softmax"))}
DATASETS = {"mq2008": ("data=mq2008", "data.fold=1"), "lightgbm_rank": ("data=lightgbm_rank",)}


@dataclass(frozen=True)
class Unit:
    """One click log and the estimators trained on it."""

    dataset: str
    strength: float
    clicks: str
    sessions: int  # sessions per training query
    seed: int
    propensity: str | None = None  # --baidu rows: the PBM's examination curve (5 positions)

    @property
    def cell(self) -> tuple:
        """The grid cell (everything but the seed)."""
        return (self.dataset, self.propensity or "", self.strength, self.clicks, self.sessions)

    @property
    def folder(self) -> str:
        curve = f"_{self.propensity}" if self.propensity else ""
        return f"{self.clicks}{curve}_p{self.strength:g}_s{self.sessions}_seed{self.seed}"

    def click_overrides(self) -> list[str]:
        overrides = [f"clicks={self.clicks}", f"clicks.production.fraction={self.strength}"]
        if self.propensity:
            overrides += [f"clicks.propensity={self.propensity}", "clicks.top_k=5"]
        return overrides


def common(unit: Unit) -> list[str]:
    return [
        *DATASETS[unit.dataset],
        *unit.click_overrides(),
        f"seed={unit.seed}",
        "quiet=true",
        "logger=csv",
    ]


def run_unit(unit: Unit, runs: Path, max_epochs: int) -> Path:
    """Simulate the unit's log (unless written) and train every estimator on it (unless done)."""
    import torch

    import differank

    torch.set_num_threads(1)
    where = runs / unit.dataset / unit.folder
    log = where / "clicks.npz"
    if not log.is_file():
        simulate = ["task=simulate", f"clicks.sessions_per_query={unit.sessions}"]
        differank.run([*common(unit), *simulate, f"clicks.log={log}"], output_dir=where / "sim")
    for name in ESTIMATORS:
        folder = where / name
        if (folder / "test_metrics.json").is_file():
            continue
        if folder.is_dir():  # an interrupted run (this script's own folder): redone from empty
            shutil.rmtree(folder)
        training = [
            "clicks.mode=offline",
            f"clicks.log={log}",
            f"data.batch_size={BASE_BATCH * unit.sessions}",
            f"trainer.max_epochs={max_epochs}",
            "model.optimizer.lr=0.001",
        ]
        differank.run([*common(unit), *training, *GRID_ROWS[name].overrides], output_dir=folder)
    return where


def result(folder: Path, fold: int) -> dict:
    metrics = json.loads((folder / "test_metrics.json").read_text())
    return {"fold": fold, "folder": folder, "ndcg@10": metrics["ndcg@10"]}


def cell_line(units: list[Unit], runs: Path, verdicts: collections.Counter) -> str | None:
    """One table line (the cell's settings, runs, naive's NDCG@10 and each estimator's), its
    verdicts against naive added to ``verdicts`` as (estimator, verdict)."""
    found = {name: [] for name in ESTIMATORS}
    for unit in units:
        for name in ESTIMATORS:
            folder = runs / unit.dataset / unit.folder / name
            if (folder / "test_metrics.json").is_file():
                found[name].append(result(folder, 1))
    if not found["naive"]:
        return None
    first = units[0]
    curve = first.propensity or ("eye tracking, 10 positions" if first.clicks == "pbm" else "")
    cells = [f"{first.strength:g}", first.clicks + (f" ({curve})" if curve else "")]
    cells += [f"{first.sessions}×", str(len(found["naive"]))]
    cells.append(f"{statistics.fmean(r['ndcg@10'] for r in found['naive']):.4f}")
    for name in ESTIMATORS[1:]:
        runs_of = found[name]
        if len(runs_of) != len(found["naive"]):
            cells.append("(incomplete)")
            continue
        mean = statistics.fmean(r["ndcg@10"] for r in runs_of)
        against = paired_difference(runs_of, found["naive"], "ndcg@10")
        if first.propensity is None:  # the grid's own cells (not the --baidu rows)
            verdicts[name, (first.strength, first.sessions), against.rsplit(" ", 1)[1]] += 1
        text = f"{mean:.4f}<br>{against}"
        if name in POINTWISE and len(found["naive_bce"]) == len(runs_of):
            same_loss = paired_difference(runs_of, found["naive_bce"], "ndcg@10")
            text += f"<br>vs naive BCE: {same_loss}"
        cells.append(text)
    return "| " + " | ".join(cells) + " |"


def table(units: list[Unit], runs: Path) -> tuple[list[str], collections.Counter]:
    header = ["production (share of queries)", "click model", "sessions / query", "seeds"]
    titles = [GRID_ROWS[name].title.split(" (")[0] for name in ESTIMATORS[1:]]
    header += ["naive NDCG@10", *(f"{title}: NDCG@10, Δ vs naive" for title in titles)]
    cells: dict[tuple, list[Unit]] = {}
    for unit in units:
        cells.setdefault(unit.cell, []).append(unit)
    verdicts: collections.Counter = collections.Counter()
    lines = [cell_line(group, runs, verdicts) for group in cells.values()]
    lines = [line for line in lines if line is not None]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *lines], verdicts


def verdict_table(verdicts: collections.Counter, axis: int, levels: list, title: str) -> list[str]:
    """Per estimator and level of one grid axis (``axis`` 0: production strength, 1: sessions
    per query): in how many cells it is better than naive, indistinguishable, worse."""
    header = ["estimator", *(f"{title} {level:g}" for level in levels), "all"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    outcomes = ("better", "indistinguishable", "worse")
    for name in ESTIMATORS[1:]:
        cells = []
        for chosen in (*([level] for level in levels), levels):
            counts = [
                sum(
                    n
                    for (e, cell, v), n in verdicts.items()
                    if e == name and v == outcome and cell[axis] in chosen
                )
                for outcome in outcomes
            ]
            cells.append(" / ".join(map(str, counts)))
        lines.append(f"| {GRID_ROWS[name].title} | " + " | ".join(cells) + " |")
    return lines


def units_of(args) -> list[Unit]:
    """Seed by seed (so an interrupted grid has whole seeds), the largest logs of a seed last."""
    units = []
    for seed in args.seeds:
        for dataset in args.datasets:
            for sessions in args.sessions:
                if sessions in args.sessions_first_seed_only and seed != args.seeds[0]:
                    continue
                for strength in args.strengths:
                    for clicks in args.click_models:
                        units.append(Unit(dataset, strength, clicks, sessions, seed))
            if args.baidu and dataset == args.datasets[0]:
                for curve in ("eye_tracking", "baidu"):
                    units.append(Unit(dataset, 0.01, "pbm", args.baidu, seed, propensity=curve))
    # every seed of the smaller logs before the levels that run for the first seed only
    return sorted(units, key=lambda unit: unit.sessions in args.sessions_first_seed_only)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--strengths", nargs="+", type=float, default=[0.001, 0.01, 0.1])
    parser.add_argument("--click-models", nargs="+", choices=CLICK_MODELS, default=CLICK_MODELS)
    parser.add_argument("--sessions", nargs="+", type=int, default=[10, 100, 1000])
    parser.add_argument(
        "--sessions-first-seed-only",
        nargs="*",
        type=int,
        default=[],
        help="session levels run for the first seed only (a stated reduction)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--baidu",
        type=int,
        default=None,
        metavar="SESSIONS",
        help="add the PBM rows with Baidu's examination curve and the eye-tracking one (5 "
        "positions), at production share 0.01 and SESSIONS per query, on the first dataset",
    )
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "ultr_grid")
    parser.add_argument("--scope", default=None, help="how the grid was reduced (into the file)")
    parser.add_argument(
        "--table-only", action="store_true", help="write the table of the runs done"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    units = units_of(args)
    if not args.table_only:
        with ProcessPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_unit, u, args.runs, args.max_epochs) for u in units]
            for future in futures:
                print("done", future.result(), flush=True)
    command = "python benchmarks/ultr_grid.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    sections = [
        "# The robustness grid (Niu et al., SIGIR 2025) on differank",
        "",
        f"Command: `{command}`",
        "",
        *([f"Reduced scope: {args.scope}", ""] if args.scope else []),
        "benchmarks/ultr_grid.py's docstring says what a unit runs. Each cell: the estimator's "
        "test NDCG@10 (true labels, LETOR 4.0 rules; mean over the seeds column) and its "
        "per-query NDCG@10 minus naive's on the same click logs, mean [95 % paired bootstrap "
        "interval] and verdict. Production: the share of the training queries its linear "
        "ranker was trained on (its strength). Sessions: logged sessions per training query.",
        "",
    ]
    for dataset in args.datasets:
        lines, verdicts = table([u for u in units if u.dataset == dataset], args.runs)
        counts = "Cells by verdict against naive (better / indistinguishable / worse)"
        sections += [f"## {dataset}", "", *lines, "", counts + ", by production and sessions:"]
        sections += [""]
        sections += [*verdict_table(verdicts, 0, args.strengths, "production"), ""]
        sections += [*verdict_table(verdicts, 1, args.sessions, "sessions ×"), ""]
    measure.publish("\n".join(sections), args.out)


if __name__ == "__main__":
    main()
