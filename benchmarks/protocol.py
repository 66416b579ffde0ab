"""The selection protocol's published table: ``differank tune``'s protocol
(:mod:`differank.rankers.tuning`, docs/tuning.md) with this benchmark's profiles, on MQ2008 and
any further dataset.

    python benchmarks/protocol.py --jobs 2 --out benchmarks/results/protocol.md
    python benchmarks/protocol.py --datasets mq2008 lightgbm_rank --jobs 2 --out ...
    python benchmarks/protocol.py --profile smoke --out /tmp/smoke.md   # tests: tiny data
    python benchmarks/protocol.py --plot-only --out benchmarks/results/protocol.md
        # redraws the forest plot protocol.png from protocol.json

For each row (an objective on a scorer, or a reference) of the first dataset: search on
validation (Optuna TPE, trial 0 = the defaults, mean validation MAP over the folds), seeds,
paired intervals against LightGBM, the greedy ensemble, the validation-chosen row
(rankers/tuning/: search.py, selection.py, report.py). Every further dataset (``--datasets``)
is never searched: each row's setting chosen on the first dataset is trained there with the
same seeds, so its rows test whether the choices generalise. A dataset is a ``conf/data`` name
(``mq2008``, ``lightgbm_rank``) or ``NAME=DIR`` for any LETOR folder (``data=letor
data.root=DIR``). Runs are cached under ``--runs``. Profiles (:data:`PROFILES`): ``full`` (the
published table: a fixed number of trials per row, no time budget) and ``smoke`` (tiny
synthetic data, two rows and LightGBM, for the tests; ``differank tune`` runs the same with
:data:`SMOKE_TUNE`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

import measure
from reproduce import TINY_OVERRIDES

from differank.rankers.tuning.figure import forest_plot
from differank.rankers.tuning.report import REFERENCE_PEER
from differank.rankers.tuning.search import Profile
from differank.rankers.tuning.space import ALL_ROWS, Row
from differank.rankers.tuning.trials import Dataset
from differank.rankers.tuning.tune import run_selection, write_record

ROOT = Path(__file__).resolve().parents[1]

PROFILES = {
    "full": Profile(
        trials={"linear": 8, "conerank": 8, "transformer": 4, "peer": 8},
        seeds=3,
        folds=(1, 2, 3, 4, 5),
        rows=ALL_ROWS,
    ),
    "smoke": Profile(
        trials={"linear": 2, "peer": 2},
        seeds=2,
        folds=(1,),  # the synthetic data has one fold
        rows=(Row("ranknet"), Row("listnet"), Row("lightgbm", peer="lightgbm")),
        extra=(*TINY_OVERRIDES, "data.seed=0"),  # one synthetic data set for every seed
        tiny=True,
    ),
}
# The smoke profile as `differank tune` overrides (tests/rankers/tuning/test_tune.py).
SMOKE_TUNE = (
    *TINY_OVERRIDES,
    "data.seed=0",
    "tune.rows=[lightgbm,ranknet/linear,listnet/linear]",
    "tune.trials=2",
    "tune.seeds=2",
    "tune.folds=[1]",
    "tune.tiny=true",
)


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

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    profile = PROFILES[args.profile]
    if args.profile == "smoke":
        args.datasets = [name for name in args.datasets if name != "mq2008"] or ["synthetic"]
    datasets = [Dataset.parse(text) for text in args.datasets]
    rows = tuple(r for r in profile.rows if args.only is None or r.name in args.only)
    profile = dataclasses.replace(profile, rows=rows)
    selection = run_selection(
        profile, datasets, args.runs, args.jobs, None, args.write_experiments, args.out
    )

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
    parts += selection.sections
    measure.publish("\n".join(parts), args.out)
    if args.out:
        write_record(selection.record, args.out)


if __name__ == "__main__":
    main()
