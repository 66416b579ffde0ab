"""The tuning report: each dataset's table (validation and test figures per row, paired
intervals against the reference, the ensemble, the validation-chosen row), what was searched
(trials per row, marked when fewer than the reference's or past the budget), and each chosen
setting as a ``conf/experiment`` file. The validation figure is the tune's signal
(rankers/tuning/signal.py): validation MAP, or a click monitor.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import yaml

from differank.rankers.metrics.significance import PairedInterval
from differank.rankers.tuning.search import RowResult
from differank.rankers.tuning.selection import Split, mean_std, paired_against
from differank.rankers.tuning.signal import LABELS, Signal
from differank.rankers.tuning.space import row_space
from differank.rankers.tuning.trials import Dataset

REFERENCE_PEER = "lightgbm"  # the row every paired interval is taken against
PAIRED_KEYS = {"map": "AP", "ndcg@10": "NDCG@10"}  # per-query metrics the intervals compare
VERDICTS = ("better", "indistinguishable", "worse")


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
    name: str, results: list[RowResult], ensemble, test: dict[int, Split], signal: Signal = LABELS
) -> tuple[str, dict]:
    """The dataset's table (markdown) and its record (JSON). ``ensemble``: what
    :func:`~differank.rankers.tuning.selection.select_ensemble` returned, None when there is
    none (a click-chosen tune). The record's ``validation_*`` are the signal's; a label-chosen
    tune keeps them as ``val_map_*`` too (their name before click selection)."""
    reference = next((r for r in results if r.row.peer == REFERENCE_PEER), None)
    paired_headers = [f"Δ {label} vs {REFERENCE_PEER} [95% CI]" for label in PAIRED_KEYS.values()]
    lines = [
        f"| row | chosen setting | {signal.label} | test MAP | MeanNDCG | NDCG@10 | "
        + " | ".join(paired_headers)
        + " | s / run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    record: dict[str, dict] = {}
    entries = [(r.row.name, _setting(r), r.seeds.get(name, [])) for r in results]
    failures = {r.row.name: r.failure for r in results if r.chosen is None}
    if ensemble is not None:
        counts, _, ensemble_runs = ensemble
        members = " + ".join(f"{c}×{n}" if c > 1 else n for n, c in counts.items())
        size = f"{len(counts)} member" + ("s" if len(counts) > 1 else "")
        entries.append((f"ensemble ({size})", members, ensemble_runs))
    chosen_name, chosen_val = None, float("-inf")
    for row_name, setting, runs in entries:
        failed = [run for run in runs if "error" in run]
        if not runs or failed:
            error = failed[0]["error"][:200] if failed else failures.get(row_name, "not run")
            lines.append(f"| {row_name} | {setting} | failed: {error} ||||||||")
            continue
        keys = ("validation", "map", "mean_ndcg", "ndcg@10")
        cells = {key: mean_std(runs, key) for key in keys}
        paired = {}
        if reference is not None and reference.seeds.get(name) and row_name != reference.row.name:
            paired = {
                key: paired_against(runs, reference.seeds[name], test, key) for key in PAIRED_KEYS
            }
        deltas = [_interval(paired[key]) if paired else "-" for key in PAIRED_KEYS]
        seconds = statistics.fmean(run["seconds"] for run in runs) if "seconds" in runs[0] else 0
        lines.append(
            f"| {row_name} | {setting} | {cells['validation'][0]:.4f} | "
            + " | ".join(f"{m:.4f} ± {s:.4f}" for m, s in list(cells.values())[1:])
            + " | "
            + " | ".join(deltas)
            + f" | {seconds:.1f} |"
        )
        if not row_name.startswith("peer_") and cells["validation"][0] > chosen_val:
            chosen_name, chosen_val = row_name, cells["validation"][0]
        if not signal.clicks:
            cells["val_map"] = cells["validation"]
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
    if chosen_name is None:
        note = "No differank row finished: none is chosen (each row's error is in the table)."
        return "\n".join(lines) + "\n\n" + note + "\n", {"rows": record, "chosen": None}
    chosen = record[chosen_name]
    note = (
        f"Validation-chosen differank row: **{chosen_name}** ({signal.label} {chosen_val:.4f}, "
        f"test MAP {chosen['map_mean']:.4f})"
    )
    if chosen["paired"]:
        interval = chosen["paired"]["map"]
        note += (
            f"; per-query AP minus {REFERENCE_PEER}'s over {interval['queries']} queries: "
            f"{interval['mean']:+.4f} [{interval['low']:+.4f}, {interval['high']:+.4f}], "
            f"{interval['verdict']}"
        )
    note += "." if reference is None else f". {_verdict_counts(record)}"
    return "\n".join(lines) + "\n\n" + note + "\n", {"rows": record, "chosen": chosen_name}


def _verdict_counts(record: dict) -> str:
    """How many rows' intervals against the reference are better, indistinguishable, worse."""
    counts = {
        key: Counter(r["paired"][key]["verdict"] for r in record.values() if r["paired"])
        for key in PAIRED_KEYS
    }
    return (
        f"Against {REFERENCE_PEER} (a row is better or worse only when its interval excludes "
        "0): "
        + "; ".join(
            f"{label} " + ", ".join(f"{counts[key][v]} {v}" for v in VERDICTS)
            for key, label in PAIRED_KEYS.items()
        )
        + "."
    )


def _interval(interval: PairedInterval) -> str:
    """``+0.0012 [-0.0040, +0.0065]`` with its verdict in words when the interval excludes 0."""
    text = f"{interval.mean:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}]"
    return text if interval.verdict == "indistinguishable" else f"{text} {interval.verdict}"


def search_table(results: list[RowResult], signal: Signal = LABELS) -> str:
    """What was searched: per row, its trials (marked ``fewer than <reference>`` when the
    budget gave it fewer than the reference's, ``over budget`` when a trial or its seeds ended
    past its share), the default's value of ``signal`` first, failed trials named."""
    reference = next((r for r in results if r.row.peer == REFERENCE_PEER), None)
    label = signal.label
    lines = [
        f"| row | trials | seeds | default {label} | chosen {label} | chosen setting | notes |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for result in results:
        notes = []
        if reference is not None and len(result.trials) < len(reference.trials):
            notes.append(f"fewer trials than {REFERENCE_PEER} ({len(reference.trials)})")
        if result.over_budget:
            notes.append("over budget")
        notes += [f"trial {t.number} failed: {t.error[:200]}" for t in result.trials if t.error]
        default = result.trials[0].validation if result.trials else None
        chosen = result.chosen
        lines.append(
            f"| {result.row.name} | {len(result.trials)} | {result.seeds_run} | "
            f"{_number(default)} | {_number(chosen.validation if chosen else None)} | "
            f"{json.dumps(chosen.setting) if chosen else '-'} | {'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def write_experiment(result: RowResult, dataset: Dataset, folder: Path, table: Path | None) -> Path:
    """The row's chosen setting as a ``conf/experiment`` file: its groups, then its keys."""
    chosen = result.chosen
    if chosen is None:
        raise ValueError(f"{result.row.name} has no chosen setting to write: {result.failure}")
    overrides = [*dataset.overrides, *row_space(result.row)[0]]
    groups = [o.split("=", 1) for o in overrides if "." not in o.split("=", 1)[0]]
    settings: dict = {}
    for key, value in chosen.setting.items():
        node = settings
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    trial = chosen.number
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
