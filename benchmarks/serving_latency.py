"""Latency of serving a query: the linear, MLP and transformer scorers (conf/model/'s default
sizes, F = 46, untrained weights: latency does not depend on their values) and any trained
checkpoints, in PyTorch eager, TorchScript and ONNX Runtime, for lists of 100 and 1,000
documents, one query per call and 64 padded to one batch.

Every cell of the table is measured interleaved with the others of its list length and batch:
each round times every (model, runtime) once, in an order that rotates, so drifting machine
load hits all of them alike; the ratios (to eager, and to ``--reference``) come from one run.
Wall time (``time.perf_counter``: latency is what a caller waits), one thread by default
(``--threads``, for PyTorch and ONNX Runtime alike), the load average printed beside the table.
p99 is the 99th percentile of the ``n`` timed calls (with fewer than 100 it is close to the
slowest); a cell takes at most ``--cell-seconds`` of calls after ``--min-repeats``.

    python benchmarks/serving_latency.py
    python benchmarks/serving_latency.py --checkpoint student_mlp=RUN/checkpoints/best.ckpt \\
        --checkpoint teacher=RUN2/checkpoints/best.ckpt --reference teacher
    python benchmarks/serving_latency.py --checkpoint student=RUN/checkpoints/best.ckpt \\
        --ensemble teacher=ENSEMBLE_DIR/ensemble.json --reference teacher
    python benchmarks/serving_latency.py --device cuda \\
        --out benchmarks/results/serving_latency_cuda.md

On ``--device cuda`` eager and TorchScript run on the GPU and ONNX Runtime with its CUDA
provider (``onnxruntime-gpu``), each call synchronised before and after.
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
from hydra.utils import instantiate
from omegaconf import OmegaConf

from differank.rankers.checkpoints import Scorer, load_ranker
from differank.rankers.run.ensemble import EnsembleRanker, load_member
from differank.rankers.run.export import export_onnx, export_torchscript

N_FEATURES = 46  # LETOR 4.0 (MQ2008)
DEFAULT_MODELS = ("linear", "mlp", "transformer")
RUNTIMES = ("eager", "torchscript", "onnxruntime")
RESULT = measure.ROOT / "benchmarks" / "results" / "serving_latency.md"


def default_scorer(model: str) -> Scorer:
    """conf/model/<model>.yaml's ranker at its default sizes behind a z-score of F features."""
    node = OmegaConf.load(measure.ROOT / "conf" / "model" / f"{model}.yaml").ranker
    torch.manual_seed(0)
    ranker = instantiate(node)(n_features=N_FEATURES)
    mean, std = torch.rand(N_FEATURES) * 0.5, 0.2 + torch.rand(N_FEATURES) * 0.3
    return Scorer(ranker, mean, std).eval()


def ensemble_scorer(path: Path) -> Scorer:
    """The served graph of an ``ensemble.json`` (its member checkpoints, weights and score
    mode), as the ensemble CLI's ``--export`` writes it."""
    record = json.loads(path.read_text())
    members = [load_member(checkpoint) for checkpoint in record["checkpoints"]]
    standardize = record.get("scores", "standardized") == "standardized"
    return Scorer(EnsembleRanker(members, record.get("weights"), standardize)).eval()


def runners(scorer: Scorer, folder: Path, device: str) -> dict[str, Callable]:
    """One ``run(features, mask)`` per runtime, each scoring with ``scorer``'s exported form."""
    import onnxruntime as ort

    scripted = torch.jit.load(str(export_torchscript(scorer, folder / "scorer.pt")))
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    providers = ["CUDAExecutionProvider"] if device.startswith("cuda") else []
    session = ort.InferenceSession(
        str(export_onnx(scorer, folder / "scorer.onnx")),
        options,
        providers=[*providers, "CPUExecutionProvider"],
    )
    scorer, scripted = scorer.to(device), scripted.to(device)
    uses_mask = scorer.uses_mask

    def torch_call(module):
        def run(features, mask):
            with torch.no_grad():
                return module(features, mask) if uses_mask else module(features)

        return run

    def onnx_call(features, mask):
        feeds = {"features": features.cpu().numpy()}
        if uses_mask:
            feeds["mask"] = mask.cpu().numpy()
        return session.run(["scores"], feeds)

    return {
        "eager": torch_call(scorer),
        "torchscript": torch_call(scripted),
        "onnxruntime": onnx_call,
    }


def batch(queries: int, documents: int, device: str):
    """``queries`` lists padded to ``documents``: the first full, the others shorter."""
    generator = torch.Generator().manual_seed(queries * documents)
    features = torch.rand(queries, documents, N_FEATURES, generator=generator)
    sizes = torch.tensor([documents - (documents * q) // (2 * queries) for q in range(queries)])
    mask = torch.arange(documents) < sizes[:, None]
    return features.to(device), mask.to(device)


def measure_cell(cells, queries, documents, device, min_repeats, cell_seconds):
    """Interleaved timings (seconds) of every (model, runtime) of ``cells`` on one batch."""
    features, mask = batch(queries, documents, device)
    names = list(cells)
    for run in cells.values():  # warm-up: first calls allocate and plan
        run(features, mask)
        run(features, mask)
    seconds: dict = {name: [] for name in names}
    started, rounds = time.perf_counter(), 0
    while rounds < min_repeats or (
        time.perf_counter() - started < cell_seconds * len(names) and rounds < 1000
    ):
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            call = functools.partial(cells[name], features, mask)
            seconds[name].append(measure.call_seconds(call, time.perf_counter, device))
        rounds += 1
    return seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a train.py checkpoint to add as a row (repeatable)",
    )
    parser.add_argument(
        "--ensemble",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="an ensemble.json of `python -m differank.rankers.run.ensemble` to add as a row: "
        "its members behind one graph, as its --export serves it (repeatable)",
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=list(DEFAULT_MODELS),
        help="default-size scorers of conf/model/ to include",
    )
    parser.add_argument(
        "--reference",
        default="transformer",
        help="the row each model's speed-up is measured against",
    )
    parser.add_argument("--documents", nargs="+", type=int, default=[100, 1000])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--threads", type=int, default=1, help="torch and ONNX Runtime threads")
    parser.add_argument("--min-repeats", type=int, default=20)
    parser.add_argument(
        "--cell-seconds",
        type=float,
        default=3.0,
        help="timing budget per (model, runtime) and batch after min-repeats",
    )
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scorers = {name: default_scorer(name) for name in args.models}
    for entry in args.checkpoint:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            parser.error(f"--checkpoint takes NAME=PATH, got {entry!r}")
        scorers[name] = load_ranker(path)
    for entry in args.ensemble:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            parser.error(f"--ensemble takes NAME=PATH, got {entry!r}")
        scorers[name] = ensemble_scorer(Path(path))
    if args.reference not in scorers:
        parser.error(f"--reference {args.reference!r} is not one of {sorted(scorers)}")
    load_before = os.getloadavg()
    results = {}  # (queries, documents) -> {(model, runtime): [seconds]}
    with tempfile.TemporaryDirectory() as scratch:
        cells = {}
        for name, scorer in scorers.items():
            folder = Path(scratch) / name
            for runtime, run in runners(scorer, folder, args.device).items():
                cells[(name, runtime)] = run
        for documents in args.documents:
            for queries in args.batches:
                print(f"timing {queries} x {documents} documents ...", file=sys.stderr, flush=True)
                results[(queries, documents)] = measure_cell(
                    cells, queries, documents, args.device, args.min_repeats, args.cell_seconds
                )
    load_after = os.getloadavg()
    command = "python benchmarks/serving_latency.py" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])
    )
    text = report(results, scorers, args, command, load_before, load_after)
    measure.publish(text, args.out, args.device)


def report(results, scorers, args, command, load_before, load_after) -> str:
    lines = [
        "# Serving latency per query",
        "",
        f"Command: `{command}`",
        "",
        f"Device: {args.device}, {args.threads} thread(s) for PyTorch and ONNX Runtime. Load "
        f"average (1, 5, 15 min) {', '.join(f'{v:.2f}' for v in load_before)} before and "
        f"{', '.join(f'{v:.2f}' for v in load_after)} after, on a machine shared with other "
        "jobs: compare the ratios (measured interleaved within this run) rather than the "
        "absolute times across runs.",
        "",
        "Per call: one batch of `batch` queries padded to `docs` documents (features and mask "
        "in, scores out). Per query: the call's median divided by the batch. "
        f"× eager: the runtime's median over eager's; × {args.reference}: the model's median "
        f"over {args.reference}'s in the same runtime.",
        "",
        "Models: "
        + "; ".join(
            f"{name}: {type(s.ranker).__name__}, {sum(p.numel() for p in s.parameters()):,} "
            "parameters"
            for name, s in scorers.items()
        )
        + " (default models: conf/model/ defaults, F = 46).",
        "",
        f"| model | runtime | docs | batch | median ms/call | p99 ms/call | n | µs/query | "
        f"× eager | × {args.reference} |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (queries, documents), seconds in results.items():
        medians = {key: float(np.median(values)) for key, values in seconds.items()}
        for (name, runtime), values in seconds.items():
            median = medians[(name, runtime)]
            lines.append(
                f"| {name} | {runtime} | {documents} | {queries} | {median * 1e3:.3f} | "
                f"{np.percentile(values, 99) * 1e3:.3f} | {len(values)} | "
                f"{median / queries * 1e6:.1f} | {median / medians[(name, 'eager')]:.2f} | "
                f"{median / medians[(args.reference, runtime)]:.3f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
