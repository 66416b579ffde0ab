"""Run configurations (and peers) on every fold of a LETOR dataset; write the tables and a plot.

    python benchmarks/reproduce.py --suite mq2008 --jobs 2 --out benchmarks/results/mq2008.md
    python benchmarks/reproduce.py --suite seeds --jobs 2        # the four objectives' timing
    python benchmarks/reproduce.py --experiment domination_layered
    python benchmarks/reproduce.py --experiment hinge_paper --sweep loss.k=1,2,3,4,5,6,7,8,9,10
    python benchmarks/reproduce.py --overrides model=linear loss=domination --folds 1 2
    python benchmarks/reproduce.py --experiment conerank_paper_sg --peers lightgbm --out x.md

Each (configuration, fold) is one ``differank`` run (model selection on the validation split,
test metrics from the written prediction file by docs/metrics.md#the-letor-script-rules) in
``<runs>/<name>/foldN``; each peer
(``benchmarks/peers.py``) writes and scores a prediction file the same way. Without ``data=...``
among the overrides the data is ``mq2008``. ``--sweep KEY=A,B,...`` (Hydra's sweep syntax, as in
``differank -m``) turns each configuration into one row per value (per combination, for several
keys), named ``<name>_KEY=VALUE``: the structured hinge's per-k curve is the example above.
The output is a summary table (mean ± std over folds of MAP, MeanNDCG, NDCG@1/3/5/10, P@1/5/10
and seconds per fold), the per-fold tables, the papers' published MQ2008 numbers
(``benchmarks/papers.py``) and a bar plot (PNG, matplotlib).
Suites (``SUITES``): ``mq2008`` (baselines, every seed objective's paper and best settings, and
the peers unless ``--no-peers``), ``mq2008-fast`` (the same without the paper's ConeRank rows, the
slowest runs), ``seeds`` (the four objectives' best settings), ``cone-cost`` (ConeRank's and
the domination loss's defaults, for their cost ratio), ``tiny`` (CI smoke). ``--experiment``
takes the names of ``conf/experiment/*.yaml``. Times: "s / fold" is the wall time of a run,
"CPU s / fold" its CPU time (one thread; what an idle core would take). The markdown ends with
the run's provenance (commit, torch, threads, device: ``benchmarks/measure.py``); the JSON
holds it under ``"meta"``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import measure

import differank
from differank.rankers.run.runs import compose_config

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "conf" / "experiment"

COLUMNS = ["map", "mean_ndcg", "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "p@1", "p@5", "p@10"]
HEADERS = ["MAP", "MeanNDCG", "NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "P@1", "P@5", "P@10"]
TARGETS = {"map": 0.480, "mean_ndcg": 0.490}  # the MQ2008 targets the best row is held to (README)
PEER_NAMES = ("lightgbm", "xgboost", "ranksvm")  # benchmarks/peers.py


@dataclass
class Config:
    """One row of the table: a differank run (overrides) or a peer (``peer`` names it)."""

    name: str
    overrides: list[str] = field(default_factory=list)
    peer: str | None = None

    @property
    def kind(self) -> str:
        return "peer" if self.peer else "ours"


def experiment(name: str, row: str | None = None) -> Config:
    """``experiment=name``, its row named ``row`` (default: the name)."""
    return Config(row or name, [f"experiment={name}"])


def baseline(loss: str) -> Config:
    return Config(loss, ["model=linear", f"loss={loss}"])


# The MQ2008 suite: the seed objectives' paper and hand-tuned settings, the baselines. Rows keep
# the names of the published tables (benchmarks/results/mq2008.md) where an experiment was
# renamed: conerank_tuned is protocol/cone_conerank, convex_best convex_auc_pairs, hinge_k10
# hinge_paper (the same composed settings). "mq2008-fast" is the same table without the paper's
# ConeRank rows (the slowest runs).
_PAPER_CONE = [experiment("conerank_paper_sg"), experiment("conerank_paper_eg")]
_MQ2008 = [
    baseline("ranknet"),
    baseline("listnet"),
    experiment("protocol/cone_conerank", "conerank_tuned"),
    experiment("domination_layered"),
    experiment("domination_flat"),
    experiment("domination_margin"),
    experiment("domination_cd"),
    experiment("convex_paper"),
    experiment("convex_auc_pairs", "convex_best"),
    experiment("hinge_paper", "hinge_k10"),
    experiment("hinge_k10_cutting_plane"),
]
SUITES: dict[str, list[Config]] = {
    "mq2008": _MQ2008[:2] + _PAPER_CONE + _MQ2008[2:],
    "mq2008-fast": _MQ2008,
    # The four seed objectives' hand-tuned settings: the "< 5 minutes on 2 cores" timing.
    "seeds": [
        config
        for config in _MQ2008
        if config.name in ("conerank_tuned", "domination_layered", "convex_best", "hinge_k10")
    ],
    # ConeRank's cost against the domination loss's, defaults of both, measured in one run.
    "cone-cost": [baseline("domination"), Config("conerank", ["model=conerank", "loss=cone"])],
    # CI smoke suite: tiny synthetic data, one epoch (see --tiny).
    "tiny": [baseline("ranknet"), baseline("listnet")],
}
SUITE_PEERS = {
    "mq2008": list(PEER_NAMES),
    "mq2008-fast": list(PEER_NAMES),
    "seeds": [],
    "cone-cost": [],
    "tiny": ["ranksvm"],
}
TINY_OVERRIDES = [
    "data=synthetic",
    "data.n_train_queries=40",
    "data.n_val_queries=20",
    "data.n_test_queries=20",
    "trainer.max_epochs=1",
    "logger=csv",
]


def sweep_rows(configs: list[Config], sweep: list[str]) -> list[Config]:
    """Each configuration once per combination of the ``sweep`` overrides (``KEY=A,B,...``, any
    sweep Hydra's command line takes: ``range(1,11)``, ``choice(...)``), the values appended
    to its overrides and its name."""
    if not sweep:
        return configs
    from hydra.core.override_parser.overrides_parser import OverridesParser

    grid: list[list[str]] = [[]]
    for override in OverridesParser.create().parse_overrides(sweep):
        key = override.get_key_element()
        values = (
            list(override.sweep_string_iterator())
            if override.is_sweep_override()
            else [override.get_value_element_as_str()]
        )
        grid = [[*job, f"{key}={value}"] for job in grid for value in values]
    return [
        Config(" ".join([c.name, *job]), [*c.overrides, *job], c.peer)
        for c in configs
        for job in grid
    ]


def _data_overrides(overrides: list[str]) -> list[str]:
    return [] if any(o.startswith("data=") for o in overrides) else ["data=mq2008"]


def training_run(overrides: list[str], run_dir: Path) -> dict[str, float]:
    """One training run (``differank.run``: what ``differank OVERRIDES`` does) as a row: its
    test metrics and, under the name of ``monitor`` (``val/map``), the validation value its
    epoch was chosen on."""
    result = differank.run(overrides, output_dir=run_dir)
    return {result.monitor: result.best_validation, **result.test_metrics}


def run_one(config: Config, fold: int, out_root: Path, tiny: bool, threads: int | None) -> dict:
    """One (configuration, fold): a differank run or a peer. Returns the row (or an error)."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    run_dir = out_root / config.name / f"fold{fold}"
    cpu = time.process_time()
    overrides = [*_data_overrides(config.overrides), *config.overrides, f"++data.fold={fold}"]
    try:
        if config.peer:
            from hydra.utils import instantiate
            from peers import run_peer

            data_only = [o for o in overrides if o.lstrip("+~").startswith(("data", "seed"))]
            datamodule = instantiate(compose_config(data_only, run_dir=run_dir).data)
            run_dir.mkdir(parents=True, exist_ok=True)
            row = run_peer(config.peer, datamodule, run_dir, tiny=tiny)
            row.pop("settings", None)
            return {**row, "cpu_seconds": time.process_time() - cpu}
        start = time.perf_counter()
        metrics = training_run(overrides, run_dir)
        val_map = metrics.pop("val/map")  # the validation value the run's epoch was chosen on
        return {
            "fold": fold,
            **metrics,
            "val_map": val_map,
            "seconds": time.perf_counter() - start,
            "cpu_seconds": time.process_time() - cpu,
        }
    except Exception as error:  # one failing row must not sink a long suite
        traceback.print_exc()
        message = " ".join(f"{type(error).__name__}: {error}".split())
        return {"fold": fold, "error": message}


def _progress(config: Config, row: dict) -> None:
    if "error" in row:
        print(f"[reproduce] {config.name} fold {row['fold']}: failed: {row['error']}", flush=True)
    else:
        print(
            f"[reproduce] {config.name} fold {row['fold']}: MAP {row['map']:.4f}, "
            f"{row['seconds']:.0f} s ({row['cpu_seconds']:.0f} s CPU)",
            flush=True,
        )


def run_all(
    configs: list[Config], folds: list[int], out_root: Path, jobs: int, tiny: bool
) -> dict[str, list[dict]]:
    """Every (configuration, fold), ``jobs`` at a time (separate processes when jobs > 1)."""
    tasks = [(config, fold) for config in configs for fold in folds]
    if jobs <= 1:
        rows = []
        for config, fold in tasks:
            rows.append(run_one(config, fold, out_root, tiny, None))
            _progress(config, rows[-1])
    else:  # 2 shared cores, 4 MQ2008 runs of 30 epochs: --jobs 1 49-70 s, --jobs 2 26-49 s
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(run_one, c, f, out_root, tiny, 1): c for c, f in tasks}
            for future in as_completed(futures):
                _progress(futures[future], future.result())
            rows = [future.result() for future in futures]
    results: dict[str, list[dict]] = {config.name: [] for config in configs}
    for (config, _), row in zip(tasks, rows, strict=True):
        results[config.name].append(row)
    return results


def cpu_total(results: dict[str, list[dict]]) -> float:
    return sum(row.get("cpu_seconds", 0.0) for rows in results.values() for row in rows)


def _ok(rows: list[dict]) -> list[dict]:
    return [row for row in rows if "error" not in row]


def mean_std(rows: list[dict], key: str) -> tuple[float, float]:
    values = [row[key] for row in rows if key in row]  # rows of older runs may lack a key
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summary_table(configs: list[Config], results: dict[str, list[dict]]) -> str:
    """One row per configuration: mean ± std over folds, and seconds per fold."""
    header = ["configuration", "kind", *HEADERS, "val MAP", "s / fold", "CPU s / fold", "folds"]
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for config in configs:
        rows = _ok(results[config.name])
        if not rows:
            errors = "; ".join(r["error"] for r in results[config.name])[:120]
            lines.append(f"| {config.name} | {config.kind} | failed: {errors} |")
            continue
        cells = []
        for key in [*COLUMNS, "val_map", "seconds", "cpu_seconds"]:
            mean, std = mean_std(rows, key)
            if key.endswith("seconds") or key == "val_map":
                cells.append(f"{mean:.4f}" if key == "val_map" else f"{mean:.1f}")
            else:
                cells.append(f"{mean:.4f} ± {std:.4f}")
        folds = f"{len(rows)}/{len(results[config.name])}"
        lines.append(f"| {config.name} | {config.kind} | " + " | ".join(cells) + f" | {folds} |")
    return "\n".join(lines) + "\n"


def markdown_table(name: str, rows: list[dict]) -> str:
    """The per-fold table of one configuration, with mean and std rows."""
    header = ["fold", *HEADERS, "val MAP", "time (s)"]
    lines = [f"**{name}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys = [*COLUMNS, "val_map", "seconds"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['fold']} | failed: {row['error'][:200]} |")
            continue
        cells = [f"{row[key]:.4f}" if key != "seconds" else f"{row[key]:.1f}" for key in keys]
        lines.append(f"| {row['fold']} | " + " | ".join(cells) + " |")
    rows = _ok(rows)
    if rows:
        means = [statistics.fmean(row[key] for row in rows) for key in keys]
        lines.append(
            "| mean | " + " | ".join(f"{m:.4f}" for m in means[:-1]) + f" | {means[-1]:.1f} |"
        )
    if len(rows) > 1:
        stds = [statistics.stdev(row[key] for row in rows) for key in keys]
        lines.append(
            "| std | " + " | ".join(f"{s:.4f}" for s in stds[:-1]) + f" | {stds[-1]:.1f} |"
        )
    return "\n".join(lines) + "\n"


def target_note(configs: list[Config], results: dict[str, list[dict]]) -> str:
    """The best differank row (by test MAP, and by validation MAP: the honest pick) against the
    best peer row and the MQ2008 targets (TARGETS)."""

    def best(kind: str, by: str) -> tuple[str, float, float, float] | None:
        scored = [
            (
                c.name,
                *[mean_std(_ok(results[c.name]), k)[0] for k in ("map", "mean_ndcg", "val_map")],
            )
            for c in configs
            if c.kind == kind and _ok(results[c.name])
        ]
        index = 3 if by == "val_map" else 1
        return max(scored, key=lambda s: s[index]) if scored else None

    lines = []
    peer = best("peer", "map")
    for by, label in (("map", "test MAP"), ("val_map", "validation MAP")):
        ours = best("ours", by)
        if ours is None:
            return ""
        line = (
            f"Best differank row by {label}: {ours[0]} (test MAP {ours[1]:.4f}, MeanNDCG "
            f"{ours[2]:.4f}; val MAP {ours[3]:.4f}); vs targets MAP >= {TARGETS['map']:.3f}: "
            f"{ours[1] - TARGETS['map']:+.4f}, MeanNDCG >= {TARGETS['mean_ndcg']:.3f}: "
            f"{ours[2] - TARGETS['mean_ndcg']:+.4f}"
        )
        if peer is not None:
            line += (
                f"; vs the best peer {peer[0]} (MAP {peer[1]:.4f}, MeanNDCG {peer[2]:.4f}): "
                f"MAP {ours[1] - peer[1]:+.4f}, MeanNDCG {ours[2] - peer[2]:+.4f}"
            )
        lines.append(line + ".")
    lines.append(
        "Fold-to-fold std of MAP is ~0.04 (standard error of a 5-fold mean ~0.02): "
        "differences below ~0.01 between rows are within noise."
    )
    return "\n\n".join(lines) + "\n"


def bar_plot(
    configs: list[Config],
    results: dict[str, list[dict]],
    path: Path,
    reference: dict[str, dict[str, float]] | None = None,
) -> None:
    """MAP and MeanNDCG per row (error bars: standard error over folds, std / sqrt(folds));
    published rows in grey, the MQ2008 targets as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, kinds, stats = [], [], []
    for config in configs:
        rows = _ok(results[config.name])
        if rows:
            names.append(config.name)
            kinds.append(config.kind)
            stats.append(
                [(m, sd / len(rows) ** 0.5) for m, sd in (mean_std(rows, key) for key in TARGETS)]
            )
    for name, values in (reference or {}).items():
        names.append(name)
        kinds.append("paper")
        stats.append([(values[key], 0.0) for key in TARGETS])
    colors = {"ours": "tab:blue", "peer": "tab:orange", "paper": "lightgray"}
    figure, axes = plt.subplots(1, 2, figsize=(12, 0.35 * len(names) + 1.5), sharey=True)
    positions = list(range(len(names)))[::-1]
    for axis, (index, key) in zip(axes, enumerate(TARGETS), strict=True):
        axis.barh(
            positions,
            [s[index][0] for s in stats],
            color=[colors[k] for k in kinds],
            edgecolor="black",
            linewidth=0.4,
        )
        spread = [(y, *s[index]) for y, s in zip(positions, stats, strict=True) if s[index][1]]
        if spread:
            ys, xs, errors = zip(*spread, strict=True)
            axis.errorbar(xs, ys, xerr=errors, fmt="none", ecolor="black", capsize=3)
        for y, s in zip(positions, stats, strict=True):
            axis.text(
                s[index][0] + s[index][1] + 0.002, y, f"{s[index][0]:.3f}", va="center", fontsize=7
            )
        values = [s[index][0] for s in stats]
        axis.set_xlim(max(0.0, min(values) - 0.05), max(values) + 0.04)
        axis.axvline(TARGETS[key], color="tab:red", linestyle="--", linewidth=0.8)
        title = {"map": "MAP", "mean_ndcg": "MeanNDCG"}[key]
        axis.set_title(f"{title} (test, mean ± s.e. over folds)")
    axes[0].set_yticks(positions, names)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    figure.legend(handles, ["differank", "peer", "published"], loc="lower center", ncol=3)
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", choices=sorted(SUITES), help="a named list of configurations")
    parser.add_argument("--only", nargs="*", help="keep only these names of the suite")
    parser.add_argument("--experiment", nargs="*", default=[], help="conf/experiment names")
    parser.add_argument(
        "--overrides", nargs="*", default=[], help="extra Hydra overrides for every run"
    )
    parser.add_argument(
        "--sweep",
        nargs="*",
        default=[],
        metavar="KEY=A,B",
        help="one row per value (per combination) of each configuration, e.g. "
        "--experiment hinge_paper --sweep loss.k=1,2,3,4,5,6,7,8,9,10",
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        default=None,
        help="add peer rows (no names: the suite's peers, or without a suite all of lightgbm "
        "xgboost ranksvm); a suite adds its peers by default",
    )
    parser.add_argument("--no-peers", action="store_true", help="no peer rows")
    parser.add_argument("--folds", nargs="*", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="smoke mode: tiny synthetic data, fold 1, one epoch, small peers",
    )
    parser.add_argument("--out", type=Path, help="write the tables (markdown) here")
    parser.add_argument("--plot", type=Path, help="bar plot PNG (default: --out with .png)")
    parser.add_argument("--no-papers", action="store_true", help="leave out published numbers")
    parser.add_argument(
        "--include",
        nargs="*",
        type=Path,
        default=[],
        help="add the rows of earlier runs (their --out .json) to the table",
    )
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "reproduce")
    args = parser.parse_args(argv)

    from peers import PEERS, available

    unknown = [name for name in args.experiment if not (EXPERIMENTS / f"{name}.yaml").is_file()]
    if unknown:
        known = " ".join(
            sorted(
                p.relative_to(EXPERIMENTS).with_suffix("").as_posix()
                for p in EXPERIMENTS.rglob("*.yaml")
            )
        )
        parser.error(f"no conf/experiment/<name>.yaml for {unknown}; choose from: {known}")
    configs = list(SUITES[args.suite]) if args.suite else []
    if args.only is not None:
        configs = [c for c in configs if c.name in args.only]
    configs += [experiment(name) for name in args.experiment]
    if not configs and (args.overrides or (args.peers is None and not args.include)):
        configs = [Config(" ".join(args.overrides) or "defaults")]  # the --overrides row
    configs = sweep_rows(configs, args.sweep)
    extra = [*TINY_OVERRIDES, *args.overrides] if args.tiny else args.overrides
    configs = [
        Config(c.name.replace(" ", "_").replace("/", "-"), [*c.overrides, *extra]) for c in configs
    ]
    peers = args.peers
    if peers is None and args.suite:
        peers = SUITE_PEERS[args.suite]
    elif peers is not None and not peers:
        peers = SUITE_PEERS.get(args.suite, list(PEERS))
    if args.no_peers:
        peers = []
    for peer in peers or []:
        if peer not in PEERS:
            parser.error(f"unknown peer {peer!r}; choose from {PEERS}")
        if available(peer):
            configs.append(Config(f"peer_{peer}", list(extra), peer=peer))
    folds = [1] if args.tiny else args.folds

    mq2008 = not any(o.startswith("data=") and o != "data=mq2008" for o in extra)
    start = time.perf_counter()
    ran = list(configs)
    results = run_all(configs, folds, args.runs, args.jobs, args.tiny)
    wall = time.perf_counter() - start
    for path in args.include:  # rows of earlier runs; a configuration run now takes precedence
        earlier = json.loads(path.read_text())
        earlier.pop("meta", None)  # the provenance of that run, not a row
        for name, rows in earlier.items():
            if name not in results:
                configs.append(Config(name, peer=name[5:] if name.startswith("peer_") else None))
                results[name] = rows

    reference = None
    parts = [
        "## Summary (test split, mean ± std over folds; selection on validation MAP)",
        "",
        summary_table(configs, results),
        target_note(configs, results) if mq2008 else "",
        f"Wall time: {wall:.0f} s for {len(ran)} configurations × {len(folds)} folds "
        f"with --jobs {args.jobs}; CPU time of the runs {cpu_total(results):.0f} s "
        f"(one thread each; on an idle machine, wall ≈ CPU / jobs)."
        if ran
        else f"Rows from {', '.join(str(p) for p in args.include)} (CPU time of those runs "
        f"{cpu_total(results):.0f} s).",
        "",
    ]
    if mq2008 and not args.no_papers:
        from papers import CONERANK_TABLE1_MQ2008, mq2008_reference, table

        reference = mq2008_reference()
        parts += [
            "## Published (MQ2008)",
            "",
            table(**{k: CONERANK_TABLE1_MQ2008[k] for k in ("source", "columns", "rows")}),
        ]
    parts += ["## Per fold", ""] + [markdown_table(c.name, results[c.name]) for c in configs]
    meta = measure.run_metadata()
    if args.jobs > 1:
        meta["threads"] = 1  # each run's process (run_all), not this one
    parts.append(measure.metadata_line(meta))
    text = "\n".join(parts)
    print(text, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        record = {**results, "meta": meta}
        (args.out.with_suffix(".json")).write_text(json.dumps(record, indent=1) + "\n")
    plot = args.plot or (args.out.with_suffix(".png") if args.out else None)
    if plot and any(_ok(rows) for rows in results.values()):
        bar_plot(configs, results, plot, reference)
        print(f"plot: {plot}")


if __name__ == "__main__":
    main()
