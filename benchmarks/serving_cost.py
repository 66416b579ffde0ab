"""CPU cost of scoring 1,000 documents in every format differank serves: a checkpoint in
PyTorch eager, TorchScript and ONNX Runtime, and as Solr's and RankLib's models (their files
written by the package's own writers, scored by the engines' formulas in numpy,
``engine_formulas.py``); an ensemble in the three PyTorch runtimes; a tree student (or any
booster) through LightGBM's or XGBoost's own predict. The reference row is a LightGBM model's
own predict (a lambdarank model: what a search team would otherwise serve).

    python benchmarks/serving_cost.py --data mq2008 --fold 1 --threads 1 \\
        --checkpoint mlp_sigmoid=RUN/checkpoints/best.ckpt --ensemble teacher=DIR/ensemble.json \\
        --lightgbm lambdarank=DIR/lightgbm.txt --lightgbm student=STUDENT_RUN/student/model.txt \\
        --xgboost xgb_student=STUDENT_RUN2/student/model.json --reference lambdarank \\
        --out benchmarks/results/serving_cost.md

Separate from ``serving_latency.py``, which times padded batches of torch scorers at several list
lengths: here one call scores one list of ``--documents`` rows of raw features (the rows of
the dataset's test split, cycled; without ``--data``, uniform random values), every format
from the same rows, a numpy array for the numpy and booster scorers and one [1, N, F] tensor
for the torch ones. Before timing, every checkpoint format's scores are checked against eager
PyTorch's (RankLib's: ``sigmoid`` of them, RankNet's output neuron), so a row times a scorer
that gives the model's scores. Cells are timed interleaved (each round calls every row once,
in a rotating order), wall time, ``--threads`` threads for PyTorch, ONNX Runtime, LightGBM and
XGBoost alike (numpy's BLAS follows ``OMP_NUM_THREADS``), the load average printed beside the
table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import measure
import numpy as np
import torch
from engine_formulas import ranklib_scorer, solr_scorer
from serving_latency import ensemble_scorer, runners

from differank.rankers.checkpoints import load_ranker
from differank.rankers.run.ranklib import RANKNET, ranklib_model
from differank.rankers.run.solr import solr_model

RESULT = measure.ROOT / "benchmarks" / "results" / "serving_cost.md"
N_RANDOM_FEATURES = 46  # LETOR 4.0's, for the random rows without --data


def test_rows(data: str | None, fold: int, documents: int) -> np.ndarray:
    """[documents, F] float32 raw feature values: the test split's rows of ``data`` (cycled
    to ``documents``), or uniform random values without ``data``."""
    if data is None:
        return np.random.default_rng(0).random((documents, N_RANDOM_FEATURES), np.float32)
    from hydra.utils import instantiate

    from differank.rankers.run.runs import compose_config

    with tempfile.TemporaryDirectory() as scratch:
        cfg = compose_config([f"data={data}", f"data.fold={fold}"], run_dir=Path(scratch))
        module = instantiate(cfg.data, normalization="none", transform="none")
        features = np.asarray(module.split_data("test").features, np.float32)
    return features[np.arange(documents) % len(features)]


def torch_cells(name: str, scorer, rows: np.ndarray, folder: Path) -> dict[tuple, Callable]:
    """eager, TorchScript and ONNX Runtime of ``scorer`` on ``rows`` as one list."""
    features = torch.from_numpy(rows)[None]
    mask = torch.ones(features.shape[:2], dtype=torch.bool)
    return {
        (name, runtime): functools.partial(run, features, mask)
        for runtime, run in runners(scorer, folder, "cpu").items()
    }


def engine_cells(name: str, scorer, rows: np.ndarray, notes: list[str]) -> dict[tuple, Callable]:
    """Solr's and RankLib's formulas of ``scorer``'s written files; a format the writer refuses
    (RankLib: an MLP whose hidden layers are not sigmoid) is a note instead of a row."""
    cells = {}
    try:
        model = solr_model(scorer, name, None, store=name)
        cells[(name, "solr (numpy)")] = functools.partial(solr_scorer(model), rows)
    except ValueError as refusal:
        notes.append(f"{name}: no Solr model ({refusal})")
    try:
        text = ranklib_model(scorer)
        kind = text.split("\n", 1)[0].removeprefix("## ")  # RankNet or Linear Regression
        cells[(name, f"ranklib {kind} (numpy)")] = functools.partial(ranklib_scorer(text), rows)
    except ValueError as refusal:
        notes.append(f"{name}: no RankLib model ({refusal})")
    return cells


def scores_of(result) -> np.ndarray:
    """A cell's output as a flat float64 array (torch tensor, ONNX Runtime's list, numpy)."""
    if isinstance(result, list):
        result = result[0]
    if isinstance(result, torch.Tensor):
        result = result.detach().numpy()
    return np.asarray(result, np.float64).reshape(-1)


def check_parity(name: str, cells: dict[tuple, Callable]) -> None:
    """Every format of checkpoint ``name`` scores as eager PyTorch does (RankNet: sigmoid)."""
    eager = scores_of(cells[(name, "eager")]())
    for (model, runtime), call in cells.items():
        if model != name:
            continue
        # RankNet's output neuron is a sigmoid of differank's score (rankers/run/ranklib.py)
        expected = 1 / (1 + np.exp(-eager)) if runtime == f"ranklib {RANKNET} (numpy)" else eager
        got = scores_of(call())
        gap = float(np.max(np.abs(got - expected)))
        if gap > 1e-4 * max(1.0, float(np.max(np.abs(expected)))):
            raise AssertionError(
                f"{name} in {runtime} scores differ from eager PyTorch's by up to {gap:.2e}: "
                "this row would time a scorer that is not the model's"
            )


def booster_cells(kind: str, name: str, path: Path, rows: np.ndarray, threads: int) -> dict:
    """A LightGBM text model or an XGBoost JSON model scored by its library's own predict."""
    if kind == "lightgbm":
        import lightgbm

        booster = lightgbm.Booster(model_file=str(path))
        call = functools.partial(booster.predict, rows, num_threads=threads)
        return {(name, "lightgbm predict"): call}
    import xgboost

    booster = xgboost.Booster(model_file=str(path))
    booster.set_param({"nthread": threads})
    return {(name, "xgboost predict"): functools.partial(booster.inplace_predict, rows)}


def time_cells(cells: dict, min_repeats: int, seconds_per_cell: float) -> dict[tuple, list]:
    """Interleaved wall times of every cell: each round calls each once, in a rotating order."""
    names = list(cells)
    for call in cells.values():  # warm-up: first calls allocate and plan
        call()
        call()
    seconds: dict = {name: [] for name in names}
    started, rounds = time.perf_counter(), 0
    while rounds < min_repeats or (
        time.perf_counter() - started < seconds_per_cell * len(names) and rounds < 2000
    ):
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(measure.call_seconds(cells[name]))
        rounds += 1
    return seconds


def named_paths(parser, entries: list[str], option: str) -> list[tuple[str, Path]]:
    pairs = []
    for entry in entries:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            parser.error(f"{option} takes NAME=PATH, got {entry!r}")
        pairs.append((name, Path(path)))
    return pairs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for option, what in (
        ("--checkpoint", "a train.py checkpoint: PyTorch runtimes, Solr and RankLib"),
        ("--ensemble", "an ensemble.json: its served graph in the PyTorch runtimes"),
        ("--lightgbm", "a LightGBM text model (a tree student's model.txt): lightgbm predict"),
        ("--xgboost", "an XGBoost JSON model (a tree student's model.json): xgboost predict"),
    ):
        parser.add_argument(option, action="append", default=[], metavar="NAME=PATH", help=what)
    parser.add_argument("--reference", required=True, help="the row the × column divides by")
    parser.add_argument("--data", default=None, help="conf/data/ name whose test rows are scored")
    parser.add_argument("--fold", type=int, default=1)
    parser.add_argument("--documents", type=int, default=1000, help="documents per call")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-repeats", type=int, default=50)
    parser.add_argument("--cell-seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = test_rows(args.data, args.fold, args.documents)
    cells: dict[tuple, Callable] = {}
    notes: list[str] = []
    described: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, path in named_paths(parser, args.checkpoint, "--checkpoint"):
            scorer = load_ranker(path)
            described[name] = f"{type(scorer.ranker).__name__}, checkpoint {path}"
            own = {
                **torch_cells(name, scorer, rows, Path(scratch) / name),
                **engine_cells(name, scorer, rows, notes),
            }
            check_parity(name, own)
            cells.update(own)
        for name, path in named_paths(parser, args.ensemble, "--ensemble"):
            members = len(json.loads(path.read_text())["checkpoints"])
            described[name] = f"ensemble of {members} checkpoints, {path}"
            cells.update(torch_cells(name, ensemble_scorer(path), rows, Path(scratch) / name))
        for kind in ("lightgbm", "xgboost"):
            for name, path in named_paths(parser, getattr(args, kind), f"--{kind}"):
                described[name] = f"{kind} model {path}"
                cells.update(booster_cells(kind, name, path, rows, args.threads))
        references = [key for key in cells if key[0] == args.reference]
        if len(references) != 1:
            parser.error(f"--reference {args.reference!r} must name one row (a booster)")
        load_before = os.getloadavg()
        seconds = time_cells(cells, args.min_repeats, args.cell_seconds)
        load_after = os.getloadavg()
    command = shlex.join(
        ["python", "benchmarks/serving_cost.py", *(argv if argv is not None else sys.argv[1:])]
    )
    if args.data is not None and os.environ.get("LETOR_DIR"):
        command = f"LETOR_DIR={os.environ['LETOR_DIR']} {command}"
    text = report(seconds, references[0], described, notes, args, command, load_before, load_after)
    measure.publish(text, args.out)


def report(seconds, reference, described, notes, args, command, load_before, load_after) -> str:
    rows = f"the test rows of data={args.data} fold {args.fold}" if args.data else "random rows"
    medians = {key: float(np.median(values)) for key, values in seconds.items()}
    per_thousand = 1000 / args.documents
    lines = [
        "# Serving cost per 1,000 documents on CPU",
        "",
        f"Command: `{command}`",
        "",
        f"One call scores one list of {args.documents} documents ({rows}, raw feature values); "
        f"{args.threads} thread(s) for PyTorch, ONNX Runtime, LightGBM and XGBoost. Load average "
        f"(1, 5, 15 min) {', '.join(f'{v:.2f}' for v in load_before)} before and "
        f"{', '.join(f'{v:.2f}' for v in load_after)} after, on a machine shared with other "
        "jobs: the cells were timed interleaved, so compare the ratios rather than absolute "
        "times across runs. Solr and RankLib rows: the engine's formula in numpy on the file "
        "differank writes (benchmarks/engine_formulas.py), checked against eager PyTorch's "
        "scores before timing; not the engine itself (its feature extraction and JVM are "
        f"not timed). × {reference[0]}: the row's median over the reference's.",
        "",
        "Models: " + "; ".join(f"{name}: {what}" for name, what in described.items()) + ".",
        "",
        f"| model | scorer | median ms / 1,000 docs | p99 ms / 1,000 docs | n | × {reference[0]} |",
        "|---|---|---|---|---|---|",
    ]
    for (name, scorer), values in seconds.items():
        median = medians[(name, scorer)]
        lines.append(
            f"| {name} | {scorer} | {median * per_thousand * 1e3:.3f} | "
            f"{np.percentile(values, 99) * per_thousand * 1e3:.3f} | {len(values)} | "
            f"{median / medians[reference]:.2f} |"
        )
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
