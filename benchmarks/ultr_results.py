"""Unbiased learning to rank on MQ2008: the click estimators against naive (the lower bar) and
the full-information model (true labels, the upper bar), on the true test labels.

    python benchmarks/ultr_results.py --folds 1 2 3 4 5 --seeds 0 1 2 \\
        --out benchmarks/results/ultr_mq2008.md
    python benchmarks/ultr_results.py --clicks cascade --rows naive ips dla full --folds 1 \\
        --seeds 0 --out benchmarks/results/ultr_mq2008_cascade.md
    python benchmarks/ultr_results.py --select clicks labels --rows naive ips dla \\
        --out benchmarks/results/ultr_select_mq2008.md

Each (row, fold, seed) is one ``differank`` run (``differank.run``) in
``<runs>/<setting>/<row>/fold<F>_seed<S>``; a run whose ``test_metrics.json`` exists is read, not
run again, so an interrupted benchmark resumes. Click rows train on the semi-synthetic protocol
of ``conf/clicks/`` (a production ranker on 1 % of the training queries shows its top 10,
sessions sampled online every step; docs/objectives/unbiased.md); the full-information row
trains on the true labels. Every row uses the same model (linear), optimizer and epochs; the
epoch tested is the one with the best validation MAP on the **true labels** (train.py's default
monitor): a stated assumption of the semi-synthetic protocol, as in ULTRA's pipelines.

The table gives mean ± std over the (fold, seed) runs of MAP and NDCG@k on the true test labels
(LETOR 4.0 rules), and for every row the paired bootstrap interval (95 %, over the test queries
of all folds, each query's value the mean over seeds: ``rankers/metrics/significance.py``) of
its per-query AP and NDCG@10 minus naive's.

``--select clicks labels`` compares, per click row, the model chosen from clicks alone
(``ultr.select=clicks``: the epoch with the best IPS estimate of DCG@10 on held-out click
sessions of the validation queries, no validation label read; docs/clicks.md) with the one
chosen on the true validation labels: their test metrics and the paired interval of the
click-chosen model's per-query NDCG@10 and AP minus the label-chosen one's. Both runs of a pair
train on the same sessions from the same seed; only the monitor (and so the chosen epoch and
the early stop) differs. ``--select-metrics ips_dcg loglik`` adds, for the rows whose
estimator fits a click model (DLA, regression EM, two-tower), the model chosen by the held-out
clicks' log-likelihood (``ultr.select_metric=loglik``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import measure
import torch
from reproduce import training_run

from differank.datamodules.atomic_files import write_file
from differank.rankers.metrics.evaluate import per_query_metrics
from differank.rankers.metrics.significance import paired_bootstrap

ROOT = Path(__file__).resolve().parents[1]

METRICS = ("map", "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10")
PAIRED = {"map": "AP", "ndcg@10": "NDCG@10"}


@dataclass(frozen=True)
class Row:
    """One estimator as ``train.py`` overrides; ``clicks=False``: trained on the true labels."""

    title: str
    overrides: tuple[str, ...]
    clicks: bool = True


# the listwise rows use softmax_loss label-sum weighted: ULTRA's form, linear in the labels
LISTWISE = ("loss=softmax", "ultr.label_sum_weighting=true")
ROWS = {
    "full": Row("full information (true labels)", ("loss=softmax",), clicks=False),
    "naive": Row("naive (clicks as labels)", ("ultr=naive", *LISTWISE)),
    "ips": Row("IPS (the click model's true propensities, clip 100)", ("ultr=ips", *LISTWISE)),
    "dla": Row("DLA, propensity lr × 1", ("ultr=dla", "loss=softmax", "++ultr.lr_scale=1")),
    # the propensity logits at 50 × the ranker's learning rate: a few hundred steps of lr 0.001
    # move them by tenths, while log θ_k/θ_0 spans about 5 at η = 2 (chosen before any result)
    "dla_lr50": Row("DLA, propensity lr × 50", ("ultr=dla", "loss=softmax", "++ultr.lr_scale=50")),
    # the pointwise rows' own lower bar: naive on the same loss
    "naive_bce": Row("naive, loss=bce", ("ultr=naive", "loss=bce")),
    "rem": Row("regression EM", ("ultr=rem", "loss=bce")),
    "pairwise": Row("pairwise debiasing", ("ultr=pairwise", "loss=ranknet")),
    "twotower": Row("two-tower (additive bias)", ("ultr=twotower", "loss=bce")),
    "dr": Row("doubly robust", ("ultr=dr", *LISTWISE)),
}


DLA_NOTE = (
    "How the DLA rows came about: the row with the propensity logits at the ranker's learning "
    "rate (× 1, the first one run) stayed next to naive on the first folds; its learned "
    "propensities (below) show why: in 40 epochs of about 8 steps at lr 0.001 the logits move "
    "by tenths while log θ_k/θ_0 spans about 5 at η = 2. The × 50 row was then added, with "
    "that one value only (the learning rate DLA's unit test converges with), not searched; "
    "conf/ultr/dla.yaml now defaults to lr_scale 5 (0.05 at model=linear's lr 0.01)."
)


def click_overrides(clicks: str, eta: float) -> list[str]:
    """The ``clicks`` group's overrides of a setting (η for the models that have one)."""
    return [f"clicks={clicks}", *([f"clicks.eta={eta}"] if clicks in ("pbm", "trust") else [])]


# how a run chooses its epoch (--select), and from clicks by which metric (--select-metrics)
SELECTIONS = ("clicks", "labels")
SELECT_METRICS = ("ips_dcg", "loglik")
METRIC_MONITORS = {"ips_dcg": "val/click_dcg@10", "loglik": "val/click_loglik"}
# the estimators whose fitted click model gives the held-out clicks a likelihood
FITS_CLICK_MODEL = ("ultr=dla", "ultr=rem", "ultr=twotower")


def run(row: Row, fold: int, seed: int, common: list[str], folder: Path) -> dict:
    """One training run (or its earlier result): test metrics and the prediction files."""
    done = folder / "test_metrics.json"
    if not done.is_file():
        overrides = [*common, *row.overrides, f"data.fold={fold}", f"seed={seed}"]
        if not row.clicks:
            overrides = [o for o in overrides if not o.startswith("clicks")]
        training_run(overrides, folder)
    metrics = json.loads(done.read_text())
    # the tested checkpoint's epoch: the one its monitor chose
    epoch = torch.load(folder / "checkpoints" / "best.ckpt", weights_only=True)["epoch"]
    return {
        "fold": fold,
        "seed": seed,
        "folder": folder,
        "epoch": epoch,
        **{k: metrics[k] for k in METRICS},
    }


def per_query(runs: list[dict], key: str) -> dict[tuple[int, int], float]:
    """Per-query ``key`` of every (fold, qid) of the runs' test predictions, mean over seeds."""
    values: dict[tuple[int, int], list[float]] = {}
    for result in runs:
        predictions = result["folder"] / "predictions"
        sources = predictions.joinpath("test.sources").read_text().split()
        qids, metrics = per_query_metrics(sources, predictions / "test.txt")
        for qid, value in zip(qids, metrics[key].tolist(), strict=True):
            values.setdefault((result["fold"], qid), []).append(value)
    return {pair: statistics.fmean(seeds) for pair, seeds in values.items()}


def paired_difference(runs: list[dict], reference: list[dict], key: str) -> str:
    """``mean [low, high]`` of the per-query difference to ``reference``'s runs (95 % paired
    bootstrap)."""
    ours, theirs = per_query(runs, key), per_query(reference, key)
    pairs = sorted(ours.keys() & theirs.keys())
    interval = paired_bootstrap(
        torch.tensor([ours[p] for p in pairs]), torch.tensor([theirs[p] for p in pairs])
    )
    return f"{interval.mean:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}] {interval.verdict}"


def table(results: dict[str, list[dict]]) -> str:
    header = ["row", "runs", *METRICS, *(f"Δ{name} vs naive (95 %)" for name in PAIRED.values())]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, runs in results.items():
        cells = [ROWS[name].title, str(len(runs))]
        for key in METRICS:
            values = [r[key] for r in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.fmean(values):.4f} ± {spread:.4f}")
        for key in PAIRED:
            cells.append("—" if name == "naive" else paired_difference(runs, results["naive"], key))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mean_std(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4f} ± {spread:.4f}"


def selection_table(
    clicks: dict[tuple[str, int], dict[str, list[dict]]], labels: dict[str, list[dict]]
) -> str:
    """Per click row, click metric and number of held-out sessions per validation query: test
    NDCG@10 and MAP of the click-chosen and the label-chosen model, the mean epoch each chose,
    and the paired intervals of click-chosen minus label-chosen."""
    header = ["row", "chosen by", "held-out sessions / query", "runs"]
    header += ["NDCG@10 clicks", "NDCG@10 labels"]
    header += ["MAP clicks", "MAP labels", "epoch clicks", "epoch labels"]
    header += [f"Δ{name} clicks − labels (95 %)" for name in PAIRED.values()]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, reference in labels.items():
        for (metric, sessions), by_row in clicks.items():
            if name not in by_row:
                continue
            chosen = by_row[name]
            cells = [ROWS[name].title, METRIC_MONITORS[metric], str(sessions), str(len(chosen))]
            for key in ("ndcg@10", "map"):
                cells += [mean_std([r[key] for r in chosen]), mean_std([r[key] for r in reference])]
            for runs in (chosen, reference):
                cells.append(f"{statistics.fmean(r['epoch'] for r in runs):.1f}")
            cells += [paired_difference(chosen, reference, key) for key in PAIRED]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def learned_propensities(results: dict[str, list[dict]], clicks: str, eta: float) -> str:
    """A table of the propensities θ̂_k/θ̂_0 each DLA row learned (the tested checkpoint's
    logits, mean over its runs) beside the click model's true ratio (PBM: eye tracking^η)."""
    lines = []
    for name, runs in results.items():
        if "ultr=dla" not in ROWS[name].overrides:
            continue
        ratios = []
        for result in runs:
            weights = torch.load(result["folder"] / "checkpoints" / "best.ckpt", weights_only=True)[
                "state_dict"
            ]
            logits = weights["estimator.propensity_logits"].double()
            ratios.append((logits - logits[0]).exp())
        mean = torch.stack(ratios).mean(dim=0)
        lines.append(f"| {ROWS[name].title} | " + " | ".join(f"{v:.3f}" for v in mean) + " |")
    if not lines:
        return ""
    k = len(mean)
    if clicks == "pbm":
        from differank.datamodules.clicks.examination import examination_curve

        truth = examination_curve("eye_tracking", k, eta)
        lines.append("| true (PBM) | " + " | ".join(f"{v:.3f}" for v in truth / truth[0]) + " |")
    header = "| θ̂_k / θ̂_0 | " + " | ".join(f"k={i + 1}" for i in range(k)) + " |"
    return "\n".join([header, "|" + "---|" * (k + 1), *lines])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", nargs="+", choices=list(ROWS), default=["naive", "ips", "dla", "full"]
    )
    parser.add_argument(
        "--clicks", default="pbm", choices=["pbm", "cascade", "trust", "dcm", "ubm"]
    )
    parser.add_argument(
        "--eta", type=float, default=2.0, help="position-bias severity (pbm, trust)"
    )
    parser.add_argument("--folds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.001, help="Adam's learning rate, every row")
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "ultr_results")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--select",
        nargs="+",
        choices=list(SELECTIONS),
        default=None,
        help="compare how the epoch is chosen (clicks labels): per click row, the click-chosen "
        "model against the label-chosen one (the table of the module docstring)",
    )
    parser.add_argument(
        "--select-sessions",
        nargs="+",
        type=int,
        default=[10],
        help="--select: held-out sessions per validation query (ultr.select_sessions), one "
        "click-chosen run per count",
    )
    parser.add_argument(
        "--select-metrics",
        nargs="+",
        choices=SELECT_METRICS,
        default=["ips_dcg"],
        help="--select: the click metrics to choose by (ultr.select_metric); loglik for the rows "
        "whose estimator fits a click model",
    )
    parser.add_argument(
        "--scope",
        default=None,
        help="a sentence stating how the run was reduced, written into the results file",
    )
    args = parser.parse_args(argv)
    if args.select is not None:
        select(args, argv)
        return
    if "naive" not in args.rows:
        args.rows.insert(0, "naive")  # the intervals' reference
    setting, common = setting_name(args), common_overrides(args)
    results: dict[str, list[dict]] = {name: [] for name in args.rows}
    for fold in args.folds:  # fold by fold: an interrupted benchmark has whole folds to show
        for seed in args.seeds:
            for name in args.rows:
                folder = args.runs / setting / name / f"fold{fold}_seed{seed}"
                results[name].append(run(ROWS[name], fold, seed, common, folder))
    command = "python benchmarks/ultr_results.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    text = "\n".join(
        [
            f"# Unbiased learning to rank on MQ2008: {setting}",
            "",
            f"Command: `{command}`",
            "",
            f"Folds {args.folds}, seeds {args.seeds}, at most {args.max_epochs} epochs (early "
            f"stopping after 10 without a better validation MAP), linear model, Adam lr {args.lr}, "
            "the epoch with the best validation MAP on the true labels tested (a stated "
            "assumption). Mean ± std over the runs; Δ: per-query difference to naive, mean "
            "and 95 % paired bootstrap interval over the test queries of all folds (each "
            "query's value the mean over seeds). Rows: "
            + "; ".join(f"{name} = `{' '.join(ROWS[name].overrides)}`" for name in args.rows)
            + f"; clicks `{' '.join(click_overrides(args.clicks, args.eta))}`.",
            "",
            table(results),
            "",
            *([DLA_NOTE, ""] if "dla_lr50" in args.rows and "dla" in args.rows else []),
            "Propensities learned by the DLA rows (the tested epoch's, mean over runs):",
            "",
            learned_propensities(results, args.clicks, args.eta),
            "",
        ]
    )
    text += "\n" + measure.metadata_line(measure.run_metadata())
    print(text)
    if args.out is not None:
        write_file(args.out, text)


def setting_name(args) -> str:
    """The runs' folder of a setting: click model, η, learning rate, epochs."""
    setting = args.clicks + (f"_eta{args.eta:g}" if args.clicks in ("pbm", "trust") else "")
    return setting + f"_lr{args.lr:g}_e{args.max_epochs}"


def common_overrides(args) -> list[str]:
    """What every run of the benchmark shares (data, clicks, epochs, learning rate, logging)."""
    return [
        "data=mq2008",
        *click_overrides(args.clicks, args.eta),
        f"trainer.max_epochs={args.max_epochs}",
        f"model.optimizer.lr={args.lr}",
        "quiet=true",
        "logger=csv",
    ]


def select(args, argv: list[str] | None) -> None:
    """``--select``: every click row trained once per selection, the comparison table written
    with :func:`measure.publish`."""
    if set(args.select) != set(SELECTIONS):
        raise SystemExit(f"--select compares both choices: --select {' '.join(SELECTIONS)}")
    if not args.select_sessions or min(args.select_sessions) < 1:
        raise SystemExit("--select-sessions takes counts >= 1")
    rows = [name for name in args.rows if ROWS[name].clicks]
    setting, common = setting_name(args), common_overrides(args)
    labels: dict[str, list[dict]] = {name: [] for name in rows}
    choices = [(m, n) for m in args.select_metrics for n in args.select_sessions]
    clicks: dict[tuple[str, int], dict[str, list[dict]]] = {choice: {} for choice in choices}
    for fold in args.folds:
        for seed in args.seeds:
            for name in rows:
                runs = args.runs / setting
                where = f"fold{fold}_seed{seed}"
                # the label-chosen run is the ordinary one (its folder as without --select)
                labels[name].append(run(ROWS[name], fold, seed, common, runs / name / where))
                for metric, n in choices:
                    fits = any(o in ROWS[name].overrides for o in FITS_CLICK_MODEL)
                    if metric == "loglik" and not fits:
                        continue
                    options = ("ultr.select=clicks", f"ultr.select_sessions={n}")
                    options += (f"ultr.select_metric={metric}",)
                    row = Row(ROWS[name].title, (*ROWS[name].overrides, *options))
                    # the IPS-DCG runs keep the folder name they had before --select-metrics
                    suffix = "" if metric == "ips_dcg" else f"_{metric}"
                    folder = runs / f"{name}_select_clicks_s{n}{suffix}" / where
                    clicks[metric, n].setdefault(name, []).append(
                        run(row, fold, seed, common, folder)
                    )
    command = "python benchmarks/ultr_results.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    text = "\n".join(
        [
            f"# Choosing the model from clicks alone on MQ2008: {setting}",
            "",
            f"Command: `{command}`",
            "",
            *([f"Reduced scope: {args.scope}", ""] if args.scope else []),
            f"Folds {args.folds}, seeds {args.seeds}, at most {args.max_epochs} epochs (early "
            f"stopping after 10 without a better monitor), linear model, Adam lr {args.lr}; "
            f"clicks `{' '.join(click_overrides(args.clicks, args.eta))}`. Each row trains "
            "twice (or more) on the same sessions: **clicks** chooses the epoch by the monitor "
            "of the second column (`ultr.select=clicks`: `val/click_dcg@10` the IPS estimate of "
            "DCG@10, clipped as in training; `val/click_loglik` the held-out clicks' "
            "log-likelihood under the estimator's fitted click model), on the held-out "
            "sessions per validation query of the third column, no validation label "
            "read), **labels** by "
            "`val/map` on the true validation labels. Test metrics on the true test labels "
            "(LETOR 4.0 rules), mean ± std over the runs; epoch: the mean epoch tested (from "
            "0); Δ: per-query difference click-chosen minus label-chosen, mean and 95 % paired "
            "bootstrap interval over the test queries of all folds (each query's value the "
            "mean over seeds). Rows: "
            + "; ".join(f"{name} = `{' '.join(ROWS[name].overrides)}`" for name in rows)
            + ".",
            "",
            selection_table(clicks, labels),
        ]
    )
    measure.publish(text, args.out)


if __name__ == "__main__":
    main()
